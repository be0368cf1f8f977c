//! Where a watched tenant policy goes: the seam between a store that holds the policy and
//! the gate that enforces it.

use std::fmt;

use crate::policy::{Limits, Policy};
use crate::{ConfigErrors, PolicyState};

/// Something that holds the tenant policy in force and takes a new one: toolgate's
/// `GovernanceHandle` (the tower layers' shared snapshot). A store's policy watch (the
/// inbox's `PolicyWatch`, the PostgreSQL store's `watch_policy`) reads the stored policy
/// with [`PolicyTarget::limits`] and puts it in force through this trait, so a store
/// depends on the engine alone.
///
/// ```
/// use std::sync::Mutex;
/// use toolgate_engine::policy::{Limits, Policy};
/// use toolgate_engine::{ConfigErrors, PolicyState, PolicyTarget};
///
/// /// Remembers what it was given (a gate would decide by it).
/// #[derive(Debug, Default)]
/// struct Latest(Mutex<Option<PolicyState>>);
/// impl PolicyTarget for Latest {
///     fn limits(&self) -> Limits { Limits::default() }
///     fn replace_policy(&self, state: PolicyState) -> Result<(), ConfigErrors> {
///         *self.0.lock().unwrap() = Some(state);
///         Ok(())
///     }
///     fn replace_shadow_policy(&self, _shadow: Option<Policy>) -> Result<(), ConfigErrors> { Ok(()) }
/// }
/// let target = Latest::default();
/// let deny = Policy::from_json_str(r#"{"rules": [{"effect": "deny"}]}"#, &target.limits()).unwrap();
/// target.replace_policy(PolicyState::readable(deny)).unwrap();
/// assert!(target.0.lock().unwrap().is_some());
/// ```
pub trait PolicyTarget: fmt::Debug + Send + Sync {
    /// The limits a stored policy is read under (the settings in force).
    fn limits(&self) -> Limits;

    /// Puts `state` in force. A refused replacement keeps the policy in force (R22) and
    /// returns why.
    ///
    /// # Errors
    ///
    /// The new policy does not fit the configuration in force.
    fn replace_policy(&self, state: PolicyState) -> Result<(), ConfigErrors>;

    /// Puts `shadow` in force as the shadow policy (R46; `None` removes it). A refused
    /// replacement keeps the shadow in force.
    ///
    /// # Errors
    ///
    /// The shadow cannot be decided beside the configuration in force.
    fn replace_shadow_policy(&self, shadow: Option<Policy>) -> Result<(), ConfigErrors>;
}
