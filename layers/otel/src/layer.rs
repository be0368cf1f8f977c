//! [`ToolSpanLayer`]: the configuration, shared cheaply by every service it makes.

use std::fmt;
use std::sync::Arc;

use opentelemetry::InstrumentationScope;
use opentelemetry::global::{self, BoxedTracer};
use opentelemetry::metrics::MeterProvider;
use opentelemetry::trace::{Span, Tracer, TracerProvider};
use toolgate::GovernanceHandle;
use toolgate::redact::Redactor;
use tower_layer::Layer;

use crate::service::ToolSpan;
use crate::shared::Shared;

/// The name of the decisions counter (see [`ToolSpanLayer::with_metrics`]).
pub const DECISIONS_METRIC: &str = "toolgate.decisions";

/// Layer of [`ToolSpan`]: one OpenTelemetry `execute_tool` span per tool call, with the
/// decision recorded on it (R34).
///
/// Place it outermost, in front of every toolgate layer, so that it sees every call —
/// those a filter refuses as well as those the gate asks about and those that run.
///
/// - [`ToolSpanLayer::new`] takes a tracer provider, [`ToolSpanLayer::from_tracer`] a
///   tracer, [`ToolSpanLayer::global`] uses the global provider.
/// - [`ToolSpanLayer::with_governance`] lets spans carry the tool's type and description
///   from the catalog.
/// - [`ToolSpanLayer::with_content`] puts the redacted arguments and result on spans; it is
///   off by default, and content is never recorded unredacted.
///
/// Cheap to clone: everything large is behind an `Arc`.
#[derive(Clone)]
#[must_use]
pub struct ToolSpanLayer {
    shared: Shared,
}

impl fmt::Debug for ToolSpanLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolSpanLayer")
            .field("governance", &self.shared.governance)
            .field("content", &self.shared.content)
            .finish_non_exhaustive()
    }
}

fn scope() -> InstrumentationScope {
    InstrumentationScope::builder(crate::metrics::SCOPE_NAME)
        .with_version(env!("CARGO_PKG_VERSION"))
        .build()
}

impl ToolSpanLayer {
    /// Spans from a tracer of `provider` (instrumentation scope `toolgate-otel`), content
    /// capture off, the default [`Redactor`].
    pub fn new<P>(provider: &P) -> Self
    where
        P: TracerProvider,
        P::Tracer: Send + Sync + 'static,
        <P::Tracer as Tracer>::Span: Send + Sync + 'static,
    {
        Self::from_tracer(provider.tracer_with_scope(scope()))
    }

    /// Spans from `tracer`.
    pub fn from_tracer<T>(tracer: T) -> Self
    where
        T: Tracer + Send + Sync + 'static,
        T::Span: Span + Send + Sync + 'static,
    {
        Self::with_boxed(BoxedTracer::new(Box::new(tracer)))
    }

    /// Spans from the global tracer provider (`opentelemetry::global`), as it is when the
    /// layer is built: set the global provider first.
    pub fn global() -> Self {
        Self::with_boxed(global::tracer_with_scope(scope()))
    }

    fn with_boxed(tracer: BoxedTracer) -> Self {
        Self {
            shared: Shared {
                tracer: Arc::new(tracer),
                governance: None,
                content: false,
                redactor: Redactor::default(),
                decisions: None,
                shadow_disagreements: None,
            },
        }
    }

    /// Looks tools up in the snapshots of `handle` (the call's pinned snapshot when it has
    /// one), for `gen_ai.tool.type` and `gen_ai.tool.description`. The layer only reads: it
    /// never pins a snapshot, so it cannot change what the deciding layers decide by.
    pub fn with_governance(mut self, handle: GovernanceHandle) -> Self {
        self.shared.governance = Some(handle);
        self
    }

    /// Records the call's arguments (`gen_ai.tool.call.arguments`) and the tool's result
    /// (`gen_ai.tool.call.result`) — always redacted by the layer's [`Redactor`], then
    /// serialised and truncated. Off by default (R34).
    pub fn with_content(mut self, on: bool) -> Self {
        self.shared.content = on;
        self
    }

    /// Also counts every call's decision on the counter `toolgate.decisions` (unit
    /// `{decision}`) of a meter of `provider` (instrumentation scope `toolgate-otel`), with
    /// the low-cardinality attributes of the span: `toolgate.decision.outcome` (`run`, `ask`,
    /// `refused`), `toolgate.decision.check`, `toolgate.refusal.code` (refused calls) and
    /// `toolgate.call.outcome`. Tool names, agents and reasons are never metric attributes.
    ///
    /// With a shadow policy (R46), the calls it decided otherwise are counted too, on
    /// [`SHADOW_DISAGREEMENTS_METRIC`](crate::SHADOW_DISAGREEMENTS_METRIC) by kind.
    pub fn with_metrics<P: MeterProvider>(mut self, provider: &P) -> Self {
        let meter = provider.meter_with_scope(scope());
        self.shared.decisions = Some(
            meter
                .u64_counter(DECISIONS_METRIC)
                .with_unit("{decision}")
                .with_description(
                    "Tool calls decided by toolgate, by outcome, check and refusal code",
                )
                .build(),
        );
        self.shared.shadow_disagreements = Some(crate::metrics::shadow_disagreements(&meter));
        self
    }

    /// Redacts with `redactor` instead of the default rules. Reasons are always redacted;
    /// arguments and results too, when content capture is on.
    pub fn with_redactor(mut self, redactor: Redactor) -> Self {
        self.shared.redactor = redactor;
        self
    }
}

impl<S> Layer<S> for ToolSpanLayer {
    type Service = ToolSpan<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ToolSpan::new(inner, self.shared.clone())
    }
}
