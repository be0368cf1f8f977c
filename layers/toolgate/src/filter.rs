//! The shape shared by the filter layers (exposure, confidentiality, air gap): a layer
//! holding the snapshot handle, a service that asks the engine for one check and either
//! forwards the call or answers with a refusal. The check itself lives in the engine.

use std::fmt;
use std::marker::PhantomData;
use std::task::{Context, Poll};

use toolgate_core::{Check, Refusal, RefusalCode, ToolCall, ToolResponse, Verdict};
use toolgate_engine::Governance;
use tower_layer::Layer;
use tower_service::Service;

use crate::future::ResponseFuture;
use crate::handle::GovernanceHandle;

/// One engine check run by a filter layer.
pub trait FilterCheck: Send + Sync + 'static {
    /// The layer's name, for `Debug`.
    const NAME: &'static str;
    /// The last step of R14's order (tool look-up, input bounds, allowed tools,
    /// confidentiality, air gap) this filter enforces, for a filter of the engine's own
    /// checks: it then reads the call's one decision — pinned by an earlier layer of its
    /// handle, or made now and pinned ([`GovernanceHandle::decide`]) — and refuses the call
    /// exactly when that decision was refused at this step or an earlier one, instead of
    /// running [`FilterCheck::check`]. `None` (the default): `check` decides.
    const DECIDES_THROUGH: Option<Check> = None;
    /// Runs the check for one call against one snapshot.
    fn check(governance: &Governance, call: &ToolCall) -> Result<(), Refusal>;
}

/// The position of a check in R14's order of the filters' steps.
fn filter_step(check: Check) -> Option<u8> {
    match check {
        Check::UnknownTool => Some(0),
        Check::InputBounds => Some(1),
        Check::Allowed => Some(2),
        Check::Confidentiality => Some(3),
        Check::AirGap => Some(4),
        _ => None,
    }
}

/// A filter layer: see [`ExposureLayer`](crate::ExposureLayer),
/// [`ConfidentialityLayer`](crate::ConfidentialityLayer), [`AirGapLayer`](crate::AirGapLayer).
#[must_use]
pub struct CheckFilterLayer<C> {
    handle: GovernanceHandle,
    /// The composite stack's seal when this is its exposure filter (0 otherwise).
    seal: u64,
    _check: PhantomData<fn() -> C>,
}

impl<C> Clone for CheckFilterLayer<C> {
    fn clone(&self) -> Self {
        Self {
            handle: self.handle.clone(),
            seal: self.seal,
            _check: PhantomData,
        }
    }
}

impl<C: FilterCheck> fmt::Debug for CheckFilterLayer<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(C::NAME)
            .field("handle", &self.handle)
            .finish()
    }
}

impl<C: FilterCheck> CheckFilterLayer<C> {
    /// A layer deciding by the snapshots in `handle`.
    pub fn new(handle: GovernanceHandle) -> Self {
        Self {
            handle,
            seal: 0,
            _check: PhantomData,
        }
    }

    /// The composite stack's filter: a decision it pins is sealed with `seal` for the
    /// composite's own gate ([`GovernanceHandle::decide_sealing`]).
    pub(crate) fn sealed(handle: GovernanceHandle, seal: u64) -> Self {
        Self {
            handle,
            seal,
            _check: PhantomData,
        }
    }
}

impl<S, C: FilterCheck> Layer<S> for CheckFilterLayer<C> {
    type Service = CheckFilter<S, C>;

    fn layer(&self, inner: S) -> Self::Service {
        CheckFilter {
            inner,
            handle: self.handle.clone(),
            seal: self.seal,
            _check: PhantomData,
        }
    }
}

/// A filter service: forwards a call that passes its check, answers any other with a
/// [`ToolResponse::Refused`] and never sends it.
pub struct CheckFilter<S, C> {
    inner: S,
    handle: GovernanceHandle,
    seal: u64,
    _check: PhantomData<fn() -> C>,
}

impl<S: Clone, C> Clone for CheckFilter<S, C> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            handle: self.handle.clone(),
            seal: self.seal,
            _check: PhantomData,
        }
    }
}

impl<S: fmt::Debug, C: FilterCheck> fmt::Debug for CheckFilter<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(C::NAME)
            .field("inner", &self.inner)
            .field("handle", &self.handle)
            .finish()
    }
}

impl<S, C> CheckFilter<S, C> {
    crate::inner_service_accessors!(inner: S);
}

impl<S, C> Service<ToolCall> for CheckFilter<S, C>
where
    S: Service<ToolCall, Response = ToolResponse>,
    C: FilterCheck,
{
    type Response = ToolResponse;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut call: ToolCall) -> Self::Future {
        let verdict = match C::DECIDES_THROUGH.and_then(filter_step) {
            // Decide once: the pinned decision, refused at one of this filter's steps.
            Some(last) => {
                let pinned = self.handle.decide_sealing(&mut call, self.seal);
                let decision = pinned.decision();
                match decision.verdict {
                    Verdict::Refused(_)
                        if filter_step(decision.decided_by).is_some_and(|s| s <= last) =>
                    {
                        Err(decision.refusal().unwrap_or_else(|| {
                            Refusal::new(
                                RefusalCode::Rejected,
                                decision.decided_by,
                                "the decision was inconsistent",
                            )
                        }))
                    }
                    _ => Ok(()),
                }
            }
            None => {
                let governance = self.handle.pin(&mut call);
                C::check(&governance, &call)
            }
        };
        match verdict {
            Ok(()) => ResponseFuture::inner(self.inner.call(call)),
            // INVARIANT: a refused call is never sent to the inner service.
            Err(refusal) => ResponseFuture::refused(ToolResponse::Refused(refusal)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde_json::json;
    use toolgate_core::{AgentRef, RefusalCode, ToolOutput};
    use toolgate_engine::config::{Format, load_str};
    use tower::{ServiceBuilder, ServiceExt, service_fn};

    use super::*;
    use crate::{AirGapLayer, ConfidentialityLayer, ExposureLayer};

    fn handle() -> GovernanceHandle {
        GovernanceHandle::new(
            load_str(
                r#"{"air_gapped": true,
                    "tools": [{"kind": "http", "name": "fetch", "network": "egress"},
                              {"toolset": "mem", "name": "save", "confidential": true},
                              {"toolset": "mem", "name": "read"}],
                    "agents": [{"name": "a", "confidential": true,
                                "allowed_tools": ["fetch", "mem__save", "mem__read"]}]}"#,
                Format::Json,
            )
            .unwrap(),
        )
    }

    #[tokio::test]
    async fn r14_a_refused_call_never_reaches_the_inner_service() {
        let h = handle();
        let hits = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&hits);
        let svc = ServiceBuilder::new()
            .layer(ExposureLayer::new(h.clone()))
            .layer(ConfidentialityLayer::new(h.clone()))
            .layer(AirGapLayer::new(h))
            .service(service_fn(move |_c: ToolCall| {
                counter.fetch_add(1, Ordering::SeqCst);
                async {
                    Ok::<_, std::convert::Infallible>(
                        ToolResponse::Completed(ToolOutput::default()),
                    )
                }
            }));
        let call = |name: &str| ToolCall::new(AgentRef::profile("a"), name, json!({}));
        for (name, code) in [
            ("nope", RefusalCode::UnknownTool),
            ("mem__save", RefusalCode::Confidential),
            ("fetch", RefusalCode::AirGapped),
        ] {
            let r = svc.clone().oneshot(call(name)).await.unwrap();
            assert_eq!(r.refusal().map(|r| r.code), Some(code), "{name}");
        }
        assert_eq!(hits.load(Ordering::SeqCst), 0);
        let r = svc.oneshot(call("mem__read")).await.unwrap();
        assert!(matches!(r, ToolResponse::Completed(_)));
        assert_eq!(hits.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn readiness_is_forwarded() {
        let (mut svc, mut mock) = tower_test::mock::spawn_layer::<ToolCall, ToolResponse, _>(
            ExposureLayer::new(handle()),
        );
        mock.allow(0);
        assert!(svc.poll_ready().is_pending());
        mock.allow(1);
        assert!(svc.poll_ready().is_ready());
    }

    #[tokio::test]
    async fn r23_every_layer_decides_by_the_pinned_snapshot() {
        let h = handle();
        let mut call = ToolCall::new(AgentRef::profile("a"), "mem__read", json!({}));
        let pinned = h.pin(&mut call);
        h.store(Governance::builder().build().unwrap());
        // The call is still decided by the snapshot it was pinned to, where `mem__read` exists.
        assert!(Arc::ptr_eq(&pinned, &h.pin(&mut call)));
        let r = CheckFilterLayer::<crate::exposure::ExposureCheck>::new(h)
            .layer(service_fn(|_c: ToolCall| async {
                Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::default()))
            }))
            .oneshot(call)
            .await
            .unwrap();
        assert!(matches!(r, ToolResponse::Completed(_)));
    }
}
