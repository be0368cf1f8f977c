//! Resident memory of `toolgate mcp serve --http` with 10,000 upstream tools and 1,000 open
//! sessions (issue 26, item 7). Not timing: the release binary's `VmRSS` from
//! `/proc/<pid>/status`, read at each step.
//!
//! The upstream is this bench run as an MCP server over stdio (`SERVE_MEMORY_UPSTREAM=N`):
//! N tools `tool_00000…`, each with a one-sentence description, a two-property input schema
//! and read-only annotations. The proxy is `target/release/toolgate mcp serve --http
//! 127.0.0.1:PORT --agent bench` (`TOOLGATE` overrides the binary) with a configuration
//! allowing `many__*` to `bench`. Steps: started (the 10,000 tools discovered and
//! registered); one session that listed the tools; then `SERVE_MEMORY_SESSIONS` (1,000)
//! sessions open, none listing; then every one of them having listed the tools once. Per
//! session = (RSS at the step − RSS with one session) ÷ sessions.
//!
//! ```text
//! cargo build --release -p toolgate-cli
//! cargo bench -p toolgate-mcp --features serve --bench serve_memory
//! ```
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a bench: a failed setup stops it"
)]

use std::borrow::Cow;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Map, json};

fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[derive(Clone)]
struct Many(Arc<Vec<Tool>>);

impl ServerHandler for Many {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.0.as_ref().clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, ErrorData> {
        Ok(
            CallToolResult::success(vec![ContentBlock::text(format!("ran {}", request.name))])
                .into(),
        )
    }
}

fn upstream(n: usize) {
    let schema = json!({"type": "object", "properties": {
        "query": {"type": "string", "description": "What to look for."},
        "limit": {"type": "integer", "minimum": 1, "maximum": 100}}, "required": ["query"]});
    let Some(schema) = schema.as_object().cloned() else {
        return;
    };
    let schema = Arc::new(schema);
    let tools: Vec<Tool> = (0..n)
        .map(|i| {
            Tool::new(
                Cow::Owned(format!("tool_{i:05}")),
                Cow::Owned(format!(
                    "Looks up record {i} of the inventory and returns its fields."
                )),
                Arc::clone(&schema),
            )
            .with_annotations(ToolAnnotations::from_raw(
                None,
                Some(true),
                Some(false),
                Some(true),
                Some(false),
            ))
        })
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    rt.block_on(async move {
        let running = Many(Arc::new(tools))
            .serve((tokio::io::stdin(), tokio::io::stdout()))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let _ = running.waiting().await;
    });
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn main() {
    if let Some(n) = std::env::var("SERVE_MEMORY_UPSTREAM")
        .ok()
        .and_then(|n| n.parse().ok())
    {
        upstream(n);
        return;
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let toolgate = std::env::var_os("TOOLGATE")
        .map_or_else(|| root.join("target/release/toolgate"), PathBuf::from);
    if !toolgate.is_file() {
        eprintln!(
            "serve_memory: skipped ({} is missing: cargo build --release -p toolgate-cli)",
            toolgate.display()
        );
        return;
    }
    let tools = env_num("SERVE_MEMORY_TOOLS", 10_000);
    let sessions = env_num("SERVE_MEMORY_SESSIONS", 1_000);
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let config = dir.path().join("memory.json");
    let text = json!({
        "approval": {"channel": "elicitation"},
        "servers": {"many": {"trust_tool_annotations": true}},
        "agents": [{"name": "bench", "allowed_tools": ["many__*"]}],
        "mcp": {"servers": {"many": {"command": exe.display().to_string(),
            "env": {"SERVE_MEMORY_UPSTREAM": tools.to_string()}}},
            "call_timeout_secs": 60}
    });
    std::fs::write(&config, text.to_string()).unwrap_or_else(|e| panic!("{e}"));
    let mut child = Command::new(&toolgate)
        .args([
            "mcp",
            "serve",
            "--http",
            "127.0.0.1:0",
            "--agent",
            "bench",
            "--config",
        ])
        .arg(&config)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    let pid = child.id();
    // The address is on standard error or output ("… on http://127.0.0.1:PORT/mcp").
    let err = child.stderr.take().unwrap_or_else(|| panic!("no stderr"));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let out = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let url = {
        let (otx, orx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = otx.send(line);
            }
        });
        let mut found = None;
        for _ in 0..600 {
            for line in rx.try_iter().chain(orx.try_iter()) {
                if let Some(at) = line.find("http://127.0.0.1:") {
                    let rest = line.get(at..).unwrap_or_default();
                    let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
                    found = Some(
                        rest.get(..end)
                            .unwrap_or_default()
                            .trim_end_matches('/')
                            .to_owned(),
                    );
                }
            }
            if found.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        found.unwrap_or_else(|| panic!("toolgate mcp serve never said where it listens"))
    };
    let url = if url.ends_with("/mcp") {
        url
    } else {
        format!("{url}/mcp")
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    rt.block_on(async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let started = rss_kib(pid);
        let first =
            ().serve(StreamableHttpClientTransport::from_uri(url.as_str()))
                .await
                .unwrap_or_else(|e| panic!("{url}: {e}"));
        let listed = first
            .list_all_tools()
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .len();
        assert_eq!(listed, tools, "the agent sees every tool");
        let mut args = Map::new();
        args.insert("query".into(), json!("x"));
        let r = first
            .call_tool(CallToolRequestParams::new("many__tool_00001").with_arguments(args))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(r.is_error, Some(true), "{r:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
        let one = rss_kib(pid);
        let mut open = Vec::with_capacity(sessions);
        for _ in 0..sessions {
            open.push(
                ().serve(StreamableHttpClientTransport::from_uri(url.as_str()))
                    .await
                    .unwrap_or_else(|e| panic!("{e}")),
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let opened = rss_kib(pid);
        for c in &open {
            let n = c
                .list_all_tools()
                .await
                .unwrap_or_else(|e| panic!("{e}"))
                .len();
            assert_eq!(n, tools);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let all_listed = rss_kib(pid);
        let per = |at: u64| (at.saturating_sub(one)) as f64 / sessions as f64;
        println!("toolgate mcp serve, {tools} upstream tools (pid {pid}), VmRSS:");
        println!("  started, tools registered:                {started} KiB");
        println!("  one session, tools listed, one call:      {one} KiB");
        println!(
            "  + {sessions} sessions open:                   {opened} KiB ({:.1} KiB per session)",
            per(opened)
        );
        println!(
            "  + each of them listed the tools once:     {all_listed} KiB ({:.1} KiB per session)",
            per(all_listed)
        );
        for c in open {
            let _ = c.cancel().await;
        }
        let _ = first.cancel().await;
    });
    let _ = child.kill();
    let _ = child.wait();
}
