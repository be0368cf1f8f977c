//! How a SQLite inbox is opened: durability (`synchronous`), the busy timeout, the
//! instance name, whether a missing file is created, and whether operations run inline.

use super::*;

/// SQLite's `synchronous` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Synchronous {
    /// `NORMAL`: durable against a process crash (the default).
    #[default]
    Normal,
    /// `FULL`: durable against power loss too.
    Full,
}

impl Synchronous {
    pub(super) fn pragma(self) -> &'static str {
        match self {
            Synchronous::Normal => "NORMAL",
            Synchronous::Full => "FULL",
        }
    }
}

/// How a [`SqliteInbox`] opens its file.
///
/// ```
/// use std::time::Duration;
/// use toolgate_inbox::{SqliteOptions, Synchronous};
/// let o = SqliteOptions::default().synchronous(Synchronous::Full).busy_timeout(Duration::from_secs(1));
/// assert_eq!(o.synchronous, Synchronous::Full);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SqliteOptions {
    /// `synchronous` (default `NORMAL`).
    pub synchronous: Synchronous,
    /// How long to wait for another connection's lock before failing (default 5 s).
    pub busy_timeout: Duration,
    /// This runtime instance's name, recorded with each claim; [`HeldCalls::recover`](crate::HeldCalls::recover)
    /// marks only this instance's claims `unknown` (default `default`).
    pub instance: String,
    /// Create the file when it does not exist (default `true`).
    pub create: bool,
    /// Run each operation on the calling thread instead of Tokio's blocking pool (default
    /// `false`). About twice the throughput on a busy machine, but each operation then
    /// blocks the async worker that awaits it — for a commit, and for up to the busy timeout
    /// when another connection holds the lock. For benches and for hosts that accept that.
    pub run_inline: bool,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            synchronous: Synchronous::Normal,
            busy_timeout: Duration::from_secs(5),
            instance: String::from("default"),
            create: true,
            run_inline: false,
        }
    }
}

impl SqliteOptions {
    /// Sets `synchronous`.
    #[must_use]
    pub fn synchronous(mut self, s: Synchronous) -> Self {
        self.synchronous = s;
        self
    }

    /// Sets the busy timeout.
    #[must_use]
    pub fn busy_timeout(mut self, d: Duration) -> Self {
        self.busy_timeout = d;
        self
    }

    /// Sets the instance name.
    #[must_use]
    pub fn instance(mut self, name: impl Into<String>) -> Self {
        self.instance = name.into();
        self
    }

    /// Whether to create a missing file.
    #[must_use]
    pub fn create(mut self, yes: bool) -> Self {
        self.create = yes;
        self
    }

    /// Whether to run operations on the calling thread (see [`SqliteOptions::run_inline`]).
    #[must_use]
    pub fn run_inline(mut self, yes: bool) -> Self {
        self.run_inline = yes;
        self
    }
}
