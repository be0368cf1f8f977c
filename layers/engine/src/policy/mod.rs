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
pub(crate) mod label_bits;
mod limits;
mod parse;
mod quota;
mod rule;
mod select;
#[cfg(test)]
mod tests;

use serde_json::Value;
use toolgate_core::ToolKind;
use toolgate_core::names::lower_key;

pub use glob::Glob;
use index::Index;
pub use limits::{DEFAULT_REGEX_SIZE_LIMIT, Limits, MAX_INPUT_DEPTH_CEILING};
pub use parse::MAX_APPROVALS;
pub use quota::{PerKey, QUOTA_MAX_CEILING, QUOTA_WINDOW_CEILING_SECS, Quota};
pub use rule::Rule;
pub(crate) use select::read_selection;
/// A rule's effect, or the policy default's (defined in `toolgate-core`, which
/// [`toolgate_core::MatchedRule`] also uses).
pub use toolgate_core::Effect;

use crate::error::ConfigErrors;
use crate::number::NumberLiterals;

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

/// A call's labels (R49): the called tool's, and its session's before this call (`None`
/// without a history: then no `session_labels` test holds).
///
/// ```
/// use toolgate_engine::labels::LabelSet;
/// use toolgate_engine::policy::CallLabels;
/// let tool = LabelSet::of(["egress"]);
/// let session = LabelSet::of(["private"]);
/// let labels = CallLabels::new(&tool, Some(&session));
/// assert!(labels.tool.contains("egress"));
/// ```
#[derive(Debug, Clone)]
pub struct CallLabels<'a> {
    /// The labels the called tool carries.
    pub tool: &'a crate::labels::LabelSet,
    /// The session's labels before this call, when there is a history.
    pub session: Option<&'a crate::labels::LabelSet>,
    /// The labels as masks over one policy's labels (that policy's address), worked out
    /// once per decision and read by its rules and its quotas alike.
    bits: std::cell::Cell<Option<(usize, label_bits::CallBits)>>,
}

impl<'a> CallLabels<'a> {
    /// The call's labels: the tool's, and the session's before the call (`None` without a
    /// history).
    pub fn new(
        tool: &'a crate::labels::LabelSet,
        session: Option<&'a crate::labels::LabelSet>,
    ) -> Self {
        Self {
            tool,
            session,
            bits: std::cell::Cell::new(None),
        }
    }
}

impl CallLabels<'static> {
    /// No labels, no history: a rule selecting by labels never matches.
    pub fn none() -> Self {
        Self::new(&crate::labels::NO_LABELS, None)
    }
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

impl Evaluation {
    /// Rule `i` (of `effect`) matched. Rules come in any order: the strictest effect wins
    /// and, among rules of that effect, the first in policy order (R18).
    fn take(&mut self, i: usize, effect: Effect) {
        self.matched.push(i);
        let decides = match (self.effect, self.decided_by) {
            (Some(e), Some(d)) => effect > e || (effect == e && i < d),
            _ => true,
        };
        if decides {
            self.effect = Some(effect);
            self.decided_by = Some(i);
        }
    }

    /// The matched rules in policy order, and R21: the default applies to mcp and http
    /// calls that no rule matches.
    fn finish(mut self, kind: ToolKind, default: Effect) -> Self {
        self.matched.sort_unstable();
        if self.effect.is_none()
            && matches!(kind, ToolKind::Mcp | ToolKind::Http)
            && default != Effect::Allow
        {
            self.effect = Some(default);
            self.by_default = true;
        }
        self
    }
}

/// The rules that could match the calls of one tool record by one agent, found once
/// ([`Policy::rule_candidates`]): those matching every such call (no `when`), and those
/// whose `when` decides per call. [`Policy::evaluate_candidates`] then decides a call as
/// [`Policy::evaluate_exact`] does, without the index walk or the selectors.
#[derive(Debug, Clone)]
pub(crate) struct RuleCandidates {
    kind: ToolKind,
    always: Box<[usize]>,
    by_input: Box<[usize]>,
    /// The rules whose selectors select the subject, that set no `when` and select by labels
    /// (R49), filed by a label each requires: a call tests only those under its labels.
    by_labels: label_bits::ByLabels<usize>,
}

/// The rule candidates of every record of one catalog entry, for one agent, in record
/// order (what the snapshot caches per profile and tool).
#[derive(Debug, Clone)]
pub(crate) struct RuleCover(pub(crate) Box<[RuleCandidates]>);

/// A compiled, validated tenant policy. Immutable: replacing a policy builds a new one.
#[derive(Debug, Clone)]
pub struct Policy {
    default: Effect,
    rules: Vec<Rule>,
    quotas: Vec<Quota>,
    updated_at: Option<String>,
    index: Index,
    /// The quotas' selections, indexed as the rules are (a call looks only at the quotas
    /// that could cover it).
    quota_index: Index,
    /// Whether a rule or a quota selects by labels, and by session labels (R49): read on
    /// every call, worked out once.
    labels: (bool, bool),
    /// The rules' and quotas' label tests as bits (R49), when they name 1 to 64 labels.
    label_bits: Option<label_bits::LabelBits>,
}

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
            quotas: Vec::new(),
            updated_at: None,
            index: Index::default(),
            quota_index: Index::default(),
            labels: (false, false),
            label_bits: None,
        }
    }

    /// Parses and validates a policy (`{"default", "rules", "quotas", "updatedAt"}`, only
    /// `rules` required). Every problem is reported with its path; a policy with any problem is
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

    /// The rules, in order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The quotas, in order (R44).
    pub fn quotas(&self) -> &[Quota] {
        &self.quotas
    }

    /// The quotas covering a call (R44: selected exactly as a rule's fields select), by
    /// index, in policy order.
    pub fn covering_quotas(
        &self,
        subject: &Subject<'_>,
        input: &Value,
        literals: &NumberLiterals,
    ) -> Vec<usize> {
        self.covering_quotas_labelled(subject, input, literals, &CallLabels::none())
    }

    /// As [`Policy::covering_quotas`], with the call's labels (R49).
    pub fn covering_quotas_labelled(
        &self,
        subject: &Subject<'_>,
        input: &Value,
        literals: &NumberLiterals,
        labels: &CallLabels<'_>,
    ) -> Vec<usize> {
        if self.quotas.is_empty() {
            return Vec::new();
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
        let mut covering = Vec::new();
        let bits = self.call_bits(labels);
        self.quota_index
            .for_each_candidate(&tool, lower.server, |i| {
                if self.quotas.get(i).is_some_and(|q| {
                    q.covers(&lower, input, literals.root())
                        && self.quota_labels_hold(i, labels, bits)
                }) {
                    covering.push(i);
                }
            });
        // The index hands candidates over in no order; callers read them in policy order.
        covering.sort_unstable();
        covering
    }

    /// The quotas that could cover calls of `subject` (R44), appended to `out` by index,
    /// each with whether covering also depends on the call's input: `false` when the quota
    /// has no `when` and so covers every call of this subject, `true` when its selectors
    /// select the subject and its `when` decides per call ([`Policy::quota_covers`]).
    pub(crate) fn quota_candidates(&self, subject: &Subject<'_>, out: &mut Vec<(usize, bool)>) {
        if self.quotas.is_empty() {
            return;
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
        self.quota_index
            .for_each_candidate(&tool, lower.server, |i| {
                if let Some(q) = self.quotas.get(i)
                    && q.select.matches_selectors(&lower)
                {
                    out.push((i, q.select.has_when() || q.select.has_labels()));
                }
            });
    }

    /// Whether quota `i` covers one call of `subject` with this input (R44).
    pub(crate) fn quota_covers(
        &self,
        i: usize,
        subject: &Subject<'_>,
        input: &Value,
        literals: &NumberLiterals,
        labels: &CallLabels<'_>,
    ) -> bool {
        self.quotas.get(i).is_some_and(|q| {
            q.select.matches_call(subject, input, literals) && q.select.labels_hold(labels)
        })
    }

    /// A call's labels as masks over this policy's labels (R49), when it has bits for them:
    /// worked out once per evaluation, then each rule's or quota's label test is two mask
    /// tests.
    pub(crate) fn call_bits(&self, labels: &CallLabels<'_>) -> Option<label_bits::CallBits> {
        let bits = self.label_bits.as_ref()?;
        let me = std::ptr::from_ref(bits) as usize;
        if let Some((of, call)) = labels.bits.get()
            && of == me
        {
            return Some(call);
        }
        let call = bits.of_call(labels);
        labels.bits.set(Some((me, call)));
        Some(call)
    }

    /// Whether quota `i`'s label tests (`labels`, `session_labels`) hold for the call
    /// (R49), by its bits when `bits` were worked out ([`Policy::call_bits`]).
    pub(crate) fn quota_labels_hold(
        &self,
        i: usize,
        labels: &CallLabels<'_>,
        bits: Option<label_bits::CallBits>,
    ) -> bool {
        match (&self.label_bits, bits) {
            (Some(b), Some(call)) => b.quota_holds(i, call),
            _ => self
                .quotas
                .get(i)
                .is_some_and(|q| q.select.labels_hold(labels)),
        }
    }

    /// Quota `i`'s label masks (`labels`, `session_labels`), when it selects by labels and
    /// not by `when` and this policy has bits for its labels (R49).
    pub(crate) fn quota_label_masks(&self, i: usize) -> Option<(u64, u64)> {
        let q = self.quotas.get(i)?;
        if !q.select.has_labels() || q.select.has_when() {
            return None;
        }
        self.label_bits.as_ref()?.quota_masks(i)
    }

    /// Whether a quota's masks hold for the call's `bits` (R49).
    pub(crate) fn masks_hold(masks: (u64, u64), bits: Option<label_bits::CallBits>) -> bool {
        bits.is_some_and(|call| label_bits::holds(masks, call))
    }

    /// Whether rule `i`'s label tests hold for the call (R49), by its bits when `bits` were
    /// worked out.
    fn rule_labels_hold(
        &self,
        i: usize,
        rule: &Rule,
        labels: &CallLabels<'_>,
        bits: Option<label_bits::CallBits>,
    ) -> bool {
        if !rule.has_labels() {
            return true;
        }
        match (&self.label_bits, bits) {
            (Some(b), Some(call)) => b.rule_holds(i, call),
            _ => rule.labels_hold(labels),
        }
    }

    /// Whether a rule or a quota selects by the session's labels (R49): deciding a call
    /// then reads the session's labels, and sending it records the tool's.
    pub fn uses_session_labels(&self) -> bool {
        self.labels.1
    }

    /// Whether a rule or a quota selects by labels at all (R49).
    pub fn uses_labels(&self) -> bool {
        self.labels.0
    }

    /// The default effect for mcp/http calls no rule matches (R21).
    pub fn default_effect(&self) -> Effect {
        self.default
    }

    /// The `updatedAt` the stored policy carries.
    pub fn updated_at(&self) -> Option<&str> {
        self.updated_at.as_deref()
    }

    /// Whether the policy is *empty* for R15/R23: no rules, no quotas (R44) and default
    /// `allow`.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty() && self.quotas.is_empty() && self.default == Effect::Allow
    }

    /// The policy as JSON, as a stored policy's `get` prints it (what `put` takes back).
    pub fn to_json(&self) -> Value {
        let mut map = serde_json::Map::new();
        map.insert("default".into(), Value::from(self.default.as_str()));
        map.insert(
            "rules".into(),
            Value::Array(self.rules.iter().map(Rule::source).collect()),
        );
        if !self.quotas.is_empty() {
            map.insert(
                "quotas".into(),
                Value::Array(self.quotas.iter().map(|q| q.select.source()).collect()),
            );
        }
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
        if !self.quotas.is_empty() {
            out.push_str(",\"quotas\":[");
            for (i, quota) in self.quotas.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(quota.source_text());
            }
            out.push(']');
        }
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
        self.evaluate_labelled(subject, input, literals, &CallLabels::none())
    }

    /// As [`Policy::evaluate_exact`], with the call's labels (R49): a rule with `labels` or
    /// `session_labels` matches only when they hold.
    pub fn evaluate_labelled(
        &self,
        subject: &Subject<'_>,
        input: &Value,
        literals: &NumberLiterals,
        labels: &CallLabels<'_>,
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
        let bits = self.call_bits(labels);
        // Candidates come each once but in no order (index.rs): the strictest effect wins and,
        // among rules of that effect, the first in policy order, as in the plain loop.
        self.index.for_each_candidate(&tool, lower.server, |i| {
            let Some(rule) = self.rules.get(i) else {
                return;
            };
            if rule.matches(&lower, input, literals.root())
                && self.rule_labels_hold(i, rule, labels, bits)
            {
                eval.take(i, rule.effect);
            }
        });
        eval.finish(subject.kind, self.default)
    }

    /// The rules that could match calls of `subject`, whatever their input (see
    /// [`RuleCandidates`]).
    pub(crate) fn rule_candidates(&self, subject: &Subject<'_>) -> RuleCandidates {
        let (mut always, mut by_input, mut by_labels) = (Vec::new(), Vec::new(), Vec::new());
        if !self.rules.is_empty() {
            let tool = lower_key(subject.tool);
            let server = subject.server.map(lower_key);
            let agent = lower_key(subject.agent);
            let lower = LowerSubject {
                kind: subject.kind,
                tool: &tool,
                server: server.as_deref(),
                agent: &agent,
            };
            self.index.for_each_candidate(&tool, lower.server, |i| {
                if let Some(rule) = self.rules.get(i)
                    && rule.matches_selectors(&lower)
                {
                    let masks = self.label_bits.as_ref().and_then(|b| b.rule_masks(i));
                    match masks {
                        Some(m) if rule.has_labels() && !rule.has_when() => by_labels.push((i, m)),
                        _ if rule.has_when() || rule.has_labels() => by_input.push(i),
                        _ => always.push(i),
                    }
                }
            });
        }
        RuleCandidates {
            kind: subject.kind,
            always: always.into_boxed_slice(),
            by_input: by_input.into_boxed_slice(),
            by_labels: label_bits::ByLabels::new(by_labels),
        }
    }

    /// [`Policy::evaluate_exact`] for a call of the subject `candidates` were found for
    /// (by this policy): the same evaluation, reading only those rules' `when`.
    pub(crate) fn evaluate_candidates(
        &self,
        candidates: &RuleCandidates,
        input: &Value,
        literals: &NumberLiterals,
        labels: &CallLabels<'_>,
    ) -> Evaluation {
        if self.rules.is_empty() {
            return self.default_only(candidates.kind);
        }
        let mut eval = Evaluation::default();
        let bits = if candidates.by_input.is_empty() && candidates.by_labels.is_empty() {
            None
        } else {
            self.call_bits(labels)
        };
        let passing = candidates.by_input.iter().copied().filter(|&i| {
            // The label test first: two mask tests, before any `when` reads the input.
            self.rules.get(i).is_some_and(|r| {
                self.rule_labels_hold(i, r, labels, bits) && r.when_holds(input, literals.root())
            })
        });
        for i in candidates.always.iter().copied().chain(passing) {
            let Some(rule) = self.rules.get(i) else {
                continue;
            };
            eval.take(i, rule.effect);
        }
        // R49: the rules that select by labels alone, only those filed under the call's
        // labels (the order does not matter: `take` keeps the strictest, first in policy
        // order, and `finish` sorts what matched).
        if let Some(call) = bits {
            candidates.by_labels.for_each_holding(call, |i| {
                if let Some(rule) = self.rules.get(i) {
                    eval.take(i, rule.effect);
                }
            });
        }
        eval.finish(candidates.kind, self.default)
    }

    fn default_only(&self, kind: ToolKind) -> Evaluation {
        Evaluation::default().finish(kind, self.default)
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
        self.evaluate_naive_labelled(subject, input, literals, &CallLabels::none())
    }

    /// As [`Policy::evaluate_naive_exact`], with the call's labels (R49).
    pub fn evaluate_naive_labelled(
        &self,
        subject: &Subject<'_>,
        input: &Value,
        literals: &NumberLiterals,
        labels: &CallLabels<'_>,
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
            if rule.matches(&lower, input, literals.root()) && rule.labels_hold(labels) {
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
