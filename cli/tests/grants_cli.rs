//! `toolgate grant add / list / revoke` (SPEC R45) on a SQLite inbox, with the rights of an
//! `approvers` section, and a grant given by the CLI answering the calls of a running
//! `toolgate mcp serve` on the same inbox, without a restart, audited with the grant.
#![cfg(feature = "mcp")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::path::{Path, PathBuf};
use std::process::Output;

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

mod common;

use common::{toolgate, upstream};

const ALICE: &str = "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b";
const BOB: &str = "81b637d8fcd2c6da6359e6963113a1170de795e4b725b84d1e0b4cfd9ec58ce9";

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout_json(o: &Output) -> Value {
    assert!(o.status.success(), "{}", stderr(o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// A configuration with an inbox, two tools and two approvers: alice for every call, bob
/// for refunds of the `support` agent only.
fn write_config(dir: &Path) -> PathBuf {
    let config = json!({
        "approval": {"channel": "inbox"},
        "inbox": {"sqlite": dir.join("inbox.db")},
        "approvers": {"people": [
            {"name": "alice", "token_sha256": ALICE},
            {"name": "bob", "token_sha256": BOB, "tools": [{"tool": "refund_*", "agent": "support"}]}
        ]},
        "tools": [
            {"kind": "http", "name": "refund_order", "approval": "require_approval"},
            {"kind": "http", "name": "delete_user", "approval": "require_approval"}
        ],
        "agents": [{"name": "support", "allowed_tools": ["refund_order", "delete_user"]}]
    });
    let path = dir.join("toolgate.json");
    std::fs::write(&path, config.to_string()).unwrap();
    path
}

/// The sign-in token of each person of [`write_config`] (`carol`'s is nobody's).
fn secret_of(name: &str) -> &'static str {
    match name {
        "alice" => "secret",
        "bob" => "bob",
        _ => "carol",
    }
}

/// Runs `toolgate` as the person `--as` names, with their credential in the environment
/// (issue 34 item 2: with approvers configured, `--as` alone answers and grants nothing).
fn signed(args: &[&str]) -> Output {
    let at = args.iter().position(|a| *a == "--as").expect("--as");
    std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(args)
        .env("TOOLGATE_APPROVER_CREDENTIAL", secret_of(args[at + 1]))
        .output()
        .expect("the binary runs")
}

fn add(config: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "grant",
        "add",
        "--config",
        config.to_str().unwrap(),
        "--json",
    ];
    args.extend_from_slice(extra);
    if args.contains(&"--as") {
        signed(&args)
    } else {
        toolgate(&args)
    }
}

const REFUND: &[&str] = &[
    "--agent",
    "support",
    "--tool",
    "refund_order",
    "--when",
    r#"{"amount":{"lte":100}}"#,
    "--session",
    "S",
    "--for",
    "30m",
    "--max-calls",
    "5",
    "--as",
    "alice",
    "--reason",
    "the refund backlog",
];

#[test]
fn r45_grant_add_list_and_revoke_record_each_state_distinctly() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let added = stdout_json(&add(&config, REFUND));
    let id = added["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("gr_"), "{added}");
    assert_eq!(added["state"], "live");
    assert_eq!(added["when"], json!({"amount": {"lte": 100}}));
    assert_eq!(
        (added["session"].clone(), added["max_calls"].clone()),
        (json!("S"), json!(5))
    );
    assert_eq!(added["granted_by"], "alice");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let expires = added["expires_at"].as_u64().unwrap();
    assert!(
        expires > now + 29 * 60_000 && expires <= now + 30 * 60_000 + 1_000,
        "`--for 30m`: {expires} vs {now}"
    );

    let cfg = config.to_str().unwrap();
    let list = stdout_json(&toolgate(&["grant", "list", "--config", cfg, "--json"]));
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["id"], id.as_str());
    assert_eq!(list[0]["uses"], 0);
    let text = toolgate(&["grant", "list", "--config", cfg]);
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(
        text.contains(&id) && text.contains("live") && text.contains("0/5 calls"),
        "{text}"
    );

    let revoked = stdout_json(&signed(&[
        "grant", "revoke", &id, "--config", cfg, "--as", "alice", "--json",
    ]));
    assert_eq!(revoked["state"], "revoked");
    assert_eq!(revoked["revoked_by"], "alice");
    assert!(revoked["revoked_at"].is_string());

    // Revoked once: a second revocation is refused and the first one stands.
    let again = signed(&["grant", "revoke", &id, "--config", cfg, "--as", "alice"]);
    assert_eq!(again.status.code(), Some(1), "{}", stderr(&again));
    assert!(
        stderr(&again).contains("revoked already"),
        "{}",
        stderr(&again)
    );
    let unknown = signed(&[
        "grant", "revoke", "gr_nope", "--config", cfg, "--as", "alice",
    ]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(
        stderr(&unknown).contains("no grant has the id `gr_nope`"),
        "{}",
        stderr(&unknown)
    );
    let list = stdout_json(&toolgate(&["grant", "list", "--config", cfg, "--json"]));
    assert_eq!(list[0]["state"], "revoked");
    assert_eq!(list[0]["revoked_by"], "alice");
}

#[test]
fn r45_grant_add_names_the_option_of_each_problem() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let with = |field: &str, value: &str| {
        let mut args: Vec<&str> = REFUND.to_vec();
        let at = args.iter().position(|a| *a == field).unwrap();
        args[at + 1] = value;
        let out = add(&config, &args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{field} {value}: {}",
            stderr(&out)
        );
        stderr(&out)
    };
    let e = with("--when", r#"{"amount":{"lte":"a lot"}}"#);
    assert!(e.contains("`--when` at `amount.lte`"), "{e}");
    let e = with("--when", "{not json");
    assert!(e.contains("`--when`") && e.contains("is not JSON"), "{e}");
    let e = with("--for", "soon");
    assert!(e.contains("`--for`: `soon` is not a duration"), "{e}");
    let e = with("--for", "0s");
    assert!(e.contains("`--for`"), "{e}");
    let e = with("--max-calls", "0");
    assert!(e.contains("`--max-calls`"), "{e}");
    let e = with("--tool", "github__refund");
    assert!(e.contains("`--tool`"), "{e}");
    let e = with("--reason", "  ");
    assert!(e.contains("`--reason`"), "{e}");
    assert!(
        !dir.path().join("inbox.db").exists(),
        "nothing refused was stored: the inbox was not even opened"
    );
}

#[test]
fn r45_an_approver_grants_and_revokes_only_what_their_selectors_cover() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let grant = |who: &str, agent: &str, tool: &str| {
        add(
            &config,
            &[
                "--agent", agent, "--tool", tool, "--for", "1h", "--as", who, "--reason", "r",
            ],
        )
    };
    // Issue 34 item 2: a name without its credential gives nothing (an agent with a shell
    // gave itself a 30-day grant for every tool this way).
    let cfg = config.to_str().unwrap();
    let bare = toolgate(&[
        "grant", "add", "--config", cfg, "--agent", "*", "--tool", "*", "--for", "30d", "--as",
        "alice", "--reason", "r",
    ]);
    assert_eq!(bare.status.code(), Some(2));
    assert!(
        stderr(&bare).contains("`--as` alone is not enough"),
        "{}",
        stderr(&bare)
    );
    assert!(!dir.path().join("inbox.db").exists(), "nothing was stored");
    let carol = grant("carol", "support", "refund_order");
    assert_eq!(carol.status.code(), Some(2));
    assert!(
        stderr(&carol).contains(
            "the approver's credential was refused: that credential is not an approver's"
        ),
        "{}",
        stderr(&carol)
    );
    let beyond = grant("bob", "support", "delete_user");
    assert_eq!(beyond.status.code(), Some(2));
    assert!(
        stderr(&beyond).contains("`--tool`") && stderr(&beyond).contains("delete_user"),
        "{}",
        stderr(&beyond)
    );
    let wide = grant("bob", "support", "*");
    assert!(
        stderr(&wide).contains("`--tool`"),
        "a pattern reaching delete_user: {}",
        stderr(&wide)
    );
    let anyone = grant("bob", "*", "refund_order");
    assert!(
        stderr(&anyone).contains("`--agent`"),
        "bob's rights name one agent: {}",
        stderr(&anyone)
    );
    let nothing = grant("bob", "support", "refund_nothing");
    assert!(
        stderr(&nothing).contains("selects no tool"),
        "{}",
        stderr(&nothing)
    );

    let ok = stdout_json(&grant("bob", "support", "refund_order"));
    assert_eq!(ok["granted_by"], "bob");
    let alices = stdout_json(&grant("alice", "support", "delete_user"));
    let cfg = config.to_str().unwrap();
    let id = alices["id"].as_str().unwrap();
    let refused = signed(&["grant", "revoke", id, "--config", cfg, "--as", "bob"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        stderr(&refused).contains("`--as`: `bob` may not revoke"),
        "{}",
        stderr(&refused)
    );
    let list = stdout_json(&toolgate(&["grant", "list", "--config", cfg, "--json"]));
    assert_eq!(
        list[1]["state"], "live",
        "bob's refused revocation changed nothing"
    );
    let revoked = stdout_json(&signed(&[
        "grant", "revoke", id, "--config", cfg, "--as", "alice", "--json",
    ]));
    assert_eq!(revoked["revoked_by"], "alice");
}

// ---- A grant from the CLI answers a running `toolgate mcp serve` ----

async fn call(client: &RunningService<RoleClient, ()>, input: Value) -> CallToolResult {
    let Value::Object(args) = input else { panic!() };
    client
        .call_tool(CallToolRequestParams::new("drift__bare").with_arguments(args))
        .await
        .expect("a tool result, never a protocol error")
}

fn outcome(r: &CallToolResult) -> String {
    match &r.structured_content {
        Some(s) => s["toolgate"]["outcome"].as_str().unwrap_or("").to_owned(),
        None => String::from("completed"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r45_a_grant_added_by_the_cli_answers_a_running_mcp_serve_until_spent_and_is_audited() {
    let dir = tempfile::tempdir().unwrap();
    let (drift, url) = upstream().await;
    let audit = dir.path().join("audit.jsonl");
    let config = json!({
        "approval": {"channel": "inbox"},
        "inbox": {"sqlite": dir.path().join("inbox.db")},
        "audit": {"file": audit},
        "approvers": {"people": [{"name": "alice", "token_sha256": ALICE}]},
        "servers": {"drift": {"trust_tool_annotations": true}},
        "behavior_gating": {"require_approval_for_non_read_only": true},
        "agents": [{"name": "dev", "allowed_tools": ["drift__bare", "drift__lookup"]}],
        "mcp": {"servers": {"drift": {"url": url}}, "call_timeout_secs": 20}
    });
    let path = dir.path().join("toolgate.json");
    std::fs::write(&path, config.to_string()).unwrap();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolgate"));
    cmd.args(["mcp", "serve", "--agent", "dev", "--config"])
        .arg(&path);
    let dev = ().serve(TokioChildProcess::new(cmd).unwrap()).await.unwrap();

    let held = call(&dev, json!({"n": 1})).await;
    assert_eq!(outcome(&held), "held", "{held:?}");
    assert_eq!(drift.calls("bare"), 0);

    // `bare` is an MCP tool the configuration does not declare: alice (no selectors) may
    // grant it all the same.
    let cfg = path.to_str().unwrap();
    let added = signed(&[
        "grant",
        "add",
        "--config",
        cfg,
        "--agent",
        "dev",
        "--tool",
        "bare",
        "--server",
        "drift",
        "--when",
        r#"{"n": {"gte": 2}}"#,
        "--for",
        "10m",
        "--max-calls",
        "1",
        "--as",
        "alice",
        "--reason",
        "one more bare call",
        "--json",
    ]);
    let id = stdout_json(&added)["id"].as_str().unwrap().to_owned();

    // R45: a call the grant's `when` does not match is still asked.
    let small = call(&dev, json!({"n": 0})).await;
    assert_eq!(outcome(&small), "held", "{small:?}");
    // The next matching call runs without asking: no restart of the server.
    let ran = call(&dev, json!({"n": 2})).await;
    assert_eq!(ran.is_error, Some(false), "{ran:?}");
    assert_eq!(drift.calls("bare"), 1);
    // Spent after one send: the next matching call is asked again.
    let after = call(&dev, json!({"n": 3})).await;
    assert_eq!(outcome(&after), "held", "{after:?}");
    assert_eq!(drift.calls("bare"), 1);
    dev.cancel().await.unwrap();

    let list = stdout_json(&toolgate(&["grant", "list", "--config", cfg, "--json"]));
    assert_eq!(
        (list[0]["state"].clone(), list[0]["uses"].clone()),
        (json!("spent"), json!(1))
    );

    let records: Vec<Value> = std::fs::read_to_string(&audit)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let granted: Vec<&Value> = records
        .iter()
        .filter(|r| !r["decision"]["granted"].is_null())
        .collect();
    assert_eq!(
        granted.len(),
        1,
        "exactly the call the grant answered: {records:?}"
    );
    let r = granted[0];
    assert_eq!(
        r["decision"]["granted"],
        json!({"id": id, "granted_by": "alice"})
    );
    assert_eq!(
        r["approval"]["wait"], "approved",
        "R45: recorded as approved by alice"
    );
    assert_eq!(r["approval"]["approver"], "alice");
    assert_eq!(r["outcome"], "completed");
}
