//! Quotas (R44): how many covered calls may be **sent** in a sliding window, per group.
//!
//! A quota selects calls exactly as a rule does (R18–R20: `tool`, `server`, `kind`, `agent`,
//! `when`; with no selector it covers every `mcp` and `http` call, and `local` only when it
//! names that kind) and counts them in groups by its `per` keys. The counting itself lives
//! behind [`crate::quota::QuotaCounter`]; here is what a quota says and which calls it covers.

use serde_json::Value;

use super::select::read_selection;
use super::{LowerSubject, Rule};
use crate::error::{ConfigErrors, Obj, index, type_name};
use crate::number::Lit;

/// The most a quota's `max` may be.
pub const QUOTA_MAX_CEILING: u64 = 1_000_000_000;
/// The longest a quota's window may be: 31 days, in seconds.
pub const QUOTA_WINDOW_CEILING_SECS: u64 = 2_678_400;

const QUOTA_FIELDS: &[&str] = &[
    "max",
    "window_secs",
    "tool",
    "server",
    "kind",
    "agent",
    "when",
    "per",
    "reason",
    "labels",
    "session_labels",
];
const PER_KEYS: &[&str] = &["agent", "session", "tool", "input"];

/// One key a quota counts by (R44's `per`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PerKey {
    /// The agent as rules see it: the profile name or the subagent's id, case-insensitively.
    Agent,
    /// The call's session (R43); calls without one share a group.
    Session,
    /// The tool's qualified name, case-insensitively.
    Tool,
    /// The call's input (R50): two inputs are one group when they are equal as JSON values
    /// (object keys in any order, numbers by numeric value, strings exactly; R20's `equals`).
    Input,
}

impl PerKey {
    /// The key's spelling in a policy.
    pub fn as_str(self) -> &'static str {
        match self {
            PerKey::Agent => "agent",
            PerKey::Session => "session",
            PerKey::Tool => "tool",
            PerKey::Input => "input",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "agent" => PerKey::Agent,
            "session" => PerKey::Session,
            "tool" => PerKey::Tool,
            "input" => PerKey::Input,
            _ => return None,
        })
    }
}

/// One quota of a tenant policy (R44), validated.
#[derive(Debug, Clone)]
pub struct Quota {
    max: u64,
    window_secs: u64,
    per: Vec<PerKey>,
    /// The selection, as a rule's (its effect is unused).
    pub(super) select: Rule,
    /// What identifies the quota's counters across policy versions: its selection, `per`
    /// and window, but not `max` or `reason` (raising `max` keeps the sends counted).
    counter_id: Box<str>,
}

impl Quota {
    /// How many sends a group may hold in one window.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The window's length in seconds.
    pub fn window_secs(&self) -> u64 {
        self.window_secs
    }

    /// The window's length in milliseconds.
    pub fn window_ms(&self) -> u64 {
        self.window_secs.saturating_mul(1000)
    }

    /// The keys it counts by; empty: one group for all.
    pub fn per(&self) -> &[PerKey] {
        &self.per
    }

    /// The labels the called tool must carry (R49).
    pub fn labels(&self) -> impl Iterator<Item = &str> {
        self.select.labels()
    }

    /// The labels the session must already have (R49).
    pub fn session_labels(&self) -> impl Iterator<Item = &str> {
        self.select.session_labels()
    }

    /// The quota's `reason`.
    pub fn reason(&self) -> Option<&str> {
        self.select.reason()
    }

    /// A stable id for the quota's counters: the same selection, `per` keys and window give
    /// the same id in every policy version and process (a hex digest).
    pub fn counter_id(&self) -> &str {
        &self.counter_id
    }

    /// The quota as written, as compact JSON text, every number as written.
    pub fn source_text(&self) -> &str {
        self.select.source_text()
    }

    /// The reason shown when the quota is full: its own, or a description.
    pub fn describe(&self, index: usize) -> String {
        if let Some(r) = self.reason() {
            return r.to_owned();
        }
        let per = if self.per.is_empty() {
            String::new()
        } else {
            let keys: Vec<&str> = self.per.iter().map(|k| k.as_str()).collect();
            format!(" per {}", keys.join(" and "))
        };
        format!(
            "tenant policy quota {index} allows {} sent call{} in {} s{per}",
            self.max,
            if self.max == 1 { "" } else { "s" },
            self.window_secs
        )
    }

    /// Whether the quota could cover a tool of this kind on this server, whatever the
    /// call's agent and input (R44's selection, as [`Rule::selects`]).
    pub fn selects(&self, kind: toolgate_core::ToolKind, tool: &str, server: Option<&str>) -> bool {
        self.select.selects(kind, tool, server)
    }

    pub(super) fn covers(&self, s: &LowerSubject<'_>, input: &Value, lits: Lit<'_>) -> bool {
        self.select.matches(s, input, lits)
    }
}

/// Reads `quotas[i]` (R44): the selection as a rule's, then `max`, `window_secs`, `per`.
pub(super) fn read_quota(
    value: &Value,
    lits: Lit<'_>,
    path: &str,
    limits: &super::Limits,
    errs: &mut ConfigErrors,
) -> Option<Quota> {
    let before = errs.errors.len();
    let obj = Obj::open(value, path, QUOTA_FIELDS, errs)?;
    let mut select = read_selection(&obj, value, lits, limits, errs);
    (select.labels, select.session_labels) = super::select::read_label_selectors(&obj, errs);
    let max = bounded(&obj, "max", QUOTA_MAX_CEILING, errs);
    let window_secs = bounded(&obj, "window_secs", QUOTA_WINDOW_CEILING_SECS, errs);
    let mut per = Vec::new();
    if let Some(items) = obj.array("per", errs) {
        let ppath = obj.path_of("per");
        for (i, item) in items.iter().enumerate() {
            let at = index(&ppath, i);
            match item {
                Value::String(s) => match PerKey::parse(s) {
                    Some(k) if per.contains(&k) => {
                        errs.push(at, format!("`{s}` is given twice in `per`"));
                    }
                    Some(k) => per.push(k),
                    None => errs.push(
                        at,
                        format!(
                            "unknown value `{s}`; expected one of {}",
                            crate::error::list(PER_KEYS)
                        ),
                    ),
                },
                other => errs.push(at, format!("expected a string, found {}", type_name(other))),
            }
        }
    }
    if errs.errors.len() > before {
        return None;
    }
    let (max, window_secs) = (max?, window_secs?);
    let counter_id = counter_id(&select, &per, window_secs);
    Some(Quota {
        max,
        window_secs,
        per,
        select,
        counter_id,
    })
}

/// A required whole number from 1 to `ceiling`.
fn bounded(obj: &Obj<'_>, key: &str, ceiling: u64, errs: &mut ConfigErrors) -> Option<u64> {
    if !obj.has(key) {
        errs.push(obj.path_of(key), format!("`{key}` is required"));
        return None;
    }
    let v = obj.raw(key, errs)?;
    let n = match v {
        Value::Number(n) => n,
        other => {
            errs.push(
                obj.path_of(key),
                format!(
                    "expected a whole number from 1 to {ceiling}, found {}",
                    type_name(other)
                ),
            );
            return None;
        }
    };
    match n.as_u64() {
        Some(x) if (1..=ceiling).contains(&x) => Some(x),
        _ => {
            errs.push(
                obj.path_of(key),
                format!("`{n}` is not a whole number from 1 to {ceiling}"),
            );
            None
        }
    }
}

fn counter_id(select: &Rule, per: &[PerKey], window_secs: u64) -> Box<str> {
    let keys: Vec<&str> = per.iter().map(|k| k.as_str()).collect();
    let lower = |g: Option<&super::Glob>| g.map(|g| g.as_str().to_ascii_lowercase());
    // A JSON array: every part delimited, so no two selections give one text.
    let mut id = serde_json::json!([
        select.kind.map(|k| k.as_str()),
        lower(select.server.as_ref()),
        lower(select.tool.as_ref()),
        lower(select.agent.as_ref()),
        select.when_canonical(),
        keys,
        window_secs,
    ]);
    // R49: a selection by labels is another selection; a quota without them keeps the id
    // earlier builds gave it (its stored sends keep counting).
    if select.has_labels()
        && let Value::Array(parts) = &mut id
    {
        parts.push(serde_json::json!([
            &*select.labels,
            &*select.session_labels
        ]));
    }
    crate::canon::sha256_hex(id.to_string().as_bytes()).into_boxed_str()
}
