//! The embedded SQLite backend (`rusqlite`, SQLite bundled into the binary).
//!
//! One connection per [`SqliteInbox`] (cheap to clone: clones share it), in WAL mode, with a
//! busy timeout so that another process's short transaction waits instead of failing.
//! Nothing blocks an async worker on another process's lock or on a sync to disk: inside a
//! Tokio runtime, with `synchronous = NORMAL`, an operation first runs on the calling thread
//! with the busy timeout lifted (a commit then only writes the WAL into the page cache) and
//! moves to Tokio's blocking pool, from the start, when the lock is taken or the connection
//! is in use; with `FULL` (a sync per commit) every operation runs on the blocking pool.
//! The one exception: a commit that fills the WAL past SQLite's automatic checkpoint
//! threshold (1,000 pages, about every 300 cycles) copies it back into the database file
//! and syncs both on that thread. Outside a runtime, operations run inline.
//!
//! # Durability
//!
//! With the default [`Synchronous::Normal`], every committed state change survives a crash
//! of the process (the WAL is written before the commit returns); a power loss may roll back
//! the last few commits. [`Synchronous::Full`] syncs the WAL on every commit, surviving power
//! loss too, at a fraction of the throughput. Either way a claim is committed before the tool
//! is invoked, so a crash can never lead to a second send: at worst the call is `unknown`.
//!
//! # Schema
//!
//! Created on open when the file is new, upgraded in place from an older version (version 1
//! gains the session and turn columns of version 2; a version-2 file without the index of
//! open calls, [`OPEN_INDEX`], gains it), and checked (`PRAGMA user_version`,
//! `PRAGMA application_id`) when it is not: a newer schema or a SQLite file that is not a
//! toolgate inbox is refused, never changed. A file that is not a database is refused with
//! a clear error and left as it is.
//!
//! One file, one thing: the SQLite store — its schema, connection and the SQL of each
//! operation, which share the one connection and its statement cache; what each outcome
//! means is decided in [`crate::state`] and the stored text forms are [`crate::codec`]'s.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use rusqlite::{
    Connection, ErrorCode, OpenFlags, OptionalExtension, Row, TransactionBehavior, params,
};
use toolgate::core::{AgentRef, RunContext, Turn};
use toolgate::engine::grant::Grant;
use toolgate::engine::policy::Policy;

use crate::codec;
use crate::error::{
    AnswerError, ClaimError, CompleteError, InboxError, InboxErrorKind as Kind, PolicySaveError,
};
use crate::grants::{self, RevokeError, StoredGrant};
use crate::model::{
    Answer, AnswerReceipt, Claim, Claimed, Completion, HeldRecord, Holding, NewHeldCall, State,
    StoredPolicy, Timestamp,
};
use crate::state::{self, PendingLost, Repeat, same_input};
use crate::store::{BoxFuture, InboxStore};

mod edit;
#[path = "sqlite_query.rs"]
mod query;
pub use query::PAGE_INDEXES;

/// The schema version this code writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = 2;

/// `PRAGMA application_id` of a toolgate inbox ("TGIB").
pub const APPLICATION_ID: i64 = 0x5447_4942;

/// The schema, version 1.
pub const SCHEMA_V1: &str = "
CREATE TABLE held_calls (
    interaction_id  TEXT PRIMARY KEY NOT NULL,
    call_id         TEXT NOT NULL,
    tool            TEXT NOT NULL,
    identities      TEXT NOT NULL,
    definition_hash TEXT NOT NULL,
    agent_profile   TEXT NOT NULL,
    agent_subagent  TEXT,
    input_json      TEXT NOT NULL,
    input_canonical TEXT NOT NULL,
    input_hash      TEXT NOT NULL,
    reasons         TEXT NOT NULL,
    run_mode        TEXT NOT NULL,
    run_background  INTEGER NOT NULL CHECK (run_background IN (0, 1)),
    created_at      INTEGER NOT NULL,
    expires_at      INTEGER NOT NULL,
    state           TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'denied', 'expired',
                        'cancelled', 'claimed', 'done', 'failed', 'unknown')),
    approver        TEXT,
    answer_key      TEXT,
    answer_approve  INTEGER CHECK (answer_approve IN (0, 1)),
    answer_reason   TEXT,
    answered_at     INTEGER,
    claim_token     TEXT,
    claimed_by      TEXT,
    claimed_at      INTEGER,
    result_json     TEXT,
    finished_at     INTEGER,
    updated_at      INTEGER NOT NULL
);
CREATE INDEX held_calls_by_state ON held_calls (state, expires_at);
CREATE INDEX held_calls_by_created ON held_calls (created_at);
CREATE TABLE stored_policy (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    body        TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);
";

/// The upgrade from version 1 to version 2: the session and turn each call was held in
/// (R43). A version-1 file is upgraded in place when it is opened.
pub const SCHEMA_V2: &str = "
ALTER TABLE held_calls ADD COLUMN session_id TEXT;
ALTER TABLE held_calls ADD COLUMN turn_id TEXT;
CREATE INDEX held_calls_by_session ON held_calls (session_id, turn_id, created_at);
";

/// The index [`InboxStore::find_open`] reads: the open (`pending`, `approved`) calls by
/// agent and input hash, so that its size follows the open calls, not the history. Not a
/// schema version of its own: it is created, when missing, each time a version-2 file is
/// opened (a no-op read when it exists), and a program that does not know it ignores it.
pub const OPEN_INDEX: &str = "
CREATE INDEX IF NOT EXISTS held_calls_open ON held_calls (agent_profile, input_hash)
    WHERE state IN ('pending', 'approved');
";

/// What [`InboxStore::hold_unless_repeated`] adds to a version-2 file: when the ending of
/// a call was told to a repeat of it (R26), and the index it finds a call's repeats by (all
/// of them, not only the open ones). Like [`OPEN_INDEX`], not a schema version of its own:
/// added, when missing, each time a version-2 file is opened; a program that does not know
/// them ignores them.
pub const REPEAT_COLUMN: &str = "
ALTER TABLE held_calls ADD COLUMN repeat_told_at INTEGER;
";

/// The grants people gave (R45), in the order given (`seq`). Like [`OPEN_INDEX`], not a
/// schema version of its own: created, when missing, each time a version-2 file is opened
/// (a program that does not know it ignores it). A revocation is recorded with who and when;
/// a spent grant is one whose `uses` reached `max_calls` (`last_used_at` says when); an
/// expired one is past `expires_at`.
pub const GRANTS_TABLE: &str = "
CREATE TABLE IF NOT EXISTS grants (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    id           TEXT NOT NULL UNIQUE,
    body         TEXT NOT NULL,
    expires_at   INTEGER NOT NULL,
    max_calls    INTEGER CHECK (max_calls IS NULL OR max_calls >= 1),
    uses         INTEGER NOT NULL DEFAULT 0,
    last_used_at INTEGER,
    created_at   INTEGER NOT NULL,
    revoked_by   TEXT,
    revoked_at   INTEGER,
    CHECK ((revoked_by IS NULL) = (revoked_at IS NULL))
);
";

/// What an answer records besides the approver's name: their verified principal, the
/// `sub` and `iss` of the identity-provider token they answered with (issue 22). Like
/// [`OPEN_INDEX`], not a schema version of its own: added, when missing, each time a
/// version-2 file is opened (answers recorded before have none); a program that does not
/// know them ignores them.
pub(crate) const APPROVER_PRINCIPAL_COLUMNS: &str = "
ALTER TABLE held_calls ADD COLUMN approver_subject TEXT;
ALTER TABLE held_calls ADD COLUMN approver_issuer TEXT;
";

/// The index of every held call by agent, input hash and age (see [`REPEAT_COLUMN`]).
pub const REPEAT_INDEX: &str = "
CREATE INDEX IF NOT EXISTS held_calls_by_input ON held_calls (agent_profile, input_hash, created_at);
";

/// The shadow tenant policy (R46), one row beside `stored_policy`. Like [`OPEN_INDEX`], not
/// a schema version of its own: created, when missing, each time a version-2 file is
/// opened; a program that does not know it ignores it.
pub(crate) const SHADOW_TABLE: &str = "
CREATE TABLE IF NOT EXISTS stored_shadow_policy (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    body        TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);
";

const COLUMNS: &str = "interaction_id, call_id, tool, identities, definition_hash, agent_profile, \
    agent_subagent, input_json, input_canonical, input_hash, reasons, run_mode, run_background, \
    created_at, expires_at, state, approver, answer_key, answer_reason, answered_at, claimed_by, \
    claimed_at, result_json, finished_at, updated_at, session_id, turn_id, approver_subject, \
    approver_issuer, target_json";

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
    fn pragma(self) -> &'static str {
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
    /// This runtime instance's name, recorded with each claim; [`InboxStore::recover`]
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

struct Inner {
    path: PathBuf,
    options: SqliteOptions,
    conn: Mutex<Option<Connection>>,
    /// Set when an error says the file is damaged or gone: the connection is dropped and
    /// the next operation opens (and checks) the file again.
    broken: AtomicBool,
    /// Set when an error says another connection held the lock (`SQLITE_BUSY`): read by
    /// [`Inner::try_fast`], which runs with no busy timeout.
    busy: AtomicBool,
    /// The identity (device, inode) of the file the connection has open, checked before
    /// each operation: a file deleted or replaced behind the connection's back is never
    /// written to (issue 20 item 12).
    identity: Mutex<Option<FileIdentity>>,
    /// Set once a connection was opened: a file deleted since is not created again in its
    /// place, even with [`SqliteOptions::create`].
    opened: AtomicBool,
}

/// A file's device and inode.
type FileIdentity = (u64, u64);

/// The identity of the file at `path`, `None` when there is none.
fn file_identity(path: &Path) -> Option<FileIdentity> {
    let meta = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        Some((meta.dev(), meta.ino()))
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        Some((0, 0))
    }
}

/// An inbox in one SQLite file.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use toolgate_inbox::{InboxStore, SqliteInbox, SqliteOptions, State};
/// let dir = tempfile::tempdir().unwrap();
/// let inbox = SqliteInbox::open(dir.path().join("inbox.db"), SqliteOptions::default()).unwrap();
/// assert!(inbox.list(Some(State::Pending)).await.unwrap().is_empty());
/// assert!(inbox.get("ia_never_issued").await.unwrap().is_none());
/// # }
/// ```
#[derive(Clone)]
pub struct SqliteInbox {
    inner: Arc<Inner>,
}

impl fmt::Debug for SqliteInbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteInbox")
            .field("path", &self.inner.path)
            .field("options", &self.inner.options)
            .finish()
    }
}

impl SqliteInbox {
    /// Opens (or creates) the inbox at `path`: WAL mode, the configured `synchronous` and
    /// busy timeout, the schema created or checked. Blocks while it does.
    pub fn open(path: impl AsRef<Path>, options: SqliteOptions) -> Result<Self, InboxError> {
        let store = Self::open_lazy(path, options);
        let conn = store.inner.connect()?;
        *store.inner.lock() = Some(conn);
        Ok(store)
    }

    /// A handle that opens the file on first use, and again after an error that says the
    /// file is damaged or gone. Until the file can be opened, every operation fails with the
    /// reason (so the inbox channel refuses asked calls, failing closed), and the service
    /// keeps running for calls that do not ask.
    pub fn open_lazy(path: impl AsRef<Path>, options: SqliteOptions) -> Self {
        Self {
            inner: Arc::new(Inner {
                path: path.as_ref().to_path_buf(),
                options,
                conn: Mutex::new(None),
                broken: AtomicBool::new(false),
                busy: AtomicBool::new(false),
                identity: Mutex::new(None),
                opened: AtomicBool::new(false),
            }),
        }
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The options it was opened with.
    pub fn options(&self) -> &SqliteOptions {
        &self.inner.options
    }

    /// Runs `op` on the connection: inline outside a Tokio runtime or with
    /// [`SqliteOptions::run_inline`]; inside a runtime, first on the calling thread when that
    /// cannot wait (see [`Inner::try_fast`]), else on the blocking pool.
    fn run<T, E, F>(&self, op: F) -> BoxFuture<'static, Result<T, E>>
    where
        T: Send + 'static,
        E: From<InboxError> + Send + 'static,
        F: Fn(&Inner, &mut Connection) -> Result<T, E> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        if inner.options.run_inline {
            return Box::pin(async move { inner.with_conn(op) });
        }
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => Box::pin(async move {
                if let Some(result) = inner.try_fast(&op) {
                    return result;
                }
                match rt.spawn_blocking(move || inner.with_conn(op)).await {
                    Ok(result) => result,
                    Err(e) => Err(E::from(InboxError::new(
                        Kind::Backend,
                        format!("the inbox operation did not finish: {e}"),
                    ))),
                }
            }),
            Err(_) => Box::pin(async move { inner.with_conn(op) }),
        }
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Connection>> {
        // A panic while holding the lock leaves the connection usable: any transaction it
        // had open was rolled back when the transaction guard dropped.
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The fast path of [`SqliteInbox::run`]: runs `op` on the calling thread when nothing
    /// can make it wait — `synchronous` is `NORMAL` (a commit writes the WAL into the page
    /// cache and syncs nothing), the connection is open and free, and SQLite's busy timeout
    /// is lifted for the attempt so that a lock held by another connection fails at once
    /// instead of waiting. `None` when it did not run, or ran into such a lock: every
    /// operation that fails `SQLITE_BUSY` has changed nothing (each is one autocommit
    /// statement or an `IMMEDIATE` transaction, and both take the write lock before they
    /// write), so the caller runs it again from the start on the blocking pool, with the
    /// busy timeout. This saves the thread hand-off that otherwise doubles the CPU cost of
    /// an operation (issue 12).
    fn try_fast<T, E, F>(&self, op: &F) -> Option<Result<T, E>>
    where
        E: From<InboxError>,
        F: Fn(&Inner, &mut Connection) -> Result<T, E>,
    {
        if self.options.synchronous != Synchronous::Normal {
            return None;
        }
        let mut guard = match self.conn.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        if let Err(e) = self.same_file(&mut guard) {
            return Some(Err(E::from(e)));
        }
        let conn = guard.as_mut()?;
        conn.busy_timeout(Duration::ZERO).ok()?;
        self.busy.store(false, Ordering::SeqCst);
        let result = op(self, conn);
        let restored = conn.busy_timeout(self.options.busy_timeout);
        if self.broken.swap(false, Ordering::SeqCst) || restored.is_err() {
            *guard = None;
        }
        if self.busy.swap(false, Ordering::SeqCst) {
            return None;
        }
        Some(result)
    }

    fn with_conn<T, E, F>(&self, op: F) -> Result<T, E>
    where
        E: From<InboxError>,
        F: FnOnce(&Inner, &mut Connection) -> Result<T, E>,
    {
        let mut guard = self.lock();
        self.same_file(&mut guard)?;
        let conn = match guard.as_mut() {
            Some(c) => c,
            None => guard.insert(self.connect()?),
        };
        let result = op(self, conn);
        if self.broken.swap(false, Ordering::SeqCst) {
            *guard = None;
        }
        result
    }

    /// Checks that the open connection's file is still the one at the path: a file deleted
    /// (or moved away) is refused, never written to, and a file replaced by another is
    /// reopened — the connection to the old one is closed first — so that no answer goes
    /// into a file nobody reads again (issue 20 item 12). Nothing to check when no
    /// connection is open: the next one opens (and checks) the file at the path.
    fn same_file(&self, guard: &mut Option<Connection>) -> Result<(), InboxError> {
        if guard.is_none() {
            return Ok(());
        }
        let known = *self.identity.lock().unwrap_or_else(PoisonError::into_inner);
        let found = file_identity(&self.path);
        if found.is_some() && found == known {
            return Ok(());
        }
        *guard = None;
        tracing::warn!(
            path = %self.path.display(),
            "the inbox database was deleted or replaced since it was opened; its connection was closed"
        );
        match found {
            None => Err(self.deleted()),
            Some(_) => Ok(()),
        }
    }

    fn deleted(&self) -> InboxError {
        InboxError::new(
            Kind::Unavailable,
            format!(
                "the inbox database `{}` was deleted or moved away since it was opened; nothing was written to it (put the file back, or restart to start a new inbox)",
                self.path.display()
            ),
        )
    }

    fn connect(&self) -> Result<Connection, InboxError> {
        let path = &self.path;
        if self.opened.load(Ordering::SeqCst) && !path.exists() {
            return Err(self.deleted());
        }
        if !self.options.create && !path.exists() {
            return Err(InboxError::new(
                Kind::Unavailable,
                format!("no inbox database at `{}`", path.display()),
            ));
        }
        let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        if self.options.create {
            flags |= OpenFlags::SQLITE_OPEN_CREATE;
        }
        let mut conn = Connection::open_with_flags(path, flags).map_err(|e| self.err(e))?;
        conn.busy_timeout(self.options.busy_timeout)
            .map_err(|e| self.err(e))?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .map_err(|e| self.err(e))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(InboxError::new(
                Kind::Unavailable,
                format!(
                    "the inbox database `{}` cannot use WAL mode (journal mode `{mode}`)",
                    path.display()
                ),
            ));
        }
        conn.pragma_update(None, "synchronous", self.options.synchronous.pragma())
            .map_err(|e| self.err(e))?;
        self.migrate(&mut conn)?;
        *self.identity.lock().unwrap_or_else(PoisonError::into_inner) = file_identity(path);
        self.opened.store(true, Ordering::SeqCst);
        Ok(conn)
    }

    fn migrate(&self, conn: &mut Connection) -> Result<(), InboxError> {
        let version = user_version(conn).map_err(|e| self.err(e))?;
        if version == SCHEMA_VERSION {
            self.check_application_id(conn)?;
            conn.execute_batch(OPEN_INDEX).map_err(|e| self.err(e))?;
            self.add_shadow_table(conn)?;
            self.add_repeat_column(conn)?;
            self.add_principal_columns(conn)?;
            return query::add_page_indexes(self, conn);
        }
        if version > SCHEMA_VERSION {
            return Err(self.newer(version));
        }
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        // Another process may have created the schema while we waited for the lock.
        let version = user_version(&tx).map_err(|e| self.err(e))?;
        if version == 0 {
            let objects: i64 = tx
                .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
                .map_err(|e| self.err(e))?;
            if objects > 0 {
                return Err(self.foreign());
            }
            tx.execute_batch(SCHEMA_V1).map_err(|e| self.err(e))?;
            tx.execute_batch(SCHEMA_V2).map_err(|e| self.err(e))?;
            tx.execute_batch(OPEN_INDEX).map_err(|e| self.err(e))?;
            tx.pragma_update(None, "application_id", APPLICATION_ID)
                .map_err(|e| self.err(e))?;
            tx.pragma_update(None, "user_version", SCHEMA_VERSION)
                .map_err(|e| self.err(e))?;
        } else if version == 1 {
            // Only a toolgate inbox is upgraded; anything else is left unchanged.
            self.check_application_id(&tx)?;
            tx.execute_batch(SCHEMA_V2).map_err(|e| self.err(e))?;
            tx.execute_batch(OPEN_INDEX).map_err(|e| self.err(e))?;
            tx.pragma_update(None, "user_version", SCHEMA_VERSION)
                .map_err(|e| self.err(e))?;
        } else if version > SCHEMA_VERSION {
            return Err(self.newer(version));
        }
        tx.commit().map_err(|e| self.err(e))?;
        self.check_application_id(conn)?;
        self.add_shadow_table(conn)?;
        self.add_repeat_column(conn)?;
        self.add_principal_columns(conn)?;
        query::add_page_indexes(self, conn)
    }

    /// Adds [`APPROVER_PRINCIPAL_COLUMNS`] to a file that lacks them (read first: a file
    /// that has them is not written to).
    fn add_principal_columns(&self, conn: &mut Connection) -> Result<(), InboxError> {
        let has = |c: &Connection| -> rusqlite::Result<bool> {
            c.query_row(
                "SELECT count(*) FROM pragma_table_info('held_calls') WHERE name = 'approver_subject'",
                [],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n > 0)
        };
        if has(conn).map_err(|e| self.err(e))? {
            return Ok(());
        }
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        // Another process may have added them while we waited for the lock.
        if !has(&tx).map_err(|e| self.err(e))? {
            tx.execute_batch(APPROVER_PRINCIPAL_COLUMNS)
                .map_err(|e| self.err(e))?;
        }
        tx.commit().map_err(|e| self.err(e))
    }

    /// Adds [`SHADOW_TABLE`] to a file that lacks it (read first: a file that has it is not
    /// written to, so a read-only open of a current file stays read-only).
    fn add_shadow_table(&self, conn: &mut Connection) -> Result<(), InboxError> {
        let has: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'stored_shadow_policy'",
                [],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))?;
        if has == 0 {
            conn.execute_batch(SHADOW_TABLE).map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    /// Adds [`REPEAT_COLUMN`] and [`REPEAT_INDEX`] to a file that lacks them (read first: a
    /// file that has them is not written to).
    fn add_repeat_column(&self, conn: &mut Connection) -> Result<(), InboxError> {
        edit::add_target_column(self, conn)?;
        let has = |c: &Connection| -> rusqlite::Result<bool> {
            c.query_row(
                "SELECT count(*) FROM pragma_table_info('held_calls') WHERE name = 'repeat_told_at'",
                [],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n > 0)
        };
        if has(conn).map_err(|e| self.err(e))? {
            conn.execute_batch(REPEAT_INDEX).map_err(|e| self.err(e))?;
            return conn.execute_batch(GRANTS_TABLE).map_err(|e| self.err(e));
        }
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        // Another process may have added it while we waited for the lock.
        if !has(&tx).map_err(|e| self.err(e))? {
            tx.execute_batch(REPEAT_COLUMN).map_err(|e| self.err(e))?;
        }
        tx.execute_batch(REPEAT_INDEX).map_err(|e| self.err(e))?;
        tx.execute_batch(GRANTS_TABLE).map_err(|e| self.err(e))?;
        tx.commit().map_err(|e| self.err(e))
    }

    fn check_application_id(&self, conn: &Connection) -> Result<(), InboxError> {
        let id: i64 = conn
            .query_row("PRAGMA application_id", [], |r| r.get(0))
            .map_err(|e| self.err(e))?;
        if id == APPLICATION_ID {
            Ok(())
        } else {
            Err(self.foreign())
        }
    }

    fn newer(&self, version: i64) -> InboxError {
        InboxError::new(
            Kind::Schema,
            format!(
                "the inbox database `{}` has schema version {version}, newer than this program's {SCHEMA_VERSION}",
                self.path.display()
            ),
        )
    }

    fn foreign(&self) -> InboxError {
        InboxError::new(
            Kind::Schema,
            format!(
                "`{}` is a SQLite database but not a toolgate inbox; it was left unchanged",
                self.path.display()
            ),
        )
    }

    /// Maps a SQLite error to an inbox error that names the file.
    fn err(&self, e: rusqlite::Error) -> InboxError {
        let path = self.path.display();
        let code = e.sqlite_error_code();
        let (kind, message) = match code {
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => (
                Kind::Busy,
                format!(
                    "the inbox database `{path}` is locked by another connection (waited {}): {e}",
                    humantime::format_duration(self.options.busy_timeout)
                ),
            ),
            Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => (
                Kind::Corrupt,
                format!("the inbox database `{path}` is damaged or is not a database: {e}"),
            ),
            Some(
                ErrorCode::CannotOpen
                | ErrorCode::PermissionDenied
                | ErrorCode::ReadOnly
                | ErrorCode::SystemIoFailure
                | ErrorCode::DiskFull,
            ) => (
                Kind::Unavailable,
                format!("the inbox database `{path}` cannot be used: {e}"),
            ),
            Some(ErrorCode::ConstraintViolation) => (
                Kind::Duplicate,
                format!("the inbox database `{path}` refused a duplicate: {e}"),
            ),
            _ => (
                Kind::Backend,
                format!("the inbox database `{path}` failed: {e}"),
            ),
        };
        if matches!(kind, Kind::Corrupt | Kind::Unavailable) {
            self.broken.store(true, Ordering::SeqCst);
        }
        if kind == Kind::Busy {
            self.busy.store(true, Ordering::SeqCst);
        }
        InboxError::new(kind, message)
    }

    fn record_err(&self, id: &str, why: impl fmt::Display) -> InboxError {
        InboxError::new(
            Kind::Record,
            format!(
                "held call `{id}` in `{}` cannot be read: {why}",
                self.path.display()
            ),
        )
    }

    fn state_of(&self, conn: &Connection, id: &str) -> Result<Option<State>, InboxError> {
        let state: Option<String> = conn
            .prepare_cached("SELECT state FROM held_calls WHERE interaction_id = ?1")
            .and_then(|mut s| s.query_row([id], |r| r.get(0)).optional())
            .map_err(|e| self.err(e))?;
        match state {
            None => Ok(None),
            Some(s) => State::parse(&s)
                .map(Some)
                .ok_or_else(|| self.record_err(id, format!("unknown state `{s}`"))),
        }
    }
}

fn user_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("PRAGMA user_version", [], |r| r.get(0))
}

fn bool_int(b: bool) -> i64 {
    i64::from(b)
}

/// Reads one row selected with [`COLUMNS`]; a value that does not parse is a string error.
fn read_row(row: &Row<'_>) -> rusqlite::Result<Result<HeldRecord, String>> {
    let state: String = row.get(15)?;
    let identities: String = row.get(3)?;
    let reasons: String = row.get(10)?;
    let run_mode: String = row.get(11)?;
    let result_json: Option<String> = row.get(22)?;
    let session: Option<String> = row.get(25)?;
    let turn: Option<String> = row.get(26)?;
    let approver_principal = match (row.get::<_, Option<String>>(27)?, row.get(28)?) {
        (Some(subject), Some(issuer)) => Some(toolgate::core::Principal { subject, issuer }),
        _ => None,
    };
    let target: Option<String> = row.get(29)?;
    let parsed = (|| {
        let state = State::parse(&state).ok_or_else(|| format!("unknown state `{state}`"))?;
        let result = match result_json {
            Some(t) => Some(codec::parse_json(&t)?),
            None => None,
        };
        Ok::<_, String>((
            state,
            codec::identities_from_json(&identities)?,
            codec::reasons_from_json(&reasons)?,
            codec::run_mode_from(&run_mode)?,
            result,
        ))
    })();
    let (state, identities, reasons, mode, result) = match parsed {
        Ok(p) => p,
        Err(e) => return Ok(Err(e)),
    };
    let ts = |i: usize| -> rusqlite::Result<Option<Timestamp>> {
        Ok(row.get::<_, Option<i64>>(i)?.map(Timestamp::from_millis))
    };
    Ok(Ok(HeldRecord {
        call: NewHeldCall {
            interaction_id: row.get(0)?,
            call_id: row.get(1)?,
            tool: row.get(2)?,
            identities,
            definition_hash: row.get(4)?,
            agent: AgentRef {
                profile: row.get(5)?,
                subagent: row.get(6)?,
            },
            input_json: row.get(7)?,
            input_canonical: row.get(8)?,
            input_hash: row.get(9)?,
            reasons,
            run: RunContext {
                mode,
                background: row.get::<_, i64>(12)? != 0,
            },
            turn: match (session, turn) {
                (Some(session), Some(turn)) => Some(Turn { session, turn }),
                _ => None,
            },
            created_at: Timestamp::from_millis(row.get(13)?),
            expires_at: Timestamp::from_millis(row.get(14)?),
            target: target.as_deref().and_then(edit::target_from_json),
        },
        state,
        approver: row.get(16)?,
        approver_principal,
        answer_key: row.get(17)?,
        answer_reason: row.get(18)?,
        answered_at: ts(19)?,
        claimed_by: row.get(20)?,
        claimed_at: ts(21)?,
        result,
        finished_at: ts(23)?,
        updated_at: Timestamp::from_millis(row.get(24)?),
    }))
}

fn hold_op(inner: &Inner, conn: &Connection, c: &NewHeldCall) -> Result<(), InboxError> {
    let mut stmt = conn
        .prepare_cached(
            "INSERT INTO held_calls (interaction_id, call_id, tool, identities, definition_hash, \
             agent_profile, agent_subagent, input_json, input_canonical, input_hash, reasons, \
             run_mode, run_background, created_at, expires_at, state, updated_at, session_id, \
             turn_id, target_json) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, \
             ?13, ?14, ?15, 'pending', ?14, ?16, ?17, ?18)",
        )
        .map_err(|e| inner.err(e))?;
    let inserted = stmt.execute(params![
        c.interaction_id,
        c.call_id,
        c.tool,
        codec::identities_json(&c.identities),
        c.definition_hash,
        c.agent.profile,
        c.agent.subagent,
        c.input_json,
        c.input_canonical,
        c.input_hash,
        codec::reasons_json(&c.reasons),
        c.run.mode.as_str(),
        bool_int(c.run.background),
        c.created_at.as_millis(),
        c.expires_at.as_millis(),
        c.turn.as_ref().map(|t| t.session.as_str()),
        c.turn.as_ref().map(|t| t.turn.as_str()),
        c.target.as_ref().map(|t| t.to_json().to_string()),
    ]);
    match inserted {
        Ok(_) => Ok(()),
        Err(e) => {
            let e = inner.err(e);
            if e.kind() == Kind::Duplicate {
                Err(InboxError::new(
                    Kind::Duplicate,
                    format!("a held call `{}` already exists", c.interaction_id),
                ))
            } else {
                Err(e)
            }
        }
    }
}

fn get_op(
    inner: &Inner,
    conn: &mut Connection,
    id: &str,
) -> Result<Option<HeldRecord>, InboxError> {
    let row = conn
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM held_calls WHERE interaction_id = ?1"
        ))
        .and_then(|mut s| s.query_row([id], read_row).optional())
        .map_err(|e| inner.err(e))?;
    match row {
        None => Ok(None),
        Some(Ok(r)) => Ok(Some(r)),
        Some(Err(why)) => Err(inner.record_err(id, why)),
    }
}

fn list_op(
    inner: &Inner,
    conn: &mut Connection,
    state: Option<State>,
) -> Result<Vec<HeldRecord>, InboxError> {
    let sql = match state {
        Some(_) => format!(
            "SELECT {COLUMNS} FROM held_calls WHERE state = ?1 ORDER BY created_at, interaction_id"
        ),
        None => format!("SELECT {COLUMNS} FROM held_calls ORDER BY created_at, interaction_id"),
    };
    let mut stmt = conn.prepare_cached(&sql).map_err(|e| inner.err(e))?;
    let rows = match state {
        Some(s) => stmt.query_map([s.as_str()], read_row),
        None => stmt.query_map([], read_row),
    }
    .map_err(|e| inner.err(e))?;
    let mut out = Vec::new();
    for row in rows {
        match row.map_err(|e| inner.err(e))? {
            Ok(r) => out.push(r),
            Err(why) => return Err(inner.record_err("?", why)),
        }
    }
    Ok(out)
}

/// The statement of [`InboxStore::find_open`], selecting `columns`.
fn find_open_sql(columns: &str) -> String {
    format!("{} LIMIT 1", find_open_all_sql(columns))
}

/// The statement of [`InboxStore::find_open_all`] (every candidate, in `find_open`'s order),
/// selecting `columns`.
fn find_open_all_sql(columns: &str) -> String {
    format!(
        "SELECT {columns} FROM held_calls WHERE agent_profile = ?1 AND agent_subagent IS ?2 \
         AND input_hash = ?3 AND tool = ?4 COLLATE NOCASE AND state IN ('pending', 'approved') \
         ORDER BY state = 'approved' DESC, created_at DESC, interaction_id DESC"
    )
}

fn find_open_all_op(
    inner: &Inner,
    conn: &mut Connection,
    agent: &AgentRef,
    tool: &str,
    input_hash: &str,
) -> Result<Vec<HeldRecord>, InboxError> {
    let mut stmt = conn
        .prepare_cached(&find_open_all_sql(COLUMNS))
        .map_err(|e| inner.err(e))?;
    let rows = stmt
        .query_map(
            params![agent.profile, agent.subagent, input_hash, tool],
            read_row,
        )
        .map_err(|e| inner.err(e))?;
    let mut out = Vec::new();
    for row in rows {
        match row.map_err(|e| inner.err(e))? {
            Ok(r) => out.push(r),
            Err(why) => return Err(inner.record_err("?", why)),
        }
    }
    Ok(out)
}

fn find_open_op(
    inner: &Inner,
    conn: &mut Connection,
    agent: &AgentRef,
    tool: &str,
    input_hash: &str,
) -> Result<Option<HeldRecord>, InboxError> {
    // `COLLATE NOCASE` folds ASCII letters only, as `eq_ignore_ascii_case`; the `state`
    // term is the index's own, so SQLite reads `held_calls_open`.
    let row = conn
        .prepare_cached(&find_open_sql(COLUMNS))
        .and_then(|mut s| {
            s.query_row(
                params![agent.profile, agent.subagent, input_hash, tool],
                read_row,
            )
            .optional()
        })
        .map_err(|e| inner.err(e))?;
    match row {
        None => Ok(None),
        Some(Ok(r)) => Ok(Some(r)),
        Some(Err(why)) => Err(inner.record_err("?", why)),
    }
}

/// The statement of [`InboxStore::hold_unless_repeated`]'s look-up, selecting `columns`
/// and `repeat_told_at`: every held call of one agent, tool and input hash, newest first.
/// Calls held in the same millisecond are ordered as they were inserted (`rowid`), after an
/// open call before an ended one and an ending not yet told before one told (R26): never by
/// the random interaction id, which would make "the newest" a coin toss.
fn repeats_sql(columns: &str) -> String {
    format!(
        "SELECT {columns}, repeat_told_at FROM held_calls WHERE agent_profile = ?1 \
         AND agent_subagent IS ?2 AND input_hash = ?3 AND tool = ?4 COLLATE NOCASE \
         ORDER BY created_at DESC, state IN ('pending', 'approved', 'claimed') DESC, \
         repeat_told_at IS NULL DESC, rowid DESC"
    )
}

fn hold_unless_repeated_op(
    inner: &Inner,
    conn: &mut Connection,
    c: &NewHeldCall,
    now: Timestamp,
) -> Result<Holding, InboxError> {
    // INVARIANT: `BEGIN IMMEDIATE` takes the write lock before the look-up, so of two
    // repeats of one call, the second sees what the first held (R26).
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| inner.err(e))?;
    let newest = {
        let mut stmt = tx
            .prepare_cached(&repeats_sql(COLUMNS))
            .map_err(|e| inner.err(e))?;
        let mut rows = stmt
            .query(params![
                c.agent.profile,
                c.agent.subagent,
                c.input_hash,
                c.tool
            ])
            .map_err(|e| inner.err(e))?;
        let mut newest = None;
        while let Some(row) = rows.next().map_err(|e| inner.err(e))? {
            let record = read_row(row)
                .map_err(|e| inner.err(e))?
                .map_err(|why| inner.record_err("?", why))?;
            if same_input(&record, &c.input_json) {
                // After every [`COLUMNS`] one (`target_json` is the last, 29).
                let told: Option<i64> = row.get(30).map_err(|e| inner.err(e))?;
                newest = Some((record, told.is_some()));
                break;
            }
        }
        newest
    };
    let outcome = match newest {
        Some((mut record, told)) => match state::repeat_of(&record, told, now) {
            Repeat::Open => Some(Holding::Open(record)),
            Repeat::Expire => {
                tx.execute(
                    "UPDATE held_calls SET state = 'expired', repeat_told_at = ?2, updated_at = ?2 \
                     WHERE interaction_id = ?1 AND state = 'pending'",
                    params![record.id(), now.as_millis()],
                )
                .map_err(|e| inner.err(e))?;
                record.state = State::Expired;
                Some(Holding::Ended(record))
            }
            Repeat::Tell => {
                tx.execute(
                    "UPDATE held_calls SET repeat_told_at = ?2 WHERE interaction_id = ?1",
                    params![record.id(), now.as_millis()],
                )
                .map_err(|e| inner.err(e))?;
                Some(Holding::Ended(record))
            }
            Repeat::Hold => None,
        },
        None => None,
    };
    let outcome = match outcome {
        Some(o) => o,
        None => {
            hold_op(inner, &tx, c)?;
            Holding::Held
        }
    };
    tx.commit().map_err(|e| inner.err(e))?;
    Ok(outcome)
}

fn session_calls_op(
    inner: &Inner,
    conn: &mut Connection,
    session: &str,
    turn: Option<&str>,
) -> Result<Vec<HeldRecord>, InboxError> {
    let sql = format!(
        "SELECT {COLUMNS} FROM held_calls WHERE session_id = ?1 AND (?2 IS NULL OR turn_id = ?2) \
         ORDER BY created_at, interaction_id"
    );
    let mut stmt = conn.prepare_cached(&sql).map_err(|e| inner.err(e))?;
    let rows = stmt
        .query_map(params![session, turn], read_row)
        .map_err(|e| inner.err(e))?;
    let mut out = Vec::new();
    for row in rows {
        match row.map_err(|e| inner.err(e))? {
            Ok(r) => out.push(r),
            Err(why) => return Err(inner.record_err("?", why)),
        }
    }
    Ok(out)
}

fn cancel_turn_op(
    inner: &Inner,
    conn: &mut Connection,
    session: &str,
    turn: &str,
    now: Timestamp,
) -> Result<Vec<String>, InboxError> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| inner.err(e))?;
    // A call past its expiry was not cancelled: nobody answered in time (R26).
    tx.execute(
        "UPDATE held_calls SET state = 'expired', updated_at = ?3 \
         WHERE session_id = ?1 AND turn_id = ?2 AND state = 'pending' AND expires_at <= ?3",
        params![session, turn, now.as_millis()],
    )
    .map_err(|e| inner.err(e))?;
    // R47: an approved call not yet claimed is not yet sent: it ends too.
    let ids = {
        let mut stmt = tx
            .prepare_cached(
                "UPDATE held_calls SET state = 'cancelled', updated_at = ?3 \
                 WHERE session_id = ?1 AND turn_id = ?2 AND state IN ('pending', 'approved') \
                 RETURNING interaction_id, created_at",
            )
            .map_err(|e| inner.err(e))?;
        let rows = stmt
            .query_map(params![session, turn, now.as_millis()], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
            })
            .map_err(|e| inner.err(e))?;
        let mut ids = rows
            .collect::<rusqlite::Result<Vec<(String, i64)>>>()
            .map_err(|e| inner.err(e))?;
        ids.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
        ids.into_iter().map(|(id, _)| id).collect::<Vec<_>>()
    };
    tx.commit().map_err(|e| inner.err(e))?;
    Ok(ids)
}

type AnswerRow = (
    String,
    Option<String>,
    Option<i64>,
    i64,
    Option<String>,
    Option<String>,
    Option<i64>,
);

fn answer_op(
    inner: &Inner,
    conn: &mut Connection,
    id: &str,
    answer: &Answer,
    now: Timestamp,
) -> Result<AnswerReceipt, AnswerError> {
    let (new_state, reason) = state::answer_update(answer)?;
    // INVARIANT: an answer is one conditional update from `pending` (before the expiry); a
    // call answered, expired or cancelled in between is never overwritten. This is the whole
    // of the common case; anything else is explained below, in one transaction.
    let changed = conn
        .prepare_cached(
            "UPDATE held_calls SET state = ?2, approver = ?3, answer_key = ?4, \
             answer_approve = ?5, answer_reason = ?6, answered_at = ?7, updated_at = ?7, \
             approver_subject = ?8, approver_issuer = ?9 \
             WHERE interaction_id = ?1 AND state = 'pending' AND expires_at > ?7",
        )
        .and_then(|mut s| {
            s.execute(params![
                id,
                new_state.as_str(),
                answer.approver,
                answer.idempotency_key,
                bool_int(answer.approve),
                reason,
                now.as_millis(),
                answer.principal.as_ref().map(|p| p.subject.as_str()),
                answer.principal.as_ref().map(|p| p.issuer.as_str()),
            ])
        })
        .map_err(|e| inner.err(e))?;
    if changed == 1 {
        return Ok(state::answer_won(id, answer, reason, now));
    }
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| inner.err(e))?;
    let row: Option<AnswerRow> = tx
        .prepare_cached(
            "SELECT state, answer_key, answer_approve, expires_at, approver, answer_reason, \
             answered_at FROM held_calls WHERE interaction_id = ?1",
        )
        .and_then(|mut s| {
            s.query_row([id], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                ))
            })
            .optional()
        })
        .map_err(|e| inner.err(e))?;
    let Some((st, key, approve, expires_at, approver, reason, answered_at)) = row else {
        return Err(AnswerError::UnknownId(id.to_owned()));
    };
    let st =
        State::parse(&st).ok_or_else(|| inner.record_err(id, format!("unknown state `{st}`")))?;
    let recorded = state::RecordedAnswer {
        key,
        approve: approve.map(|a| a == 1),
        approver,
        reason,
        answered_at: answered_at.map(Timestamp::from_millis),
    };
    if let Some(replayed) = state::replay(id, answer, recorded) {
        return replayed;
    }
    match state::pending_lost(id, st, Timestamp::from_millis(expires_at), now) {
        PendingLost::Expire(e) => {
            tx.execute(
                "UPDATE held_calls SET state = 'expired', updated_at = ?2 \
                 WHERE interaction_id = ?1 AND state = 'pending'",
                params![id, now.as_millis()],
            )
            .map_err(|e| inner.err(e))?;
            tx.commit().map_err(|e| inner.err(e))?;
            Err(e)
        }
        // Not reached: a pending call before its expiry took the update above. Should a
        // clock step back in between, the call is still refused rather than guessed at.
        PendingLost::StillPending => Err(AnswerError::Store(state::changed_while(id, "answered"))),
        PendingLost::Refuse(e) => Err(e),
    }
}

fn cancel_op(
    inner: &Inner,
    conn: &mut Connection,
    id: &str,
    now: Timestamp,
) -> Result<(), AnswerError> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| inner.err(e))?;
    let row: Option<(String, i64)> = tx
        .query_row(
            "SELECT state, expires_at FROM held_calls WHERE interaction_id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .map_err(|e| inner.err(e))?;
    let Some((st, expires_at)) = row else {
        return Err(AnswerError::UnknownId(id.to_owned()));
    };
    let st =
        State::parse(&st).ok_or_else(|| inner.record_err(id, format!("unknown state `{st}`")))?;
    // The transaction holds the row: a call still pending and not due is cancelled here.
    let (to, result) = match state::pending_lost(id, st, Timestamp::from_millis(expires_at), now) {
        PendingLost::StillPending => (State::Cancelled, Ok(())),
        PendingLost::Expire(e) => (State::Expired, Err(e)),
        PendingLost::Refuse(e) => return Err(e),
    };
    tx.execute(
        "UPDATE held_calls SET state = ?2, updated_at = ?3 \
         WHERE interaction_id = ?1 AND state = 'pending'",
        params![id, to.as_str(), now.as_millis()],
    )
    .map_err(|e| inner.err(e))?;
    tx.commit().map_err(|e| inner.err(e))?;
    result
}

/// Moves every row matching `filter` (a `WHERE` clause over `?1`, `?2`) to `to`, returning
/// their ids, in one transaction.
fn move_all(
    inner: &Inner,
    conn: &mut Connection,
    filter: &str,
    p1: &dyn rusqlite::ToSql,
    to: State,
    now: Timestamp,
) -> Result<Vec<String>, InboxError> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| inner.err(e))?;
    let ids = {
        let mut stmt = tx
            .prepare_cached(&format!(
                "SELECT interaction_id FROM held_calls WHERE {filter} ORDER BY created_at"
            ))
            .map_err(|e| inner.err(e))?;
        let rows = stmt
            .query_map(params![p1], |r| r.get::<_, String>(0))
            .map_err(|e| inner.err(e))?;
        rows.collect::<rusqlite::Result<Vec<String>>>()
            .map_err(|e| inner.err(e))?
    };
    tx.execute(
        &format!("UPDATE held_calls SET state = ?2, updated_at = ?3 WHERE {filter}"),
        params![p1, to.as_str(), now.as_millis()],
    )
    .map_err(|e| inner.err(e))?;
    tx.commit().map_err(|e| inner.err(e))?;
    Ok(ids)
}

/// `state, input_hash, definition_hash`.
type ClaimRow = (String, String, String);

/// `approver, approver_subject, approver_issuer` of a won claim.
type ClaimedRow = (Option<String>, Option<String>, Option<String>);

fn claim_op(
    inner: &Inner,
    conn: &mut Connection,
    id: &str,
    claim: &Claim,
    now: Timestamp,
) -> Result<Claimed, ClaimError> {
    // INVARIANT: `approved → claimed` is one conditional update that also checks both R35
    // hashes; it is committed (autocommit) before this returns, so before the tool is
    // invoked. Two senders racing: exactly one row change.
    let won: Option<ClaimedRow> = conn
        .prepare_cached(
            "UPDATE held_calls SET state = 'claimed', claim_token = ?2, claimed_by = ?3, \
             claimed_at = ?4, updated_at = ?4 \
             WHERE interaction_id = ?1 AND state = 'approved' AND input_hash = ?5 \
             AND definition_hash = ?6 RETURNING approver, approver_subject, approver_issuer",
        )
        .and_then(|mut s| {
            // `query_row` steps and resets the statement before it returns: the autocommit
            // transaction is committed by then.
            s.query_row(
                params![
                    id,
                    claim.token,
                    inner.options.instance,
                    now.as_millis(),
                    claim.input_hash,
                    claim.definition_hash,
                ],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()
        })
        .map_err(|e| inner.err(e))?;
    if let Some((approver, subject, issuer)) = won {
        return Ok(Claimed {
            approver: approver.unwrap_or_default(),
            approver_principal: match (subject, issuer) {
                (Some(subject), Some(issuer)) => {
                    Some(toolgate::core::Principal { subject, issuer })
                }
                _ => None,
            },
        });
    }
    let row: Option<ClaimRow> = conn
        .prepare_cached(
            "SELECT state, input_hash, definition_hash FROM held_calls WHERE interaction_id = ?1",
        )
        .and_then(|mut s| {
            s.query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .optional()
        })
        .map_err(|e| inner.err(e))?;
    let Some((state, input_hash, definition_hash)) = row else {
        return Err(ClaimError::UnknownId(id.to_owned()));
    };
    let state = State::parse(&state)
        .ok_or_else(|| inner.record_err(id, format!("unknown state `{state}`")))?;
    Err(state::claim_lost(
        id,
        claim,
        state,
        &input_hash,
        &definition_hash,
    ))
}

fn complete_op(
    inner: &Inner,
    conn: &mut Connection,
    id: &str,
    completion: &Completion,
    now: Timestamp,
) -> Result<State, CompleteError> {
    let to = state::completed_state(completion.outcome);
    let changed = conn
        .prepare_cached(
            "UPDATE held_calls SET state = ?3, result_json = ?4, finished_at = ?5, updated_at = ?5 \
             WHERE interaction_id = ?1 AND state = 'claimed' AND claim_token = ?2",
        )
        .and_then(|mut s| {
            s.execute(params![
                id,
                completion.token,
                to.as_str(),
                completion.result.to_string(),
                now.as_millis(),
            ])
        })
        .map_err(|e| inner.err(e))?;
    if changed == 1 {
        return Ok(to);
    }
    Err(state::complete_lost(id, inner.state_of(conn, id)?))
}

/// Replaces the stored policy. With `expected` (`Some(None)`: no policy stored), only if the
/// stored `updatedAt` is that one.
fn put_policy_op(
    inner: &Inner,
    conn: &mut Connection,
    body: &str,
    expected: Option<Option<&str>>,
) -> Result<StoredPolicy, PolicySaveError> {
    // INVARIANT: `BEGIN IMMEDIATE` takes the database's write lock before the read, so no
    // other connection or process can put between the comparison and the save.
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| inner.err(e))?;
    let previous: Option<String> = tx
        .query_row(
            "SELECT updated_at FROM stored_policy WHERE id = 1",
            [],
            |r| r.get(0),
        )
        .optional()
        .map_err(|e| inner.err(e))?;
    if let Some(expected) = expected
        && expected != previous.as_deref()
    {
        return Err(PolicySaveError::Conflict {
            expected: expected.map(str::to_owned),
            stored: previous,
        });
    }
    let updated_at = codec::next_updated_at(previous.as_deref(), SystemTime::now());
    // INVARIANT: the whole policy is one row, replaced in one transaction (R23).
    tx.execute(
        "INSERT INTO stored_policy (id, body, updated_at) VALUES (1, ?1, ?2) \
         ON CONFLICT (id) DO UPDATE SET body = excluded.body, updated_at = excluded.updated_at",
        params![body, updated_at],
    )
    .map_err(|e| inner.err(e))?;
    tx.commit().map_err(|e| inner.err(e))?;
    Ok(StoredPolicy {
        body: body.to_owned(),
        updated_at,
    })
}

/// Replaces the stored shadow policy (R46), stamped after the previous shadow's stamp.
fn put_shadow_op(
    inner: &Inner,
    conn: &mut Connection,
    body: &str,
) -> Result<StoredPolicy, InboxError> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| inner.err(e))?;
    let previous: Option<String> = tx
        .query_row(
            "SELECT updated_at FROM stored_shadow_policy WHERE id = 1",
            [],
            |r| r.get(0),
        )
        .optional()
        .map_err(|e| inner.err(e))?;
    let updated_at = codec::next_updated_at(previous.as_deref(), SystemTime::now());
    tx.execute(
        "INSERT INTO stored_shadow_policy (id, body, updated_at) VALUES (1, ?1, ?2) \
         ON CONFLICT (id) DO UPDATE SET body = excluded.body, updated_at = excluded.updated_at",
        params![body, updated_at],
    )
    .map_err(|e| inner.err(e))?;
    tx.commit().map_err(|e| inner.err(e))?;
    Ok(StoredPolicy {
        body: body.to_owned(),
        updated_at,
    })
}

impl InboxStore for SqliteInbox {
    fn hold(&self, call: NewHeldCall) -> BoxFuture<'_, Result<(), InboxError>> {
        self.run(move |inner, conn| hold_op(inner, conn, &call))
    }

    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<HeldRecord>, InboxError>> {
        let id = id.to_owned();
        self.run(move |inner, conn| get_op(inner, conn, &id))
    }

    fn list(&self, state: Option<State>) -> BoxFuture<'_, Result<Vec<HeldRecord>, InboxError>> {
        self.run(move |inner, conn| list_op(inner, conn, state))
    }

    fn query_held<'a>(
        &'a self,
        q: &'a crate::HeldQuery,
    ) -> BoxFuture<'a, Result<crate::HeldPage, InboxError>> {
        let q = q.clone();
        self.run(move |inner, conn| query::query_op(inner, conn, &q))
    }

    fn count_held<'a>(&'a self, q: &'a crate::HeldQuery) -> BoxFuture<'a, Result<u64, InboxError>> {
        let q = q.clone();
        self.run(move |inner, conn| query::count_op(inner, conn, &q))
    }

    fn changed_since(
        &self,
        since: Timestamp,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<HeldRecord>, InboxError>> {
        self.run(move |inner, conn| query::changed_since_op(inner, conn, since, limit))
    }

    fn session_calls<'a>(
        &'a self,
        session: &'a str,
        turn: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<HeldRecord>, InboxError>> {
        let session = session.to_owned();
        let turn = turn.map(str::to_owned);
        self.run(move |inner, conn| session_calls_op(inner, conn, &session, turn.as_deref()))
    }

    fn hold_unless_repeated(
        &self,
        call: NewHeldCall,
    ) -> BoxFuture<'_, Result<Holding, InboxError>> {
        self.run(move |inner, conn| hold_unless_repeated_op(inner, conn, &call, Timestamp::now()))
    }

    fn find_open<'a>(
        &'a self,
        agent: &'a AgentRef,
        tool: &'a str,
        input_hash: &'a str,
    ) -> BoxFuture<'a, Result<Option<HeldRecord>, InboxError>> {
        let agent = agent.clone();
        let tool = tool.to_owned();
        let input_hash = input_hash.to_owned();
        self.run(move |inner, conn| find_open_op(inner, conn, &agent, &tool, &input_hash))
    }

    fn find_open_all<'a>(
        &'a self,
        agent: &'a AgentRef,
        tool: &'a str,
        input_hash: &'a str,
    ) -> BoxFuture<'a, Result<Vec<HeldRecord>, InboxError>> {
        let agent = agent.clone();
        let tool = tool.to_owned();
        let input_hash = input_hash.to_owned();
        self.run(move |inner, conn| find_open_all_op(inner, conn, &agent, &tool, &input_hash))
    }

    fn cancel_turn<'a>(
        &'a self,
        session: &'a str,
        turn: &'a str,
    ) -> BoxFuture<'a, Result<Vec<String>, InboxError>> {
        let session = session.to_owned();
        let turn = turn.to_owned();
        self.run(move |inner, conn| cancel_turn_op(inner, conn, &session, &turn, Timestamp::now()))
    }

    fn answer<'a>(
        &'a self,
        id: &'a str,
        answer: Answer,
    ) -> BoxFuture<'a, Result<AnswerReceipt, AnswerError>> {
        let id = id.to_owned();
        self.run(move |inner, conn| answer_op(inner, conn, &id, &answer, Timestamp::now()))
    }

    fn answer_edited<'a>(
        &'a self,
        id: &'a str,
        answer: Answer,
        edit: crate::edit::EditedInput,
    ) -> BoxFuture<'a, Result<AnswerReceipt, AnswerError>> {
        let id = id.to_owned();
        self.run(move |inner, conn| {
            edit::answer_edited_op(inner, conn, &id, &answer, &edit, Timestamp::now())
        })
    }

    fn edit_of<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<crate::edit::StoredEdit>, InboxError>> {
        let id = id.to_owned();
        self.run(move |inner, conn| edit::edit_of_op(inner, conn, &id))
    }

    fn cancel<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), AnswerError>> {
        let id = id.to_owned();
        self.run(move |inner, conn| cancel_op(inner, conn, &id, Timestamp::now()))
    }

    fn expire_due(&self, now: Timestamp) -> BoxFuture<'_, Result<Vec<String>, InboxError>> {
        self.run(move |inner, conn| {
            move_all(
                inner,
                conn,
                "state = 'pending' AND expires_at <= ?1",
                &now.as_millis(),
                State::Expired,
                now,
            )
        })
    }

    fn claim<'a>(
        &'a self,
        id: &'a str,
        claim: Claim,
    ) -> BoxFuture<'a, Result<Claimed, ClaimError>> {
        let id = id.to_owned();
        self.run(move |inner, conn| claim_op(inner, conn, &id, &claim, Timestamp::now()))
    }

    fn complete<'a>(
        &'a self,
        id: &'a str,
        completion: Completion,
    ) -> BoxFuture<'a, Result<State, CompleteError>> {
        let id = id.to_owned();
        self.run(move |inner, conn| complete_op(inner, conn, &id, &completion, Timestamp::now()))
    }

    fn recover(&self) -> BoxFuture<'_, Result<Vec<String>, InboxError>> {
        self.run(move |inner, conn| {
            let instance = inner.options.instance.clone();
            move_all(
                inner,
                conn,
                "state = 'claimed' AND claimed_by = ?1",
                &instance,
                State::Unknown,
                Timestamp::now(),
            )
        })
    }

    fn recover_instance<'a>(
        &'a self,
        instance: &'a str,
    ) -> BoxFuture<'a, Result<Vec<String>, InboxError>> {
        let instance = instance.to_owned();
        self.run(move |inner, conn| {
            move_all(
                inner,
                conn,
                "state = 'claimed' AND claimed_by = ?1",
                &instance,
                State::Unknown,
                Timestamp::now(),
            )
        })
    }

    fn get_policy(&self) -> BoxFuture<'_, Result<Option<StoredPolicy>, InboxError>> {
        self.run(move |inner, conn| {
            read_policy_row(
                conn,
                "SELECT body, updated_at FROM stored_policy WHERE id = 1",
            )
            .map_err(|e| inner.err(e))
        })
    }

    fn put_policy<'a>(
        &'a self,
        policy: &'a Policy,
    ) -> BoxFuture<'a, Result<StoredPolicy, InboxError>> {
        let body = codec::policy_body(policy);
        self.run(move |inner, conn| {
            // Without an expected `updatedAt` there is nothing to conflict with.
            put_policy_op(inner, conn, &body, None).map_err(|e| match e {
                PolicySaveError::Store(e) => e,
                other => InboxError::new(Kind::Backend, other.to_string()),
            })
        })
    }

    fn put_policy_if_unchanged<'a>(
        &'a self,
        expected_updated_at: Option<&'a str>,
        policy: &'a Policy,
    ) -> BoxFuture<'a, Result<StoredPolicy, PolicySaveError>> {
        let body = codec::policy_body(policy);
        let expected = expected_updated_at.map(str::to_owned);
        self.run(move |inner, conn| put_policy_op(inner, conn, &body, Some(expected.as_deref())))
    }

    fn get_shadow_policy(&self) -> BoxFuture<'_, Result<Option<StoredPolicy>, InboxError>> {
        self.run(move |inner, conn| {
            read_policy_row(
                conn,
                "SELECT body, updated_at FROM stored_shadow_policy WHERE id = 1",
            )
            .map_err(|e| inner.err(e))
        })
    }

    fn add_grant<'a>(
        &'a self,
        grant: &'a Grant,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<StoredGrant, InboxError>> {
        let grant = grant.clone();
        self.run(move |inner, conn| {
            let inserted = conn
                .prepare_cached(
                    "INSERT INTO grants (id, body, expires_at, max_calls, created_at) \
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                )
                .and_then(|mut s| {
                    s.execute(params![
                        grant.id(),
                        grant.source_text(),
                        grants::expires_at(&grant).as_millis(),
                        grant
                            .max_calls()
                            .map(|m| i64::try_from(m).unwrap_or(i64::MAX)),
                        now.as_millis(),
                    ])
                });
            match inserted {
                Ok(_) => Ok(StoredGrant {
                    grant: grant.clone(),
                    created_at: now,
                    uses: 0,
                    last_used_at: None,
                    revoked: None,
                }),
                Err(e) if e.sqlite_error_code() == Some(ErrorCode::ConstraintViolation) => {
                    Err(InboxError::new(
                        Kind::Duplicate,
                        format!("a grant with the id `{}` exists already", grant.id()),
                    ))
                }
                Err(e) => Err(inner.err(e)),
            }
        })
    }

    fn grants(&self) -> BoxFuture<'_, Result<Vec<StoredGrant>, InboxError>> {
        self.run(move |inner, conn| {
            read_grants(
                inner,
                conn,
                &format!("SELECT {GRANT_COLUMNS} FROM grants ORDER BY seq"),
                &[],
            )
        })
    }

    fn live_grants(&self, now: Timestamp) -> BoxFuture<'_, Result<Vec<StoredGrant>, InboxError>> {
        self.run(move |inner, conn| {
            read_grants(
                inner,
                conn,
                &format!("SELECT {GRANT_COLUMNS} FROM grants WHERE {GRANT_LIVE} ORDER BY seq"),
                &[&now.as_millis()],
            )
        })
    }

    fn use_grant<'a>(
        &'a self,
        id: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, InboxError>> {
        let id = id.to_owned();
        self.run(move |inner, conn| {
            // One statement: the check that it is live and the count, atomically (SQLite's
            // one writer), so racing uses never pass `max_calls`.
            conn.prepare_cached(&format!(
                "UPDATE grants SET uses = uses + 1, last_used_at = ?1 WHERE id = ?2 AND {GRANT_LIVE}"
            ))
            .and_then(|mut s| s.execute(params![now.as_millis(), id]))
            .map(|n| n == 1)
            .map_err(|e| inner.err(e))
        })
    }

    fn put_shadow_policy<'a>(
        &'a self,
        policy: &'a Policy,
    ) -> BoxFuture<'a, Result<StoredPolicy, InboxError>> {
        let body = codec::policy_body(policy);
        self.run(move |inner, conn| put_shadow_op(inner, conn, &body))
    }

    fn clear_shadow_policy(&self) -> BoxFuture<'_, Result<bool, InboxError>> {
        self.run(move |inner, conn| {
            conn.execute("DELETE FROM stored_shadow_policy WHERE id = 1", [])
                .map(|n| n > 0)
                .map_err(|e| inner.err(e))
        })
    }

    fn grant_store(&self) -> Result<Arc<dyn toolgate::engine::grant::GrantStore>, InboxError> {
        Ok(Arc::new(crate::grant_store::InboxGrants::start(Arc::new(
            self.clone(),
        ))?))
    }

    fn revoke_grant<'a>(
        &'a self,
        id: &'a str,
        by: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<StoredGrant, RevokeError>> {
        let (id, by) = (id.to_owned(), by.to_owned());
        self.run(move |inner, conn| {
            let changed = conn
                .prepare_cached(&format!(
                    "UPDATE grants SET revoked_by = ?2, revoked_at = ?1 WHERE id = ?3 AND {GRANT_LIVE}"
                ))
                .and_then(|mut s| s.execute(params![now.as_millis(), by, id]))
                .map_err(|e| inner.err(e))?;
            let found = read_grants(
                inner,
                conn,
                &format!("SELECT {GRANT_COLUMNS} FROM grants WHERE id = ?1"),
                &[&id],
            )?
            .pop();
            match found {
                None => Err(RevokeError::UnknownId(id.clone())),
                Some(g) if changed == 1 => Ok(g),
                Some(g) => Err(RevokeError::Ended {
                    id: id.clone(),
                    state: g.state(now),
                }),
            }
        })
    }
}

/// The columns [`read_grants`] reads, in order.
const GRANT_COLUMNS: &str = "id, body, uses, last_used_at, created_at, revoked_by, revoked_at";

/// A grant live at `?1` (R45): not revoked, before its expiry, fewer than `max_calls` sends.
const GRANT_LIVE: &str =
    "revoked_at IS NULL AND expires_at > ?1 AND (max_calls IS NULL OR uses < max_calls)";

/// The grants `sql` selects ([`GRANT_COLUMNS`]); a row that cannot be read fails the whole
/// read (fail closed).
fn read_grants(
    inner: &Inner,
    conn: &Connection,
    sql: &str,
    args: &[&dyn rusqlite::ToSql],
) -> Result<Vec<StoredGrant>, InboxError> {
    let mut stmt = conn.prepare_cached(sql).map_err(|e| inner.err(e))?;
    let rows = stmt
        .query_map(args, |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, Option<i64>>(3)?,
                r.get::<_, i64>(4)?,
                r.get::<_, Option<String>>(5)?,
                r.get::<_, Option<i64>>(6)?,
            ))
        })
        .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
        .map_err(|e| inner.err(e))?;
    rows.into_iter()
        .map(|(id, body, uses, last, created, by, at)| {
            StoredGrant::from_stored(&id, &body, uses, last, created, (by, at))
        })
        .collect()
}

/// The one-row policy `select` reads (the enforced policy's table or the shadow's).
fn read_policy_row(conn: &Connection, select: &str) -> rusqlite::Result<Option<StoredPolicy>> {
    conn.query_row(select, [], |r| {
        Ok(StoredPolicy {
            body: r.get(0)?,
            updated_at: r.get(1)?,
        })
    })
    .optional()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The query plan of `sql` (one agent, tool and input hash bound) in a new inbox file.
    fn plan_of(sql: &str) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("inbox.db");
        drop(SqliteInbox::open(&path, SqliteOptions::default()).unwrap());
        let conn = Connection::open(&path).unwrap();
        conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .unwrap()
            .query_map(params!["support", "sub-7", "sha256:x", "refund"], |r| {
                r.get::<_, String>(3)
            })
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    }

    #[test]
    fn r26_r38_find_open_searches_the_index_of_open_calls() {
        let plan = plan_of(&find_open_sql(COLUMNS));
        assert!(
            plan.iter()
                .any(|step| step.contains("USING INDEX held_calls_open")),
            "{plan:?}"
        );
    }

    #[test]
    fn r26_the_repeats_of_a_call_are_found_by_an_index() {
        let plan = plan_of(&repeats_sql(COLUMNS));
        assert!(
            plan.iter()
                .any(|step| step.contains("USING INDEX held_calls_by_input")),
            "{plan:?}"
        );
    }

    #[test]
    fn r26_an_inbox_file_without_the_repeat_column_gains_it_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("inbox.db");
        {
            // A version-2 file as the program before this one wrote it.
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(SCHEMA_V1).unwrap();
            conn.execute_batch(SCHEMA_V2).unwrap();
            conn.execute_batch(OPEN_INDEX).unwrap();
            conn.pragma_update(None, "application_id", APPLICATION_ID)
                .unwrap();
            conn.pragma_update(None, "user_version", SCHEMA_VERSION)
                .unwrap();
        }
        drop(SqliteInbox::open(&path, SqliteOptions::default()).unwrap());
        let conn = Connection::open(&path).unwrap();
        let has: i64 = conn
            .query_row(
                "SELECT count(*) FROM pragma_table_info('held_calls') WHERE name = 'repeat_told_at'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(has, 1);
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION, "no schema version of its own");
    }

    /// Issue 22: a file written before answers kept the approver's principal gains the
    /// columns on open; its answers keep their names (with no principal), and new answers
    /// keep theirs.
    #[test]
    fn issue22_an_inbox_file_without_the_principal_columns_gains_them_and_keeps_its_answers() {
        use crate::suite::held;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("inbox.db");
        let old = held(serde_json::json!({"n": 1}), Duration::from_secs(3600));
        let new = held(serde_json::json!({"n": 2}), Duration::from_secs(3600));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let store = SqliteInbox::open(&path, SqliteOptions::default()).unwrap();
            store.hold(old.clone()).await.unwrap();
            store
                .answer(&old.interaction_id, Answer::approved_by("alice"))
                .await
                .unwrap();
        });
        {
            // The file as the program before this one left it.
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(
                "ALTER TABLE held_calls DROP COLUMN approver_subject; \
                 ALTER TABLE held_calls DROP COLUMN approver_issuer;",
            )
            .unwrap();
        }
        rt.block_on(async {
            let store = SqliteInbox::open(&path, SqliteOptions::default()).unwrap();
            let r = store.get(&old.interaction_id).await.unwrap().unwrap();
            assert_eq!(r.approver.as_deref(), Some("alice"));
            assert_eq!(r.approver_principal, None);
            store.hold(new.clone()).await.unwrap();
            let p = toolgate::core::Principal {
                subject: "u-2".into(),
                issuer: "https://idp.example/".into(),
            };
            store
                .answer(
                    &new.interaction_id,
                    Answer::approved_by("bob").principal(Some(p.clone())),
                )
                .await
                .unwrap();
            let r = store.get(&new.interaction_id).await.unwrap().unwrap();
            assert_eq!(r.approver_principal, Some(p));
        });
        let conn = Connection::open(&path).unwrap();
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION, "no schema version of its own");
    }
}
