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
//! Windows are judged by the **database's clock** (issue 33 item 5): the reservation reads
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
use toolgate_engine::quota::{AsyncQuotaCounter, ReserveFuture};
use toolgate_engine::quota::{Millis, QuotaError, QuotaFull, QuotaGroup, retry_after_ms};

use crate::PostgresInbox;

/// The first key of the advisory locks a reservation takes ("TGQT"); the second is the
/// group key's `hashtext`. Two groups whose keys share a hash only wait for each other.
pub const QUOTA_LOCK: i32 = 0x5447_5154;

/// The table of sends, created when missing.
pub const QUOTA_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS quota_sends (
    key   TEXT NOT NULL,
    at_ms BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS quota_sends_by_key ON quota_sends (key, at_ms)";

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
        let insert = tx
            .prepare_cached("INSERT INTO quota_sends (key, at_ms) VALUES ($1, $2)")
            .await
            .map_err(|e| self.db(&e))?;
        let prune = tx
            .prepare_cached("DELETE FROM quota_sends WHERE key = $1 AND at_ms <= $2")
            .await
            .map_err(|e| self.db(&e))?;
        let mut written: Vec<&QuotaGroup> = groups.iter().collect();
        written.sort_by(|a, b| a.key.cmp(&b.key));
        written.dedup_by(|a, b| a.key == b.key);
        for g in written {
            tx.execute(&insert, &[&g.key, &clamp(latest)])
                .await
                .map_err(|e| self.db(&e))?;
            // Old sends of this group are pruned as it is written.
            tx.execute(&prune, &[&g.key, &since(now, g.window_ms)])
                .await
                .map_err(|e| self.db(&e))?;
        }
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
            let seen = self.reserve_in_db(groups, now).await?;
            self.remember(seen);
            Ok(())
        })
    }
}
