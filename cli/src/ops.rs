//! Metrics of `toolgate mcp serve --http` and `toolgate serve` on `GET /metrics`, in the
//! Prometheus text format through `toolgate_otel::PrometheusMetrics` (the OpenTelemetry
//! Prometheus exporter): decisions by outcome and code, approval waits, upstream latency,
//! and the held calls pending in the inbox (counted for each scrape).

use std::sync::Arc;

use toolgate_inbox::{InboxStore, State};
use toolgate_otel::PrometheusMetrics;

/// The `/metrics` body: the pending held calls counted now, then everything rendered.
pub(crate) fn text(
    metrics: PrometheusMetrics,
    store: Option<Arc<dyn InboxStore>>,
) -> impl Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<String, String>> + Send>>
+ Send
+ Sync
+ 'static {
    move || {
        let metrics = metrics.clone();
        let store = store.clone();
        Box::pin(async move {
            if let Some(store) = store {
                match store.list(Some(State::Pending)).await {
                    Ok(pending) => metrics.set_held_pending(pending.len() as u64),
                    Err(e) => return Err(format!("the inbox cannot be read: {e}")),
                }
            }
            metrics.render().map_err(|e| e.to_string())
        })
    }
}

/// What `toolgate mcp serve` records: every decision (outermost, so refusals count too),
/// approval waits, each upstream call's latency, and `/metrics`.
#[cfg(feature = "mcp")]
pub(crate) fn mcp_observe(
    metrics: &PrometheusMetrics,
    store: Option<Arc<dyn InboxStore>>,
) -> toolgate_mcp::serve::Observe {
    use tower_layer::Layer as _;
    let decisions = metrics.decisions();
    let upstream = metrics.clone();
    toolgate_mcp::serve::Observe::default()
        .wrap_stack(Arc::new(move |stack| {
            toolgate_mcp::serve::GovernedStack::new(decisions.layer(stack))
        }))
        .wait_observer(Arc::new(metrics.approvals()))
        .upstream_observer(Arc::new(move |server, took, outcome| {
            upstream.upstream_call(server, took.as_secs_f64(), outcome);
        }))
        .metrics_text(Arc::new(text(metrics.clone(), store)))
}
