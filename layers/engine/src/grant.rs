//! Grants (R45): a person's answer given in advance for matching calls, never a rule.
//!
//! A grant names the calls it answers (`agent` and `tool` patterns as R19's, optional
//! `server`, `kind`, `when` and an exact `session`), until when (`expires_at`, milliseconds
//! since the Unix epoch) and how many sends (`max_calls`), who gave it and why. A call that
//! would be asked, and that nothing refused before grants in R26's routing order, runs
//! without asking when a **live** grant matches it; a grant never turns a refusal into a run.
//!
//! Grants live behind [`GrantStore`]; [`MemoryGrants`] is the in-memory store.
//!
//! ```
//! use toolgate_engine::grant::{parse_grants, GrantStore, MemoryGrants};
//! let grants = parse_grants(r#"[{"id": "g-1", "agent": "support", "tool": "refund_*",
//!     "expires_at": 60000, "max_calls": 1, "granted_by": "alice", "reason": "backlog"}]"#).unwrap();
//! let store = MemoryGrants::new(grants);
//! assert_eq!(store.first_live(1_000, &mut |_| true).unwrap().unwrap().id, "g-1");
//! assert!(store.record_use("g-1", 1_000).unwrap());
//! // Spent: one send under it.
//! assert!(store.first_live(2_000, &mut |_| true).unwrap().is_none());
//! ```

use std::collections::HashSet;
use std::fmt;
use std::sync::Mutex;

use serde_json::Value;
use toolgate_core::Granted;

use crate::error::{ConfigErrors, Obj, index, type_name};
use crate::number::{self, Lit, NumberLiterals};
use crate::policy::{Limits, Rule, Subject, read_selection};
use crate::quota::Millis;

const GRANT_FIELDS: &[&str] = &[
    "id",
    "agent",
    "tool",
    "server",
    "kind",
    "when",
    "session",
    "expires_at",
    "max_calls",
    "granted_by",
    "reason",
];

/// One grant (R45), validated.
#[derive(Debug, Clone)]
pub struct Grant {
    id: String,
    session: Option<String>,
    expires_at: Millis,
    max_calls: Option<u64>,
    granted_by: String,
    reason: String,
    /// `agent`, `tool`, `server`, `kind`, `when`: a rule's selection, every kind when
    /// `kind` is unset.
    select: Rule,
}

impl Grant {
    /// Reads one grant; every problem is reported with its path under `path`.
    pub fn from_json(value: &Value, path: &str) -> Result<Self, ConfigErrors> {
        let mut errs = ConfigErrors::default();
        match read_grant(value, None, path, &mut errs) {
            Some(g) if errs.is_empty() => Ok(g),
            _ => Err(errs),
        }
    }

    /// The grant's id (ids compare exactly).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Who gave it.
    pub fn granted_by(&self) -> &str {
        &self.granted_by
    }

    /// Why.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// When it stops answering: a call at `now` is answered only when `now < expires_at`.
    pub fn expires_at(&self) -> Millis {
        self.expires_at
    }

    /// How many sends it answers at most.
    pub fn max_calls(&self) -> Option<u64> {
        self.max_calls
    }

    /// The one session it answers calls of, when it names one.
    pub fn session(&self) -> Option<&str> {
        self.session.as_deref()
    }

    /// The grant as written, as compact JSON text.
    pub fn source_text(&self) -> &str {
        self.select.source_text()
    }

    /// Whether the grant is live at `now` (R45) given how many calls were sent under it
    /// and whether it was revoked: `now < expires_at`, not revoked, fewer than `max_calls`
    /// sends. Every store judges liveness with this.
    pub fn is_live(&self, now: Millis, uses: u64, revoked: bool) -> bool {
        now < self.expires_at && !revoked && self.max_calls.is_none_or(|m| uses < m)
    }

    /// Whether every field the grant sets matches one record of a call (R45): `agent`,
    /// `tool`, `server`, `kind`, `when` as a rule's (R19, R20), but an unset `kind` matches
    /// every kind; `session` exactly. Under a collision (R24) a grant answers a call only
    /// when it matches **every** record: the engine asks once per record.
    pub fn matches(
        &self,
        subject: &Subject<'_>,
        session: Option<&str>,
        input: &Value,
        literals: &NumberLiterals,
    ) -> bool {
        if let Some(want) = &self.session
            && session != Some(want.as_str())
        {
            return false;
        }
        self.select.matches_call(subject, input, literals)
    }

    /// The grant's `agent` pattern (required, R45).
    pub fn agent(&self) -> Option<&crate::policy::Glob> {
        self.select.agent()
    }

    /// Whether the grant's `tool`, `server` and `kind` select the tool record `identity`,
    /// whatever the agent, session and input: whether it can answer calls of that tool at
    /// all (what an approver's rights are checked against, [`crate::approvers::Approver::may_grant`]).
    pub fn selects_tool(&self, identity: &toolgate_core::ToolIdentity) -> bool {
        self.select
            .selects_record(identity.kind(), identity.name(), identity.server())
    }

    /// The grant's selection: its `tool`, `server`, `kind` and `agent` as a rule's.
    pub fn selection(&self) -> &Rule {
        &self.select
    }

    /// What a decision names when the grant answers it.
    pub fn granted(&self) -> Granted {
        Granted::new(self.id.clone(), self.granted_by.clone())
    }
}

/// Reads a GRANTS document (SPEC §7): a JSON list of grants. Every problem is reported with
/// its path (`[2].tool`): a missing or blank required field, an unknown field, a duplicate
/// `id`, a `tool` containing `__`, a bad `when`; duplicate object keys are malformed.
pub fn parse_grants(text: &str) -> Result<Vec<Grant>, ConfigErrors> {
    let value = crate::json::parse_strict_json(text)
        .map_err(|e| ConfigErrors::one("", format!("malformed JSON: {e}")))?;
    let literals = NumberLiterals::scan(text);
    read_grants(&value, literals.root(), "")
}

/// As [`parse_grants`], from a parsed value; paths start at `path`.
pub fn grants_from_json(value: &Value, path: &str) -> Result<Vec<Grant>, ConfigErrors> {
    read_grants(value, None, path)
}

fn read_grants(value: &Value, lits: Lit<'_>, path: &str) -> Result<Vec<Grant>, ConfigErrors> {
    let mut errs = ConfigErrors::default();
    let Value::Array(items) = value else {
        return Err(ConfigErrors::one(
            path,
            format!("expected a list of grants, found {}", type_name(value)),
        ));
    };
    let mut out = Vec::with_capacity(items.len());
    let mut ids = HashSet::new();
    for (i, item) in items.iter().enumerate() {
        let at = index(path, i);
        if let Some(g) = read_grant(item, number::item(lits, i), &at, &mut errs) {
            if !ids.insert(g.id.clone()) {
                errs.push(
                    format!("{at}.id"),
                    format!("the id `{}` is given to two grants", g.id),
                );
            }
            out.push(g);
        }
    }
    if errs.is_empty() { Ok(out) } else { Err(errs) }
}

fn read_grant(value: &Value, lits: Lit<'_>, path: &str, errs: &mut ConfigErrors) -> Option<Grant> {
    let before = errs.errors.len();
    let obj = Obj::open(value, path, GRANT_FIELDS, errs)?;
    for key in ["id", "agent", "tool", "expires_at", "granted_by", "reason"] {
        if !obj.has(key) {
            errs.push(obj.path_of(key), format!("`{key}` is required"));
        }
    }
    let limits = Limits::default();
    let select = read_selection(&obj, value, lits, &limits, errs).selecting_every_kind();
    let id = obj.non_blank("id", errs).map(str::to_owned);
    let session = obj.non_blank("session", errs).map(str::to_owned);
    let granted_by = obj.non_blank("granted_by", errs).map(str::to_owned);
    let reason = obj.non_blank("reason", errs).map(str::to_owned);
    let expires_at = whole(&obj, "expires_at", 0, errs);
    let max_calls = whole(&obj, "max_calls", 1, errs);
    if errs.errors.len() > before {
        return None;
    }
    Some(Grant {
        id: id?,
        session,
        expires_at: expires_at?,
        max_calls,
        granted_by: granted_by?,
        reason: reason?,
        select,
    })
}

/// An optional whole number of at least `least`.
fn whole(obj: &Obj<'_>, key: &str, least: u64, errs: &mut ConfigErrors) -> Option<u64> {
    let v = obj.raw(key, errs)?;
    match v {
        Value::Number(n) => match n.as_u64() {
            Some(x) if x >= least => Some(x),
            _ => {
                errs.push(
                    obj.path_of(key),
                    format!("`{n}` is not a whole number of at least {least}"),
                );
                None
            }
        },
        other => {
            errs.push(
                obj.path_of(key),
                format!(
                    "expected a whole number of at least {least}, found {}",
                    type_name(other)
                ),
            );
            None
        }
    }
}

/// A grant store could not be read or written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantStoreError(pub String);

impl fmt::Display for GrantStoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the grants cannot be read: {}", self.0)
    }
}

impl std::error::Error for GrantStoreError {}

/// Where grants live (R45). The engine asks for the first live grant, in the order the
/// grants were given, that its matcher accepts (the matcher checks a grant's fields against
/// every record of the call); the store judges liveness with [`Grant::is_live`]. When a call
/// answered by a grant is sent, [`GrantStore::record_use`] counts the send.
///
/// A store that cannot be read answers no call: the call is asked as if there were no
/// grant (a grant only ever loosens, so failing closed is asking).
pub trait GrantStore: Send + Sync {
    /// The first grant, in order, that is live at `now` and that `matches` accepts.
    fn first_live(
        &self,
        now: Millis,
        matches: &mut dyn FnMut(&Grant) -> bool,
    ) -> Result<Option<Granted>, GrantStoreError>;

    /// Counts one send under grant `id` at `now`, atomically with checking it is still live:
    /// `false` (nothing counted) when it expired, was revoked, was spent or is unknown.
    fn record_use(&self, id: &str, now: Millis) -> Result<bool, GrantStoreError>;
}

/// No grants: every ask is asked (what [`crate::Governance::decide`] sees).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoGrants;

impl GrantStore for NoGrants {
    fn first_live(
        &self,
        _: Millis,
        _: &mut dyn FnMut(&Grant) -> bool,
    ) -> Result<Option<Granted>, GrantStoreError> {
        Ok(None)
    }

    fn record_use(&self, _: &str, _: Millis) -> Result<bool, GrantStoreError> {
        Ok(false)
    }
}

#[derive(Debug)]
struct Held {
    grant: Grant,
    uses: u64,
    revoked: bool,
}

/// The in-memory [`GrantStore`], for library users with an interactive channel and for
/// `simulate`: grants in the order given, their uses counted on send.
#[derive(Debug, Default)]
pub struct MemoryGrants {
    held: Mutex<Vec<Held>>,
}

impl MemoryGrants {
    /// A store holding `grants`, in order, none used.
    pub fn new(grants: Vec<Grant>) -> Self {
        Self {
            held: Mutex::new(
                grants
                    .into_iter()
                    .map(|grant| Held {
                        grant,
                        uses: 0,
                        revoked: false,
                    })
                    .collect(),
            ),
        }
    }

    /// Adds a grant after the others; `false` when one with its id is held already.
    pub fn add(&self, grant: Grant) -> bool {
        let Ok(mut held) = self.held.lock() else {
            return false;
        };
        if held.iter().any(|h| h.grant.id == grant.id) {
            return false;
        }
        held.push(Held {
            grant,
            uses: 0,
            revoked: false,
        });
        true
    }

    /// Revokes a grant; `false` when no grant has that id.
    pub fn revoke(&self, id: &str) -> bool {
        let Ok(mut held) = self.held.lock() else {
            return false;
        };
        match held.iter_mut().find(|h| h.grant.id == id) {
            Some(h) => {
                h.revoked = true;
                true
            }
            None => false,
        }
    }

    /// How many sends were counted under a grant.
    pub fn uses(&self, id: &str) -> Option<u64> {
        let held = self.held.lock().ok()?;
        held.iter().find(|h| h.grant.id == id).map(|h| h.uses)
    }
}

impl GrantStore for MemoryGrants {
    fn first_live(
        &self,
        now: Millis,
        matches: &mut dyn FnMut(&Grant) -> bool,
    ) -> Result<Option<Granted>, GrantStoreError> {
        let held = self
            .held
            .lock()
            .map_err(|_| GrantStoreError(String::from("the store's lock is poisoned")))?;
        Ok(held
            .iter()
            .find(|h| h.grant.is_live(now, h.uses, h.revoked) && matches(&h.grant))
            .map(|h| h.grant.granted()))
    }

    fn record_use(&self, id: &str, now: Millis) -> Result<bool, GrantStoreError> {
        let mut held = self
            .held
            .lock()
            .map_err(|_| GrantStoreError(String::from("the store's lock is poisoned")))?;
        match held.iter_mut().find(|h| h.grant.id == id) {
            Some(h) if h.grant.is_live(now, h.uses, h.revoked) => {
                h.uses += 1;
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

impl<T: GrantStore + ?Sized> GrantStore for std::sync::Arc<T> {
    fn first_live(
        &self,
        now: Millis,
        matches: &mut dyn FnMut(&Grant) -> bool,
    ) -> Result<Option<Granted>, GrantStoreError> {
        (**self).first_live(now, matches)
    }

    fn record_use(&self, id: &str, now: Millis) -> Result<bool, GrantStoreError> {
        (**self).record_use(id, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(text: &str) -> Vec<String> {
        parse_grants(text)
            .unwrap_err()
            .errors
            .into_iter()
            .map(|e| e.path)
            .collect()
    }

    const OK: &str = r#"{"id": "g", "agent": "a", "tool": "t", "expires_at": 10, "granted_by": "alice", "reason": "r"}"#;

    #[test]
    fn r45_every_grant_error_has_its_path() {
        assert_eq!(
            paths(r#"[{"agent": "a"}]"#),
            [
                "[0].id",
                "[0].tool",
                "[0].expires_at",
                "[0].granted_by",
                "[0].reason"
            ]
        );
        assert_eq!(paths(&format!("[{OK}, {OK}]")), ["[1].id"]);
        let blank = OK.replace(r#""reason": "r""#, r#""reason": "  ""#);
        assert_eq!(paths(&format!("[{blank}]")), ["[0].reason"]);
        let under = OK.replace(r#""tool": "t""#, r#""tool": "github__t""#);
        assert_eq!(paths(&format!("[{under}]")), ["[0].tool"]);
        let extra = OK.replace(r#""id": "g""#, r#""id": "g", "scope": 1"#);
        assert_eq!(paths(&format!("[{extra}]")), ["[0].scope"]);
        let when = OK.replace(r#""id": "g""#, r#""id": "g", "when": {"a": {"gt": "x"}}"#);
        assert_eq!(paths(&format!("[{when}]")), ["[0].when.a.gt"]);
        let calls = OK.replace(r#""id": "g""#, r#""id": "g", "max_calls": 0"#);
        assert_eq!(paths(&format!("[{calls}]")), ["[0].max_calls"]);
        assert_eq!(paths("{}"), [""]);
    }

    #[test]
    fn r45_live_means_before_expiry_unrevoked_and_unspent() {
        let g = &parse_grants(&format!("[{OK}]")).unwrap()[0];
        assert!(g.is_live(9, 0, false));
        assert!(!g.is_live(10, 0, false), "now < expires_at");
        assert!(!g.is_live(0, 0, true));
        let store = MemoryGrants::new(vec![g.clone()]);
        assert!(store.revoke("g"));
        assert!(
            !store.record_use("g", 0).unwrap(),
            "a revoked grant counts nothing"
        );
    }
}
