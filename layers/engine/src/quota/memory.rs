//! The in-memory quota counter (R44): one mutex-guarded log per group, exact under
//! concurrency within one process.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use super::{Millis, QuotaCounter, QuotaError, QuotaFull, QuotaGroup, key_hash};

/// A map keyed by a [`key_hash`] already computed: the hash is the map's hash.
#[derive(Debug, Default, Clone, Copy)]
struct Prehashed(u64);

impl std::hash::Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Not reached: the map's keys are `u64`s (`write_u64`). Folded all the same.
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

type PrehashedState = std::hash::BuildHasherDefault<Prehashed>;

/// The groups filed under one hash: almost always one; more only when two keys' hashes are
/// equal, and then each keeps its own log.
type Bucket = Vec<(Box<str>, SharedLog)>;

fn in_bucket<'b>(bucket: &'b Bucket, key: &str) -> Option<&'b SharedLog> {
    bucket.iter().find(|(k, _)| &**k == key).map(|(_, log)| log)
}

/// One group's sends, oldest first, and the latest time it was asked about.
#[derive(Debug, Default)]
struct Log {
    sends: VecDeque<Millis>,
    latest: Millis,
}

impl Log {
    /// Drops the sends that left the window at `now` (never moving back in time) and
    /// returns the effective `now`.
    fn prune(&mut self, now: Millis, window_ms: u64) -> Millis {
        let now = now.max(self.latest);
        self.latest = now;
        while self
            .sends
            .front()
            .is_some_and(|&t| t.saturating_add(window_ms) <= now)
        {
            self.sends.pop_front();
        }
        now
    }

    fn retry_after(&mut self, max: u64, window_ms: u64, now: Millis) -> Option<u64> {
        let now = self.prune(now, window_ms);
        // `retry_after_ms` on the deque itself: it reads only the length and one send.
        let n = self.sends.len() as u64;
        if n < max {
            return None;
        }
        let at = usize::try_from(n - max).unwrap_or(usize::MAX);
        let oldest = self.sends.get(at).copied().unwrap_or(now);
        Some(oldest.saturating_add(window_ms).saturating_sub(now).max(1))
    }
}

/// One group's log, and how many sends it held when last unlocked.
#[derive(Debug, Default)]
struct Group {
    log: Mutex<Log>,
    /// `log.sends.len()` as of the last time the log was changed, published under its lock.
    /// The sends in any window are never more, so a check seeing fewer than `max` knows
    /// the group has room without locking it (the exact decision is `reserve`'s).
    stored: AtomicU64,
}

impl Group {
    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Log>, QuotaError> {
        self.log
            .lock()
            .map_err(|_| QuotaError::Unavailable(String::from("the counter's lock is poisoned")))
    }

    /// Publishes the log's length (call with its lock held).
    fn publish(&self, log: &Log) {
        self.stored.store(log.sends.len() as u64, Ordering::Release);
    }
}

type SharedLog = Arc<Group>;

/// The in-memory [`QuotaCounter`]: one mutex-guarded log per group, pruned as windows
/// pass. Exact under concurrency: `reserve` locks every group it names, in key order (so
/// two reservations never deadlock), checks them all, and records in each before any lock
/// is released.
///
/// INVARIANT: no group ever holds more than `max` sends in one window, whatever the
/// interleaving of `reserve` calls (test `r44_concurrent_reserves_never_pass_max`).
///
/// Times are read as non-decreasing per group: a `now` earlier than one the group has
/// already seen is taken as that one, so a pruned send is never needed again.
#[derive(Debug, Default)]
pub struct MemoryQuotaCounter {
    /// Keyed by group key, filed under its [`key_hash`] (foldhash, seeded once per process):
    /// a check probes by the hash each group carries from when it was made, then compares
    /// the key's text; `reserve` hashes the text afresh (see [`QuotaGroup`]).
    logs: RwLock<HashMap<u64, Bucket, PrehashedState>>,
    reserves: AtomicU64,
    /// Each session's labels (R49), written under this lock together with the sends.
    sessions: std::sync::Mutex<SessionLabels>,
}

/// Sweep empty logs after this many reservations.
const SWEEP_EVERY: u64 = 4096;

impl MemoryQuotaCounter {
    /// An empty counter.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many sends of the group `key` are in a window of `window_ms` at `now`.
    pub fn sends_in_window(&self, key: &str, window_ms: u64, now: Millis) -> usize {
        let log = self.logs.read().ok().and_then(|m| {
            m.get(&key_hash(key))
                .and_then(|b| in_bucket(b, key))
                .cloned()
        });
        match log {
            Some(group) => match group.lock() {
                Ok(mut l) => {
                    let now = l.prune(now, window_ms);
                    group.publish(&l);
                    l.sends.iter().filter(|&&t| t <= now).count()
                }
                Err(_) => 0,
            },
            None => 0,
        }
    }

    /// The logs for `groups`, created when missing, deduplicated and in key order (keys
    /// borrowed from `groups`: nothing is copied on the way).
    fn logs_for<'g>(
        &self,
        groups: &'g [QuotaGroup],
    ) -> Result<Vec<(&'g str, Option<SharedLog>)>, QuotaError> {
        let mut keys: Vec<&str> = groups.iter().map(|g| g.key.as_str()).collect();
        keys.sort_unstable();
        keys.dedup();
        let poisoned = || QuotaError::Unavailable(String::from("the counter's lock is poisoned"));
        // The exact step: each key hashed from its text, never by a hash cached with it.
        let hashes: Vec<u64> = keys.iter().map(|k| key_hash(k)).collect();
        {
            let map = self.logs.read().map_err(|_| poisoned())?;
            let found: Vec<Option<&SharedLog>> = keys
                .iter()
                .zip(&hashes)
                .map(|(k, h)| map.get(h).and_then(|b| in_bucket(b, k)))
                .collect();
            if found.iter().all(Option::is_some) {
                return Ok(keys
                    .iter()
                    .zip(found)
                    .map(|(k, log)| (*k, log.cloned()))
                    .collect());
            }
        }
        let mut map = self.logs.write().map_err(|_| poisoned())?;
        Ok(keys
            .iter()
            .zip(&hashes)
            .map(|(k, h)| {
                let bucket = map.entry(*h).or_default();
                let log = match bucket.iter().position(|(key, _)| &**key == *k) {
                    Some(i) => bucket.get(i).map(|(_, log)| Arc::clone(log)),
                    None => {
                        let log = SharedLog::default();
                        bucket.push(((*k).into(), Arc::clone(&log)));
                        Some(log)
                    }
                };
                (*k, log)
            })
            .collect())
    }

    /// Checks and records under every group's lock at once (see the type's invariant).
    fn reserve_locked(&self, groups: &[QuotaGroup], now: Millis) -> Result<(), QuotaError> {
        if groups.is_empty() {
            return Ok(());
        }
        let logs = self.logs_for(groups)?;
        // Lock in key order (deadlock-free), hold every lock until the end.
        let mut guards = Vec::with_capacity(logs.len());
        for (key, log) in &logs {
            match log {
                Some(log) => guards.push((*key, Some(log.lock()?))),
                None => guards.push((*key, None)),
            }
        }
        let publish = |guards: &[(&str, Option<std::sync::MutexGuard<'_, Log>>)]| {
            for ((_, group), (_, guard)) in logs.iter().zip(guards) {
                if let (Some(group), Some(log)) = (group, guard) {
                    group.publish(log);
                }
            }
        };
        let mut full = Vec::new();
        let mut retry = 0u64;
        for (i, g) in groups.iter().enumerate() {
            let Some((_, guard)) = guards.iter_mut().find(|(k, _)| *k == g.key) else {
                continue;
            };
            let Some(log) = guard.as_mut() else { continue };
            if let Some(ms) = log.retry_after(g.max, g.window_ms, now) {
                full.push(i);
                retry = retry.max(ms);
            }
        }
        if !full.is_empty() {
            publish(&guards);
            return Err(QuotaError::Full(QuotaFull {
                full,
                retry_after_ms: retry,
            }));
        }
        for (_, guard) in &mut guards {
            if let Some(log) = guard.as_mut() {
                // A send is recorded once per key, even when two quotas share it (they
                // cover the same calls, so their counts are always equal).
                let at = now.max(log.latest);
                log.sends.push_back(at);
            }
        }
        publish(&guards);
        drop(guards);
        if self.reserves.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            self.sweep();
        }
        Ok(())
    }

    /// Forgets groups whose logs are empty (their sends all left their windows).
    fn sweep(&self) {
        if let Ok(mut map) = self.logs.write() {
            map.retain(|_, bucket| {
                bucket.retain(|(_, log)| {
                    Arc::strong_count(log) > 1 || log.lock().map_or(true, |l| !l.sends.is_empty())
                });
                !bucket.is_empty()
            });
        }
    }
}

impl QuotaCounter for MemoryQuotaCounter {
    fn check(&self, groups: &[QuotaGroup], now: Millis) -> Result<(), QuotaError> {
        // Nothing is recorded, so nothing needs the groups locked together (the send's
        // `reserve` decides atomically): one look-up per group, in turn, and a lock only
        // for a group that may be full (its log holds `max` sends or more).
        if groups.is_empty() {
            return Ok(());
        }
        let poisoned = || QuotaError::Unavailable(String::from("the counter's lock is poisoned"));
        let map = self.logs.read().map_err(|_| poisoned())?;
        let mut full = Vec::new();
        let mut retry = 0u64;
        for (i, g) in groups.iter().enumerate() {
            // The hash the group was made with: no key hashed per check.
            let Some(group) = map.get(&g.hash).and_then(|b| in_bucket(b, &g.key)) else {
                continue;
            };
            if group.stored.load(Ordering::Acquire) < g.max {
                continue;
            }
            let mut log = group.lock()?;
            let retry_after = log.retry_after(g.max, g.window_ms, now);
            group.publish(&log);
            if let Some(ms) = retry_after {
                full.push(i);
                retry = retry.max(ms);
            }
        }
        QuotaFull::unless_empty(full, retry)
    }

    fn reserve(&self, groups: &[QuotaGroup], now: Millis) -> Result<(), QuotaError> {
        self.reserve_locked(groups, now)
    }

    fn session_labels(&self, session: Option<&str>) -> Result<crate::labels::LabelSet, QuotaError> {
        let sessions = self
            .sessions
            .lock()
            .map_err(|_| QuotaError::Unavailable(String::from("the counter's lock is poisoned")))?;
        Ok(sessions.of(session).cloned().unwrap_or_default())
    }

    /// The sends and the session's labels, recorded under the labels' lock: a reader of the
    /// labels never sees a send without its labels.
    fn reserve_labelled(
        &self,
        groups: &[QuotaGroup],
        now: Millis,
        session: Option<&str>,
        labels: &crate::labels::LabelSet,
    ) -> Result<(), QuotaError> {
        let mut sessions = self
            .sessions
            .lock()
            .map_err(|_| QuotaError::Unavailable(String::from("the counter's lock is poisoned")))?;
        self.reserve_locked(groups, now)?;
        if !labels.is_empty() {
            sessions.entry(session).extend(labels);
        }
        Ok(())
    }
}

/// Each session's labels (R49), and those of the calls made in no session (one history):
/// looked up by the session's id without making a key. Session ids come from callers, so
/// the map is seeded as the group keys' is (foldhash with a random seed per map, as
/// [`key_hash`](super::key_hash)): a lookup costs a few dozen instructions where SipHash
/// cost 160, on every decision whose policy selects by session labels.
#[derive(Debug, Default)]
struct SessionLabels {
    none: crate::labels::LabelSet,
    by_session: HashMap<String, crate::labels::LabelSet, foldhash::fast::RandomState>,
}

impl SessionLabels {
    fn of(&self, session: Option<&str>) -> Option<&crate::labels::LabelSet> {
        match session {
            None => Some(&self.none),
            Some(s) => self.by_session.get(s),
        }
    }

    fn entry(&mut self, session: Option<&str>) -> &mut crate::labels::LabelSet {
        match session {
            None => &mut self.none,
            Some(s) => self.by_session.entry(s.to_owned()).or_default(),
        }
    }
}
