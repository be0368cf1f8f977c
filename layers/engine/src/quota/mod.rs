//! Counting sends for quotas (R44), and the clock decisions read.
//!
//! A quota ([`crate::policy::Quota`]) says how many covered calls may be **sent** in a
//! sliding window, per group. The engine works out which groups a call falls in
//! ([`QuotaGroup`], one per covering quota) and asks a [`QuotaCounter`] whether each has
//! room ([`QuotaCounter::check`], at R14 step 7) and, when the call is about to be sent, to
//! check and record the send in one atomic step ([`QuotaCounter::reserve`], R38): concurrent
//! callers never put more than `max` sends in any window.
//!
//! [`MemoryQuotaCounter`] is the library's counter: exact under concurrency within one
//! process. A counter shared by several processes (a database) implements the same trait;
//! [`retry_after_ms`] is the window arithmetic every implementation shares.
//!
//! ```
//! use toolgate_engine::quota::{MemoryQuotaCounter, QuotaCounter, QuotaError, QuotaGroup};
//! let counter = MemoryQuotaCounter::new();
//! let group = QuotaGroup::new("searches", 0, 2, 60_000);
//! let groups = [group];
//! counter.reserve(&groups, 0).unwrap();
//! counter.reserve(&groups, 1_000).unwrap();
//! let Err(QuotaError::Full(full)) = counter.reserve(&groups, 2_000) else { panic!() };
//! assert_eq!(full.retry_after_secs(), 58);
//! // The window slides: the first send leaves it at 60 s.
//! counter.reserve(&groups, 60_000).unwrap();
//! ```

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::labels::LabelSet;

mod memory;
mod shared;

pub use memory::MemoryQuotaCounter;
pub use shared::{AsyncQuotaCounter, LabelsFuture, ReserveFuture};

/// Milliseconds since the Unix epoch: the time decisions are made at (R44, R45).
pub type Millis = u64;

/// Where decisions read the time. Controllable in tests ([`ManualClock`]).
pub trait Clock: Send + Sync + fmt::Debug {
    /// Now, in milliseconds since the Unix epoch.
    fn now_ms(&self) -> Millis;
}

/// The system's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> Millis {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
}

/// A clock that moves only when told to (tests, simulations).
///
/// ```
/// use toolgate_engine::quota::{Clock, ManualClock};
/// let clock = ManualClock::new(1_000);
/// clock.advance_ms(500);
/// assert_eq!(clock.now_ms(), 1_500);
/// clock.set_ms(10);
/// assert_eq!(clock.now_ms(), 10);
/// ```
#[derive(Debug, Default)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    /// A clock showing `now`.
    pub fn new(now: Millis) -> Self {
        Self(AtomicU64::new(now))
    }

    /// Sets the time.
    pub fn set_ms(&self, now: Millis) {
        self.0.store(now, Ordering::SeqCst);
    }

    /// Moves the time on.
    pub fn advance_ms(&self, by: Millis) {
        self.0.fetch_add(by, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> Millis {
        self.0.load(Ordering::SeqCst)
    }
}

/// One group of one quota that a call falls in (R44): the counter's key, and the quota's
/// `max` and window.
///
/// The key is hashed once, when the group is made ([`QuotaGroup::new`]): the in-memory
/// counter's check probes its map by that hash (a policy replacement makes new groups, so
/// new hashes). Its `reserve` — the exact, atomic step that records a send — hashes the
/// key's text afresh, so a group whose `key` was changed after it was made can make a check
/// miss its log (the check is advisory) but can never let a quota be exceeded; groups whose
/// hashes are equal but whose keys differ are counted apart.
#[derive(Debug, Clone)]
pub struct QuotaGroup {
    /// The counter key: the quota's [`counter_id`](crate::policy::Quota::counter_id) and
    /// the group's `per` values. Stable across processes and policy versions that keep the
    /// quota's selection, `per` keys and window.
    pub key: String,
    /// The quota's index in the policy's `quotas` (for reasons).
    pub quota: usize,
    /// At most this many sends in one window.
    pub max: u64,
    /// The window, in milliseconds.
    pub window_ms: u64,
    /// [`key_hash`] of `key` when the group was made.
    hash: u64,
}

impl PartialEq for QuotaGroup {
    fn eq(&self, other: &Self) -> bool {
        // The cached hash is not part of what a group is.
        self.key == other.key
            && self.quota == other.quota
            && self.max == other.max
            && self.window_ms == other.window_ms
    }
}

impl Eq for QuotaGroup {}

impl std::hash::Hash for QuotaGroup {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.key.hash(state);
        self.quota.hash(state);
        self.max.hash(state);
        self.window_ms.hash(state);
    }
}

impl QuotaGroup {
    /// A group (its key hashed once, here).
    pub fn new(key: impl Into<String>, quota: usize, max: u64, window_ms: u64) -> Self {
        let key = key.into();
        Self {
            hash: key_hash(&key),
            key,
            quota,
            max,
            window_ms,
        }
    }

    /// A group whose cached hash is `hash`, whatever its key: for tests of what a stale or
    /// colliding hash can do.
    #[cfg(test)]
    pub(crate) fn with_hash(mut self, hash: u64) -> Self {
        self.hash = hash;
        self
    }
}

/// The hash the in-memory counter files a group key under: foldhash with one random seed
/// per process (group keys hold `per` values a caller may choose, so the hash is seeded).
fn key_hash(key: &str) -> u64 {
    use std::hash::BuildHasher;
    static STATE: std::sync::OnceLock<foldhash::fast::RandomState> = std::sync::OnceLock::new();
    STATE.get_or_init(Default::default).hash_one(key)
}

/// Some covering quotas are full.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaFull {
    /// The full groups, as indices into the groups asked about.
    pub full: Vec<usize>,
    /// Milliseconds until every group asked about has room (at least 1).
    pub retry_after_ms: u64,
}

impl QuotaFull {
    /// What a counter's check found: `Ok` when no group is `full`, else the refusal, waiting
    /// at least 1 ms (`retry_after_ms` is the longest wait of the full groups).
    ///
    /// ```
    /// use toolgate_engine::quota::{QuotaError, QuotaFull};
    /// assert!(QuotaFull::unless_empty(Vec::new(), 0).is_ok());
    /// let Err(QuotaError::Full(full)) = QuotaFull::unless_empty(vec![2], 0) else { panic!() };
    /// assert_eq!((full.full, full.retry_after_ms), (vec![2], 1));
    /// ```
    ///
    /// # Errors
    ///
    /// [`QuotaError::Full`] when `full` names a group.
    pub fn unless_empty(full: Vec<usize>, retry_after_ms: u64) -> Result<(), QuotaError> {
        if full.is_empty() {
            return Ok(());
        }
        Err(QuotaError::Full(QuotaFull {
            full,
            retry_after_ms: retry_after_ms.max(1),
        }))
    }

    /// [`QuotaFull::retry_after_ms`] in whole seconds, rounded up (R44).
    pub fn retry_after_secs(&self) -> u64 {
        self.retry_after_ms.div_ceil(1000)
    }
}

/// Why a counter said no.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuotaError {
    /// A group is full (R44): the call is refused `rate_limited`.
    Full(QuotaFull),
    /// The counter cannot be read or written (a store that cannot be reached): the call is
    /// refused, never let through (fail closed).
    Unavailable(String),
}

impl fmt::Display for QuotaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QuotaError::Full(full) => write!(
                f,
                "{} quota group(s) full; room again in {} s",
                full.full.len(),
                full.retry_after_secs()
            ),
            QuotaError::Unavailable(why) => write!(f, "the quota counter cannot be used: {why}"),
        }
    }
}

impl std::error::Error for QuotaError {}

/// Counts sends per quota group (R44). Implementations must be exact: `reserve` checks
/// every group and records the send in each as one atomic step, so concurrent callers
/// (threads, or processes sharing the store) never put more than `max` sends in a window.
/// Times are milliseconds; a send at `t` is in the window at `now` when
/// `now - window < t <= now`.
pub trait QuotaCounter: Send + Sync {
    /// Whether every group has room at `now`, recording nothing.
    fn check(&self, groups: &[QuotaGroup], now: Millis) -> Result<(), QuotaError>;

    /// Checks every group and, when each has room, records one send at `now` in each, as
    /// one atomic step. A refusal records nothing.
    fn reserve(&self, groups: &[QuotaGroup], now: Millis) -> Result<(), QuotaError>;

    /// The labels of the tools sent so far in `session` (R49; calls without a session share
    /// one history). A counter that keeps none says so (the default): a decision that needs
    /// them then refuses the call (fail closed).
    ///
    /// # Errors
    ///
    /// The labels cannot be read.
    fn session_labels(&self, session: Option<&str>) -> Result<LabelSet, QuotaError> {
        let _ = session;
        Err(no_session_labels())
    }

    /// [`QuotaCounter::reserve`], and, in the same atomic step, adds `labels` (the sent
    /// tool's) to `session`'s labels (R49: counted when the send is recorded). A refusal
    /// records neither. The default keeps no labels and refuses (fail closed).
    ///
    /// # Errors
    ///
    /// As [`QuotaCounter::reserve`]; or the labels cannot be recorded.
    fn reserve_labelled(
        &self,
        groups: &[QuotaGroup],
        now: Millis,
        session: Option<&str>,
        labels: &LabelSet,
    ) -> Result<(), QuotaError> {
        let _ = (groups, now, session, labels);
        Err(no_session_labels())
    }
}

fn no_session_labels() -> QuotaError {
    QuotaError::Unavailable(String::from(
        "this quota counter keeps no session labels, which the policy's `session_labels` need (R49)",
    ))
}

/// No history of sends: every quota always has room (what [`crate::Governance::decide`]
/// sees). Records nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoSends;

impl QuotaCounter for NoSends {
    fn check(&self, _: &[QuotaGroup], _: Millis) -> Result<(), QuotaError> {
        Ok(())
    }

    fn reserve(&self, _: &[QuotaGroup], _: Millis) -> Result<(), QuotaError> {
        Ok(())
    }

    /// No history: a session has no labels (SPEC §7: `decide` sees none).
    fn session_labels(&self, _: Option<&str>) -> Result<LabelSet, QuotaError> {
        Ok(LabelSet::new())
    }

    fn reserve_labelled(
        &self,
        _: &[QuotaGroup],
        _: Millis,
        _: Option<&str>,
        _: &LabelSet,
    ) -> Result<(), QuotaError> {
        Ok(())
    }
}

/// A quota group's key (R44): the quota's counter id, then the group's `per` values as a
/// compact JSON array (`null` for a call without a session), written into one buffer.
/// Counters in every store key their sends by it, so it is the same in every process.
///
/// ```
/// use toolgate_engine::quota::group_key;
/// assert_eq!(group_key("q1", &[Some("support"), None]), r#"q1["support",null]"#);
/// assert_eq!(group_key("q1", &[Some("a\"b")]), r#"q1["a\"b"]"#);
/// ```
pub fn group_key(counter_id: &str, parts: &[Option<&str>]) -> String {
    let mut key = String::with_capacity(
        counter_id.len()
            + 2
            + parts
                .iter()
                .map(|p| p.map_or(4, |s| s.len() + 3))
                .sum::<usize>(),
    );
    key.push_str(counter_id);
    key.push('[');
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            key.push(',');
        }
        match part {
            None => key.push_str("null"),
            Some(s) => push_json_string(&mut key, s),
        }
    }
    key.push(']');
    key
}

/// The key a store files `session`'s labels under (R49): the session id as a compact JSON
/// string, or `null` for the calls made in no session, which share one history (as they
/// share one quota group, [`group_key`]). No session id can be keyed `null`: every session's
/// key starts with `"`. Every store keys by it, so it is the same in every process.
///
/// ```
/// use toolgate_engine::quota::session_key;
/// assert_eq!(session_key(Some("s-1")), r#""s-1""#);
/// assert_eq!(session_key(Some("null")), r#""null""#);
/// assert_eq!(session_key(None), "null");
/// ```
pub fn session_key(session: Option<&str>) -> String {
    match session {
        None => String::from("null"),
        Some(s) => {
            let mut key = String::with_capacity(s.len() + 2);
            push_json_string(&mut key, s);
            key
        }
    }
}

/// Writes `s` as a JSON string, escaped exactly as `serde_json` writes it compactly.
fn push_json_string(out: &mut String, s: &str) {
    out.push('"');
    let mut plain = 0;
    for (at, b) in s.bytes().enumerate() {
        let escape = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            0x08 => "\\b",
            0x0c => "\\f",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x00..=0x1f => "",
            _ => continue,
        };
        // Every byte escaped is ASCII, so `plain..at` is a run of whole characters.
        out.push_str(s.get(plain..at).unwrap_or_default());
        if escape.is_empty() {
            use std::fmt::Write as _;
            let _ = write!(out, "\\u{b:04x}");
        } else {
            out.push_str(escape);
        }
        plain = at + 1;
    }
    out.push_str(s.get(plain..).unwrap_or_default());
    out.push('"');
}

/// R44's window arithmetic, shared by every counter: given one group's send times that are
/// still in its window at `now` (`now - window < t <= now`), sorted ascending, `None` when
/// the group has room, else the milliseconds until it has (the oldest send that must leave
/// the window for the count to drop below `max`, plus the window, minus `now`).
///
/// ```
/// use toolgate_engine::quota::retry_after_ms;
/// assert_eq!(retry_after_ms(&[0, 1_000], 2, 60_000, 2_000), Some(58_000));
/// assert_eq!(retry_after_ms(&[0], 2, 60_000, 2_000), None);
/// ```
pub fn retry_after_ms(in_window: &[Millis], max: u64, window_ms: u64, now: Millis) -> Option<u64> {
    let n = in_window.len() as u64;
    if n < max {
        return None;
    }
    // The count drops to max - 1 once the (n - max + 1)-th oldest send has left.
    let at = usize::try_from(n - max).unwrap_or(usize::MAX);
    let oldest = in_window.get(at).copied().unwrap_or(now);
    Some(oldest.saturating_add(window_ms).saturating_sub(now).max(1))
}

impl<T: QuotaCounter + ?Sized> QuotaCounter for Arc<T> {
    fn check(&self, groups: &[QuotaGroup], now: Millis) -> Result<(), QuotaError> {
        (**self).check(groups, now)
    }

    fn reserve(&self, groups: &[QuotaGroup], now: Millis) -> Result<(), QuotaError> {
        (**self).reserve(groups, now)
    }

    fn session_labels(&self, session: Option<&str>) -> Result<LabelSet, QuotaError> {
        (**self).session_labels(session)
    }

    fn reserve_labelled(
        &self,
        groups: &[QuotaGroup],
        now: Millis,
        session: Option<&str>,
        labels: &LabelSet,
    ) -> Result<(), QuotaError> {
        (**self).reserve_labelled(groups, now, session, labels)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(max: u64, window_ms: u64) -> QuotaGroup {
        QuotaGroup::new("g", 0, max, window_ms)
    }

    proptest::proptest! {
        /// A group key is the counter id and the `per` values written as `serde_json`
        /// writes them: keys stored by earlier builds keep counting.
        #[test]
        fn r44_group_keys_are_the_compact_json_of_their_values(
            parts in proptest::collection::vec(proptest::option::of("\\PC{0,6}|[\"\\\\\\x00-\\x1f]{0,3}"), 0..4),
        ) {
            let borrowed: Vec<Option<&str>> = parts.iter().map(|p| p.as_deref()).collect();
            let json: Vec<serde_json::Value> = parts
                .iter()
                .map(|p| p.clone().map_or(serde_json::Value::Null, serde_json::Value::from))
                .collect();
            proptest::prop_assert_eq!(
                group_key("id", &borrowed),
                format!("id{}", serde_json::Value::Array(json))
            );
        }
    }

    /// One step of the stale-hash property: a reservation or a check of some groups (by
    /// key index), each maybe carrying a forged hash, at a time.
    #[derive(Debug, Clone)]
    struct Step {
        reserve: bool,
        groups: Vec<(usize, Option<u64>)>,
        dt: u64,
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        (
            any::<bool>(),
            proptest::collection::vec((0..4usize, proptest::option::of(0..3u64)), 1..4),
            0..400u64,
        )
            .prop_map(|(reserve, groups, dt)| Step {
                reserve,
                groups,
                dt,
            })
    }

    proptest::proptest! {
        /// R44: the hash a group carries from when it was made never lets a quota
        /// be exceeded. Groups carry forged hashes (stale, as if their key changed after
        /// they were made, or equal for different keys): every reservation is exactly what a
        /// model counting by key text says, no key ever holds more than `max` sends in a
        /// window, and a check refuses only a group the model says is full (with true
        /// hashes, exactly those).
        #[test]
        fn r44_a_stale_or_colliding_group_hash_never_lets_a_quota_be_exceeded(
            steps in proptest::collection::vec(step(), 1..40),
        ) {
            const KEYS: [&str; 4] = ["a", "b", "a[\"x\"]", "b[\"x\"]"];
            const MAX: u64 = 3;
            const WINDOW: u64 = 1_000;
            let c = MemoryQuotaCounter::new();
            let mut model: Vec<Vec<Millis>> = vec![Vec::new(); KEYS.len()];
            let mut now = 0;
            for st in &steps {
                now += st.dt;
                let groups: Vec<QuotaGroup> = st
                    .groups
                    .iter()
                    .map(|&(k, forged)| {
                        let g = QuotaGroup::new(KEYS[k], k, MAX, WINDOW);
                        match forged {
                            Some(h) => g.with_hash(h),
                            None => g,
                        }
                    })
                    .collect();
                let in_window = |m: &Vec<Millis>| m.iter().filter(|&&t| t + WINDOW > now).count() as u64;
                let full: Vec<bool> = st.groups.iter().map(|&(k, _)| in_window(&model[k]) >= MAX).collect();
                if st.reserve {
                    let got = c.reserve(&groups, now);
                    proptest::prop_assert_eq!(got.is_ok(), !full.contains(&true), "{:?}", got);
                    if got.is_ok() {
                        let mut keys: Vec<usize> = st.groups.iter().map(|&(k, _)| k).collect();
                        keys.sort_unstable();
                        keys.dedup();
                        for k in keys {
                            model[k].push(now);
                        }
                    }
                } else {
                    let refused: Vec<usize> = match c.check(&groups, now) {
                        Ok(()) => Vec::new(),
                        Err(QuotaError::Full(f)) => f.full,
                        Err(e) => return Err(proptest::test_runner::TestCaseError::fail(format!("{e:?}"))),
                    };
                    for (i, &(_, forged)) in st.groups.iter().enumerate() {
                        let is_refused = refused.contains(&i);
                        if forged.is_none() {
                            proptest::prop_assert_eq!(is_refused, full[i], "group {}", i);
                        } else {
                            proptest::prop_assert!(!is_refused || full[i], "group {} refused with room", i);
                        }
                    }
                }
                for (k, key) in KEYS.iter().enumerate() {
                    let n = c.sends_in_window(key, WINDOW, now) as u64;
                    proptest::prop_assert!(n <= MAX, "{} holds {} sends", key, n);
                    proptest::prop_assert_eq!(n, in_window(&model[k]));
                }
            }
        }
    }

    #[test]
    fn r44_a_group_made_anew_hashes_its_key_anew() {
        let a = QuotaGroup::new("refunds[\"support\"]", 0, 1, 1_000);
        let mut b = a.clone();
        b.key = String::from("refunds[\"ops\"]");
        // `b` carries `a`'s hash: its check misses (advisory), its reserve counts `b`.
        let c = MemoryQuotaCounter::new();
        c.reserve(std::slice::from_ref(&a), 0).unwrap();
        c.reserve(std::slice::from_ref(&b), 0).unwrap();
        assert!(
            c.reserve(std::slice::from_ref(&b), 1).is_err(),
            "b is full by its own text"
        );
        assert_eq!(c.sends_in_window("refunds[\"ops\"]", 1_000, 1), 1);
        let remade = QuotaGroup::new(b.key.clone(), 0, 1, 1_000);
        assert_eq!(remade.hash, key_hash(&b.key));
        assert_ne!(remade.hash, a.hash);
        assert!(c.check(std::slice::from_ref(&remade), 1).is_err());
    }

    #[test]
    fn r44_the_window_reopens_at_its_edge() {
        let c = MemoryQuotaCounter::new();
        let g = [group(1, 10_000)];
        c.reserve(&g, 0).unwrap();
        let Err(QuotaError::Full(f)) = c.check(&g, 9_999) else {
            panic!("full just before the edge")
        };
        assert_eq!(f.retry_after_ms, 1);
        assert_eq!(f.retry_after_secs(), 1, "rounded up");
        c.check(&g, 10_000).unwrap();
    }

    #[test]
    fn r44_check_records_nothing_and_a_refusal_records_nothing() {
        let c = MemoryQuotaCounter::new();
        let a = QuotaGroup::new("a", 0, 1, 1_000);
        let b = QuotaGroup::new("b", 1, 5, 1_000);
        c.check(std::slice::from_ref(&a), 0).unwrap();
        c.reserve(std::slice::from_ref(&a), 0).unwrap();
        assert!(c.reserve(&[a.clone(), b.clone()], 1).is_err());
        assert_eq!(c.sends_in_window("b", 1_000, 1), 0, "b took no send");
        assert_eq!(c.sends_in_window("a", 1_000, 1), 1);
    }

    #[test]
    fn r44_retry_after_is_until_every_group_has_room() {
        let c = MemoryQuotaCounter::new();
        let a = QuotaGroup::new("a", 0, 1, 10_000);
        let b = QuotaGroup::new("b", 1, 1, 60_000);
        c.reserve(&[a.clone(), b.clone()], 0).unwrap();
        let Err(QuotaError::Full(f)) = c.check(&[a, b], 500) else {
            panic!()
        };
        assert_eq!(f.full, [0, 1]);
        assert_eq!(f.retry_after_secs(), 60);
    }
}
