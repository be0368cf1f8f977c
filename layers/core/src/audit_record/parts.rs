//! The parts of an [`AuditRecord`](super::AuditRecord), each with its constructor from the
//! core type it records. A constructor that copies a reason takes the redaction to apply to
//! it (R33: every reason passes through the redactor).

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{cow, present};
use crate::{
    Check, Decision, DecisionNote, Delegation, Effect, NetworkScope, Principal, Refusal,
    ShadowNote, ToolIdentity, Verdict, WaitEnd,
};

/// The redaction a constructor applies to every reason it copies.
pub type Redact<'r> = &'r dyn Fn(&str) -> String;

/// One tool behind the name a call used: `{kind, source, name, network_declared,
/// network_effective}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct AuditIdentity<'a> {
    /// `http`, `mcp`, … ([`ToolKind`](crate::ToolKind)).
    #[serde(borrow)]
    pub kind: Cow<'a, str>,
    /// The source (an MCP server's id; empty for an HTTP tool).
    #[serde(borrow)]
    pub source: Cow<'a, str>,
    /// The tool's own name at its source.
    #[serde(borrow)]
    pub name: Cow<'a, str>,
    /// The network scope the tool declares.
    #[serde(borrow)]
    pub network_declared: Cow<'a, str>,
    /// The scope in effect (an operator's `network_override` over the declared one).
    #[serde(borrow)]
    pub network_effective: Cow<'a, str>,
}

impl AuditIdentity<'static> {
    /// The tool `identity`, declaring `declared` and in effect `effective`.
    pub fn of(identity: &ToolIdentity, declared: NetworkScope, effective: NetworkScope) -> Self {
        Self {
            kind: identity.kind().as_str().into(),
            source: identity.source().to_owned().into(),
            name: identity.name().to_owned().into(),
            network_declared: declared.as_str().into(),
            network_effective: effective.as_str().into(),
        }
    }
}

/// A verified principal (R47): `{subject, issuer}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct AuditPrincipal<'a> {
    /// The token's `sub`.
    #[serde(borrow)]
    pub subject: Cow<'a, str>,
    /// The token's `iss`.
    #[serde(borrow)]
    pub issuer: Cow<'a, str>,
}

impl AuditPrincipal<'static> {
    /// The principal `p`.
    pub fn of(p: &Principal) -> Self {
        Self {
            subject: p.subject.clone().into(),
            issuer: p.issuer.clone().into(),
        }
    }
}

/// An approver's edit of the input (approval-page.md, "Approve with edits"):
/// `{edited_by, original_input_hash, original_input}`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct AuditEdit<'a> {
    /// Who edited (the approver).
    #[serde(borrow)]
    pub edited_by: Cow<'a, str>,
    /// The RFC 8785 hash of the input as the agent sent it.
    #[serde(borrow)]
    pub original_input_hash: Cow<'a, str>,
    /// That input, redacted, when the record includes inputs; absent otherwise.
    #[serde(deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub original_input: Option<Value>,
}

impl AuditEdit<'static> {
    /// The edit `edit`, with its original input (already redacted) when the record includes
    /// inputs.
    pub fn of(edit: &crate::InputEdit, original_input: Option<Value>) -> Self {
        Self {
            edited_by: edit.edited_by.clone().into(),
            original_input_hash: edit.original_input_hash.clone().into(),
            original_input,
        }
    }
}

/// How the call was decided: `{outcome, check, refusal, rule, matched_rules, reasons, asks,
/// retry_after_secs, granted, labels}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct AuditDecision<'a> {
    /// `run`, `ask` or `refused` ([`Verdict::as_str`]).
    #[serde(borrow)]
    pub outcome: Cow<'a, str>,
    /// The check that decided ([`Check::as_str`]), or `null` when nothing checked the call.
    #[serde(borrow, deserialize_with = "cow::opt")]
    pub check: Option<Cow<'a, str>>,
    /// The refusal code of a refused call, or `null`.
    #[serde(borrow, deserialize_with = "cow::opt")]
    pub refusal: Option<Cow<'a, str>>,
    /// The tenant rule that denied the call, or `null`.
    pub rule: Option<usize>,
    /// Every tenant rule that matched.
    #[serde(borrow)]
    pub matched_rules: Vec<AuditMatchedRule<'a>>,
    /// Every reason, redacted.
    #[serde(borrow, deserialize_with = "cow::list")]
    pub reasons: Vec<Cow<'a, str>>,
    /// Every reason that asked, redacted.
    #[serde(borrow)]
    pub asks: Vec<AuditAsk<'a>>,
    /// When a `rate_limited` call could run again (R44), or `null`.
    pub retry_after_secs: Option<u64>,
    /// The grant that answered the call (R45), or `null`.
    #[serde(borrow)]
    pub granted: Option<AuditGrant<'a>>,
    /// The labels the decision read (R49); absent when it read none.
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub labels: Option<AuditLabels<'a>>,
}

impl AuditDecision<'static> {
    /// The decision `d` the gate recorded, its reasons redacted by `redact`.
    pub fn of(d: &Decision, redact: Redact<'_>) -> Self {
        // The deny rule of a tenant refusal.
        let rule = d
            .matched_rules
            .iter()
            .find(|m| d.decided_by == Check::TenantPolicy && m.effect == Effect::Deny)
            .map(|m| m.index);
        Self {
            outcome: d.verdict.as_str().into(),
            check: Some(d.decided_by.as_str().into()),
            refusal: d.refusal().map(|x| x.code.as_str().into()),
            rule,
            matched_rules: d
                .matched_rules
                .iter()
                .map(|m| AuditMatchedRule {
                    rule: m.index,
                    effect: m.effect.as_str().into(),
                })
                .collect(),
            reasons: redacted(&d.reasons, redact),
            asks: d
                .asks
                .iter()
                .map(|a| AuditAsk {
                    source: a.source.to_string().into(),
                    reason: redact(&a.reason).into(),
                })
                .collect(),
            retry_after_secs: d.retry_after_secs,
            granted: d.granted.as_ref().map(|g| AuditGrant {
                id: g.id.clone().into(),
                granted_by: g.granted_by.clone().into(),
            }),
            labels: d.labels.as_ref().map(|l| AuditLabels {
                tool: l.tool.iter().map(|s| s.to_owned().into()).collect(),
                session: l
                    .session
                    .as_ref()
                    .map(|s| s.iter().map(|s| s.to_owned().into()).collect()),
            }),
        }
    }

    /// A refusal no gate recorded (a filter answered before the gate), its reasons
    /// redacted by `redact`.
    pub fn refused(refusal: &Refusal, redact: Redact<'_>) -> Self {
        Self {
            outcome: Verdict::REFUSED.into(),
            check: Some(refusal.decided_by.as_str().into()),
            refusal: Some(refusal.code.as_str().into()),
            reasons: redacted(&refusal.reasons, redact),
            retry_after_secs: refusal.retry_after_secs,
            ..Self::default()
        }
    }

    /// A call that ran with no gate to decide it: `run`, every other field `null` or
    /// empty.
    pub fn ungated() -> Self {
        Self {
            outcome: Verdict::RUN.into(),
            ..Self::default()
        }
    }
}

fn redacted(reasons: &[String], redact: Redact<'_>) -> Vec<Cow<'static, str>> {
    reasons.iter().map(|r| redact(r).into()).collect()
}

/// A tenant rule that matched: `{rule, effect}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct AuditMatchedRule<'a> {
    /// The rule's index in the policy's `rules`.
    pub rule: usize,
    /// Its effect: `allow`, `ask` or `deny`.
    #[serde(borrow)]
    pub effect: Cow<'a, str>,
}

/// A reason that asked: `{source, reason}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct AuditAsk<'a> {
    /// Who asked, as [`AskSource`](crate::AskSource)'s `Display` spells it
    /// (`policy_rule:3`).
    #[serde(borrow)]
    pub source: Cow<'a, str>,
    /// Why, redacted.
    #[serde(borrow)]
    pub reason: Cow<'a, str>,
}

/// The grant that answered a call (R45): `{id, granted_by}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct AuditGrant<'a> {
    /// The grant's id.
    #[serde(borrow)]
    pub id: Cow<'a, str>,
    /// Who gave it.
    #[serde(borrow)]
    pub granted_by: Cow<'a, str>,
}

/// The labels a decision read (R49): `{tool, session}`, each sorted.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct AuditLabels<'a> {
    /// The tool's labels.
    #[serde(borrow, deserialize_with = "cow::list")]
    pub tool: Vec<Cow<'a, str>>,
    /// The session's, or `null` when the decision read none.
    #[serde(borrow, deserialize_with = "cow::opt_list")]
    pub session: Option<Vec<Cow<'a, str>>>,
}

/// The shadow policy's decision of the call (R46): `{outcome, check, refusal, rule,
/// reasons, disagrees}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct AuditShadow<'a> {
    /// `run`, `ask` or `refused`.
    #[serde(borrow)]
    pub outcome: Cow<'a, str>,
    /// The check that decided.
    #[serde(borrow)]
    pub check: Cow<'a, str>,
    /// The refusal code, or `null`.
    #[serde(borrow, deserialize_with = "cow::opt")]
    pub refusal: Option<Cow<'a, str>>,
    /// The tenant rule that decided ([`ShadowNote::rule`]), or `null`.
    pub rule: Option<usize>,
    /// Every reason, redacted.
    #[serde(borrow, deserialize_with = "cow::list")]
    pub reasons: Vec<Cow<'a, str>>,
    /// Whether it differs from the enforced decision (outcome or refusal code).
    pub disagrees: bool,
}

impl AuditShadow<'static> {
    /// The shadow's decision `shadow` beside the `enforced` one, its reasons redacted by
    /// `redact`.
    pub fn of(shadow: &ShadowNote, enforced: &Decision, redact: Redact<'_>) -> Self {
        let d = &shadow.decision;
        Self {
            outcome: d.verdict.as_str().into(),
            check: d.decided_by.as_str().into(),
            refusal: d.refusal().map(|x| x.code.as_str().into()),
            rule: shadow.rule(),
            reasons: redacted(&d.reasons, redact),
            disagrees: shadow.disagrees_with(enforced),
        }
    }
}

/// How the wait for a person ended: `{wait, approver, interaction_id, principal}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct AuditApproval<'a> {
    /// [`WaitEnd::as_str`]: `not_asked`, `approved`, `held`, …
    #[serde(borrow)]
    pub wait: Cow<'a, str>,
    /// Who approved or denied, or `null`.
    #[serde(borrow, deserialize_with = "cow::opt")]
    pub approver: Option<Cow<'a, str>>,
    /// The question's interaction id, or `null` when none was asked.
    #[serde(borrow, deserialize_with = "cow::opt")]
    pub interaction_id: Option<Cow<'a, str>>,
    /// The answering person's verified principal (R47); absent otherwise.
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub principal: Option<AuditPrincipal<'a>>,
}

impl AuditApproval<'static> {
    /// The gate's note of the wait, and who answered by their verified principal.
    pub fn of(note: &DecisionNote, answered_by: Option<&Principal>) -> Self {
        let approver = match &note.wait {
            WaitEnd::Approved { approver } | WaitEnd::Denied { approver } => {
                Some(approver.clone().into())
            }
            _ => None,
        };
        Self {
            wait: note.wait.as_str().into(),
            approver,
            interaction_id: note.interaction_id.clone().map(Into::into),
            principal: answered_by.map(AuditPrincipal::of),
        }
    }
}

/// Whom a call was sent upstream for (RFC 8693): `{server, subject, act, token_url}`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct AuditDelegation<'a> {
    /// The upstream server's id.
    #[serde(borrow)]
    pub server: Cow<'a, str>,
    /// The subject the exchanged token speaks for.
    #[serde(borrow)]
    pub subject: Cow<'a, str>,
    /// Its `act` chain ([`Delegation::act_chain`]), or `null`.
    pub act: Value,
    /// The token endpoint that issued it.
    #[serde(borrow)]
    pub token_url: Cow<'a, str>,
}

impl AuditDelegation<'static> {
    /// The delegation `d`.
    pub fn of(d: &Delegation) -> Self {
        Self {
            server: d.server.clone().into(),
            subject: d.subject.clone().into(),
            act: d.act_chain(),
            token_url: d.token_url.clone().into(),
        }
    }
}
