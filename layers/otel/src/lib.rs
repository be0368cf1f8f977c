//! # toolgate-otel
//!
//! OpenTelemetry spans for toolgate (R34): [`ToolSpanLayer`] records one span per tool
//! call, following the GenAI semantic conventions for tool execution — named
//! `execute_tool {gen_ai.tool.name}`, kind `INTERNAL`, `gen_ai.operation.name =
//! "execute_tool"` — with toolgate's decision on it: whether the call ran, asked or was
//! refused, the refusal code, the check or tenant rule that decided, how a wait for a person
//! ended and who answered. Arguments and results go on spans only when the operator opts in
//! ([`ToolSpanLayer::with_content`]), and then always redacted (R33).
//!
//! It uses the OpenTelemetry API ([`opentelemetry`]) only: bring any SDK and exporter.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use opentelemetry::trace::{SpanKind, Status};
//! use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
//! use serde_json::json;
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//! use toolgate::{AirGapLayer, ConfidentialityLayer, ExposureLayer, GovernanceHandle};
//! use toolgate::approval::ApprovalGateLayer;
//! use toolgate::core::{AgentRef, ToolCall, ToolOutput, ToolResponse};
//! use toolgate::engine::config::{load_str, Format};
//! use toolgate_otel::ToolSpanLayer;
//!
//! let exporter = InMemorySpanExporter::default();
//! let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
//!
//! let handle = GovernanceHandle::new(load_str(r#"{
//!     "tools": [{"toolset": "notes", "name": "read", "description": "Read a note"}],
//!     "agents": [{"name": "dev", "allowed_tools": ["notes__read"]}]
//! }"#, Format::Json).unwrap());
//!
//! // Outermost first: the span sees every call, refused or not.
//! let stack = ServiceBuilder::new()
//!     .layer(ToolSpanLayer::new(&provider).with_governance(handle.clone()))
//!     .layer(ExposureLayer::new(handle.clone()))
//!     .layer(ConfidentialityLayer::new(handle.clone()))
//!     .layer(AirGapLayer::new(handle.clone()))
//!     .layer(ApprovalGateLayer::new(handle))
//!     .service(service_fn(|_call: ToolCall| async {
//!         Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::new(json!("hi"))))
//!     }));
//!
//! let dev = AgentRef::profile("dev");
//! stack.clone().oneshot(ToolCall::new(dev.clone(), "notes__read", json!({}))).await.unwrap();
//! stack.oneshot(ToolCall::new(dev, "notes__write", json!({}))).await.unwrap();
//!
//! let spans = exporter.get_finished_spans().unwrap();
//! let attr = |i: usize, key: &str| {
//!     spans[i].attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| kv.value.to_string())
//! };
//! assert_eq!(spans[0].name, "execute_tool notes__read");
//! assert_eq!(spans[0].span_kind, SpanKind::Internal);
//! assert_eq!(attr(0, "gen_ai.operation.name").as_deref(), Some("execute_tool"));
//! assert_eq!(attr(0, "gen_ai.tool.type").as_deref(), Some("function"));
//! assert_eq!(attr(0, "gen_ai.tool.description").as_deref(), Some("Read a note"));
//! assert_eq!(attr(0, "toolgate.decision.outcome").as_deref(), Some("run"));
//! assert_eq!(attr(1, "toolgate.refusal.code").as_deref(), Some("unknown_tool"));
//! assert_eq!(attr(1, "error.type").as_deref(), Some("unknown_tool"));
//! assert!(matches!(spans[1].status, Status::Error { .. }));
//! // Content capture is off by default.
//! assert_eq!(attr(0, "gen_ai.tool.call.arguments"), None);
//! # }
//! ```
//!
//! ## Ordering
//!
//! Outermost first. The span must see every call, including those the filters refuse, so
//! it goes in front of everything — audit included; what it puts on a span it redacts
//! itself, so it does not depend on a redaction layer further in. With the composite,
//! [`ToolgateLayerExt::spans`] puts it in slot 1 with the stack's one redactor (the whole
//! order, and why: [`toolgate::guide::layers`]).
//!
//! The span is the current OpenTelemetry context while the inner layers are called and
//! polled, so spans they (or the tool) make are its children.
//!
//! ## How the decision reaches the span
//!
//! The layer puts a [`DecisionSink`](toolgate::core::DecisionSink) in the call's extensions
//! unless one is there already (then it shares it). The approval gate records its decision
//! and how any wait ended into it; the layer reads it — without taking it, so an audit
//! layer sharing the sink still finds it — when the response comes back. A call a filter
//! refused has no note: its refusal says which check refused it. When there is no note and
//! no refusal (no gate in the stack, or a layer between this one and the gate took the note
//! from the sink) the span claims no decision: it records only how the call ended.
//!
//! ## Attributes
//!
//! Every name is a constant in [`attributes`], with a table of what each means.
//!
//! ## Content and redaction
//!
//! Off by default. With [`ToolSpanLayer::with_content`], `gen_ai.tool.call.arguments` and
//! `gen_ai.tool.call.result` carry the input and the output, each passed through the
//! layer's [`Redactor`](toolgate::redact::Redactor), serialised and truncated. Reasons
//! (which can carry a person's or a hook's words) are always redacted, and the name of a
//! tool the catalog does not know is redacted and bounded before it names a span.
#![forbid(unsafe_code)]

/// Guides: the chapters of the manual about this crate, every example compiled and run as
/// a doctest.
pub mod guide {
    #[doc = include_str!("../docs/audit-and-spans.md")]
    pub mod audit_and_spans {}
}

pub mod attributes;
mod future;
mod layer;
mod metrics;
#[cfg(feature = "prometheus")]
mod prometheus;
mod record;
mod service;
mod shared;
mod stack;

pub use future::ResponseFuture;
pub use layer::{DECISIONS_METRIC, ToolSpanLayer};
pub use metrics::{
    APPROVAL_WAIT_METRIC, APPROVALS_WAITING_METRIC, ApprovalMetrics, SHADOW_DISAGREEMENTS_METRIC,
};
#[cfg(feature = "prometheus")]
pub use prometheus::{
    INBOX_PENDING_METRIC, PROMETHEUS_TEXT, PrometheusError, PrometheusMetrics,
    UPSTREAM_DURATION_METRIC,
};
pub use service::ToolSpan;
pub use stack::ToolgateLayerExt;
