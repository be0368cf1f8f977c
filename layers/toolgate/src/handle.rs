//! One shared configuration snapshot, replaced atomically (R23), pinned per call.

use std::fmt;
use std::sync::Arc;

use arc_swap::ArcSwap;
use toolgate_core::ToolCall;
use toolgate_engine::{ConfigErrors, Governance, PolicyState};

/// The snapshot a call was pinned to by the first toolgate layer it met. Every later layer
/// decides by the same snapshot, so a replacement mid-call never splits a decision.
#[derive(Debug, Clone)]
pub struct Pinned(pub Arc<Governance>);

/// A shared, atomically replaceable [`Governance`] snapshot (`arc-swap`).
///
/// ```
/// use toolgate::GovernanceHandle;
/// use toolgate::engine::{Governance, PolicyState, policy::{Limits, Policy}};
///
/// let handle = GovernanceHandle::new(Governance::builder().build().unwrap());
/// let before = handle.load();
/// let policy = Policy::from_json_str(r#"{"rules": [{"effect": "deny"}]}"#, &Limits::default()).unwrap();
/// handle.replace_policy(PolicyState::readable(policy)).unwrap();
/// assert!(!std::sync::Arc::ptr_eq(&before, &handle.load()));
/// ```
#[derive(Clone)]
pub struct GovernanceHandle {
    inner: Arc<ArcSwap<Governance>>,
}

impl fmt::Debug for GovernanceHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GovernanceHandle")
            .field("tools", &self.inner.load().catalog().len())
            .finish()
    }
}

impl GovernanceHandle {
    /// A handle holding `governance`.
    pub fn new(governance: Governance) -> Self {
        Self {
            inner: Arc::new(ArcSwap::from_pointee(governance)),
        }
    }

    /// The current snapshot.
    pub fn load(&self) -> Arc<Governance> {
        self.inner.load_full()
    }

    /// Replaces the whole snapshot atomically: every call is decided wholly by the old or
    /// wholly by the new one (R23).
    pub fn store(&self, governance: Governance) {
        self.inner.store(Arc::new(governance));
    }

    /// Replaces the tenant policy. A refused replacement keeps the old policy (R22).
    pub fn replace_policy(&self, state: PolicyState) -> Result<(), ConfigErrors> {
        let mut error = None;
        self.inner
            .rcu(|current| match current.with_policy(state.clone()) {
                Ok(next) => {
                    // `rcu` may run this again after a concurrent store: only the last
                    // run's result counts.
                    error = None;
                    Arc::new(next)
                }
                Err(e) => {
                    error = Some(e);
                    Arc::clone(current)
                }
            });
        match error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Changes the configuration atomically (read-copy-update): `change` gets a builder
    /// holding the current snapshot and returns the next one, which is validated whole. A
    /// change that does not build keeps the current snapshot and returns every error; a
    /// concurrent replacement makes `change` run again on the newer snapshot, so no update
    /// is lost. Calls already pinned keep the snapshot they were pinned to (R23).
    ///
    /// ```
    /// use toolgate::GovernanceHandle;
    /// use toolgate::core::{ApprovalMode, ToolDeclaration, ToolIdentity};
    /// use toolgate::engine::{AgentProfile, Governance};
    ///
    /// let handle = GovernanceHandle::new(
    ///     Governance::builder()
    ///         .tool(ToolDeclaration::new(ToolIdentity::http("refund_order")))
    ///         .agent(AgentProfile::new("support").allow(["refund_order"]))
    ///         .build()
    ///         .unwrap(),
    /// );
    /// handle.update(|b| b.set_override("support", "refund_order", ApprovalMode::Deny)).unwrap();
    /// assert!(handle.load().expose("support").unwrap().tools.is_empty());
    /// assert!(handle.update(|b| b.set_override("nobody", "refund_order", ApprovalMode::Deny)).is_err());
    /// ```
    pub fn update<F>(&self, mut change: F) -> Result<(), ConfigErrors>
    where
        F: FnMut(toolgate_engine::GovernanceBuilder) -> toolgate_engine::GovernanceBuilder,
    {
        self.update_with(|current| change(current.to_builder()).build().map(|next| (next, ())))
            .map(|_| ())
    }

    /// The general form of [`GovernanceHandle::update`]: `change` reads the current snapshot
    /// and returns the next one with a value of its own (what it left out, say), or an error
    /// that keeps the current snapshot. Runs again on the newer snapshot when another writer
    /// stored first (read-copy-update), so no writer's change is lost; returns the snapshot
    /// it stored.
    pub fn update_with<T, F>(&self, mut change: F) -> Result<(Arc<Governance>, T), ConfigErrors>
    where
        F: FnMut(&Governance) -> Result<(Governance, T), ConfigErrors>,
    {
        let mut outcome = None;
        self.inner.rcu(|current| match change(current) {
            Ok((next, value)) => {
                // `rcu` may run this again after a concurrent store: only the last run counts.
                let next = Arc::new(next);
                outcome = Some(Ok((Arc::clone(&next), value)));
                next
            }
            Err(e) => {
                outcome = Some(Err(e));
                Arc::clone(current)
            }
        });
        outcome.unwrap_or_else(|| {
            Err(ConfigErrors::one(
                "",
                "the configuration was not changed (internal: no update ran)",
            ))
        })
    }

    /// The snapshot this call is pinned to, pinning the current one if the call has none.
    pub fn pin(&self, call: &mut ToolCall) -> Arc<Governance> {
        if let Some(Pinned(g)) = call.extensions.get::<Pinned>() {
            return Arc::clone(g);
        }
        let g = self.load();
        call.extensions.insert(Pinned(Arc::clone(&g)));
        g
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate_engine::config::{Format, load_str};
    use toolgate_engine::policy::{Limits, Policy};

    #[test]
    fn r22_a_refused_policy_update_keeps_the_old_policy() {
        let h = GovernanceHandle::new(
            load_str(r#"{"enforce_tool_invocation": false}"#, Format::Json).unwrap(),
        );
        let before = h.load();
        let deny = Policy::from_json_str(r#"{"rules": [{"effect": "deny"}]}"#, &Limits::default())
            .unwrap();
        assert!(h.replace_policy(PolicyState::readable(deny)).is_err());
        assert!(Arc::ptr_eq(&before, &h.load()), "nothing was replaced");
    }
}
