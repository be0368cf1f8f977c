//! Reading and validating a policy document (R18–R22, R37; SPEC §8): every problem is
//! reported with its path, and a policy with any problem is refused whole.

use serde_json::Value;

use super::index::Index;
use super::quota::read_quota;
use super::rule::Rule;
use super::select::{read_label_selectors, read_selection};
use super::{Effect, Limits, Policy};
use crate::error::{ConfigErrors, Obj, index};
use crate::number::{self, Lit};

const POLICY_FIELDS: &[&str] = &["default", "rules", "quotas", "updatedAt"];
const RULE_FIELDS: &[&str] = &[
    "effect",
    "tool",
    "server",
    "kind",
    "agent",
    "when",
    "reason",
    "labels",
    "session_labels",
    "approvals",
];

/// The most approvals an `ask` rule may need (R51).
pub const MAX_APPROVALS: u8 = 5;
const EFFECTS: &[&str] = &["allow", "ask", "deny"];

impl Policy {
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
        let mut quotas = Vec::new();
        if let Some(items) = obj.array("quotas", errs) {
            let qpath = obj.path_of("quotas");
            let rules_given = obj
                .raw("rules", &mut ConfigErrors::default())
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            // R44: quotas count toward `tool_rules` with the rules.
            if rules_given <= limits.tool_rules && rules_given + items.len() > limits.tool_rules {
                errs.push(
                    &qpath,
                    format!(
                        "{rules_given} rules and {} quotas are more than the limit `tool_rules` ({}), which counts both",
                        items.len(),
                        limits.tool_rules
                    ),
                );
            }
            for (i, item) in items.iter().enumerate() {
                let lit = number::item(number::member(lits, "quotas"), i);
                if let Some(q) = read_quota(item, lit, &index(&qpath, i), limits, errs) {
                    quotas.push(q);
                }
            }
        }
        if errs.errors.len() > before {
            return None;
        }
        rules.shrink_to_fit();
        let index = Index::build(&rules);
        let quota_index = Index::build(quotas.iter().map(|q| &q.select));
        let labels = (
            rules.iter().any(Rule::has_labels) || quotas.iter().any(|q| q.select.has_labels()),
            rules.iter().any(|r| !r.session_labels.is_empty())
                || quotas.iter().any(|q| !q.select.session_labels.is_empty()),
        );
        let label_bits = if labels.0 {
            super::label_bits::LabelBits::build(rules.iter(), quotas.iter().map(|q| &q.select))
        } else {
            None
        };
        Some(Self {
            default,
            rules,
            quotas,
            updated_at,
            index,
            quota_index,
            labels,
            label_bits,
        })
    }
}

pub(super) fn read_rule(
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
    let rule = read_selection(&obj, value, lits, limits, errs);
    let (labels, session_labels) = read_label_selectors(&obj, errs);
    // R51: `approvals` only on an `ask` rule, an integer from 1 to 5.
    let mut approvals = 1;
    if let Some(v) = obj.raw("approvals", errs) {
        let path = obj.path_of("approvals");
        match (effect, v.as_u64()) {
            (Some(e), _) if e != Effect::Ask => errs.push(
                path,
                format!("`approvals` is for `ask` rules; this rule's effect is `{e}`"),
            ),
            (_, Some(n)) if (1..=u64::from(MAX_APPROVALS)).contains(&n) => {
                approvals = u8::try_from(n).unwrap_or(MAX_APPROVALS);
            }
            _ => errs.push(
                path,
                format!("expected an integer from 1 to {MAX_APPROVALS}, found {v}"),
            ),
        }
    }
    if errs.errors.len() > before {
        return None;
    }
    Some(Rule {
        effect: effect?,
        labels,
        session_labels,
        approvals,
        ..rule
    })
}
