//! Metrics in the Prometheus text format (serve.md, "Operations: health, readiness,
//! metrics, the stored policy, replicas"), through the OpenTelemetry Prometheus exporter:
//! what `toolgate mcp serve --http` and `toolgate serve` answer on `/metrics`.
//!
//! [`PrometheusMetrics`] owns a meter provider whose reader is the exporter, and hands out
//! what records on it:
//!
//! | Prometheus name | from | labels |
//! | --- | --- | --- |
//! | `toolgate_decisions_total` | [`PrometheusMetrics::decisions`] (the decisions counter, [`DECISIONS_METRIC`](crate::DECISIONS_METRIC)) | `toolgate_decision_outcome`, `toolgate_decision_check`, `toolgate_refusal_code`, `toolgate_call_outcome` |
//! | `toolgate_approval_wait_seconds` | [`PrometheusMetrics::approvals`] ([`APPROVAL_WAIT_METRIC`](crate::APPROVAL_WAIT_METRIC)) | `toolgate_approval_channel`, `toolgate_approval_outcome` |
//! | `toolgate_approval_waiting` | the same ([`APPROVALS_WAITING_METRIC`](crate::APPROVALS_WAITING_METRIC)) | `toolgate_approval_channel` |
//! | `toolgate_upstream_duration_seconds` | [`PrometheusMetrics::upstream_call`] ([`UPSTREAM_DURATION_METRIC`]) | `toolgate_upstream_server`, `toolgate_upstream_outcome` |
//! | `toolgate_inbox_pending` | [`PrometheusMetrics::set_held_pending`] ([`INBOX_PENDING_METRIC`]) | — |
//!
//! Labels are low-cardinality only: never a tool, an agent, an input or a reason (a server
//! id is the operator's own configuration).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use serde_json::json;
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//! use toolgate::{GovernanceHandle, ToolgateLayer};
//! use toolgate::core::{AgentRef, ToolCall, ToolOutput, ToolResponse};
//! use toolgate::engine::config::{load_str, Format};
//! use toolgate_otel::{PrometheusMetrics, ToolgateLayerExt};
//!
//! let metrics = PrometheusMetrics::new().unwrap();
//! let handle = GovernanceHandle::new(load_str(r#"{
//!     "tools": [{"kind": "http", "name": "lookup"}],
//!     "agents": [{"name": "dev", "allowed_tools": ["lookup"]}]}"#, Format::Json).unwrap());
//! let governed = ToolgateLayer::builder(handle)
//!     .wait_observer(metrics.approvals())
//!     .build()
//!     .unwrap()
//!     .spans(metrics.decisions());
//! let stack = ServiceBuilder::new().layer(governed).service(service_fn(|_c: ToolCall| async {
//!     Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::new(json!("ok"))))
//! }));
//! let dev = AgentRef::profile("dev");
//! stack.clone().oneshot(ToolCall::new(dev.clone(), "lookup", json!({}))).await.unwrap();
//! stack.oneshot(ToolCall::new(dev, "nothing", json!({}))).await.unwrap();
//! metrics.upstream_call("drift", 0.012, "completed");
//! metrics.set_held_pending(3);
//!
//! let text = metrics.render().unwrap();
//! assert!(text.contains(r#"toolgate_decision_outcome="run""#), "{text}");
//! assert!(text.contains(r#"toolgate_refusal_code="unknown_tool""#), "{text}");
//! assert!(text.contains("toolgate_upstream_duration_seconds_count"), "{text}");
//! assert!(text.contains("toolgate_inbox_pending"), "{text}");
//! # }
//! ```

use std::fmt;

use opentelemetry::metrics::{Gauge, Histogram, MeterProvider};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::metrics::SdkMeterProvider;

use crate::{ApprovalMetrics, ToolSpanLayer};

/// The name of the upstream-call histogram: seconds an upstream (MCP) server took to
/// answer a call the stack let through, by `toolgate.upstream.server` and
/// `toolgate.upstream.outcome` (`completed`, `failed`, `timeout`, `error`).
pub const UPSTREAM_DURATION_METRIC: &str = "toolgate.upstream.duration";

/// The name of the gauge of held calls waiting for a person's answer in the inbox (state
/// `pending`), as last looked at.
pub const INBOX_PENDING_METRIC: &str = "toolgate.inbox.pending";

/// The media type of the Prometheus text exposition format (version 0.0.4).
pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Bucket bounds of the duration histograms, in seconds: from a millisecond to five minutes.
const BOUNDS: [f64; 16] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

/// Bucket bounds of the approval-wait histogram, in seconds: from a second to a day.
const WAIT_BOUNDS: [f64; 13] = [
    1.0, 5.0, 15.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0, 43200.0, 86400.0,
];

/// A meter provider exporting to a Prometheus registry, and the instruments toolgate's
/// servers record on it (see the module). Cheap to clone.
#[derive(Clone)]
pub struct PrometheusMetrics {
    registry: prometheus::Registry,
    provider: SdkMeterProvider,
    upstream: Histogram<f64>,
    pending: Gauge<u64>,
}

impl fmt::Debug for PrometheusMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PrometheusMetrics").finish_non_exhaustive()
    }
}

/// Why [`PrometheusMetrics`] could not be made or could not render.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PrometheusError {
    /// The exporter could not be registered ([`PrometheusMetrics::new`]).
    #[error("the Prometheus exporter cannot be made: {0}")]
    Exporter(Box<dyn std::error::Error + Send + Sync>),
    /// The registry's families could not be encoded ([`PrometheusMetrics::render`]).
    #[error("the metrics cannot be encoded: {0}")]
    Encode(Box<dyn std::error::Error + Send + Sync>),
    /// The encoded text is not UTF-8 ([`PrometheusMetrics::render`]).
    #[error("the metrics are not UTF-8: {0}")]
    NotUtf8(std::string::FromUtf8Error),
}

impl PrometheusMetrics {
    /// A new registry, exporter and meter provider.
    ///
    /// # Errors
    ///
    /// The exporter could not be registered (it never fails on a new registry).
    pub fn new() -> Result<Self, PrometheusError> {
        let registry = prometheus::Registry::new();
        let exporter = opentelemetry_prometheus::exporter()
            .with_registry(registry.clone())
            .without_target_info()
            .scope_info_enabled(false)
            .build()
            .map_err(|e| PrometheusError::Exporter(Box::new(e)))?;
        // A person's answer takes seconds to hours: the wait histogram gets buckets for that.
        let waits = |i: &opentelemetry_sdk::metrics::Instrument| {
            (i.name() == crate::APPROVAL_WAIT_METRIC).then(|| {
                opentelemetry_sdk::metrics::Stream::builder()
                    .with_aggregation(
                        opentelemetry_sdk::metrics::Aggregation::ExplicitBucketHistogram {
                            boundaries: WAIT_BOUNDS.to_vec(),
                            record_min_max: true,
                        },
                    )
                    .build()
                    .ok()
            })?
        };
        let provider = SdkMeterProvider::builder()
            .with_reader(exporter)
            .with_view(waits)
            .build();
        let meter = provider.meter_with_scope(
            InstrumentationScope::builder(crate::metrics::SCOPE_NAME)
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
        );
        let upstream = meter
            .f64_histogram(UPSTREAM_DURATION_METRIC)
            .with_unit("s")
            .with_description("Time upstream servers took to answer the calls sent to them")
            .with_boundaries(BOUNDS.to_vec())
            .build();
        let pending = meter
            .u64_gauge(INBOX_PENDING_METRIC)
            .with_unit("{call}")
            .with_description("Held calls waiting for a person's answer in the inbox")
            .build();
        Ok(Self {
            registry,
            provider,
            upstream,
            pending,
        })
    }

    /// The meter provider, for instruments of your own.
    pub fn provider(&self) -> &SdkMeterProvider {
        &self.provider
    }

    /// The approval-wait instruments, for
    /// [`ToolgateBuilder::wait_observer`](toolgate::ToolgateBuilder::wait_observer).
    pub fn approvals(&self) -> ApprovalMetrics {
        ApprovalMetrics::new(&self.provider)
    }

    /// A [`ToolSpanLayer`] counting every call's decision on this provider, its spans going
    /// nowhere (a no-op tracer): put it outermost, as
    /// [`ToolgateLayerExt::spans`](crate::ToolgateLayerExt::spans) does.
    pub fn decisions(&self) -> ToolSpanLayer {
        ToolSpanLayer::new(&opentelemetry::trace::noop::NoopTracerProvider::new())
            .with_metrics(&self.provider)
    }

    /// Records one call an upstream server answered (or did not) after `seconds`.
    pub fn upstream_call(&self, server: &str, seconds: f64, outcome: &str) {
        self.upstream.record(
            seconds,
            &[
                KeyValue::new("toolgate.upstream.server", server.to_owned()),
                KeyValue::new("toolgate.upstream.outcome", outcome.to_owned()),
            ],
        );
    }

    /// Sets the number of held calls pending in the inbox.
    pub fn set_held_pending(&self, n: u64) {
        self.pending.record(n, &[]);
    }

    /// Everything recorded, in the Prometheus text format ([`PROMETHEUS_TEXT`]).
    ///
    /// # Errors
    ///
    /// The registry's families could not be encoded.
    pub fn render(&self) -> Result<String, PrometheusError> {
        use prometheus::Encoder as _;
        let mut out = Vec::new();
        prometheus::TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .map_err(|e| PrometheusError::Encode(Box::new(e)))?;
        String::from_utf8(out).map_err(PrometheusError::NotUtf8)
    }
}
