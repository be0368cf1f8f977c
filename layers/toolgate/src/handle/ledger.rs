//! Quota counting behind the handle (R44): the synchronous view of an asynchronous counter
//! ([`AsyncQuotaCounter`], the engine's seam for shared stores), and the ledger of counters
//! and the clock a handle's snapshots are decided with.

use toolgate_engine::labels::LabelSet;

use super::*;

/// The synchronous view of an [`AsyncQuotaCounter`]: its advisory check; a synchronous
/// reservation (which nothing in the stack makes once the counter is asynchronous) is
/// refused, never let through.
pub(super) struct CheckOnly(pub(super) Arc<dyn AsyncQuotaCounter>);

impl QuotaCounter for CheckOnly {
    fn check(&self, groups: &[QuotaGroup], now: Millis) -> Result<(), QuotaError> {
        self.0.check(groups, now)
    }

    fn reserve(&self, groups: &[QuotaGroup], _now: Millis) -> Result<(), QuotaError> {
        if groups.is_empty() {
            return Ok(());
        }
        Err(QuotaError::Unavailable(String::from(
            "the quota counter is reserved asynchronously and this path cannot wait for it",
        )))
    }

    /// Not read here: a call's session labels are read from the shared store before it is
    /// decided ([`GovernanceHandle::read_session_labels`]); a call that was not read for is
    /// refused where its decision needs them (fail closed).
    fn session_labels(&self, _: Option<&str>) -> Result<LabelSet, QuotaError> {
        Err(QuotaError::Unavailable(String::from(
            "the session's labels are kept in a shared store that was not read for this call (put `toolgate::SessionLabelsLayer` around the stack)",
        )))
    }

    fn reserve_labelled(
        &self,
        _: &[QuotaGroup],
        _: Millis,
        _: Option<&str>,
        _: &LabelSet,
    ) -> Result<(), QuotaError> {
        Err(QuotaError::Unavailable(String::from(
            "the quota counter is reserved asynchronously and this path cannot wait for it",
        )))
    }
}

/// What a handle's calls are decided against over time (R44, R45): the sends its quotas
/// count, the grants people gave, and the clock. By default an in-memory counter (exact
/// under concurrency, this process only), no grants, and the system clock; replace them with
/// [`GovernanceHandle::set_quota_counter`], [`GovernanceHandle::set_grants`] and
/// [`GovernanceHandle::set_clock`] (a store shared by replicas, a grant store, a test
/// clock). Every layer of the handle, and every clone of it, sees the same ones.
///
/// ```
/// use std::sync::Arc;
/// use serde_json::json;
/// use toolgate::core::{AgentRef, RefusalCode, ToolCall, ToolOutput, ToolResponse};
/// use toolgate::engine::config::{load_str, Format};
/// use toolgate::engine::quota::ManualClock;
/// use toolgate::{GovernanceHandle, ToolgateLayer};
/// use tower::{Layer, ServiceExt, service_fn};
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let handle = GovernanceHandle::new(load_str(r#"{"tools": [{"kind": "http", "name": "search"}],
///     "agents": [{"name": "a", "allowed_tools": ["search"]}],
///     "policy": {"rules": [], "quotas": [{"max": 1, "window_secs": 60, "reason": "one a minute"}]}}"#,
///     Format::Json).unwrap());
/// let clock = Arc::new(ManualClock::new(0));
/// handle.set_clock(clock.clone());
/// let stack = ToolgateLayer::builder(handle).build().unwrap().layer(service_fn(|_c: ToolCall| async {
///     Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::new(json!("found"))))
/// }));
/// let search = || ToolCall::new(AgentRef::profile("a"), "search", json!({}));
/// assert!(matches!(stack.clone().oneshot(search()).await.unwrap(), ToolResponse::Completed(_)));
/// let ToolResponse::Refused(r) = stack.clone().oneshot(search()).await.unwrap() else { panic!() };
/// assert_eq!((r.code, r.retry_after_secs), (RefusalCode::RateLimited, Some(60)));
/// clock.advance_ms(60_000); // the window slides past the first send
/// assert!(matches!(stack.oneshot(search()).await.unwrap(), ToolResponse::Completed(_)));
/// # });
/// ```
#[derive(Clone)]
pub struct Ledger {
    /// The sends counted for the tenant policy's quotas (with an asynchronous counter, its
    /// advisory check: [`AsyncQuotaCounter`]).
    pub sends: Arc<dyn QuotaCounter>,
    /// An asynchronous counter whose reservation the stack awaits before each send, when
    /// one is set ([`GovernanceHandle::set_async_quota_counter`]).
    pub reserving: Option<Arc<dyn AsyncQuotaCounter>>,
    /// The grants that answer asks in advance.
    pub grants: Arc<dyn GrantStore>,
    /// The time calls are made at.
    pub clock: Arc<dyn Clock>,
}

impl Default for Ledger {
    fn default() -> Self {
        Self {
            sends: Arc::new(MemoryQuotaCounter::new()),
            reserving: None,
            grants: Arc::new(NoGrants),
            clock: Arc::new(SystemClock),
        }
    }
}

impl fmt::Debug for Ledger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ledger")
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

impl Ledger {
    /// The history a call made now is decided against (R44, R45). With an asynchronous
    /// counter, the session's labels (R49) are those read for this call before it was
    /// decided ([`GovernanceHandle::read_session_labels`]); none were read, none are known.
    pub fn history<'a>(&'a self, call: &'a ToolCall) -> History<'a> {
        let session = call.turn.as_ref().map(|t| t.session.as_str());
        // Only a handle with an asynchronous counter looks for labels read ahead.
        let read = self.reserving.as_ref().and_then(|counter| {
            call.extensions
                .get::<ReadLabels>()
                .filter(|read| read.serves(call, session, counter))
        });
        let sends: &dyn QuotaCounter = match read {
            Some(read) => read,
            None => &*self.sends,
        };
        History::new(self.clock.now_ms(), sends, &*self.grants).in_session(session)
    }
}
