//! Sends counted for the tenant policy's quotas (R44) in a SQLite file, exact across the
//! processes that share it.
//!
//! [`SqliteQuotaCounter`] implements the engine's [`QuotaCounter`]: [`QuotaCounter::reserve`]
//! is one `BEGIN IMMEDIATE` transaction — SQLite's one writer at a time, across processes —
//! that reads each group's sends in its window, refuses when one is full, and otherwise
//! records the send in each; so processes sharing the file never put more than `max` sends
//! in a window, whatever the interleaving. Sends that left every window are pruned as the
//! groups are written. A file that cannot be opened, read or written refuses the call (fail
//! closed: [`QuotaError::Unavailable`]).
//!
//! The table lives in its own file or beside the inbox's tables in the inbox's file (it has
//! its own name, `quota_sends`, and the inbox's schema never reads it).
//!
//! Each session's labels (R49) live beside the sends, in `session_labels`: one row per
//! session and label, keyed by [`session_key`] (the calls made in no session share the key
//! `null`, which no session's can equal). [`QuotaCounter::reserve_labelled`] adds the sent
//! tool's labels in the reservation's own transaction, so a send is never recorded without
//! its labels nor the labels without the send, and a restart (or another process on the
//! file) reads them back with [`QuotaCounter::session_labels`]. A file written before the
//! table existed gets it when the counter opens it (created when missing; its sends are
//! kept).
//!
//! ```
//! use toolgate_engine::quota::{QuotaCounter, QuotaError, QuotaGroup};
//! use toolgate_inbox::SqliteQuotaCounter;
//! let dir = tempfile::tempdir().unwrap();
//! let sends = SqliteQuotaCounter::open(dir.path().join("quota.db")).unwrap();
//! let refunds = [QuotaGroup::new("refunds", 0, 2, 60_000)];
//! sends.reserve(&refunds, 1_000).unwrap();
//! sends.reserve(&refunds, 2_000).unwrap();
//! let Err(QuotaError::Full(full)) = sends.reserve(&refunds, 3_000) else { panic!() };
//! assert_eq!(full.retry_after_secs(), 58); // the first send leaves the window at 61 s
//! sends.reserve(&refunds, 61_000).unwrap();
//! ```

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use rusqlite::{Connection, TransactionBehavior, params};
use toolgate_engine::labels::LabelSet;
use toolgate_engine::quota::{
    Millis, QuotaCounter, QuotaError, QuotaFull, QuotaGroup, retry_after_ms, session_key,
};

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS quota_sends (
    key TEXT NOT NULL,
    at_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS quota_sends_by_key ON quota_sends (key, at_ms);";

/// Each session's labels (R49): the labels of the tools sent in it, one row per label, with
/// the time the first send carrying it was recorded. Created when missing each time the
/// counter opens a file, so a file written before it existed gets it (and keeps its sends);
/// a program that does not know it ignores it.
const SESSION_LABELS_TABLE: &str = "CREATE TABLE IF NOT EXISTS session_labels (
    session TEXT NOT NULL,
    label   TEXT NOT NULL,
    at_ms   INTEGER NOT NULL,
    PRIMARY KEY (session, label)
) WITHOUT ROWID;";

/// What a counter's transaction records.
#[derive(Clone, Copy)]
enum Record<'a> {
    /// Nothing: a check.
    Nothing,
    /// The send, in each group.
    Send,
    /// The send, and the sent tool's labels in the session's (R49).
    Labelled(Option<&'a str>, &'a LabelSet),
}

/// The quota counter on a SQLite file (module docs).
#[derive(Debug)]
pub struct SqliteQuotaCounter {
    path: PathBuf,
    conn: Mutex<Connection>,
}

fn unavailable(path: &Path, e: impl std::fmt::Display) -> QuotaError {
    QuotaError::Unavailable(format!(
        "the quota counter `{}` cannot be used: {e}",
        path.display()
    ))
}

impl SqliteQuotaCounter {
    /// Opens (creating when missing) the counter in the SQLite file at `path`, with WAL
    /// journaling and a 5 s busy timeout (another process's reservation is waited for).
    ///
    /// # Errors
    ///
    /// The file cannot be opened or its table created.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, QuotaError> {
        let path = path.as_ref().to_path_buf();
        let conn = Connection::open(&path).map_err(|e| unavailable(&path, e))?;
        conn.busy_timeout(Duration::from_secs(5))
            .map_err(|e| unavailable(&path, e))?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(|e| unavailable(&path, e))?;
        conn.execute_batch(SCHEMA)
            .map_err(|e| unavailable(&path, e))?;
        conn.execute_batch(SESSION_LABELS_TABLE)
            .map_err(|e| unavailable(&path, e))?;
        Ok(Self {
            path,
            conn: Mutex::new(conn),
        })
    }

    /// How many sends of `key` are in a window of `window_ms` ending at `now`.
    ///
    /// # Errors
    ///
    /// The file cannot be read.
    pub fn sends_in_window(
        &self,
        key: &str,
        window_ms: u64,
        now: Millis,
    ) -> Result<u64, QuotaError> {
        let conn = self
            .conn
            .lock()
            .map_err(|_| unavailable(&self.path, "its lock is poisoned"))?;
        let n: i64 = conn
            .query_row(
                "SELECT COUNT(*) FROM quota_sends WHERE key = ?1 AND at_ms > ?2 AND at_ms <= ?3",
                params![key, since(now, window_ms), clamp(now)],
                |r| r.get(0),
            )
            .map_err(|e| unavailable(&self.path, e))?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// The labels recorded for `session` (R49), read from the file now.
    ///
    /// # Errors
    ///
    /// The file cannot be read.
    fn read_labels(&self, session: Option<&str>) -> Result<LabelSet, QuotaError> {
        let conn = self
            .conn
            .lock()
            .map_err(|_| unavailable(&self.path, "its lock is poisoned"))?;
        let mut stmt = conn
            .prepare_cached("SELECT label FROM session_labels WHERE session = ?1")
            .map_err(|e| unavailable(&self.path, e))?;
        let labels = stmt
            .query_map(params![session_key(session)], |r| r.get::<_, String>(0))
            .and_then(|rows| rows.collect::<Result<Vec<String>, _>>())
            .map_err(|e| unavailable(&self.path, e))?;
        Ok(LabelSet::of(labels))
    }

    fn decide(
        &self,
        groups: &[QuotaGroup],
        now: Millis,
        what: Record<'_>,
    ) -> Result<(), QuotaError> {
        let labelled = match what {
            Record::Labelled(session, labels) if !labels.is_empty() => Some((session, labels)),
            _ => None,
        };
        if groups.is_empty() && labelled.is_none() {
            return Ok(());
        }
        let record = !matches!(what, Record::Nothing);
        let mut conn = self
            .conn
            .lock()
            .map_err(|_| unavailable(&self.path, "its lock is poisoned"))?;
        let behavior = if record {
            TransactionBehavior::Immediate
        } else {
            TransactionBehavior::Deferred
        };
        let tx = conn
            .transaction_with_behavior(behavior)
            .map_err(|e| unavailable(&self.path, e))?;
        let mut full = Vec::new();
        let mut retry = 0u64;
        let mut latest = now;
        for (i, g) in groups.iter().enumerate() {
            let mut stmt = tx
                .prepare_cached(
                    "SELECT at_ms FROM quota_sends WHERE key = ?1 AND at_ms > ?2 ORDER BY at_ms",
                )
                .map_err(|e| unavailable(&self.path, e))?;
            let times: Vec<Millis> = stmt
                .query_map(params![g.key, since(now, g.window_ms)], |r| {
                    r.get::<_, i64>(0)
                })
                .and_then(|rows| rows.collect::<Result<Vec<i64>, _>>())
                .map_err(|e| unavailable(&self.path, e))?
                .into_iter()
                .map(|t| u64::try_from(t).unwrap_or(0))
                .collect();
            // A clock that stepped back never makes room: sends after `now` still count.
            latest = latest.max(times.last().copied().unwrap_or(0));
            let in_window: Vec<Millis> = times.iter().map(|&t| t.min(now)).collect();
            if let Some(ms) = retry_after_ms(&in_window, g.max, g.window_ms, now) {
                full.push(i);
                retry = retry.max(ms);
            }
        }
        // A full group records nothing: the transaction rolls back when dropped.
        QuotaFull::unless_empty(full, retry)?;
        if record {
            let mut keys: Vec<&QuotaGroup> = groups.iter().collect();
            keys.sort_by(|a, b| a.key.cmp(&b.key));
            keys.dedup_by(|a, b| a.key == b.key);
            for g in keys {
                tx.execute(
                    "INSERT INTO quota_sends (key, at_ms) VALUES (?1, ?2)",
                    params![g.key, clamp(latest)],
                )
                .map_err(|e| unavailable(&self.path, e))?;
                // Old sends of this group are pruned as it is written.
                tx.execute(
                    "DELETE FROM quota_sends WHERE key = ?1 AND at_ms <= ?2",
                    params![g.key, since(now, g.window_ms)],
                )
                .map_err(|e| unavailable(&self.path, e))?;
            }
        }
        // R49: the sent tool's labels join the session's in the same transaction.
        if let Some((session, labels)) = labelled {
            let key = session_key(session);
            let mut add = tx
                .prepare_cached(
                    "INSERT OR IGNORE INTO session_labels (session, label, at_ms) VALUES (?1, ?2, ?3)",
                )
                .map_err(|e| unavailable(&self.path, e))?;
            for label in labels.iter() {
                add.execute(params![key, label, clamp(latest)])
                    .map_err(|e| unavailable(&self.path, e))?;
            }
        }
        tx.commit().map_err(|e| unavailable(&self.path, e))
    }
}

fn clamp(ms: Millis) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// The start of a window ending at `now` (exclusive; before the epoch for a window longer
/// than `now`).
fn since(now: Millis, window_ms: u64) -> i64 {
    clamp(now).saturating_sub(clamp(window_ms))
}

impl QuotaCounter for SqliteQuotaCounter {
    fn check(&self, groups: &[QuotaGroup], now: Millis) -> Result<(), QuotaError> {
        self.decide(groups, now, Record::Nothing)
    }

    fn reserve(&self, groups: &[QuotaGroup], now: Millis) -> Result<(), QuotaError> {
        self.decide(groups, now, Record::Send)
    }

    /// Read from the file, so a send recorded by another process on it (or before a
    /// restart) counts.
    fn session_labels(&self, session: Option<&str>) -> Result<LabelSet, QuotaError> {
        self.read_labels(session)
    }

    /// One `BEGIN IMMEDIATE` transaction: the groups checked, the send recorded in each and
    /// the labels added to the session's, or nothing.
    fn reserve_labelled(
        &self,
        groups: &[QuotaGroup],
        now: Millis,
        session: Option<&str>,
        labels: &LabelSet,
    ) -> Result<(), QuotaError> {
        self.decide(groups, now, Record::Labelled(session, labels))
    }
}
