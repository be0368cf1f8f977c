//! R46: a shadow policy's disagreements, read back where an operator looks for them — the
//! audit file, the span (the SDK's in-memory span exporter) and the disagreements counter
//! (the in-memory metric exporter) — from the composite stack built from one configuration
//! file with `policy_shadow`, as the README shows.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::collections::BTreeMap;
use std::io;

use opentelemetry::KeyValue;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde_json::{Value, json};
use toolgate::ToolgateLayer;
use toolgate::approval::{ApprovalOutcome, FnChannel};
use toolgate::core::{AgentRef, ChannelKind, ToolCall, ToolOutput, ToolResponse};
use toolgate_otel::attributes as attr;
use toolgate_otel::{SHADOW_DISAGREEMENTS_METRIC, ToolSpanLayer, ToolgateLayerExt};
use tower::{ServiceBuilder, ServiceExt, service_fn};

async fn tool(_call: ToolCall) -> Result<ToolResponse, io::Error> {
    Ok(ToolResponse::Completed(ToolOutput::new(json!("done"))))
}

fn attribute<'a>(span: &'a SpanData, key: &str) -> Option<&'a opentelemetry::Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

/// attributes → value of every data point of the disagreements counter in the last export.
fn disagreements(exporter: &InMemoryMetricExporter) -> BTreeMap<String, u64> {
    let exported = exporter.get_finished_metrics().unwrap();
    let mut out = BTreeMap::new();
    let Some(last) = exported.last() else {
        return out;
    };
    for sm in last.scope_metrics() {
        for m in sm
            .metrics()
            .filter(|m| m.name() == SHADOW_DISAGREEMENTS_METRIC)
        {
            let AggregatedMetrics::U64(MetricData::Sum(sum)) = m.data() else {
                panic!("a u64 sum")
            };
            for dp in sum.data_points() {
                let mut labels: Vec<&KeyValue> = dp.attributes().collect();
                labels.sort_by(|a, b| a.key.as_str().cmp(b.key.as_str()));
                let key = labels
                    .iter()
                    .map(|kv| format!("{}={}", kv.key, kv.value))
                    .collect::<Vec<_>>()
                    .join(",");
                out.insert(key, dp.value());
            }
        }
    }
    out
}

#[tokio::test]
async fn r46_disagreements_are_in_the_audit_record_on_the_span_and_counted_by_kind() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let config = dir.path().join("toolgate.json");
    std::fs::write(
        &config,
        json!({
            "approval": {"channel": "interactive"},
            "audit": {"file": audit},
            "tools": [{"kind": "http", "name": "lookup"},
                      {"kind": "http", "name": "refund", "approval": "require_approval"},
                      {"kind": "http", "name": "delete"}],
            "agents": [{"name": "support", "allowed_tools": ["lookup", "refund", "delete"]}],
            "policy": {"rules": [{"effect": "deny", "tool": "delete", "reason": "never delete"}]},
            "policy_shadow": {"rules": [
                {"effect": "deny", "tool": "lookup", "when": {"id": {"gt": 100}}, "reason": "only low ids"},
                {"effect": "allow", "tool": "delete"}
            ]}
        })
        .to_string(),
    )
    .unwrap();
    let spans = InMemorySpanExporter::default();
    let tracer_provider = SdkTracerProvider::builder()
        .with_simple_exporter(spans.clone())
        .build();
    let metrics = InMemoryMetricExporter::default();
    let meter_provider = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(metrics.clone()).build())
        .build();
    let channel = FnChannel::new(ChannelKind::Interactive, |_req| ApprovalOutcome::Approved {
        approver: "alice".into(),
    });
    let stack = ServiceBuilder::new()
        .layer(
            ToolgateLayer::from_path(&config)
                .unwrap()
                .channel(channel)
                .build()
                .unwrap()
                .spans(ToolSpanLayer::new(&tracer_provider).with_metrics(&meter_provider)),
        )
        .service(service_fn(tool));

    let support = AgentRef::profile("support");
    let mut responses = Vec::new();
    for (name, input) in [
        ("lookup", json!({"id": 7})),   // both run
        ("lookup", json!({"id": 700})), // run, the shadow refuses
        ("lookup", json!({"id": 701})), // run, the shadow refuses
        ("refund", json!({})),          // asked (and approved) under both
        ("delete", json!({})),          // refused, the shadow runs
    ] {
        responses.push(
            stack
                .clone()
                .oneshot(ToolCall::new(support.clone(), name, input))
                .await
                .unwrap(),
        );
    }
    // Never enforced: what the enforced policy says happens.
    assert!(matches!(responses[1], ToolResponse::Completed(_)));
    assert!(matches!(responses[2], ToolResponse::Completed(_)));
    assert!(matches!(responses[3], ToolResponse::Completed(_)));
    assert!(responses[4].refusal().is_some());

    // The audit records.
    let records: Vec<Value> = std::fs::read_to_string(&audit)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 5);
    let shadow = |i: usize| &records[i]["shadow"];
    assert_eq!(shadow(0)["outcome"], "run");
    assert_eq!(shadow(0)["disagrees"], false);
    assert_eq!(shadow(1)["outcome"], "refused");
    assert_eq!(shadow(1)["refusal"], "denied");
    assert_eq!(shadow(1)["rule"], 0);
    assert_eq!(shadow(1)["reasons"], json!(["only low ids"]));
    assert_eq!(shadow(1)["disagrees"], true);
    assert_eq!(records[1]["decision"]["outcome"], "run");
    assert_eq!(records[1]["outcome"], "completed");
    assert_eq!(shadow(3)["outcome"], "ask");
    assert_eq!(shadow(3)["disagrees"], false);
    assert_eq!(shadow(4)["outcome"], "run");
    assert_eq!(shadow(4)["rule"], 1);
    assert_eq!(shadow(4)["disagrees"], true);
    assert_eq!(records[4]["decision"]["refusal"], "denied");

    // The spans.
    let finished = spans.get_finished_spans().unwrap();
    assert_eq!(finished.len(), 5);
    let disagreeing: Vec<bool> = finished
        .iter()
        .map(|s| {
            attribute(s, attr::TOOLGATE_SHADOW_DISAGREES)
                .unwrap_or_else(|| panic!("no shadow on {s:?}"))
                .as_str()
                == "true"
        })
        .collect();
    assert_eq!(disagreeing, [false, true, true, false, true]);
    let refused = &finished[1];
    assert_eq!(
        attribute(refused, attr::TOOLGATE_SHADOW_OUTCOME).map(|v| v.as_str().into_owned()),
        Some("refused".into())
    );
    assert_eq!(
        attribute(refused, attr::TOOLGATE_SHADOW_REFUSAL_CODE).map(|v| v.as_str().into_owned()),
        Some("denied".into())
    );
    assert_eq!(
        attribute(refused, attr::TOOLGATE_SHADOW_RULE).map(|v| v.as_str().into_owned()),
        Some("0".into())
    );
    assert_eq!(
        attribute(refused, attr::TOOLGATE_DECISION_OUTCOME).map(|v| v.as_str().into_owned()),
        Some("run".into()),
        "the span's decision is the enforced one"
    );

    // The counter, by kind.
    meter_provider.force_flush().unwrap();
    let counted = disagreements(&metrics);
    assert_eq!(
        counted,
        BTreeMap::from([
            (
                "toolgate.decision.outcome=run,toolgate.shadow.kind=run->refused,toolgate.shadow.outcome=refused,toolgate.shadow.refusal.code=denied".to_owned(),
                2
            ),
            (
                "toolgate.decision.outcome=refused,toolgate.shadow.kind=refused->run,toolgate.shadow.outcome=run".to_owned(),
                1
            ),
        ]),
        "{counted:?}"
    );
}

#[tokio::test]
async fn r46_without_a_shadow_nothing_of_it_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let config = dir.path().join("toolgate.json");
    std::fs::write(
        &config,
        json!({"audit": {"file": audit}, "tools": [{"kind": "http", "name": "lookup"}],
               "agents": [{"name": "support", "allowed_tools": ["lookup"]}]})
        .to_string(),
    )
    .unwrap();
    let spans = InMemorySpanExporter::default();
    let tracer_provider = SdkTracerProvider::builder()
        .with_simple_exporter(spans.clone())
        .build();
    let stack = ServiceBuilder::new()
        .layer(
            ToolgateLayer::from_path(&config)
                .unwrap()
                .build()
                .unwrap()
                .spans(ToolSpanLayer::new(&tracer_provider)),
        )
        .service(service_fn(tool));
    stack
        .oneshot(ToolCall::new(
            AgentRef::profile("support"),
            "lookup",
            json!({}),
        ))
        .await
        .unwrap();
    let record = std::fs::read_to_string(&audit).unwrap();
    assert!(!record.contains("shadow"), "{record}");
    let finished = spans.get_finished_spans().unwrap();
    assert!(
        finished[0]
            .attributes
            .iter()
            .all(|kv| !kv.key.as_str().starts_with("toolgate.shadow")),
        "{finished:?}"
    );
}
