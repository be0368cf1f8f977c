//! The inbox's stored tenant policy in the gate of `toolgate mcp serve` (R22, R23, R46).
//!
//! `toolgate policy put` (or the approval page) stores a policy in the inbox; every running
//! `toolgate mcp serve` on that inbox decides by it:
//!
//! - **At start** the stored policy, and the stored shadow policy, replace the
//!   configuration's ([`onto`]). A stored policy that cannot be read is R22's: every `mcp`
//!   and `http` call is refused `policy_unreadable` until a valid one is put. A stored shadow
//!   that cannot be read, or a store that cannot be read, stops the start (exit 2).
//! - **While running** ([`Follower`]) a SQLite inbox is looked at every
//!   [`SQLITE_POLL`]; a PostgreSQL inbox announces every put (LISTEN/NOTIFY), looked at on
//!   the notice, with a look every [`POSTGRES_FALLBACK`] in case notices are lost. A put
//!   reaches every running gate within a second.
//! - **On SIGHUP** the configuration read again gets the stored policy before it is put in
//!   force ([`onto`]), and the follower looks again from scratch ([`Follower::again`]), so a
//!   put made while the reload ran is not lost.

use std::sync::Arc;
use std::time::Duration;

use toolgate::GovernanceHandle;
use toolgate_engine::Governance;
use toolgate_inbox::{InboxStore, PolicyPoll, PolicyWatch, load_shadow_policy, policy_state_of};
use toolgate_inbox_postgres::{Notice, PostgresInbox};

/// How often a SQLite inbox's stored policy is looked at.
pub(crate) const SQLITE_POLL: Duration = Duration::from_millis(250);

/// How often a PostgreSQL inbox's stored policy is looked at with no notice.
pub(crate) const POSTGRES_FALLBACK: Duration = Duration::from_secs(5);

/// `governance` with the inbox's stored policy and stored shadow policy in place of its own
/// (its own stay when none is stored). Returns the stored stamps (enforced, shadow).
///
/// # Errors
///
/// A store that cannot be read, a stored shadow that cannot be read, or a configuration
/// that refuses the stored policy (a non-empty one with `enforce_tool_invocation: false`).
pub(crate) async fn onto(
    store: &dyn InboxStore,
    governance: Governance,
) -> Result<(Governance, Option<String>, Option<String>), String> {
    let limits = governance.settings().limits;
    // The store must answer: a policy that cannot be had is not taken for "none stored".
    let stored = store
        .get_policy()
        .await
        .map_err(|e| format!("the inbox's stored policy cannot be read: {e}"))?;
    let mut governance = governance;
    let mut seen = None;
    if let Some(stored) = stored {
        seen = Some(stored.updated_at.clone());
        governance = governance
            .with_policy(policy_state_of(&stored, &limits))
            .map_err(|e| format!("the inbox's stored policy is refused:\n{e}"))?;
    }
    let mut shadow_seen = None;
    if let Some((shadow, stamp)) = load_shadow_policy(store, &limits).await? {
        shadow_seen = Some(stamp);
        governance = governance
            .with_shadow_policy(Some(shadow))
            .map_err(|e| format!("the inbox's stored shadow policy is refused:\n{e}"))?;
    }
    Ok((governance, seen, shadow_seen))
}

/// Keeps a gate's policy in step with the inbox's stored one (see the module).
#[derive(Debug, Clone)]
pub(crate) struct Follower {
    again: Arc<tokio::sync::Notify>,
}

impl Follower {
    /// Starts following: `seen` and `shadow_seen` are the stamps [`onto`] put in force.
    pub(crate) async fn start(
        handle: GovernanceHandle,
        store: Arc<dyn InboxStore>,
        postgres: Option<&PostgresInbox>,
        seen: Option<String>,
        shadow_seen: Option<String>,
    ) -> Self {
        let mut feed = match postgres {
            None => None,
            Some(pg) => match pg.subscribe().await {
                Ok(feed) => Some(feed),
                Err(e) => {
                    eprintln!(
                        "toolgate: warning: the inbox's policy notices cannot be had ({e}); the stored policy is looked at every {}",
                        humantime::format_duration(SQLITE_POLL)
                    );
                    None
                }
            },
        };
        let again = Arc::new(tokio::sync::Notify::new());
        let wake = Arc::clone(&again);
        tokio::spawn(async move {
            let fresh =
                |seen, shadow| PolicyWatch::new(handle.clone(), seen).with_shadow_seen(shadow);
            let mut watch = fresh(seen, shadow_seen);
            loop {
                let every = if feed.is_some() {
                    POSTGRES_FALLBACK
                } else {
                    SQLITE_POLL
                };
                let reset = tokio::select! {
                    () = tokio::time::sleep(every) => false,
                    () = wake.notified() => true,
                    () = next_policy(&mut feed) => false,
                };
                if reset {
                    // After a reload: whatever is stored is put in force again.
                    watch = fresh(None, None);
                }
                log(watch.poll_once(&*store).await);
                toolgate_inbox::log_shadow_poll(watch.poll_shadow_once(&*store).await);
            }
        });
        Self { again }
    }

    /// Looks at the stored policy again from scratch (after a reload replaced the snapshot).
    pub(crate) fn again(&self) {
        self.again.notify_one();
    }
}

/// Waits for a policy notice (or one saying notices were lost); never, without a feed.
async fn next_policy(feed: &mut Option<toolgate_inbox_postgres::Subscription>) {
    let Some(feed) = feed else {
        return std::future::pending().await;
    };
    loop {
        match feed.next().await {
            Some(Notice::Policy { .. } | Notice::Missed) => return,
            Some(_) => {}
            None => return std::future::pending().await,
        }
    }
}

fn log(poll: PolicyPoll) {
    match poll {
        PolicyPoll::Unchanged => {}
        PolicyPoll::Replaced {
            updated_at,
            readable: true,
        } => eprintln!("toolgate: the inbox's stored policy (updated {updated_at}) is in force"),
        PolicyPoll::Replaced {
            updated_at,
            readable: false,
        } => eprintln!(
            "toolgate: the inbox's stored policy (updated {updated_at}) cannot be read: every mcp and http call is refused `policy_unreadable` until a valid one is put"
        ),
        PolicyPoll::Refused(why) => eprintln!(
            "toolgate: warning: the inbox's new stored policy is refused; the one in force stays: {why}"
        ),
        PolicyPoll::StoreFailed(why) => eprintln!(
            "toolgate: warning: the inbox's stored policy cannot be read now; the one in force stays: {why}"
        ),
    }
}
