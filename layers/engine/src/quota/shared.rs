//! The asynchronous counter seam (R44): a quota counter whose authoritative reservation
//! is reached over the network, as the PostgreSQL counter of `toolgate-inbox-postgres`.

use super::{Millis, QuotaError, QuotaGroup, no_session_labels};
use crate::labels::LabelSet;

/// A boxed, sendable future borrowing for `'a`.
pub type ReserveFuture<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), QuotaError>> + Send + 'a>>;

/// A boxed, sendable future of a session's labels (R49), borrowing for `'a`.
pub type LabelsFuture<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<LabelSet, QuotaError>> + Send + 'a>>;

/// A quota counter whose authoritative reservation is asynchronous (R44): a database reached
/// over the network, such as the PostgreSQL counter of `toolgate-inbox-postgres`, which no
/// runtime thread should block on. Set with `toolgate::GovernanceHandle::set_async_quota_counter`:
/// the stack then awaits [`AsyncQuotaCounter::reserve`] right before each send (at once, or
/// after a person approved), and refuses the call when it says no — full (`rate_limited`),
/// or unreachable (fail closed).
///
/// [`AsyncQuotaCounter::check`] is what a decision reads at R14 step 7, synchronously and
/// without I/O: advisory (say, what the counter saw at its last reservation, so a quota
/// known to be full refuses early instead of asking a person); a call it lets through is
/// still checked and counted by `reserve`, atomically, before it is sent.
///
/// A session's labels (R49) are read and written here too, when the policy selects by
/// `session_labels`: [`AsyncQuotaCounter::session_labels`] is awaited before the call is
/// decided (by `toolgate::SessionLabelsLayer`, and again before an approved call is sent,
/// R38), so a decision reads what every replica recorded;
/// [`AsyncQuotaCounter::reserve_labelled`] records the sent tool's labels in the same
/// atomic step as the send. A counter that keeps no labels says so (the defaults): a call
/// whose decision needs them is refused (fail closed).
///
/// ```
/// use toolgate_engine::quota::{AsyncQuotaCounter, Millis, MemoryQuotaCounter, QuotaCounter, QuotaError, QuotaGroup, ReserveFuture};
///
/// /// The in-memory counter behind the asynchronous seam (a database's would await here).
/// struct Remote(MemoryQuotaCounter);
/// impl AsyncQuotaCounter for Remote {
///     fn check(&self, groups: &[QuotaGroup], now: Millis) -> Result<(), QuotaError> {
///         self.0.check(groups, now)
///     }
///     fn reserve<'a>(&'a self, groups: &'a [QuotaGroup], now: Millis) -> ReserveFuture<'a> {
///         Box::pin(async move { self.0.reserve(groups, now) })
///     }
/// }
/// let remote = Remote(MemoryQuotaCounter::new());
/// let groups = [QuotaGroup::new("refunds", 0, 1, 60_000)];
/// assert!(remote.check(&groups, 0).is_ok());
/// ```
pub trait AsyncQuotaCounter: Send + Sync {
    /// Whether every group seems to have room at `now`, recording nothing (no I/O).
    ///
    /// # Errors
    ///
    /// A group known to be full, or a counter known to be unusable.
    fn check(&self, groups: &[QuotaGroup], now: Millis) -> Result<(), QuotaError>;

    /// Checks every group and, when each has room, records one send at `now` in each, as
    /// one atomic step in the shared store. A refusal records nothing.
    fn reserve<'a>(&'a self, groups: &'a [QuotaGroup], now: Millis) -> ReserveFuture<'a>;

    /// The labels of the tools sent so far in `session` (R49; the calls made in no session
    /// share one history), as the shared store holds them now: what a decision reads at
    /// R14 step 7 and again right before an approved call is sent (R38). The default keeps
    /// none and refuses (fail closed).
    fn session_labels<'a>(&'a self, session: Option<&'a str>) -> LabelsFuture<'a> {
        let _ = session;
        Box::pin(async { Err(no_session_labels()) })
    }

    /// [`AsyncQuotaCounter::reserve`], and, in the same atomic step in the shared store, adds
    /// `labels` (the sent tool's) to `session`'s labels (R49: counted when the send is
    /// recorded). With no groups, only the labels are recorded. A refusal records neither.
    /// The default keeps no labels and refuses (fail closed).
    fn reserve_labelled<'a>(
        &'a self,
        groups: &'a [QuotaGroup],
        now: Millis,
        session: Option<&'a str>,
        labels: &'a LabelSet,
    ) -> ReserveFuture<'a> {
        let _ = (groups, now, session, labels);
        Box::pin(async { Err(no_session_labels()) })
    }
}
