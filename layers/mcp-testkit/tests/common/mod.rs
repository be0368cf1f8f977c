//! Shared by the integration tests: where the servers are, and small stack helpers.
#![allow(
    dead_code,
    unreachable_pub,
    reason = "a kit shared by test files: each uses its own part"
)]

use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::broadcast;
use toolgate_mcp::{DriftEvent, McpServerConfig};

/// The folder the npm servers are installed in (see `scripts/install-npm-servers.sh`).
pub fn servers_dir() -> PathBuf {
    match std::env::var_os("TOOLGATE_MCP_SERVERS") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.tmp/mcp-servers"),
    }
}

/// The entry point of one reference server (`server-everything`, …), or `None` with a
/// printed reason when it is not installed and `CI` is unset. In CI a missing server
/// fails the test.
pub fn npm_server(package: &str) -> Option<PathBuf> {
    let entry = servers_dir()
        .join("node_modules/@modelcontextprotocol")
        .join(package)
        .join("dist/index.js");
    if entry.is_file() {
        return Some(entry);
    }
    let why = format!(
        "@modelcontextprotocol/{package} is not installed at {}; run layers/mcp/scripts/install-npm-servers.sh",
        entry.display()
    );
    if std::env::var_os("CI").is_some() {
        panic!("{why} (CI is set, so a missing server fails the test)");
    }
    eprintln!("SKIPPED: {why}");
    None
}

/// A stdio server config running `node <entry> <args>`.
pub fn node(id: &str, entry: &std::path::Path) -> McpServerConfig {
    McpServerConfig::stdio(id, "node")
        .unwrap()
        .arg(entry.display().to_string())
}

/// The drift server binary, on stdio.
pub fn drift(id: &str) -> McpServerConfig {
    McpServerConfig::stdio(id, env!("CARGO_BIN_EXE_toolgate-mcp-drift-server")).unwrap()
}

/// The next drift event about `server`, after its discovery, for which `pred` holds
/// (others are skipped).
pub async fn next_event(
    rx: &mut broadcast::Receiver<DriftEvent>,
    server: &str,
    pred: impl Fn(&DriftEvent) -> bool,
) -> DriftEvent {
    tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match rx.recv().await {
                Ok(e)
                    if e.server == server
                        && e.trigger != toolgate_mcp::DriftTrigger::Discovery
                        && pred(&e) =>
                {
                    return e;
                }
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(e) => panic!("the drift events ended: {e}"),
            }
        }
    })
    .await
    .expect("no matching drift event within 20 s")
}
