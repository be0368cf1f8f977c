//! A session's labels (R49, issue 37 item 2) through the real `toolgate mcp serve` with a
//! SQLite inbox: each downstream MCP session is an R43 session; the labels of the tools sent
//! in it are kept in the inbox's file and decide its later calls, and another MCP session (a
//! second `mcp serve` process on the same file) is judged by its own sends only. The upstream
//! is our drift server, its tools labelled in the configuration.
#![cfg(feature = "mcp")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::path::Path;

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

mod common;

use common::upstream;

/// `lookup` returns private data, `bare` content a third party wrote, `write_note` is a way
/// out: asked in a session that has read both. The two readers are declared `none` on the
/// network: undeclared, an MCP tool's effective scope is `egress` (R8: `openWorldHint` absent
/// counts as `true`) and would carry the `egress` label too.
fn write_config(dir: &Path, upstream: &str) -> std::path::PathBuf {
    let config = json!({
        "approval": {"channel": "inbox"},
        "inbox": {"sqlite": dir.join("inbox.db")},
        "servers": {"drift": {"labels": ["drift"]}},
        "tools": [
            {"server": "drift", "name": "lookup", "labels": ["private"], "network_override": "none"},
            {"server": "drift", "name": "bare", "labels": ["untrusted"], "network_override": "none"},
            {"server": "drift", "name": "write_note", "network_override": "egress"}
        ],
        "agents": [{"name": "dev", "allowed_tools": ["drift__lookup", "drift__bare", "drift__write_note"]}],
        "policy": {"rules": [{"effect": "ask", "labels": ["egress"], "session_labels": ["private", "untrusted"],
                              "reason": "this session read private data and untrusted content"}]},
        "mcp": {"servers": {"drift": {"url": upstream}}, "call_timeout_secs": 20}
    });
    let path = dir.join("toolgate.json");
    std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
    path
}

/// A client of its own `toolgate mcp serve --agent dev` process over stdio: one MCP session.
async fn session(config: &Path) -> RunningService<RoleClient, ()> {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolgate"));
    cmd.args(["mcp", "serve", "--agent", "dev", "--config"])
        .arg(config);
    ().serve(TokioChildProcess::new(cmd).unwrap())
        .await
        .unwrap()
}

async fn call(client: &RunningService<RoleClient, ()>, tool: &str, input: Value) -> CallToolResult {
    let Value::Object(args) = input else { panic!() };
    client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(args))
        .await
        .expect("a tool result, never a protocol error")
}

fn text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join(" ")
}

fn ran(r: &CallToolResult) -> bool {
    r.is_error == Some(false)
}

fn outcome(r: &CallToolResult) -> Option<&str> {
    r.structured_content.as_ref()?["toolgate"]["outcome"].as_str()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r49_mcp_serve_keeps_each_sessions_labels_in_the_sqlite_inbox_and_asks_before_the_way_out()
{
    let dir = tempfile::tempdir().unwrap();
    let (drift, url) = upstream().await;
    let config = write_config(dir.path(), &url);
    let first = session(&config).await;
    let second = session(&config).await;

    // The first session reads private data, then content a third party wrote.
    let r = call(&first, "drift__lookup", json!({"query": "k"})).await;
    assert!(ran(&r), "{r:?}");
    let r = call(&first, "drift__bare", json!({})).await;
    assert!(ran(&r), "{r:?}");
    // The second reads private data only: its way out runs.
    let r = call(&second, "drift__lookup", json!({"query": "k"})).await;
    assert!(ran(&r), "{r:?}");
    let r = call(&second, "drift__write_note", json!({"text": "mine"})).await;
    assert!(
        ran(&r),
        "another MCP session is judged by its own sends: {r:?}"
    );
    assert_eq!(drift.calls("write_note"), 1);

    // The first session's way out is asked: held in the inbox, not sent.
    let held = call(&first, "drift__write_note", json!({"text": "theirs"})).await;
    assert_eq!(outcome(&held), Some("held"), "{held:?}");
    assert!(
        text(&held).contains("private data and untrusted content"),
        "{}",
        text(&held)
    );
    assert_eq!(drift.calls("write_note"), 1, "the held call was not sent");
    first.cancel().await.unwrap();
    second.cancel().await.unwrap();

    // Both processes have ended; the inbox's file keeps each session's labels (R43
    // sessions, one per MCP session), as the counter of a later process reads them.
    let db = dir.path().join("inbox.db");
    let conn = rusqlite::Connection::open(&db).unwrap();
    let mut rows: Vec<(String, String)> = conn
        .prepare("SELECT session, label FROM session_labels")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    rows.sort();
    let sessions: Vec<String> = {
        let mut s: Vec<String> = rows.iter().map(|(s, _)| s.clone()).collect();
        s.dedup();
        s
    };
    assert_eq!(sessions.len(), 2, "{rows:?}");
    let labels_of = |session: &str| -> Vec<String> {
        use toolgate_engine::quota::QuotaCounter;
        let id: String = serde_json::from_str(session).unwrap();
        assert!(id.starts_with("mcp-"), "{id}");
        toolgate_inbox::SqliteQuotaCounter::open(&db)
            .unwrap()
            .session_labels(Some(&id))
            .unwrap()
            .to_vec()
    };
    let mut read: Vec<Vec<String>> = sessions.iter().map(|s| labels_of(s)).collect();
    read.sort();
    assert_eq!(
        read,
        [
            // The second session: its note was sent.
            vec!["drift", "egress", "private"],
            // The first: its note was held, never sent, so never counted.
            vec!["drift", "private", "untrusted"],
        ]
    );
}
