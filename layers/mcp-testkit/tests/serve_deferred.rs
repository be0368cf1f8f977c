//! Issue 23 item 2: deferred tools (`mcp.deferred_tools: true`) through a real
//! `GovernedServer` in front of our drift server, an rmcp client per agent: the agent sees
//! `tool_search` and `tool_call`; search draws only from its exposure (R13); `tool_call` is
//! the inner call through the whole governed stack, audited under the inner tool's name
//! (R38).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;

use std::collections::HashMap;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use toolgate::GovernanceHandle;
use toolgate_engine::config::{Format, load_str};
use toolgate_mcp::serve::{GatewayOptions, GovernedServer, ServeConfig, WireNames};

async fn server(audit: &std::path::Path) -> GovernedServer {
    let text = json!({
        "audit": {"file": audit},
        "agents": [
            {"name": "dev", "allowed_tools": ["drift__lookup", "drift__bare", "drift__stats"]},
            {"name": "viewer", "allowed_tools": ["drift__lookup"]}
        ]
    })
    .to_string();
    let handle = GovernanceHandle::new(load_str(&text, Format::Json).unwrap());
    let config = ServeConfig {
        servers: vec![common::drift("drift")],
        tokens: HashMap::new(),
        token_names: HashMap::new(),
        call_timeout: Duration::from_secs(20),
        wire_names: WireNames::Qualified,
        jwt: None,
        gateway: GatewayOptions {
            deferred_tools: true,
            ..GatewayOptions::default()
        },
        hooks: Vec::new(),
    };
    GovernedServer::start(handle, &config, None).await.unwrap()
}

async fn connect(server: &GovernedServer, agent: &str) -> RunningService<RoleClient, ()> {
    let (client_end, server_end) = tokio::io::duplex(256 * 1024);
    let server = server.clone();
    let agent = agent.to_owned();
    tokio::spawn(async move { server.serve_io(&agent, server_end).await });
    ().serve(client_end).await.unwrap()
}

async fn call(client: &RunningService<RoleClient, ()>, tool: &str, args: Value) -> CallToolResult {
    let Value::Object(args) = args else { panic!() };
    client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(args))
        .await
        .unwrap()
}

fn found(r: &CallToolResult) -> Vec<String> {
    r.structured_content.as_ref().unwrap()["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

fn text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join(" ")
}

fn code(r: &CallToolResult) -> Option<String> {
    r.structured_content.as_ref()?["toolgate"]["code"]
        .as_str()
        .map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_r38_deferred_tools_search_the_exposure_and_call_through_the_governed_stack() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let server = server(&audit).await;
    let dev = connect(&server, "dev").await;
    let viewer = connect(&server, "viewer").await;

    // Two tools instead of the list.
    let mut listed: Vec<String> = dev
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    listed.sort();
    assert_eq!(listed, ["tool_call", "tool_search"]);

    // R13: search finds only what the agent is exposed to.
    let r = call(&dev, "tool_search", json!({"query": "bare"})).await;
    assert_eq!(found(&r), ["drift__bare"], "{r:?}");
    let r = call(&viewer, "tool_search", json!({"query": "bare"})).await;
    assert!(found(&r).is_empty(), "{r:?}");
    let r = call(&viewer, "tool_search", json!({"query": "record key"})).await;
    assert_eq!(found(&r), ["drift__lookup"], "{r:?}");
    let schema = &r.structured_content.as_ref().unwrap()["tools"][0]["inputSchema"];
    assert_eq!(schema["required"], json!(["query"]), "{r:?}");
    // A bad search is a tool result the model reads.
    let r = call(&dev, "tool_search", json!({"limit": 0})).await;
    assert_eq!(r.is_error, Some(true));
    assert_eq!(code(&r).as_deref(), Some("invalid_input"));

    // R38: the inner call, through the whole stack.
    let r = call(
        &dev,
        "tool_call",
        json!({"name": "drift__lookup", "arguments": {"query": "k1"}}),
    )
    .await;
    assert_ne!(r.is_error, Some(true), "{r:?}");
    assert!(text(&r).contains("k1"), "{r:?}");
    // Not the viewer's: refused by exposure, naming the inner tool, never sent.
    let r = call(&viewer, "tool_call", json!({"name": "drift__bare"})).await;
    assert_eq!(code(&r).as_deref(), Some("not_allowed"), "{r:?}");
    assert!(text(&r).contains("drift__bare"), "{r:?}");
    let stats = call(&dev, "tool_call", json!({"name": "drift__stats"})).await;
    assert_eq!(
        stats.structured_content.as_ref().unwrap()["calls"]["bare"].as_u64(),
        None,
        "{stats:?}"
    );
    // A malformed wrapper is refused before anything.
    let r = call(
        &dev,
        "tool_call",
        json!({"name": "drift__lookup", "arguments": [1]}),
    )
    .await;
    assert_eq!(code(&r).as_deref(), Some("invalid_input"), "{r:?}");

    // The audit trail names the inner tools, never the wrapper.
    let trail = std::fs::read_to_string(&audit).unwrap();
    let tools: Vec<String> = trail
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter_map(|r| r["tool"].as_str().map(str::to_owned))
        .collect();
    assert!(tools.contains(&String::from("drift__lookup")), "{trail}");
    assert!(tools.contains(&String::from("drift__bare")), "{trail}");
    assert!(!trail.contains("\"tool_call\""), "{trail}");
    dev.cancel().await.unwrap();
    viewer.cancel().await.unwrap();
}
