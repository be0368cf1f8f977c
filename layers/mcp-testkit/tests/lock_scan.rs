//! Issue 23 item 3: the definition lock (`toolgate.lock`, `mcp.locked`) and the description
//! scanner (`mcp.scan`), against our own drift server (the `toolgate-mcp-drift-server`
//! binary over stdio), whose `lookup` changes its description on request.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;

use std::sync::Arc;

use common::{drift, next_event};
use serde_json::{Value, json};
use toolgate::audit::MemorySink;
use toolgate::{GovernanceHandle, ToolgateLayer};
use toolgate_core::{AgentRef, ToolCall, ToolIdentity, ToolResponse};
use toolgate_engine::{AgentProfile, Governance};
use toolgate_mcp::lock::Lockfile;
use toolgate_mcp::scan::ScanMode;
use toolgate_mcp::{McpGateway, SchemaValidationLayer, ToolChange};
use tower::{ServiceBuilder, ServiceExt};

fn handle() -> GovernanceHandle {
    GovernanceHandle::new(
        Governance::builder()
            .agent(AgentProfile::new("dev").allow(["drift__lookup", "drift__stats"]))
            .build()
            .unwrap(),
    )
}

/// Calls a drift server tool directly, outside governance (test control).
async fn raw(gateway: &McpGateway, tool: &str, input: Value) -> ToolResponse {
    gateway
        .service()
        .with_insecure_no_permit()
        .oneshot(ToolCall::by_identity(
            AgentRef::profile("test"),
            ToolIdentity::mcp("drift", tool),
            input,
        ))
        .await
        .unwrap()
}

async fn lookups(gateway: &McpGateway) -> u64 {
    let ToolResponse::Completed(out) = raw(gateway, "stats", json!({})).await else {
        panic!("stats failed")
    };
    out.structured.unwrap()["calls"]["lookup"]
        .as_u64()
        .unwrap_or(0)
}

fn shown(gateway: &McpGateway) -> Vec<String> {
    gateway
        .model_tools("dev")
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect()
}

async fn governed_lookup(handle: &GovernanceHandle, gateway: &McpGateway) -> ToolResponse {
    let layer = ToolgateLayer::builder(handle.clone())
        .build()
        .unwrap()
        .validate_input(SchemaValidationLayer::new(handle.clone()));
    ServiceBuilder::new()
        .layer(layer)
        .service(gateway.service())
        .oneshot(ToolCall::new(
            AgentRef::profile("dev"),
            "drift__lookup",
            json!({"query": "k"}),
        ))
        .await
        .unwrap()
}

/// The lock of the drift server as it starts (clean), from a gateway of its own.
async fn clean_lock() -> Lockfile {
    let gateway = McpGateway::new(handle());
    gateway.connect(drift("drift")).await.unwrap();
    let lock = gateway.lockfile();
    gateway.shutdown().await;
    lock
}

#[tokio::test]
async fn issue23_a_locked_server_that_changes_a_description_is_withheld() {
    let lock = clean_lock().await;
    assert!(lock.servers["drift"].contains_key("lookup"), "{lock:?}");
    // The file round-trips.
    let lock = Lockfile::parse(&lock.to_json()).unwrap();

    let handle = handle();
    let sink = Arc::new(MemorySink::new());
    let gateway = McpGateway::builder(handle.clone())
        .locked(lock.clone())
        .audit(sink.clone())
        .build();
    let mut events = gateway.subscribe();
    let discovery = gateway.connect(drift("drift")).await.unwrap();
    assert!(
        !discovery
            .changes()
            .iter()
            .any(|c| matches!(c, ToolChange::Withheld { .. })),
        "the locked definitions pass: {discovery:?}"
    );
    assert!(shown(&gateway).contains(&String::from("drift__lookup")));
    assert!(gateway.lockfile().diff(&lock).is_empty());

    // The rug pull: `lookup`'s description changes.
    raw(&gateway, "set_mode", json!({"mode": "description"})).await;
    let e = next_event(&mut events, "drift", |e| {
        e.changes()
            .iter()
            .any(|c| matches!(c, ToolChange::Withheld { .. }))
    })
    .await;
    let Some(ToolChange::Withheld { tool, reasons, .. }) = e
        .changes()
        .iter()
        .find(|c| matches!(c, ToolChange::Withheld { .. }))
    else {
        panic!("{e:?}")
    };
    assert_eq!(tool, "drift__lookup");
    assert!(
        reasons.iter().any(|r| r.contains("mcp.locked")
            && r.contains("`lookup` differs from `toolgate.lock`")
            && r.contains("the description hash differs")),
        "{reasons:?}"
    );
    // `toolgate mcp lock --check` would fail: the lock differs from the listing.
    let diff = lock.diff(&gateway.lockfile());
    assert_eq!(diff.len(), 1, "{diff:?}");
    assert!(diff[0].what.contains("description"), "{diff:?}");

    // Withheld: not shown, refused through the whole stack, never sent.
    assert!(!shown(&gateway).contains(&String::from("drift__lookup")));
    assert!(shown(&gateway).contains(&String::from("drift__stats")));
    let r = governed_lookup(&handle, &gateway).await;
    assert!(r.is_refused(), "{r:?}");
    let r = raw(&gateway, "lookup", json!({"query": "k"})).await;
    let why = r.refusal().unwrap().reasons.join(" ");
    assert!(why.contains("withheld"), "{why}");
    assert_eq!(
        lookups(&gateway).await,
        0,
        "the withheld tool was never called"
    );
    // What the snapshot says of it (spans, `explain`): withheld by the lock, naming the
    // tool and the hash that differs — not "removed by its server", which it was not.
    assert_withheld_as(&handle, "drift__lookup", "the description hash differs");

    // Audited.
    let lines = sink.lines();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("\"withheld\"") && l.contains("drift__lookup")),
        "{lines:?}"
    );

    // Listed again as locked: passes again.
    raw(&gateway, "set_mode", json!({"mode": "clean"})).await;
    next_event(&mut events, "drift", |e| {
        matches!(e.change("drift__lookup"), Some(ToolChange::Changed { .. }))
    })
    .await;
    assert!(shown(&gateway).contains(&String::from("drift__lookup")));
    gateway.shutdown().await;
}

/// The snapshot's description of a withheld tool that was registered before: what happened
/// to it (`what`), not that its server removed it.
fn assert_withheld_as(handle: &GovernanceHandle, tool: &str, what: &str) {
    let governance = handle.load();
    let entry = governance.catalog().get(tool).unwrap();
    let description = entry.description().unwrap_or_default();
    assert!(
        description.contains(&format!("`{tool}` is withheld")) && description.contains(what),
        "{description}"
    );
    assert!(
        !description.contains("removed by its server"),
        "{description}"
    );
}

#[tokio::test]
async fn issue23_a_server_the_lock_does_not_name_has_every_tool_withheld() {
    let gateway = McpGateway::builder(handle())
        .locked(Lockfile::default())
        .build();
    let discovery = gateway.connect(drift("drift")).await.unwrap();
    assert!(
        discovery
            .changes()
            .iter()
            .all(|c| matches!(c, ToolChange::Withheld { .. })),
        "{discovery:?}"
    );
    assert!(shown(&gateway).is_empty());
    gateway.shutdown().await;
}

#[tokio::test]
async fn issue23_the_scanner_flags_an_instruction_to_the_model_and_withholds_it_when_told() {
    for mode in [ScanMode::Warn, ScanMode::Withhold] {
        let handle = handle();
        let gateway = McpGateway::builder(handle.clone()).scan(mode).build();
        let mut events = gateway.subscribe();
        let discovery = gateway.connect(drift("drift")).await.unwrap();
        assert!(
            !discovery
                .changes()
                .iter()
                .any(|c| matches!(c, ToolChange::Flagged { .. })),
            "the clean drift server has nothing to flag: {discovery:?}"
        );
        raw(&gateway, "set_mode", json!({"mode": "description"})).await;
        let e = next_event(&mut events, "drift", |e| {
            e.change("drift__lookup").is_some()
        })
        .await;
        let Some(ToolChange::Flagged { findings, .. }) = e
            .changes()
            .iter()
            .find(|c| matches!(c, ToolChange::Flagged { .. }))
        else {
            panic!("{e:?}")
        };
        assert!(
            findings.iter().any(|f| f.contains("model_instruction")),
            "{findings:?}"
        );
        let withheld = e
            .changes()
            .iter()
            .any(|c| matches!(c, ToolChange::Withheld { .. }));
        assert_eq!(withheld, mode == ScanMode::Withhold, "{mode:?}: {e:?}");
        if mode == ScanMode::Withhold {
            // Registered at discovery, withheld now: described by the finding.
            assert_withheld_as(
                &handle,
                "drift__lookup",
                "model_instruction in `description`",
            );
        }
        assert_eq!(
            shown(&gateway).contains(&String::from("drift__lookup")),
            mode == ScanMode::Warn
        );
        gateway.shutdown().await;
    }
}
