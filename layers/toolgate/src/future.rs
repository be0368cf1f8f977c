//! The response future of the filter layers: the inner future, or a refusal that costs no
//! allocation.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use toolgate_core::ToolResponse;

pin_project! {
    /// Response future of [`Filter`](crate::Filter).
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
        Refused { response: Option<ToolResponse> },
    }
}

impl<F> ResponseFuture<F> {
    pub(crate) fn inner(future: F) -> Self {
        Self {
            kind: Kind::Inner { future },
        }
    }

    pub(crate) fn refused(response: ToolResponse) -> Self {
        Self {
            kind: Kind::Refused {
                response: Some(response),
            },
        }
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
            KindProj::Refused { response } => match response.take() {
                Some(r) => Poll::Ready(Ok(r)),
                // Polled after completion: answer with a refusal rather than panic.
                None => Poll::Ready(Ok(ToolResponse::Refused(toolgate_core::Refusal::new(
                    toolgate_core::RefusalCode::Rejected,
                    toolgate_core::Check::Routing,
                    "the response future was polled after it completed",
                )))),
            },
        }
    }
}
