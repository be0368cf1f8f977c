//! Issue 22, item 4 — revocation without restart, through the real binary: `toolgate mcp
//! serve --http` re-reads `mcp.tokens` and the JWKS file on SIGHUP; a revoked static token
//! and a JWT signed by a removed key are refused from the next request on, and the MCP
//! sessions opened with them are closed (their open event streams end, a request naming
//! them is answered 404), while a session whose token is still good stays open.
#![cfg(all(feature = "mcp", unix))]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::io::{BufRead, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};
use toolgate_idp_kit::{SigningKey, claims, jwks};
use toolgate_mcp_testkit::drift_server::DriftServer;

const ISS: &str = "https://idp.test/realms/agents";
const STATIC: &str = "static-token-for-dev-0123456789";

/// One raw request: `Connection: close`, so the answer ends with the connection.
fn request(addr: &str, head: &str, body: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "{head}\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Protocol-Version: 2025-06-18\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    s
}

fn read_all(mut s: TcpStream) -> String {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn status(resp: &str) -> u16 {
    resp.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// Opens an MCP session with `bearer`: `initialize`, then `notifications/initialized`. Its id.
fn open_session(addr: &str, bearer: &str) -> String {
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
    let resp = read_all(request(
        addr,
        &format!("POST /mcp HTTP/1.1\r\nAuthorization: Bearer {bearer}"),
        init,
    ));
    assert_eq!(status(&resp), 200, "{resp}");
    let id = resp
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("mcp-session-id")
                .then(|| v.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("no session id in {resp}"));
    let note = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let resp = read_all(request(
        addr,
        &format!("POST /mcp HTTP/1.1\r\nAuthorization: Bearer {bearer}\r\nMcp-Session-Id: {id}"),
        note,
    ));
    assert_eq!(status(&resp), 202, "{resp}");
    id
}

/// Opens the session's event stream (`GET /mcp`); the receiver gets `()` when it ends.
fn stream(addr: &str, bearer: &str, id: &str) -> mpsc::Receiver<String> {
    let mut s = request(
        addr,
        &format!("GET /mcp HTTP/1.1\r\nAuthorization: Bearer {bearer}\r\nMcp-Session-Id: {id}"),
        "",
    );
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        let _ = tx.send(String::from_utf8_lossy(&out).into_owned());
    });
    rx
}

fn tools_list(addr: &str, bearer: &str, id: &str) -> String {
    let list = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}"#;
    read_all(request(
        addr,
        &format!("POST /mcp HTTP/1.1\r\nAuthorization: Bearer {bearer}\r\nMcp-Session-Id: {id}"),
        list,
    ))
}

fn config(jwks_file: &std::path::Path, upstream: &str, addr: &str, with_static: bool) -> Value {
    let mut c = json!({
        "approval": {"channel": "none"},
        "servers": {"drift": {"trust_tool_annotations": true}},
        "agents": [{"name": "dev", "allowed_tools": ["drift__lookup"]}],
        "mcp": {
            "servers": {"drift": {"url": upstream}},
            "tokens": [],
            "jwt": {"issuer": ISS, "audience": format!("http://{addr}/mcp"),
                    "jwks_file": jwks_file, "algorithms": ["RS256", "ES256"],
                    "agents": {"client-dev": "dev"}}
        }
    });
    if with_static {
        c["mcp"]["tokens"] = json!([{"sha256": toolgate_mcp::serve::token_hash(STATIC),
                                     "agent": "dev", "name": "laptop"}]);
    }
    c
}

struct Served {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Served {
    fn until(&self, want: &str) {
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l.contains(want) => return,
                Ok(_) => {}
                Err(_) => panic!("toolgate mcp serve never said `{want}`"),
            }
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue22_sighup_closes_the_sessions_of_a_revoked_token_and_a_removed_key() {
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
    std::fs::write(&path, config(&file, &upstream, &addr, true).to_string()).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["mcp", "serve", "--http", &addr, "--config"])
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = child.stderr.take().unwrap();
    let (ltx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            eprintln!("toolgate: {l}");
            let _ = ltx.send(l);
        }
    });
    let served = Served { child, lines };
    served.until("serving MCP");

    let aud = format!("http://{addr}/mcp");
    let by_k1 = k1.sign(&claims(ISS, &aud, "alice", json!({"azp": "client-dev"})));
    let by_k2 = k2.sign(&claims(ISS, &aud, "bob", json!({"azp": "client-dev"})));
    let (a, t1, t2) = (addr.clone(), by_k1.clone(), by_k2.clone());
    let (static_id, k1_id, k2_id, static_end, k1_end, k2_end) =
        tokio::task::spawn_blocking(move || {
            let s = open_session(&a, STATIC);
            let j1 = open_session(&a, &t1);
            let j2 = open_session(&a, &t2);
            let (se, e1, e2) = (
                stream(&a, STATIC, &s),
                stream(&a, &t1, &j1),
                stream(&a, &t2, &j2),
            );
            (s, j1, j2, se, e1, e2)
        })
        .await
        .unwrap();
    // Every stream is open before the reload.
    std::thread::sleep(Duration::from_millis(500));
    for (what, end) in [
        ("static", &static_end),
        ("key 1", &k1_end),
        ("key 2", &k2_end),
    ] {
        assert!(
            end.try_recv().is_err(),
            "the {what} session's stream ended before any revocation"
        );
    }

    // The operator drops the static token and key 1, then sends SIGHUP.
    std::fs::write(&file, jwks(&[&k2]).to_string()).unwrap();
    std::fs::write(&path, config(&file, &upstream, &addr, false).to_string()).unwrap();
    let pid = served.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .unwrap()
            .success()
    );
    served.until("reloaded");

    // The sessions opened with them are closed: their streams end ...
    for (what, end) in [("static-token", &static_end), ("key-1", &k1_end)] {
        let got = end.recv_timeout(Duration::from_secs(10));
        assert!(
            got.is_ok(),
            "the {what} session was not closed by the revocation"
        );
    }
    // ... while the one whose token is still good stays open.
    assert!(
        k2_end.recv_timeout(Duration::from_secs(1)).is_err(),
        "a session whose token is still good was closed"
    );
    let (a, t2) = (addr.clone(), by_k2.clone());
    let (revoked, removed, closed, open) = tokio::task::spawn_blocking(move || {
        (
            tools_list(&a, STATIC, &static_id),
            tools_list(&a, &by_k1, &k1_id),
            // A good token naming a closed session: the session is gone.
            tools_list(&a, &t2, &static_id),
            tools_list(&a, &t2, &k2_id),
        )
    })
    .await
    .unwrap();
    assert_eq!(status(&revoked), 401, "{revoked}");
    assert_eq!(status(&removed), 401, "{removed}");
    assert!(removed.contains("rsa-1"), "{removed}");
    assert_eq!(status(&closed), 404, "{closed}");
    assert_eq!(status(&open), 200, "{open}");
    assert!(open.contains("drift__lookup"), "{open}");
}
