//! Operations of `toolgate mcp serve` and `toolgate serve` (issue 23 items 4 and 5), against
//! the real binary: the inbox's stored policy in force at start and followed while running
//! (R22, R23), the health, readiness and metrics endpoints over loopback HTTP.
#![cfg(feature = "mcp")]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};
use toolgate_mcp::drift_server::DriftServer;

/// Starts the counting upstream server on a free loopback port; returns it and its URL.
async fn upstream() -> (DriftServer, String) {
    let drift = DriftServer::new();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let served = drift.clone();
    tokio::spawn(async move {
        served
            .serve_http("127.0.0.1:0".parse().unwrap(), move |addr| {
                let _ = tx.send(addr);
            })
            .await
    });
    let addr = rx.await.unwrap();
    (drift, format!("http://{addr}/mcp"))
}

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
