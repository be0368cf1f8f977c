//! `toolgate mcp serve --http` under 64 concurrent sessions (issue 26, item 4). Not
//! criterion: timed load phases, interleaved.
//!
//! - **direct**: 64 rmcp streamable HTTP clients, each its own session, calling
//!   server-everything's `echo` on server-everything itself (`node …/index.js
//!   streamableHttp`, its own HTTP server);
//! - **governed, N threads**: the same 64 clients calling `everything__echo` on a
//!   [`GovernedServer`] serving streamable HTTP (what `toolgate mcp serve --http` runs: every
//!   call through the composite governed stack — audit, schema, exposure, the approval gate
//!   with `echo` trusted read-only, scrubbing) on a tokio runtime of N worker threads, in a
//!   child process of this bench (so its threads are its own), in front of its own
//!   server-everything over stdio. N = 1 and 2.
//!
//! Each round runs one load phase of `HTTP_SESSIONS_SECS` seconds (default 3) on each target,
//! the order rotating by round; a phase is every session calling in a loop, one call at a
//! time. It prints calls per second, the median and p99 latency per target and round, then
//! the medians over the rounds, the governed ÷ direct ratios and the 2 ÷ 1 thread scaling.
//!
//! ```text
//! HTTP_SESSIONS_ROUNDS=3 HTTP_SESSIONS=64 cargo bench -p toolgate-mcp --features serve --bench http_sessions
//! ```
//!
//! The clients run in this process on a 2-thread runtime: on a 2-core machine the clients,
//! the proxy and node share the cores, so the scaling measured is bounded by that. Skips with a
//! message when server-everything is not installed.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a bench: a failed setup stops it"
)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{Map, Value};
use toolgate::GovernanceHandle;
use toolgate_engine::config::{Format, load_str};
use toolgate_mcp::McpServerConfig;
use toolgate_mcp::serve::{GovernedServer, ServeConfig, WireNames};

fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn everything() -> Option<PathBuf> {
    let dir = match std::env::var_os("TOOLGATE_MCP_SERVERS") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.tmp/mcp-servers"),
    };
    let entry = dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    entry.is_file().then_some(entry)
}

/// The child: a governed server on a runtime of `threads` workers; prints its address.
fn serve(threads: usize, entry: PathBuf) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    rt.block_on(async move {
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
            call_timeout: Duration::from_secs(60),
            wire_names: WireNames::Qualified,
            jwt: None,
            gateway: Default::default(),
            hooks: Vec::new(),
        };
        let server = GovernedServer::start(handle, &config, None)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let addr = "127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}"));
        server
            .serve_http(addr, Some("bench"), |bound| println!("{bound}"))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    });
}

struct Target {
    name: String,
    url: String,
    tool: &'static str,
    child: Child,
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn governed(threads: usize) -> Target {
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("{e}"));
    let mut child = Command::new(exe)
        .env("HTTP_SESSIONS_SERVE", threads.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    let mut line = String::new();
    let out = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    BufReader::new(out)
        .read_line(&mut line)
        .unwrap_or_else(|e| panic!("{e}"));
    Target {
        name: format!(
            "governed, {threads} thread{}",
            if threads == 1 { "" } else { "s" }
        ),
        url: format!("http://{}/mcp", line.trim()),
        tool: "everything__echo",
        child,
    }
}

fn direct(entry: &PathBuf) -> Target {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("{e}"));
    let mut child = Command::new("node")
        .arg(entry)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("node: {e}"));
    let err = child.stderr.take().unwrap_or_else(|| panic!("no stderr"));
    let mut lines = BufReader::new(err).lines();
    for l in lines.by_ref() {
        if l.unwrap_or_default().contains("listening") {
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    Target {
        name: "direct".into(),
        url: format!("http://127.0.0.1:{port}/mcp"),
        tool: "echo",
        child,
    }
}

struct Phase {
    calls: usize,
    per_sec: f64,
    median: Duration,
    p99: Duration,
}

async fn phase(target: &Target, sessions: usize, secs: u64) -> Phase {
    let mut clients = Vec::new();
    for _ in 0..sessions {
        let transport = StreamableHttpClientTransport::from_uri(target.url.as_str());
        clients.push(Arc::new(
            ().serve(transport)
                .await
                .unwrap_or_else(|e| panic!("{}: {e}", target.name)),
        ));
    }
    let start = Instant::now();
    let until = start + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for (n, client) in clients.iter().enumerate() {
        let client = Arc::clone(client);
        let tool = target.tool;
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut i = 0usize;
            while Instant::now() < until {
                let mut args = Map::new();
                args.insert("message".into(), Value::String(format!("s{n} c{i}")));
                let t = Instant::now();
                let r = client
                    .call_tool(CallToolRequestParams::new(tool).with_arguments(args))
                    .await
                    .unwrap_or_else(|e| panic!("{tool}: {e}"));
                lat.push(t.elapsed());
                assert_ne!(r.is_error, Some(true), "{r:?}");
                i += 1;
            }
            lat
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap_or_else(|e| panic!("{e}")));
    }
    let elapsed = start.elapsed();
    for c in clients {
        if let Ok(c) = Arc::try_unwrap(c) {
            let _ = c.cancel().await;
        }
    }
    all.sort_unstable();
    let at = |q: f64| {
        all.get(((all.len() as f64 * q) as usize).min(all.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    Phase {
        calls: all.len(),
        per_sec: all.len() as f64 / elapsed.as_secs_f64(),
        median: at(0.5),
        p99: at(0.99),
    }
}

fn med(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn main() {
    let Some(entry) = everything() else {
        eprintln!(
            "http_sessions: skipped (server-everything is not installed: layers/mcp/scripts/install-npm-servers.sh)"
        );
        return;
    };
    if let Some(threads) = std::env::var("HTTP_SESSIONS_SERVE")
        .ok()
        .and_then(|t| t.parse().ok())
    {
        serve(threads, entry);
        return;
    }
    let sessions = env_num("HTTP_SESSIONS", 64).max(1);
    let rounds = env_num("HTTP_SESSIONS_ROUNDS", 3).max(1);
    let secs = env_num("HTTP_SESSIONS_SECS", 3).max(1) as u64;
    let targets = [direct(&entry), governed(1), governed(2)];
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    let mut per_sec: Vec<Vec<f64>> = vec![Vec::new(); targets.len()];
    let mut p99: Vec<Vec<f64>> = vec![Vec::new(); targets.len()];
    let mut p50: Vec<Vec<f64>> = vec![Vec::new(); targets.len()];
    rt.block_on(async {
        // Warm-up: one short phase each.
        for t in &targets {
            phase(t, sessions, 1).await;
        }
        for r in 0..rounds {
            for k in 0..targets.len() {
                let i = (k + r) % targets.len();
                let Some(t) = targets.get(i) else { continue };
                let p = phase(t, sessions, secs).await;
                println!(
                    "round {r}: {:<18} {sessions} sessions: {} calls, {:.0}/s, median {:.2} ms, p99 {:.2} ms",
                    t.name,
                    p.calls,
                    p.per_sec,
                    p.median.as_secs_f64() * 1e3,
                    p.p99.as_secs_f64() * 1e3
                );
                if let (Some(a), Some(b), Some(c)) =
                    (per_sec.get_mut(i), p99.get_mut(i), p50.get_mut(i))
                {
                    a.push(p.per_sec);
                    b.push(p.p99.as_secs_f64() * 1e3);
                    c.push(p.median.as_secs_f64() * 1e3);
                }
            }
        }
    });
    let m: Vec<(f64, f64, f64)> = (0..targets.len())
        .map(|i| {
            (
                per_sec.get_mut(i).map_or(0.0, |v| med(v)),
                p50.get_mut(i).map_or(0.0, |v| med(v)),
                p99.get_mut(i).map_or(0.0, |v| med(v)),
            )
        })
        .collect();
    for (t, (s, a, b)) in targets.iter().zip(&m) {
        println!(
            "median of {rounds} rounds: {:<18} {s:.0} calls/s, median {a:.2} ms, p99 {b:.2} ms",
            t.name
        );
    }
    if let [d, g1, g2] = m.as_slice() {
        println!(
            "governed (2 threads) / direct: throughput {:.3}x, p99 {:.3}x; scaling 1 -> 2 threads: {:.3}x",
            g2.0 / d.0,
            g2.2 / d.2,
            g2.0 / g1.0
        );
    }
}
