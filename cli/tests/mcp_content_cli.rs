//! Issue 23 item 1: resources, prompts and completion through `toolgate mcp serve`
//! (streamable HTTP) in front of the reference `server-everything`, configured by
//! `examples/mcp-proxy.json`, read by the official TypeScript and Python SDK clients as two
//! agents with different rights (`assistant`: `everything__*`; `reader`: one template and
//! one prompt).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

mod common;

use common::{installed, python_sdk, repo, servers_dir};

struct Served {
    child: Child,
    url: String,
    audit: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `examples/mcp-proxy.json` with an audit file, served over HTTP on a free port.
fn serve() -> Served {
    let dir = tempfile::tempdir().unwrap();
    let mut config: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("examples/mcp-proxy.json")).unwrap(),
    )
    .unwrap();
    let audit = dir.path().join("audit.jsonl");
    config["audit"] = serde_json::json!({"file": audit});
    // The server's path is relative to `examples/`: keep the file there's folder.
    let entry =
        servers_dir().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    config["mcp"]["servers"]["everything"]["args"] = serde_json::json!([entry]);
    let path = dir.path().join("toolgate.json");
    std::fs::write(&path, config.to_string()).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["mcp", "serve", "--config"])
        .arg(&path)
        .args(["--http", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let url = loop {
        let line = lines
            .next()
            .expect("toolgate mcp serve ended before serving")
            .unwrap();
        if let Some(url) = line
            .split(" on ")
            .nth(1)
            .filter(|_| line.contains("serving MCP"))
        {
            break url.trim().to_owned();
        }
        eprintln!("toolgate: {line}");
    };
    std::thread::spawn(move || for _ in lines {});
    Served {
        child,
        url,
        audit,
        _dir: dir,
    }
}

fn names(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_owned())
        .collect()
}

/// What both SDKs must have seen: the assistant sees and reads everything, the reader only
/// its template and its prompt; the rest is refused `not_allowed` before it is sent.
fn assert_two_agents(seen: &Value) {
    let a = &seen["assistant"];
    let r = &seen["reader"];
    assert!(a["capabilities"]["resources"].is_object(), "{seen}");
    assert!(a["capabilities"]["prompts"].is_object(), "{seen}");
    // Named like tools, URIs kept.
    let resources = names(&a["resources"]);
    assert!(
        resources.contains(&String::from("everything__architecture.md")),
        "{resources:?}"
    );
    assert!(
        a["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["uri"] == "demo://resource/static/document/architecture.md")
    );
    assert!(
        names(&a["templates"]).contains(&String::from("everything__Dynamic Text Resource")),
        "{seen}"
    );
    assert!(
        a["prompts"]
            .as_array()
            .unwrap()
            .contains(&Value::from("everything__args-prompt"))
    );
    assert_eq!(a["readStatic"]["ok"], true, "{seen}");
    assert_eq!(a["readDynamic"]["ok"], true, "{seen}");
    assert_eq!(a["simplePrompt"]["ok"], true, "{seen}");
    assert!(
        a["argsPrompt"]["value"].as_str().unwrap().contains("Oslo"),
        "{seen}"
    );
    assert_eq!(a["complete"]["ok"], true, "{seen}");
    assert!(
        a["complete"]["value"]
            .as_array()
            .unwrap()
            .contains(&Value::from("Sales")),
        "{seen}"
    );

    // The reader: its own rights only.
    assert!(r["resources"].as_array().unwrap().is_empty(), "{seen}");
    assert_eq!(
        names(&r["templates"]),
        ["everything__Dynamic Text Resource"]
    );
    assert_eq!(
        r["prompts"],
        serde_json::json!(["everything__simple-prompt"])
    );
    assert_eq!(r["readDynamic"]["ok"], true, "{seen}");
    assert_eq!(r["simplePrompt"]["ok"], true, "{seen}");
    // Issue 33 item 10: a prompt that exists but is hidden and one nobody offers get the
    // same answer: the caller learns nothing about what it may not see.
    for agent in [a, r] {
        assert_eq!(agent["noSuchPrompt"]["ok"], false, "{seen}");
        assert_eq!(
            agent["noSuchPrompt"]["data"]["toolgate"]["code"], "not_allowed",
            "{seen}"
        );
    }
    for key in ["code", "message", "data"] {
        assert_eq!(
            r["noSuchPrompt"][key], r["argsPrompt"][key],
            "`{key}` tells a hidden prompt from a missing one: {seen}"
        );
    }
    for refused in ["readStatic", "argsPrompt", "complete"] {
        assert_eq!(r[refused]["ok"], false, "{refused}: {seen}");
        assert_eq!(
            r[refused]["data"]["toolgate"]["code"], "not_allowed",
            "{refused}: {seen}"
        );
    }
}

fn assert_audited(audit: &Path) {
    let text = std::fs::read_to_string(audit).unwrap();
    // R33: every line reads as the audit layer's own type (a content request is an event)
    // and writes back to the very line.
    common::assert_audit_lines_read_back(&text);
    let records: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let reads: Vec<&Value> = records
        .iter()
        .filter(|r| r["event"] == "mcp_resource_read")
        .collect();
    assert!(
        reads.iter().any(|r| r["agent"] == "reader"
            && r["outcome"] == "refused"
            && r["code"] == "not_allowed"),
        "{text}"
    );
    assert!(
        reads
            .iter()
            .any(|r| r["agent"] == "assistant" && r["outcome"] == "allowed"),
        "{text}"
    );
    assert!(
        records
            .iter()
            .any(|r| r["event"] == "mcp_prompt_get" && r["name"] == "everything__args-prompt"),
        "{text}"
    );
    // Issue 33 item 10: the refusal of a prompt nobody offers is audited, with its true code.
    assert!(
        records.iter().any(|r| r["event"] == "mcp_prompt_get"
            && r["name"] == "everything__no-such-prompt"
            && r["outcome"] == "refused"
            && r["code"] == "unknown_tool"),
        "{text}"
    );
}

#[test]
fn issue23_typescript_sdk_lists_and_reads_resources_and_gets_prompts_as_two_agents() {
    let (Some(_), Some(_)) = (
        installed("node_modules/@modelcontextprotocol/server-everything/dist/index.js"),
        installed("node_modules/@modelcontextprotocol/sdk/package.json"),
    ) else {
        return;
    };
    let script = servers_dir().join("toolgate-sdk-content.mjs");
    std::fs::copy(
        repo().join("layers/mcp-testkit/tests/node/sdk_content.mjs"),
        &script,
    )
    .unwrap();
    let served = serve();
    let out = Command::new("node")
        .current_dir(servers_dir())
        .args([
            "toolgate-sdk-content.mjs",
            &served.url,
            "example-assistant-token",
            "example-reader-token",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the SDK client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_two_agents(&seen);
    assert_audited(&served.audit);
}

#[test]
fn issue23_python_sdk_lists_and_reads_resources_and_gets_prompts_as_two_agents() {
    let (Some(_), Some(python)) = (
        installed("node_modules/@modelcontextprotocol/server-everything/dist/index.js"),
        python_sdk(),
    ) else {
        return;
    };
    // `legacy`: the initialize handshake (2025-11-25); `auto`, the SDK's default: protocol
    // 2026-07-28, whose results must carry `resultType` (server-everything, speaking the
    // older version upstream, sends none: toolgate adds it).
    for (mode, protocol) in [("legacy", "2025-11-25"), ("auto", "2026-07-28")] {
        let served = serve();
        let out = Command::new(&python)
            .arg(repo().join("layers/mcp-testkit/tests/python/sdk_content.py"))
            .args([
                served.url.as_str(),
                "example-assistant-token",
                "example-reader-token",
                mode,
            ])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "the SDK client ({mode}) failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
        for agent in ["assistant", "reader"] {
            assert_eq!(seen[agent]["protocol"], protocol, "{mode}: {seen}");
        }
        assert_two_agents(&seen);
        assert_audited(&served.audit);
    }
}
