//! The labels a policy's rules and quotas select by (R49), as bits: every label a rule or a
//! quota names gets one bit of a `u64` (when the policy names at most 64 distinct labels), so
//! that whether a call's labels satisfy a rule is two mask tests, not a search per label.
//! A call's labels are turned into masks once per evaluation ([`LabelBits::of_call`]).

use super::{CallLabels, Rule};

/// The bits of a policy's labels (at most 64 distinct ones; else none is made and rules are
/// tested label by label).
#[derive(Debug, Clone)]
pub(crate) struct LabelBits {
    /// Every label a rule or a quota names, sorted: label `universe[i]` is bit `i`.
    universe: Box<[Box<str>]>,
    /// Each rule's `labels` and `session_labels` masks, by rule index.
    rules: Box<[(u64, u64)]>,
    /// Each quota's, by quota index.
    quotas: Box<[(u64, u64)]>,
}

/// One call's labels as masks over a policy's universe.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallBits {
    tool: u64,
    /// `None` without a history: a `session_labels` test never holds.
    session: Option<u64>,
}

impl LabelBits {
    /// The bits of these rules' and quotas' selections; `None` when they name no label or
    /// more than 64.
    pub(crate) fn build<'a>(
        rules: impl Iterator<Item = &'a Rule> + Clone,
        quotas: impl Iterator<Item = &'a Rule> + Clone,
    ) -> Option<Self> {
        let mut universe: Vec<&str> = rules
            .clone()
            .chain(quotas.clone())
            .flat_map(|r| r.labels().chain(r.session_labels()))
            .collect();
        universe.sort_unstable();
        universe.dedup();
        if universe.is_empty() || universe.len() > 64 {
            return None;
        }
        let bit = |label: &str| -> u64 { universe.binary_search(&label).map_or(0, |i| 1_u64 << i) };
        let masks = |r: &Rule| -> (u64, u64) {
            (
                r.labels().fold(0, |m, l| m | bit(l)),
                r.session_labels().fold(0, |m, l| m | bit(l)),
            )
        };
        Some(Self {
            rules: rules.map(masks).collect(),
            quotas: quotas.map(masks).collect(),
            universe: universe.into_iter().map(Box::from).collect(),
        })
    }

    /// A call's labels as masks: the labels no rule or quota names are left out (no test
    /// can ask for them).
    pub(crate) fn of_call(&self, labels: &CallLabels<'_>) -> CallBits {
        let mask = |set: &crate::labels::LabelSet| -> u64 {
            set.iter().fold(0, |m, l| {
                m | self
                    .universe
                    .binary_search_by(|u| (**u).cmp(l))
                    .map_or(0, |i| 1_u64 << i)
            })
        };
        CallBits {
            tool: mask(labels.tool),
            session: labels.session.map(mask),
        }
    }

    /// Rule `i`'s masks (`labels`, `session_labels`).
    pub(crate) fn rule_masks(&self, i: usize) -> Option<(u64, u64)> {
        self.rules.get(i).copied()
    }

    /// Quota `i`'s masks (`labels`, `session_labels`).
    pub(crate) fn quota_masks(&self, i: usize) -> Option<(u64, u64)> {
        self.quotas.get(i).copied()
    }

    /// Whether rule `i`'s label tests hold for the call (as [`Rule::labels_hold`]).
    pub(crate) fn rule_holds(&self, i: usize, call: CallBits) -> bool {
        self.rules.get(i).is_some_and(|m| holds(*m, call))
    }

    /// Whether quota `i`'s label tests hold for the call.
    pub(crate) fn quota_holds(&self, i: usize, call: CallBits) -> bool {
        self.quotas.get(i).is_some_and(|m| holds(*m, call))
    }
}

/// Whether a rule's or a quota's masks (`labels`, `session_labels`) hold for the call.
pub(crate) fn holds((tool, session): (u64, u64), call: CallBits) -> bool {
    tool & !call.tool == 0 && (session == 0 || call.session.is_some_and(|s| session & !s == 0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::LabelSet;
    use crate::policy::{Limits, Policy};
    use proptest::prelude::*;

    fn label() -> impl Strategy<Value = String> {
        prop::sample::select(vec!["egress", "private", "untrusted", "a", "b", "zz"])
            .prop_map(str::to_owned)
    }

    fn labels() -> impl Strategy<Value = Vec<String>> {
        prop::collection::btree_set(label(), 0..4).prop_map(|s| s.into_iter().collect())
    }

    proptest! {
        /// R49: the masks agree with testing the rule label by label, for every call's
        /// tool labels and session labels (or none: no history).
        #[test]
        fn r49_the_masks_agree_with_the_labels(
            rules in prop::collection::vec((labels(), labels()), 1..6),
            tool in labels(),
            session in prop::option::of(labels()),
        ) {
            let rules_json: Vec<serde_json::Value> = rules
                .iter()
                .map(|(l, s)| {
                    let mut r = serde_json::json!({"effect": "ask"});
                    if !l.is_empty() { r["labels"] = serde_json::json!(l); }
                    if !s.is_empty() { r["session_labels"] = serde_json::json!(s); }
                    r
                })
                .collect();
            let policy = Policy::from_json(&serde_json::json!({"rules": rules_json}), &Limits::default()).unwrap();
            let tool = LabelSet::of(&tool);
            let session = session.map(|s| LabelSet::of(&s));
            let call = CallLabels::new(&tool, session.as_ref());
            match LabelBits::build(policy.rules().iter(), std::iter::empty()) {
                Some(bits) => {
                    let masks = bits.of_call(&call);
                    for (i, rule) in policy.rules().iter().enumerate() {
                        prop_assert_eq!(bits.rule_holds(i, masks), rule.labels_hold(&call), "rule {}", i);
                    }
                }
                None => prop_assert!(policy.rules().iter().all(|r| !r.has_labels())),
            }
        }
    }
}
