//! One compiled rule (R18–R20): its selectors, its `when` tests, and how it matches a call.

use std::cmp::Ordering;

use regex::Regex;
use serde_json::Value;
use toolgate_core::ToolKind;

use super::{Effect, Glob, LowerSubject};
use crate::number::{self, Exact, Lit, Node};

/// One test on a `when` field (R20). Numbers are kept as written (see
/// [`crate::number`]): an integer literal of any size compares by its digits.
#[derive(Debug, Clone)]
pub(super) struct Test {
    pub(super) equals: Option<Operand>,
    pub(super) in_list: Option<Vec<Operand>>,
    pub(super) gt: Option<Exact>,
    pub(super) gte: Option<Exact>,
    pub(super) lt: Option<Exact>,
    pub(super) lte: Option<Exact>,
    pub(super) matches: Option<Regex>,
}

/// An `equals` or `in` operand with the number literals its value does not reproduce.
#[derive(Debug, Clone)]
pub(super) struct Operand {
    pub(super) value: Value,
    pub(super) literals: Option<Node>,
}

/// One rule (R18).
#[derive(Debug, Clone)]
pub struct Rule {
    pub(super) effect: Effect,
    pub(super) tool: Option<Glob>,
    pub(super) server: Option<Glob>,
    pub(super) kind: Option<ToolKind>,
    pub(super) agent: Option<Glob>,
    pub(super) when: Vec<(String, Vec<String>, Test)>,
    pub(super) reason: Option<Box<str>>,
    /// The rule as written, as compact JSON text with every number as written (R20): one
    /// string instead of a parsed object per rule (to keep the memory per rule small).
    pub(super) source: Box<str>,
    /// Without `kind`, select every kind, `local` included (a grant's selection, R45),
    /// instead of `mcp` and `http` only (a rule's and a quota's, R15, R44).
    pub(super) all_kinds: bool,
    /// R49: labels the called tool must carry, every one.
    pub(super) labels: super::select::LabelList,
    /// R49: labels the session must already have, every one.
    pub(super) session_labels: super::select::LabelList,
    /// R51: how many distinct people must approve a call this (`ask`) rule asks about.
    pub(super) approvals: u8,
}

impl Rule {
    /// The rule's effect.
    pub fn effect(&self) -> Effect {
        self.effect
    }

    /// The rule's `reason`.
    pub fn reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }

    /// The rule's `tool` pattern.
    pub fn tool(&self) -> Option<&Glob> {
        self.tool.as_ref()
    }

    /// The rule's `server` pattern.
    pub fn server(&self) -> Option<&Glob> {
        self.server.as_ref()
    }

    /// The rule's `kind`.
    pub fn kind(&self) -> Option<ToolKind> {
        self.kind
    }

    /// The rule's `agent` pattern.
    pub fn agent(&self) -> Option<&Glob> {
        self.agent.as_ref()
    }

    /// Whether the rule sets `when`.
    pub fn has_when(&self) -> bool {
        !self.when.is_empty()
    }

    /// The labels the called tool must carry (R49; empty when the rule sets none).
    pub fn labels(&self) -> impl Iterator<Item = &str> {
        self.labels.iter().map(|l| &**l)
    }

    /// The labels the session must already have (R49; empty when the rule sets none).
    pub fn session_labels(&self) -> impl Iterator<Item = &str> {
        self.session_labels.iter().map(|l| &**l)
    }

    /// How many distinct people must approve a call this rule asks about (R51; 1 unless
    /// an `ask` rule sets `approvals`).
    pub fn approvals(&self) -> u8 {
        self.approvals
    }

    /// Whether the rule selects by labels (R49): matching it needs the call's labels.
    pub fn has_labels(&self) -> bool {
        !self.labels.is_empty() || !self.session_labels.is_empty()
    }

    /// Whether the call's labels satisfy the rule's `labels` and `session_labels` (R49):
    /// the tool carries every one of the first, the session (before this call) has every
    /// one of the second. Without the session's labels (no history), a `session_labels`
    /// test never holds.
    pub fn labels_hold(&self, labels: &super::CallLabels<'_>) -> bool {
        labels.tool.contains_all(self.labels.iter())
            && (self.session_labels.is_empty()
                || labels
                    .session
                    .is_some_and(|s| s.contains_all(self.session_labels.iter())))
    }

    /// The rule as written, parsed from [`Rule::source_text`] (a new value per call).
    pub fn source(&self) -> Value {
        // The text was written by this crate from a parsed value: it always parses.
        serde_json::from_str(&self.source).unwrap_or(Value::Null)
    }

    /// The canonical text (RFC 8785) of the rule's `when`, when it has one.
    pub(super) fn when_canonical(&self) -> Option<String> {
        if self.when.is_empty() {
            return None;
        }
        let source: Value = serde_json::from_str(&self.source).ok()?;
        source
            .get("when")
            .and_then(crate::canon::canonical_json)
            .or_else(|| source.get("when").map(Value::to_string))
    }

    /// The rule as written, as compact JSON text, every number as written (R20).
    pub fn source_text(&self) -> &str {
        &self.source
    }

    /// The reason shown to a person and the model: the rule's own, or a description.
    pub fn describe(&self, index: usize) -> String {
        if let Some(r) = &self.reason {
            return r.to_string();
        }
        let mut parts = Vec::new();
        if let Some(k) = self.kind {
            parts.push(format!("kind `{k}`"));
        }
        if let Some(s) = &self.server {
            parts.push(format!("server `{}`", s.as_str()));
        }
        if let Some(t) = &self.tool {
            parts.push(format!("tool `{}`", t.as_str()));
        }
        if let Some(a) = &self.agent {
            parts.push(format!("agent `{}`", a.as_str()));
        }
        if !self.when.is_empty() {
            let paths: Vec<_> = self.when.iter().map(|(p, _, _)| format!("`{p}`")).collect();
            parts.push(format!("when {}", paths.join(", ")));
        }
        let scope = if parts.is_empty() {
            String::from("every mcp and http call")
        } else {
            parts.join(", ")
        };
        let verb = match self.effect {
            Effect::Allow => "allows",
            Effect::Ask => "asks about",
            Effect::Deny => "denies",
        };
        format!("tenant policy rule {index} {verb} {scope}")
    }

    /// Whether the rule could apply to a tool of this kind on this server, whatever the
    /// call's agent and input (used by `check`'s R40 warnings).
    pub fn selects(&self, kind: ToolKind, tool: &str, server: Option<&str>) -> bool {
        if !self.kind_applies(kind) {
            return false;
        }
        if let Some(g) = &self.server {
            match server {
                Some(s) if kind == ToolKind::Mcp => {
                    if !g.matches(s) {
                        return false;
                    }
                }
                _ => return false,
            }
        }
        self.tool.as_ref().is_none_or(|g| g.matches(tool))
    }

    fn kind_applies(&self, kind: ToolKind) -> bool {
        match self.kind {
            // R45: a grant's unset fields match every call, `local` tools included.
            None if self.all_kinds => true,
            // R15/R18: a rule that does not name a kind applies to mcp and http calls only.
            None => matches!(kind, ToolKind::Mcp | ToolKind::Http),
            Some(k) => k == kind,
        }
    }

    /// The same selection, with an unset `kind` selecting every kind (a grant's, R45).
    pub(crate) fn selecting_every_kind(mut self) -> Self {
        self.all_kinds = true;
        self
    }

    /// Whether the selection's `kind`, `server` and `tool` select one tool record, whatever
    /// the agent and the input (names compared ASCII case-insensitively): the tools a grant
    /// can answer calls of (R45).
    pub(crate) fn selects_record(&self, kind: ToolKind, tool: &str, server: Option<&str>) -> bool {
        use toolgate_core::names::lower_key;
        if !self.kind_applies(kind) {
            return false;
        }
        if let Some(g) = &self.server {
            match server {
                Some(server) if kind == ToolKind::Mcp => {
                    if !g.matches_lower(&lower_key(server)) {
                        return false;
                    }
                }
                _ => return false,
            }
        }
        self.tool
            .as_ref()
            .is_none_or(|g| g.matches_lower(&lower_key(tool)))
    }

    /// Whether the selection matches one call's record (R18–R20), names compared ASCII
    /// case-insensitively.
    pub(crate) fn matches_call(
        &self,
        subject: &super::Subject<'_>,
        input: &Value,
        literals: &crate::number::NumberLiterals,
    ) -> bool {
        use toolgate_core::names::lower_key;
        let tool = lower_key(subject.tool);
        let server = subject.server.map(lower_key);
        let agent = lower_key(subject.agent);
        let lower = LowerSubject {
            kind: subject.kind,
            tool: &tool,
            server: server.as_deref(),
            agent: &agent,
        };
        self.matches(&lower, input, literals.root())
    }

    pub(super) fn matches(&self, s: &LowerSubject<'_>, input: &Value, lits: Lit<'_>) -> bool {
        self.matches_selectors(s) && self.when_holds(input, lits)
    }

    /// Whether every `when` test holds on the input (true with no `when`).
    pub(super) fn when_holds(&self, input: &Value, lits: Lit<'_>) -> bool {
        self.when
            .iter()
            .all(|(_, path, test)| test.holds(lookup(input, lits, path)))
    }

    /// Whether `kind`, `server`, `tool` and `agent` select the call, leaving `when` aside:
    /// with no `when` this is [`Rule::matches`] for every input.
    pub(super) fn matches_selectors(&self, s: &LowerSubject<'_>) -> bool {
        if !self.kind_applies(s.kind) {
            return false;
        }
        if let Some(g) = &self.server {
            // R19: a rule with `server` never matches an http or local tool.
            match s.server {
                Some(server) if s.kind == ToolKind::Mcp => {
                    if !g.matches_lower(server) {
                        return false;
                    }
                }
                _ => return false,
            }
        }
        if let Some(g) = &self.tool
            && !g.matches_lower(s.tool)
        {
            return false;
        }
        if let Some(g) = &self.agent
            && !g.matches_lower(s.agent)
        {
            return false;
        }
        true
    }
}

/// Walks objects only (R20): an array is never indexed.
fn lookup<'v>(input: &'v Value, lits: Lit<'v>, path: &[String]) -> Option<(&'v Value, Lit<'v>)> {
    let mut at = input;
    let mut lit = lits;
    for seg in path {
        at = at.as_object()?.get(seg)?;
        lit = number::member(lit, seg);
    }
    Some((at, lit))
}

impl Test {
    fn holds(&self, value: Option<(&Value, Lit<'_>)>) -> bool {
        // R20: a path the input does not have never matches, whatever the test.
        let Some((v, lit)) = value else {
            return false;
        };
        let eq = |w: &Operand| json_eq(v, lit, &w.value, w.literals.as_ref());
        if let Some(want) = &self.equals
            && !eq(want)
        {
            return false;
        }
        if let Some(list) = &self.in_list
            && !list.iter().any(eq)
        {
            return false;
        }
        let num_test = |bound: &Option<Exact>, ok: fn(Ordering) -> bool| match bound {
            None => true,
            Some(b) => match v {
                Value::Number(n) => Exact::of(n, lit).and_then(|x| x.compare(b)).is_some_and(ok),
                _ => false,
            },
        };
        if !num_test(&self.gt, |o| o == Ordering::Greater)
            || !num_test(&self.gte, |o| o != Ordering::Less)
            || !num_test(&self.lt, |o| o == Ordering::Less)
            || !num_test(&self.lte, |o| o != Ordering::Greater)
        {
            return false;
        }
        if let Some(re) = &self.matches {
            match v {
                Value::String(s) => {
                    if !re.is_match(s) {
                        return false;
                    }
                }
                _ => return false,
            }
        }
        true
    }
}

/// JSON equality with numbers compared by exact value (R20), each side with its literals.
/// Recursion is bounded by the operand's depth, which serde_json's parser limits to 128.
fn json_eq(a: &Value, al: Lit<'_>, b: &Value, bl: Lit<'_>) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (Exact::of(x, al), Exact::of(y, bl)) {
            (Some(x), Some(y)) => x.compare(&y) == Some(Ordering::Equal),
            _ => false,
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .enumerate()
                    .all(|(i, (p, q))| json_eq(p, number::item(al, i), q, number::item(bl, i)))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter().all(|(k, p)| {
                    y.get(k).is_some_and(|q| {
                        json_eq(p, number::member(al, k), q, number::member(bl, k))
                    })
                })
        }
        _ => a == b,
    }
}
