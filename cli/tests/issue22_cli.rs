//! Issue 22 through the real binary: `toolgate mcp serve --http` with `mcp.jwt` takes tokens
//! signed by the identity provider's keys, and on SIGHUP reads its JWKS file again, so a key
//! removed from it stops working at once; `toolgate check` names a bad `mcp.jwt` field.
#![cfg(feature = "mcp")]
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
use toolgate_idp_kit::{SigningKey, claims, jwks};
use toolgate_mcp_testkit::drift_server::DriftServer;

const ISS: &str = "https://idp.test/realms/agents";

fn config(jwks_file: &std::path::Path, upstream: &str, addr: &str, algorithms: Value) -> Value {
    json!({
        "approval": {"channel": "none"},
        "servers": {"drift": {"trust_tool_annotations": true}},
        "agents": [{"name": "dev", "allowed_tools": ["drift__lookup"]}],
        "mcp": {
            "servers": {"drift": {"url": upstream}},
            "jwt": {"issuer": ISS, "audience": format!("http://{addr}/mcp"),
                    "jwks_file": jwks_file, "algorithms": algorithms,
                    "agents": {"client-dev": "dev"}}
        }
    })
}

#[test]
fn issue22_check_names_a_bad_mcp_jwt_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("toolgate.json");
    let c = config(
        &dir.path().join("k.json"),
        "http://127.0.0.1:1/mcp",
        "127.0.0.1:1",
        json!(["HS256"]),
    );
    std::fs::write(&path, c.to_string()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["check", "--json"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let text = format!("{v}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("mcp.jwt.algorithms[0]"), "{text}");
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue22_sighup_rereads_the_jwks_file_and_a_removed_key_stops_working() {
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
    let (k1, k2) = (SigningKey::rsa1(), SigningKey::ec1());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("jwks.json");
    std::fs::write(&file, jwks(&[&k1, &k2]).to_string()).unwrap();
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let path = dir.path().join("toolgate.json");
    let c = config(&file, &upstream, &addr, json!(["RS256", "ES256"]));
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
    let pid = child.id().unwrap();
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let mut until = async |want: &str| {
        let wait = async {
            while let Ok(Some(l)) = lines.next_line().await {
                eprintln!("toolgate: {l}");
                if l.contains(want) {
                    return l;
                }
            }
            panic!("toolgate mcp serve ended before saying `{want}`");
        };
        tokio::time::timeout(std::time::Duration::from_secs(120), wait)
            .await
            .unwrap_or_else(|_| panic!("toolgate mcp serve never said `{want}`"))
    };
    until("serving MCP").await;
    let aud = format!("http://{addr}/mcp");
    let t1 = k1.sign(&claims(ISS, &aud, "alice", json!({"azp": "client-dev"})));
    let t2 = k2.sign(&claims(ISS, &aud, "bob", json!({"azp": "client-dev"})));
    let a = addr.clone();
    let (status, body) = tokio::task::spawn_blocking(move || common::initialize_post(&a, &t1))
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    // The provider drops key 1: the operator writes the new set and sends SIGHUP.
    std::fs::write(&file, jwks(&[&k2]).to_string()).unwrap();
    let ok = Command::new("kill")
        .args(["-HUP", &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    until("reloaded").await;
    let t1 = k1.sign(&claims(ISS, &aud, "alice", json!({"azp": "client-dev"})));
    let a = addr.clone();
    let (status, body) = tokio::task::spawn_blocking(move || common::initialize_post(&a, &t1))
        .await
        .unwrap();
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("rsa-1"), "{body}");
    let a = addr.clone();
    let (status, body) = tokio::task::spawn_blocking(move || common::initialize_post(&a, &t2))
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    let _ = child.kill().await;
}

/// The official TypeScript SDK client (`layers/mcp-testkit/tests/node/sdk_client.mjs`, installed by
/// `layers/mcp/scripts/install-npm-servers.sh`) sends identity-provider JWTs (RS256 and
/// ES256): each sees its agent's list, and a declined question names the token's principal.
/// Skips with a printed reason when the npm packages are missing, and fails when `CI` is set.
#[test]
fn issue22_the_typescript_sdk_client_lists_as_the_agents_its_jwts_name() {
    let dir = common::servers_dir();
    let everything = dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    if !everything.exists()
        || !dir
            .join("node_modules/@modelcontextprotocol/sdk/package.json")
            .exists()
    {
        let why = format!(
            "{} is not installed; run layers/mcp/scripts/install-npm-servers.sh",
            dir.display()
        );
        if std::env::var_os("CI").is_some() {
            panic!("{why} (CI is set, so a missing package fails the test)");
        }
        eprintln!("SKIPPED: {why}");
        return;
    }
    let repo = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let tmp = tempfile::tempdir().unwrap();
    let (rsa, ec) = (SigningKey::rsa1(), SigningKey::ec1());
    let file = tmp.path().join("jwks.json");
    std::fs::write(&file, jwks(&[&rsa, &ec]).to_string()).unwrap();
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let aud = format!("http://{addr}/mcp");
    let mut c: Value = serde_json::from_str(
        &std::fs::read_to_string(repo.join("examples/mcp-proxy.json")).unwrap(),
    )
    .unwrap();
    c["mcp"]["servers"]["everything"]["args"] = json!([everything]);
    c["mcp"].as_object_mut().unwrap().remove("tokens");
    c["mcp"]["jwt"] = json!({"issuer": ISS, "audience": aud, "jwks_file": file,
        "agents": {"desktop-assistant": "assistant", "docs-reader": "reader"}});
    let path = tmp.path().join("toolgate.json");
    std::fs::write(&path, c.to_string()).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["mcp", "serve", "--http", &addr, "--config"])
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(child.stderr.take().unwrap()));
    loop {
        let line = lines
            .next()
            .expect("toolgate mcp serve ended before serving")
            .unwrap();
        if line.contains("serving MCP") {
            break;
        }
        eprintln!("toolgate: {line}");
    }
    std::thread::spawn(move || for _ in lines {});
    let script = dir.join("toolgate-sdk-client.mjs");
    std::fs::copy(
        repo.join("layers/mcp-testkit/tests/node/sdk_client.mjs"),
        &script,
    )
    .unwrap();
    let assistant = rsa.sign(&claims(
        ISS,
        &aud,
        "alice@example.com",
        json!({"azp": "desktop-assistant"}),
    ));
    let reader = ec.sign(&claims(ISS, &aud, "ci", json!({"azp": "docs-reader"})));
    let run = |a: &str, r: &str| {
        Command::new("node")
            .current_dir(&dir)
            .args(["toolgate-sdk-client.mjs", &aud, a, r])
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = run(&assistant, &reader);
    let _ = child.kill();
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        seen["readerTools"],
        json!(["everything__echo", "everything__get-sum"]),
        "{seen}"
    );
    assert_eq!(
        seen["assistantTools"].as_array().map(Vec::len),
        Some(10),
        "{seen}"
    );
    // R47: the declined question names the verified principal behind the token.
    let reason = seen["decline"]["text"].as_str().unwrap_or_default();
    assert!(reason.contains("`alice@example.com` of"), "{reason}");
    let _ = child.wait();
}
