//! Waiting: for a held call to reach a state, and for the stored policy to change, woken by
//! `LISTEN`/`NOTIFY` and polling when notices are lost.

use std::fmt;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use toolgate_engine::PolicyTarget;
use toolgate_inbox::{HeldCalls, HeldRecord, InboxError, PolicyPoll, PolicyWatch, State};

use super::PostgresInbox;
use crate::listen::{Listener, Notice, Subscription, can_reach};

/// Why a wait for a held call ended without it reaching the state waited for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitError {
    /// No held call has this id.
    UnknownId(String),
    /// The call is in a state from which the one waited for cannot be reached (denied while
    /// waiting for `approved`, say).
    Unreachable {
        /// The held call.
        id: String,
        /// Its state.
        state: State,
    },
    /// The call did not reach the state in time.
    Timeout {
        /// The held call.
        id: String,
        /// Its state when the time was up.
        state: State,
        /// How long it was waited for.
        waited: Duration,
    },
    /// The store failed.
    Store(InboxError),
}

impl fmt::Display for WaitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WaitError::UnknownId(id) => {
                write!(f, "no held call `{id}`: this inbox did not issue it")
            }
            WaitError::Unreachable { id, state } => write!(
                f,
                "held call `{id}` is `{state}`; what was waited for can no longer happen"
            ),
            WaitError::Timeout { id, state, waited } => write!(
                f,
                "held call `{id}` is still `{state}` after {}",
                humantime::format_duration(*waited)
            ),
            WaitError::Store(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for WaitError {}

impl From<InboxError> for WaitError {
    fn from(e: InboxError) -> Self {
        WaitError::Store(e)
    }
}

impl PostgresInbox {
    /// Subscribes to the inbox's changes: every state change of every held call and every
    /// policy put, by any instance. The first call opens the listening connection (one per
    /// inbox, shared by its clones) and returns once it listens; it reconnects by itself
    /// when lost, and then sends [`Notice::Missed`].
    pub async fn subscribe(&self) -> Result<Subscription, InboxError> {
        let inner = &self.inner;
        let listener = inner
            .listener
            .get_or_try_init(|| {
                Listener::start(
                    crate::tls::Prepared {
                        config: inner.config.clone(),
                        connector: inner.connector.clone(),
                        transport: inner.transport.clone(),
                    },
                    inner.located.channel.clone(),
                    inner.server.clone(),
                    inner.options.poll_interval,
                )
            })
            .await?;
        Ok(listener.subscribe())
    }

    /// Waits until the held call `id` is in `state`, and returns it then.
    ///
    /// Wakes on the inbox's notifications (another instance's answer wakes it at once), and
    /// also looks every [`PostgresOptions::poll_interval`](crate::PostgresOptions::poll_interval) in case notices were lost; when
    /// notifications cannot be had at all, it polls. Fails as soon as `state` can no longer
    /// be reached (a call denied while waiting for `approved`), or after `timeout`.
    pub async fn wait_for(
        &self,
        id: &str,
        state: State,
        timeout: Duration,
    ) -> Result<HeldRecord, WaitError> {
        self.wait(id, timeout, |s| s == state, |s| can_reach(s, state))
            .await
    }

    /// Waits until the held call `id` is in a state for which `done` holds (failing as
    /// [`WaitError::Unreachable`] when it is in a final state for which it does not).
    pub async fn wait_until(
        &self,
        id: &str,
        timeout: Duration,
        done: impl Fn(State) -> bool,
    ) -> Result<HeldRecord, WaitError> {
        self.wait(id, timeout, &done, |s| !s.is_final() || done(s))
            .await
    }

    async fn wait(
        &self,
        id: &str,
        timeout: Duration,
        done: impl Fn(State) -> bool,
        reachable: impl Fn(State) -> bool,
    ) -> Result<HeldRecord, WaitError> {
        let started = Instant::now();
        // INVARIANT: subscribe before the first look, so a change committed between the look
        // and the wait is announced to this subscription.
        let mut notices = match self.subscribe().await {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(error = %e, "waiting for a held call by polling: notifications cannot be had");
                None
            }
        };
        loop {
            let record = self
                .get(id)
                .await?
                .ok_or_else(|| WaitError::UnknownId(id.to_owned()))?;
            if done(record.state) {
                return Ok(record);
            }
            if !reachable(record.state) {
                return Err(WaitError::Unreachable {
                    id: id.to_owned(),
                    state: record.state,
                });
            }
            let waited = started.elapsed();
            if waited >= timeout {
                return Err(WaitError::Timeout {
                    id: id.to_owned(),
                    state: record.state,
                    waited,
                });
            }
            let nap = self.inner.options.poll_interval.min(timeout - waited);
            match &mut notices {
                Some(n) => {
                    let _ = tokio::time::timeout(nap, next_about(n, id)).await;
                }
                None => tokio::time::sleep(nap).await,
            }
        }
    }

    /// Keeps `handle`'s tenant policy in step with the stored one: looks at once, then again
    /// whenever a policy put is announced (any instance's `toolgate policy put` reaches every
    /// running gate within a round trip), and every `fallback` in case announcements are lost.
    /// `seen` is the `updatedAt` already in force (from [`toolgate_inbox::load_policy_state`]).
    /// Abort the returned handle to stop.
    pub fn watch_policy(
        &self,
        handle: impl PolicyTarget + 'static,
        seen: Option<String>,
        fallback: Duration,
    ) -> JoinHandle<()> {
        let store = self.clone();
        tokio::spawn(async move {
            let mut watch = PolicyWatch::new(handle, seen);
            let mut notices = match store.subscribe().await {
                Ok(s) => Some(s),
                Err(e) => {
                    tracing::warn!(error = %e, "watching the stored policy by polling: notifications cannot be had");
                    None
                }
            };
            loop {
                match watch.poll_once(&store).await {
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
                // R46: the stored shadow policy, announced on the same channel.
                toolgate_inbox::log_shadow_poll(watch.poll_shadow_once(&store).await);
                match &mut notices {
                    Some(n) => {
                        let _ = tokio::time::timeout(fallback, next_policy(n)).await;
                    }
                    None => tokio::time::sleep(fallback).await,
                }
            }
        })
    }
}

/// Waits for a notice about `id` (or one saying notices were lost). Never returns once the
/// inbox is gone: the caller's timeout ends the wait, and it looks itself.
async fn next_about(notices: &mut Subscription, id: &str) {
    loop {
        match notices.next().await {
            Some(Notice::State { interaction_id, .. }) if interaction_id == id => return,
            Some(Notice::Missed) => return,
            Some(_) => {}
            None => std::future::pending::<()>().await,
        }
    }
}

/// Waits for a policy notice (or one saying notices were lost).
async fn next_policy(notices: &mut Subscription) {
    loop {
        match notices.next().await {
            Some(Notice::Policy { .. } | Notice::Missed) => return,
            Some(_) => {}
            None => std::future::pending::<()>().await,
        }
    }
}
