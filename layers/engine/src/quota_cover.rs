//! Which quotas cover the calls of one agent profile to one tool, with their group keys,
//! worked out once per snapshot (R44), for speed.
//!
//! A quota covers a call by its selectors (`kind`, `server`, `tool`, `agent`: fixed for one
//! profile and one catalog entry) and its `when` (the input). Its group key is its counter
//! id and the call's `per` values: the agent and the tool, fixed for the pair, and the
//! session, which changes per call. So for one (profile, entry) pair every covering quota
//! is either **fixed** (no `when`, no `per: ["session"]`: covered and keyed the same for
//! every call, the key written once here) or decided **per call** (its `when` read, or its
//! session key written, each time).
//!
//! A call whose covering quotas are all fixed takes one shared slice of groups: no
//! selection, no key written, nothing allocated. The table is filled on first use, without
//! locks after that (`OnceLock`, as the exposure cache).
//!
//! INVARIANT: a cover reads the policy, the catalog entry and the profile's name, nothing
//! else. Each table records the policy it was built for and is read only for that same
//! `Arc<Policy>` (pointer identity); [`Governance::with_policy`](crate::Governance::with_policy)
//! and [`Governance::with_shadow_policy`](crate::Governance::with_shadow_policy) build a new
//! cache, and a snapshot with another catalog or other agents is built anew (with its own).
//! Calls of a subagent (whose id is the rules' agent, R19) are never cached: ids are the
//! caller's and unbounded.

use std::sync::{Arc, OnceLock};

use crate::PolicyState;
use crate::policy::Policy;
use crate::quota::QuotaGroup;

/// One quota that could cover a pair's calls.
#[derive(Debug, Clone)]
pub(crate) enum Item {
    /// Covers every call of the pair, with this group.
    Fixed(QuotaGroup),
    /// Decided per call: its `when` reads the input or it selects by labels (`by_input`),
    /// or its key has the session. `labels`: it selects by labels and not by `when`, with
    /// its `labels` and `session_labels` masks (R49): two mask tests per call.
    PerCall {
        quota: usize,
        by_input: bool,
        labels: Option<(u64, u64)>,
    },
}

/// The quotas that could cover one pair's calls, in policy order.
#[derive(Debug)]
pub(crate) struct Cover {
    pub(crate) items: Box<[Item]>,
    /// The quotas that select by labels and not by `when` (R49), filed by a label each
    /// requires: a call tests only those under its labels (not in `items`).
    pub(crate) by_labels: crate::policy::label_bits::ByLabels<usize>,
    /// Every group, when every item is fixed (and there is one at least).
    pub(crate) fixed: Option<Arc<[QuotaGroup]>>,
}

/// Whether a policy has quotas (what a [`Cover`] table is for).
pub(crate) fn has_quotas(p: &Policy) -> bool {
    !p.quotas().is_empty()
}

/// Whether a policy has rules (what the rules' cover table is for).
pub(crate) fn has_rules(p: &Policy) -> bool {
    !p.rules().is_empty()
}

impl Cover {
    pub(crate) fn new(items: Vec<Item>) -> Self {
        let (labelled, items): (Vec<Item>, Vec<Item>) = items.into_iter().partition(|i| {
            matches!(
                i,
                Item::PerCall {
                    labels: Some(_),
                    ..
                }
            )
        });
        let by_labels = crate::policy::label_bits::ByLabels::new(
            labelled
                .into_iter()
                .filter_map(|i| match i {
                    Item::PerCall {
                        quota,
                        labels: Some(m),
                        ..
                    } => Some((quota, m)),
                    _ => None,
                })
                .collect(),
        );
        let fixed = if !items.is_empty()
            && by_labels.is_empty()
            && items.iter().all(|i| matches!(i, Item::Fixed(_)))
        {
            Some(
                items
                    .iter()
                    .filter_map(|i| match i {
                        Item::Fixed(g) => Some(g.clone()),
                        Item::PerCall { .. } => None,
                    })
                    .collect(),
            )
        } else {
            None
        };
        Self {
            items: items.into_boxed_slice(),
            by_labels,
            fixed,
        }
    }
}

type Slots<T> = Box<[OnceLock<Arc<T>>]>;

/// At most this many (profile, entry) slots are laid out densely (16 bytes each: 4 MiB);
/// a larger snapshot keeps its covers in a map instead.
const DENSE_SLOTS: usize = 1 << 18;
/// At most this many covers in the map (so a snapshot with many tools and profiles holds
/// a bounded cache); past it, covers are worked out per call.
const SPARSE_COVERS: usize = 1 << 16;

type Sparse<T> = std::sync::RwLock<
    std::collections::HashMap<(usize, usize), Arc<T>, foldhash::fast::RandomState>,
>;

struct Table<T> {
    policy: Arc<Policy>,
    entries: usize,
    /// Per profile, per catalog entry; a profile's row is allocated on its first call.
    /// Empty when the snapshot is past [`DENSE_SLOTS`].
    agents: Box<[OnceLock<Slots<T>>]>,
    /// The covers of a snapshot past [`DENSE_SLOTS`].
    sparse: Sparse<T>,
}

/// What one (profile, entry) pair's calls share under one policy, worked out once per
/// snapshot: one table for the enforced policy and one for the shadow, each only when
/// that policy has what `T` is about (quotas for [`Cover`], rules for the rules' cover).
pub(crate) struct CoverCache<T>(Arc<[Table<T>]>);

impl<T> Clone for CoverCache<T> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

impl<T> Default for CoverCache<T> {
    fn default() -> Self {
        Self(Arc::new([]))
    }
}

impl<T> CoverCache<T> {
    /// Tables for the enforced policy and the shadow, those that `wanted` says have
    /// anything to cache.
    pub(crate) fn new(
        policy: &PolicyState,
        shadow: Option<&Arc<Policy>>,
        agents: usize,
        entries: usize,
        wanted: fn(&Policy) -> bool,
    ) -> Self {
        Self::with_dense_slots(policy, shadow, agents, entries, wanted, DENSE_SLOTS)
    }

    fn with_dense_slots(
        policy: &PolicyState,
        shadow: Option<&Arc<Policy>>,
        agents: usize,
        entries: usize,
        wanted: fn(&Policy) -> bool,
        dense_slots: usize,
    ) -> Self {
        let enforced = match policy {
            PolicyState::Readable(p) => Some(p),
            PolicyState::Unreadable(_) => None,
        };
        let dense = agents.saturating_mul(entries) <= dense_slots;
        let tables: Vec<Table<T>> = enforced
            .into_iter()
            .chain(shadow)
            .filter(|p| wanted(p))
            .map(|p| Table {
                policy: Arc::clone(p),
                entries,
                agents: if dense {
                    (0..agents).map(|_| OnceLock::new()).collect()
                } else {
                    Box::default()
                },
                sparse: Sparse::default(),
            })
            .collect();
        Self(tables.into())
    }

    /// The cover of (`agent`, `entry`) under `policy`, built by `build` on first use; `None`
    /// when this cache holds no table for `policy` (the caller works it out uncached).
    pub(crate) fn get(
        &self,
        policy: &Arc<Policy>,
        agent: usize,
        entry: usize,
        build: impl FnOnce() -> T,
    ) -> Option<Held<'_, T>> {
        let table = self.0.iter().find(|t| Arc::ptr_eq(&t.policy, policy))?;
        if table.agents.is_empty() {
            if let Some(c) = table.sparse.read().ok()?.get(&(agent, entry)) {
                return Some(Held::Shared(Arc::clone(c)));
            }
            let cover = Arc::new(build());
            let mut map = table.sparse.write().ok()?;
            if map.len() < SPARSE_COVERS {
                map.insert((agent, entry), Arc::clone(&cover));
            }
            return Some(Held::Shared(cover));
        }
        let row = table.agents.get(agent)?.get_or_init(|| {
            (0..table.entries)
                .map(|_| OnceLock::new())
                .collect::<Vec<_>>()
                .into_boxed_slice()
        });
        let slot = row.get(entry)?;
        Some(Held::Borrowed(slot.get_or_init(|| Arc::new(build()))))
    }
}

/// A cover read from a cache: borrowed from its dense row (nothing counted), or shared out
/// of its map.
pub(crate) enum Held<'a, T> {
    Borrowed(&'a Arc<T>),
    Shared(Arc<T>),
}

#[cfg(test)]
impl<T> Held<'_, T> {
    /// The shared cover.
    pub(crate) fn into_arc(self) -> Arc<T> {
        match self {
            Held::Borrowed(a) => Arc::clone(a),
            Held::Shared(a) => a,
        }
    }
}

impl<T> std::ops::Deref for Held<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        match self {
            Held::Borrowed(a) => a,
            Held::Shared(a) => a,
        }
    }
}

impl<T> std::fmt::Debug for CoverCache<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CoverCache({} tables)", self.0.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Limits;
    use std::cell::Cell;

    fn policy() -> Arc<Policy> {
        let text = r#"{"rules": [], "quotas": [{"max": 1, "window_secs": 60}]}"#;
        Arc::new(Policy::from_json_str(text, &Limits::default()).unwrap())
    }

    fn cover(built: &Cell<usize>) -> Cover {
        built.set(built.get() + 1);
        Cover::new(vec![Item::Fixed(QuotaGroup::new("k", 0, 1, 60_000))])
    }

    #[test]
    fn r44_dense_and_sparse_tables_build_each_cover_once() {
        let p = policy();
        let state = PolicyState::Readable(Arc::clone(&p));
        for dense_slots in [DENSE_SLOTS, 0] {
            let cache = CoverCache::with_dense_slots(&state, None, 2, 3, has_quotas, dense_slots);
            let built = Cell::new(0);
            let a = cache.get(&p, 1, 2, || cover(&built)).unwrap().into_arc();
            let b = cache.get(&p, 1, 2, || cover(&built)).unwrap().into_arc();
            assert!(
                Arc::ptr_eq(&a, &b),
                "the second call reads the first's cover"
            );
            cache.get(&p, 0, 2, || cover(&built)).unwrap();
            assert_eq!(built.get(), 2, "one build per (profile, entry)");
            assert_eq!(a.fixed.as_deref().map(<[QuotaGroup]>::len), Some(1));
        }
    }

    #[test]
    fn r44_a_table_is_read_only_for_its_own_policy() {
        let p = policy();
        let cache: CoverCache<Cover> = CoverCache::new(
            &PolicyState::Readable(Arc::clone(&p)),
            None,
            1,
            1,
            has_quotas,
        );
        let built = Cell::new(0);
        // An equal policy that is another `Arc` is not this table's.
        assert!(cache.get(&policy(), 0, 0, || cover(&built)).is_none());
        assert_eq!(built.get(), 0);
        assert!(cache.get(&p, 0, 0, || cover(&built)).is_some());
    }
}
