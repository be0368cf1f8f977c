//! Operations of `toolgate mcp serve` and `toolgate serve` (issue 23 items 4 and 5), against
//! the real binary: the inbox's stored policy in force at start and followed while running
//! (R22, R23), the health, readiness and metrics endpoints over loopback HTTP.
#![cfg(feature = "mcp")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

mod common;

use common::upstream;

fn write_config(dir: &Path, upstream: &str) -> std::path::PathBuf {
    let config = json!({
        "approval": {"channel": "inbox"},
        "inbox": {"sqlite": dir.join("inbox.db")},
        "servers": {"drift": {"trust_tool_annotations": true}},
        "agents": [{"name": "dev", "allowed_tools": ["drift__lookup"]}],
        "mcp": {"servers": {"drift": {"url": upstream}}, "call_timeout_secs": 20}
    });
    let path = dir.join("toolgate.json");
    std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
    path
}

async fn client(config: &Path) -> RunningService<RoleClient, ()> {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolgate"));
    cmd.args(["mcp", "serve", "--agent", "dev", "--config"])
        .arg(config);
    ().serve(TokioChildProcess::new(cmd).unwrap())
        .await
        .unwrap()
}

async fn lookup(client: &RunningService<RoleClient, ()>) -> CallToolResult {
    let Value::Object(args) = json!({"query": "a"}) else {
        panic!()
    };
    client
        .call_tool(CallToolRequestParams::new("drift__lookup").with_arguments(args))
        .await
        .expect("a tool result, never a protocol error")
}

fn code(r: &CallToolResult) -> Option<String> {
    r.structured_content
        .as_ref()
        .and_then(|s| s["toolgate"]["code"].as_str())
        .map(str::to_owned)
}

fn put_policy(config: &Path, policy: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["policy", "put", "--config"])
        .arg(config)
        .arg("-")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(policy.as_bytes())?;
            child.wait_with_output()
        })
        .unwrap();
    assert!(
        out.status.success(),
        "policy put: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

const DENY_LOOKUP: &str =
    r#"{"rules": [{"effect": "deny", "tool": "lookup", "reason": "lookups are paused"}]}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r22_r23_a_policy_put_reaches_a_running_mcp_serve_within_a_second() {
    let dir = tempfile::tempdir().unwrap();
    let (drift, url) = upstream().await;
    let config = write_config(dir.path(), &url);
    let dev = client(&config).await;
    let before = lookup(&dev).await;
    assert_eq!(before.is_error, Some(false), "{before:?}");
    assert_eq!(drift.calls("lookup"), 1);

    put_policy(&config, DENY_LOOKUP);
    let put_at = Instant::now();
    let refused = loop {
        let r = lookup(&dev).await;
        if r.is_error == Some(true) {
            break r;
        }
        assert!(
            put_at.elapsed() < Duration::from_secs(1),
            "the put did not reach the running gate within 1 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(code(&refused).as_deref(), Some("denied"), "{refused:?}");
    let sent = drift.calls("lookup");
    // Refused calls are not sent.
    let again = lookup(&dev).await;
    assert_eq!(code(&again).as_deref(), Some("denied"));
    assert_eq!(drift.calls("lookup"), sent);

    // And back: an empty policy lets it run again.
    put_policy(&config, r#"{"rules": []}"#);
    let put_at = Instant::now();
    loop {
        if lookup(&dev).await.is_error == Some(false) {
            break;
        }
        assert!(put_at.elapsed() < Duration::from_secs(1), "not within 1 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    dev.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r22_a_policy_stored_before_mcp_serve_starts_decides_its_first_call() {
    let dir = tempfile::tempdir().unwrap();
    let (drift, url) = upstream().await;
    let config = write_config(dir.path(), &url);
    put_policy(&config, DENY_LOOKUP);
    let dev = client(&config).await;
    let first = lookup(&dev).await;
    assert_eq!(code(&first).as_deref(), Some("denied"), "{first:?}");
    assert_eq!(drift.calls("lookup"), 0, "a refused call is not sent");
    dev.cancel().await.unwrap();
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r22_a_sighup_reload_keeps_the_stored_policy_over_the_configurations() {
    let dir = tempfile::tempdir().unwrap();
    let (drift, url) = upstream().await;
    let config = write_config(dir.path(), &url);
    put_policy(&config, DENY_LOOKUP);
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolgate"));
    cmd.args(["mcp", "serve", "--agent", "dev", "--config"])
        .arg(&config)
        .stderr(std::process::Stdio::null());
    let transport = TokioChildProcess::new(cmd).unwrap();
    let pid = transport.id().unwrap();
    let dev = ().serve(transport).await.unwrap();
    assert_eq!(code(&lookup(&dev).await).as_deref(), Some("denied"));
    // The configuration is read again (its own policy is empty): the stored one stays.
    let status = Command::new("kill")
        .args(["-HUP", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let until = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < until {
        let r = lookup(&dev).await;
        assert_eq!(code(&r).as_deref(), Some("denied"), "after SIGHUP: {r:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(drift.calls("lookup"), 0);
    dev.cancel().await.unwrap();
}

// ---- Health, readiness and metrics over loopback HTTP; upstream servers on SIGHUP ----

/// A `toolgate` server process (`mcp serve --http` or `serve`); killed on drop.
struct Proc {
    child: std::process::Child,
    addr: String,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `toolgate ARGS` and waits for the line naming its address (`marker` before
/// `http://`); standard error goes on being read (and echoed) so the process never blocks.
fn start(args: &[&str], config: &Path, marker: &str) -> Proc {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(args)
        .arg("--config")
        .arg(config)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = loop {
        let line = lines
            .next()
            .expect("the server ended before serving")
            .unwrap();
        eprintln!("toolgate: {line}");
        if line.contains(marker)
            && let Some(rest) = line.split("http://").nth(1)
        {
            break rest.split(['/', ' ']).next().unwrap().to_owned();
        }
    };
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            eprintln!("toolgate: {line}");
        }
    });
    Proc { child, addr }
}

/// `GET path` with `Host: host`: the status code and the body.
fn get(addr: &str, path: &str, host: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let status = resp
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = resp
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    // A chunked body (hyper's default for a body of unknown length) is not unchunked here:
    // the tests only look for what it contains.
    (status, body)
}

fn json_of(body: &str) -> Value {
    let start = body.find('{').unwrap_or(0);
    let end = body.rfind('}').map_or(body.len(), |e| e + 1);
    serde_json::from_str(&body[start..end]).unwrap_or_else(|e| panic!("{e}: {body}"))
}

const DEV_TOKEN: &str = "ops-dev-token";
const OTHER_TOKEN: &str = "ops-other-token";

fn write_http_config(dir: &Path, servers: Value) -> std::path::PathBuf {
    let config = json!({
        "approval": {"channel": "inbox"},
        "inbox": {"sqlite": dir.join("inbox.db")},
        "servers": {
            "alpha": {"trust_tool_annotations": true},
            "beta": {"trust_tool_annotations": true},
            "gamma": {"trust_tool_annotations": true}
        },
        "behavior_gating": {"require_approval_for_non_read_only": true},
        "agents": [
            {"name": "dev", "allowed_tools": ["alpha__lookup", "alpha__bare", "beta__lookup", "gamma__lookup"]},
            {"name": "other", "allowed_tools": ["alpha__lookup"]}
        ],
        "mcp": {
            "servers": servers,
            "tokens": [
                {"sha256": toolgate_mcp::serve::token_hash(DEV_TOKEN), "agent": "dev"},
                {"sha256": toolgate_mcp::serve::token_hash(OTHER_TOKEN), "agent": "other"}
            ],
            "call_timeout_secs": 20
        }
    });
    let path = dir.join("toolgate.json");
    std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
    path
}

async fn http_client(addr: &str, token: &str) -> RunningService<RoleClient, ()> {
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp"))
            .auth_header(token),
    );
    ().serve(transport).await.unwrap()
}

async fn call_tool(client: &RunningService<RoleClient, ()>, tool: &str) -> CallToolResult {
    let Value::Object(args) = json!({"query": "a"}) else {
        panic!()
    };
    client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(args))
        .await
        .expect("a tool result, never a protocol error")
}

async fn names(client: &RunningService<RoleClient, ()>) -> Vec<String> {
    let mut n: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    n.sort();
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue23_mcp_serve_http_answers_healthz_readyz_and_metrics_over_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let (alpha, url) = upstream().await;
    let config = write_http_config(dir.path(), json!({"alpha": {"url": url}}));
    let served = start(
        &["mcp", "serve", "--http", "127.0.0.1:0"],
        &config,
        "serving MCP",
    );
    let addr = served.addr.clone();

    // Alive and ready, with no token, whatever the Host.
    let (status, body) = get(&addr, "/healthz", "127.0.0.1");
    assert_eq!((status, json_of(&body)), (200, json!({"alive": true})));
    let (status, body) = get(&addr, "/readyz", "127.0.0.1");
    let ready = json_of(&body);
    assert_eq!(status, 200, "{ready}");
    assert_eq!(ready["upstreams"]["alpha"], "connected", "{ready}");
    assert_eq!(ready["store"], "reachable", "{ready}");
    assert_eq!(ready["not_ready"], json!([]));

    // One call runs, one is refused, one is held.
    let dev = http_client(&addr, DEV_TOKEN).await;
    assert_eq!(call_tool(&dev, "alpha__lookup").await.is_error, Some(false));
    let refused = call_tool(&dev, "alpha__nothing").await;
    assert_eq!(
        code(&refused).as_deref(),
        Some("unknown_tool"),
        "{refused:?}"
    );
    let held = call_tool(&dev, "alpha__bare").await;
    assert_eq!(
        held.structured_content.as_ref().unwrap()["toolgate"]["outcome"],
        "held"
    );
    assert_eq!(alpha.calls("lookup"), 1);

    let (status, metrics) = get(&addr, "/metrics", "127.0.0.1");
    assert_eq!(status, 200, "{metrics}");
    for want in [
        "# TYPE toolgate_decisions_total counter",
        r#"toolgate_decision_outcome="run""#,
        r#"toolgate_refusal_code="unknown_tool""#,
        r#"toolgate_decision_outcome="ask""#,
        "# TYPE toolgate_upstream_duration_seconds histogram",
        r#"toolgate_upstream_duration_seconds_count{toolgate_upstream_outcome="completed",toolgate_upstream_server="alpha"} 1"#,
        r#"toolgate_approval_outcome="held""#,
        // Waits for a person are bucketed in seconds up to a day.
        r#"toolgate_approval_outcome="held",le="86400"}"#,
        "toolgate_inbox_pending{} 1",
    ] {
        assert!(
            metrics.contains(want)
                || (want.ends_with("{} 1") && metrics.contains("toolgate_inbox_pending 1")),
            "`{want}` is missing from /metrics:\n{metrics}"
        );
    }
    // Never a tool, an agent or an input in a metric.
    assert!(
        !metrics.contains("alpha__") && !metrics.contains("\"dev\""),
        "{metrics}"
    );
    dev.cancel().await.unwrap();
}

#[cfg(unix)]
fn hup(proc: &Proc) {
    let status = Command::new("kill")
        .args(["-HUP", &proc.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Waits (at most 5 s) until `check` holds.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let until = Instant::now() + Duration::from_secs(5);
    while !check().await {
        assert!(Instant::now() < until, "not within 5 s: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue23_sighup_adds_removes_and_changes_upstream_servers_and_sessions_stay_open() {
    let dir = tempfile::tempdir().unwrap();
    let (alpha, alpha_url) = upstream().await;
    let (beta, beta_url) = upstream().await;
    let (beta2, beta2_url) = upstream().await;
    let config = write_http_config(dir.path(), json!({"alpha": {"url": alpha_url}}));
    let served = start(
        &["mcp", "serve", "--http", "127.0.0.1:0"],
        &config,
        "serving MCP",
    );
    let addr = served.addr.clone();
    // Two agents' sessions, open across every reload below.
    let dev = http_client(&addr, DEV_TOKEN).await;
    let other = http_client(&addr, OTHER_TOKEN).await;
    assert_eq!(names(&dev).await, ["alpha__bare", "alpha__lookup"]);
    assert_eq!(names(&other).await, ["alpha__lookup"]);

    // Added: beta is connected, its tool listed and called in the same session.
    write_http_config(
        dir.path(),
        json!({"alpha": {"url": alpha_url}, "beta": {"url": beta_url}}),
    );
    hup(&served);
    eventually("beta's tool is listed", || async {
        names(&dev).await.contains(&String::from("beta__lookup"))
    })
    .await;
    assert_eq!(call_tool(&dev, "beta__lookup").await.is_error, Some(false));
    assert_eq!(beta.calls("lookup"), 1);
    // The agent beta adds nothing for kept its session and its list.
    assert_eq!(names(&other).await, ["alpha__lookup"]);
    assert_eq!(
        call_tool(&other, "alpha__lookup").await.is_error,
        Some(false)
    );

    // Changed: beta's entry now names another server; the new one answers.
    write_http_config(
        dir.path(),
        json!({"alpha": {"url": alpha_url}, "beta": {"url": beta2_url}}),
    );
    hup(&served);
    eventually("the changed beta answers", || async {
        call_tool(&dev, "beta__lookup").await.is_error == Some(false) && beta2.calls("lookup") > 0
    })
    .await;
    let before = beta.calls("lookup");
    call_tool(&dev, "beta__lookup").await;
    assert_eq!(
        beta.calls("lookup"),
        before,
        "the old beta is no longer called"
    );

    // Removed: alpha's tools leave the lists; the sessions go on.
    write_http_config(dir.path(), json!({"beta": {"url": beta2_url}}));
    hup(&served);
    eventually("alpha's tools are gone", || async {
        names(&dev).await == ["beta__lookup"]
    })
    .await;
    let sent = alpha.calls("lookup");
    let gone = call_tool(&dev, "alpha__lookup").await;
    assert_eq!(gone.is_error, Some(true), "{gone:?}");
    assert_eq!(
        alpha.calls("lookup"),
        sent,
        "a removed server is not called"
    );
    assert!(names(&other).await.is_empty());
    let (status, body) = get(&addr, "/readyz", "127.0.0.1");
    let ready = json_of(&body);
    assert_eq!(status, 200, "{ready}");
    assert_eq!(ready["upstreams"], json!({"beta": "connected"}));

    // Added but unreachable: /readyz is 503 and names it; the rest goes on.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_url = format!("http://{}/mcp", dead.local_addr().unwrap());
    drop(dead);
    write_http_config(
        dir.path(),
        json!({"beta": {"url": beta2_url}, "alpha": {"url": dead_url}}),
    );
    hup(&served);
    eventually("alpha is named not ready", || async {
        let (status, body) = get(&addr, "/readyz", "127.0.0.1");
        status == 503
            && json_of(&body)["not_ready"]
                .to_string()
                .contains("upstream `alpha`")
    })
    .await;
    assert_eq!(call_tool(&dev, "beta__lookup").await.is_error, Some(false));
    dev.cancel().await.unwrap();
    other.cancel().await.unwrap();
}

#[cfg(feature = "serve")]
#[test]
fn issue23_serve_answers_healthz_readyz_and_metrics_before_the_host_check() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("toolgate.json");
    std::fs::write(
        &config,
        json!({
            "inbox": {"sqlite": dir.path().join("inbox.db")},
            "approvers": {
                "listen": "127.0.0.1:0",
                "people": [{"name": "alice", "token_sha256": "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"}]
            }
        })
        .to_string(),
    )
    .unwrap();
    let page = start(&["serve"], &config, "approval page is on");
    // A load balancer's check names no host the page answers: still answered.
    let (status, body) = get(&page.addr, "/healthz", "backend.invalid");
    assert_eq!((status, json_of(&body)), (200, json!({"alive": true})));
    let (status, body) = get(&page.addr, "/readyz", "backend.invalid");
    assert_eq!(status, 200, "{body}");
    assert_eq!(json_of(&body)["store"], "reachable");
    let (status, metrics) = get(&page.addr, "/metrics", "backend.invalid");
    assert_eq!(status, 200, "{metrics}");
    assert!(metrics.contains("toolgate_inbox_pending"), "{metrics}");
    // The page itself still answers only its own hosts.
    let (status, _) = get(&page.addr, "/", "backend.invalid");
    assert_eq!(status, 421);
}

/// The pid of the process whose environment carries `TOOLGATE_TEST_MARK=<mark>`.
fn pid_with_mark(mark: &str) -> Option<String> {
    let want = format!("TOOLGATE_TEST_MARK={mark}");
    for entry in std::fs::read_dir("/proc").ok()? {
        let path = entry.ok()?.path();
        let Ok(env) = std::fs::read(path.join("environ")) else {
            continue;
        };
        if env.split(|&b| b == 0).any(|v| v == want.as_bytes()) {
            return path.file_name().map(|p| p.to_string_lossy().to_string());
        }
    }
    None
}

/// A stdio upstream server process: `toolgate mcp serve --agent dev` itself, in front of
/// the in-process counting server, showing its tools by own name (`lookup`).
fn stdio_upstream(dir: &Path, upstream: &str, mark: &str) -> Value {
    let inner = json!({
        "servers": {"drift": {"trust_tool_annotations": true}},
        "agents": [{"name": "dev", "allowed_tools": ["drift__lookup"]}],
        "mcp": {"servers": {"drift": {"url": upstream}}, "wire_names": "own"}
    });
    let path = dir.join(format!("inner-{mark}.json"));
    std::fs::write(&path, inner.to_string()).unwrap();
    json!({
        "command": env!("CARGO_BIN_EXE_toolgate"),
        "args": ["mcp", "serve", "--agent", "dev", "--config", path],
        "env": {"TOOLGATE_TEST_MARK": mark}
    })
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue23_sighup_starts_an_added_stdio_server_process_and_ends_a_removed_ones() {
    let dir = tempfile::tempdir().unwrap();
    let (alpha, alpha_url) = upstream().await;
    let (gamma, gamma_url) = upstream().await;
    let mark = format!("ops-gamma-{}", std::process::id());
    let config = write_http_config(dir.path(), json!({"alpha": {"url": alpha_url}}));
    let served = start(
        &["mcp", "serve", "--http", "127.0.0.1:0"],
        &config,
        "serving MCP",
    );
    let dev = http_client(&served.addr, DEV_TOKEN).await;
    assert_eq!(names(&dev).await, ["alpha__bare", "alpha__lookup"]);
    assert!(pid_with_mark(&mark).is_none());

    // Added: a stdio server, started as a process of its own.
    let gamma_entry = stdio_upstream(dir.path(), &gamma_url, &mark);
    write_http_config(
        dir.path(),
        json!({"alpha": {"url": alpha_url}, "gamma": gamma_entry}),
    );
    hup(&served);
    eventually("gamma's tool is listed", || async {
        names(&dev).await.contains(&String::from("gamma__lookup"))
    })
    .await;
    assert!(
        pid_with_mark(&mark).is_some(),
        "the added server runs as its own process"
    );
    assert_eq!(call_tool(&dev, "gamma__lookup").await.is_error, Some(false));
    assert_eq!(gamma.calls("lookup"), 1);

    // Removed: its process ends; the session goes on with alpha.
    write_http_config(dir.path(), json!({"alpha": {"url": alpha_url}}));
    hup(&served);
    eventually("the removed server's process ended", || async {
        pid_with_mark(&mark).is_none()
    })
    .await;
    assert_eq!(names(&dev).await, ["alpha__bare", "alpha__lookup"]);
    assert_eq!(call_tool(&dev, "alpha__lookup").await.is_error, Some(false));
    assert_eq!(alpha.calls("lookup"), 1);
    let gone = call_tool(&dev, "gamma__lookup").await;
    assert_eq!(code(&gone).as_deref(), Some("unknown_tool"), "{gone:?}");
    dev.cancel().await.unwrap();
}
