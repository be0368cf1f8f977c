//! Answers to held calls: one person's approval of a call that needs several (R51), an
//! answer with its idempotency key and binding, a turn's state and an answer's receipt.

use super::*;

/// The most approvals one held call can gather (R51): five, the most an `ask` rule may
/// ask for ([`toolgate_engine::policy::MAX_APPROVALS`]).
pub const MAX_APPROVALS: u8 = toolgate_engine::policy::MAX_APPROVALS;

/// One person's approval of a call that needs several (R51): who gave it, by name and, for
/// an identity-provider token, by verified principal (R47), when, with which idempotency
/// key, and for which input and definition (R35).
///
/// Two approvals are **one person's** when they share the name or, both having one, the
/// principal (issuer and subject). So a person counts once whether they answer by token,
/// through the command line or as an identity-provider user, and two identity-provider
/// subjects shown under one name count once: when the two cannot be told apart, the
/// stricter reading wins.
///
/// ```
/// use toolgate_core::Principal;
/// use toolgate_inbox::{GivenApproval, Timestamp};
/// let p = Principal { subject: "u-1".into(), issuer: "https://idp.example".into() };
/// let a = GivenApproval::new("alice", Some(p.clone()), Timestamp::from_millis(1), "sha256:i", "sha256:d");
/// assert!(a.is_person("alice", None), "the same name");
/// assert!(a.is_person("alice@example", Some(&p)), "the same principal");
/// let other = Principal { subject: "u-2".into(), issuer: "https://idp.example".into() };
/// assert!(!a.is_person("bob", Some(&other)));
/// assert!(!a.is_person("bob", None));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GivenApproval {
    /// The approver's name.
    pub approver: String,
    /// Their verified principal (`sub`, `iss`), when they answered with an identity-provider
    /// token.
    pub principal: Option<Principal>,
    /// When the approval was recorded.
    pub at: Timestamp,
    /// The idempotency key it was given with.
    pub key: Option<String>,
    /// The hash of the input approved (R35).
    pub input_hash: String,
    /// The hash of the tool's definition approved (R35).
    pub definition_hash: String,
}

impl GivenApproval {
    /// An approval by `approver` (with `principal`) at `at` of the input and definition
    /// with these hashes, without an idempotency key.
    pub fn new(
        approver: impl Into<String>,
        principal: Option<Principal>,
        at: Timestamp,
        input_hash: &str,
        definition_hash: &str,
    ) -> Self {
        Self {
            approver: approver.into(),
            principal,
            at,
            key: None,
            input_hash: input_hash.to_owned(),
            definition_hash: definition_hash.to_owned(),
        }
    }

    /// Whether `approver` (with `principal`) is the person who gave this approval: the same
    /// name, or the same verified principal (see [`GivenApproval`]).
    pub fn is_person(&self, approver: &str, principal: Option<&Principal>) -> bool {
        self.approver == approver
            || matches!((&self.principal, principal), (Some(a), Some(b)) if a == b)
    }

    /// As stored (one element of the held call's approvals, JSON).
    pub fn to_json(&self) -> Value {
        let mut o = serde_json::Map::new();
        o.insert("approver".into(), Value::from(self.approver.clone()));
        if let Some(p) = &self.principal {
            o.insert("subject".into(), Value::from(p.subject.clone()));
            o.insert("issuer".into(), Value::from(p.issuer.clone()));
        }
        o.insert("at".into(), Value::from(self.at.as_millis()));
        if let Some(k) = &self.key {
            o.insert("key".into(), Value::from(k.clone()));
        }
        o.insert("inputHash".into(), Value::from(self.input_hash.clone()));
        o.insert(
            "definitionHash".into(),
            Value::from(self.definition_hash.clone()),
        );
        Value::Object(o)
    }

    /// One approval as [`GivenApproval::to_json`] stored it, or why it cannot be read.
    pub fn from_json(v: &Value) -> Result<Self, RecordError> {
        let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
        let need = |field: &'static str| text(field).ok_or(RecordError::ApprovalField { field });
        let principal = match (text("subject"), text("issuer")) {
            (Some(subject), Some(issuer)) => Some(Principal { subject, issuer }),
            (None, None) => None,
            _ => return Err(RecordError::HalfPrincipal),
        };
        Ok(Self {
            approver: need("approver")?,
            principal,
            at: Timestamp::from_millis(
                v.get("at")
                    .and_then(Value::as_i64)
                    .ok_or(RecordError::ApprovalField { field: "at" })?,
            ),
            key: text("key"),
            input_hash: need("inputHash")?,
            definition_hash: need("definitionHash")?,
        })
    }

    /// The approvals of one held call as stored (a JSON array), `None` for none.
    pub fn list_to_text(list: &[GivenApproval]) -> Option<String> {
        if list.is_empty() {
            return None;
        }
        Some(Value::Array(list.iter().map(GivenApproval::to_json).collect()).to_string())
    }

    /// The approvals of one held call from their stored text (`None`: none), or why they
    /// cannot be read (the record is then unreadable: never guessed at).
    pub fn list_from_text(text: Option<&str>) -> Result<Vec<GivenApproval>, RecordError> {
        let Some(text) = text else {
            return Ok(Vec::new());
        };
        match crate::codec::parse_json(text)? {
            Value::Array(items) => items.iter().map(GivenApproval::from_json).collect(),
            _ => Err(RecordError::ApprovalsNotList),
        }
    }
}

/// The longest reason an answer may carry, in characters (Unicode scalar values): 2,000.
/// A longer one is refused, naming the field, by every store ([`Answer::validate`]), the
/// approval page (400) and `toolgate inbox deny --reason` (a usage error). Not
/// configurable: a reason is a sentence for the agent and the record, not a document.
pub const MAX_REASON_CHARS: usize = 2000;

/// A person's answer to one held call (R26, R43).
///
/// An idempotency key is optional (seed 002): without one, each answer is its own (a second
/// answer to a decided call is refused as already decided); with one, the same key retried is
/// one answer, and the same key with the other answer is a conflict.
///
/// ```
/// use toolgate_inbox::Answer;
/// let once = Answer::approved_by("alice");
/// assert_eq!(once.idempotency_key, None);
/// let keyed = Answer::approve("ticket-42", "alice");
/// assert_eq!(keyed.idempotency_key.as_deref(), Some("ticket-42"));
/// assert_eq!(Answer::denied_by("bob", None).key("k").idempotency_key.as_deref(), Some("k"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// Approve (`true`) or deny (`false`).
    pub approve: bool,
    /// The answer's idempotency key: the same key twice is one answer. `None`: the answer
    /// is its own.
    pub idempotency_key: Option<String>,
    /// Who answers.
    pub approver: String,
    /// Why (kept with a denial).
    pub reason: Option<String>,
    /// The answering person's verified principal (`sub`, `iss`), when they signed in with
    /// an identity-provider token (R47): kept with the answer and shown beside the name.
    pub principal: Option<Principal>,
    /// What the person was shown (R35): an approval bound to an input or a definition the
    /// held call does not hold is refused by the store, in the transaction that would record
    /// it ([`AnswerError::NotAsShown`](crate::AnswerError::NotAsShown)). `None`: the call as
    /// held.
    pub binding: Option<AnswerBinding>,
}

/// The input and definition an approval answers (R35): the hashes the surface showed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnswerBinding {
    /// The input's hash as shown.
    pub input_hash: String,
    /// The tool's definition hash as shown.
    pub definition_hash: String,
}

impl AnswerBinding {
    /// What `record` shows: its input and definition hashes.
    pub fn of(record: &HeldRecord) -> Self {
        Self {
            input_hash: record.call.input_hash.clone(),
            definition_hash: record.call.definition_hash.clone(),
        }
    }

    /// Whether a held call with these hashes is what was shown.
    pub fn matches(&self, input_hash: &str, definition_hash: &str) -> bool {
        self.input_hash == input_hash && self.definition_hash == definition_hash
    }
}

impl Answer {
    /// An approval with an idempotency key.
    pub fn approve(idempotency_key: impl Into<String>, approver: impl Into<String>) -> Self {
        Self::approved_by(approver).key(idempotency_key)
    }

    /// A denial with an idempotency key, and an optional reason.
    pub fn deny(
        idempotency_key: impl Into<String>,
        approver: impl Into<String>,
        reason: Option<String>,
    ) -> Self {
        Self::denied_by(approver, reason).key(idempotency_key)
    }

    /// An approval without an idempotency key.
    pub fn approved_by(approver: impl Into<String>) -> Self {
        Self {
            approve: true,
            idempotency_key: None,
            approver: approver.into(),
            reason: None,
            principal: None,
            binding: None,
        }
    }

    /// A denial without an idempotency key.
    pub fn denied_by(approver: impl Into<String>, reason: Option<String>) -> Self {
        Self {
            approve: false,
            idempotency_key: None,
            approver: approver.into(),
            reason,
            principal: None,
            binding: None,
        }
    }

    /// Sets the idempotency key.
    #[must_use]
    pub fn key(mut self, idempotency_key: impl Into<String>) -> Self {
        self.idempotency_key = Some(idempotency_key.into());
        self
    }

    /// Sets the answering person's verified principal (R47).
    ///
    /// ```
    /// use toolgate_inbox::Answer;
    /// use toolgate_core::Principal;
    /// let p = Principal { subject: "u-7".into(), issuer: "https://idp.example".into() };
    /// let a = Answer::approved_by("alice").principal(Some(p.clone()));
    /// assert_eq!(a.principal, Some(p));
    /// assert!(a.validate().is_ok());
    /// ```
    #[must_use]
    pub fn principal(mut self, principal: Option<Principal>) -> Self {
        self.principal = principal;
        self
    }

    /// Binds the answer to what the person was shown (R35): the store refuses an approval
    /// of a held call whose input or definition hash is not these.
    ///
    /// ```
    /// use toolgate_inbox::Answer;
    /// let a = Answer::approved_by("alice").bound("sha256:i", "sha256:d");
    /// assert_eq!(a.binding.unwrap().input_hash, "sha256:i");
    /// ```
    #[must_use]
    pub fn bound(
        mut self,
        input_hash: impl Into<String>,
        definition_hash: impl Into<String>,
    ) -> Self {
        self.binding = Some(AnswerBinding {
            input_hash: input_hash.into(),
            definition_hash: definition_hash.into(),
        });
        self
    }

    /// Checks the answer before any store sees it: a key, when given, is not blank, the
    /// approver is named, the reason is at most [`MAX_REASON_CHARS`] characters, and no
    /// text contains a NUL character (PostgreSQL cannot store one, so no backend accepts
    /// one: an answer means the same whichever store keeps it).
    ///
    /// ```
    /// use toolgate_inbox::{Answer, MAX_REASON_CHARS};
    /// let long = "x".repeat(MAX_REASON_CHARS + 1);
    /// let e = Answer::denied_by("bob", Some(long)).validate().unwrap_err().to_string();
    /// assert!(e.starts_with("`reason` is 2001 characters long"), "{e}");
    /// assert!(Answer::denied_by("bob", Some("x".repeat(MAX_REASON_CHARS))).validate().is_ok());
    /// ```
    pub fn validate(&self) -> Result<(), InvalidAnswer> {
        if let Some(chars) = self
            .reason
            .as_deref()
            .map(|r| r.chars().count())
            .filter(|&n| n > MAX_REASON_CHARS)
        {
            return Err(InvalidAnswer::ReasonTooLong { chars });
        }
        if self
            .idempotency_key
            .as_deref()
            .is_some_and(|k| k.trim().is_empty())
        {
            return Err(InvalidAnswer::EmptyKey);
        }
        if self.approver.trim().is_empty() {
            return Err(InvalidAnswer::NoApprover);
        }
        let texts = [
            self.idempotency_key.as_deref(),
            Some(self.approver.as_str()),
            self.reason.as_deref(),
            self.principal.as_ref().map(|p| p.subject.as_str()),
            self.principal.as_ref().map(|p| p.issuer.as_str()),
        ];
        if texts.iter().flatten().any(|t| t.contains('\0')) {
            return Err(InvalidAnswer::Nul);
        }
        Ok(())
    }
}

/// Why an answer is refused before any store sees it ([`Answer::validate`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidAnswer {
    /// The reason is longer than [`MAX_REASON_CHARS`].
    #[error("`reason` is {chars} characters long; at most {MAX_REASON_CHARS} are kept")]
    ReasonTooLong {
        /// Its length, in characters.
        chars: usize,
    },
    /// An idempotency key given blank.
    #[error("an idempotency key, when given, must not be empty")]
    EmptyKey,
    /// No approver named.
    #[error("an answer needs the approver's name")]
    NoApprover,
    /// A text with a NUL character.
    #[error("an answer's key, name, reason and principal cannot contain a NUL character")]
    Nul,
}

/// Where a turn is (R43): paused while any call held in it is unanswered; it can go on only
/// when every one is answered.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnState {
    /// Every call held in the turn, oldest first.
    pub held: Vec<HeldRecord>,
}

impl TurnState {
    /// The state of a turn whose held calls are `held` (oldest first).
    pub fn new(held: Vec<HeldRecord>) -> Self {
        Self { held }
    }

    /// The held calls nobody has answered yet: the ones pausing the turn.
    pub fn pausing(&self) -> Vec<&HeldRecord> {
        self.held
            .iter()
            .filter(|r| r.state == State::Pending)
            .collect()
    }

    /// Whether the turn is paused (any held call is unanswered).
    pub fn is_paused(&self) -> bool {
        self.held.iter().any(|r| r.state == State::Pending)
    }

    /// Whether the turn can go on: it held calls and every one is answered (approved,
    /// denied, expired or cancelled, or already sent).
    pub fn can_go_on(&self) -> bool {
        !self.is_paused()
    }
}

/// What the store recorded for an answer. Repeating the answer with the same key returns the
/// same receipt (with `replayed` set).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnswerReceipt {
    /// The held call.
    pub interaction_id: String,
    /// Whether it was approved.
    pub approved: bool,
    /// Who answered first with this key.
    pub approver: String,
    /// The denial's reason, if any.
    pub reason: Option<String>,
    /// When the answer was recorded.
    pub answered_at: Timestamp,
    /// Whether this was a repeat of an answer already recorded with the same key.
    pub replayed: bool,
    /// How many distinct people have approved the call, this answer included (R51): for a
    /// call that needs one, 1 once approved and 0 when denied.
    pub approvals: u8,
    /// How many it needs (1 for most calls).
    pub approvals_needed: u8,
    /// Whether this person had already approved the call, so this approval changed
    /// nothing (R51: one person's approvals count once).
    pub already_approved: bool,
}

impl AnswerReceipt {
    /// How many more people must approve before the call is approved (R51): 0 once it is,
    /// and for a denial.
    pub fn waiting_for(&self) -> u8 {
        if self.approved {
            self.approvals_needed.saturating_sub(self.approvals)
        } else {
            0
        }
    }

    /// What the approver is told about a call that needs several approvals (R51), `None`
    /// for a call that needs one: `"recorded: 1 of 2 approvals; it waits for one more
    /// person"`, `"alice had already approved it: still 1 of 2 approvals (one person's
    /// approvals count once); it waits for one more person"`, `"recorded: 2 of 2 approvals;
    /// the call is approved"`.
    ///
    /// ```
    /// use toolgate_inbox::{AnswerReceipt, Timestamp};
    /// let r = AnswerReceipt { interaction_id: "ia_1".into(), approved: true, approver: "alice".into(),
    ///     reason: None, answered_at: Timestamp::from_millis(1), replayed: false,
    ///     approvals: 1, approvals_needed: 2, already_approved: false };
    /// assert_eq!(r.progress().unwrap(), "recorded: 1 of 2 approvals; it waits for one more person");
    /// assert_eq!(r.waiting_for(), 1);
    /// ```
    pub fn progress(&self) -> Option<String> {
        if self.approvals_needed <= 1 {
            return None;
        }
        let count = format!("{} of {} approvals", self.approvals, self.approvals_needed);
        if !self.approved {
            return Some(format!("denied after {count}; the call will not be sent"));
        }
        let then = match self.waiting_for() {
            0 => String::from("the call is approved"),
            n => waits_for(n),
        };
        if self.already_approved {
            Some(format!(
                "{} had already approved it: still {count} (one person's approvals count once); {then}",
                self.approver
            ))
        } else {
            Some(format!("recorded: {count}; {then}"))
        }
    }
}
