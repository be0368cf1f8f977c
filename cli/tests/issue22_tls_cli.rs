//! Issue 22 through the real binary: `toolgate mcp serve --http` fetches an `https://`
//! `jwks_url` over real TLS on loopback (a test CA and a server certificate made by the test):
//! with `ca_file` its tokens verify; without it the server does not start, naming the field
//! and why; plain `http://` to another host is refused by `toolgate check`.
#![cfg(all(feature = "mcp", feature = "tls"))]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;

use std::process::{Command, Stdio};

use serde_json::{Value, json};
use toolgate_idp_kit::tls::{TestCa, TlsServer};
use toolgate_idp_kit::{SigningKey, claims, jwks};
use toolgate_mcp_testkit::drift_server::DriftServer;

const ISS: &str = "https://idp.test/realms/agents";

fn config(jwt_keys: Value, upstream: &str, addr: &str) -> Value {
    let mut jwt = json!({"issuer": ISS, "audience": format!("http://{addr}/mcp"),
        "agents": {"client-dev": "dev"}});
    if let (Some(o), Value::Object(k)) = (jwt.as_object_mut(), jwt_keys) {
        o.extend(k);
    }
    json!({
        "approval": {"channel": "none"},
        "servers": {"drift": {"trust_tool_annotations": true}},
        "agents": [{"name": "dev", "allowed_tools": ["drift__lookup"]}],
        "mcp": {"servers": {"drift": {"url": upstream}}, "jwt": jwt}
    })
}

#[test]
fn issue22_check_refuses_a_plain_http_jwks_url_to_another_host() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("toolgate.json");
    let c = config(
        json!({"jwks_url": "http://idp.internal:8080/certs"}),
        "http://127.0.0.1:1/mcp",
        "127.0.0.1:1",
    );
    std::fs::write(&path, c.to_string()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["check", "--json"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("mcp.jwt.jwks_url"), "{text}");
    assert!(text.contains("not a loopback address"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue22_mcp_serve_fetches_an_https_jwks_trusting_its_ca_file_and_refuses_to_start_without()
{
    use tokio::io::AsyncBufReadExt;
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
    let upstream = format!("http://{}/mcp", rx.await.unwrap());
    let rsa = SigningKey::rsa1();
    let ca = TestCa::new();
    let idp = TlsServer::start(ca.server_cert(&["127.0.0.1"]), jwks(&[&rsa])).await;
    let dir = tempfile::tempdir().unwrap();
    let ca_file = ca.write(dir.path());

    // Without `ca_file` the system's roots do not hold the test CA: no keys, no start.
    let addr = common::free_addr();
    let path = dir.path().join("no-ca.json");
    let c = config(json!({"jwks_url": idp.url("/jwks.json")}), &upstream, &addr);
    std::fs::write(&path, c.to_string()).unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["mcp", "serve", "--http", &addr, "--config"])
        .arg(&path)
        .stdin(Stdio::null())
        .output();
    let out = tokio::time::timeout(std::time::Duration::from_secs(120), out)
        .await
        .expect("toolgate mcp serve ends")
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("mcp.jwt.jwks_url"), "{stderr}");
    assert!(stderr.contains("UnknownIssuer"), "{stderr}");
    assert_eq!(idp.served(), 0);

    // With it: tokens signed by the provider's key verify.
    let addr = common::free_addr();
    let path = dir.path().join("toolgate.json");
    let c = config(
        json!({"jwks_url": idp.url("/jwks.json"), "ca_file": ca_file}),
        &upstream,
        &addr,
    );
    std::fs::write(&path, c.to_string()).unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["mcp", "serve", "--http", &addr, "--config"])
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let wait = async {
        while let Ok(Some(l)) = lines.next_line().await {
            eprintln!("toolgate: {l}");
            if l.contains("serving MCP") {
                return;
            }
        }
        panic!("toolgate mcp serve ended before serving");
    };
    tokio::time::timeout(std::time::Duration::from_secs(120), wait)
        .await
        .expect("toolgate mcp serve serves");
    assert_eq!(idp.served(), 1, "the JWKS fetched over TLS at start");
    let aud = format!("http://{addr}/mcp");
    let good = rsa.sign(&claims(ISS, &aud, "alice", json!({"azp": "client-dev"})));
    let a = addr.clone();
    let (status, body) = tokio::task::spawn_blocking(move || common::initialize_post(&a, &good))
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    let wrong = SigningKey::rsa2().sign(&claims(ISS, &aud, "alice", json!({"azp": "client-dev"})));
    let a = addr.clone();
    let (status, body) = tokio::task::spawn_blocking(move || common::initialize_post(&a, &wrong))
        .await
        .unwrap();
    assert_eq!(status, 401, "{body}");
    let _ = child.kill().await;
}
