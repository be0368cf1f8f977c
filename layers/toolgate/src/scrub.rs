//! Output scrubbing (R33, seed 004's `after_call`): secrets are redacted from what the
//! model receives, and long text is truncated on a UTF-8 boundary with a marker.
//!
//! Place it innermost, right outside the tool, so every layer and the model see the
//! scrubbed result.
//!
//! # Example
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use serde_json::json;
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//! use toolgate::scrub::ScrubOutputLayer;
//! use toolgate::redact::Redactor;
//! use toolgate::core::{AgentRef, ToolCall, ToolOutput, ToolResponse};
//!
//! let svc = ServiceBuilder::new()
//!     .layer(ScrubOutputLayer::new(Redactor::default()))
//!     .service(service_fn(|_c: ToolCall| async {
//!         Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::new(
//!             json!({"user": "ada", "password": "hunter2"}))))
//!     }));
//! let out = svc.oneshot(ToolCall::new(AgentRef::profile("a"), "env", json!({}))).await.unwrap();
//! let ToolResponse::Completed(out) = out else { panic!() };
//! assert_eq!(out.content["user"], "ada");
//! assert_ne!(out.content["password"], "hunter2");
//! # }
//! ```

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use serde_json::Value;
use toolgate_core::{ToolCall, ToolOutput, ToolResponse};
use tower_layer::Layer;
use tower_service::Service;

use crate::redact::Redactor;

/// Layer of [`ScrubOutput`].
#[derive(Debug, Clone)]
#[must_use]
pub struct ScrubOutputLayer {
    redactor: Redactor,
}

impl ScrubOutputLayer {
    /// Scrubs every result with `redactor`.
    pub fn new(redactor: Redactor) -> Self {
        Self { redactor }
    }
}

impl<S> Layer<S> for ScrubOutputLayer {
    type Service = ScrubOutput<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ScrubOutput {
            inner,
            redactor: self.redactor.clone(),
        }
    }
}

/// Redacts and truncates the results the model receives.
#[derive(Debug, Clone)]
pub struct ScrubOutput<S> {
    inner: S,
    redactor: Redactor,
}

impl<S> ScrubOutput<S> {
    crate::inner_service_accessors!(inner: S);
}

pin_project! {
    /// Response future of [`ScrubOutput`].
    #[derive(Debug)]
    pub struct ScrubFuture<F> {
        #[pin]
        future: F,
        redactor: Redactor,
        tool: String,
    }
}

fn scrub(redactor: &Redactor, tool: &str, out: ToolOutput) -> ToolOutput {
    let content = match redactor.redact_value(tool, &out.content) {
        Value::String(s) => Value::String(redactor.truncate(&s)),
        other => other,
    };
    ToolOutput {
        content,
        structured: out.structured.map(|v| redactor.redact_value(tool, &v)),
    }
}

impl<F, E> Future for ScrubFuture<F>
where
    F: Future<Output = Result<ToolResponse, E>>,
{
    type Output = Result<ToolResponse, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        match this.future.poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(ToolResponse::Completed(out))) => Poll::Ready(Ok(
                ToolResponse::Completed(scrub(this.redactor, this.tool, out)),
            )),
            Poll::Ready(Ok(ToolResponse::Failed(out))) => Poll::Ready(Ok(ToolResponse::Failed(
                scrub(this.redactor, this.tool, out),
            ))),
            Poll::Ready(other) => Poll::Ready(other),
        }
    }
}

impl<S> Service<ToolCall> for ScrubOutput<S>
where
    S: Service<ToolCall, Response = ToolResponse>,
{
    type Response = ToolResponse;
    type Error = S::Error;
    type Future = ScrubFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, call: ToolCall) -> Self::Future {
        let tool = call.tool.display_name();
        ScrubFuture {
            future: self.inner.call(call),
            redactor: self.redactor.clone(),
            tool,
        }
    }
}
