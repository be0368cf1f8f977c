//! The audit record (R33): one JSON object per call with the whole story, as the audit
//! layer writes it and as replay (`toolgate policy simulate`) and `toolgate audit verify`
//! read it — one type, [`AuditRecord`], for all of them. Records of other things than a
//! call (a gateway's tool listing, a content request) are [`AuditEvent`]s; a line of an
//! audit log is either, an [`AuditEntry`].
//!
//! # Record schema
//!
//! | field | meaning |
//! |---|---|
//! | `time` | when the call arrived (RFC 3339, UTC) |
//! | `call_id`, `tool` | the call's id and the name it was called by |
//! | `identities` | `[{kind, source, name, network_declared, network_effective}]` behind that name (empty for an unknown tool); the declared scope is kept beside the effective one an operator's `network_override` set ([`AuditIdentity`]) |
//! | `agent`, `subagent` | the profile and the subagent id (or `null`) |
//! | `session` | the session the call belongs to (R43), or `null` |
//! | `policy_updated_at` | the stored tenant policy's `updated_at` the call was decided under, or `null` (R46) |
//! | `principal` | `{subject, issuer}` of the caller's verified identity-provider token; absent for other callers ([`AuditPrincipal`]) |
//! | `input_hash` | RFC 8785 + SHA-256 of the input the decision was made on (R35), or `null` when the input has no canonical form |
//! | `input` | only when the configuration asks for it (the `audit` section, or the agent's own `agents[i].audit`), always redacted; `null` is an input of `null`, not a missing one |
//! | `edit` | `{edited_by, original_input_hash, original_input}` when an approver changed the input before approving it (`original_input` only with `input`); absent otherwise ([`AuditEdit`]) |
//! | `decision` | `{outcome: run/ask/refused, check, refusal, rule, matched_rules, reasons, asks: [{source, reason}], retry_after_secs, granted, labels}`: `retry_after_secs` for a `rate_limited` refusal (R44), `granted` `{id, granted_by}` for a call a grant answered (R45), each `null` otherwise; `labels` `{tool, session}` only when the decision read labels (R49) ([`AuditDecision`]) |
//! | `shadow` | only with a shadow policy (R46): `{outcome, check, refusal, rule, reasons, disagrees}`, the shadow's decision of the call beside the enforced one, and whether the two differ (outcome or refusal code); never enforced ([`AuditShadow`]) |
//! | `approval` | `{wait, approver, interaction_id}`, or `null` when no gate recorded the call (a filter refused it first): `wait` is `not_asked`, `auto_approved`, `approved`, `denied`, `expired`, `cancelled`, `unroutable`, `held` or `refused`; with `principal: {subject, issuer}` of the answering person when their answer came with a verified identity-provider token (R47) ([`AuditApproval`]) |
//! | `delegation` | `{server, subject, act, token_url}` when the call was sent upstream on behalf of its caller (RFC 8693 token exchange): the subject the exchanged token speaks for and its `act` chain (`{"sub": agent, "act": {…}}`, the current actor outermost; `null` when the token is no readable JWT); absent otherwise ([`AuditDelegation`]) |
//! | `outcome` | `completed`, `failed`, `refused`, `held` or `error` |
//! | `error` | why the call ended in `error` (the tool's service failed, or the caller cancelled it), redacted; absent otherwise |
//! | `duration_ms` | from arrival to outcome |
//! | `output` | only when the configuration asks for it, for a call that ran (`completed` or `failed`), always redacted |
//! | `seq`, `prev`, `hash` | position, the previous record's hash, this record's hash, added by a chaining sink (`toolgate::audit::JsonlFileSink`; `toolgate_engine::chain`) |
//!
//! Every reason and every content field is redacted before it is put in a record: the
//! constructors of the parts take the redaction to apply ([`AuditDecision::of`]).
//!
//! # Absent, `null` and order
//!
//! A field the schema says is absent when it does not apply (`principal`, `input`, `edit`,
//! `shadow`, `delegation`, `error`, `output`, `decision.labels`, `approval.principal`,
//! `edit.original_input`, and the chain's `seq`, `prev`, `hash` before a sink adds them) is
//! a [`None`] that is not written; every other optional field is written as `null`. The
//! chain hashes a record's canonical form (RFC 8785), in which key order does not count
//! but absent and `null` do; fields are declared in the order the audit layer has always
//! inserted them, so a `serde_json::Map` that keeps insertion order lists them as before.
//!
//! # Reading
//!
//! Strings are [`Cow`]s: a record read from a line borrows what it can from the line (the
//! replay of a long log reads every record). So a record is read from text it borrows
//! (`serde_json::from_str`, [`AuditEntry::parse`]), not from a reader or a `Value`: the
//! type is not `DeserializeOwned`. Reading is lenient, so that records already
//! on disk still parse: a field an older writer did not write yet takes its default (empty
//! text, `null`, an empty list); fields this version does not know are skipped. A record
//! read that way and written again carries those defaults, so only records written by
//! this version come back byte for byte — which is why the hash chain is verified on each
//! line's own bytes, never on a re-serialized record (`toolgate_engine::chain`).
//!
//! # Example
//!
//! ```
//! use toolgate_core::audit_record::{AuditApproval, AuditDecision, AuditEntry, AuditRecord};
//! use toolgate_core::{CallOutcome, Check, Decision, DecisionNote, Verdict, WaitEnd};
//!
//! let decision = Decision::new(Verdict::Run { auto_approved: false }, Check::Passed, vec![]);
//! let note = DecisionNote::new(decision, WaitEnd::NotAsked);
//! let mut record = AuditRecord::new("2030-01-01T00:00:00.000000Z", "call-1", "lookup", "support")
//!     .session(Some("s-1"))
//!     .input(serde_json::json!({"q": "order 7"}));
//! record.decision = AuditDecision::of(&note.decision, &|reason| reason.to_owned());
//! record.approval = Some(AuditApproval::of(&note, None));
//! record.outcome = CallOutcome::Completed.as_str().into();
//! record.duration_ms = 0.25;
//!
//! let line = serde_json::to_string(&record).unwrap();
//! assert!(line.starts_with(r#"{"time":"2030-01-01T00:00:00.000000Z","call_id":"call-1","tool":"lookup""#));
//! assert!(line.contains(r#""subagent":null"#), "an optional field is written as null");
//! assert!(!line.contains("principal"), "a field that does not apply is absent");
//!
//! let back: AuditRecord<'_> = serde_json::from_str(&line).unwrap();
//! assert_eq!(back, record);
//! assert_eq!(back.decision.outcome, "run");
//! assert!(matches!(AuditEntry::parse(&line).unwrap(), AuditEntry::Call(_)));
//! ```

mod event;
mod parts;
#[cfg(test)]
mod tests;

use std::borrow::Cow;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

pub use event::AuditEvent;
pub use parts::{
    AuditApproval, AuditAsk, AuditDecision, AuditDelegation, AuditEdit, AuditGrant, AuditIdentity,
    AuditLabels, AuditMatchedRule, AuditPrincipal, AuditShadow, Redact,
};

/// One call's audit record (R33; the schema: [the module](self)). Built by the audit layer
/// with [`AuditRecord::new`] and the parts' constructors, written as a JSON object
/// ([`AuditRecord::to_map`]); read back with `serde_json` (borrowing from the line where it
/// can) or, for a line that may be an event, [`AuditEntry::parse`].
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct AuditRecord<'a> {
    /// When the call arrived (RFC 3339, UTC).
    #[serde(borrow)]
    pub time: Cow<'a, str>,
    /// The call's id.
    #[serde(borrow)]
    pub call_id: Cow<'a, str>,
    /// The name the call used.
    #[serde(borrow)]
    pub tool: Cow<'a, str>,
    /// Every tool behind that name (empty for an unknown tool).
    #[serde(borrow)]
    pub identities: Vec<AuditIdentity<'a>>,
    /// The calling agent's profile.
    #[serde(borrow)]
    pub agent: Cow<'a, str>,
    /// The subagent id, or `null`.
    #[serde(borrow, deserialize_with = "cow::opt")]
    pub subagent: Option<Cow<'a, str>>,
    /// The session the call belongs to (R43), or `null`.
    #[serde(borrow, deserialize_with = "cow::opt")]
    pub session: Option<Cow<'a, str>>,
    /// The stored tenant policy's `updated_at` the call was decided under (R46), or `null`.
    #[serde(borrow, deserialize_with = "cow::opt")]
    pub policy_updated_at: Option<Cow<'a, str>>,
    /// The caller's verified principal (R47); absent for other callers.
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub principal: Option<AuditPrincipal<'a>>,
    /// The canonical hash of the input the decision was made on (R35), or `null`.
    #[serde(borrow, deserialize_with = "cow::opt")]
    pub input_hash: Option<Cow<'a, str>>,
    /// The redacted input, when the record includes it (`Some(Value::Null)` for an input
    /// of `null`); absent otherwise.
    #[serde(deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// The input before an approver edited it; absent when nobody did.
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub edit: Option<AuditEdit<'a>>,
    /// How the call was decided.
    #[serde(borrow)]
    pub decision: AuditDecision<'a>,
    /// The shadow policy's decision (R46); absent without a shadow policy.
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<AuditShadow<'a>>,
    /// How the wait for a person ended, or `null` when no gate recorded the call.
    #[serde(borrow)]
    pub approval: Option<AuditApproval<'a>>,
    /// Whom the call was sent upstream for (RFC 8693); absent otherwise.
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub delegation: Option<AuditDelegation<'a>>,
    /// `completed`, `failed`, `refused`, `held` or `error` ([`CallOutcome`](crate::CallOutcome)).
    #[serde(borrow)]
    pub outcome: Cow<'a, str>,
    /// Why the call ended in `error`, redacted; absent otherwise.
    #[serde(
        borrow,
        deserialize_with = "cow::opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub error: Option<Cow<'a, str>>,
    /// Milliseconds from arrival to outcome.
    pub duration_ms: f64,
    /// The redacted output of a call that ran, when the record includes it; absent
    /// otherwise.
    #[serde(deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// The record's position in its chain; absent until a chaining sink adds it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// The previous record's hash; absent until a chaining sink adds it.
    #[serde(
        borrow,
        deserialize_with = "cow::opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub prev: Option<Cow<'a, str>>,
    /// This record's hash; absent until a chaining sink adds it.
    #[serde(
        borrow,
        deserialize_with = "cow::opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub hash: Option<Cow<'a, str>>,
    /// An `event` field makes a line an [`AuditEvent`], never a call's record: reading one
    /// as an `AuditRecord` fails (see [`AuditEntry::parse`]).
    #[serde(rename = "event", skip_serializing)]
    not_an_event: NotAnEvent,
}

impl<'a> AuditRecord<'a> {
    /// The record of a call that arrived at `time` (RFC 3339), with id `call_id`, by the name
    /// `tool`, from `agent`'s profile. Every other field is empty, `null` or absent until it
    /// is set: the builders below, or the public fields.
    pub fn new(
        time: impl Into<Cow<'a, str>>,
        call_id: impl Into<Cow<'a, str>>,
        tool: impl Into<Cow<'a, str>>,
        agent: impl Into<Cow<'a, str>>,
    ) -> Self {
        Self {
            time: time.into(),
            call_id: call_id.into(),
            tool: tool.into(),
            agent: agent.into(),
            ..Self::default()
        }
    }

    /// With the tools behind the name.
    pub fn identities(mut self, identities: Vec<AuditIdentity<'a>>) -> Self {
        self.identities = identities;
        self
    }

    /// With the subagent id.
    pub fn subagent(mut self, subagent: Option<impl Into<Cow<'a, str>>>) -> Self {
        self.subagent = subagent.map(Into::into);
        self
    }

    /// With the session (R43).
    pub fn session(mut self, session: Option<impl Into<Cow<'a, str>>>) -> Self {
        self.session = session.map(Into::into);
        self
    }

    /// With the stored policy's `updated_at` (R46).
    pub fn policy_updated_at(mut self, updated_at: Option<impl Into<Cow<'a, str>>>) -> Self {
        self.policy_updated_at = updated_at.map(Into::into);
        self
    }

    /// With the caller's verified principal (R47).
    pub fn principal(mut self, principal: Option<AuditPrincipal<'a>>) -> Self {
        self.principal = principal;
        self
    }

    /// With the input's canonical hash (R35).
    pub fn input_hash(mut self, hash: Option<impl Into<Cow<'a, str>>>) -> Self {
        self.input_hash = hash.map(Into::into);
        self
    }

    /// With the (already redacted) input.
    pub fn input(mut self, input: Value) -> Self {
        self.input = Some(input);
        self
    }

    /// With an approver's edit of the input.
    pub fn edit(mut self, edit: Option<AuditEdit<'a>>) -> Self {
        self.edit = edit;
        self
    }

    /// The record as the JSON object an audit sink takes (`toolgate::audit::AuditSink`;
    /// fields in declaration order when `serde_json` keeps insertion order).
    pub fn to_map(&self) -> Result<Map<String, Value>, serde_json::Error> {
        match serde_json::to_value(self)? {
            Value::Object(m) => Ok(m),
            _ => Err(serde::ser::Error::custom(
                "an audit record is a JSON object",
            )),
        }
    }
}

/// A line of an audit log: a call's record or an event.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
#[non_exhaustive]
#[allow(
    clippy::large_enum_variant,
    reason = "nearly every line of a log is a call's record, read once and taken apart: boxing it would add an allocation per record"
)]
pub enum AuditEntry<'a> {
    /// A call's record.
    Call(AuditRecord<'a>),
    /// Something else the gateway recorded (it has an `event` field).
    Event(AuditEvent<'a>),
}

/// The message of the error an `event` field raises in an [`AuditRecord`].
const EVENT_FIELD: &str = "an audit record with an `event` field is an event, not a call";

impl<'a> AuditEntry<'a> {
    /// Reads one line: a record with an `event` field is an [`AuditEvent`], any other an
    /// [`AuditRecord`]. A call's record is read in one pass; an event's in two (events are
    /// rare).
    ///
    /// ```
    /// use toolgate_core::audit_record::AuditEntry;
    /// let line = r#"{"time": "2030-01-01T00:00:00Z", "event": "mcp_listing_failed", "server": "kb"}"#;
    /// let AuditEntry::Event(e) = AuditEntry::parse(line).unwrap() else { panic!() };
    /// assert_eq!((e.event.as_ref(), e.str("server")), ("mcp_listing_failed", Some("kb")));
    /// ```
    pub fn parse(line: &'a str) -> Result<Self, serde_json::Error> {
        match serde_json::from_str::<AuditRecord<'a>>(line) {
            Ok(record) => Ok(AuditEntry::Call(record)),
            Err(e) if e.to_string().starts_with(EVENT_FIELD) => {
                serde_json::from_str::<AuditEvent<'a>>(line).map(AuditEntry::Event)
            }
            Err(e) => Err(e),
        }
    }

    /// The entry's `hash`, when a chaining sink wrote it.
    pub fn hash(&self) -> Option<&str> {
        match self {
            AuditEntry::Call(record) => record.hash.as_deref(),
            AuditEntry::Event(event) => event.str("hash"),
        }
    }

    /// The entry as the JSON object a sink takes.
    pub fn to_map(&self) -> Result<Map<String, Value>, serde_json::Error> {
        match self {
            AuditEntry::Call(record) => record.to_map(),
            AuditEntry::Event(event) => Ok(event.clone().into_map()),
        }
    }
}

/// The `event` field of a call's record: there is none, and one found is an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct NotAnEvent;

impl<'de> Deserialize<'de> for NotAnEvent {
    fn deserialize<D: Deserializer<'de>>(_: D) -> Result<Self, D::Error> {
        Err(serde::de::Error::custom(EVENT_FIELD))
    }
}

/// A field that may be absent: present (whatever its value, `null` included) or not.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// Strings read borrowed from the line when they can be (no escapes in them): `serde`
/// borrows a `Cow<str>` field by itself, but not one inside an `Option` or a `Vec`.
mod cow {
    use std::borrow::Cow;
    use std::fmt;
    use std::marker::PhantomData;

    use serde::de::{Deserialize, Deserializer, Visitor};

    /// One string, borrowed where it can be.
    pub(super) struct Text<'a>(pub(super) Cow<'a, str>);

    struct TextVisitor<'a>(PhantomData<&'a ()>);

    impl<'de: 'a, 'a> Visitor<'de> for TextVisitor<'a> {
        type Value = Text<'a>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string")
        }

        fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<Text<'a>, E> {
            Ok(Text(Cow::Borrowed(v)))
        }

        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Text<'a>, E> {
            Ok(Text(Cow::Owned(v.to_owned())))
        }

        fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Text<'a>, E> {
            Ok(Text(Cow::Owned(v)))
        }
    }

    impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_str(TextVisitor(PhantomData))
        }
    }

    /// A string or `null`.
    pub(super) fn opt<'de: 'a, 'a, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Cow<'a, str>>, D::Error> {
        Option::<Text<'a>>::deserialize(d).map(|t| t.map(|t| t.0))
    }

    /// A list of strings.
    pub(super) fn list<'de: 'a, 'a, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Vec<Cow<'a, str>>, D::Error> {
        Vec::<Text<'a>>::deserialize(d).map(|v| v.into_iter().map(|t| t.0).collect())
    }

    /// A list of strings or `null`.
    pub(super) fn opt_list<'de: 'a, 'a, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Vec<Cow<'a, str>>>, D::Error> {
        Option::<Vec<Text<'a>>>::deserialize(d)
            .map(|v| v.map(|v| v.into_iter().map(|t| t.0).collect()))
    }
}
