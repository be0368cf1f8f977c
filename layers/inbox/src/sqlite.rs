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
use toolgate_core::{AgentRef, RunContext, Turn};
use toolgate_engine::grant::Grant;
use toolgate_engine::policy::Policy;

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
use crate::store::BoxFuture;

mod edit;
mod nonce;
mod query;
mod question;
pub use query::PAGE_INDEXES;

mod grant_rows;
mod ops;
mod options;
mod schema;
mod store;

use grant_rows::{GRANT_COLUMNS, GRANT_LIVE, read_grants, read_policy_row};
use ops::{
    COLUMNS, answer_op, bool_int, cancel_op, cancel_turn_op, claim_op, complete_op,
    find_open_all_op, find_open_op, get_op, hold_op, hold_unless_repeated_op, list_op, move_all,
    put_policy_op, put_shadow_op, read_row, session_calls_op,
};
pub use options::{SqliteOptions, Synchronous};
pub use schema::{
    APPLICATION_ID, GRANTS_TABLE, OPEN_INDEX, REPEAT_COLUMN, REPEAT_INDEX, SCHEMA_V1, SCHEMA_V2,
    SCHEMA_VERSION,
};

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
    /// written to (held-calls.md).
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
/// use toolgate_inbox::{SqliteInbox, SqliteOptions, State};
/// use toolgate_inbox::prelude::*;
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
    /// an operation.
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
    /// into a file nobody reads again. Nothing to check when no connection is open: the
    /// next one opens (and checks) the file at the path.
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

#[cfg(test)]
mod tests {
    use super::ops::{find_open_sql, repeats_sql};
    use super::*;
    use crate::HeldCalls;

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

    /// A file written before answers kept the approver's principal gains the columns on
    /// open; its answers keep their names (with no principal), and new answers keep theirs.
    #[test]
    fn issue22_an_inbox_file_without_the_principal_columns_gains_them_and_keeps_its_answers() {
        use crate::test_calls::held;
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
            let p = toolgate_core::Principal {
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
    /// R51: a file written before held calls recorded how many approvals they need gains
    /// the columns on open; its calls need one, and keep being answered as before.
    #[test]
    fn r51_an_inbox_file_without_the_approvals_columns_gains_them_and_its_calls_need_one() {
        use crate::test_calls::held;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("inbox.db");
        let old = held(serde_json::json!({"n": 1}), Duration::from_secs(3600));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let store = SqliteInbox::open(&path, SqliteOptions::default()).unwrap();
            store.hold(old.clone()).await.unwrap();
        });
        {
            // The file as the program before this one left it.
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(
                "ALTER TABLE held_calls DROP COLUMN approvals_needed; \
                 ALTER TABLE held_calls DROP COLUMN approvals_json;",
            )
            .unwrap();
        }
        rt.block_on(async {
            let store = SqliteInbox::open(&path, SqliteOptions::default()).unwrap();
            let r = store.get(&old.interaction_id).await.unwrap().unwrap();
            assert_eq!(r.approvals_needed(), 1);
            assert!(r.approvals.is_empty());
            let receipt = store
                .answer(&old.interaction_id, Answer::approved_by("alice"))
                .await
                .unwrap();
            assert_eq!((receipt.approvals, receipt.approvals_needed), (1, 1));
            assert_eq!(
                store.get(&old.interaction_id).await.unwrap().unwrap().state,
                State::Approved
            );
            // A call held now needs what it records.
            let mut two = crate::test_calls::held_needing(
                2,
                serde_json::json!({"n": 2}),
                Duration::from_secs(3600),
            );
            two.created_at = Timestamp::now();
            store.hold(two.clone()).await.unwrap();
            store
                .answer(&two.interaction_id, Answer::approved_by("alice"))
                .await
                .unwrap();
            let r = store.get(&two.interaction_id).await.unwrap().unwrap();
            assert_eq!((r.state, r.approvals.len()), (State::Pending, 1));
        });
        let conn = Connection::open(&path).unwrap();
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION, "no schema version of its own");
    }
}
