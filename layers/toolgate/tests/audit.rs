//! Audit records, the hash chain, redaction in records and failing sinks (R33).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use toolgate::approval::{ApprovalGateLayer, ApprovalOutcome, FnChannel};
use toolgate::audit::{AuditLayer, AuditSink, JsonlFileSink, MemorySink, verify_chain};
use toolgate::{AirGapLayer, ConfidentialityLayer, ExposureLayer, GovernanceHandle};
use toolgate_core::{AgentRef, ChannelKind, RefusalCode, ToolCall, ToolOutput, ToolResponse};
use toolgate_engine::config::{Format, load_str};
use toolgate_engine::recording::FlushPolicy;
use tower::{ServiceBuilder, ServiceExt, service_fn};

const CONFIG: &str = r#"{
    "air_gapped": true,
    "approval": {"channel": "interactive"},
    "tools": [{"kind": "http", "name": "lookup", "network": "egress", "network_override": "incidental"},
              {"kind": "http", "name": "refund", "approval": "require_approval"},
              {"kind": "http", "name": "fetch", "network": "egress"}],
    "agents": [{"name": "dev", "allowed_tools": ["lookup", "refund", "fetch"]}],
    "policy": {"rules": [{"effect": "deny", "tool": "refund", "when": {"amount": {"gt": 100}}, "reason": "too large"}]}
}"#;

const BEARER: &str = "Bearer abcdefghijklmnopqrstuvwxyz0123456789";
const PASSWORD: &str = "hunter2-very-secret";

type Svc = tower::util::BoxCloneService<ToolCall, ToolResponse, std::convert::Infallible>;

fn stack(sink: Arc<dyn AuditSink>, approve: bool, content: bool, runs: Arc<AtomicUsize>) -> Svc {
    let handle = GovernanceHandle::new(load_str(CONFIG, Format::Json).unwrap());
    let channel = FnChannel::new(ChannelKind::Interactive, move |_r| {
        if approve {
            ApprovalOutcome::Approved {
                approver: "alice".into(),
            }
        } else {
            ApprovalOutcome::Expired
        }
    });
    let svc = ServiceBuilder::new()
        .layer(
            AuditLayer::shared(sink)
                .governance(handle.clone())
                .include_content(content, content),
        )
        .layer(ExposureLayer::new(handle.clone()))
        .layer(ConfidentialityLayer::new(handle.clone()))
        .layer(AirGapLayer::new(handle.clone()))
        .layer(ApprovalGateLayer::new(handle).channel(channel))
        .service(service_fn(move |call: ToolCall| {
            runs.fetch_add(1, Ordering::SeqCst);
            async move {
                Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::new(json!({
                    "echo": call.input,
                    "headers": {"Authorization": BEARER},
                    "note": format!("use {BEARER} to call back"),
                }))))
            }
        }));
    tower::util::BoxCloneService::new(svc)
}

async fn send(svc: &Svc, tool: &str, input: Value) -> ToolResponse {
    svc.clone()
        .oneshot(ToolCall::new(AgentRef::profile("dev"), tool, input))
        .await
        .unwrap()
}

fn records(lines: &[String]) -> Vec<Value> {
    lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn r33_one_record_per_call_with_the_whole_story() {
    let sink = Arc::new(MemorySink::new());
    let svc = stack(sink.clone(), true, false, Arc::default());
    send(&svc, "lookup", json!({"q": 1})).await;
    send(&svc, "refund", json!({"amount": 5})).await;
    send(&svc, "refund", json!({"amount": 500})).await;
    send(&svc, "fetch", json!({})).await;
    send(&svc, "ghost", json!({})).await;
    let r = records(&sink.lines());
    assert_eq!(r.len(), 5);

    assert_eq!(r[0]["outcome"], "completed");
    assert_eq!(r[0]["decision"]["outcome"], "run");
    assert_eq!(r[0]["approval"]["wait"], "not_asked");
    assert_eq!(r[0]["identities"][0]["kind"], "http");
    // Seed 000: the operator's override decides; the declared scope is kept for audit.
    assert_eq!(r[0]["identities"][0]["network_declared"], "egress");
    assert_eq!(r[0]["identities"][0]["network_effective"], "incidental");
    assert!(r[0]["input_hash"].as_str().unwrap().starts_with("sha256:"));
    assert!(r[0]["duration_ms"].is_number());

    assert_eq!(r[1]["decision"]["outcome"], "ask");
    assert_eq!(r[1]["approval"]["wait"], "approved");
    assert_eq!(r[1]["approval"]["approver"], "alice");
    assert!(
        r[1]["approval"]["interaction_id"]
            .as_str()
            .unwrap()
            .starts_with("ia_")
    );
    assert_eq!(r[1]["decision"]["asks"][0]["source"], "agent");
    assert_eq!(r[1]["outcome"], "completed");

    assert_eq!(r[2]["decision"]["refusal"], "denied");
    assert_eq!(r[2]["decision"]["check"], "tenant policy");
    assert_eq!(r[2]["decision"]["rule"], 0);
    assert_eq!(r[2]["decision"]["reasons"][0], "too large");
    assert_eq!(r[2]["outcome"], "refused");

    assert_eq!(r[3]["decision"]["refusal"], "air_gapped");
    assert_eq!(r[3]["decision"]["check"], "air gap");
    assert!(
        r[3]["approval"].is_null(),
        "a filter refused it before the gate"
    );

    assert_eq!(r[4]["decision"]["refusal"], "unknown_tool");
    assert_eq!(r[4]["identities"], json!([]));

    for (i, rec) in r.iter().enumerate() {
        assert_eq!(rec["seq"], i as u64 + 1);
    }
    assert_eq!(verify_chain(sink.lines().join("\n").as_bytes()).unwrap(), 5);
}

#[tokio::test]
async fn r26_r33_a_timeout_is_recorded_as_expired_not_denied() {
    let sink = Arc::new(MemorySink::new());
    let svc = stack(sink.clone(), false, false, Arc::default());
    let resp = send(&svc, "refund", json!({"amount": 5})).await;
    assert_eq!(resp.refusal().unwrap().code, RefusalCode::Rejected);
    let r = records(&sink.lines());
    assert_eq!(r[0]["approval"]["wait"], "expired");
    assert!(r[0]["approval"]["approver"].is_null());
}

#[tokio::test]
async fn r33_secrets_in_input_and_output_never_reach_a_record() {
    let sink = Arc::new(MemorySink::new());
    let svc = stack(sink.clone(), true, true, Arc::default());
    let input = json!({"q": BEARER, "auth": {"nested": {"password": PASSWORD}}, "title": "hello"});
    let resp = send(&svc, "lookup", input).await;
    assert!(matches!(resp, ToolResponse::Completed(_)));
    let all = sink.lines().concat();
    assert!(all.contains("\"input\""), "content was recorded");
    assert!(all.contains("hello"), "non-secret content is kept");
    assert!(
        !all.contains("abcdefghijklmnopqrstuvwxyz0123456789"),
        "{all}"
    );
    assert!(!all.contains(PASSWORD), "{all}");
}

#[tokio::test]
async fn r33_the_file_chain_verifies_continues_and_shows_tampering() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    {
        let sink = Arc::new(JsonlFileSink::open(&path, FlushPolicy::EveryRecord).unwrap());
        let svc = stack(sink, true, false, Arc::default());
        for i in 0..3 {
            send(&svc, "lookup", json!({"i": i})).await;
        }
    }
    {
        // A second process appends: the chain continues.
        let sink = Arc::new(JsonlFileSink::open(&path, FlushPolicy::Buffered).unwrap());
        let svc = stack(sink, true, false, Arc::default());
        send(&svc, "fetch", json!({})).await;
        send(&svc, "lookup", json!({"i": 9})).await;
    }
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(verify_chain(text.as_bytes()).unwrap(), 5);

    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    lines[3] = lines[3].replace("air_gapped", "denied");
    let broken = verify_chain(lines.join("\n").as_bytes()).unwrap_err();
    assert_eq!((broken.line, broken.seq), (4, Some(4)));

    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    lines.remove(2);
    assert_eq!(
        verify_chain(lines.join("\n").as_bytes()).unwrap_err().line,
        3
    );
}

#[tokio::test]
async fn r33_a_failing_sink_refuses_calls_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Arc::new(
        JsonlFileSink::open(dir.path().join("a.jsonl"), FlushPolicy::EveryRecord).unwrap(),
    );
    let runs = Arc::new(AtomicUsize::new(0));
    let svc = stack(sink.clone(), true, false, runs.clone());
    assert!(matches!(
        send(&svc, "lookup", json!({})).await,
        ToolResponse::Completed(_)
    ));
    sink.close();
    let resp = send(&svc, "lookup", json!({})).await;
    let refusal = resp.refusal().expect("refused");
    assert_eq!(refusal.code, RefusalCode::Rejected);
    assert!(refusal.reasons[0].contains("audit"), "{refusal:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the refused call never ran");
}

/// A sink that reports itself ready but fails every write.
#[derive(Debug)]
struct BrokenDisk;

impl AuditSink for BrokenDisk {
    fn write(
        &self,
        _record: serde_json::Map<String, Value>,
    ) -> Result<(), toolgate::audit::AuditError> {
        Err(toolgate::audit::AuditError(
            "no space left on device".into(),
        ))
    }
}

#[tokio::test]
async fn r33_a_result_that_cannot_be_recorded_is_withheld() {
    let runs = Arc::new(AtomicUsize::new(0));
    let svc = stack(Arc::new(BrokenDisk), true, false, runs.clone());
    let resp = send(&svc, "lookup", json!({})).await;
    let ToolResponse::Failed(out) = resp else {
        panic!("expected the result withheld, got {resp:?}")
    };
    assert!(
        out.content
            .as_str()
            .unwrap()
            .contains("could not be recorded")
    );
}

/// A custom sink implementing only `write` (all the trait requires): its first write fails,
/// every later one succeeds, and it never reports itself failing.
#[derive(Debug, Default)]
struct FailsOnce {
    writes: AtomicUsize,
}

impl AuditSink for FailsOnce {
    fn write(
        &self,
        _record: serde_json::Map<String, Value>,
    ) -> Result<(), toolgate::audit::AuditError> {
        if self.writes.fetch_add(1, Ordering::SeqCst) == 0 {
            return Err(toolgate::audit::AuditError("disk full".into()));
        }
        Ok(())
    }
}

#[tokio::test]
async fn r33_a_write_failure_refuses_every_later_call_whatever_the_sink_reports() {
    let sink = Arc::new(FailsOnce::default());
    let runs = Arc::new(AtomicUsize::new(0));
    let handle = GovernanceHandle::new(load_str(CONFIG, Format::Json).unwrap());
    let layer = AuditLayer::shared(sink.clone()).governance(handle.clone());
    let counter = runs.clone();
    let svc = ServiceBuilder::new()
        .layer(layer.clone())
        .layer(ApprovalGateLayer::new(handle))
        .service(service_fn(move |_c: ToolCall| {
            counter.fetch_add(1, Ordering::SeqCst);
            async {
                Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::new(json!(
                    "ok"
                ))))
            }
        }));
    let call = || ToolCall::new(AgentRef::profile("dev"), "lookup", json!({}));
    // The first call runs, but its record cannot be written: the result is withheld.
    let first = svc.clone().oneshot(call()).await.unwrap();
    assert!(matches!(first, ToolResponse::Failed(_)), "{first:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert!(layer.failure().unwrap().contains("disk full"));
    // The sink would take records again and never reports itself failing, yet no later
    // call runs, through this service or a clone of it.
    for _ in 0..3 {
        let resp = svc.clone().oneshot(call()).await.unwrap();
        let refusal = resp.refusal().expect("refused");
        assert_eq!(refusal.code, RefusalCode::Rejected);
        assert!(
            refusal.reasons[0].contains("could not be written"),
            "{refusal:?}"
        );
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the tool never ran again");
    assert_eq!(
        sink.writes.load(Ordering::SeqCst),
        1,
        "refused calls are not sent"
    );
    // The documented recovery: the operator resets the layer once the sink is repaired.
    layer.reset();
    assert_eq!(layer.failure(), None);
    let resp = svc.clone().oneshot(call()).await.unwrap();
    assert!(matches!(resp, ToolResponse::Completed(_)), "{resp:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn r33_fail_open_keeps_running_after_a_write_failure() {
    let sink = Arc::new(FailsOnce::default());
    let handle = GovernanceHandle::new(load_str(CONFIG, Format::Json).unwrap());
    let svc = ServiceBuilder::new()
        .layer(AuditLayer::shared(sink).with_insecure_fail_open())
        .layer(ApprovalGateLayer::new(handle))
        .service(service_fn(|_c: ToolCall| async {
            Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::new(json!("ok"))))
        }));
    for _ in 0..2 {
        let resp = svc
            .clone()
            .oneshot(ToolCall::new(AgentRef::profile("dev"), "lookup", json!({})))
            .await
            .unwrap();
        assert!(matches!(resp, ToolResponse::Completed(_)), "{resp:?}");
    }
}

#[tokio::test]
async fn r33_fail_open_is_an_explicit_choice() {
    let handle = GovernanceHandle::new(load_str(CONFIG, Format::Json).unwrap());
    let svc = ServiceBuilder::new()
        .layer(AuditLayer::new(BrokenDisk).with_insecure_fail_open())
        .layer(ApprovalGateLayer::new(handle))
        .service(service_fn(|_c: ToolCall| async {
            Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::new(json!("ok"))))
        }));
    let resp = svc
        .oneshot(ToolCall::new(AgentRef::profile("dev"), "lookup", json!({})))
        .await
        .unwrap();
    assert!(matches!(resp, ToolResponse::Completed(_)));
}

#[test]
fn r33_an_unreadable_chain_is_never_silently_restarted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    std::fs::write(&path, "{\"seq\": 1, \"hash\": \"sha256:x\"}\nnot json\n").unwrap();
    let err = JsonlFileSink::open(&path, FlushPolicy::EveryRecord).unwrap_err();
    assert!(err.0.contains("refusing to restart"), "{err}");
}

#[tokio::test]
async fn r33_the_configurations_audit_section_builds_the_layer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cfg-audit.jsonl");
    let text = format!(
        r#"{{"tools": [{{"kind": "http", "name": "lookup"}}],
            "agents": [{{"name": "dev", "allowed_tools": ["lookup"]}}],
            "audit": {{"file": {}, "flush": "every_record", "include_input": true}},
            "redaction": {{"keys": ["customer_ref"]}}}}"#,
        serde_json::to_string(path.to_str().unwrap()).unwrap()
    );
    let gov = load_str(&text, Format::Json).unwrap();
    let redactor = toolgate::redact::RedactorBuilder::from_settings(gov.redaction_settings())
        .build()
        .unwrap();
    let layer = AuditLayer::from_settings(gov.audit_settings())
        .unwrap()
        .expect("a file is configured")
        .redactor(redactor);
    let handle = GovernanceHandle::new(gov);
    let svc = ServiceBuilder::new()
        .layer(layer)
        .layer(ApprovalGateLayer::new(handle))
        .service(service_fn(|_c: ToolCall| async {
            Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::new(json!("ok"))))
        }));
    svc.oneshot(ToolCall::new(
        AgentRef::profile("dev"),
        "lookup",
        json!({"customer_ref": "C-991"}),
    ))
    .await
    .unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(verify_chain(text.as_bytes()).unwrap(), 1);
    assert!(
        text.contains("customer_ref") && !text.contains("C-991"),
        "{text}"
    );
    assert!(
        load_str(r#"{"redaction": {"patterns": ["("]}}"#, Format::Json)
            .unwrap_err()
            .errors[0]
            .path
            == "redaction.patterns[0]"
    );
}

#[tokio::test]
async fn r44_a_rate_limited_refusal_is_recorded_with_when_it_could_run_again() {
    let sink = Arc::new(MemorySink::new());
    let svc = ServiceBuilder::new()
        .layer(AuditLayer::shared(sink.clone()))
        .service(service_fn(|_call: ToolCall| async {
            let mut r = toolgate_core::Refusal::new(
                RefusalCode::RateLimited,
                toolgate_core::Check::Quota,
                "ten refunds an hour",
            );
            r.retry_after_secs = Some(7);
            Ok::<_, std::convert::Infallible>(ToolResponse::Refused(r))
        }));
    svc.oneshot(ToolCall::new(AgentRef::profile("dev"), "refund", json!({})))
        .await
        .unwrap();
    let r = records(&sink.lines());
    assert_eq!(r[0]["decision"]["refusal"], "rate_limited");
    assert_eq!(r[0]["decision"]["retry_after_secs"], 7);
    assert_eq!(r[0]["decision"]["granted"], Value::Null);
}
