//! A permit names its stack and its agent (R38): the tool side of one stack sends only what
//! the approval gate of that same stack passed, for the agent it passed it for.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;
use toolgate::approval::ApprovalGateLayer;
use toolgate::{GovernanceHandle, RequirePermitLayer};
use toolgate_core::{AgentRef, Check, RefusalCode, ToolCall, ToolOutput, ToolResponse};
use toolgate_engine::config::{Format, load_str};
use tower::{ServiceBuilder, ServiceExt, service_fn};

const CONFIG: &str = r#"{
    "tools": [{"kind": "http", "name": "lookup"}],
    "agents": [{"name": "dev", "allowed_tools": ["lookup"]},
               {"name": "ops", "allowed_tools": ["lookup"]}]
}"#;

fn handle() -> GovernanceHandle {
    GovernanceHandle::new(load_str(CONFIG, Format::Json).unwrap())
}

fn counted(
    hits: &Arc<AtomicUsize>,
) -> impl tower::Service<
    ToolCall,
    Response = ToolResponse,
    Error = Infallible,
    Future = impl Send + 'static,
> + Clone
+ Send
+ 'static {
    let hits = Arc::clone(hits);
    service_fn(move |_c: ToolCall| {
        hits.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, Infallible>(ToolResponse::Completed(ToolOutput::new(json!("ok")))) }
    })
}

fn dev() -> ToolCall {
    ToolCall::new(AgentRef::profile("dev"), "lookup", json!({"q": 1}))
}

#[tokio::test(flavor = "current_thread")]
async fn r38_a_permit_minted_by_another_stacks_gate_is_refused() {
    // Two stacks with the same configuration: A's gate passes the call, B's tool side
    // must not take A's permit for its own.
    let (a, b) = (handle(), handle());
    let hits = Arc::new(AtomicUsize::new(0));
    let crossed = ServiceBuilder::new()
        .layer(ApprovalGateLayer::new(a.clone()))
        .layer(RequirePermitLayer::new(b))
        .service(counted(&hits));
    let r = crossed.oneshot(dev()).await.unwrap();
    let refusal = r.refusal().unwrap_or_else(|| panic!("{r:?}"));
    assert_eq!(
        (refusal.code, refusal.decided_by),
        (RefusalCode::Rejected, Check::Permit)
    );
    assert!(refusal.reasons[0].contains("another stack"), "{refusal:?}");
    assert_eq!(hits.load(Ordering::SeqCst), 0, "the tool never ran");

    // The same gate and tool side of one stack (a clone of its handle) send it.
    let own = ServiceBuilder::new()
        .layer(ApprovalGateLayer::new(a.clone()))
        .layer(RequirePermitLayer::new(a.clone()))
        .service(counted(&hits));
    let r = own.oneshot(dev()).await.unwrap();
    assert!(matches!(r, ToolResponse::Completed(_)), "{r:?}");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "current_thread")]
async fn r38_an_agent_changed_after_the_gate_is_refused() {
    // `ops` may call `lookup` as well: only the permit's binding tells the calls apart.
    let h = handle();
    let hits = Arc::new(AtomicUsize::new(0));
    for to in [
        AgentRef::profile("ops"),
        AgentRef::subagent("dev", "helper"),
    ] {
        let swapped = ServiceBuilder::new()
            .layer(ApprovalGateLayer::new(h.clone()))
            .map_request(move |mut c: ToolCall| {
                c.agent = to.clone();
                c
            })
            .layer(RequirePermitLayer::new(h.clone()))
            .service(counted(&hits));
        let r = swapped.oneshot(dev()).await.unwrap();
        let refusal = r.refusal().unwrap_or_else(|| panic!("{r:?}"));
        assert_eq!(
            (refusal.code, refusal.decided_by),
            (RefusalCode::Rejected, Check::Permit)
        );
        assert!(refusal.reasons[0].contains("agent"), "{refusal:?}");
    }
    assert_eq!(hits.load(Ordering::SeqCst), 0, "the tool never ran");
}
