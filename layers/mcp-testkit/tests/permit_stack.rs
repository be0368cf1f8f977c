//! R38: the MCP client service sends only what the approval gate of its own stack passed,
//! for the agent it passed it for: a permit minted by another stack's gate, or a call whose
//! agent a layer after the gate changed, is refused and nothing reaches the server.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;

use common::drift;
use serde_json::{Value, json};
use toolgate::GovernanceHandle;
use toolgate::approval::ApprovalGateLayer;
use toolgate_core::{AgentRef, Check, RefusalCode, ToolCall, ToolIdentity, ToolResponse};
use toolgate_engine::{AgentProfile, Governance};
use toolgate_mcp::McpGateway;
use tower::{ServiceBuilder, ServiceExt};

fn handle() -> GovernanceHandle {
    GovernanceHandle::new(
        Governance::builder()
            .agent(AgentProfile::new("dev").allow(["drift__lookup"]))
            .agent(AgentProfile::new("ops").allow(["drift__lookup"]))
            .build()
            .unwrap(),
    )
}

/// How many `tools/call` requests the drift server behind `gateway` received for `lookup`.
async fn lookups(gateway: &McpGateway) -> u64 {
    let r = gateway
        .service()
        .with_insecure_no_permit()
        .oneshot(ToolCall::by_identity(
            AgentRef::profile("test"),
            ToolIdentity::mcp("drift", "stats"),
            json!({}),
        ))
        .await
        .unwrap();
    let ToolResponse::Completed(out) = r else {
        panic!("stats failed: {r:?}")
    };
    out.structured.unwrap_or(Value::Null)["calls"]["lookup"]
        .as_u64()
        .unwrap_or(0)
}

fn dev_lookup() -> ToolCall {
    ToolCall::new(
        AgentRef::profile("dev"),
        "drift__lookup",
        json!({"query": "k"}),
    )
}

fn assert_permit_refusal(r: &ToolResponse, says: &str) {
    let refusal = r.refusal().unwrap_or_else(|| panic!("not refused: {r:?}"));
    assert_eq!(
        (refusal.code, refusal.decided_by),
        (RefusalCode::Rejected, Check::Permit),
        "{refusal:?}"
    );
    assert!(
        refusal.reasons.iter().any(|x| x.contains(says)),
        "{refusal:?}"
    );
}

#[tokio::test]
async fn r38_the_mcp_service_refuses_a_permit_from_another_stacks_gate() {
    // Two stacks over the same server, each with its own handle (the tool registered in
    // both): A's gate passes the call, B's service must not send it.
    let (a, b) = (handle(), handle());
    let gateway_a = McpGateway::new(a.clone());
    gateway_a.connect(drift("drift")).await.unwrap();
    let gateway_b = McpGateway::new(b.clone());
    gateway_b.connect(drift("drift")).await.unwrap();

    let crossed = ServiceBuilder::new()
        .layer(ApprovalGateLayer::new(a.clone()))
        .service(gateway_b.service());
    let r = crossed.oneshot(dev_lookup()).await.unwrap();
    assert_permit_refusal(&r, "another stack");
    assert_eq!(lookups(&gateway_b).await, 0, "nothing reached the server");

    // Its own gate's permit is sent.
    let own = ServiceBuilder::new()
        .layer(ApprovalGateLayer::new(b.clone()))
        .service(gateway_b.service());
    let r = own.oneshot(dev_lookup()).await.unwrap();
    assert!(matches!(r, ToolResponse::Completed(_)), "{r:?}");
    assert_eq!(lookups(&gateway_b).await, 1);
    gateway_a.shutdown().await;
    gateway_b.shutdown().await;
}

#[tokio::test]
async fn r38_the_mcp_service_refuses_a_call_whose_agent_changed_after_the_gate() {
    let h = handle();
    let gateway = McpGateway::new(h.clone());
    gateway.connect(drift("drift")).await.unwrap();
    let swapped = ServiceBuilder::new()
        .layer(ApprovalGateLayer::new(h.clone()))
        .map_request(|mut c: ToolCall| {
            c.agent = AgentRef::profile("ops");
            c
        })
        .service(gateway.service());
    let r = swapped.oneshot(dev_lookup()).await.unwrap();
    assert_permit_refusal(&r, "agent");
    assert_eq!(lookups(&gateway).await, 0, "nothing reached the server");
    gateway.shutdown().await;
}
