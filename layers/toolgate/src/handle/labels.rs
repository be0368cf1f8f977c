//! A session's labels (R49) read ahead of the decision from an asynchronous counter: a
//! decision is synchronous (R14 step 7 reads [`QuotaCounter::session_labels`]), and a
//! shared store's labels are read over the network, so they are awaited first —
//! [`GovernanceHandle::read_session_labels`], or [`SessionLabelsLayer`] around a stack —
//! and carried with the call to every layer of the handle that decides it.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use toolgate_engine::labels::LabelSet;
use tower_layer::Layer;
use tower_service::Service;

use super::*;

/// The labels of one call's session, read from the handle's asynchronous counter before
/// the call was decided ([`GovernanceHandle::read_session_labels`]): what the call's
/// decisions read as the session's labels, with the counter's advisory check for its
/// quotas. Bound to the call and the session it was read for, and to the counter it was
/// read from: any other call, session or counter reads none (and a decision that needs them
/// refuses the call, fail closed). Only toolgate makes one.
pub(crate) struct ReadLabels {
    call: CallId,
    session: Option<String>,
    counter: Arc<dyn AsyncQuotaCounter>,
    labels: Result<LabelSet, QuotaError>,
}

impl ReadLabels {
    /// Whether these labels were read for `call` (in `session`) from `counter`.
    pub(super) fn serves(
        &self,
        call: &ToolCall,
        session: Option<&str>,
        counter: &Arc<dyn AsyncQuotaCounter>,
    ) -> bool {
        self.call == call.id
            && self.session.as_deref() == session
            && std::ptr::addr_eq(Arc::as_ptr(&self.counter), Arc::as_ptr(counter))
    }
}

impl QuotaCounter for ReadLabels {
    fn check(&self, groups: &[QuotaGroup], now: Millis) -> Result<(), QuotaError> {
        self.counter.check(groups, now)
    }

    fn reserve(&self, groups: &[QuotaGroup], now: Millis) -> Result<(), QuotaError> {
        CheckOnly(Arc::clone(&self.counter)).reserve(groups, now)
    }

    fn session_labels(&self, session: Option<&str>) -> Result<LabelSet, QuotaError> {
        if session != self.session.as_deref() {
            return Err(QuotaError::Unavailable(String::from(
                "the session's labels were read for another session",
            )));
        }
        self.labels.clone()
    }
}

impl GovernanceHandle {
    /// Whether a call must have its session's labels read before it is decided
    /// ([`GovernanceHandle::read_session_labels`]): an asynchronous counter is set
    /// ([`GovernanceHandle::set_async_quota_counter`]) and the snapshot in force selects by
    /// `session_labels` (R49; its enforced or shadow policy).
    pub fn reads_session_labels(&self) -> bool {
        self.ledger.load().reserving.is_some() && self.load().records_session_labels()
    }

    /// R49 with an asynchronous counter: awaits `call`'s session's labels from the shared
    /// store and attaches them to the call, for every layer of this handle that decides it
    /// (R14 step 7 reads them synchronously). Does nothing when
    /// [`GovernanceHandle::reads_session_labels`] is false. Labels that cannot be read are
    /// attached as such: a decision that needs them refuses the call (fail closed).
    ///
    /// [`SessionLabelsLayer`] calls it for every call of a stack; the approval gate calls it
    /// again right before an approved call is sent (R38: a label recorded during the wait,
    /// by any replica, applies). A call never passed through it is refused wherever its
    /// decision needs the session's labels.
    pub async fn read_session_labels(&self, call: &mut ToolCall) {
        let counter = {
            let ledger = self.ledger.load();
            match &ledger.reserving {
                Some(c) => Arc::clone(c),
                None => return,
            }
        };
        if !self.load().records_session_labels() {
            return;
        }
        let session = call.turn.as_ref().map(|t| t.session.clone());
        let labels = counter.session_labels(session.as_deref()).await;
        call.extensions.insert(ReadLabels {
            call: call.id.clone(),
            session,
            counter,
            labels,
        });
    }
}

/// Reads each call's session labels (R49) from the handle's asynchronous counter before the
/// layers inside decide it ([`GovernanceHandle::read_session_labels`]). Put it outside a
/// stack whose handle has an asynchronous counter (`toolgate mcp serve` does, over a
/// PostgreSQL inbox) when its policy may select by `session_labels`; with a synchronous
/// counter (in memory, SQLite) or a policy that selects by no session labels it passes
/// calls straight through.
///
/// ```
/// use std::sync::Arc;
/// use serde_json::json;
/// use toolgate::core::{AgentRef, ToolCall, ToolOutput, ToolResponse};
/// use toolgate::engine::config::{Format, load_str};
/// use toolgate::engine::quota::{AsyncQuotaCounter, LabelsFuture, MemoryQuotaCounter, Millis};
/// use toolgate::engine::quota::{QuotaCounter, QuotaError, QuotaGroup, ReserveFuture};
/// use toolgate::core::LabelSet;
/// use toolgate::{GovernanceHandle, SessionLabelsLayer, ToolgateLayer};
/// use tower::{Layer, ServiceExt, service_fn};
///
/// /// The in-memory counter behind the asynchronous seam (a database's would await).
/// struct Remote(MemoryQuotaCounter);
/// impl AsyncQuotaCounter for Remote {
///     fn check(&self, g: &[QuotaGroup], now: Millis) -> Result<(), QuotaError> { self.0.check(g, now) }
///     fn reserve<'a>(&'a self, g: &'a [QuotaGroup], now: Millis) -> ReserveFuture<'a> {
///         Box::pin(async move { self.0.reserve(g, now) })
///     }
///     fn session_labels<'a>(&'a self, s: Option<&'a str>) -> LabelsFuture<'a> {
///         Box::pin(async move { self.0.session_labels(s) })
///     }
///     fn reserve_labelled<'a>(&'a self, g: &'a [QuotaGroup], now: Millis, s: Option<&'a str>,
///         l: &'a LabelSet) -> ReserveFuture<'a> {
///         Box::pin(async move { self.0.reserve_labelled(g, now, s, l) })
///     }
/// }
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let handle = GovernanceHandle::new(load_str(r#"{
///     "tools": [{"kind": "http", "name": "read_mail", "labels": ["private"]},
///               {"kind": "http", "name": "post", "network": "egress"}],
///     "agents": [{"name": "a", "allowed_tools": ["read_mail", "post"]}],
///     "policy": {"rules": [{"effect": "deny", "labels": ["egress"], "session_labels": ["private"]}]}}"#,
///     Format::Json).unwrap());
/// handle.set_async_quota_counter(Arc::new(Remote(MemoryQuotaCounter::new())));
/// let stack = SessionLabelsLayer::new(handle.clone()).layer(
///     ToolgateLayer::builder(handle).build().unwrap().layer(service_fn(|_c: ToolCall| async {
///         Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::new(json!("ok"))))
///     })));
/// let call = |tool: &str| ToolCall::new(AgentRef::profile("a"), tool, json!({})).in_turn("s1", "t1");
/// assert!(matches!(stack.clone().oneshot(call("read_mail")).await.unwrap(), ToolResponse::Completed(_)));
/// let r = stack.oneshot(call("post")).await.unwrap();
/// assert_eq!(r.refusal().unwrap().code, toolgate::core::RefusalCode::Denied);
/// # });
/// ```
#[derive(Debug, Clone)]
pub struct SessionLabelsLayer {
    handle: GovernanceHandle,
}

impl SessionLabelsLayer {
    /// Reads the session labels of `handle`'s calls.
    pub fn new(handle: GovernanceHandle) -> Self {
        Self { handle }
    }
}

impl<S> Layer<S> for SessionLabelsLayer {
    type Service = ReadSessionLabels<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ReadSessionLabels {
            inner,
            handle: self.handle.clone(),
        }
    }
}

/// The service of [`SessionLabelsLayer`].
#[derive(Debug, Clone)]
pub struct ReadSessionLabels<S> {
    inner: S,
    handle: GovernanceHandle,
}

impl<S> ReadSessionLabels<S> {
    crate::inner_service_accessors!(inner: S);
}

/// The boxed future of a call whose labels are read first.
type Reading<R, E> = Pin<Box<dyn Future<Output = Result<R, E>> + Send>>;

pin_project! {
    /// The response future of [`ReadSessionLabels`]: the inner service's, or the read of
    /// the labels followed by it.
    pub struct LabelsReadFuture<F, R, E> {
        #[pin]
        kind: Kind<F, R, E>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, R, E> {
        Straight { #[pin] future: F },
        Reading { future: Reading<R, E> },
    }
}

impl<F, R, E> fmt::Debug for LabelsReadFuture<F, R, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LabelsReadFuture").finish_non_exhaustive()
    }
}

impl<F, R, E> Future for LabelsReadFuture<F, R, E>
where
    F: Future<Output = Result<R, E>>,
{
    type Output = Result<R, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Straight { future } => future.poll(cx),
            KindProj::Reading { future } => future.as_mut().poll(cx),
        }
    }
}

impl<S> Service<ToolCall> for ReadSessionLabels<S>
where
    S: Service<ToolCall> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = LabelsReadFuture<S::Future, S::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut call: ToolCall) -> Self::Future {
        if !self.handle.reads_session_labels() {
            return LabelsReadFuture {
                kind: Kind::Straight {
                    future: self.inner.call(call),
                },
            };
        }
        // The service polled ready is the one that is called, after the read.
        let fresh = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, fresh);
        let handle = self.handle.clone();
        LabelsReadFuture {
            kind: Kind::Reading {
                future: Box::pin(async move {
                    handle.read_session_labels(&mut call).await;
                    inner.call(call).await
                }),
            },
        }
    }
}
