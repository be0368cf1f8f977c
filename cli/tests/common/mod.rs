//! Shared by the CLI's integration tests (`mod common;`): the binary, where the npm and
//! Python packages are, the counting upstream MCP server of our own, a relay that can stop
//! passing requests on, and small process and port helpers. Each test file uses a part.
#![allow(
    dead_code,
    unreachable_pub,
    reason = "a kit shared by test files: each uses its own part"
)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use toolgate_mcp_testkit::drift_server::DriftServer;

/// `toolgate ARGS`, run to its end.
pub fn toolgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(args)
        .output()
        .expect("the binary runs")
}

/// The checkout's root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The folder the npm packages are installed in (`TOOLGATE_MCP_SERVERS`, else
/// `.tmp/mcp-servers`; `layers/mcp/scripts/install-npm-servers.sh`).
pub fn servers_dir() -> PathBuf {
    match std::env::var_os("TOOLGATE_MCP_SERVERS") {
        Some(dir) => PathBuf::from(dir),
        None => repo().join(".tmp/mcp-servers"),
    }
}

/// A test's part that is not installed: fails when `CI` is set, else prints why it skips.
pub fn missing(what: &str, install: &str) {
    let why = format!("{what} is not installed; run {install}");
    if std::env::var_os("CI").is_some() {
        panic!("{why} (CI is set, so a missing package fails the test)");
    }
    eprintln!("SKIPPED: {why}");
}

/// `rel` under the npm folder, or `None` (skip) when it is missing and `CI` is unset.
pub fn installed(rel: &str) -> Option<PathBuf> {
    let path = servers_dir().join(rel);
    if path.exists() {
        return Some(path);
    }
    missing(
        &path.display().to_string(),
        "layers/mcp/scripts/install-npm-servers.sh",
    );
    None
}

/// The Python SDK's interpreter (its virtual environment, `TOOLGATE_PYTHON_SDK` else
/// `.tmp/python-sdk`), or `None` (skip) when it is missing and `CI` is unset.
pub fn python_sdk() -> Option<PathBuf> {
    let dir = match std::env::var_os("TOOLGATE_PYTHON_SDK") {
        Some(dir) => PathBuf::from(dir),
        None => repo().join(".tmp/python-sdk"),
    };
    let python = dir.join("bin/python");
    if python.exists() {
        return Some(python);
    }
    missing(
        &python.display().to_string(),
        "layers/mcp/scripts/install-python-sdk.sh",
    );
    None
}

/// The counting upstream server (`DriftServer`) over streamable HTTP on a free loopback
/// port; returns it and its address.
pub async fn upstream_at() -> (DriftServer, SocketAddr) {
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
    (drift, rx.await.unwrap())
}

/// [`upstream_at`], with its MCP URL.
pub async fn upstream() -> (DriftServer, String) {
    let (drift, addr) = upstream_at().await;
    (drift, format!("http://{addr}/mcp"))
}

/// A loopback TCP relay to `to`: once `hang` is set, what the client sends is read and
/// dropped, so a request made from then on never reaches the upstream and is never answered.
pub fn hanging_relay(to: SocketAddr, hang: Arc<AtomicBool>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(mut client) = client else { return };
            let Ok(mut server) = TcpStream::connect(to) else {
                continue;
            };
            let (mut client_r, mut server_r) =
                (client.try_clone().unwrap(), server.try_clone().unwrap());
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut server_r, &mut client);
            });
            let hang = Arc::clone(&hang);
            std::thread::spawn(move || {
                let mut buf = [0u8; 16 * 1024];
                loop {
                    match client_r.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            if !hang.load(Ordering::SeqCst) && server.write_all(&buf[..n]).is_err()
                            {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    addr
}

/// A free loopback port (free when asked: the caller binds it soon after).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child process killed on drop.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Proc {
    /// The process's id.
    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

/// The status of `GET path` on `addr` over plain HTTP/1.1 (0 when nothing answers).
pub fn http_get(addr: &str, path: &str) -> u16 {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return 0;
    };
    let _ = write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    );
    let mut resp = String::new();
    let _ = s.read_to_string(&mut resp);
    resp.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// One raw `initialize` POST to `addr`'s `/mcp` with `bearer`: the status (0 when none
/// could be read) and the whole response.
pub fn initialize_post(addr: &str, bearer: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
    write!(
        s,
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nAuthorization: Bearer {bearer}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(5)));
    let mut resp = Vec::new();
    let _ = s.read_to_end(&mut resp);
    let resp = String::from_utf8_lossy(&resp).to_string();
    let status = resp
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, resp)
}

/// A free loopback address (`127.0.0.1:PORT`).
pub fn free_addr() -> String {
    format!("127.0.0.1:{}", free_port())
}

/// R33: every line of an audit log's `text` reads as the audit layer's own type (a call
/// record or an event) and writes back to the very line.
pub fn assert_audit_lines_read_back(text: &str) {
    for line in text.lines() {
        let entry = toolgate_core::audit_record::AuditEntry::parse(line)
            .unwrap_or_else(|e| panic!("{line}: {e}"));
        let back =
            serde_json::Value::Object(entry.to_map().unwrap_or_else(|e| panic!("{line}: {e}")));
        assert_eq!(
            toolgate_engine::canon::canonical_json(&back).as_deref(),
            Some(line),
            "{line}"
        );
    }
}
