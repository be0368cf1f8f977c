//! The tenant rule policy (SPEC R18–R23, R37; seed 002).
//!
//! A policy is parsed and validated whole, compiled once into an index (exact names hashed,
//! `*` patterns in byte tries by their literal prefix or suffix, `when` paths pre-split; see
//! `index.rs`), and evaluated strictest-wins: `deny`, then `ask`, then `allow`, then the
//! policy `default`.
//!
//! ```
//! use serde_json::json;
//! use toolgate_core::ToolKind;
//! use toolgate_engine::policy::{Effect, Limits, Policy, Subject};
//!
//! let policy = Policy::from_json(&json!({"rules": [
//!     {"effect": "deny", "kind": "http", "tool": "refund_*", "when": {"amount": {"gt": 10000}},
//!      "reason": "Refunds over 10000 are refused"}
//! ]}), &Limits::default()).unwrap();
//! let subject = Subject { kind: ToolKind::Http, tool: "refund_order", server: None, agent: "support" };
//! assert_eq!(policy.evaluate(&subject, &json!({"amount": 20000})).effect, Some(Effect::Deny));
//! assert_eq!(policy.evaluate(&subject, &json!({"amount": 5})).effect, None);
//! ```

mod glob;
mod index;

use std::cmp::Ordering;
use std::fmt;

use regex::{Regex, RegexBuilder};
use serde_json::Value;
use toolgate_core::ToolKind;
use toolgate_core::names::lower_key;

pub use glob::Glob;
use index::Index;

use crate::error::{ConfigErrors, Obj, field, index, type_name};
use crate::number::{self, Exact, Lit, Node, NumberLiterals};

/// The `regex` crate's default compiled-size limit, R37's bound unless the config sets a
/// smaller one.
pub const DEFAULT_REGEX_SIZE_LIMIT: usize = 10 * (1 << 20);

/// Limits on policies and call inputs (R22, R36, R37; SPEC §7 `limits`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// At most this many rules (`tool_rules`, 200).
    pub tool_rules: usize,
    /// A selector or `when` path is at most this many characters (`tool_rule_field_chars`, 200).
    pub tool_rule_field_chars: usize,
    /// A `reason` or `matches` is at most this many characters (`tool_rule_text_chars`, 500).
    pub tool_rule_text_chars: usize,
    /// A call's input is at most this many bytes, compact (`max_input_bytes`, 1 MiB).
    pub max_input_bytes: usize,
    /// A call's input nests at most this deep (`max_input_depth`, 64).
    pub max_input_depth: usize,
    /// A `matches` expression compiles to at most this many bytes (`regex_size_limit`).
    pub regex_size_limit: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            tool_rules: 200,
            tool_rule_field_chars: 200,
            tool_rule_text_chars: 500,
            max_input_bytes: 1 << 20,
            max_input_depth: 64,
            regex_size_limit: DEFAULT_REGEX_SIZE_LIMIT,
        }
    }
}

/// The deepest `max_input_depth` a configuration may set: inputs are parsed and compared
/// recursively once they are proved no deeper than the bound, so the bound itself is bounded.
pub const MAX_INPUT_DEPTH_CEILING: usize = 1024;

/// A rule's effect, or the policy default's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Effect {
    /// Run.
    Allow,
    /// Ask a person.
    Ask,
    /// Refuse with `denied`.
    Deny,
}

impl Effect {
    /// The spelling in policies.
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::Allow => "allow",
            Effect::Ask => "ask",
            Effect::Deny => "deny",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "allow" => Effect::Allow,
            "ask" => Effect::Ask,
            "deny" => Effect::Deny,
            _ => return None,
        })
    }
}

impl fmt::Display for Effect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One test on a `when` field (R20). Numbers are kept as written (see
/// [`crate::number`]): an integer literal of any size compares by its digits.
#[derive(Debug, Clone)]
struct Test {
    equals: Option<Operand>,
    in_list: Option<Vec<Operand>>,
    gt: Option<Exact>,
    gte: Option<Exact>,
    lt: Option<Exact>,
    lte: Option<Exact>,
    matches: Option<Regex>,
}

/// An `equals` or `in` operand with the number literals its value does not reproduce.
#[derive(Debug, Clone)]
struct Operand {
    value: Value,
    literals: Option<Node>,
}

/// One rule (R18).
#[derive(Debug, Clone)]
pub struct Rule {
    effect: Effect,
    tool: Option<Glob>,
    server: Option<Glob>,
    kind: Option<ToolKind>,
    agent: Option<Glob>,
    when: Vec<(String, Vec<String>, Test)>,
    reason: Option<Box<str>>,
    /// The rule as written, as compact JSON text with every number as written (R20): one
    /// string instead of a parsed object per rule (issue 12: memory per rule).
    source: Box<str>,
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

    /// Whether the rule sets `when`.
    pub fn has_when(&self) -> bool {
        !self.when.is_empty()
    }

    /// The rule as written, parsed from [`Rule::source_text`] (a new value per call).
    pub fn source(&self) -> Value {
        // The text was written by this crate from a parsed value: it always parses.
        serde_json::from_str(&self.source).unwrap_or(Value::Null)
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
            // R15/R18: a rule that does not name a kind applies to mcp and http calls only.
            None => matches!(kind, ToolKind::Mcp | ToolKind::Http),
            Some(k) => k == kind,
        }
    }

    fn matches(&self, s: &LowerSubject<'_>, input: &Value, lits: Lit<'_>) -> bool {
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
        self.when
            .iter()
            .all(|(_, path, test)| test.holds(lookup(input, lits, path)))
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
                Value::Number(n) => Exact::of(n, lit).and_then(|x| x.cmp(b)).is_some_and(ok),
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
            (Some(x), Some(y)) => x.cmp(&y) == Some(Ordering::Equal),
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

/// What a call looks like to the rules: the tool's own name on its source and the server
/// as the source spelled them (R3), and the calling agent's name (R19).
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    /// The tool's kind.
    pub kind: ToolKind,
    /// The tool's own raw name.
    pub tool: &'a str,
    /// The MCP server's name, for MCP tools.
    pub server: Option<&'a str>,
    /// The agent's profile name, or the subagent's id.
    pub agent: &'a str,
}

struct LowerSubject<'a> {
    kind: ToolKind,
    tool: &'a str,
    server: Option<&'a str>,
    agent: &'a str,
}

/// The result of evaluating a policy against one call.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Evaluation {
    /// The strictest effect: of the matching rules, else the default (for mcp/http calls);
    /// `None` when nothing applies (the call runs).
    pub effect: Option<Effect>,
    /// The deciding rule's index, `None` when the default or nothing decided.
    pub decided_by: Option<usize>,
    /// Every matching rule, in policy order.
    pub matched: Vec<usize>,
    /// Whether the policy default decided.
    pub by_default: bool,
}

/// A compiled, validated tenant policy. Immutable: replacing a policy builds a new one.
#[derive(Debug, Clone)]
pub struct Policy {
    default: Effect,
    rules: Vec<Rule>,
    updated_at: Option<String>,
    index: Index,
}

const POLICY_FIELDS: &[&str] = &["default", "rules", "updatedAt"];
const RULE_FIELDS: &[&str] = &[
    "effect", "tool", "server", "kind", "agent", "when", "reason",
];
const TEST_FIELDS: &[&str] = &["equals", "in", "gt", "gte", "lt", "lte", "matches"];
const EFFECTS: &[&str] = &["allow", "ask", "deny"];
const KINDS: &[&str] = &["mcp", "http", "local"];

impl Default for Policy {
    fn default() -> Self {
        Self::empty()
    }
}

impl Policy {
    /// The empty policy: no rules, default `allow` (R23: every call is allowed).
    pub fn empty() -> Self {
        Self {
            default: Effect::Allow,
            rules: Vec::new(),
            updated_at: None,
            index: Index::default(),
        }
    }

    /// Parses and validates a policy (`{"default", "rules", "updatedAt"}`, only `rules`
    /// required). Every problem is reported with its path; a policy with any problem is
    /// refused whole (R22).
    pub fn from_json(value: &Value, limits: &Limits) -> Result<Self, ConfigErrors> {
        let mut errs = ConfigErrors::default();
        let policy = Self::read(value, None, "", limits, &mut errs);
        match policy {
            Some(p) if errs.is_empty() => Ok(p),
            _ => {
                if errs.is_empty() {
                    errs.push("", "the policy could not be read");
                }
                Err(errs)
            }
        }
    }

    /// Parses policy JSON text (duplicate keys are malformed, SPEC §8). Numbers in tests
    /// keep their literal: an integer past 64 bits compares by its digits (R20).
    pub fn from_json_str(text: &str, limits: &Limits) -> Result<Self, ConfigErrors> {
        let value = crate::json::parse_strict_json(text)
            .map_err(|e| ConfigErrors::one("", format!("malformed JSON: {e}")))?;
        let literals = NumberLiterals::scan(text);
        let mut errs = ConfigErrors::default();
        match Self::read(&value, literals.root(), "", limits, &mut errs) {
            Some(p) if errs.is_empty() => Ok(p),
            _ => {
                if errs.is_empty() {
                    errs.push("", "the policy could not be read");
                }
                Err(errs)
            }
        }
    }

    /// Reads a policy at `path`; `lits` are the number literals of its text, if any.
    pub(crate) fn read(
        value: &Value,
        lits: Lit<'_>,
        path: &str,
        limits: &Limits,
        errs: &mut ConfigErrors,
    ) -> Option<Self> {
        let before = errs.errors.len();
        let obj = Obj::open(value, path, POLICY_FIELDS, errs)?;
        let default = obj
            .choice("default", EFFECTS, Effect::parse, errs)
            .unwrap_or(Effect::Allow);
        let updated_at = obj.str("updatedAt", errs).map(str::to_owned);
        if !obj.has("rules") {
            errs.push(obj.path_of("rules"), "`rules` is required");
        }
        let mut rules = Vec::new();
        if let Some(items) = obj.array("rules", errs) {
            if items.len() > limits.tool_rules {
                errs.push(
                    obj.path_of("rules"),
                    format!(
                        "{} rules is more than the limit `tool_rules` ({})",
                        items.len(),
                        limits.tool_rules
                    ),
                );
            }
            let rules_path = obj.path_of("rules");
            for (i, item) in items.iter().enumerate() {
                let lit = number::item(number::member(lits, "rules"), i);
                if let Some(rule) = read_rule(item, lit, &index(&rules_path, i), limits, errs) {
                    rules.push(rule);
                }
            }
        }
        if errs.errors.len() > before {
            return None;
        }
        rules.shrink_to_fit();
        let index = Index::build(&rules);
        Some(Self {
            default,
            rules,
            updated_at,
            index,
        })
    }

    /// The rules, in order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The default effect for mcp/http calls no rule matches (R21).
    pub fn default_effect(&self) -> Effect {
        self.default
    }

    /// The `updatedAt` the stored policy carries.
    pub fn updated_at(&self) -> Option<&str> {
        self.updated_at.as_deref()
    }

    /// Whether the policy is *empty* for R15/R23: no rules and default `allow`.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty() && self.default == Effect::Allow
    }

    /// The policy as JSON, as a stored policy's `get` prints it (what `put` takes back).
    pub fn to_json(&self) -> Value {
        let mut map = serde_json::Map::new();
        map.insert("default".into(), Value::from(self.default.as_str()));
        map.insert(
            "rules".into(),
            Value::Array(self.rules.iter().map(Rule::source).collect()),
        );
        if let Some(u) = &self.updated_at {
            map.insert("updatedAt".into(), Value::from(u.as_str()));
        }
        Value::Object(map)
    }

    /// The policy as JSON text, every number as written (an integer past 64 bits keeps its
    /// digits, which [`Policy::to_json`]'s value cannot): what a store should keep, so
    /// that reading it back with [`Policy::from_json_str`] decides the same (R20, R22).
    pub fn to_json_text(&self) -> String {
        self.text(true)
    }

    /// As [`Policy::to_json_text`], without `updatedAt` (a stored policy's body).
    pub fn body_text(&self) -> String {
        self.text(false)
    }

    fn text(&self, updated_at: bool) -> String {
        let mut out = String::from("{\"default\":");
        out.push_str(&Value::from(self.default.as_str()).to_string());
        out.push_str(",\"rules\":[");
        for (i, rule) in self.rules.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&rule.source);
        }
        out.push(']');
        if let Some(u) = self.updated_at.as_deref().filter(|_| updated_at) {
            out.push_str(",\"updatedAt\":");
            out.push_str(&Value::from(u).to_string());
        }
        out.push('}');
        out
    }

    /// A copy stamped with `updatedAt`.
    #[must_use]
    pub fn with_updated_at(mut self, updated_at: impl Into<String>) -> Self {
        self.updated_at = Some(updated_at.into());
        self
    }

    /// Evaluates the policy for one call (R18–R21): strictest matching rule, then the
    /// default for mcp/http calls no rule matches; `allow` rules only let a call through
    /// the default.
    pub fn evaluate(&self, subject: &Subject<'_>, input: &Value) -> Evaluation {
        self.evaluate_exact(subject, input, NumberLiterals::none())
    }

    /// As [`Policy::evaluate`], reading the input's numbers as written where `literals`
    /// records them (an integer past 64 bits compares by its digits, R20).
    pub fn evaluate_exact(
        &self,
        subject: &Subject<'_>,
        input: &Value,
        literals: &NumberLiterals,
    ) -> Evaluation {
        if self.rules.is_empty() {
            return self.default_only(subject.kind);
        }
        let tool = lower_key(subject.tool);
        let server = subject.server.map(lower_key);
        let agent = lower_key(subject.agent);
        let lower = LowerSubject {
            kind: subject.kind,
            tool: &tool,
            server: server.as_deref(),
            agent: &agent,
        };
        let mut eval = Evaluation::default();
        // Candidates come each once but in no order (index.rs): the strictest effect wins and,
        // among rules of that effect, the first in policy order, as in the plain loop.
        self.index.for_each_candidate(&tool, lower.server, |i| {
            let Some(rule) = self.rules.get(i) else {
                return;
            };
            if rule.matches(&lower, input, literals.root()) {
                eval.matched.push(i);
                let decides = match (eval.effect, eval.decided_by) {
                    (Some(e), Some(d)) => rule.effect > e || (rule.effect == e && i < d),
                    _ => true,
                };
                if decides {
                    eval.effect = Some(rule.effect);
                    eval.decided_by = Some(i);
                }
            }
        });
        eval.matched.sort_unstable();
        if eval.effect.is_none() && matches!(subject.kind, ToolKind::Mcp | ToolKind::Http) {
            // R21: the default applies to mcp and http calls that no rule matches.
            if self.default != Effect::Allow {
                eval.effect = Some(self.default);
                eval.by_default = true;
            }
        }
        eval
    }

    fn default_only(&self, kind: ToolKind) -> Evaluation {
        let mut eval = Evaluation::default();
        if matches!(kind, ToolKind::Mcp | ToolKind::Http) && self.default != Effect::Allow {
            eval.effect = Some(self.default);
            eval.by_default = true;
        }
        eval
    }

    /// The reference evaluation: a loop over every rule with no index, straight from the
    /// SPEC. Used by the differential tests and benches.
    pub fn evaluate_naive(&self, subject: &Subject<'_>, input: &Value) -> Evaluation {
        self.evaluate_naive_exact(subject, input, NumberLiterals::none())
    }

    /// As [`Policy::evaluate_naive`], with the input's number literals.
    pub fn evaluate_naive_exact(
        &self,
        subject: &Subject<'_>,
        input: &Value,
        literals: &NumberLiterals,
    ) -> Evaluation {
        let tool = subject.tool.to_ascii_lowercase();
        let server = subject.server.map(str::to_ascii_lowercase);
        let agent = subject.agent.to_ascii_lowercase();
        let lower = LowerSubject {
            kind: subject.kind,
            tool: &tool,
            server: server.as_deref(),
            agent: &agent,
        };
        let mut eval = Evaluation::default();
        for (i, rule) in self.rules.iter().enumerate() {
            if rule.matches(&lower, input, literals.root()) {
                eval.matched.push(i);
                if eval.effect.is_none_or(|e| rule.effect > e) {
                    eval.effect = Some(rule.effect);
                    eval.decided_by = Some(i);
                }
            }
        }
        if eval.effect.is_none()
            && matches!(subject.kind, ToolKind::Mcp | ToolKind::Http)
            && self.default != Effect::Allow
        {
            eval.effect = Some(self.default);
            eval.by_default = true;
        }
        eval
    }
}

fn chars(s: &str) -> usize {
    s.chars().count()
}

fn read_selector(
    obj: &Obj<'_>,
    key: &str,
    limits: &Limits,
    errs: &mut ConfigErrors,
) -> Option<Glob> {
    let s = obj.non_blank(key, errs)?;
    if chars(s) > limits.tool_rule_field_chars {
        errs.push(
            obj.path_of(key),
            format!(
                "`{key}` is {} characters, more than the limit `tool_rule_field_chars` ({})",
                chars(s),
                limits.tool_rule_field_chars
            ),
        );
        return None;
    }
    Some(Glob::new(s))
}

fn read_rule(
    value: &Value,
    lits: Lit<'_>,
    path: &str,
    limits: &Limits,
    errs: &mut ConfigErrors,
) -> Option<Rule> {
    let before = errs.errors.len();
    let obj = Obj::open(value, path, RULE_FIELDS, errs)?;
    if !obj.has("effect") {
        errs.push(obj.path_of("effect"), "`effect` is required");
    }
    let effect = obj.choice("effect", EFFECTS, Effect::parse, errs);
    let tool = read_selector(&obj, "tool", limits, errs);
    if let Some(t) = &tool
        && t.as_str().contains("__")
    {
        errs.push(
            obj.path_of("tool"),
            format!(
                "`{}` contains `__`: a rule names the tool's own name on its server (with `server`), never the qualified name the model sees (R3)",
                t.as_str()
            ),
        );
    }
    let server = read_selector(&obj, "server", limits, errs);
    let agent = read_selector(&obj, "agent", limits, errs);
    let kind = obj.choice(
        "kind",
        KINDS,
        |s| match s {
            "mcp" => Some(ToolKind::Mcp),
            "http" => Some(ToolKind::Http),
            "local" => Some(ToolKind::Local),
            _ => None,
        },
        errs,
    );
    let reason: Option<Box<str>> = obj.str("reason", errs).map(Box::from);
    if let Some(r) = &reason
        && chars(r) > limits.tool_rule_text_chars
    {
        errs.push(
            obj.path_of("reason"),
            format!(
                "`reason` is {} characters, more than the limit `tool_rule_text_chars` ({})",
                chars(r),
                limits.tool_rule_text_chars
            ),
        );
    }
    let mut when = Vec::new();
    if let Some(w) = obj.raw("when", errs) {
        let wpath = obj.path_of("when");
        match w {
            Value::Object(map) => {
                for (p, test) in map {
                    let tpath = field(&wpath, p);
                    if chars(p) > limits.tool_rule_field_chars {
                        errs.push(
                            &tpath,
                            format!(
                                "the path is {} characters, more than the limit `tool_rule_field_chars` ({})",
                                chars(p),
                                limits.tool_rule_field_chars
                            ),
                        );
                    }
                    let segs: Vec<String> = p.split('.').map(str::to_owned).collect();
                    if segs.iter().any(String::is_empty) {
                        errs.push(&tpath, format!("the path `{p}` has an empty segment"));
                    }
                    let lit = number::member(number::member(lits, "when"), p);
                    if let Some(t) = read_test(test, lit, &tpath, limits, errs) {
                        when.push((p.clone(), segs, t));
                    }
                }
            }
            other => errs.push(
                wpath,
                format!(
                    "expected an object of tests by path, found {}",
                    type_name(other)
                ),
            ),
        }
    }
    if errs.errors.len() > before {
        return None;
    }
    Some(Rule {
        effect: effect?,
        tool,
        server,
        kind,
        agent,
        when,
        reason,
        source: {
            let mut text = String::new();
            number::write_text(&mut text, value, lits);
            text.into_boxed_str()
        },
    })
}

fn read_test(
    value: &Value,
    lits: Lit<'_>,
    path: &str,
    limits: &Limits,
    errs: &mut ConfigErrors,
) -> Option<Test> {
    let before = errs.errors.len();
    let obj = Obj::open(value, path, TEST_FIELDS, errs)?;
    // `equals` and `in` take any JSON value, `null` included (SPEC §8).
    let raw = |key: &str| -> Option<&Value> { value.as_object().and_then(|m| m.get(key)) };
    let equals = raw("equals").map(|v| Operand {
        value: v.clone(),
        literals: number::member(lits, "equals").cloned(),
    });
    let in_list = match raw("in") {
        None => None,
        Some(Value::Array(items)) => Some(
            items
                .iter()
                .enumerate()
                .map(|(i, v)| Operand {
                    value: v.clone(),
                    literals: number::item(number::member(lits, "in"), i).cloned(),
                })
                .collect(),
        ),
        Some(other) => {
            errs.push(
                obj.path_of("in"),
                format!("`in` must be a list, found {}", type_name(other)),
            );
            None
        }
    };
    let mut num = |key: &str| -> Option<Exact> {
        match raw(key) {
            None => None,
            Some(Value::Number(n)) => {
                let exact = Exact::of(n, number::member(lits, key));
                if exact.is_none() {
                    errs.push(obj.path_of(key), format!("`{key}` is not a finite number"));
                }
                exact
            }
            Some(other) => {
                errs.push(
                    obj.path_of(key),
                    format!("`{key}` compares numbers; found {}", type_name(other)),
                );
                None
            }
        }
    };
    let gt = num("gt");
    let gte = num("gte");
    let lt = num("lt");
    let lte = num("lte");
    let mut matches = None;
    if let Some(pattern) = obj.str("matches", errs) {
        if chars(pattern) > limits.tool_rule_text_chars {
            errs.push(
                obj.path_of("matches"),
                format!(
                    "`matches` is {} characters, more than the limit `tool_rule_text_chars` ({})",
                    chars(pattern),
                    limits.tool_rule_text_chars
                ),
            );
        } else {
            // R37: compiled with a size limit; past it is a validation error, never a slow call.
            match RegexBuilder::new(pattern)
                .size_limit(limits.regex_size_limit)
                .dfa_size_limit(limits.regex_size_limit)
                .build()
            {
                Ok(re) => matches = Some(re),
                Err(e) => errs.push(
                    obj.path_of("matches"),
                    format!(
                        "`{pattern}` is not a valid regular expression: {}",
                        one_line(&e.to_string())
                    ),
                ),
            }
        }
    }
    if errs.errors.len() > before {
        return None;
    }
    Some(Test {
        equals,
        in_list,
        gt,
        gte,
        lt,
        lte,
        matches,
    })
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(v: Value) -> Policy {
        Policy::from_json(&v, &Limits::default()).unwrap()
    }

    fn http(tool: &str) -> Subject<'_> {
        Subject {
            kind: ToolKind::Http,
            tool,
            server: None,
            agent: "a",
        }
    }

    fn mcp<'a>(server: &'a str, tool: &'a str) -> Subject<'a> {
        Subject {
            kind: ToolKind::Mcp,
            tool,
            server: Some(server),
            agent: "a",
        }
    }

    fn errors(v: Value) -> Vec<String> {
        Policy::from_json(&v, &Limits::default())
            .unwrap_err()
            .errors
            .into_iter()
            .map(|e| e.path)
            .collect()
    }

    #[test]
    fn r18_effect_only_matches_every_mcp_and_http_call() {
        let p = policy(json!({"rules": [{"effect": "deny"}]}));
        assert_eq!(
            p.evaluate(&http("x"), &json!({})).effect,
            Some(Effect::Deny)
        );
        assert_eq!(
            p.evaluate(&mcp("s", "x"), &json!({})).effect,
            Some(Effect::Deny)
        );
        let local = Subject {
            kind: ToolKind::Local,
            tool: "x",
            server: None,
            agent: "a",
        };
        assert_eq!(
            p.evaluate(&local, &json!({})).effect,
            None,
            "R15: local only where a rule names it"
        );
        let p = policy(json!({"rules": [{"effect": "deny", "kind": "local"}]}));
        assert_eq!(p.evaluate(&local, &json!({})).effect, Some(Effect::Deny));
        assert_eq!(p.evaluate(&http("x"), &json!({})).effect, None);
    }

    #[test]
    fn r19_server_never_matches_http() {
        let p = policy(json!({"rules": [{"effect": "deny", "server": "*"}]}));
        assert_eq!(p.evaluate(&http("x"), &json!({})).effect, None);
        assert_eq!(
            p.evaluate(&mcp("gh", "x"), &json!({})).effect,
            Some(Effect::Deny)
        );
    }

    #[test]
    fn r19_agent_pattern() {
        let p = policy(json!({"rules": [{"effect": "ask", "agent": "sup*"}]}));
        let mut s = http("x");
        s.agent = "Support";
        assert_eq!(p.evaluate(&s, &json!({})).effect, Some(Effect::Ask));
        s.agent = "sub-1";
        assert_eq!(p.evaluate(&s, &json!({})).effect, None);
    }

    #[test]
    fn r16_strictest_wins_whatever_the_order() {
        let p = policy(json!({"rules": [
            {"effect": "allow"}, {"effect": "ask", "tool": "x"}, {"effect": "deny", "tool": "x*"}
        ]}));
        let e = p.evaluate(&http("xy"), &json!({}));
        assert_eq!(e.effect, Some(Effect::Deny));
        assert_eq!(e.decided_by, Some(2));
        assert_eq!(e.matched, vec![0, 2]);
    }

    #[test]
    fn r20_when_tests() {
        let p = policy(json!({"rules": [
            {"effect": "deny", "when": {"customer.tier": {"equals": "free"}, "amount": {"gte": 100}}},
        ]}));
        let deny = |input: Value| p.evaluate(&http("r"), &input).effect == Some(Effect::Deny);
        assert!(deny(json!({"customer": {"tier": "free"}, "amount": 100})));
        assert!(deny(json!({"customer": {"tier": "free"}, "amount": 100.0})));
        assert!(!deny(json!({"customer": {"tier": "free"}, "amount": 99})));
        assert!(
            !deny(json!({"amount": 500})),
            "a missing path never matches"
        );
        assert!(
            !deny(json!({"customer": {"tier": "free"}, "amount": "500"})),
            "gte holds only for numbers"
        );
        assert!(
            !deny(json!({"customer": [{"tier": "free"}], "amount": 500})),
            "arrays are never indexed"
        );
    }

    #[test]
    fn r20_equals_null_and_presence() {
        let p = policy(json!({"rules": [{"effect": "deny", "when": {"a": {"equals": null}}}]}));
        assert_eq!(
            p.evaluate(&http("r"), &json!({"a": null})).effect,
            Some(Effect::Deny)
        );
        assert_eq!(p.evaluate(&http("r"), &json!({})).effect, None);
        let p = policy(json!({"rules": [{"effect": "deny", "when": {"a": {}}}]}));
        assert_eq!(
            p.evaluate(&http("r"), &json!({"a": 0})).effect,
            Some(Effect::Deny)
        );
        assert_eq!(p.evaluate(&http("r"), &json!({"b": 0})).effect, None);
    }

    #[test]
    fn r20_in_and_matches() {
        let p = policy(json!({"rules": [
            {"effect": "deny", "when": {"region": {"in": ["eu", 1]}}},
            {"effect": "ask", "when": {"note": {"matches": "urgent"}}},
        ]}));
        assert_eq!(
            p.evaluate(&http("r"), &json!({"region": "eu"})).effect,
            Some(Effect::Deny)
        );
        assert_eq!(
            p.evaluate(&http("r"), &json!({"region": 1.0})).effect,
            Some(Effect::Deny)
        );
        assert_eq!(
            p.evaluate(&http("r"), &json!({"region": "us"})).effect,
            None
        );
        assert_eq!(
            p.evaluate(&http("r"), &json!({"note": "very urgent!"}))
                .effect,
            Some(Effect::Ask)
        );
        assert_eq!(p.evaluate(&http("r"), &json!({"note": 5})).effect, None);
    }

    #[test]
    fn r20_numbers_compare_exactly_past_2_pow_53() {
        let big = |n: &str| -> Exact {
            let n: serde_json::Number = serde_json::from_str(n).unwrap();
            Exact::of(&n, None).unwrap()
        };
        let cmp_num = |a: &Exact, b: &Exact| a.cmp(b);
        assert_eq!(
            cmp_num(&big("9007199254740993"), &big("9007199254740992.0")),
            Some(Ordering::Greater)
        );
        assert_eq!(
            cmp_num(&big("9007199254740992.0"), &big("9007199254740993")),
            Some(Ordering::Less)
        );
        assert_eq!(
            cmp_num(&big("18446744073709551615"), &big("18446744073709551616.0")),
            Some(Ordering::Less)
        );
        assert_eq!(cmp_num(&big("3"), &big("3.5")), Some(Ordering::Less));
        assert_eq!(cmp_num(&big("-3"), &big("-3.5")), Some(Ordering::Greater));
        assert_eq!(cmp_num(&big("1"), &big("1.0")), Some(Ordering::Equal));
        assert_eq!(cmp_num(&big("1"), &big("1e300")), Some(Ordering::Less));
        assert_eq!(cmp_num(&big("-1"), &big("-1e300")), Some(Ordering::Greater));
    }

    #[test]
    fn r21_default_applies_only_without_a_match() {
        let p = policy(
            json!({"default": "deny", "rules": [{"effect": "allow", "tool": "ok"}, {"effect": "ask", "tool": "q*"}]}),
        );
        assert_eq!(
            p.evaluate(&http("x"), &json!({})).effect,
            Some(Effect::Deny)
        );
        assert!(p.evaluate(&http("x"), &json!({})).by_default);
        assert_eq!(
            p.evaluate(&http("ok"), &json!({})).effect,
            Some(Effect::Allow)
        );
        assert_eq!(
            p.evaluate(&http("q1"), &json!({})).effect,
            Some(Effect::Ask)
        );
    }

    #[test]
    fn r22_validation_names_every_problem() {
        let paths = errors(json!({"rules": [
            {"effect": "block"},
            {"effect": "ask", "tool": "github__create_issue"},
            {"effect": "ask", "colour": "red"},
            {"effect": "ask", "when": {"a..b": {"gt": "5"}}},
            {"effect": "ask", "when": {"a": {"matches": "("}}},
            {"effect": "ask", "when": {"a": {"in": 5}}},
            {"tool": "x"},
            {"effect": "ask", "tool": "  "},
            {"effect": "ask", "reason": null},
        ], "extra": 1}));
        assert_eq!(
            paths,
            [
                "extra",
                "rules[0].effect",
                "rules[1].tool",
                "rules[2].colour",
                "rules[3].when[\"a..b\"]",
                "rules[3].when[\"a..b\"].gt",
                "rules[4].when.a.matches",
                "rules[5].when.a.in",
                "rules[6].effect",
                "rules[7].tool",
                "rules[8].reason",
            ]
        );
    }

    #[test]
    fn r22_limits() {
        let limits = Limits {
            tool_rules: 2,
            tool_rule_field_chars: 3,
            tool_rule_text_chars: 4,
            ..Limits::default()
        };
        let err = Policy::from_json(
            &json!({"rules": [{"effect": "ask"}, {"effect": "ask"}, {"effect": "ask"}]}),
            &limits,
        )
        .unwrap_err();
        assert_eq!(err.errors[0].path, "rules");
        assert!(
            Policy::from_json(
                &json!({"rules": [{"effect": "ask", "tool": "abcd"}]}),
                &limits
            )
            .is_err()
        );
        assert!(
            Policy::from_json(
                &json!({"rules": [{"effect": "ask", "tool": "äöü"}]}),
                &limits
            )
            .is_ok(),
            "counted in scalar values"
        );
        assert!(
            Policy::from_json(
                &json!({"rules": [{"effect": "ask", "reason": "12345"}]}),
                &limits
            )
            .is_err()
        );
        assert!(
            Policy::from_json(
                &json!({"rules": [{"effect": "ask", "when": {"abcd": {}}}]}),
                &limits
            )
            .is_err()
        );
    }

    #[test]
    fn r37_regex_size_limit_is_a_validation_error() {
        let limits = Limits {
            regex_size_limit: 1000,
            ..Limits::default()
        };
        let big =
            json!({"rules": [{"effect": "ask", "when": {"a": {"matches": "\\w{50}\\w{50}"}}}]});
        assert!(Policy::from_json(&big, &limits).is_err());
        assert!(Policy::from_json(&big, &Limits::default()).is_ok());
        let lookaround = json!({"rules": [{"effect": "ask", "when": {"a": {"matches": "(?=x)"}}}]});
        assert!(Policy::from_json(&lookaround, &Limits::default()).is_err());
    }

    #[test]
    fn r23_empty() {
        assert!(policy(json!({"rules": []})).is_empty());
        assert!(!policy(json!({"default": "ask", "rules": []})).is_empty());
        assert_eq!(
            policy(json!({"rules": []}))
                .evaluate(&http("x"), &json!({}))
                .effect,
            None
        );
    }

    #[test]
    fn index_agrees_with_the_naive_loop_on_bucketed_rules() {
        let p = policy(json!({"rules": [
            {"effect": "ask", "tool": "create_issue"},
            {"effect": "deny", "tool": "refund_*"},
            {"effect": "ask", "tool": "*_order"},
            {"effect": "ask", "server": "github"},
            {"effect": "deny", "server": "git*"},
            {"effect": "ask", "tool": "*x*"},
        ]}));
        for (server, tool) in [
            ("github", "create_issue"),
            ("gitlab", "refund_order"),
            ("x", "y"),
            ("GitHub", "fox"),
        ] {
            let s = mcp(server, tool);
            assert_eq!(
                p.evaluate(&s, &json!({})),
                p.evaluate_naive(&s, &json!({})),
                "{server} {tool}"
            );
        }
    }

    #[test]
    fn round_trip_to_json() {
        let v = json!({"default": "ask", "rules": [{"effect": "deny", "tool": "x"}], "updatedAt": "2026-01-01T00:00:00Z"});
        let p = policy(v.clone());
        assert_eq!(p.to_json(), v);
    }
}
