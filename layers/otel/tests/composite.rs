//! The composite (`toolgate::ToolgateLayer`) with its span, tried as a new user would:
//! one configuration file whose `redaction` section names `ssn` and asks for output
//! scrubbing, the quick start's few lines, and no SSN anywhere a record or the model can see
//! (R33, R34).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::io;

use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use serde_json::json;
use toolgate::ToolgateLayer;
use toolgate::approval::{ApprovalOutcome, FnChannel};
use toolgate::core::{AgentRef, ChannelKind, RefusalCode, ToolCall, ToolOutput, ToolResponse};
use toolgate_otel::attributes as attr;
use toolgate_otel::{ToolSpanLayer, ToolgateLayerExt};
use tower::{ServiceBuilder, ServiceExt, service_fn};

const SSN: &str = "078-05-1120";

/// The tool: answers with the customer record, SSN included, whatever it is asked.
async fn crm(call: ToolCall) -> Result<ToolResponse, io::Error> {
    Ok(ToolResponse::Completed(ToolOutput {
        content: json!({"customer": {"name": "Ada", "ssn": SSN}, "asked": call.input}),
        structured: Some(json!({"ssn": SSN})),
    }))
}

#[tokio::test]
async fn r33_r34_the_composite_keeps_the_ssn_out_of_audit_spans_and_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let config = dir.path().join("toolgate.json");
    std::fs::write(
        &config,
        json!({
            "approval": {"channel": "interactive"},
            "audit": {"file": audit, "include_input": true, "include_output": true},
            "redaction": {"keys": ["ssn"], "scrub_output": true},
            "tools": [{"toolset": "crm", "name": "lookup", "read_only": true},
                      {"toolset": "crm", "name": "update", "approval": "require_approval"}],
            "agents": [{"name": "support", "allowed_tools": ["crm__lookup", "crm__update"]}]
        })
        .to_string(),
    )
    .unwrap();
    let exporter = InMemorySpanExporter::default();
    let tracer_provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let channel = FnChannel::new(ChannelKind::Interactive, |_req| ApprovalOutcome::Approved {
        approver: "alice".into(),
    });

    // The quick start (layers/toolgate/docs/quick-start.md), with a scripted person for the channel.
    let governed = ToolgateLayer::from_path(&config)
        .unwrap()
        .channel(channel)
        .build()
        .unwrap()
        .spans(ToolSpanLayer::new(&tracer_provider).with_content(true));
    let stack = ServiceBuilder::new()
        .layer(governed)
        .service(service_fn(crm));

    let support = AgentRef::profile("support");
    let mut model_saw = Vec::new();
    for (tool, input) in [
        ("crm__lookup", json!({"ssn": SSN})),
        ("crm__update", json!({"customer": {"ssn": SSN}})),
        ("crm__delete", json!({"ssn": SSN})),
    ] {
        let r = stack
            .clone()
            .oneshot(ToolCall::new(support.clone(), tool, input))
            .await
            .unwrap();
        model_saw.push(r);
    }
    assert!(matches!(model_saw[0], ToolResponse::Completed(_)));
    assert!(
        matches!(model_saw[1], ToolResponse::Completed(_)),
        "asked, approved, ran"
    );
    assert_eq!(
        model_saw[2].refusal().map(|r| r.code),
        Some(RefusalCode::UnknownTool)
    );
    let ToolResponse::Completed(out) = &model_saw[0] else {
        unreachable!()
    };
    assert_eq!(
        out.content["customer"]["name"], "Ada",
        "scrubbed, not erased"
    );
    for r in &model_saw {
        assert!(
            !format!("{r:?}").contains(SSN),
            "the model saw the SSN: {r:?}"
        );
    }

    let records = std::fs::read_to_string(&audit).unwrap();
    assert_eq!(records.lines().count(), 3, "{records}");
    assert!(records.contains(r#""input""#) && records.contains(r#""output""#));
    assert!(records.contains(r#""approver":"alice""#), "{records}");
    assert!(!records.contains(SSN), "{records}");

    let spans = exporter.get_finished_spans().unwrap();
    assert_eq!(spans.len(), 3);
    for span in &spans {
        let args = span
            .attributes
            .iter()
            .find(|kv| kv.key.as_str() == attr::GEN_AI_TOOL_CALL_ARGUMENTS);
        assert!(args.is_some(), "content capture is on: {span:?}");
        for kv in &span.attributes {
            assert!(
                !kv.value.to_string().contains(SSN),
                "`{}` on {} carries the SSN",
                kv.key,
                span.name
            );
        }
    }
    let result = spans[0]
        .attributes
        .iter()
        .find(|kv| kv.key.as_str() == attr::GEN_AI_TOOL_CALL_RESULT)
        .map(|kv| kv.value.to_string())
        .unwrap();
    assert!(result.contains("Ada"), "{result}");
}

#[test]
fn r26_the_composite_with_spans_still_fails_at_build_time_without_its_channel() {
    let handle = toolgate::GovernanceHandle::new(
        toolgate::engine::config::load_str(
            r#"{"approval": {"channel": "inbox"}}"#,
            toolgate::engine::config::Format::Json,
        )
        .unwrap(),
    );
    let e = ToolgateLayer::builder(handle).build().unwrap_err();
    assert_eq!(e.errors[0].path, "approval.channel");
}

/// The decisions counter: one count per call, by outcome, check, refusal code and how the
/// call ended — and never a tool name, an agent or a reason.
#[tokio::test]
async fn r34_every_decision_is_counted_by_outcome_check_and_code() {
    use opentelemetry::KeyValue;
    use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
    use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
    use std::collections::BTreeMap;

    let metrics = InMemoryMetricExporter::default();
    let meter_provider = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(metrics.clone()).build())
        .build();
    let tracer_provider = SdkTracerProvider::builder().build();
    let handle = toolgate::GovernanceHandle::new(
        toolgate::engine::config::load_str(
            r#"{"approval": {"channel": "interactive"}, "air_gapped": true,
                "tools": [{"kind": "http", "name": "lookup"},
                          {"kind": "http", "name": "refund", "approval": "require_approval"},
                          {"kind": "http", "name": "fetch", "network": "egress"}],
                "agents": [{"name": "dev", "allowed_tools": ["lookup", "refund", "fetch"]}]}"#,
            toolgate::engine::config::Format::Json,
        )
        .unwrap(),
    );
    let channel = FnChannel::new(ChannelKind::Interactive, |_req| ApprovalOutcome::Approved {
        approver: "alice".into(),
    });
    let stack = ServiceBuilder::new()
        .layer(
            ToolgateLayer::builder(handle)
                .channel(channel)
                .build()
                .unwrap()
                .spans(ToolSpanLayer::new(&tracer_provider).with_metrics(&meter_provider)),
        )
        .service(service_fn(crm));
    for tool in ["lookup", "lookup", "refund", "fetch", "nope"] {
        stack
            .clone()
            .oneshot(ToolCall::new(AgentRef::profile("dev"), tool, json!({})))
            .await
            .unwrap();
    }
    meter_provider.force_flush().unwrap();

    let exported = metrics.get_finished_metrics().unwrap();
    let last = exported.last().expect("exported");
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for sm in last.scope_metrics() {
        for m in sm.metrics() {
            if m.name() != toolgate_otel::DECISIONS_METRIC {
                continue;
            }
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
                assert!(
                    labels
                        .iter()
                        .all(|kv| kv.key.as_str().starts_with("toolgate.")),
                    "{key}"
                );
                *counts.entry(key).or_default() += dp.value();
            }
        }
    }
    let get = |outcome: &str, check: &str, code: Option<&str>, call: &str| {
        let mut key = vec![format!("toolgate.call.outcome={call}")];
        key.push(format!("toolgate.decision.check={check}"));
        key.push(format!("toolgate.decision.outcome={outcome}"));
        if let Some(c) = code {
            key.push(format!("toolgate.refusal.code={c}"));
        }
        counts.get(&key.join(",")).copied().unwrap_or(0)
    };
    assert_eq!(
        get("run", "all checks passed", None, "completed"),
        2,
        "{counts:#?}"
    );
    assert_eq!(
        get("ask", "approval routing", None, "completed"),
        1,
        "{counts:#?}"
    );
    assert_eq!(
        get("refused", "air gap", Some("air_gapped"), "refused"),
        1,
        "{counts:#?}"
    );
    assert_eq!(
        get("refused", "tool lookup", Some("unknown_tool"), "refused"),
        1,
        "{counts:#?}"
    );
    assert_eq!(counts.values().sum::<u64>(), 5);
}
