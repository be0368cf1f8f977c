//! The stored tenant policy (seed 002's get/put, R22, R23): validated before it is put,
//! replaced whole, and picked up by running gates without a restart.

use std::fmt;
use std::time::Duration;

use toolgate_engine::policy::{Limits, Policy};
use toolgate_engine::{ConfigErrors, PolicyState, PolicyTarget};

use crate::error::{InboxError, PolicySaveError};
use crate::model::StoredPolicy;
use crate::store::InboxStore;

/// Why a `put` was refused. The stored policy is unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutPolicyError {
    /// The policy is invalid (R22): every problem, with its path.
    Invalid(ConfigErrors),
    /// The stored policy is not the one the put was based on: someone saved since (only
    /// from [`put_policy_text_if_unchanged`]).
    Conflict {
        /// The `updatedAt` the put was based on (`None`: no policy stored).
        expected: Option<String>,
        /// The stored `updatedAt` (`None`: no policy is stored).
        stored: Option<String>,
    },
    /// The store failed.
    Store(InboxError),
}

impl From<PolicySaveError> for PutPolicyError {
    fn from(e: PolicySaveError) -> Self {
        match e {
            PolicySaveError::Conflict { expected, stored } => {
                PutPolicyError::Conflict { expected, stored }
            }
            PolicySaveError::Store(e) => PutPolicyError::Store(e),
        }
    }
}

impl fmt::Display for PutPolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PutPolicyError::Invalid(errs) => write!(f, "the policy is refused:\n{errs}"),
            PutPolicyError::Conflict { expected, stored } => {
                crate::error::write_conflict(f, expected.as_deref(), stored.as_deref())
            }
            PutPolicyError::Store(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for PutPolicyError {}

/// Validates `text` (`{"default", "rules", "updatedAt"}`, what `get` prints) under `limits`
/// and, only if it is valid, replaces the stored policy whole. A refused put keeps the old
/// policy (R22). The stored `updatedAt` is the store's own stamp, not the text's.
pub async fn put_policy_text(
    store: &dyn InboxStore,
    text: &str,
    limits: &Limits,
) -> Result<StoredPolicy, PutPolicyError> {
    let policy = Policy::from_json_str(text, limits).map_err(PutPolicyError::Invalid)?;
    store
        .put_policy(&policy)
        .await
        .map_err(PutPolicyError::Store)
}

/// [`put_policy_text`], saved only if the stored policy is still the one the caller read:
/// its `updatedAt` equals `expected_updated_at` (`None`: only if no policy is stored). The
/// check and the save are one transaction in the store
/// ([`StoredPolicies::put_policy_if_unchanged`](crate::StoredPolicies::put_policy_if_unchanged)); a stale base is [`PutPolicyError::Conflict`]
/// and saves nothing. An invalid policy is refused before the store is asked.
pub async fn put_policy_text_if_unchanged(
    store: &dyn InboxStore,
    text: &str,
    limits: &Limits,
    expected_updated_at: Option<&str>,
) -> Result<StoredPolicy, PutPolicyError> {
    let policy = Policy::from_json_str(text, limits).map_err(PutPolicyError::Invalid)?;
    store
        .put_policy_if_unchanged(expected_updated_at, &policy)
        .await
        .map_err(PutPolicyError::from)
}

/// Validates `text` under `limits` and, only if it is valid, replaces the stored **shadow**
/// policy (R46) whole: decided beside the enforced policy, never enforced. A refused put
/// keeps the old shadow.
pub async fn put_shadow_policy_text(
    store: &dyn InboxStore,
    text: &str,
    limits: &Limits,
) -> Result<StoredPolicy, PutPolicyError> {
    let policy = Policy::from_json_str(text, limits).map_err(PutPolicyError::Invalid)?;
    store
        .put_shadow_policy(&policy)
        .await
        .map_err(PutPolicyError::Store)
}

/// The stored shadow policy (R46) for a gate starting up: `Ok(None)` when none is stored,
/// the policy when it reads, and an error saying why when it does not — a shadow that cannot
/// be read is a load error (the gate should not start with it), never a reason to change
/// an enforced decision.
pub async fn load_shadow_policy(
    store: &dyn InboxStore,
    limits: &Limits,
) -> Result<Option<(Policy, String)>, String> {
    match store.get_shadow_policy().await {
        Ok(None) => Ok(None),
        Ok(Some(stored)) => Policy::from_json_str(&stored.body, limits)
            .map(|p| Some((p, stored.updated_at.clone())))
            .map_err(|e| {
                format!(
                    "the stored shadow policy (updated {}) cannot be read:\n{}",
                    stored.updated_at,
                    e.prefixed("policy_shadow")
                )
            }),
        Err(e) => Err(format!("the stored shadow policy cannot be read: {e}")),
    }
}

/// The state of a stored policy: readable (stamped with its `updatedAt`) or, when its row
/// cannot be read as a valid policy, [`PolicyState::Unreadable`] with the reason (R22: every
/// `mcp`/`http` call is then refused `policy_unreadable`).
pub fn policy_state_of(stored: &StoredPolicy, limits: &Limits) -> PolicyState {
    PolicyState::from_json_str(&stored.body, limits, Some(&stored.updated_at))
}

/// Loads the stored policy's state for a gate starting up: `None` when no policy was ever
/// stored (the configuration's policy stays); [`PolicyState::Unreadable`] when the stored
/// row, or the store itself, cannot be read.
pub async fn load_policy_state(store: &dyn InboxStore, limits: &Limits) -> Option<PolicyState> {
    match store.get_policy().await {
        Ok(None) => None,
        Ok(Some(stored)) => Some(policy_state_of(&stored, limits)),
        Err(e) => Some(PolicyState::Unreadable(format!(
            "the stored policy cannot be read: {e}"
        ))),
    }
}

/// What one look at the stored policy did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyPoll {
    /// Nothing new (or nothing stored).
    Unchanged,
    /// A new `updatedAt` was seen and the policy state was replaced.
    Replaced {
        /// The new `updatedAt`.
        updated_at: String,
        /// Whether the new state is readable.
        readable: bool,
    },
    /// A new `updatedAt` was seen but the gate's configuration refused the policy (for
    /// one, a non-empty policy with the governor disarmed, R15); the old one stays.
    Refused(String),
    /// The store could not be read; the policy in force stays until it can.
    StoreFailed(String),
}

/// What one look at the stored shadow policy (R46) did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShadowPoll {
    /// Nothing new.
    Unchanged,
    /// A new shadow policy was put in force (`updated_at`), or, with `None`, the stored one
    /// was removed and the gate's shadow with it.
    Replaced {
        /// The new shadow's `updatedAt`; `None`: removed.
        updated_at: Option<String>,
    },
    /// A new stored shadow could not be read or was refused; the shadow in force stays (a
    /// shadow never refuses a call, R46).
    Refused(String),
    /// The store could not be read; the shadow in force stays until it can.
    StoreFailed(String),
}

/// Watches the stored policy and replaces the gate's when its `updatedAt` changes; the
/// stored shadow policy too (R46, [`PolicyWatch::poll_shadow_once`]).
#[derive(Debug)]
pub struct PolicyWatch {
    handle: Box<dyn PolicyTarget>,
    last: Option<String>,
    /// The stored shadow's `updatedAt` in force: `None` before the first look (whatever the
    /// gate started with stays until then), `Some(None)` when none is stored.
    last_shadow: Option<Option<String>>,
}

impl PolicyWatch {
    /// A watch over `handle` (toolgate's `GovernanceHandle`, or any [`PolicyTarget`]).
    /// `seen` is the `updatedAt` already in force (from [`load_policy_state`] at startup),
    /// if any.
    pub fn new(handle: impl PolicyTarget + 'static, seen: Option<String>) -> Self {
        Self {
            handle: Box::new(handle),
            last: seen,
            last_shadow: None,
        }
    }

    /// The same, with the stored shadow's `updatedAt` already in force (from
    /// [`load_shadow_policy`] at startup; `None`: no stored shadow).
    #[must_use]
    pub fn with_shadow_seen(mut self, seen: Option<String>) -> Self {
        self.last_shadow = Some(seen);
        self
    }

    /// Looks once at the stored shadow policy (R46) and puts a new one in force, or removes
    /// the gate's when the stored one was removed. Unlike the enforced policy, a stored
    /// shadow that cannot be read changes nothing: the shadow in force stays, and calls are
    /// decided as before.
    pub async fn poll_shadow_once(&mut self, store: &dyn InboxStore) -> ShadowPoll {
        let stored = match store.get_shadow_policy().await {
            Ok(s) => s,
            Err(e) => return ShadowPoll::StoreFailed(e.to_string()),
        };
        let stamp = stored.as_ref().map(|s| s.updated_at.clone());
        if self.last_shadow.as_ref() == Some(&stamp) {
            return ShadowPoll::Unchanged;
        }
        self.last_shadow = Some(stamp.clone());
        let shadow = match &stored {
            None => None,
            Some(stored) => {
                let limits = self.handle.limits();
                match Policy::from_json_str(&stored.body, &limits) {
                    Ok(p) => Some(p),
                    Err(e) => {
                        return ShadowPoll::Refused(format!(
                            "the stored shadow policy (updated {}) cannot be read: {}",
                            stored.updated_at,
                            e.errors
                                .iter()
                                .map(ToString::to_string)
                                .collect::<Vec<_>>()
                                .join("; ")
                        ));
                    }
                }
            }
        };
        match self.handle.replace_shadow_policy(shadow) {
            Ok(()) => ShadowPoll::Replaced { updated_at: stamp },
            Err(errs) => ShadowPoll::Refused(errs.to_string()),
        }
    }

    /// Looks once. A stored policy that cannot be read replaces the policy in force with
    /// [`PolicyState::Unreadable`]; a store that cannot be reached changes nothing (it is
    /// tried again on the next look).
    pub async fn poll_once(&mut self, store: &dyn InboxStore) -> PolicyPoll {
        let stored = match store.get_policy().await {
            Ok(Some(s)) => s,
            Ok(None) => return PolicyPoll::Unchanged,
            Err(e) => return PolicyPoll::StoreFailed(e.to_string()),
        };
        if self.last.as_deref() == Some(stored.updated_at.as_str()) {
            return PolicyPoll::Unchanged;
        }
        let limits = self.handle.limits();
        let state = policy_state_of(&stored, &limits);
        let readable = matches!(state, PolicyState::Readable(_));
        self.last = Some(stored.updated_at.clone());
        match self.handle.replace_policy(state) {
            Ok(()) => PolicyPoll::Replaced {
                updated_at: stored.updated_at,
                readable,
            },
            Err(errs) => PolicyPoll::Refused(errs.to_string()),
        }
    }
}

/// Logs what a look at the stored shadow policy did (R46).
pub fn log_shadow_poll(poll: ShadowPoll) {
    match poll {
        ShadowPoll::Unchanged => {}
        ShadowPoll::Replaced { updated_at } => {
            tracing::info!(?updated_at, "the stored shadow policy was replaced");
        }
        ShadowPoll::Refused(why) => {
            tracing::warn!(%why, "a new stored shadow policy was refused; the shadow in force stays");
        }
        ShadowPoll::StoreFailed(why) => {
            tracing::warn!(%why, "the stored shadow policy could not be read; the shadow in force stays");
        }
    }
}

/// Spawns a task that looks at the stored policy (and the stored shadow policy, R46) every
/// `interval` and replaces the gate's when it changes (no restart needed). Abort the
/// returned handle to stop it.
pub fn poll_policy(
    handle: impl PolicyTarget + 'static,
    store: std::sync::Arc<dyn InboxStore>,
    seen: Option<String>,
    interval: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut watch = PolicyWatch::new(handle, seen);
        loop {
            match watch.poll_once(&*store).await {
                PolicyPoll::Unchanged => {}
                PolicyPoll::Replaced {
                    updated_at,
                    readable,
                } => {
                    tracing::info!(%updated_at, readable, "the stored tenant policy was replaced");
                }
                PolicyPoll::Refused(why) => {
                    tracing::warn!(%why, "a new stored tenant policy was refused; the old one stays");
                }
                PolicyPoll::StoreFailed(why) => {
                    tracing::warn!(%why, "the stored tenant policy could not be read; the policy in force stays");
                }
            }
            log_shadow_poll(watch.poll_shadow_once(&*store).await);
            tokio::time::sleep(interval).await;
        }
    })
}
