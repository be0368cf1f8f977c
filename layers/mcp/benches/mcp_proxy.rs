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
//! - `proxy_round_trip/upstream_only`: the same call sent by the `GovernedServer`'s own
//!   upstream connection (`McpGateway::service`, no governance, no downstream hop): what
//!   `through_toolgate` costs less the downstream hop and the governed stack.
//! - `proxy_round_trip/duplex_hop`: an rmcp client calling a trivial in-process rmcp server
//!   (answers `echo` at once) over the same tokio duplex pipe: the downstream hop alone.
//! - With `MCP_PROXY_AB=ROUNDS` set, first an interleaved A/B loop: each round runs 200
//!   `straight` calls and 200 `through_toolgate` calls (the order alternating by round) and
//!   prints both medians and their ratio, then the median ratio over the rounds; the
//!   criterion groups follow. Criterion runs its functions one after the other, so a load
//!   change on a shared machine lands on one of them; the interleaved ratio does not.
//! - `proxy_list/list_1000_tools`: `tools/list` over the same downstream pipe, for an agent
//!   allowed 1,000 MCP tools of one server (registered from the configuration); and
//!   `proxy_list/project_1000_tools`: the projection alone (exposure + MCP tool records).
//!
//! Skips with a message when server-everything is not installed
//! (`layers/mcp/scripts/install-npm-servers.sh`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a bench: a failed setup stops it"
)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock, ServerCapabilities};
use rmcp::model::{ServerConfig, Tool};
use rmcp::service::RequestContext;
use rmcp::transport::TokioChildProcess;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Map, Value, json};
use toolgate::GovernanceHandle;
use toolgate_engine::config::{Format, load_str};
use toolgate_mcp::McpServerConfig;
use toolgate_mcp::serve::{GovernedServer, ServeConfig, WireNames, list_for};
use tower::ServiceExt as _;

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

/// An rmcp server that answers `echo` at once: the downstream hop with nothing behind it.
#[derive(Clone)]
struct Echo;

impl ServerHandler for Echo {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListToolsResult, ErrorData> {
        Ok(rmcp::model::ListToolsResult::with_all_items(vec![
            Tool::new("echo", "Echoes.", Arc::new(Map::new())),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, ErrorData> {
        let text = request
            .arguments
            .and_then(|a| a.get("message").and_then(|m| m.as_str().map(str::to_owned)))
            .unwrap_or_default();
        Ok(CallToolResult::success(vec![ContentBlock::text(format!("Echo: {text}"))]).into())
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

/// Interleaved A/B rounds of `straight` against `through_toolgate` (see the module docs).
fn interleaved(
    rt: &tokio::runtime::Runtime,
    rounds: usize,
    straight: &rmcp::Peer<rmcp::RoleClient>,
    through: &rmcp::Peer<rmcp::RoleClient>,
    args: &Map<String, Value>,
) {
    const CALLS: usize = 200;
    let run = |peer: &rmcp::Peer<rmcp::RoleClient>, tool: &'static str| {
        rt.block_on(async {
            let mut times = Vec::with_capacity(CALLS);
            for _ in 0..CALLS {
                let t = std::time::Instant::now();
                peer.call_tool(CallToolRequestParams::new(tool).with_arguments(args.clone()))
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
                times.push(t.elapsed());
            }
            median(times)
        })
    };
    let mut ratios = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let (s, t) = if round % 2 == 0 {
            let s = run(straight, "echo");
            (s, run(through, "everything__echo"))
        } else {
            let t = run(through, "everything__echo");
            (run(straight, "echo"), t)
        };
        let ratio = t.as_secs_f64() / s.as_secs_f64();
        eprintln!("A/B round {round}: straight {s:?}, through_toolgate {t:?}, ratio {ratio:.3}");
        ratios.push(ratio);
    }
    ratios.sort_by(f64::total_cmp);
    eprintln!(
        "A/B median ratio over {rounds} rounds: {:.3}",
        ratios[ratios.len() / 2]
    );
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
        "approval": {"channel": "elicitation"},
        "tools": tools,
        "agents": [{"name": "bench", "allowed_tools": allowed}]
    });
    let handle = GovernanceHandle::new(
        load_str(&big.to_string(), Format::Json).unwrap_or_else(|e| panic!("{e}")),
    );
    let empty = ServeConfig {
        servers: Vec::new(),
        tokens: HashMap::new(),
        token_names: HashMap::new(),
        call_timeout: Duration::from_secs(30),
        wire_names: WireNames::Qualified,
        jwt: None,
        gateway: Default::default(),
        hooks: Vec::new(),
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
    let text = r#"{"approval": {"channel": "elicitation"},
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
        token_names: HashMap::new(),
        call_timeout: Duration::from_secs(30),
        wire_names: WireNames::Qualified,
        jwt: None,
        gateway: Default::default(),
        hooks: Vec::new(),
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

    if let Some(rounds) = std::env::var("MCP_PROXY_AB")
        .ok()
        .and_then(|r| r.parse::<usize>().ok())
    {
        interleaved(&rt, rounds.max(1), straight.peer(), through.peer(), &args);
    }
    let upstream = proxy.gateway().service().with_insecure_no_permit();
    let hop = rt.block_on(async {
        let (client_end, server_end) = tokio::io::duplex(1 << 20);
        tokio::spawn(async move {
            if let Ok(s) = Echo.serve(server_end).await {
                let _ = s.waiting().await;
            }
        });
        ().serve(client_end)
            .await
            .unwrap_or_else(|e| panic!("echo client: {e}"))
    });

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
    g.bench_function("upstream_only", |b| {
        b.to_async(rt.as_ref()).iter(|| {
            let svc = upstream.clone();
            let call = toolgate_core::ToolCall::new(
                toolgate_core::AgentRef::profile("bench"),
                "everything__echo",
                Value::Object(args.clone()),
            );
            async move {
                let r = svc.oneshot(call).await.unwrap_or_else(|e| panic!("{e}"));
                assert!(
                    matches!(r, toolgate_core::ToolResponse::Completed(_)),
                    "{r:?}"
                );
                r
            }
        });
    });
    g.bench_function("duplex_hop", |b| {
        b.to_async(rt.as_ref()).iter(|| {
            let peer = hop.peer().clone();
            let args = args.clone();
            async move {
                peer.call_tool(CallToolRequestParams::new("echo").with_arguments(args))
                    .await
                    .unwrap_or_else(|e| panic!("{e}"))
            }
        });
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
