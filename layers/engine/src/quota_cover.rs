//! Which quotas cover the calls of one agent profile to one tool, with their group keys,
//! worked out once per snapshot (R44, issue 21's performance target).
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
    /// Decided per call: its `when` reads the input (`by_input`), or its key has the session.
    PerCall { quota: usize, by_input: bool },
}

/// The quotas that could cover one pair's calls, in policy order.
#[derive(Debug)]
pub(crate) struct Cover {
    pub(crate) items: Box<[Item]>,
    /// Every group, when every item is fixed (and there is one at least).
    pub(crate) fixed: Option<Arc<[QuotaGroup]>>,
}

impl Cover {
    pub(crate) fn new(items: Vec<Item>) -> Self {
        let fixed = if !items.is_empty() && items.iter().all(|i| matches!(i, Item::Fixed(_))) {
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
            fixed,
        }
    }
}

type Slots = Box<[OnceLock<Arc<Cover>>]>;

struct Table {
    policy: Arc<Policy>,
    entries: usize,
    /// Per profile, per catalog entry; a profile's row is allocated on its first call.
    agents: Box<[OnceLock<Slots>]>,
}

/// The covers of one snapshot: one table for the enforced policy and one for the shadow,
/// each only when that policy has quotas.
#[derive(Clone, Default)]
pub(crate) struct CoverCache(Arc<[Table]>);

impl CoverCache {
    pub(crate) fn new(
        policy: &PolicyState,
        shadow: Option<&Arc<Policy>>,
        agents: usize,
        entries: usize,
    ) -> Self {
        let enforced = match policy {
            PolicyState::Readable(p) => Some(p),
            PolicyState::Unreadable(_) => None,
        };
        let tables: Vec<Table> = enforced
            .into_iter()
            .chain(shadow)
            .filter(|p| !p.quotas().is_empty())
            .map(|p| Table {
                policy: Arc::clone(p),
                entries,
                agents: (0..agents).map(|_| OnceLock::new()).collect(),
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
        build: impl FnOnce() -> Cover,
    ) -> Option<Arc<Cover>> {
        let table = self.0.iter().find(|t| Arc::ptr_eq(&t.policy, policy))?;
        let row = table.agents.get(agent)?.get_or_init(|| {
            (0..table.entries)
                .map(|_| OnceLock::new())
                .collect::<Vec<_>>()
                .into_boxed_slice()
        });
        let slot = row.get(entry)?;
        Some(Arc::clone(slot.get_or_init(|| Arc::new(build()))))
    }
}

impl std::fmt::Debug for CoverCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CoverCache({} tables)", self.0.len())
    }
}
