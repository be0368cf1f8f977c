//! A stale pin is no pin (R14, R38): a user layer put between two toolgate layers of one
//! handle that changes the call's input, tool, agent or run settings makes the decision
//! pinned outside it stale, and the approval gate decides the changed call again — a call
//! is sent only as decided, never on a decision made for another call.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

#[path = "common/walks.rs"]
mod walks;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use serde_json::json;
use toolgate::approval::{ApprovalGateLayer, ApprovalOutcome, FnChannel};
use toolgate::audit::AuditLayer;
use toolgate::audit::MemorySink;
use toolgate::{AirGapLayer, ConfidentialityLayer, ExposureLayer, GovernanceHandle};
use toolgate_core::{
    AgentRef, ChannelKind, RefusalCode, RunMode, ToolCall, ToolOutput, ToolResponse,
};
use toolgate_engine::config::{Format, load_str};
use tower::util::BoxCloneService;
use tower::{ServiceBuilder, ServiceExt, service_fn};
use walks::input_bounds_walks;

const CONFIG: &str = r#"{
    "approval": {"channel": "interactive"},
    "air_gapped": true,
    "tools": [{"kind": "http", "name": "lookup"},
              {"kind": "http", "name": "refund", "approval": "require_approval"},
              {"kind": "http", "name": "fetch", "network": "egress"},
              {"kind": "http", "name": "wipe"}],
    "agents": [{"name": "dev", "allowed_tools": ["lookup", "refund", "fetch"]},
               {"name": "guest", "allowed_tools": ["refund"]}],
    "policy": {"rules": [{"effect": "deny", "tool": "lookup", "when": {"n": {"gt": 10}}, "reason": "too many"}]}
}"#;

/// What the test tool and the approval channel saw.
#[derive(Default)]
struct Seen {
    /// The calls the tool ran, as (tool name, agent profile).
    ran: Mutex<Vec<(String, String)>>,
    /// The tools someone was asked about.
    asked: Mutex<Vec<String>>,
}

type Stack = BoxCloneService<ToolCall, ToolResponse, Infallible>;

/// A hand-built stack in the documented order — audit, exposure, confidentiality, air gap,
/// the gate — with `between` (a user layer) put between the air gap and the gate.
fn stack(seen: &Arc<Seen>, between: fn(ToolCall) -> ToolCall) -> (Stack, Arc<MemorySink>) {
    let h = GovernanceHandle::new(load_str(CONFIG, Format::Json).unwrap());
    let sink = Arc::new(MemorySink::new());
    let asked = Arc::clone(seen);
    let channel = FnChannel::new(ChannelKind::Interactive, move |r| {
        asked.asked.lock().unwrap().push(r.tool.clone());
        ApprovalOutcome::Approved {
            approver: "alice".into(),
        }
    });
    let ran = Arc::clone(seen);
    let tool = service_fn(move |c: ToolCall| {
        ran.ran
            .lock()
            .unwrap()
            .push((c.tool.display_name(), c.agent.profile.clone()));
        async { Ok::<_, Infallible>(ToolResponse::Completed(ToolOutput::new(json!("ok")))) }
    });
    let svc = ServiceBuilder::new()
        .layer(AuditLayer::shared(sink.clone()).governance(h.clone()))
        .layer(ExposureLayer::new(h.clone()))
        .layer(ConfidentialityLayer::new(h.clone()))
        .layer(AirGapLayer::new(h.clone()))
        .map_request(between)
        .layer(ApprovalGateLayer::new(h).channel(channel))
        .service(tool);
    (BoxCloneService::new(svc), sink)
}

fn dev_calls(name: &str, input: serde_json::Value) -> ToolCall {
    ToolCall::new(AgentRef::profile("dev"), name, input)
}

async fn send(stack: Stack, call: ToolCall) -> ToolResponse {
    stack.oneshot(call).await.unwrap()
}

#[tokio::test(flavor = "current_thread")]
async fn r14_an_input_changed_between_two_layers_is_decided_again() {
    let seen = Arc::new(Seen::default());
    // `{"n": 1}` passes every filter; the layer between rewrites it into one the tenant
    // rule denies.
    let (svc, sink) = stack(&seen, |mut c| {
        c.input = json!({"n": 11});
        c
    });
    let r = send(svc, dev_calls("lookup", json!({"n": 1}))).await;
    let refusal = r.refusal().expect("decided again on the input it sends");
    assert_eq!(refusal.code, RefusalCode::Denied, "{r:?}");
    assert!(seen.ran.lock().unwrap().is_empty(), "the tool never ran");
    assert_eq!(sink.lines().len(), 1, "the call is audited");
}

#[tokio::test(flavor = "current_thread")]
async fn r38_a_tool_renamed_between_two_layers_is_decided_for_the_new_tool() {
    // Renamed to a tool that needs approval: it is asked about, as `refund`.
    let seen = Arc::new(Seen::default());
    let (svc, _) = stack(&seen, |mut c| {
        c.tool = toolgate_core::ToolRef::Name("refund".into());
        c
    });
    let r = send(svc, dev_calls("lookup", json!({}))).await;
    assert!(matches!(r, ToolResponse::Completed(_)), "{r:?}");
    assert_eq!(
        *seen.asked.lock().unwrap(),
        ["refund"],
        "asked about the new tool"
    );
    assert_eq!(
        *seen.ran.lock().unwrap(),
        [("refund".to_string(), "dev".to_string())]
    );

    // Renamed to an unknown tool, to one the agent may not call, to an egress tool on an
    // air-gapped host: refused as that tool, never run.
    for (to, code) in [
        ("nope", RefusalCode::UnknownTool),
        ("wipe", RefusalCode::NotAllowed),
        ("fetch", RefusalCode::AirGapped),
    ] {
        let seen = Arc::new(Seen::default());
        let rename: fn(ToolCall) -> ToolCall = match to {
            "nope" => |mut c| {
                c.tool = toolgate_core::ToolRef::Name("nope".into());
                c
            },
            "wipe" => |mut c| {
                c.tool = toolgate_core::ToolRef::Name("wipe".into());
                c
            },
            _ => |mut c| {
                c.tool = toolgate_core::ToolRef::Name("fetch".into());
                c
            },
        };
        let (svc, _) = stack(&seen, rename);
        let r = send(svc, dev_calls("lookup", json!({}))).await;
        assert_eq!(r.refusal().map(|r| r.code), Some(code), "{to}: {r:?}");
        assert!(seen.ran.lock().unwrap().is_empty(), "{to}: never ran");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn r14_an_agent_changed_between_two_layers_is_decided_for_the_new_agent() {
    let seen = Arc::new(Seen::default());
    // `dev` may call `lookup`; `guest` may not.
    let (svc, _) = stack(&seen, |mut c| {
        c.agent = AgentRef::profile("guest");
        c
    });
    let r = send(svc, dev_calls("lookup", json!({}))).await;
    assert_eq!(
        r.refusal().map(|r| r.code),
        Some(RefusalCode::NotAllowed),
        "{r:?}"
    );
    assert!(seen.ran.lock().unwrap().is_empty(), "the tool never ran");
}

#[tokio::test(flavor = "current_thread")]
async fn r25_run_settings_changed_between_two_layers_are_decided_again() {
    let seen = Arc::new(Seen::default());
    // Pinned as auto-approved; the layer between turns the run into one that rejects
    // every asked call.
    let (svc, _) = stack(&seen, |mut c| {
        c.run.mode = RunMode::AutoRejectRequired;
        c
    });
    let mut call = dev_calls("refund", json!({}));
    call.run.mode = RunMode::AutoApproveRequired;
    let r = send(svc, call).await;
    assert_eq!(
        r.refusal().map(|r| r.code),
        Some(RefusalCode::Rejected),
        "{r:?}"
    );
    assert!(seen.ran.lock().unwrap().is_empty(), "the tool never ran");
    assert!(seen.asked.lock().unwrap().is_empty(), "nobody was asked");
}

#[tokio::test(flavor = "current_thread")]
async fn r14_a_call_unchanged_by_a_layer_between_is_still_decided_once() {
    let seen = Arc::new(Seen::default());
    let (svc, _) = stack(&seen, |c| c);
    let before = input_bounds_walks();
    let r = send(svc, dev_calls("lookup", json!({"n": 1}))).await;
    assert!(matches!(r, ToolResponse::Completed(_)), "{r:?}");
    assert_eq!(input_bounds_walks() - before, 1, "decided once");
    assert_eq!(seen.ran.lock().unwrap().len(), 1);
}

/// The composite's gate reads the decision its own exposure filter sealed without hashing
/// the input to compare (nothing but toolgate's filters ran on the call in between) — once.
/// A tool that sends the call round again through the same composite with a rewritten
/// input gets it decided again for that input (R14, R38).
#[tokio::test(flavor = "current_thread")]
async fn r38_a_call_sent_round_the_composite_again_is_decided_for_its_new_input() {
    use toolgate::ToolgateLayer;
    use tower::Layer;

    let h = GovernanceHandle::new(load_str(CONFIG, Format::Json).unwrap());
    let channel = FnChannel::new(ChannelKind::Interactive, |_| ApprovalOutcome::Approved {
        approver: "alice".into(),
    });
    let layer = ToolgateLayer::builder(h)
        .channel(channel)
        .build()
        .expect("the channel is given");
    // The tool: the first time, it rewrites the input into one the tenant rule denies and
    // sends the call (extensions and all) through the same composite again.
    let again: Arc<Mutex<Option<Stack>>> = Arc::new(Mutex::new(None));
    let ran = Arc::new(Mutex::new(Vec::new()));
    let tool = {
        let (again, ran) = (Arc::clone(&again), Arc::clone(&ran));
        service_fn(move |mut c: ToolCall| {
            let (again, ran) = (Arc::clone(&again), Arc::clone(&ran));
            async move {
                ran.lock().unwrap().push(c.input.clone());
                if c.input == json!({"n": 1}) {
                    c.input = json!({"n": 11});
                    let svc = again.lock().unwrap().clone().expect("set before the call");
                    return Ok::<_, Infallible>(svc.oneshot(c).await.unwrap());
                }
                Ok(ToolResponse::Completed(ToolOutput::new(json!("ok"))))
            }
        })
    };
    let svc: Stack = BoxCloneService::new(layer.layer(tool));
    *again.lock().unwrap() = Some(svc.clone());
    let r = svc
        .oneshot(dev_calls("lookup", json!({"n": 1})))
        .await
        .unwrap();
    let refusal = r
        .refusal()
        .expect("the second pass is decided for its input");
    assert_eq!(refusal.code, RefusalCode::Denied, "{r:?}");
    assert_eq!(
        *ran.lock().unwrap(),
        [json!({"n": 1})],
        "the rewritten call never reached the tool"
    );
}
