//! A request-scoped sink through which inner layers tell outer ones (audit, spans) how a
//! call was decided and how any wait for a person ended.

use std::sync::{Arc, Mutex};

use crate::decision::Decision;

/// How a wait for a person ended, or why there was none (R26, R33).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitEnd {
    /// Nothing asked: the call ran without a question.
    NotAsked,
    /// The run mode approved an agent-level ask (`auto_approve_required`, R25).
    AutoApproved,
    /// A person approved.
    Approved {
        /// Who.
        approver: String,
    },
    /// A person denied.
    Denied {
        /// Who.
        approver: String,
    },
    /// Nobody answered in time (not a person's denial).
    Expired,
    /// The wait was cancelled.
    Cancelled,
    /// The channel could not route the question.
    Unroutable,
    /// The call is held in a durable inbox.
    Held,
    /// The call was refused before any question (by a check, a rule or routing).
    Refused,
}

impl WaitEnd {
    /// A short name for records: `not_asked`, `auto_approved`, `approved`, …
    pub fn as_str(&self) -> &'static str {
        match self {
            WaitEnd::NotAsked => "not_asked",
            WaitEnd::AutoApproved => "auto_approved",
            WaitEnd::Approved { .. } => "approved",
            WaitEnd::Denied { .. } => "denied",
            WaitEnd::Expired => "expired",
            WaitEnd::Cancelled => "cancelled",
            WaitEnd::Unroutable => "unroutable",
            WaitEnd::Held => "held",
            WaitEnd::Refused => "refused",
        }
    }
}

/// What the approval gate recorded about one call.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DecisionNote {
    /// The engine's decision (with the hook's ask, if any).
    pub decision: Decision,
    /// How the wait ended.
    pub wait: WaitEnd,
    /// The interaction id of the question, when one was asked.
    pub interaction_id: Option<String>,
    /// The canonical hash of the input the decision was made on (R35).
    pub input_hash: Option<String>,
}

impl DecisionNote {
    /// The gate's note of `decision`, its wait ended as `wait`; no question asked (set
    /// `interaction_id`) and no input hash (set `input_hash`).
    pub fn new(decision: Decision, wait: WaitEnd) -> Self {
        Self {
            decision,
            wait,
            interaction_id: None,
            input_hash: None,
        }
    }
}

/// Put a `DecisionSink` in a call's extensions before sending it inward; after the
/// response, [`DecisionSink::take`] returns what the gate recorded. Cheap to clone.
///
/// ```
/// use toolgate_core::{DecisionSink, Decision, Refusal, RefusalCode, Check, DecisionNote, WaitEnd};
/// let sink = DecisionSink::default();
/// sink.record(DecisionNote::new(
///     Decision::refused(Refusal::new(RefusalCode::Denied, Check::TenantPolicy, "no")),
///     WaitEnd::Refused,
/// ));
/// assert_eq!(sink.take().unwrap().wait, WaitEnd::Refused);
/// assert!(sink.take().is_none());
/// ```
#[derive(Debug, Clone, Default)]
pub struct DecisionSink(Arc<Mutex<Slot>>);

/// What a sink holds: the enforced decision's note, the shadow policy's decision (R46) and
/// the verified principal of the person who answered (R47).
#[derive(Debug, Default)]
struct Slot {
    note: Option<DecisionNote>,
    shadow: Option<ShadowNote>,
    answered_by: Option<Principal>,
    delegation: Option<Delegation>,
}

/// Whom a call was sent upstream for, when its server takes calls on behalf of the caller:
/// the MCP tool service exchanged the caller's verified token (RFC 8693) for one of the
/// server's own and records what the issued token says. Audit records and spans show it.
///
/// ```
/// use toolgate_core::Delegation;
/// let d = Delegation::new("crm", "alice", vec!["support-bot".into()], "https://idp.example/token");
/// assert_eq!(d.act_chain(), serde_json::json!({"sub": "support-bot"}));
/// assert_eq!(d.to_string(), "alice, by support-bot");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Delegation {
    /// The upstream server's id.
    pub server: String,
    /// The subject the issued token speaks for (its `sub`; the caller's when the token is not
    /// a readable JWT).
    pub subject: String,
    /// The issued token's `act` chain (RFC 8693 §4.1), the current actor first: the calling
    /// agent, then whoever acted before it. Empty when the token is not a readable JWT or
    /// names no actor.
    pub actors: Vec<String>,
    /// The token endpoint that issued it.
    pub token_url: String,
}

impl Delegation {
    /// Calls to `server` were sent for `subject`, by `actors` (the current actor first), with
    /// a token issued at `token_url`.
    pub fn new(
        server: impl Into<String>,
        subject: impl Into<String>,
        actors: Vec<String>,
        token_url: impl Into<String>,
    ) -> Self {
        Self {
            server: server.into(),
            subject: subject.into(),
            actors,
            token_url: token_url.into(),
        }
    }

    /// The actors as RFC 8693 nests them (`{"sub": A, "act": {"sub": B}}`), or `null`.
    pub fn act_chain(&self) -> serde_json::Value {
        self.actors
            .iter()
            .rev()
            .fold(serde_json::Value::Null, |inner, sub| {
                let mut o = serde_json::Map::new();
                o.insert("sub".into(), serde_json::Value::from(sub.as_str()));
                if !inner.is_null() {
                    o.insert("act".into(), inner);
                }
                serde_json::Value::Object(o)
            })
    }
}

impl std::fmt::Display for Delegation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.subject)?;
        if !self.actors.is_empty() {
            write!(f, ", by {}", self.actors.join(", for "))?;
        }
        Ok(())
    }
}

/// A verified principal: the `sub` and `iss` of an identity-provider token (R47).
/// Records name it next to the agent or approver it was mapped to; a caller or approver
/// known only by a static token or a proxy's header has none.
///
/// ```
/// use toolgate_core::Principal;
/// let p = Principal { subject: "u-1".into(), issuer: "https://idp.example".into() };
/// assert_eq!(p.to_string(), "u-1 (https://idp.example)");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Principal {
    /// The token's `sub`.
    pub subject: String,
    /// The token's `iss`.
    pub issuer: String,
}

impl std::fmt::Display for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.subject, self.issuer)
    }
}

/// The shadow tenant policy's decision of a call (R46), recorded by the approval gate beside
/// the enforced [`DecisionNote`]: never enforced, only recorded (audit, span, metric).
///
/// ```
/// use toolgate_core::{Check, Decision, Refusal, RefusalCode, ShadowNote, Verdict};
/// let enforced = Decision::new(Verdict::Run { auto_approved: false }, Check::Passed, vec![]);
/// let shadow = ShadowNote::new(Decision::refused(Refusal::new(RefusalCode::Denied, Check::TenantPolicy, "no")));
/// assert!(shadow.disagrees_with(&enforced));
/// assert_eq!(shadow.kind(&enforced), "run->refused");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShadowNote {
    /// The decision under the shadow policy (with the hook's ask, if any).
    pub decision: Decision,
}

impl ShadowNote {
    /// The shadow policy's decision of a call.
    pub fn new(decision: Decision) -> Self {
        Self { decision }
    }

    /// Whether the shadow decided otherwise than `enforced`: another outcome (run, ask,
    /// refused) or another refusal code.
    pub fn disagrees_with(&self, enforced: &Decision) -> bool {
        self.decision.verdict.as_str() != enforced.verdict.as_str()
            || self.decision.refusal().map(|r| r.code) != enforced.refusal().map(|r| r.code)
    }

    /// The enforced decision a call's record states, to compare the shadow's with: the
    /// gate's note, else the refusal a layer answered with, else a call that ran.
    pub fn enforced(
        note: Option<&DecisionNote>,
        response: Option<&crate::ToolResponse>,
    ) -> Decision {
        match (note, response.and_then(crate::ToolResponse::refusal)) {
            (Some(n), _) => n.decision.clone(),
            (None, Some(refusal)) => Decision::refused(refusal.clone()),
            (None, None) => Decision {
                verdict: crate::Verdict::Run {
                    auto_approved: false,
                },
                decided_by: crate::Check::Passed,
                reasons: Vec::new(),
                asks: Vec::new(),
                matched_rules: Vec::new(),
                granted: None,
                retry_after_secs: None,
                approvals: 1,
                labels: None,
            },
        }
    }

    /// The kind of a disagreement: `enforced->shadow` outcomes (`run->refused`).
    pub fn kind(&self, enforced: &Decision) -> String {
        format!(
            "{}->{}",
            enforced.verdict.as_str(),
            self.decision.verdict.as_str()
        )
    }

    /// The tenant rule that decided the shadow's outcome: the deny rule of a tenant
    /// refusal, else the first matched rule whose effect is the outcome (`ask` for an ask,
    /// `allow` for a run); `None` when no rule decided (a default, a check, no rule).
    pub fn rule(&self) -> Option<usize> {
        let d = &self.decision;
        let effect = match d.verdict {
            crate::Verdict::Refused(_) if d.decided_by == crate::Check::TenantPolicy => {
                crate::Effect::Deny
            }
            crate::Verdict::Refused(_) => return None,
            crate::Verdict::Ask { .. } => crate::Effect::Ask,
            crate::Verdict::Run { .. } => crate::Effect::Allow,
        };
        d.matched_rules
            .iter()
            .find(|m| m.effect == effect)
            .map(|m| m.index)
    }
}

impl DecisionSink {
    /// Records a note, replacing any earlier one.
    pub fn record(&self, note: DecisionNote) {
        if let Ok(mut slot) = self.0.lock() {
            slot.note = Some(note);
        }
    }

    /// Updates the recorded note in place, if there is one.
    pub fn update(&self, f: impl FnOnce(&mut DecisionNote)) {
        if let Ok(mut slot) = self.0.lock()
            && let Some(note) = slot.note.as_mut()
        {
            f(note);
        }
    }

    /// A copy of the note, leaving it for other readers (the span and audit layers both
    /// read it).
    pub fn get(&self) -> Option<DecisionNote> {
        self.0.lock().ok().and_then(|slot| slot.note.clone())
    }

    /// Takes the note.
    pub fn take(&self) -> Option<DecisionNote> {
        self.0.lock().ok().and_then(|mut slot| slot.note.take())
    }

    /// Records the shadow policy's decision (R46), replacing any earlier one.
    pub fn record_shadow(&self, shadow: ShadowNote) {
        if let Ok(mut slot) = self.0.lock() {
            slot.shadow = Some(shadow);
        }
    }

    /// A copy of the shadow policy's decision, when one was recorded (R46).
    pub fn shadow(&self) -> Option<ShadowNote> {
        self.0.lock().ok().and_then(|slot| slot.shadow.clone())
    }

    /// Records the verified principal of the person whose answer decided the call (R47):
    /// the approval gate records it when the channel knew one.
    ///
    /// ```
    /// use toolgate_core::{DecisionSink, Principal};
    /// let sink = DecisionSink::default();
    /// assert_eq!(sink.answered_by(), None);
    /// let p = Principal { subject: "u-1".into(), issuer: "https://idp.example".into() };
    /// sink.record_answered_by(p.clone());
    /// assert_eq!(sink.answered_by(), Some(p));
    /// ```
    pub fn record_answered_by(&self, principal: Principal) {
        if let Ok(mut slot) = self.0.lock() {
            slot.answered_by = Some(principal);
        }
    }

    /// A copy of the answering person's verified principal, when one was recorded.
    pub fn answered_by(&self) -> Option<Principal> {
        self.0.lock().ok().and_then(|slot| slot.answered_by.clone())
    }

    /// Records whom the call was sent upstream for (see [`Delegation`]).
    pub fn record_delegation(&self, delegation: Delegation) {
        if let Ok(mut slot) = self.0.lock() {
            slot.delegation = Some(delegation);
        }
    }

    /// A copy of the recorded delegation, when the call was sent on behalf of its caller.
    pub fn delegation(&self) -> Option<Delegation> {
        self.0.lock().ok().and_then(|slot| slot.delegation.clone())
    }
}
