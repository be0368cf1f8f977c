//! Sends counted for the tenant policy's quotas (R44) in the shared inbox's PostgreSQL
//! database, exact across every instance that shares it.
//!
//! [`PostgresQuotaCounter`] implements toolgate's [`AsyncQuotaCounter`]: the stack awaits its
//! [`reserve`](AsyncQuotaCounter::reserve) right before each send (never blocking a runtime
//! thread on the database). A reservation is one transaction that takes a
//! transaction-scoped advisory lock per quota group (`pg_advisory_xact_lock`, in one order,
//! so two reservations never wait on each other in a cycle), reads each group's sends in
//! its window, refuses when one is full, and otherwise records the send in each and prunes
//! the sends that left the window; the locks are released when it commits. So instances
//! sharing the database never put more than `max` sends in a window, whatever the
//! interleaving. A database that cannot be reached, read or written refuses the call (fail
//! closed: [`QuotaError::Unavailable`]).
//!
//! Windows are judged by the **database's clock** (R44): the reservation reads
//! `clock_timestamp()` once its locks are held and counts, records and prunes by it,
//! whatever the calling replica's clock says, so replicas whose clocks disagree still share
//! one window. The replica's `now` is only used for what it last saw (the advisory check
//! below), shifted by the difference the last reservation measured.
//!
//! The decision's own check (R14 step 7, synchronous) reads what this counter saw at its
//! last reservations ([`AsyncQuotaCounter::check`]): a group it knows to be full refuses
//! early; anything else is decided by the reservation.
//!
//! The table, `quota_sends`, lives beside the inbox's tables (in its schema), created when
//! missing; the inbox's schema never reads it.
//!
//! Each session's labels (R49) live beside it, in `session_labels` (one row per session and
//! label, keyed by [`session_key`]: the calls made in no session share the key `null`),
//! created when missing like `quota_sends`, so a database set up before it existed gets it
//! when a counter starts on it. [`AsyncQuotaCounter::reserve_labelled`] adds the sent tool's
//! labels in the reservation's own transaction — in the one statement that records the sends
//! and prunes the old ones, so labels add no round trip to a send — and
//! [`AsyncQuotaCounter::session_labels`] reads them from the database (one statement): a
//! session judged on any replica is judged by what every replica recorded.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use toolgate::GovernanceHandle;
//! use toolgate_engine::config::{Format, load_str};
//! use toolgate_inbox_postgres::{PostgresInbox, PostgresOptions, PostgresQuotaCounter};
//!
//! let inbox = PostgresInbox::connect("postgres://toolgate@127.0.0.1/toolgate", PostgresOptions::default()).await?;
//! let handle = GovernanceHandle::new(load_str(r#"{"tools": [{"kind": "http", "name": "refund"}],
//!     "agents": [{"name": "support", "allowed_tools": ["refund"]}],
//!     "policy": {"rules": [], "quotas": [{"max": 10, "window_secs": 3600, "reason": "ten an hour"}]}}"#,
//!     Format::Json)?);
//! // Every replica on this database shares one count.
//! handle.set_async_quota_counter(Arc::new(PostgresQuotaCounter::for_inbox(&inbox).await?));
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::sync::Mutex;

use deadpool_postgres::Pool;
use toolgate_engine::labels::LabelSet;
use toolgate_engine::quota::{AsyncQuotaCounter, LabelsFuture, ReserveFuture};
use toolgate_engine::quota::{
    Millis, QuotaError, QuotaFull, QuotaGroup, retry_after_ms, session_key,
};

use crate::PostgresInbox;

/// The first key of the advisory locks a reservation takes ("TGQT"); the second is the
/// group key's `hashtext`. Two groups whose keys share a hash only wait for each other.
pub const QUOTA_LOCK: i32 = 0x5447_5154;

/// The table of sends and the table of each session's labels (R49), created when missing.
pub const QUOTA_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS quota_sends (
    key   TEXT NOT NULL,
    at_ms BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS quota_sends_by_key ON quota_sends (key, at_ms);
CREATE TABLE IF NOT EXISTS session_labels (
    session TEXT NOT NULL,
    label   TEXT NOT NULL,
    at_ms   BIGINT NOT NULL,
    PRIMARY KEY (session, label)
)";

/// A reservation's writes, in one statement: one send at `$2` in each group of `$1` (keys,
/// each once), the sends of each that left its window (`$3`, the window's start per key)
/// pruned, and the labels `$5` added to the session keyed `$4` (R49). The sub-statements
/// share one snapshot: the prune never sees the send added beside it (which is in its
/// window anyway).
const WRITE: &str = "
WITH sent AS (
    INSERT INTO quota_sends (key, at_ms) SELECT k, $2::bigint FROM unnest($1::text[]) AS k
), pruned AS (
    DELETE FROM quota_sends AS q USING unnest($1::text[], $3::bigint[]) AS p (k, since)
    WHERE q.key = p.k AND q.at_ms <= p.since
), labelled AS (
    INSERT INTO session_labels (session, label, at_ms)
    SELECT $4::text, l, $2::bigint FROM unnest($5::text[]) AS l
    ON CONFLICT DO NOTHING
)
SELECT 1";

/// At most this many groups are remembered for the advisory check; past it the memory
/// starts over (the reservation still decides).
const SEEN_KEYS: usize = 10_000;

/// The quota counter on the shared inbox's PostgreSQL database (module docs).
pub struct PostgresQuotaCounter {
    pool: Pool,
    server: String,
    /// Each group's sends in its window at the last reservation this counter made.
    seen: Mutex<HashMap<String, Vec<Millis>>>,
    /// The database's clock less this process's, in milliseconds, at the last reservation.
    skew: std::sync::atomic::AtomicI64,
}

impl std::fmt::Debug for PostgresQuotaCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresQuotaCounter")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

fn clamp(ms: Millis) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// The start of a window ending at `now` (exclusive).
fn since(now: Millis, window_ms: u64) -> i64 {
    clamp(now).saturating_sub(clamp(window_ms))
}

impl PostgresQuotaCounter {
    /// The counter in `inbox`'s database and schema, on its connection pool; creates the
    /// table when missing (under the inbox's migration lock, so instances starting together
    /// do not race).
    ///
    /// # Errors
    ///
    /// The database cannot be reached or the table created.
    pub async fn for_inbox(inbox: &PostgresInbox) -> Result<Self, QuotaError> {
        let counter = Self {
            pool: inbox.pool().clone(),
            server: inbox.server().to_owned(),
            seen: Mutex::new(HashMap::new()),
            skew: std::sync::atomic::AtomicI64::new(0),
        };
        let mut client = counter.client().await?;
        let tx = client.transaction().await.map_err(|e| counter.db(&e))?;
        tx.execute(
            "SELECT pg_advisory_xact_lock($1)",
            &[&crate::MIGRATION_LOCK],
        )
        .await
        .map_err(|e| counter.db(&e))?;
        tx.batch_execute(QUOTA_SCHEMA)
            .await
            .map_err(|e| counter.db(&e))?;
        tx.commit().await.map_err(|e| counter.db(&e))?;
        Ok(counter)
    }

    fn unavailable(&self, why: impl std::fmt::Display) -> QuotaError {
        QuotaError::Unavailable(format!(
            "the quota counter in the inbox database `{}` cannot be used: {why}",
            self.server
        ))
    }

    fn db(&self, e: &tokio_postgres::Error) -> QuotaError {
        self.unavailable(crate::error::describe(e))
    }

    async fn client(&self) -> Result<deadpool_postgres::Client, QuotaError> {
        self.pool.get().await.map_err(|e| self.unavailable(e))
    }

    /// How many sends of `key` are in a window of `window_ms` ending at `now`.
    ///
    /// # Errors
    ///
    /// The database cannot be read.
    pub async fn sends_in_window(
        &self,
        key: &str,
        window_ms: u64,
        now: Millis,
    ) -> Result<u64, QuotaError> {
        let client = self.client().await?;
        let row = client
            .query_one(
                "SELECT COUNT(*) FROM quota_sends WHERE key = $1 AND at_ms > $2 AND at_ms <= $3",
                &[&key, &since(now, window_ms), &clamp(now)],
            )
            .await
            .map_err(|e| self.db(&e))?;
        let n: i64 = row.try_get(0).map_err(|e| self.db(&e))?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// `now` of this process as the database's clock reads it (by the last reservation).
    fn on_db_clock(&self, now: Millis) -> Millis {
        let skew = self.skew.load(std::sync::atomic::Ordering::Relaxed);
        u64::try_from(clamp(now).saturating_add(skew)).unwrap_or(0)
    }

    /// The reservation's transaction: each group's sends in its window after it, or why not.
    /// Judged at the database's clock once the locks are held; `local` is this process's
    /// clock, only used to measure the difference.
    async fn reserve_in_db(
        &self,
        groups: &[QuotaGroup],
        local: Millis,
        labelled: Option<(Option<&str>, &LabelSet)>,
    ) -> Result<Vec<(String, Vec<Millis>)>, QuotaError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.db(&e))?;
        let mut keys: Vec<&str> = groups.iter().map(|g| g.key.as_str()).collect();
        keys.sort_unstable();
        keys.dedup();
        // One lock per group, taken in one order by every reservation; the database's clock
        // read after each, in the same round trip: the last row's is after every lock.
        let locked = tx
            .query(
                "SELECT pg_advisory_xact_lock($1, h), \
                 (extract(epoch FROM clock_timestamp()) * 1000)::bigint FROM \
                 (SELECT DISTINCT hashtext(k) AS h FROM unnest($2::text[]) AS k ORDER BY h) AS l",
                &[&QUOTA_LOCK, &keys],
            )
            .await
            .map_err(|e| self.db(&e))?;
        let mut db_now: i64 = 0;
        for row in &locked {
            let t: i64 = row.try_get(1).map_err(|e| self.db(&e))?;
            db_now = db_now.max(t);
        }
        if db_now <= 0 {
            return Err(self.unavailable("the database's clock could not be read"));
        }
        self.skew.store(
            db_now.saturating_sub(clamp(local)),
            std::sync::atomic::Ordering::Relaxed,
        );
        let now: Millis = u64::try_from(db_now).unwrap_or(0);
        let read = tx
            .prepare_cached(
                "SELECT at_ms FROM quota_sends WHERE key = $1 AND at_ms > $2 ORDER BY at_ms",
            )
            .await
            .map_err(|e| self.db(&e))?;
        let mut full = Vec::new();
        let mut retry = 0u64;
        let mut latest = now;
        let mut windows: Vec<Vec<Millis>> = Vec::with_capacity(groups.len());
        for (i, g) in groups.iter().enumerate() {
            let rows = tx
                .query(&read, &[&g.key, &since(now, g.window_ms)])
                .await
                .map_err(|e| self.db(&e))?;
            let mut times = Vec::with_capacity(rows.len());
            for r in rows {
                let t: i64 = r.try_get(0).map_err(|e| self.db(&e))?;
                times.push(u64::try_from(t).unwrap_or(0));
            }
            // A clock that stepped back never makes room: sends after `now` still count.
            latest = latest.max(times.last().copied().unwrap_or(0));
            let in_window: Vec<Millis> = times.iter().map(|&t| t.min(now)).collect();
            if let Some(ms) = retry_after_ms(&in_window, g.max, g.window_ms, now) {
                full.push(i);
                retry = retry.max(ms);
            }
            windows.push(in_window);
        }
        if !full.is_empty() {
            // Nothing recorded: the transaction rolls back when dropped.
            let seen = groups
                .iter()
                .zip(windows)
                .map(|(g, w)| (g.key.clone(), w))
                .collect();
            return Err(self.remember_full(seen, full, retry));
        }
        let mut written: Vec<&QuotaGroup> = groups.iter().collect();
        written.sort_by(|a, b| a.key.cmp(&b.key));
        written.dedup_by(|a, b| a.key == b.key);
        // Old sends of each group are pruned as it is written; the session's labels (R49)
        // are added in the same statement.
        let keys: Vec<&str> = written.iter().map(|g| g.key.as_str()).collect();
        let starts: Vec<i64> = written.iter().map(|g| since(now, g.window_ms)).collect();
        let (session, labels) = label_params(labelled);
        let write = tx.prepare_cached(WRITE).await.map_err(|e| self.db(&e))?;
        tx.execute(&write, &[&keys, &clamp(latest), &starts, &session, &labels])
            .await
            .map_err(|e| self.db(&e))?;
        tx.commit().await.map_err(|e| self.db(&e))?;
        Ok(groups
            .iter()
            .zip(windows)
            .map(|(g, mut w)| {
                w.push(latest.min(now));
                (g.key.clone(), w)
            })
            .collect())
    }

    /// The session's labels (R49) as the database holds them now: one statement.
    async fn labels_in_db(&self, session: Option<&str>) -> Result<LabelSet, QuotaError> {
        let client = self.client().await?;
        let read = client
            .prepare_cached("SELECT label FROM session_labels WHERE session = $1")
            .await
            .map_err(|e| self.db(&e))?;
        let rows = client
            .query(&read, &[&session_key(session)])
            .await
            .map_err(|e| self.db(&e))?;
        let mut labels = LabelSet::new();
        for row in rows {
            let label: &str = row.try_get(0).map_err(|e| self.db(&e))?;
            labels.insert(label);
        }
        Ok(labels)
    }

    /// A send that falls in no quota group: only its labels are recorded (R49), in one
    /// statement (no lock: adding a label twice adds it once).
    async fn label_in_db(
        &self,
        local: Millis,
        session: Option<&str>,
        labels: &LabelSet,
    ) -> Result<(), QuotaError> {
        let client = self.client().await?;
        let write = client
            .prepare_cached(WRITE)
            .await
            .map_err(|e| self.db(&e))?;
        let none: Vec<&str> = Vec::new();
        let starts: Vec<i64> = Vec::new();
        let (session, labels) = label_params(Some((session, labels)));
        client
            .execute(
                &write,
                &[
                    &none,
                    &clamp(self.on_db_clock(local)),
                    &starts,
                    &session,
                    &labels,
                ],
            )
            .await
            .map_err(|e| self.db(&e))?;
        Ok(())
    }

    /// Remembers what a refused reservation read, and says it is full.
    fn remember_full(
        &self,
        seen: Vec<(String, Vec<Millis>)>,
        full: Vec<usize>,
        retry: u64,
    ) -> QuotaError {
        self.remember(seen);
        QuotaError::Full(QuotaFull {
            full,
            retry_after_ms: retry.max(1),
        })
    }

    fn remember(&self, seen: Vec<(String, Vec<Millis>)>) {
        let mut map = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() + seen.len() > SEEN_KEYS {
            map.clear();
        }
        map.extend(seen);
    }
}

/// The session's key and the labels to add, as [`WRITE`]'s `$4` and `$5` (none: no labels).
fn label_params<'a>(labelled: Option<(Option<&str>, &'a LabelSet)>) -> (String, Vec<&'a str>) {
    match labelled {
        Some((session, labels)) => (session_key(session), labels.iter().collect()),
        None => (String::new(), Vec::new()),
    }
}

impl AsyncQuotaCounter for PostgresQuotaCounter {
    fn check(&self, groups: &[QuotaGroup], now: Millis) -> Result<(), QuotaError> {
        let now = self.on_db_clock(now);
        let map = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let mut full = Vec::new();
        let mut retry = 0u64;
        for (i, g) in groups.iter().enumerate() {
            let Some(times) = map.get(&g.key) else {
                continue;
            };
            let start = since(now, g.window_ms);
            let in_window: Vec<Millis> = times
                .iter()
                .filter(|&&t| clamp(t) > start)
                .map(|&t| t.min(now))
                .collect();
            if let Some(ms) = retry_after_ms(&in_window, g.max, g.window_ms, now) {
                full.push(i);
                retry = retry.max(ms);
            }
        }
        QuotaFull::unless_empty(full, retry)
    }

    fn reserve<'a>(&'a self, groups: &'a [QuotaGroup], now: Millis) -> ReserveFuture<'a> {
        Box::pin(async move {
            if groups.is_empty() {
                return Ok(());
            }
            let seen = self.reserve_in_db(groups, now, None).await?;
            self.remember(seen);
            Ok(())
        })
    }

    /// Read from the database at each call: a label another replica recorded counts.
    fn session_labels<'a>(&'a self, session: Option<&'a str>) -> LabelsFuture<'a> {
        Box::pin(self.labels_in_db(session))
    }

    /// The reservation's transaction, with the labels added in its writing statement; with
    /// no groups, the labels alone, in one statement.
    fn reserve_labelled<'a>(
        &'a self,
        groups: &'a [QuotaGroup],
        now: Millis,
        session: Option<&'a str>,
        labels: &'a LabelSet,
    ) -> ReserveFuture<'a> {
        Box::pin(async move {
            if groups.is_empty() {
                if labels.is_empty() {
                    return Ok(());
                }
                return self.label_in_db(now, session, labels).await;
            }
            let labelled = (!labels.is_empty()).then_some((session, labels));
            let seen = self.reserve_in_db(groups, now, labelled).await?;
            self.remember(seen);
            Ok(())
        })
    }
}
