//! Governed calls per second through HAProxy to two release-build `toolgate mcp serve --http`
//! replicas on one PostgreSQL inbox (issue 23), against one replica directly (no HAProxy).
//!
//! The set-up is the replica test's (`cli/tests/replicas_cli.rs`) without the page replicas:
//! `deploy/haproxy.cfg` with this run's ports (round robin, sticky by `Mcp-Session-Id`), the
//! inbox a fresh database on `TOOLGATE_PG_URL`, the upstream an in-process `DriftServer`
//! over streamable HTTP, the agent `dev` allowed `drift__lookup` (a trusted read-only tool:
//! it runs without a question, but every call is still decided and looked up in PostgreSQL
//! for an approved held call of the same input, R38). Everything is built by `cargo bench`
//! in the release profile: the replicas, the upstream and the rmcp clients.
//!
//! Each round runs `REPLICAS_CLIENTS` (8) rmcp clients at once, each making
//! `REPLICAS_CALLS` (50) calls one after another, first through the balancer and then
//! straight to replica A, or the other way round (alternating by round); it prints each
//! round's calls/s and, at the end, the medians over `REPLICAS_ROUNDS` (5) rounds and their
//! ratio. The upstream counts the calls it got; the harness asserts every call was sent.
//!
//! ```text
//! bash .ci/haproxy.sh                 # HAProxy from Debian's packages
//! eval "$(bash .ci/postgres.sh)"      # PostgreSQL on loopback (fsync on)
//! cargo bench -p toolgate-cli --bench replicas
//! ```
//!
//! Skips with a message without HAProxy or `TOOLGATE_PG_URL`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a bench: a failed setup stops it"
)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::service::{RoleClient, RunningService};
use serde_json::json;

// The helpers the replica test uses too: the upstream, ports, processes, `GET /readyz`.
#[path = "../tests/common/mod.rs"]
mod common;

use common::{Proc, free_port, http_get, upstream_at};

const DEV_TOKEN: &str = "replica-bench-token";

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(default)
}

fn haproxy() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TOOLGATE_HAPROXY") {
        return Some(PathBuf::from(p));
    }
    ["/usr/sbin", "/usr/bin", "/usr/local/sbin"]
        .iter()
        .map(|d| Path::new(d).join("haproxy"))
        .find(|p| p.exists())
}

fn spawn(cmd: &mut Command) -> Proc {
    Proc(
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{cmd:?}: {e}")),
    )
}

async fn fresh_database(url: &str) -> String {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    tokio::spawn(conn);
    let name = format!(
        "toolgate_replicas_bench_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or_default()
    );
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let (base, _) = url
        .rsplit_once('/')
        .unwrap_or_else(|| panic!("`{url}` names no database"));
    format!("{base}/{name}")
}

fn write_config(dir: &Path, pg: &str, upstream: SocketAddr) -> PathBuf {
    let config = json!({
        "approval": {"channel": "inbox"},
        "inbox": {"postgres": pg},
        "servers": {"drift": {"trust_tool_annotations": true}},
        "behavior_gating": {"require_approval_for_non_read_only": true},
        "agents": [{"name": "dev", "allowed_tools": ["drift__lookup"]}],
        "mcp": {
            "servers": {"drift": {"url": format!("http://{upstream}/mcp")}},
            "tokens": [{"sha256": toolgate_mcp::serve::token_hash(DEV_TOKEN), "agent": "dev"}],
            "call_timeout_secs": 60
        }
    });
    let path = dir.join("toolgate.json");
    std::fs::write(&path, config.to_string()).unwrap_or_else(|e| panic!("{e}"));
    path
}

/// `deploy/haproxy.cfg` with this run's ports (the page backends point at nothing: unused).
fn haproxy_config(lb: u16, mcp: [u16; 2], page_lb: u16) -> String {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/haproxy.cfg"),
    )
    .unwrap_or_else(|e| panic!("deploy/haproxy.cfg: {e}"));
    text.replace("127.0.0.1:8931", &format!("127.0.0.1:{lb}"))
        .replace("127.0.0.1:18931", &format!("127.0.0.1:{}", mcp[0]))
        .replace("127.0.0.1:18932", &format!("127.0.0.1:{}", mcp[1]))
        .replace("127.0.0.1:8788", &format!("127.0.0.1:{page_lb}"))
}

async fn ready(addr: &str) {
    let t0 = Instant::now();
    while http_get(addr, "/readyz") != 200 {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "{addr} is not ready"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn client(addr: &str) -> RunningService<RoleClient, ()> {
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp"))
            .auth_header(DEV_TOKEN),
    );
    ().serve(transport)
        .await
        .unwrap_or_else(|e| panic!("a client of {addr}: {e}"))
}

/// `clients` clients at once, `per` calls each; calls per second over the whole round
/// (the clients' sessions opened before the clock starts).
async fn round(addr: &str, clients: usize, per: usize, tag: &str) -> f64 {
    let mut sessions = Vec::with_capacity(clients);
    for _ in 0..clients {
        sessions.push(client(addr).await);
    }
    let t0 = Instant::now();
    let mut tasks = Vec::with_capacity(clients);
    for (c, session) in sessions.into_iter().enumerate() {
        let tag = tag.to_owned();
        tasks.push(tokio::spawn(async move {
            for i in 0..per {
                let mut args = serde_json::Map::new();
                args.insert("query".into(), format!("{tag}-{c}-{i}").into());
                let r = session
                    .call_tool(CallToolRequestParams::new("drift__lookup").with_arguments(args))
                    .await
                    .unwrap_or_else(|e| panic!("drift__lookup: {e}"));
                assert_eq!(r.is_error, Some(false), "{r:?}");
            }
            let _ = session.cancel().await;
        }));
    }
    for t in tasks {
        t.await.unwrap_or_else(|e| panic!("{e}"));
    }
    (clients * per) as f64 / t0.elapsed().as_secs_f64()
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let Some(haproxy) = haproxy() else {
        eprintln!("SKIPPED: HAProxy is not installed; run .ci/haproxy.sh");
        return;
    };
    let Some(base_url) = std::env::var("TOOLGATE_PG_URL")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        eprintln!("SKIPPED: TOOLGATE_PG_URL is not set; run `eval \"$(bash .ci/postgres.sh)\"`");
        return;
    };
    let rounds = env_usize("REPLICAS_ROUNDS", 5);
    let clients = env_usize("REPLICAS_CLIENTS", 8);
    let per = env_usize("REPLICAS_CALLS", 50);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("a runtime: {e}"));
    rt.block_on(async {
        let pg = fresh_database(&base_url).await;
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let (drift, upstream) = upstream_at().await;
        let config = write_config(dir.path(), &pg, upstream);
        let ports = [free_port(), free_port()];
        let _replicas = ports.map(|port| {
            spawn(
                Command::new(env!("CARGO_BIN_EXE_toolgate"))
                    .args(["mcp", "serve", "--http", &format!("127.0.0.1:{port}")])
                    .arg("--config")
                    .arg(&config),
            )
        });
        let (lb_port, page_lb) = (free_port(), free_port());
        let lb_config = dir.path().join("haproxy.cfg");
        std::fs::write(&lb_config, haproxy_config(lb_port, ports, page_lb))
            .unwrap_or_else(|e| panic!("{e}"));
        let _lb = spawn(Command::new(&haproxy).args(["-db", "-f"]).arg(&lb_config));
        let a = format!("127.0.0.1:{}", ports[0]);
        let lb = format!("127.0.0.1:{lb_port}");
        for addr in [&a, &format!("127.0.0.1:{}", ports[1]), &lb] {
            ready(addr).await;
        }
        // HAProxy's first health checks (every 2 s): both replicas up before timing.
        tokio::time::sleep(Duration::from_secs(3)).await;
        round(&lb, 2, 5, "warm-lb").await;
        round(&a, 2, 5, "warm-a").await;
        let mut through = Vec::with_capacity(rounds);
        let mut direct = Vec::with_capacity(rounds);
        for r in 0..rounds {
            let tag = format!("r{r}");
            let (t, d) = if r % 2 == 0 {
                let t = round(&lb, clients, per, &format!("{tag}-lb")).await;
                (t, round(&a, clients, per, &format!("{tag}-a")).await)
            } else {
                let d = round(&a, clients, per, &format!("{tag}-a")).await;
                (round(&lb, clients, per, &format!("{tag}-lb")).await, d)
            };
            eprintln!(
                "round {r}: through HAProxy to 2 replicas {t:.0} calls/s, one replica directly {d:.0} calls/s"
            );
            through.push(t);
            direct.push(d);
        }
        let (t, d) = (median(&mut through), median(&mut direct));
        println!(
            "governed calls by {clients} clients x {per}, median over {rounds} rounds: through HAProxy to 2 replicas {t:.0} calls/s, one replica directly {d:.0} calls/s (ratio {:.2})",
            t / d
        );
        let expected = (2 * rounds * clients * per + 2 * 2 * 5) as u64;
        assert_eq!(drift.calls("lookup"), expected, "every call was sent once");
    });
}
