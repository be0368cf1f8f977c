//! Grants kept in the inbox (R45): a person's answer given in advance, stored beside the held
//! calls so that every process sharing the inbox — `toolgate mcp serve`, the page, the CLI —
//! sees the same grants, spends their uses together and sees a revocation at once.
//!
//! A stored grant is the engine's [`Grant`] with what happened to it: how many sends it
//! answered (and when the last was), and who revoked it and when. Its [`GrantState`] at a
//! time is one of `live`, `expired`, `spent` or `revoked`, told apart: a grant that expired
//! is never one that was revoked, and only a live grant can be revoked.
//!
//! [`InboxGrants`] is the engine's [`GrantStore`] on any [`InboxStore`]: the stack's ledger
//! reads live grants and counts uses through it (see `GovernanceHandle::set_grants`).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use toolgate_engine::grant::{parse_grants, GrantStore};
//! use toolgate_inbox::{GrantState, InboxGrants, SqliteInbox, SqliteOptions, Timestamp};
//! use toolgate_inbox::prelude::*;
//! let dir = tempfile::tempdir().unwrap();
//! let inbox = SqliteInbox::open(dir.path().join("inbox.db"), SqliteOptions::default()).unwrap();
//! let g = parse_grants(r#"[{"id": "g-1", "agent": "support", "tool": "refund_order",
//!     "expires_at": 60000, "max_calls": 1, "granted_by": "alice", "reason": "backlog"}]"#).unwrap();
//! inbox.add_grant(&g[0], Timestamp::from_millis(0)).await.unwrap();
//!
//! let grants = InboxGrants::start(std::sync::Arc::new(inbox.clone())).unwrap();
//! assert_eq!(grants.first_live(1_000, &mut |_| true).unwrap().unwrap().id, "g-1");
//! assert!(grants.record_use("g-1", 1_000).unwrap());
//! assert!(!grants.record_use("g-1", 2_000).unwrap(), "one send, then spent");
//!
//! let stored = inbox.grants().await.unwrap();
//! assert_eq!(stored[0].state(Timestamp::from_millis(2_000)), GrantState::Spent);
//! # }
//! ```

use std::fmt;
use std::time::Duration;

use serde_json::{Map, Value, json};
use toolgate_engine::grant::{Grant, parse_grants};
use toolgate_engine::quota::Millis;

use crate::error::{InboxError, InboxErrorKind};
use crate::model::Timestamp;

/// What became of a grant, at a given time (R45): told apart, never merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GrantState {
    /// It answers matching calls.
    Live,
    /// Its `expires_at` passed.
    Expired,
    /// It answered `max_calls` sends.
    Spent,
    /// A person revoked it while it was live.
    Revoked,
}

impl GrantState {
    /// The state's name: `live`, `expired`, `spent`, `revoked`.
    pub fn as_str(self) -> &'static str {
        match self {
            GrantState::Live => "live",
            GrantState::Expired => "expired",
            GrantState::Spent => "spent",
            GrantState::Revoked => "revoked",
        }
    }
}

impl fmt::Display for GrantState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who revoked a grant, and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revocation {
    /// The person.
    pub by: String,
    /// When.
    pub at: Timestamp,
}

/// A grant as the inbox keeps it.
#[derive(Debug, Clone)]
pub struct StoredGrant {
    /// The grant as given.
    pub grant: Grant,
    /// When it was stored.
    pub created_at: Timestamp,
    /// How many sends it answered.
    pub uses: u64,
    /// When it answered its last send.
    pub last_used_at: Option<Timestamp>,
    /// Its revocation, if it was revoked.
    pub revoked: Option<Revocation>,
    /// The verified principal of the person who gave it, when they gave it with an
    /// identity-provider token (as an approval records it).
    pub principal: Option<toolgate_core::Principal>,
}

impl StoredGrant {
    /// The grant's state at `now`: `revoked` once revoked; else `spent` once it answered
    /// `max_calls` sends; else `expired` from its `expires_at`; else `live`.
    pub fn state(&self, now: Timestamp) -> GrantState {
        if self.revoked.is_some() {
            GrantState::Revoked
        } else if self.grant.max_calls().is_some_and(|m| self.uses >= m) {
            GrantState::Spent
        } else if !self.grant.is_live(millis(now), self.uses, false) {
            GrantState::Expired
        } else {
            GrantState::Live
        }
    }

    /// When it stopped answering calls (its revocation, its last send, its expiry), `None`
    /// while it is live.
    pub fn ended_at(&self, now: Timestamp) -> Option<Timestamp> {
        match self.state(now) {
            GrantState::Live => None,
            GrantState::Revoked => self.revoked.as_ref().map(|r| r.at),
            GrantState::Spent => self.last_used_at,
            GrantState::Expired => Some(expires_at(&self.grant)),
        }
    }

    /// The grant's fields as given, with `state`, `uses`, `created_at`, `last_used_at`,
    /// `revoked_by`, `revoked_at` and `ended_at` (times as RFC 3339 text) at `now`: what
    /// `toolgate grant list --json` prints.
    pub fn to_json(&self, now: Timestamp) -> Value {
        let mut out = match serde_json::from_str::<Value>(self.grant.source_text()) {
            Ok(Value::Object(o)) => o,
            _ => Map::new(),
        };
        let time = |t: Option<Timestamp>| t.map_or(Value::Null, |t| Value::from(t.to_string()));
        out.insert("state".into(), self.state(now).as_str().into());
        out.insert("uses".into(), self.uses.into());
        out.insert("expires".into(), expires_at(&self.grant).to_string().into());
        out.insert("created_at".into(), time(Some(self.created_at)));
        out.insert("last_used_at".into(), time(self.last_used_at));
        out.insert(
            "revoked_by".into(),
            self.revoked
                .as_ref()
                .map_or(Value::Null, |r| Value::from(r.by.clone())),
        );
        out.insert(
            "revoked_at".into(),
            time(self.revoked.as_ref().map(|r| r.at)),
        );
        out.insert("ended_at".into(), time(self.ended_at(now)));
        out.insert(
            "granted_by_principal".into(),
            self.principal.as_ref().map_or(
                Value::Null,
                |p| serde_json::json!({"subject": p.subject, "issuer": p.issuer}),
            ),
        );
        Value::Object(out)
    }
}

impl StoredGrant {
    /// A grant as a backend reads it back: its id and stored text, its uses, the time of its
    /// last use, when it was stored, and who revoked it and when (both or neither). A text
    /// that does not parse is the store's error (fail closed: it answers nothing).
    pub fn from_stored(
        id: &str,
        body: &str,
        uses: i64,
        last_used_at: Option<i64>,
        created_at: i64,
        revoked: (Option<String>, Option<i64>),
    ) -> Result<Self, InboxError> {
        Self::from_stored_by(
            id,
            body,
            uses,
            last_used_at,
            created_at,
            revoked,
            (None, None),
        )
    }

    /// [`StoredGrant::from_stored`], with the giver's principal as stored (subject and
    /// issuer, both or neither).
    pub fn from_stored_by(
        id: &str,
        body: &str,
        uses: i64,
        last_used_at: Option<i64>,
        created_at: i64,
        revoked: (Option<String>, Option<i64>),
        principal: (Option<String>, Option<String>),
    ) -> Result<Self, InboxError> {
        Ok(StoredGrant {
            principal: match principal {
                (Some(subject), Some(issuer)) => Some(toolgate_core::Principal { subject, issuer }),
                _ => None,
            },
            grant: grant_from_text(id, body)?,
            created_at: Timestamp::from_millis(created_at),
            uses: u64::try_from(uses).unwrap_or(0),
            last_used_at: last_used_at.map(Timestamp::from_millis),
            revoked: match revoked {
                (Some(by), Some(at)) => Some(Revocation {
                    by,
                    at: Timestamp::from_millis(at),
                }),
                _ => None,
            },
        })
    }
}

/// A grant's `expires_at` as a timestamp.
pub(crate) fn expires_at(g: &Grant) -> Timestamp {
    Timestamp::from_millis(i64::try_from(g.expires_at()).unwrap_or(i64::MAX))
}

/// `now` in the engine's milliseconds (a time before the epoch is the epoch).
pub(crate) fn millis(now: Timestamp) -> Millis {
    u64::try_from(now.as_millis()).unwrap_or(0)
}

/// The stored text of a grant (its source, as given) read back; a row that does not parse
/// is the store's error (fail closed: it answers nothing).
pub fn grant_from_text(id: &str, text: &str) -> Result<Grant, InboxError> {
    let mut list = parse_grants(&format!("[{text}]")).map_err(|e| {
        InboxError::new(
            InboxErrorKind::Record,
            format!("stored grant `{id}` cannot be read: {e}"),
        )
    })?;
    match list.pop() {
        Some(g) if list.is_empty() && g.id() == id => Ok(g),
        _ => Err(InboxError::new(
            InboxErrorKind::Record,
            format!("stored grant `{id}` cannot be read: its text names another grant"),
        )),
    }
}

/// Why a grant was not revoked.
#[derive(Debug, Clone, PartialEq)]
pub enum RevokeError {
    /// No grant has that id.
    UnknownId(String),
    /// The grant is no longer live: it expired, was spent or was revoked already; a grant
    /// that ended keeps the ending it had.
    Ended {
        /// The grant's id.
        id: String,
        /// How it ended.
        state: GrantState,
    },
    /// The inbox could not be read or written.
    Store(InboxError),
}

impl fmt::Display for RevokeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RevokeError::UnknownId(id) => write!(f, "no grant has the id `{id}`"),
            RevokeError::Ended { id, state } => write!(
                f,
                "grant `{id}` is {state} already; only a live grant can be revoked"
            ),
            RevokeError::Store(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for RevokeError {}

impl From<InboxError> for RevokeError {
    fn from(e: InboxError) -> Self {
        RevokeError::Store(e)
    }
}

/// A fresh grant id: `gr_` and 128 random bits in hex.
///
/// # Errors
///
/// The operating system has no randomness to give.
pub fn new_grant_id() -> Result<String, InboxError> {
    toolgate_core::id::random_id("gr_").ok_or_else(|| {
        InboxError::new(
            InboxErrorKind::Backend,
            "the operating system gave no randomness for a grant id",
        )
    })
}

/// The message of an inbox that keeps no grants.
pub(crate) fn no_grants() -> InboxError {
    InboxError::new(InboxErrorKind::Unavailable, "this inbox keeps no grants")
}

/// The summary line of a grant, for lists: `g-1 live support refund_order 2/5 until …`.
pub fn summary_line(g: &StoredGrant, now: Timestamp) -> String {
    let calls = match g.grant.max_calls() {
        Some(m) => format!("{}/{m} calls", g.uses),
        None => format!("{} calls", g.uses),
    };
    let source: Value = serde_json::from_str(g.grant.source_text()).unwrap_or(json!({}));
    let field = |k: &str| {
        source
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let mut line = format!(
        "{}  {}  agent {}  tool {}  {calls}  by {}",
        g.grant.id(),
        g.state(now),
        field("agent"),
        field("tool"),
        g.grant.granted_by()
    );
    match (g.state(now), &g.revoked) {
        (GrantState::Revoked, Some(r)) => {
            line.push_str(&format!("  revoked by {} at {}", r.by, r.at))
        }
        (GrantState::Live, _) => line.push_str(&format!("  until {}", expires_at(&g.grant))),
        (state, _) => {
            if let Some(t) = g.ended_at(now) {
                line.push_str(&format!("  {state} at {t}"));
            }
        }
    }
    line
}

/// A grant a person asks for (`toolgate grant add`, the page's "Approve, and allow matching
/// calls for …"), before it is checked and stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantRequest {
    /// The calling agent (a pattern, R19).
    pub agent: String,
    /// The tool's own name (a pattern, R19; never `__`).
    pub tool: String,
    /// The MCP server (a pattern), when it names one.
    pub server: Option<String>,
    /// The tool's kind (`mcp`, `http`, `local`), when it names one.
    pub kind: Option<String>,
    /// A `when` object (R20), as JSON text (its numbers kept as written).
    pub when: Option<String>,
    /// The one session it answers calls of.
    pub session: Option<String>,
    /// How long it answers calls, from now.
    pub lasts: Duration,
    /// How many sends it answers at most.
    pub max_calls: Option<u64>,
    /// Who gives it.
    pub granted_by: String,
    /// Why.
    pub reason: String,
}

impl GrantRequest {
    /// The grant, with a fresh id (`gr_…`), expiring `lasts` after `now`, checked against
    /// the configuration `gov`: every field as `parse_grants` checks it, and — when the
    /// configuration has an `approvers` section — `granted_by` must be one of its approvers,
    /// with rights over every tool the grant selects
    /// ([`Approver::may_grant`](toolgate_engine::approvers::Approver::may_grant)). Every
    /// problem is reported at its field (`when.amount.lte`, `granted_by`, `tool`, `lasts`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use toolgate_engine::config::{load_str, Format};
    /// use toolgate_inbox::{GrantRequest, Timestamp};
    /// let gov = load_str(r#"{"tools": [{"kind": "http", "name": "refund_order"}],
    ///     "agents": [{"name": "support", "allowed_tools": ["refund_order"]}]}"#, Format::Json).unwrap();
    /// let mut ask = GrantRequest {
    ///     agent: "support".into(), tool: "refund_order".into(), server: None, kind: None,
    ///     when: Some(r#"{"amount": {"lte": 100}}"#.into()), session: None,
    ///     lasts: Duration::from_secs(1800), max_calls: Some(5),
    ///     granted_by: "alice".into(), reason: "the backlog".into(),
    /// };
    /// let g = ask.build(&gov, Timestamp::from_millis(1_000)).unwrap();
    /// assert_eq!((g.expires_at(), g.max_calls()), (1_801_000, Some(5)));
    /// ask.when = Some(r#"{"amount": {"lte": "a lot"}}"#.into());
    /// let err = ask.build(&gov, Timestamp::from_millis(1_000)).unwrap_err();
    /// assert_eq!(err.errors[0].path, "when.amount.lte");
    /// ```
    pub fn build(
        &self,
        gov: &toolgate_engine::Governance,
        now: Timestamp,
    ) -> Result<Grant, toolgate_engine::ConfigErrors> {
        use toolgate_engine::ConfigErrors;
        let mut errs = ConfigErrors::default();
        if self.lasts.is_zero() {
            errs.push("lasts", "a grant must last longer than no time at all");
        }
        if let Some(w) = &self.when
            && let Err(e) = serde_json::from_str::<Value>(w)
        {
            errs.push("when", format!("`{w}` is not JSON: {e}"));
        }
        if !errs.is_empty() {
            return Err(errs);
        }
        let id = new_grant_id().map_err(|e| ConfigErrors::one("id", e.to_string()))?;
        let expires = millis(now.saturating_add(self.lasts));
        let text = |s: &str| Value::from(s).to_string();
        let mut doc = format!(
            "{{\"id\":{},\"agent\":{},\"tool\":{}",
            text(&id),
            text(&self.agent),
            text(&self.tool)
        );
        for (key, value) in [
            ("server", &self.server),
            ("kind", &self.kind),
            ("session", &self.session),
        ] {
            if let Some(v) = value {
                doc.push_str(&format!(",\"{key}\":{}", text(v)));
            }
        }
        if let Some(w) = &self.when {
            doc.push_str(&format!(",\"when\":{w}"));
        }
        doc.push_str(&format!(",\"expires_at\":{expires}"));
        if let Some(m) = self.max_calls {
            doc.push_str(&format!(",\"max_calls\":{m}"));
        }
        doc.push_str(&format!(
            ",\"granted_by\":{},\"reason\":{}}}",
            text(&self.granted_by),
            text(&self.reason)
        ));
        let grant = parse_grants(&format!("[{doc}]"))
            .map_err(|e| ConfigErrors {
                errors: e
                    .errors
                    .into_iter()
                    .map(|mut e| {
                        e.path = e
                            .path
                            .trim_start_matches("[0]")
                            .trim_start_matches('.')
                            .to_owned();
                        e
                    })
                    .collect(),
            })?
            .pop()
            .ok_or_else(|| ConfigErrors::one("", "the grant was not read"))?;
        if let Some(approvers) = gov.approver_settings() {
            let Some(person) = approvers.approver(&self.granted_by) else {
                return Err(ConfigErrors::one(
                    "granted_by",
                    format!(
                        "`{}` is not one of the configuration's approvers",
                        self.granted_by
                    ),
                ));
            };
            let tools = catalog_records(gov);
            person
                .may_grant(&grant, tools.iter().map(Vec::as_slice))
                .map_err(|r| ConfigErrors::one(r.field, r.message))?;
        }
        Ok(grant)
    }
}

/// The records behind each tool of the configuration, what rights are checked against.
fn catalog_records(gov: &toolgate_engine::Governance) -> Vec<Vec<toolgate_core::ToolIdentity>> {
    gov.catalog()
        .entries()
        .iter()
        .map(|e| e.records.iter().map(|r| r.identity().clone()).collect())
        .collect()
}

/// Whether `name` may revoke `grant` under the configuration `gov` (R45): anyone when it
/// has no `approvers` section; else one of its approvers with rights over what the grant
/// answers (the rights it takes to give it). The error names the problem.
pub fn may_revoke(
    gov: &toolgate_engine::Governance,
    name: &str,
    grant: &Grant,
) -> Result<(), MayNotRevoke> {
    let Some(approvers) = gov.approver_settings() else {
        return Ok(());
    };
    let Some(person) = approvers.approver(name) else {
        return Err(MayNotRevoke::NotAnApprover {
            name: name.to_owned(),
        });
    };
    let tools = catalog_records(gov);
    person
        .may_grant(grant, tools.iter().map(Vec::as_slice))
        .map_err(|refused| MayNotRevoke::NoRights {
            name: name.to_owned(),
            grant: grant.id().to_owned(),
            refused,
        })
}

/// Why a person may not revoke a grant ([`may_revoke`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MayNotRevoke {
    /// The configuration names approvers, and not this person.
    #[error("`{name}` is not one of the configuration's approvers")]
    NotAnApprover {
        /// Who.
        name: String,
    },
    /// The person lacks the rights it takes to give the grant.
    #[error("`{name}` may not revoke grant `{grant}`: {}", .refused.message)]
    NoRights {
        /// Who.
        name: String,
        /// The grant's id.
        grant: String,
        /// The right they lack.
        refused: toolgate_engine::approvers::GrantRefused,
    },
}
