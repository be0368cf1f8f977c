//! R46: a shadow policy never changes what happens to a call. The same long sequence of
//! calls (quotas filling and sliding, a grant being spent, asks approved and denied, run
//! modes, unknown and denied tools) goes through two governed stacks built from one
//! configuration, one of them with a shadow policy that disagrees with nearly everything:
//! every response, every send, every question put to a person, every grant use and every
//! audit record (less its times, ids and the `shadow` field) must be the same.
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
use toolgate::approval::{ApprovalOutcome, FnChannel};
use toolgate::audit::MemorySink;
use toolgate::{GovernanceHandle, ToolgateLayer};
use toolgate_core::{
    AgentRef, ChannelKind, RunContext, RunMode, ToolCall, ToolOutput, ToolResponse,
};
use toolgate_engine::config::{Format, load_str};
use toolgate_engine::grant::{MemoryGrants, parse_grants};
use toolgate_engine::quota::ManualClock;
use tower::{ServiceBuilder, ServiceExt, service_fn};

const CONFIG: &str = r#"{
    "approval": {"channel": "interactive"},
    "audit": {"include_input": true},
    "tools": [{"kind": "http", "name": "lookup"},
              {"kind": "http", "name": "refund", "approval": "require_approval"},
              {"kind": "http", "name": "delete"}],
    "agents": [{"name": "dev", "allowed_tools": ["lookup", "refund", "delete"]},
               {"name": "ops", "allowed_tools": ["lookup"]}],
    "policy": {"rules": [{"effect": "deny", "tool": "delete", "when": {"id": {"gt": 50}}},
                         {"effect": "ask", "tool": "lookup", "when": {"id": {"gt": 90}}}],
               "quotas": [{"tool": "lookup", "max": 3, "window_secs": 60, "per": ["agent"]},
                          {"tool": "refund", "max": 2, "window_secs": 120}]}
}"#;

/// Disagrees with nearly everything: asks where the enforced runs, runs where it denies,
/// and a tighter quota on the same counters.
const SHADOW: &str = r#"{"default": "ask", "rules": [
    {"effect": "allow", "tool": "delete"},
    {"effect": "deny", "tool": "lookup", "when": {"id": {"lt": 20}}},
    {"effect": "deny", "tool": "refund", "when": {"amount": {"gt": 40}}}
], "quotas": [{"tool": "lookup", "max": 1, "window_secs": 60, "per": ["agent"]}]}"#;

const GRANTS: &str = r#"[{"id": "g1", "agent": "dev", "tool": "refund", "when": {"amount": {"lte": 30}},
    "granted_by": "alice", "reason": "small refunds", "expires_at": 900000000, "max_calls": 4}]"#;

struct Side {
    svc: tower::util::BoxCloneService<ToolCall, ToolResponse, std::convert::Infallible>,
    clock: Arc<ManualClock>,
    sent: Arc<AtomicUsize>,
    asked: Arc<AtomicUsize>,
    grants: Arc<MemoryGrants>,
    audit: Arc<MemorySink>,
}

fn side(shadow: bool) -> Side {
    let mut config: Value = serde_json::from_str(CONFIG).unwrap();
    if shadow {
        config["policy_shadow"] = serde_json::from_str(SHADOW).unwrap();
    }
    let gov = load_str(&config.to_string(), Format::Json).unwrap();
    assert_eq!(gov.shadow_policy().is_some(), shadow);
    let handle = GovernanceHandle::new(gov);
    let clock = Arc::new(ManualClock::new(1_000_000));
    handle.set_clock(clock.clone());
    let grants = Arc::new(MemoryGrants::new(parse_grants(GRANTS).unwrap()));
    handle.set_grants(grants.clone());
    let asked = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&asked);
    let channel = FnChannel::new(ChannelKind::Interactive, move |r| {
        counted.fetch_add(1, Ordering::SeqCst);
        if r.input["id"].as_u64().unwrap_or(0) % 3 == 0 {
            ApprovalOutcome::Denied {
                approver: "alice".into(),
                reason: None,
            }
        } else {
            ApprovalOutcome::Approved {
                approver: "alice".into(),
            }
        }
    });
    let audit = Arc::new(MemorySink::new());
    let sent = Arc::new(AtomicUsize::new(0));
    let hits = Arc::clone(&sent);
    let svc = ServiceBuilder::new()
        .layer(
            ToolgateLayer::builder(handle)
                .channel(channel)
                .shared_audit_sink(audit.clone())
                .build()
                .unwrap(),
        )
        .service(service_fn(move |_call: ToolCall| {
            hits.fetch_add(1, Ordering::SeqCst);
            async {
                Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::new(json!(
                    "done"
                ))))
            }
        }));
    Side {
        svc: tower::util::BoxCloneService::new(svc),
        clock,
        sent,
        asked,
        grants,
        audit,
    }
}

/// An audit record less what differs between two runs by nature (times, ids, the chain)
/// and the shadow's own field; an interaction's id is random.
fn comparable(line: &str) -> Value {
    let mut v: Value = serde_json::from_str(line).unwrap();
    let o = v.as_object_mut().unwrap();
    for k in [
        "time",
        "call_id",
        "duration_ms",
        "seq",
        "prev",
        "hash",
        "shadow",
    ] {
        o.remove(k);
    }
    if let Some(approval) = o.get_mut("approval").and_then(Value::as_object_mut) {
        approval.remove("interaction_id");
    }
    v
}

#[tokio::test]
async fn r46_a_shadow_policy_changes_no_response_send_ask_grant_or_record() {
    let (plain, shadowed) = (side(false), side(true));
    // A deterministic walk over the call space (a linear congruential generator).
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = |n: u64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % n
    };
    let tools = ["lookup", "refund", "delete", "missing"];
    let agents = ["dev", "ops"];
    let modes = [
        RunMode::UseAgentPolicy,
        RunMode::AutoApproveRequired,
        RunMode::AutoRejectRequired,
    ];
    let mut disagreements = 0;
    for i in 0..400 {
        let advance = next(20_000);
        let tool = tools[next(4) as usize];
        let agent = agents[next(2) as usize];
        let mode = modes[next(3) as usize];
        let input = json!({"id": next(100), "amount": next(60)});
        let mut responses = Vec::new();
        for s in [&plain, &shadowed] {
            s.clock.advance_ms(advance);
            let mut call = ToolCall::new(AgentRef::profile(agent), tool, input.clone());
            call.run = RunContext {
                mode,
                ..RunContext::default()
            };
            responses.push(s.svc.clone().oneshot(call).await.unwrap());
        }
        assert_eq!(
            format!("{:?}", responses[0]),
            format!("{:?}", responses[1]),
            "call {i}: {agent} {tool} {input} {mode:?}"
        );
        let (a, b) = (plain.audit.lines(), shadowed.audit.lines());
        let (a, b) = (a.last().unwrap(), b.last().unwrap());
        assert_eq!(comparable(a), comparable(b), "call {i}");
        assert!(!a.contains("\"shadow\""));
        let shadow = &serde_json::from_str::<Value>(b).unwrap()["shadow"];
        assert!(shadow.is_object(), "call {i}: {b}");
        if shadow["disagrees"] == true {
            disagreements += 1;
        }
    }
    assert_eq!(
        plain.sent.load(Ordering::SeqCst),
        shadowed.sent.load(Ordering::SeqCst),
        "the same sends"
    );
    assert_eq!(
        plain.asked.load(Ordering::SeqCst),
        shadowed.asked.load(Ordering::SeqCst),
        "the shadow never asks anyone"
    );
    assert_eq!(
        plain.grants.uses("g1"),
        shadowed.grants.uses("g1"),
        "the shadow never spends a grant"
    );
    assert!(plain.grants.uses("g1").unwrap() > 0, "the grant was used");
    assert!(plain.sent.load(Ordering::SeqCst) > 50);
    assert!(
        disagreements > 100,
        "the shadow disagreed often: {disagreements}"
    );
}

#[tokio::test]
async fn r46_a_shadow_put_in_force_hot_decides_the_next_call_and_is_removed_hot() {
    let gov = load_str(CONFIG, Format::Json).unwrap();
    let handle = GovernanceHandle::new(gov);
    let audit = Arc::new(MemorySink::new());
    let svc = ServiceBuilder::new()
        .layer(
            ToolgateLayer::builder(handle.clone())
                .channel(FnChannel::new(ChannelKind::Interactive, |_r| {
                    ApprovalOutcome::Approved {
                        approver: "alice".into(),
                    }
                }))
                .shared_audit_sink(audit.clone())
                .build()
                .unwrap(),
        )
        .service(service_fn(|_call: ToolCall| async {
            Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::new(json!(
                "done"
            ))))
        }));
    let call = || ToolCall::new(AgentRef::profile("dev"), "lookup", json!({"id": 1}));
    let last = |audit: &MemorySink| -> Value {
        serde_json::from_str(audit.lines().last().unwrap()).unwrap()
    };
    svc.clone().oneshot(call()).await.unwrap();
    assert!(last(&audit).get("shadow").is_none());
    let deny = toolgate_engine::policy::Policy::from_json_str(
        r#"{"rules": [{"effect": "deny", "tool": "lookup"}]}"#,
        &Default::default(),
    )
    .unwrap();
    handle.replace_shadow_policy(Some(deny)).unwrap();
    let r = svc.clone().oneshot(call()).await.unwrap();
    assert!(
        matches!(r, ToolResponse::Completed(_)),
        "never enforced: {r:?}"
    );
    let record = last(&audit);
    assert_eq!(record["shadow"]["outcome"], "refused", "{record}");
    assert_eq!(record["shadow"]["disagrees"], true);
    handle.replace_shadow_policy(None).unwrap();
    svc.clone().oneshot(call()).await.unwrap();
    assert!(last(&audit).get("shadow").is_none());
}
