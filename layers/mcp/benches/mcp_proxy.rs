//! `toolgate_mcp::serve` (issue 15): what the governed MCP server adds to a `tools/call`, and
//! how long `tools/list` of 1,000 upstream tools takes for one agent.
//!
//! - `proxy_round_trip/straight`: an rmcp client calls server-everything's `echo` straight
//!   over stdio (a Node child process);
//! - `proxy_round_trip/through_toolgate`: an rmcp client calls `everything__echo` on a
//!   [`GovernedServer`] (downstream in-process over a tokio duplex pipe, so the client's own
//!   stdio pipe is not measured twice), which decides it with the whole composite stack
//!   (audit off, schema validation, exposure, posture on: `echo` is a trusted read-only tool
//!   and runs without a question) and sends it to its own server-everything over stdio.
//!   Both run in one criterion group, one after the other.
//! - `proxy_list/list_1000_tools`: `tools/list` over the same downstream pipe, for an agent
//!   allowed 1,000 MCP tools of one server (registered from the configuration); and
//!   `proxy_list/project_1000_tools`: the projection alone (exposure + MCP tool records).
//!
//! Skips with a message when server-everything is not installed
//! (`layers/mcp/scripts/install-npm-servers.sh`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;
use serde_json::{Map, Value, json};
use toolgate::GovernanceHandle;
use toolgate::engine::config::{Format, load_str};
use toolgate_mcp::McpServerConfig;
use toolgate_mcp::serve::{GovernedServer, ServeConfig, WireNames, list_for};

fn everything() -> Option<PathBuf> {
    let dir = match std::env::var_os("TOOLGATE_MCP_SERVERS") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.tmp/mcp-servers"),
    };
    let entry = dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    entry.is_file().then_some(entry)
}

async fn client_of(
    server: &GovernedServer,
    agent: &str,
) -> rmcp::service::RunningService<rmcp::RoleClient, ()> {
    let (client_end, server_end) = tokio::io::duplex(1 << 20);
    let server = server.clone();
    let agent = agent.to_owned();
    tokio::spawn(async move { server.serve_io(&agent, server_end).await });
    ().serve(client_end)
        .await
        .unwrap_or_else(|e| panic!("client: {e}"))
}

fn bench(c: &mut Criterion) {
    let rt = Arc::new(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("a runtime: {e}")),
    );

    // 1,000 tools of one server, all allowed to one agent.
    let names: Vec<String> = (0..1000).map(|i| format!("t{i:04}")).collect();
    let tools: Vec<Value> = names
        .iter()
        .map(|n| {
            json!({"server": "big", "name": n, "description": format!("Tool {n}."),
                   "annotations": {"readOnlyHint": true}})
        })
        .collect();
    let allowed: Vec<String> = names.iter().map(|n| format!("big__{n}")).collect();
    let big = json!({
        "approval": {"channel": "interactive"},
        "tools": tools,
        "agents": [{"name": "bench", "allowed_tools": allowed}]
    });
    let handle = GovernanceHandle::new(
        load_str(&big.to_string(), Format::Json).unwrap_or_else(|e| panic!("{e}")),
    );
    let empty = ServeConfig {
        servers: Vec::new(),
        tokens: HashMap::new(),
        call_timeout: Duration::from_secs(30),
        wire_names: WireNames::Qualified,
    };
    let list_server = rt.block_on(async {
        GovernedServer::start(handle.clone(), &empty, None)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    });
    let lister = rt.block_on(client_of(&list_server, "bench"));
    let n = rt.block_on(async { lister.list_all_tools().await.map(|t| t.len()) });
    assert_eq!(n.ok(), Some(1000));
    let mut g = c.benchmark_group("proxy_list");
    g.bench_function("list_1000_tools", |b| {
        b.to_async(rt.as_ref()).iter(|| {
            let peer = lister.peer().clone();
            async move {
                peer.list_tools(None)
                    .await
                    .unwrap_or_else(|e| panic!("{e}"))
            }
        });
    });
    let gov = handle.load();
    g.bench_function("project_1000_tools", |b| {
        b.iter(|| list_for(&gov, "bench").unwrap_or_else(|e| panic!("{e}")));
    });
    g.finish();

    let Some(entry) = everything() else {
        eprintln!(
            "SKIPPED proxy_round_trip: server-everything is not installed; run layers/mcp/scripts/install-npm-servers.sh"
        );
        return;
    };
    let straight = rt.block_on(async {
        let mut cmd = tokio::process::Command::new("node");
        cmd.arg(&entry).arg("stdio");
        let child = TokioChildProcess::builder(cmd)
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("node: {e}"))
            .0;
        ().serve(child)
            .await
            .unwrap_or_else(|e| panic!("raw client: {e}"))
    });
    let text = r#"{"approval": {"channel": "interactive"},
        "servers": {"everything": {"trust_tool_annotations": true}},
        "behavior_gating": {"require_approval_for_non_read_only": true},
        "agents": [{"name": "bench", "allowed_tools": ["everything__echo"]}]}"#;
    let handle =
        GovernanceHandle::new(load_str(text, Format::Json).unwrap_or_else(|e| panic!("{e}")));
    let config = ServeConfig {
        servers: vec![
            McpServerConfig::stdio("everything", "node")
                .unwrap_or_else(|e| panic!("{e}"))
                .arg(entry.display().to_string()),
        ],
        tokens: HashMap::new(),
        call_timeout: Duration::from_secs(30),
        wire_names: WireNames::Qualified,
    };
    let proxy = rt.block_on(async {
        GovernedServer::start(handle, &config, None)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    });
    let through = rt.block_on(client_of(&proxy, "bench"));
    let mut args = Map::new();
    args.insert("message".into(), Value::from("hello"));
    let ok = rt.block_on(async {
        through
            .call_tool(CallToolRequestParams::new("everything__echo").with_arguments(args.clone()))
            .await
    });
    assert_eq!(ok.ok().and_then(|r| r.is_error), Some(false));

    let mut g = c.benchmark_group("proxy_round_trip");
    g.bench_function("straight", |b| {
        b.to_async(rt.as_ref()).iter(|| {
            let peer = straight.peer().clone();
            let args = args.clone();
            async move {
                peer.call_tool(CallToolRequestParams::new("echo").with_arguments(args))
                    .await
                    .unwrap_or_else(|e| panic!("{e}"))
            }
        });
    });
    g.bench_function("through_toolgate", |b| {
        b.to_async(rt.as_ref()).iter(|| {
            let peer = through.peer().clone();
            let args = args.clone();
            async move {
                peer.call_tool(CallToolRequestParams::new("everything__echo").with_arguments(args))
                    .await
                    .unwrap_or_else(|e| panic!("{e}"))
            }
        });
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
