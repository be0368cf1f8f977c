//! The audit record's wire form (R33): every kind of record the audit layer writes — a run,
//! an ask, a refusal by a rule and by a filter, an expired wait, a held call, a grant, a
//! quota, a shadow decision, labels, a caller's and an approver's principal, a delegation,
//! an edited input, a failed, an erroring and a cancelled call — is compared with the
//! record the layer wrote before its schema had a type (`tests/fixtures/audit_records.jsonl`,
//! less what differs between runs by nature: times, durations, interaction ids and the
//! chain's hashes); and every record reads into
//! [`AuditRecord`](toolgate_core::audit_record::AuditRecord) and writes back to the very
//! line it was read from.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use toolgate::approval::{ApprovalGateLayer, ApprovalOutcome, FnChannel};
use toolgate::audit::{AuditLayer, MemorySink};
use toolgate::{AirGapLayer, ConfidentialityLayer, ExposureLayer, GovernanceHandle, ToolgateLayer};
use toolgate_core::audit_record::{AuditEntry, AuditRecord};
use toolgate_core::{
    AgentRef, Ask, AskSource, CallId, ChannelKind, Check, Decision, DecisionNote, DecisionSink,
    Delegation, Effect, Granted, InputEdit, LabelSet, LabelsRead, MatchedRule, Principal,
    ShadowNote, ToolCall, ToolOutput, ToolResponse, Verdict, WaitEnd,
};
use toolgate_engine::config::{Format, load_str};
use toolgate_engine::grant::{MemoryGrants, parse_grants};
use toolgate_engine::policy::{Limits, Policy};
use toolgate_engine::quota::ManualClock;
use toolgate_engine::{PolicyState, canon, chain};
use tower::{ServiceBuilder, ServiceExt, service_fn};

const BEARER: &str = "Bearer abcdefghijklmnopqrstuvwxyz0123456789";

/// The records of the filters, the gate and an interactive channel (content recorded).
async fn gate_records() -> Vec<String> {
    let config = r#"{
        "air_gapped": true,
        "approval": {"channel": "interactive"},
        "tools": [{"kind": "http", "name": "lookup", "network": "egress", "network_override": "incidental"},
                  {"kind": "http", "name": "refund", "approval": "require_approval"},
                  {"kind": "http", "name": "fetch", "network": "egress"}],
        "agents": [{"name": "dev", "allowed_tools": ["lookup", "refund", "fetch"]}]
    }"#;
    let policy = Policy::from_json_str(
        r#"{"rules": [{"effect": "deny", "tool": "refund", "when": {"amount": {"gt": 100}}, "reason": "too large"}]}"#,
        &Limits::default(),
    )
    .unwrap()
    .with_updated_at("2030-01-01T00:00:00Z");
    let gov = load_str(config, Format::Json)
        .unwrap()
        .with_policy(PolicyState::readable(policy))
        .unwrap();
    let handle = GovernanceHandle::new(gov);
    let sink = Arc::new(MemorySink::new());
    let channel = FnChannel::new(ChannelKind::Interactive, |r| {
        if r.input["amount"] == 7 {
            ApprovalOutcome::Expired
        } else {
            ApprovalOutcome::Approved {
                approver: "alice".into(),
            }
        }
    });
    let svc = ServiceBuilder::new()
        .layer(
            AuditLayer::shared(sink.clone())
                .governance(handle.clone())
                .include_content(true, true),
        )
        .layer(ExposureLayer::new(handle.clone()))
        .layer(ConfidentialityLayer::new(handle.clone()))
        .layer(AirGapLayer::new(handle.clone()))
        .layer(ApprovalGateLayer::new(handle).channel(channel))
        .service(service_fn(|call: ToolCall| async move {
            Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::new(json!({
                "echo": call.input,
                "headers": {"Authorization": BEARER},
            }))))
        }));
    let calls = [
        ("lookup", json!({"q": BEARER, "password": "hunter2"})),
        ("refund", json!({"amount": 5})),
        ("refund", json!({"amount": 500})),
        ("refund", json!({"amount": 7})),
        ("fetch", json!({})),
        ("ghost", json!(null)),
    ];
    for (i, (tool, input)) in calls.into_iter().enumerate() {
        let call = ToolCall::new(AgentRef::subagent("dev", "sub-1"), tool, input)
            .with_id(CallId::new(format!("call-a{i}")))
            .in_turn("s1", "t1");
        svc.clone().oneshot(call).await.unwrap();
    }
    sink.lines()
}

/// A call held in an inbox.
async fn held_records() -> Vec<String> {
    let handle = GovernanceHandle::new(
        load_str(
            r#"{"approval": {"channel": "inbox"},
                "tools": [{"kind": "http", "name": "refund", "approval": "require_approval"}],
                "agents": [{"name": "dev", "allowed_tools": ["refund"]}]}"#,
            Format::Json,
        )
        .unwrap(),
    );
    let sink = Arc::new(MemorySink::new());
    let inbox = FnChannel::new(ChannelKind::Inbox, |r| ApprovalOutcome::Held {
        interaction_id: r.interaction_id.clone(),
    });
    let svc = ServiceBuilder::new()
        .layer(AuditLayer::shared(sink.clone()).governance(handle.clone()))
        .layer(ApprovalGateLayer::new(handle).channel(inbox))
        .service(service_fn(|_call: ToolCall| async {
            Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::new(json!("ok"))))
        }));
    let call = ToolCall::new(AgentRef::profile("dev"), "refund", json!({"amount": 1}))
        .with_id(CallId::new("call-h0"));
    let r = svc.oneshot(call).await.unwrap();
    assert!(matches!(r, ToolResponse::Held(_)), "{r:?}");
    sink.lines()
}

/// The governed stack with a grant, quotas, a shadow policy and labels.
async fn stack_records() -> Vec<String> {
    let config = r#"{
        "approval": {"channel": "interactive"},
        "audit": {"include_input": true},
        "tools": [{"kind": "http", "name": "lookup", "labels": ["private"]},
                  {"kind": "http", "name": "refund", "approval": "require_approval"},
                  {"kind": "http", "name": "delete"},
                  {"kind": "http", "name": "post", "network": "egress"}],
        "agents": [{"name": "dev", "allowed_tools": ["lookup", "refund", "delete", "post"]}],
        "policy": {"rules": [{"effect": "deny", "tool": "delete", "when": {"id": {"gt": 50}}},
                             {"effect": "ask", "tool": "lookup", "when": {"id": {"gt": 90}}},
                             {"effect": "deny", "labels": ["egress"], "session_labels": ["private"],
                              "reason": "private data stays in"}],
                   "quotas": [{"tool": "lookup", "max": 2, "window_secs": 60, "per": ["agent"]}]},
        "policy_shadow": {"default": "ask", "rules": [
            {"effect": "allow", "tool": "delete"},
            {"effect": "deny", "tool": "lookup", "when": {"id": {"lt": 20}}, "reason": "shadow says no"}]}
    }"#;
    let handle = GovernanceHandle::new(load_str(config, Format::Json).unwrap());
    let clock = Arc::new(ManualClock::new(1_000_000));
    handle.set_clock(clock);
    let grants = r#"[{"id": "g1", "agent": "dev", "tool": "refund", "when": {"amount": {"lte": 30}},
        "granted_by": "alice", "reason": "small refunds", "expires_at": 900000000, "max_calls": 4}]"#;
    handle.set_grants(Arc::new(MemoryGrants::new(parse_grants(grants).unwrap())));
    let channel = FnChannel::new(ChannelKind::Interactive, |r| {
        if r.input["id"] == 99 {
            ApprovalOutcome::Denied {
                approver: "bob".into(),
                reason: Some("no".into()),
            }
        } else {
            ApprovalOutcome::Approved {
                approver: "alice".into(),
            }
        }
    });
    let sink = Arc::new(MemorySink::new());
    let svc = ServiceBuilder::new()
        .layer(
            ToolgateLayer::builder(handle)
                .channel(channel)
                .shared_audit_sink(sink.clone())
                .build()
                .unwrap(),
        )
        .service(service_fn(|_call: ToolCall| async {
            Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::new(json!(
                "done"
            ))))
        }));
    let calls = [
        ("refund", json!({"amount": 10})),
        ("refund", json!({"amount": 80})),
        ("delete", json!({"id": 60})),
        ("lookup", json!({"id": 10})),
        ("lookup", json!({"id": 99})),
        ("lookup", json!({"id": 30})),
        ("lookup", json!({"id": 31})),
        ("post", json!({})),
    ];
    for (i, (tool, input)) in calls.into_iter().enumerate() {
        let call = ToolCall::new(AgentRef::profile("dev"), tool, input)
            .with_id(CallId::new(format!("call-s{i}")))
            .in_turn("s9", "t1");
        svc.clone().oneshot(call).await.unwrap();
    }
    sink.lines()
}

/// Everything an inner layer can tell the audit layer, recorded by a stand-in gate: a note
/// with every part, an approver's and a caller's principal, a delegation, a shadow, an
/// edited input; and a failed, an erroring and a cancelled call.
async fn noted_records() -> Vec<String> {
    let sink = Arc::new(MemorySink::new());
    let svc = ServiceBuilder::new()
        .layer(AuditLayer::shared(sink.clone()).include_content(true, true))
        .service(service_fn(|call: ToolCall| async move {
            let notes = call.extensions.get::<DecisionSink>().cloned().unwrap();
            let mut d = Decision::new(
                Verdict::Ask {
                    channel: ChannelKind::Interactive,
                },
                Check::Routing,
                vec![format!("asked, with {BEARER}")],
            );
            d.asks = vec![
                Ask::new(AskSource::PolicyRule(2), format!("rule two: {BEARER}")),
                Ask::new(AskSource::Hook, "the hook"),
            ];
            d.matched_rules = vec![
                MatchedRule::new(2, Effect::Ask, None),
                MatchedRule::new(4, Effect::Allow, Some("fine".into())),
            ];
            d.granted = Some(Granted::new("g-7", "carol"));
            d.labels = Some(LabelsRead::new(LabelSet::of(["private", "egress"]), None));
            let mut note = DecisionNote::new(
                d,
                WaitEnd::Approved {
                    approver: "dave".into(),
                },
            );
            note.interaction_id = Some("ia_fixed".into());
            notes.record(note);
            notes.record_answered_by(Principal {
                subject: "u-dave".into(),
                issuer: "https://idp.example".into(),
            });
            notes.record_delegation(Delegation::new(
                "crm",
                "alice",
                vec!["support-bot".into(), "router".into()],
                "https://idp.example/token",
            ));
            notes.record_shadow(ShadowNote::new(Decision::new(
                Verdict::Run {
                    auto_approved: false,
                },
                Check::Passed,
                vec![format!("shadow: {BEARER}")],
            )));
            match call.tool.display_name().as_str() {
                "fail" => Ok(ToolResponse::Failed(ToolOutput::new(
                    json!({"error": BEARER}),
                ))),
                "err" => Err(format!("the upstream broke: {BEARER}")),
                "hang" => std::future::pending().await,
                _ => Ok(ToolResponse::Completed(ToolOutput::new(json!("fine")))),
            }
        }));
    let call = |tool: &str, i: usize| {
        let mut call = ToolCall::new(AgentRef::profile("ops"), tool, json!({"amount": 50}))
            .with_id(CallId::new(format!("call-n{i}")));
        call.extensions.insert(Principal {
            subject: "u-ops".into(),
            issuer: "https://idp.example".into(),
        });
        call.extensions.insert(InputEdit {
            original_input: json!({"amount": 500, "password": "hunter2"}),
            original_input_hash: "sha256:00".into(),
            edited_by: "dave".into(),
        });
        call
    };
    for (i, tool) in ["ok", "fail", "err"].into_iter().enumerate() {
        let _ = svc.clone().oneshot(call(tool, i)).await;
    }
    let hang = svc.clone().oneshot(call("hang", 3));
    assert!(
        tokio::time::timeout(Duration::from_millis(20), hang)
            .await
            .is_err()
    );
    // Without content and without any note: a bare record.
    let bare = ServiceBuilder::new()
        .layer(AuditLayer::shared(sink.clone()))
        .service(service_fn(|_call: ToolCall| async {
            Ok::<_, String>(ToolResponse::Completed(ToolOutput::new(json!("fine"))))
        }));
    bare.oneshot(
        ToolCall::new(AgentRef::profile("ops"), "bare", json!({})).with_id(CallId::new("call-n4")),
    )
    .await
    .unwrap();
    sink.lines()
}

/// A record less what differs between runs by nature, in its canonical form.
fn stable(line: &str) -> String {
    let mut v: Value = serde_json::from_str(line).unwrap();
    let o = v.as_object_mut().unwrap();
    for k in ["time", "duration_ms", "seq", "prev", "hash"] {
        if o.contains_key(k) {
            o.insert(k.into(), Value::from(format!("<{k}>")));
        }
    }
    if let Some(Value::Object(a)) = o.get_mut("approval")
        && let Some(Value::String(id)) = a.get("interaction_id")
        && id.starts_with("ia_")
        && id != "ia_fixed"
    {
        a.insert("interaction_id".into(), Value::from("<interaction_id>"));
    }
    canon::canonical_json(&v).unwrap()
}

async fn all_records() -> Vec<String> {
    let mut lines = gate_records().await;
    lines.extend(held_records().await);
    lines.extend(stack_records().await);
    lines.extend(noted_records().await);
    lines
}

const FIXTURE: &str = include_str!("fixtures/audit_records.jsonl");

#[tokio::test]
async fn r33_every_record_kind_is_written_as_before() {
    let lines = all_records().await;
    let got: Vec<String> = lines.iter().map(|l| stable(l)).collect();
    let want: Vec<&str> = FIXTURE.lines().collect();
    if std::env::var_os("TOOLGATE_PRINT_AUDIT_FIXTURE").is_some() {
        println!("{}", got.join("\n"));
    }
    assert_eq!(got.len(), want.len(), "{got:#?}");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "record {i}");
    }
    // Nothing secret reached a record.
    assert!(!lines.concat().contains("abcdefghijklmnopqrstuvwxyz"));
    assert!(!lines.concat().contains("hunter2"));
}

#[tokio::test]
async fn r33_every_record_reads_into_the_type_and_writes_back_byte_for_byte() {
    let lines = all_records().await;
    assert_eq!(lines.len(), FIXTURE.lines().count());
    for line in &lines {
        let record: AuditRecord<'_> = serde_json::from_str(line).unwrap();
        let back = canon::canonical_json(&serde_json::to_value(&record).unwrap()).unwrap();
        assert_eq!(&back, line);
        assert!(matches!(
            AuditEntry::parse(line).unwrap(),
            AuditEntry::Call(r) if r == record
        ));
        // Chained again from its own link, the record is the same line.
        let mut bare = record.clone();
        let (seq, prev) = (bare.seq.take().unwrap(), bare.prev.take().unwrap());
        bare.hash = None;
        let (relinked, hash) = chain::link(bare.to_map().unwrap(), seq, &prev).unwrap();
        assert_eq!(&relinked, line);
        assert_eq!(Some(hash.as_str()), record.hash.as_deref());
    }
}
