//! Decide once (issue 10): the first toolgate layer a call meets decides it — one
//! `decide`, one input-bounds walk — and every later layer of the same handle reads that
//! decision; a layer of another handle never does.
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
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;
use toolgate::approval::{ApprovalOutcome, FnChannel, Hooks};
use toolgate::audit::MemorySink;
use toolgate::{
    AirGapLayer, ConfidentialityLayer, ExposureLayer, GovernanceHandle, ToolgateLayer,
    approval::ApprovalGateLayer,
};
use toolgate_core::{
    AgentRef, ChannelKind, Check, RefusalCode, ToolCall, ToolOutput, ToolResponse,
};
use toolgate_engine::config::{Format, load_str};
use tower::{Layer, Service, ServiceBuilder, ServiceExt, service_fn};
use walks::input_bounds_walks;

const CONFIG: &str = r#"{
    "approval": {"channel": "interactive"},
    "air_gapped": true,
    "tools": [{"kind": "http", "name": "lookup"},
              {"kind": "http", "name": "refund", "approval": "require_approval"},
              {"kind": "http", "name": "fetch", "network": "egress"},
              {"kind": "http", "name": "wipe"}],
    "agents": [{"name": "dev", "allowed_tools": ["lookup", "refund", "fetch"]}],
    "policy": {"rules": [{"effect": "deny", "tool": "lookup", "when": {"n": {"gt": 10}}, "reason": "too many"}]}
}"#;

fn handle(config: &str) -> GovernanceHandle {
    GovernanceHandle::new(load_str(config, Format::Json).unwrap())
}

fn tool(
    hits: &Arc<AtomicUsize>,
) -> impl Service<ToolCall, Response = ToolResponse, Error = Infallible, Future = impl Send + use<>>
+ Clone
+ Send
+ 'static
+ use<> {
    let hits = Arc::clone(hits);
    service_fn(move |_c: ToolCall| {
        hits.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, Infallible>(ToolResponse::Completed(ToolOutput::new(json!("ok")))) }
    })
}

fn approver() -> FnChannel<impl Fn(&toolgate::approval::ApprovalRequest) -> ApprovalOutcome> {
    FnChannel::new(ChannelKind::Interactive, |_r| ApprovalOutcome::Approved {
        approver: "alice".into(),
    })
}

/// Sends `call` through `svc` and returns the response with the input-bounds walks it
/// cost (counted on this thread: the runtime is current-thread).
async fn walks<S>(svc: S, call: ToolCall) -> (ToolResponse, usize)
where
    S: Service<ToolCall, Response = ToolResponse, Error = Infallible>,
{
    let before = input_bounds_walks();
    let r = svc.oneshot(call).await.unwrap();
    (r, input_bounds_walks() - before)
}

#[tokio::test(flavor = "current_thread")]
async fn r14_the_composite_walks_the_input_bounds_once_per_call() {
    let hits = Arc::new(AtomicUsize::new(0));
    let sink = Arc::new(MemorySink::new());
    let stack = ServiceBuilder::new()
        .layer(
            ToolgateLayer::builder(handle(CONFIG))
                .channel(approver())
                .hooks(Hooks::new())
                .shared_audit_sink(sink.clone())
                .build()
                .unwrap(),
        )
        .service(tool(&hits));
    let dev = AgentRef::profile("dev");
    let call = |name: &str, input| ToolCall::new(dev.clone(), name, input);
    // Runs, and every kind of refusal, from the first filter to the gate: one walk each
    // (none for an unknown tool: the look-up refuses before the input is read).
    for (name, input, code, expected) in [
        ("lookup", json!({"n": 1}), None, 1),
        ("lookup", json!({"n": 11}), Some(RefusalCode::Denied), 1),
        ("nope", json!({}), Some(RefusalCode::UnknownTool), 0),
        ("lookup", json!([1]), Some(RefusalCode::InvalidInput), 1),
        ("wipe", json!({}), Some(RefusalCode::NotAllowed), 1),
        ("fetch", json!({}), Some(RefusalCode::AirGapped), 1),
    ] {
        let (r, n) = walks(stack.clone(), call(name, input)).await;
        assert_eq!(r.refusal().map(|r| r.code), code, "{name}: {r:?}");
        assert_eq!(n, expected, "{name}: input bounds walked {n} times");
    }
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    // An asked call is decided once before the wait; after the approval the gate decides
    // it again on the configuration in force (R38) — that is the second walk, and the only
    // other one.
    let (r, n) = walks(stack.clone(), call("refund", json!({}))).await;
    assert!(matches!(r, ToolResponse::Completed(_)), "{r:?}");
    assert_eq!(n, 2);
    assert_eq!(sink.lines().len(), 7, "every call audited");
}

#[tokio::test(flavor = "current_thread")]
async fn r14_a_hand_built_stack_and_each_layer_alone_decide_once() {
    let h = handle(CONFIG);
    let hits = Arc::new(AtomicUsize::new(0));
    let hand_built = ServiceBuilder::new()
        .layer(ExposureLayer::new(h.clone()))
        .layer(ConfidentialityLayer::new(h.clone()))
        .layer(AirGapLayer::new(h.clone()))
        .layer(ApprovalGateLayer::new(h.clone()).channel(approver()))
        .service(tool(&hits));
    let call = || ToolCall::new(AgentRef::profile("dev"), "lookup", json!({"n": 1}));
    let (r, n) = walks(hand_built, call()).await;
    assert!(matches!(r, ToolResponse::Completed(_)), "{r:?}");
    assert_eq!(n, 1);
    // A layer used alone decides for itself.
    let (r, n) = walks(AirGapLayer::new(h.clone()).layer(tool(&hits)), call()).await;
    assert!(matches!(r, ToolResponse::Completed(_)), "{r:?}");
    assert_eq!(n, 1);
    let gate = ApprovalGateLayer::new(h).layer(tool(&hits));
    let (r, n) = walks(gate, call()).await;
    assert!(matches!(r, ToolResponse::Completed(_)), "{r:?}");
    assert_eq!(n, 1);
    assert_eq!(hits.load(Ordering::SeqCst), 3);
}

#[tokio::test(flavor = "current_thread")]
async fn r23_nested_stacks_of_two_handles_never_decide_by_each_others_snapshot() {
    // The outer stack lets everything run; the inner one denies `lookup` and does not
    // know `fetch`.
    let permissive = handle(
        r#"{"tools": [{"kind": "http", "name": "lookup"}, {"kind": "http", "name": "fetch"}],
            "agents": [{"name": "dev", "allowed_tools": ["lookup", "fetch"]}]}"#,
    );
    let strict = handle(
        r#"{"tools": [{"kind": "http", "name": "lookup", "approval": "deny"}],
            "agents": [{"name": "dev", "allowed_tools": ["lookup"]}]}"#,
    );
    let hits = Arc::new(AtomicUsize::new(0));
    let inner = ToolgateLayer::builder(strict.clone()).build().unwrap();
    let outer = ToolgateLayer::builder(permissive.clone()).build().unwrap();
    let nested = ServiceBuilder::new()
        .layer(outer)
        .layer(inner)
        .service(tool(&hits));
    let dev = AgentRef::profile("dev");
    let r = nested
        .clone()
        .oneshot(ToolCall::new(dev.clone(), "lookup", json!({})))
        .await
        .unwrap();
    let refusal = r
        .refusal()
        .expect("the inner stack decides by its own snapshot");
    assert_eq!(
        (refusal.code, refusal.decided_by),
        (RefusalCode::Denied, Check::AgentMode)
    );
    let r = nested
        .clone()
        .oneshot(ToolCall::new(dev.clone(), "fetch", json!({})))
        .await
        .unwrap();
    assert_eq!(r.refusal().map(|r| r.code), Some(RefusalCode::UnknownTool));
    assert_eq!(hits.load(Ordering::SeqCst), 0);

    // A call arriving with another handle's pinned decision (one that runs) is decided
    // again by this handle: the pin is bound to the handle that made it.
    let mut call = ToolCall::new(dev.clone(), "lookup", json!({}));
    assert!(permissive.decide(&mut call).decision().runs());
    let pin = call.extensions.get::<toolgate::Pinned>().unwrap();
    assert!(pin.is_from(&permissive) && !pin.is_from(&strict));
    let r = ExposureLayer::new(strict.clone())
        .layer(ApprovalGateLayer::new(strict).layer(tool(&hits)))
        .oneshot(call)
        .await
        .unwrap();
    assert_eq!(r.refusal().map(|r| r.code), Some(RefusalCode::Denied));
    assert_eq!(hits.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "current_thread")]
async fn r23_a_clone_of_the_handle_shares_its_pins() {
    let h = handle(CONFIG);
    let mut call = ToolCall::new(AgentRef::profile("dev"), "lookup", json!({"n": 1}));
    let first = h.decide(&mut call);
    let before = input_bounds_walks();
    let again = h.clone().decide(&mut call);
    assert_eq!(
        input_bounds_walks(),
        before,
        "read from the pin, not decided again"
    );
    assert!(Arc::ptr_eq(first.governance(), again.governance()));
    assert_eq!(again.entry().unwrap().name, "lookup");
    assert_eq!(again.agent().unwrap().name, "dev");
}
