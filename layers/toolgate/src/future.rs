//! One response future for a layer that either forwards a call or answers it itself —
//! the inner future, or a response (a refusal) that costs no allocation — and the one
//! answer for a future polled after it completed ([`OnceResponse`]). Public so that other
//! crates' layers (`toolgate_mcp`'s schema validation, …) reuse them instead of copying.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use toolgate_core::ToolResponse;

pin_project! {
    /// Response future of a layer that forwards a call or answers it itself:
    /// [`CheckFilter`](crate::CheckFilter), [`RequirePermit`](crate::RequirePermit),
    /// `toolgate_mcp::SchemaValidation`.
    #[derive(Debug)]
    pub struct ResponseFuture<F> {
        #[pin]
        kind: Kind<F>,
    }
}

pin_project! {
    #[project = KindProj]
    #[derive(Debug)]
    enum Kind<F> {
        Inner { #[pin] future: F },
        Refused { response: OnceResponse },
    }
}

impl<F> ResponseFuture<F> {
    /// Forwards: the inner service's future.
    pub fn inner(future: F) -> Self {
        Self {
            kind: Kind::Inner { future },
        }
    }

    /// Answers with `response` (a refusal) without calling the inner service.
    pub fn refused(response: ToolResponse) -> Self {
        Self {
            kind: Kind::Refused {
                response: OnceResponse::new(response),
            },
        }
    }
}

/// A response given once: a second [`take`](OnceResponse::take) — a future polled after it
/// completed — answers with a refusal instead of panicking. The one place that fallback is
/// written.
#[derive(Debug)]
pub struct OnceResponse(Option<ToolResponse>);

impl OnceResponse {
    /// Holds `response` until taken.
    pub fn new(response: ToolResponse) -> Self {
        Self(Some(response))
    }

    /// The response; after the first take, a `rejected` refusal saying the future was polled
    /// after it completed.
    pub fn take(&mut self) -> ToolResponse {
        self.0.take().unwrap_or_else(|| {
            ToolResponse::Refused(toolgate_core::Refusal::new(
                toolgate_core::RefusalCode::Rejected,
                toolgate_core::Check::Routing,
                "the response future was polled after it completed",
            ))
        })
    }
}

impl<F, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<ToolResponse, E>>,
{
    type Output = Result<ToolResponse, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Inner { future } => future.poll(cx),
            KindProj::Refused { response } => Poll::Ready(Ok(response.take())),
        }
    }
}

/// The inner-service accessors every toolgate service has (`get_ref`, `get_mut`,
/// `into_inner`), written once: `inner_service_accessors!(inner: S);` inside `impl<S> X<S>`.
#[doc(hidden)]
#[macro_export]
macro_rules! inner_service_accessors {
    ($field:ident : $S:ty) => {
        /// The inner service.
        pub fn get_ref(&self) -> &$S {
            &self.$field
        }

        /// The inner service, mutably.
        pub fn get_mut(&mut self) -> &mut $S {
            &mut self.$field
        }

        /// Consumes the service, returning the inner service.
        pub fn into_inner(self) -> $S {
            self.$field
        }
    };
}
