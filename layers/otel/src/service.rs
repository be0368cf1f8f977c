//! [`ToolSpan`]: starts the span, hands the call inward under it.

use std::fmt;
use std::task::{Context, Poll};

use opentelemetry::Context as OtelContext;
use opentelemetry::trace::{SpanBuilder, SpanKind, TraceContextExt, Tracer};
use toolgate::core::{DecisionSink, ToolCall, ToolResponse};
use tower_service::Service;

use crate::future::{Finish, ResponseFuture};
use crate::record;
use crate::shared::Shared;

/// A service recording one `execute_tool` span per call. See
/// [`ToolSpanLayer`](crate::ToolSpanLayer).
///
/// It never changes the call's outcome or the inner service's error type: it only
/// observes. The span is the current OpenTelemetry context while the inner service is
/// called and polled, so spans made inside are its children.
#[derive(Clone)]
pub struct ToolSpan<S> {
    inner: S,
    shared: Shared,
}

impl<S: fmt::Debug> fmt::Debug for ToolSpan<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolSpan")
            .field("inner", &self.inner)
            .field("governance", &self.shared.governance)
            .field("content", &self.shared.content)
            .finish_non_exhaustive()
    }
}

impl<S> ToolSpan<S> {
    pub(crate) fn new(inner: S, shared: Shared) -> Self {
        Self { inner, shared }
    }

    toolgate::inner_service_accessors!(inner: S);
}

impl<S> Service<ToolCall> for ToolSpan<S>
where
    S: Service<ToolCall, Response = ToolResponse>,
{
    type Response = ToolResponse;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut call: ToolCall) -> Self::Future {
        let started = record::start(&self.shared, &call);
        // The gate records how it decided into the call's sink. One already there (an outer
        // layer's) is shared, and read without taking the note from it.
        let sink = match call.extensions.get::<DecisionSink>() {
            Some(sink) => sink.clone(),
            None => {
                let sink = DecisionSink::default();
                call.extensions.insert(sink.clone());
                sink
            }
        };
        let parent = OtelContext::current();
        let builder = SpanBuilder::from_name(started.span_name)
            .with_kind(SpanKind::Internal)
            .with_attributes(started.attributes);
        let span = self.shared.tracer.build_with_context(builder, &parent);
        let cx = parent.with_span(span);
        let future = {
            let _guard = cx.clone().attach();
            self.inner.call(call)
        };
        ResponseFuture::new(future, Finish::new(cx, sink, started.tool, &self.shared))
    }
}
