//! What `toolgate mcp serve` adds to a `resources/read` (issue 23): an rmcp client reads
//! server-everything's static resource `demo://resource/static/document/architecture.md`
//!
//! - `straight`: from server-everything itself (a Node child process over stdio);
//! - `governed`: through the release `toolgate mcp serve --agent assistant` (a child process
//!   over stdio, configured by `examples/mcp-proxy.json`), which decides the read (the
//!   agent's `allowed_resources`, confidentiality, the air gap), writes no audit record (the
//!   example has no `audit` section) and sends it to its own server-everything over stdio;
//! - `governed_audited`: the same with `audit.file` set, so every read is also an audit
//!   record appended to a file before it is sent.
//!
//! **Interleaved**: each round times `READS` reads on each path, one at a time, in an order
//! that rotates by round, so the three share every minute of a shared machine's load; it
//! prints each round's medians and, at the end, the median over rounds of each governed
//! path's ratio to `straight` and of its overhead per read (median minus median).
//!
//! ```text
//! cargo bench -p toolgate-cli --bench resources_read      # RESOURCES_READ_ROUNDS=10, READS=200
//! ```
//!
//! Skips with a message when server-everything is not installed
//! (`layers/mcp/scripts/install-npm-servers.sh`; `TOOLGATE_MCP_SERVERS` names another folder).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a bench: a failed setup stops it"
)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::ReadResourceRequestParams;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use serde_json::Value;

const URI: &str = "demo://resource/static/document/architecture.md";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn everything() -> Option<PathBuf> {
    let dir = match std::env::var_os("TOOLGATE_MCP_SERVERS") {
        Some(d) => PathBuf::from(d),
        None => repo().join(".tmp/mcp-servers"),
    };
    let entry = dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    entry.is_file().then_some(entry)
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(default)
}

async fn spawn(cmd: tokio::process::Command) -> RunningService<RoleClient, ()> {
    let child = TokioChildProcess::builder(cmd)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("a child process: {e}"))
        .0;
    ().serve(child)
        .await
        .unwrap_or_else(|e| panic!("an rmcp client: {e}"))
}

/// `examples/mcp-proxy.json` with the server's path made absolute and, when `audit` is
/// given, an audit file.
fn config(dir: &std::path::Path, entry: &std::path::Path, audit: Option<&str>) -> PathBuf {
    let text = std::fs::read_to_string(repo().join("examples/mcp-proxy.json"))
        .unwrap_or_else(|e| panic!("examples/mcp-proxy.json: {e}"));
    let mut config: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
    config["mcp"]["servers"]["everything"]["args"] = serde_json::json!([entry]);
    let name = match audit {
        Some(file) => {
            config["audit"] = serde_json::json!({"file": dir.join(file)});
            "audited.json"
        }
        None => "toolgate.json",
    };
    let path = dir.join(name);
    std::fs::write(&path, config.to_string()).unwrap_or_else(|e| panic!("{e}"));
    path
}

fn governed(config: &std::path::Path) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolgate"));
    cmd.args(["mcp", "serve", "--agent", "assistant", "--config"])
        .arg(config);
    cmd
}

async fn reads(client: &RunningService<RoleClient, ()>, n: usize) -> Duration {
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let r = client
            .read_resource(ReadResourceRequestParams::new(URI))
            .await
            .unwrap_or_else(|e| panic!("resources/read: {e}"));
        times.push(t.elapsed());
        assert!(!r.contents.is_empty(), "{r:?}");
    }
    median(&mut times)
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

fn median_f(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let Some(entry) = everything() else {
        eprintln!(
            "SKIPPED: server-everything is not installed; run layers/mcp/scripts/install-npm-servers.sh"
        );
        return;
    };
    let rounds = env_usize("RESOURCES_READ_ROUNDS", 10);
    let per = env_usize("RESOURCES_READ_READS", 200);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("a runtime: {e}"));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let plain = config(dir.path(), &entry, None);
    let audited = config(dir.path(), &entry, Some("audit.jsonl"));
    rt.block_on(async {
        let mut node = tokio::process::Command::new("node");
        node.arg(&entry).arg("stdio");
        let paths = [
            ("straight", spawn(node).await),
            ("governed", spawn(governed(&plain)).await),
            ("governed_audited", spawn(governed(&audited)).await),
        ];
        // Warm-up: every path reads once and is checked.
        for (_, c) in &paths {
            reads(c, 20).await;
        }
        let mut ratios = [Vec::new(), Vec::new()];
        let mut overheads = [Vec::new(), Vec::new()];
        for round in 0..rounds {
            let mut medians = [Duration::ZERO; 3];
            for k in 0..3 {
                let i = (round + k) % 3;
                medians[i] = reads(&paths[i].1, per).await;
            }
            let s = medians[0];
            eprintln!(
                "round {round}: straight {s:?}, governed {:?} ({:.3}x), governed_audited {:?} ({:.3}x)",
                medians[1],
                medians[1].as_secs_f64() / s.as_secs_f64(),
                medians[2],
                medians[2].as_secs_f64() / s.as_secs_f64(),
            );
            for g in 0..2 {
                ratios[g].push(medians[g + 1].as_secs_f64() / s.as_secs_f64());
                overheads[g].push((medians[g + 1].as_secs_f64() - s.as_secs_f64()) * 1e6);
            }
        }
        for (g, name) in ["governed", "governed_audited"].iter().enumerate() {
            println!(
                "resources/read {name} ÷ straight over {rounds} rounds of {per} reads: median ratio {:.3}x, median overhead {:.1} µs per read",
                median_f(&mut ratios[g]),
                median_f(&mut overheads[g]),
            );
        }
        for (_, c) in paths {
            let _ = c.cancel().await;
        }
    });
    let lines = std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap_or_default();
    let records = lines
        .lines()
        .filter(|l| l.contains("\"mcp_resource_read\""))
        .count();
    assert!(
        records >= rounds * per,
        "every audited read is a record: {records}"
    );
}
