//! A governed MCP call over stdio against a direct one, from an rmcp client, with the real
//! `toolgate mcp serve` binary (issue 26, item 3). Not criterion: interleaved A/B rounds.
//!
//! Two sessions stay open for the whole run: `direct` is an rmcp client talking to
//! server-everything (`node …/server-everything/dist/index.js`) over stdio; `governed` is
//! the same client talking to `toolgate mcp serve --agent assistant --config
//! examples/mcp-proxy.json` (the release binary, `TOOLGATE` overrides it), which starts its
//! own server-everything and sends every `echo` call through the governed stack. Each round
//! makes `CALLS` `echo` calls on one and then on the other, the order alternating by round,
//! and prints both medians and their ratio; the last line is the median of the per-round
//! ratios with its range.
//!
//! ```text
//! cargo build --release -p toolgate-cli
//! STDIO_AB_ROUNDS=10 STDIO_AB_CALLS=200 cargo bench -p toolgate-mcp --bench stdio_ab
//! ```
//!
//! With `STDIO_AB_ONLY=governed` only the governed session is driven (`STDIO_AB_CALLS`
//! calls): put `valgrind --tool=callgrind` in front of the binary with `TOOLGATE` pointing
//! at a wrapper script (benches/mcp/callgrind-toolgate.sh) to count the proxy's
//! instructions per call. Skips with a message when server-everything or the binary is
//! missing.
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
use rmcp::model::CallToolRequestParams;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use serde_json::{Map, Value};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn timed(client: &RunningService<RoleClient, ()>, name: &str, calls: usize) -> Vec<Duration> {
    let mut out = Vec::with_capacity(calls);
    for i in 0..calls {
        let mut args = Map::new();
        args.insert("message".into(), Value::String(format!("hello {i}")));
        let params = CallToolRequestParams::new(name.to_owned()).with_arguments(args);
        let t = Instant::now();
        let r = client
            .call_tool(params)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        out.push(t.elapsed());
        assert_ne!(r.is_error, Some(true), "{name}: {r:?}");
    }
    out
}

fn median(v: &mut [Duration]) -> f64 {
    v.sort_unstable();
    v.get(v.len() / 2).map_or(0.0, Duration::as_secs_f64)
}

fn main() {
    let servers = std::env::var_os("TOOLGATE_MCP_SERVERS")
        .map_or_else(|| root().join(".tmp/mcp-servers"), PathBuf::from);
    let everything =
        servers.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let toolgate = std::env::var_os("TOOLGATE")
        .map_or_else(|| root().join("target/release/toolgate"), PathBuf::from);
    if !everything.is_file() || !toolgate.is_file() {
        eprintln!(
            "stdio_ab: skipped ({} or {} is missing: layers/mcp/scripts/install-npm-servers.sh, cargo build --release -p toolgate-cli)",
            everything.display(),
            toolgate.display()
        );
        return;
    }
    let rounds = env_num("STDIO_AB_ROUNDS", 10).max(1);
    let calls = env_num("STDIO_AB_CALLS", 200).max(1);
    let only_governed = std::env::var("STDIO_AB_ONLY").is_ok_and(|v| v == "governed");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    rt.block_on(async {
        let mut cmd = tokio::process::Command::new(&toolgate);
        cmd.args(["mcp", "serve", "--agent", "assistant", "--config", "mcp-proxy.json"])
            .current_dir(root().join("examples"));
        let governed = ()
            .serve(TokioChildProcess::new(cmd).unwrap_or_else(|e| panic!("toolgate: {e}")))
            .await
            .unwrap_or_else(|e| panic!("toolgate: {e}"));
        if only_governed {
            let t = Instant::now();
            let mut all = timed(&governed, "everything__echo", calls).await;
            println!(
                "governed only: {calls} calls in {:?}, median {:.1} us",
                t.elapsed(),
                median(&mut all) * 1e6
            );
            let _ = governed.cancel().await;
            return;
        }
        let mut cmd = tokio::process::Command::new("node");
        cmd.arg(&everything);
        let direct = ()
            .serve(TokioChildProcess::new(cmd).unwrap_or_else(|e| panic!("node: {e}")))
            .await
            .unwrap_or_else(|e| panic!("node: {e}"));
        timed(&direct, "echo", 50).await;
        timed(&governed, "everything__echo", 50).await;
        let (mut ratios, mut all_d, mut all_g) = (Vec::new(), Vec::new(), Vec::new());
        for r in 0..rounds {
            let (mut a, mut b) = if r % 2 == 0 {
                let a = timed(&direct, "echo", calls).await;
                (a, timed(&governed, "everything__echo", calls).await)
            } else {
                let b = timed(&governed, "everything__echo", calls).await;
                (timed(&direct, "echo", calls).await, b)
            };
            all_d.extend_from_slice(&a);
            all_g.extend_from_slice(&b);
            let (md, mg) = (median(&mut a), median(&mut b));
            ratios.push(mg / md);
            println!(
                "round {r}: direct {:.1} us, governed {:.1} us, ratio {:.3}",
                md * 1e6,
                mg * 1e6,
                mg / md
            );
        }
        ratios.sort_by(f64::total_cmp);
        let (md, mg) = (median(&mut all_d), median(&mut all_g));
        println!(
            "rmcp client, {rounds} rounds x {calls} calls: median ratio {:.3} (rounds {:.3}-{:.3}); all calls: direct {:.1} us, governed {:.1} us (+{:.1} us)",
            ratios.get(ratios.len() / 2).copied().unwrap_or_default(),
            ratios.first().copied().unwrap_or_default(),
            ratios.last().copied().unwrap_or_default(),
            md * 1e6,
            mg * 1e6,
            (mg - md) * 1e6
        );
        let _ = direct.cancel().await;
        let _ = governed.cancel().await;
    });
}
