//! Issue 33: one catalog, one snapshot, one answer path.
//!
//! R52, one catalog: the operator's settings of an MCP tool (`tools[]` in the configuration:
//! `approval`, `confidential`, `network`, `network_override`) stay in force over the tool as
//! its server lists it, so `toolgate mcp serve` lists and decides exactly what `expose` and
//! `decide` say. Each case runs the real binary over stdio (an rmcp client) in front of the
//! drift server over streamable HTTP, which counts every call it receives: a call the
//! configuration refuses is never sent. Before R52 every case but the last ran the call.
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
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

mod common;

use common::upstream;

/// One configuration, its tool, and what `decide` (and so the gateway) must do with it.
struct Case {
    name: &'static str,
    tool: &'static str,
    config: Value,
    /// `run`, `ask` (held), or `refused CODE`.
    expect: &'static str,
}

/// A gateway configuration for `url` (the inbox file is set per case).
fn config(url: &str, extra: Value, agent: Value) -> Value {
    let mut c = json!({
        "approval": {"channel": "inbox"},
        "agents": [agent],
        "mcp": {"servers": {"drift": {"url": url}}, "call_timeout_secs": 20}
    });
    if let (Value::Object(c), Value::Object(extra)) = (&mut c, extra) {
        c.extend(extra);
    }
    c
}

fn cases(url: &str) -> Vec<Case> {
    let dev = || json!({"name": "dev", "allowed_tools": ["drift__bare", "drift__lookup"]});
    vec![
        Case {
            name: "a declared deny",
            tool: "bare",
            config: config(
                url,
                json!({"tools": [{"server": "drift", "name": "bare", "approval": "deny"}]}),
                dev(),
            ),
            expect: "refused denied",
        },
        Case {
            name: "a declared require_approval, with an inbox",
            tool: "lookup",
            config: config(
                url,
                json!({"tools": [{"server": "drift", "name": "lookup", "approval": "require_approval"}]}),
                dev(),
            ),
            expect: "ask",
        },
        Case {
            name: "confidential, for a confidential agent",
            tool: "lookup",
            config: config(
                url,
                json!({"tools": [{"server": "drift", "name": "lookup", "confidential": true}]}),
                json!({"name": "dev", "allowed_tools": ["drift__bare", "drift__lookup"], "confidential": true}),
            ),
            expect: "refused confidential",
        },
        Case {
            name: "network_override egress, air-gapped",
            tool: "lookup",
            config: config(
                url,
                json!({"air_gapped": true,
                       "tools": [{"server": "drift", "name": "lookup", "network_override": "egress"}]}),
                dev(),
            ),
            expect: "refused air_gapped",
        },
        Case {
            name: "network_override none, air-gapped (the opposite case: it runs)",
            tool: "bare",
            config: config(
                url,
                json!({"air_gapped": true,
                       "tools": [{"server": "drift", "name": "bare", "network_override": "none"}]}),
                dev(),
            ),
            expect: "run",
        },
    ]
}

/// `toolgate decide` on the configuration: `run`, `ask` or `refused CODE`.
fn decide(dir: &Path, config: &Path, tool: &str) -> String {
    let call = dir.join("call.json");
    let body = json!({"agent": "dev", "name": format!("drift__{tool}"), "input": {"query": "x"}});
    std::fs::write(&call, body.to_string()).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .arg("decide")
        .arg(config)
        .arg("--call")
        .arg(&call)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "decide: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    match v["outcome"].as_str().unwrap() {
        "refused" => format!("refused {}", v["refusal"].as_str().unwrap()),
        other => other.to_owned(),
    }
}

/// `toolgate check CONFIG --json`: its exit code and its JSON.
fn check_json(config: &Path) -> (Option<i32>, Value) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .arg("check")
        .arg(config)
        .arg("--json")
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    (out.status.code(), v)
}

/// `toolgate expose`'s MCP tools for `dev`.
fn expose(config: &Path) -> Vec<String> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .arg("expose")
        .arg(config)
        .args(["--agent", "dev", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut names: Vec<String> = v["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .filter(|n| n.starts_with("drift__"))
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r52_mcp_serve_keeps_the_operators_settings_of_a_listed_tool_and_agrees_with_decide() {
    let (drift, url) = upstream().await;
    for case in cases(&url) {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = case.config;
        cfg["inbox"] = json!({"sqlite": dir.path().join("inbox.db")});
        let path = dir.path().join("toolgate.json");
        std::fs::write(&path, cfg.to_string()).unwrap();
        let decided = decide(dir.path(), &path, case.tool);
        assert_eq!(decided, case.expect, "{}: decide", case.name);

        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolgate"));
        cmd.args(["mcp", "serve", "--agent", "dev", "--config"])
            .arg(&path);
        let client = ().serve(rmcp::transport::TokioChildProcess::new(cmd).unwrap()).await.unwrap();
        let mut listed: Vec<String> = client
            .list_all_tools()
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.name.to_string())
            .filter(|n| *n == format!("drift__{}", case.tool))
            .collect();
        listed.sort();
        // `expose` knows the declared tool only; the gateway also lists the other one.
        assert_eq!(
            listed,
            expose(&path),
            "{}: the gateway lists the declared tool exactly when `expose` shows it",
            case.name
        );

        let before = drift.calls(case.tool);
        let result = client
            .call_tool(
                CallToolRequestParams::new(format!("drift__{}", case.tool))
                    .with_arguments(json!({"query": "x"}).as_object().unwrap().clone()),
            )
            .await
            .expect("a tool result");
        let sent = drift.calls(case.tool) - before;
        let meta = result
            .structured_content
            .as_ref()
            .map(|s| s["toolgate"].clone())
            .unwrap_or(Value::Null);
        let got = match (sent, meta["outcome"].as_str(), meta["code"].as_str()) {
            (1, _, _) => String::from("run"),
            (0, Some("held"), _) => String::from("ask"),
            (0, _, Some(code)) => format!("refused {code}"),
            _ => format!("sent {sent} times, answered {result:?}"),
        };
        assert_eq!(got, case.expect, "{}: through mcp serve", case.name);
        client.cancel().await.unwrap();
    }
}

/// R1, R2 (issue 33 item 2): two upstream servers whose ids normalise alike (`evil` and
/// `evil.`) would list tools under the same names. `check` and `mcp serve` give one answer,
/// named at the second id's path, before anything is started.
#[test]
fn r1_r2_two_mcp_servers_whose_ids_normalise_alike_are_one_error_for_check_and_mcp_serve() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("toolgate.json");
    let cfg = json!({
        "agents": [{"name": "dev", "allowed_tools": ["evil__*"]}],
        "mcp": {"servers": {"evil": {"command": "true"}, "evil.": {"command": "true"}}}
    });
    std::fs::write(&path, cfg.to_string()).unwrap();
    let (code, v) = check_json(&path);
    assert_eq!(code, Some(1), "{v}");
    let error = v["errors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["path"] == "mcp.servers.evil.")
        .unwrap_or_else(|| panic!("no error at mcp.servers.evil.: {v}"));
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("normalise to the same id"), "{message}");

    let serve = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["mcp", "serve", "--agent", "dev", "--config"])
        .arg(&path)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(serve.status.code(), Some(2), "{serve:?}");
    let stderr = String::from_utf8_lossy(&serve.stderr);
    assert!(
        stderr.contains("mcp.servers.evil.") && stderr.contains(message),
        "mcp serve names the same error at the same path: {stderr}"
    );
    assert!(
        !stderr.contains("cannot connect"),
        "refused before any server is started: {stderr}"
    );
}

/// R44 (issue 33 item 5): quotas count in one place. Without an inbox, each `mcp serve`
/// process — each stdio connection, each restart — would count from zero; `check` and
/// `mcp serve` refuse the configuration at `policy.quotas`, naming both ways out, and
/// `mcp.quota_counting: "per_process"` is the operator's word that this is meant.
#[test]
fn r44_a_policy_with_quotas_and_no_shared_store_is_refused_by_check_and_mcp_serve() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("toolgate.json");
    let write = |extra: Value| {
        let mut cfg = json!({
            "tools": [{"server": "drift", "name": "lookup"}],
            "agents": [{"name": "dev", "allowed_tools": ["drift__lookup"]}],
            "policy": {"rules": [], "quotas": [{"max": 3, "window_secs": 3600, "reason": "three an hour"}]},
            "mcp": {"servers": {"drift": {"command": "true"}}}
        });
        if let (Value::Object(c), Value::Object(extra)) = (&mut cfg, extra) {
            for (k, v) in extra {
                match (c.get_mut(&k), v) {
                    (Some(Value::Object(into)), Value::Object(v)) => into.extend(v),
                    (_, v) => {
                        c.insert(k, v);
                    }
                }
            }
        }
        std::fs::write(&path, cfg.to_string()).unwrap();
    };
    let check = || check_json(&path);
    write(json!({}));
    let (code, v) = check();
    assert_eq!(code, Some(1), "{v}");
    let error = &v["errors"][0];
    assert_eq!(error["path"], "policy.quotas", "{v}");
    let message = error["message"].as_str().unwrap();
    for fix in ["`inbox`", "quota_counting", "per_process"] {
        assert!(message.contains(fix), "{message}");
    }
    let serve = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["mcp", "serve", "--agent", "dev", "--config"])
        .arg(&path)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(serve.status.code(), Some(2), "{serve:?}");
    let stderr = String::from_utf8_lossy(&serve.stderr);
    assert!(stderr.contains("policy.quotas"), "{stderr}");

    // The operator's word, or a shared store: valid.
    write(json!({"mcp": {"quota_counting": "per_process"}}));
    assert_eq!(check().0, Some(0));
    write(json!({"inbox": {"sqlite": dir.path().join("inbox.db")}}));
    assert_eq!(check().0, Some(0));
    write(json!({"mcp": {"quota_counting": "sometimes"}}));
    let (code, v) = check();
    assert_eq!(code, Some(1));
    assert_eq!(v["errors"][0]["path"], "mcp.quota_counting", "{v}");
}

/// Starts `toolgate mcp serve --agent dev` over stdio on `config`.
async fn stdio_client(
    config: &Path,
) -> rmcp::service::RunningService<rmcp::service::RoleClient, ()> {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolgate"));
    cmd.args(["mcp", "serve", "--agent", "dev", "--config"])
        .arg(config);
    ().serve(rmcp::transport::TokioChildProcess::new(cmd).unwrap())
        .await
        .unwrap()
}

/// The refusal code of a tool result, or `run` when it ran.
fn outcome(r: &rmcp::model::CallToolResult) -> String {
    let meta = r
        .structured_content
        .as_ref()
        .map(|s| s["toolgate"].clone())
        .unwrap_or(Value::Null);
    match (meta["outcome"].as_str(), meta["code"].as_str()) {
        (Some("held"), _) => String::from("held"),
        (_, Some(code)) => format!("refused {code}"),
        _ => String::from("run"),
    }
}

/// Issue 33 item 12: the gateway lists and holds only what it can send. An HTTP tool the
/// configuration declares (and asks about) is neither listed nor held: a call is refused
/// `unknown_tool` and the inbox stays empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue33_mcp_serve_neither_lists_nor_holds_a_tool_it_cannot_send() {
    let (drift, url) = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("toolgate.json");
    let db = dir.path().join("inbox.db");
    let cfg = json!({
        "approval": {"channel": "inbox"},
        "inbox": {"sqlite": db},
        "tools": [{"kind": "http", "name": "refund", "approval": "require_approval"}],
        "agents": [{"name": "dev", "allowed_tools": ["refund", "drift__lookup"]}],
        "mcp": {"servers": {"drift": {"url": url}}}
    });
    std::fs::write(&path, cfg.to_string()).unwrap();
    let client = stdio_client(&path).await;
    let names: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(names, ["drift__lookup"], "only what a server lists");
    let r = client
        .call_tool(
            CallToolRequestParams::new("refund")
                .with_arguments(json!({"amount": 5}).as_object().unwrap().clone()),
        )
        .await
        .unwrap();
    assert_eq!(outcome(&r), "refused unknown_tool", "{r:?}");
    client.cancel().await.unwrap();
    let pending = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["inbox", "list", "--json", "--db"])
        .arg(&db)
        .output()
        .unwrap();
    assert!(pending.status.success(), "{pending:?}");
    let held: Value = serde_json::from_slice(&pending.stdout).unwrap();
    assert_eq!(
        held.as_array().map(Vec::len),
        Some(0),
        "nothing was held: {held}"
    );
    assert_eq!(drift.calls("refund"), 0);
}

/// Issue 33 item 11: a server entry's `confidential` and `network` are read (`check`
/// accepts them, names a bad one at its path) and work: a confidential agent is refused the
/// withheld tool, and `network: "none"` lets an open-world tool run on an air-gapped host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r7_r8_a_server_entrys_confidential_and_network_are_read_and_in_force() {
    let (drift, url) = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("toolgate.json");
    let write = |server: Value, air_gapped: bool, confidential: bool| {
        let cfg = json!({
            "air_gapped": air_gapped,
            "agents": [{"name": "dev", "allowed_tools": ["drift__*"], "confidential": confidential}],
            "mcp": {"servers": {"drift": server}}
        });
        std::fs::write(&path, cfg.to_string()).unwrap();
    };
    let check = || check_json(&path);
    write(json!({"url": url, "confidential": "yes"}), false, false);
    let (code, v) = check();
    assert_eq!(code, Some(1));
    assert_eq!(
        v["errors"][0]["path"], "mcp.servers.drift.confidential",
        "{v}"
    );
    write(json!({"url": url, "network": "sometimes"}), false, false);
    let (code, v) = check();
    assert_eq!(code, Some(1));
    assert_eq!(v["errors"][0]["path"], "mcp.servers.drift.network", "{v}");

    write(json!({"url": url, "confidential": ["lookup"]}), false, true);
    assert_eq!(check().0, Some(0));
    let client = stdio_client(&path).await;
    let r = client
        .call_tool(
            CallToolRequestParams::new("drift__lookup")
                .with_arguments(json!({"query": "x"}).as_object().unwrap().clone()),
        )
        .await
        .unwrap();
    assert_eq!(outcome(&r), "refused confidential", "{r:?}");
    client.cancel().await.unwrap();

    write(json!({"url": url, "network": "none"}), true, false);
    assert_eq!(check().0, Some(0));
    let before = drift.calls("bare");
    let client = stdio_client(&path).await;
    let r = client
        .call_tool(CallToolRequestParams::new("drift__bare"))
        .await
        .unwrap();
    assert_eq!(outcome(&r), "run", "{r:?}");
    assert_eq!(drift.calls("bare"), before + 1);
    client.cancel().await.unwrap();
    assert_eq!(drift.calls("lookup"), 0);
}

/// Issue 34 item 2: whoever can write the inbox store can answer held calls. `check` warns
/// about a SQLite inbox file its group or anyone may write, and says nothing for mode 600.
#[cfg(unix)]
#[test]
fn issue34_check_warns_about_an_inbox_file_others_may_write() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("inbox.db");
    std::fs::write(&db, b"").unwrap();
    let path = dir.path().join("toolgate.json");
    let cfg = json!({"approval": {"channel": "inbox"}, "inbox": {"sqlite": db},
                     "agents": [{"name": "dev", "allowed_tools": []}]});
    std::fs::write(&path, cfg.to_string()).unwrap();
    let warned = |mode: u32| {
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(mode)).unwrap();
        let (code, v) = check_json(&path);
        assert_eq!(code, Some(0), "{v}");
        v["warnings"].as_array().unwrap().iter().any(|w| {
            w["path"] == "inbox.sqlite" && w["message"].as_str().unwrap().contains("chmod 600")
        })
    };
    assert!(warned(0o666));
    assert!(warned(0o664));
    assert!(!warned(0o600));
}
