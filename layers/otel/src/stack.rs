//! The span in its place in the composite: [`ToolgateLayerExt`].

use opentelemetry::trace::{Span, Tracer, TracerProvider};
use toolgate::ToolgateLayer;
use tower_layer::Stack;

use crate::layer::ToolSpanLayer;

/// Puts the `execute_tool` span outermost in a [`ToolgateLayer`] — outside audit, so it
/// sees every call — redacting with the stack's one [`Redactor`](toolgate::redact::Redactor)
/// (the configuration's `redaction` section) and reading the catalog from its handle.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
/// use serde_json::json;
/// use tower::{ServiceBuilder, ServiceExt, service_fn};
/// use toolgate::{GovernanceHandle, ToolgateLayer};
/// use toolgate::core::{AgentRef, ToolCall, ToolOutput, ToolResponse};
/// use toolgate::engine::config::{load_str, Format};
/// use toolgate_otel::{ToolSpanLayer, ToolgateLayerExt};
///
/// let exporter = InMemorySpanExporter::default();
/// let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
/// let handle = GovernanceHandle::new(load_str(r#"{"redaction": {"keys": ["ssn"]},
///     "tools": [{"kind": "http", "name": "lookup"}],
///     "agents": [{"name": "dev", "allowed_tools": ["lookup"]}]}"#, Format::Json).unwrap());
/// let governed = ToolgateLayer::builder(handle).build().unwrap()
///     .spans(ToolSpanLayer::new(&provider).with_content(true));
/// let stack = ServiceBuilder::new().layer(governed).service(service_fn(|_c: ToolCall| async {
///     Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::new(json!("ok"))))
/// }));
/// stack.oneshot(ToolCall::new(AgentRef::profile("dev"), "lookup", json!({"ssn": "078-05-1120"}))).await.unwrap();
/// let spans = exporter.get_finished_spans().unwrap();
/// assert_eq!(spans.len(), 1);
/// assert!(!format!("{:?}", spans[0].attributes).contains("078-05-1120"));
/// # }
/// ```
pub trait ToolgateLayerExt<L, O>: Sized {
    /// Adds `spans` outermost, with the stack's redactor and handle (replacing any set on
    /// it). Content capture stays as set on `spans` (off unless
    /// [`ToolSpanLayer::with_content`]).
    fn spans(self, spans: ToolSpanLayer) -> ToolgateLayer<L, Stack<O, ToolSpanLayer>>;

    /// Adds spans from a tracer of `provider`, content capture off.
    fn tracer_provider<P>(self, provider: &P) -> ToolgateLayer<L, Stack<O, ToolSpanLayer>>
    where
        P: TracerProvider,
        P::Tracer: Send + Sync + 'static,
        <P::Tracer as Tracer>::Span: Span + Send + Sync + 'static,
    {
        self.spans(ToolSpanLayer::new(provider))
    }
}

impl<L, O> ToolgateLayerExt<L, O> for ToolgateLayer<L, O> {
    fn spans(self, spans: ToolSpanLayer) -> ToolgateLayer<L, Stack<O, ToolSpanLayer>> {
        let spans = spans
            .with_redactor(self.redactor().clone())
            .with_governance(self.handle().clone());
        self.wrap_outside(spans)
    }
}
