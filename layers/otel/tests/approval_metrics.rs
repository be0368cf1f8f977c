//! Approval-wait metrics (R34), read back through the SDK's in-memory exporter: the wait
//! histogram by how each wait ended, and the up-down counter of calls waiting now.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use serde_json::json;
use tokio::sync::{Notify, mpsc};
use toolgate::approval::{ApprovalChannel, ApprovalOutcome, ApprovalRequest, BoxFuture};
use toolgate::core::{AgentRef, ChannelKind, ToolCall, ToolOutput, ToolResponse};
use toolgate::engine::config::{Format, load_str};
use toolgate::{GovernanceHandle, ToolgateLayer};
use toolgate_otel::{APPROVAL_WAIT_METRIC, APPROVALS_WAITING_METRIC, ApprovalMetrics};
use tower::{ServiceBuilder, ServiceExt, service_fn};

/// Answers by the input's `"answer"`: `approve`, `deny`, `cancel`, `refuse`, or never
/// (`wait`, after telling the test it is waiting).
#[derive(Debug)]
struct Scripted {
    waiting: mpsc::UnboundedSender<()>,
    never: Arc<Notify>,
}

impl ApprovalChannel for Scripted {
    fn kind(&self) -> ChannelKind {
        ChannelKind::Interactive
    }

    fn request(&self, request: ApprovalRequest) -> BoxFuture<ApprovalOutcome> {
        let answer = request.input["answer"].as_str().unwrap_or("").to_owned();
        let waiting = self.waiting.clone();
        let never = Arc::clone(&self.never);
        Box::pin(async move {
            match answer.as_str() {
                "approve" => ApprovalOutcome::Approved {
                    approver: "alice".into(),
                },
                "deny" => ApprovalOutcome::Denied {
                    approver: "alice".into(),
                    reason: None,
                },
                "cancel" => ApprovalOutcome::Cancelled,
                "refuse" => ApprovalOutcome::Refused {
                    reason: "the channel is down".into(),
                },
                _ => {
                    let _ = waiting.send(());
                    never.notified().await;
                    ApprovalOutcome::Cancelled
                }
            }
        })
    }
}

/// Every data point of `name` in the last export: attributes → (count, sum) for the
/// histogram, attributes → value for the up-down counter (as count, 0.0).
fn points(exporter: &InMemoryMetricExporter, name: &str) -> BTreeMap<String, (u64, f64)> {
    let exported = exporter.get_finished_metrics().unwrap();
    let mut out = BTreeMap::new();
    let Some(last) = exported.last() else {
        return out;
    };
    let key = |attrs: &mut dyn Iterator<Item = &KeyValue>| {
        let mut labels: Vec<String> = attrs.map(|kv| format!("{}={}", kv.key, kv.value)).collect();
        labels.sort();
        labels.join(",")
    };
    for sm in last.scope_metrics() {
        for m in sm.metrics().filter(|m| m.name() == name) {
            match m.data() {
                AggregatedMetrics::F64(MetricData::Histogram(h)) => {
                    for dp in h.data_points() {
                        out.insert(key(&mut dp.attributes()), (dp.count(), dp.sum()));
                    }
                }
                AggregatedMetrics::I64(MetricData::Sum(sum)) => {
                    for dp in sum.data_points() {
                        let v = u64::try_from(dp.value()).expect("never below zero");
                        out.insert(key(&mut dp.attributes()), (v, 0.0));
                    }
                }
                other => panic!("unexpected data for {name}: {other:?}"),
            }
        }
    }
    out
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn r34_approval_waits_are_measured_by_how_they_ended_and_counted_while_waiting() {
    let exporter = InMemoryMetricExporter::default();
    let meters = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(exporter.clone()).build())
        .build();
    let handle = GovernanceHandle::new(
        load_str(
            r#"{"approval": {"channel": "interactive"},
                "tools": [{"kind": "http", "name": "refund", "approval": "require_approval"}],
                "agents": [{"name": "dev", "allowed_tools": ["refund"]},
                           {"name": "hasty", "allowed_tools": ["refund"],
                            "approval": {"timeout_secs": 30}}]}"#,
            Format::Json,
        )
        .unwrap(),
    );
    let (waiting_tx, mut waiting_rx) = mpsc::unbounded_channel();
    let channel = Scripted {
        waiting: waiting_tx,
        never: Arc::new(Notify::new()),
    };
    let stack = ServiceBuilder::new()
        .layer(
            ToolgateLayer::builder(handle)
                .channel(channel)
                .wait_observer(ApprovalMetrics::new(&meters))
                .build()
                .unwrap(),
        )
        .service(service_fn(|_c: ToolCall| async {
            Ok::<_, Infallible>(ToolResponse::Completed(ToolOutput::new(json!("ok"))))
        }));
    let call = |agent: &str, answer: &str| {
        ToolCall::new(
            AgentRef::profile(agent),
            "refund",
            json!({"answer": answer}),
        )
    };

    for answer in ["approve", "approve", "deny", "cancel", "refuse"] {
        stack.clone().oneshot(call("dev", answer)).await.unwrap();
    }
    // `hasty` waits at most its 30 s: expired (paused time: the runtime skips ahead).
    let r = stack.clone().oneshot(call("hasty", "wait")).await.unwrap();
    assert!(r.refusal().is_some(), "{r:?}");
    assert!(waiting_rx.recv().await.is_some());

    // A call waiting now is counted while it waits …
    let pending = tokio::spawn(stack.clone().oneshot(call("dev", "wait")));
    assert!(
        waiting_rx.recv().await.is_some(),
        "the call reached the channel"
    );
    meters.force_flush().unwrap();
    let waiting = points(&exporter, APPROVALS_WAITING_METRIC);
    assert_eq!(
        waiting.get("toolgate.approval.channel=interactive"),
        Some(&(1, 0.0)),
        "{waiting:?}"
    );
    // … and, when its future is dropped mid-wait, ends `cancelled` and is no longer counted.
    pending.abort();
    assert!(pending.await.unwrap_err().is_cancelled());
    meters.force_flush().unwrap();
    let waiting = points(&exporter, APPROVALS_WAITING_METRIC);
    assert_eq!(
        waiting.get("toolgate.approval.channel=interactive"),
        Some(&(0, 0.0)),
        "{waiting:?}"
    );

    let waits = points(&exporter, APPROVAL_WAIT_METRIC);
    let count = |outcome: &str| {
        waits
            .get(&format!(
                "toolgate.approval.channel=interactive,toolgate.approval.outcome={outcome}"
            ))
            .map(|&(n, _)| n)
    };
    assert_eq!(count("approved"), Some(2), "{waits:?}");
    assert_eq!(count("denied"), Some(1), "{waits:?}");
    // One cancelled by the channel, one dropped mid-wait.
    assert_eq!(count("cancelled"), Some(2), "{waits:?}");
    assert_eq!(count("channel_refused"), Some(1), "{waits:?}");
    assert_eq!(count("expired"), Some(1), "{waits:?}");
    let expired = waits
        .get("toolgate.approval.channel=interactive,toolgate.approval.outcome=expired")
        .unwrap();
    assert!(
        expired.1 >= Duration::from_secs(30).as_secs_f64(),
        "the expired wait lasted the agent's 30 s: {expired:?}"
    );
    assert_eq!(waits.len(), 5, "{waits:?}");
}
