//! Approval-wait metrics (R34): how long calls wait for a person, by how the wait ended, and
//! how many calls are waiting now — next to the decisions counter of
//! [`ToolSpanLayer::with_metrics`](crate::ToolSpanLayer::with_metrics).
//!
//! The approval gate tells a [`WaitObserver`] when a wait starts and ends (the `toolgate`
//! crate knows nothing of OpenTelemetry); [`ApprovalMetrics`] is the observer that records
//! both on a meter:
//!
//! ```
//! use opentelemetry_sdk::metrics::SdkMeterProvider;
//! use toolgate::{GovernanceHandle, ToolgateLayer};
//! use toolgate::engine::Governance;
//! use toolgate_otel::ApprovalMetrics;
//!
//! let meters = SdkMeterProvider::builder().build();
//! let governed = ToolgateLayer::builder(GovernanceHandle::new(Governance::builder().build().unwrap()))
//!     .wait_observer(ApprovalMetrics::new(&meters))
//!     .build()
//!     .unwrap();
//! # let _ = governed;
//! ```

use opentelemetry::metrics::{Counter, Histogram, Meter, MeterProvider, UpDownCounter};
use opentelemetry::{InstrumentationScope, KeyValue};
use toolgate::approval::{WaitEnded, WaitObserver, WaitStarted};

/// The instrumentation scope's name, of the tracer and of the meter.
pub(crate) const SCOPE_NAME: &str = "toolgate-otel";

/// The name of the approval-wait histogram: seconds a call waited for a person, by
/// `toolgate.approval.channel` and `toolgate.approval.outcome`.
pub const APPROVAL_WAIT_METRIC: &str = "toolgate.approval.wait";

/// The name of the up-down counter of calls waiting for a person now, by
/// `toolgate.approval.channel`.
pub const APPROVALS_WAITING_METRIC: &str = "toolgate.approval.waiting";

/// The name of the counter of shadow-policy disagreements (R46): calls the shadow policy
/// decided otherwise than the enforced one, by `toolgate.shadow.kind` (`enforced->shadow`
/// outcomes, such as `run->refused`), `toolgate.decision.outcome` (the enforced outcome),
/// `toolgate.shadow.outcome` and, for a shadow refusal, `toolgate.shadow.refusal.code`.
/// Counted by [`ToolSpanLayer::with_metrics`](crate::ToolSpanLayer::with_metrics).
pub const SHADOW_DISAGREEMENTS_METRIC: &str = "toolgate.shadow.disagreements";

/// The disagreements counter ([`SHADOW_DISAGREEMENTS_METRIC`]) on `meter`.
pub(crate) fn shadow_disagreements(meter: &Meter) -> Counter<u64> {
    meter
        .u64_counter(SHADOW_DISAGREEMENTS_METRIC)
        .with_unit("{call}")
        .with_description(
            "Tool calls the shadow policy decided otherwise than the enforced one, by kind",
        )
        .build()
}

/// Records approval waits on a meter (instrumentation scope `toolgate-otel`): the
/// histogram [`APPROVAL_WAIT_METRIC`] (unit `s`) and the up-down counter
/// [`APPROVALS_WAITING_METRIC`] (unit `{call}`). Attributes are low-cardinality only: the
/// channel kind and how the wait ended (`approved`, `denied`, `expired`, `cancelled`,
/// `held`, `unroutable`, `channel_refused`) — never tools, agents or reasons.
#[derive(Debug, Clone)]
pub struct ApprovalMetrics {
    wait: Histogram<f64>,
    waiting: UpDownCounter<i64>,
}

impl ApprovalMetrics {
    /// Both instruments from a meter of `provider`.
    pub fn new<P: MeterProvider>(provider: &P) -> Self {
        let meter = provider.meter_with_scope(
            InstrumentationScope::builder(SCOPE_NAME)
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
        );
        Self {
            wait: meter
                .f64_histogram(APPROVAL_WAIT_METRIC)
                .with_unit("s")
                .with_description(
                    "Time tool calls waited for a person's approval, by how the wait ended",
                )
                .build(),
            waiting: meter
                .i64_up_down_counter(APPROVALS_WAITING_METRIC)
                .with_unit("{call}")
                .with_description("Tool calls waiting for a person's approval now")
                .build(),
        }
    }
}

fn channel(kind: toolgate::core::ChannelKind) -> KeyValue {
    KeyValue::new("toolgate.approval.channel", kind.as_str())
}

impl WaitObserver for ApprovalMetrics {
    fn wait_started(&self, wait: &WaitStarted) {
        self.waiting.add(1, &[channel(wait.channel)]);
    }

    fn wait_ended(&self, wait: &WaitEnded) {
        let kind = channel(wait.channel);
        self.waiting.add(-1, std::slice::from_ref(&kind));
        self.wait.record(
            wait.waited.as_secs_f64(),
            &[
                kind,
                KeyValue::new("toolgate.approval.outcome", wait.outcome.as_str()),
            ],
        );
    }
}
