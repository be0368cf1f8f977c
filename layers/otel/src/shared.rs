//! [`Shared`]: what every service one [`ToolSpanLayer`](crate::ToolSpanLayer) makes shares.
//!
//! Its own module so the crate's files import in one direction: `layer` → `service` →
//! `future` → `record` → `shared`/`attributes`, nothing pointing back.

use std::sync::Arc;

use opentelemetry::global::BoxedTracer;
use opentelemetry::metrics::Counter;
use toolgate::GovernanceHandle;
use toolgate::redact::Redactor;

/// What every [`ToolSpan`](crate::ToolSpan) made by one layer shares.
#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) tracer: Arc<BoxedTracer>,
    pub(crate) governance: Option<GovernanceHandle>,
    pub(crate) content: bool,
    pub(crate) redactor: Redactor,
    pub(crate) decisions: Option<Counter<u64>>,
    /// The shadow policy's disagreements (R46), counted with `decisions`.
    pub(crate) shadow_disagreements: Option<Counter<u64>>,
}
