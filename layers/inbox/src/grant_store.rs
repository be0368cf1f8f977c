//! The engine's grant store on an inbox (R45): [`InboxGrants`] answers the engine's
//! synchronous look-ups and uses from an [`InboxStore`]'s grants, on a thread of its own.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use toolgate_core::Granted;
use toolgate_engine::grant::{Grant, GrantStore, GrantStoreError};
use toolgate_engine::quota::Millis;

use crate::error::{InboxError, InboxErrorKind};
use crate::grants::{GrantState, StoredGrant};
use crate::model::Timestamp;
use crate::store::InboxStore;

/// How long a call waits for the inbox to answer a grant look-up before it is refused
/// (fail closed: asked, or for a use, not sent).
pub const GRANT_TIMEOUT: Duration = Duration::from_secs(10);

type Reply<T> = std::sync::mpsc::SyncSender<Result<T, InboxError>>;

enum Job {
    Live(Timestamp, Reply<Vec<StoredGrant>>),
    Use(String, Timestamp, Reply<bool>),
}

/// The engine's [`GrantStore`] on an [`InboxStore`]'s grants (R45).
///
/// The engine decides synchronously, and an inbox answers asynchronously, so the store is
/// driven by a thread of its own (with a one-thread Tokio runtime) and each call waits for
/// its answer — one round trip to the database — blocking the caller's thread meanwhile,
/// for at most [`GRANT_TIMEOUT`]. The thread runs every request it gets concurrently.
/// A look-up is only made for a call that would be asked.
///
/// Fail closed: a look-up that fails answers no call (the call is asked, with the reason);
/// a use that fails or times out is not counted and the call is not sent (`rejected`).
///
/// For a store whose connections are tied to the runtime that made them (PostgreSQL), give
/// it a store made on the grants thread: [`InboxGrants::start_with`].
pub struct InboxGrants {
    jobs: Mutex<tokio::sync::mpsc::UnboundedSender<Job>>,
    name: String,
}

impl fmt::Debug for InboxGrants {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InboxGrants")
            .field("store", &self.name)
            .finish_non_exhaustive()
    }
}

impl InboxGrants {
    /// Serves the grants of `store` (an inbox whose operations can run on any runtime, as
    /// SQLite's can).
    ///
    /// # Errors
    ///
    /// The thread cannot be started.
    pub fn start(store: Arc<dyn InboxStore>) -> Result<Self, InboxError> {
        Self::start_with(format!("{store:?}"), move || async move { Ok(store) })
    }

    /// Serves the grants of the store `make` builds, on the grants thread (so a pool of
    /// connections it opens is driven by that thread's runtime, never by a caller that may
    /// be blocked waiting for it). `name` is what errors and `Debug` call the store.
    ///
    /// # Errors
    ///
    /// The thread cannot be started, or `make` fails.
    pub fn start_with<F, Fut>(name: String, make: F) -> Result<Self, InboxError>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<Arc<dyn InboxStore>, InboxError>> + 'static,
    {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Job>();
        let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel::<Result<(), InboxError>>(1);
        let spawned = std::thread::Builder::new()
            .name(String::from("toolgate-grants"))
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(InboxError::new(
                            InboxErrorKind::Backend,
                            format!("the grants cannot be served: {e}"),
                        )));
                        return;
                    }
                };
                rt.block_on(async move {
                    let store = match make().await {
                        Ok(s) => {
                            let _ = ready_tx.send(Ok(()));
                            s
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    // Ends when every sender is dropped (the `InboxGrants` with it).
                    while let Some(job) = rx.recv().await {
                        let store = Arc::clone(&store);
                        tokio::spawn(async move {
                            match job {
                                Job::Live(now, reply) => {
                                    let _ = reply.send(store.live_grants(now).await);
                                }
                                Job::Use(id, now, reply) => {
                                    let _ = reply.send(store.use_grant(&id, now).await);
                                }
                            }
                        });
                    }
                });
            });
        if let Err(e) = spawned {
            return Err(InboxError::new(
                InboxErrorKind::Backend,
                format!("the grants cannot be served: {e}"),
            ));
        }
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Self {
                jobs: Mutex::new(tx),
                name,
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(InboxError::new(
                InboxErrorKind::Backend,
                "the grants thread stopped before it started",
            )),
        }
    }

    fn ask<T>(&self, job: impl FnOnce(Reply<T>) -> Job) -> Result<T, GrantStoreError> {
        let (reply, answer) = std::sync::mpsc::sync_channel(1);
        let sent = match self.jobs.lock() {
            Ok(jobs) => jobs.send(job(reply)).is_ok(),
            Err(_) => false,
        };
        if !sent {
            return Err(GrantStoreError(format!(
                "the grants thread of {} stopped",
                self.name
            )));
        }
        match answer.recv_timeout(GRANT_TIMEOUT) {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(GrantStoreError(e.to_string())),
            Err(_) => Err(GrantStoreError(format!(
                "{} did not answer within {}",
                self.name,
                humantime::format_duration(GRANT_TIMEOUT)
            ))),
        }
    }
}

impl GrantStore for InboxGrants {
    fn first_live(
        &self,
        now: Millis,
        matches: &mut dyn FnMut(&Grant) -> bool,
    ) -> Result<Option<Granted>, GrantStoreError> {
        let now = Timestamp::from_millis(i64::try_from(now).unwrap_or(i64::MAX));
        let live = self.ask(|reply| Job::Live(now, reply))?;
        Ok(live
            .iter()
            .filter(|g| g.state(now) == GrantState::Live)
            .find(|g| matches(&g.grant))
            .map(|g| g.grant.granted()))
    }

    fn record_use(&self, id: &str, now: Millis) -> Result<bool, GrantStoreError> {
        let now = Timestamp::from_millis(i64::try_from(now).unwrap_or(i64::MAX));
        self.ask(|reply| Job::Use(id.to_owned(), now, reply))
    }
}
