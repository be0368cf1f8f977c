//! The labels a policy's rules and quotas select by (R49), as bits: every label a rule or a
//! quota names gets one bit of a `u64` (when the policy names at most 64 distinct labels), so
//! that whether a call's labels satisfy a rule is two mask tests, not a search per label.
//! A call's labels are turned into masks once per evaluation ([`LabelBits::of_call`]).

use super::{CallLabels, Rule};

/// The bits of a policy's labels (at most 64 distinct ones; else none is made and rules are
/// tested label by label).
#[derive(Debug, Clone)]
pub(crate) struct LabelBits {
    /// Every label a rule or a quota names, with its bit (a hash lookup per label of a call:
    /// a search of the sorted list cost a string comparison per step).
    universe: std::collections::HashMap<Box<str>, u64, foldhash::fast::FixedState>,
    /// This universe's id: a label set keeps its mask under it (`LabelSet::mask_under`), so
    /// a tool's labels and a session's are looked up once per set, not once per call.
    numbering: u64,
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
        /// Ids of universes, unique in the process.
        static NUMBERINGS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Some(Self {
            numbering: NUMBERINGS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            rules: rules.map(masks).collect(),
            quotas: quotas.map(masks).collect(),
            universe: universe
                .into_iter()
                .enumerate()
                .map(|(i, l)| (Box::from(l), 1_u64 << i))
                .collect(),
        })
    }

    /// A call's labels as masks: the labels no rule or quota names are left out (no test
    /// can ask for them).
    pub(crate) fn of_call(&self, labels: &CallLabels<'_>) -> CallBits {
        let mask = |set: &crate::labels::LabelSet| -> u64 {
            set.mask_under(self.numbering, |set| {
                set.iter()
                    .fold(0, |m, l| m | self.universe.get(l).copied().unwrap_or(0))
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

/// Candidates that select by labels alone (a rule or a quota without `when`), each filed
/// under one label it requires — the one the fewest of them require — so that a call
/// visits only those filed under a label it has: a session that has not read what a rule
/// asks for costs nothing per rule (R49).
#[derive(Debug, Clone, Default)]
pub(crate) struct ByLabels<T> {
    /// The bits candidates are filed under, of the tool's labels and of the session's.
    keys: (u64, u64),
    /// Sorted by `(session, bit)`.
    buckets: Box<[Bucket<T>]>,
}

/// The candidates filed under one label: a bit of the tool's labels, or of the session's.
#[derive(Debug, Clone)]
struct Bucket<T> {
    session: bool,
    bit: u32,
    items: Box<[Masked<T>]>,
}

/// A candidate and its masks (`labels`, `session_labels`).
type Masked<T> = (T, (u64, u64));
/// Which label a candidate is filed under: (of the session?, its bit).
type Key = (bool, u32);

/// The set bits of `mask`, lowest first.
fn set_bits(mut mask: u64) -> impl Iterator<Item = u32> {
    std::iter::from_fn(move || {
        (mask != 0).then(|| {
            let bit = mask.trailing_zeros();
            mask &= mask - 1;
            bit
        })
    })
}

impl<T: Copy> ByLabels<T> {
    /// Files `items` (each with its `labels` and `session_labels` masks); an item with both
    /// empty is never filed (it would hold for every call: the caller keeps it elsewhere).
    pub(crate) fn new(items: Vec<Masked<T>>) -> Self {
        // How many items require each label: (session?, bit) → count.
        let mut count: std::collections::HashMap<Key, u32> = std::collections::HashMap::new();
        let required = |(tool, session): (u64, u64)| {
            set_bits(tool)
                .map(|b| (false, b))
                .chain(set_bits(session).map(|b| (true, b)))
        };
        for (_, masks) in &items {
            for key in required(*masks) {
                *count.entry(key).or_default() += 1;
            }
        }
        let mut filed: Vec<(Key, Masked<T>)> = items
            .into_iter()
            .filter_map(|(t, masks)| {
                let key = required(masks).min_by_key(|k| count.get(k).copied().unwrap_or(0))?;
                Some((key, (t, masks)))
            })
            .collect();
        filed.sort_by_key(|f| f.0);
        let mut keys = (0_u64, 0_u64);
        let mut buckets: Vec<(Key, Vec<Masked<T>>)> = Vec::new();
        for ((session, bit), item) in filed {
            if session {
                keys.1 |= 1 << bit;
            } else {
                keys.0 |= 1 << bit;
            }
            match buckets.last_mut() {
                Some(b) if b.0 == (session, bit) => b.1.push(item),
                _ => buckets.push(((session, bit), vec![item])),
            }
        }
        Self {
            keys,
            buckets: buckets
                .into_iter()
                .map(|((session, bit), items)| Bucket {
                    session,
                    bit,
                    items: items.into_boxed_slice(),
                })
                .collect(),
        }
    }

    /// Whether nothing is filed.
    pub(crate) fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// Every filed candidate whose masks hold for the call, in no particular order.
    pub(crate) fn for_each_holding(&self, call: CallBits, mut f: impl FnMut(T)) {
        let (tool, session) = (
            call.tool & self.keys.0,
            call.session.map_or(0, |s| s & self.keys.1),
        );
        // The common case: the call has none of the labels anything is filed under.
        if tool | session == 0 {
            return;
        }
        let mut visit = |session: bool, bits: u64| {
            for bit in set_bits(bits) {
                if let Ok(at) = self
                    .buckets
                    .binary_search_by_key(&(session, bit), |b| (b.session, b.bit))
                    && let Some(bucket) = self.buckets.get(at)
                {
                    for (t, masks) in &bucket.items {
                        if holds(*masks, call) {
                            f(*t);
                        }
                    }
                }
            }
        };
        visit(false, tool);
        visit(true, session);
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
        /// R49: the index of candidates filed by a required label yields exactly those
        /// whose masks hold, each once, for any call (or no session).
        #[test]
        fn r49_the_label_index_yields_exactly_the_candidates_that_hold(
            items in prop::collection::vec((0_u64..64, 0_u64..64), 0..40),
            tool in 0_u64..64,
            session in prop::option::of(0_u64..64),
        ) {
            let filed: Vec<(usize, (u64, u64))> = items
                .iter()
                .copied()
                .enumerate()
                .filter(|(_, (t, s))| *t != 0 || *s != 0)
                .collect();
            let index = ByLabels::new(filed.clone());
            let call = CallBits { tool, session };
            let mut got = Vec::new();
            index.for_each_holding(call, |i| got.push(i));
            got.sort_unstable();
            let want: Vec<usize> = filed
                .iter()
                .filter(|(_, m)| holds(*m, call))
                .map(|(i, _)| *i)
                .collect();
            prop_assert_eq!(got, want);
        }

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
            // The same sets under a second policy (another numbering, as after a reload):
            // each set keeps its first policy's mask, and the second still decides right.
            let reversed: Vec<serde_json::Value> = rules_json.iter().rev().cloned().collect();
            let second = Policy::from_json(&serde_json::json!({"rules": reversed}), &Limits::default()).unwrap();
            if let Some(bits) = LabelBits::build(second.rules().iter(), std::iter::empty()) {
                for _ in 0..2 {
                    let masks = bits.of_call(&call);
                    for (i, rule) in second.rules().iter().enumerate() {
                        prop_assert_eq!(bits.rule_holds(i, masks), rule.labels_hold(&call), "second policy, rule {}", i);
                    }
                }
            }
        }
    }
}
