//! `toolgate inbox` with sessions and turns (R43), idempotency keys optional (seed 002), the
//! store taken from `--db`, `--pg-url`, `TOOLGATE_PG_URL` or `--config` (issue 13), and
//! `policy get` refusing a stored rule that names the wire name (seed 002, R22).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{Value, json};
use toolgate::GovernanceHandle;
use toolgate::approval::ApprovalGateLayer;
use toolgate_core::{AgentRef, ToolCall, ToolOutput, ToolResponse};
use toolgate_engine::config::{Format, load_str};
use toolgate_inbox::{Inbox, SqliteInbox, SqliteOptions, State};
use tower::{ServiceBuilder, ServiceExt, service_fn};

fn toolgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(args)
        .env_remove("TOOLGATE_PG_URL")
        .output()
        .expect("the binary runs")
}

fn toolgate_env(args: &[&str], key: &str, value: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(args)
        .env(key, value)
        .output()
        .expect("the binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json_out(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(o)))
}

/// Holds `refund` calls: each `(agent, session, turn, input)`; returns their ids in order.
async fn hold_all(inbox: &Inbox, calls: &[(AgentRef, &str, &str, Value)]) -> Vec<String> {
    let gov = load_str(
        r#"{"approval": {"channel": "inbox"},
            "tools": [{"kind": "http", "name": "refund"}],
            "agents": [{"name": "support", "allowed_tools": ["refund"]}],
            "policy": {"rules": [{"effect": "ask", "tool": "refund"}]}}"#,
        Format::Json,
    )
    .unwrap();
    let stack = ServiceBuilder::new()
        .layer(ApprovalGateLayer::new(GovernanceHandle::new(gov)).channel(inbox.channel()))
        .service(service_fn(|call: ToolCall| async move {
            Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::new(call.input)))
        }));
    let mut ids = Vec::new();
    for (agent, session, turn, input) in calls {
        let call = ToolCall::new(agent.clone(), "refund", input.clone()).in_turn(*session, *turn);
        let ToolResponse::Held(h) = stack.clone().oneshot(call).await.unwrap() else {
            panic!("not held")
        };
        ids.push(h.interaction_id);
    }
    ids
}

fn sqlite_inbox(db: &Path) -> Inbox {
    Inbox::new(SqliteInbox::open(db, SqliteOptions::default()).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r43_inbox_list_session_show_approve_without_a_key_and_cancel_turn() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("inbox.db");
    let dbs = db.to_str().unwrap();
    let inbox = sqlite_inbox(&db);
    let ids = hold_all(
        &inbox,
        &[
            (AgentRef::profile("support"), "s1", "t1", json!({"n": 1})),
            (
                AgentRef::subagent("support", "researcher"),
                "s1",
                "t1",
                json!({"n": 2}),
            ),
            (AgentRef::profile("support"), "s1", "t2", json!({"n": 3})),
            (AgentRef::profile("support"), "s2", "t1", json!({"n": 4})),
        ],
    )
    .await;

    let o = toolgate(&["inbox", "list", "--db", dbs, "--session", "s1", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let listed = json_out(&o);
    let mut listed_ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["interaction_id"].as_str().unwrap())
        .collect();
    // Held within one millisecond they may tie on age; the order is the suite's to check.
    listed_ids.sort_unstable();
    let mut want = vec![ids[0].as_str(), ids[1].as_str(), ids[2].as_str()];
    want.sort_unstable();
    assert_eq!(listed_ids, want, "R43: the session's held calls, s1 only");
    let sub = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["interaction_id"] == ids[1].as_str())
        .unwrap();
    assert_eq!(sub["subagent"], "researcher");
    assert_eq!(sub["session"], "s1");
    assert_eq!(sub["turn"], "t1");
    assert_eq!(sub["prompt"], "Approve refund?");

    // show: the interaction a person sees, with its session and turn.
    let o = toolgate(&["inbox", "show", &ids[1], "--db", dbs]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    for needle in [
        "Approve refund?",
        "session:      s1",
        "turn:         t1",
        "as:           refund",
        "tenant policy rule 0 asks about tool `refund`",
        "subagent `researcher`",
    ] {
        assert!(text.contains(needle), "`{needle}` missing from:\n{text}");
    }
    let o = toolgate(&["inbox", "show", &ids[1], "--db", dbs, "--json"]);
    let v = json_out(&o);
    assert_eq!(v["interaction"]["prompt"], "Approve refund?");
    assert_eq!(v["interaction"]["agent"], "researcher");
    assert_eq!(v["interaction"]["toolName"], "refund");
    assert_eq!(v["interaction"]["input"], json!({"n": 2}));
    assert_eq!(
        v["interaction"]["reasons"][0],
        "tenant policy rule 0 asks about tool `refund`"
    );

    // approve without a key: its own answer; again: already decided (exit 1).
    let o = toolgate(&["inbox", "approve", &ids[0], "--db", dbs, "--as", "alice"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "R43: a key is optional: {}",
        stderr(&o)
    );
    let o = toolgate(&["inbox", "approve", &ids[0], "--db", dbs, "--as", "alice"]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "R43: without a key each answer is its own"
    );

    // cancel-turn: the held calls of s1/t1 not yet sent — the approved one too (R47) —
    // end cancelled; others are untouched.
    let o = toolgate(&["inbox", "cancel-turn", "s1", "t1", "--db", dbs, "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // Held within one millisecond they may tie on age (then the id orders them): compare sets.
    let mut cancelled: Vec<String> =
        serde_json::from_value(json_out(&o)["cancelled"].clone()).unwrap();
    cancelled.sort_unstable();
    let mut want = vec![ids[0].clone(), ids[1].clone()];
    want.sort_unstable();
    assert_eq!(
        cancelled, want,
        "R43: the turn's unsent calls, and only those"
    );
    let store = inbox.store();
    assert_eq!(
        store.get(&ids[0]).await.unwrap().unwrap().state,
        State::Cancelled,
        "R47: an approved, unsent call of the cancelled turn ends too"
    );
    assert_eq!(
        store.get(&ids[1]).await.unwrap().unwrap().state,
        State::Cancelled
    );
    assert_eq!(
        store.get(&ids[2]).await.unwrap().unwrap().state,
        State::Pending
    );
    assert_eq!(
        store.get(&ids[3]).await.unwrap().unwrap().state,
        State::Pending
    );
    let o = toolgate(&[
        "inbox",
        "list",
        "--db",
        dbs,
        "--session",
        "s1",
        "--state",
        "pending",
        "--json",
    ]);
    assert_eq!(json_out(&o).as_array().unwrap().len(), 1);
    let o = toolgate(&["inbox", "cancel-turn", "s1", "t1", "--db", dbs]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).contains("nothing changed"), "{}", stdout(&o));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r26_the_store_comes_from_db_config_or_pg_url_never_two_of_them() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("inbox.db");
    let dbs = db.to_str().unwrap();
    let inbox = sqlite_inbox(&db);
    let ids = hold_all(
        &inbox,
        &[(AgentRef::profile("support"), "s", "t", json!({}))],
    )
    .await;
    let cfg = d.path().join("toolgate.json");
    std::fs::write(
        &cfg,
        json!({"inbox": {"sqlite": dbs, "ttl": "24h", "synchronous": "full"}}).to_string(),
    )
    .unwrap();
    let cfgs = cfg.to_str().unwrap();
    let o = toolgate(&["inbox", "list", "--config", cfgs, "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(json_out(&o)[0]["interaction_id"], ids[0].as_str());
    let o = toolgate(&["policy", "put", "--config", cfgs, "-"]);
    assert_ne!(o.status.code(), Some(2), "{}", stderr(&o));

    let o = toolgate(&[
        "inbox",
        "list",
        "--db",
        dbs,
        "--pg-url",
        "postgres://127.0.0.1:1/x",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("not both"), "{}", stderr(&o));
    let o = toolgate(&["inbox", "list"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("TOOLGATE_PG_URL"), "{}", stderr(&o));
    let bare = d.path().join("bare.json");
    std::fs::write(&bare, "{}").unwrap();
    let o = toolgate(&["inbox", "list", "--config", bare.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no `inbox` section"), "{}", stderr(&o));
    // `--db` wins over the environment.
    let o = toolgate_env(
        &["inbox", "list", "--db", dbs, "--json"],
        "TOOLGATE_PG_URL",
        "postgres://127.0.0.1:1/unreachable",
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

const WIRE_NAME_POLICY: &str = r#"{"rules": [{"effect": "ask", "tool": "github__create_issue"}]}"#;

fn assert_get_refuses(o: &Output) {
    assert_eq!(o.status.code(), Some(1), "seed 002: {}", stderr(o));
    let err = stderr(o);
    assert!(err.contains("rules[0].tool"), "names the rule: {err}");
    assert!(
        err.contains("policy put"),
        "says to put a corrected policy: {err}"
    );
    assert!(stdout(o).is_empty(), "nothing is printed: {}", stdout(o));
}

#[test]
fn seed002_policy_get_refuses_a_stored_rule_naming_the_wire_name_sqlite() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("inbox.db");
    let dbs = db.to_str().unwrap();
    let policy = d.path().join("p.json");
    std::fs::write(&policy, r#"{"rules": []}"#).unwrap();
    let o = toolgate(&["policy", "put", "--db", dbs, policy.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // Written before such rules were refused: straight into the table.
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute("UPDATE stored_policy SET body = ?1", [WIRE_NAME_POLICY])
        .unwrap();
    drop(conn);
    assert_get_refuses(&toolgate(&["policy", "get", "--db", dbs]));
    std::fs::write(
        &policy,
        r#"{"rules": [{"effect": "ask", "server": "github", "tool": "create_issue"}]}"#,
    )
    .unwrap();
    let o = toolgate(&["policy", "put", "--db", dbs, policy.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = toolgate(&["policy", "get", "--db", dbs]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "a valid put ends it: {}",
        stderr(&o)
    );
    assert_eq!(json_out(&o)["rules"][0]["tool"], "create_issue");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed002_policy_get_refuses_a_stored_rule_naming_the_wire_name_postgres() {
    let Ok(url) = std::env::var("TOOLGATE_PG_URL") else {
        eprintln!(
            "skipped: TOOLGATE_PG_URL is unset (start a throwaway server with `eval \"$(bash .ci/postgres.sh)\"`)"
        );
        return;
    };
    let schema = format!("cli_{}", std::process::id());
    let admin = connect(&url, "public").await;
    admin
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"
        ))
        .await
        .unwrap();
    let sep = if url.contains('?') { '&' } else { '?' };
    let scoped = format!("{url}{sep}options=-c%20search_path%3D{schema}");
    let d = tempfile::tempdir().unwrap();
    let policy = d.path().join("p.json");
    std::fs::write(&policy, r#"{"rules": []}"#).unwrap();
    let o = toolgate(&[
        "policy",
        "put",
        "--pg-url",
        &scoped,
        policy.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let client = connect(&url, &schema).await;
    let n = client
        .execute("UPDATE stored_policy SET body = $1", &[&WIRE_NAME_POLICY])
        .await
        .unwrap();
    assert_eq!(n, 1);
    assert_get_refuses(&toolgate(&["policy", "get", "--pg-url", &scoped]));
    // The same through TOOLGATE_PG_URL, and through a configuration's `inbox` section.
    assert_get_refuses(&toolgate_env(
        &["policy", "get"],
        "TOOLGATE_PG_URL",
        &scoped,
    ));
    let cfg = d.path().join("toolgate.json");
    std::fs::write(&cfg, json!({"inbox": {"postgres": scoped}}).to_string()).unwrap();
    assert_get_refuses(&toolgate(&[
        "policy",
        "get",
        "--config",
        cfg.to_str().unwrap(),
    ]));
    std::fs::write(
        &policy,
        r#"{"rules": [{"effect": "ask", "server": "github", "tool": "create_issue"}]}"#,
    )
    .unwrap();
    let o = toolgate(&[
        "policy",
        "put",
        "--pg-url",
        &scoped,
        policy.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = toolgate(&["policy", "get", "--pg-url", &scoped]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // And the inbox commands work against the shared store.
    let o = toolgate(&[
        "inbox",
        "list",
        "--pg-url",
        &scoped,
        "--session",
        "s",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(json_out(&o), json!([]));
    admin
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .await
        .unwrap();
}

async fn connect(url: &str, schema: &str) -> tokio_postgres::Client {
    let mut config: tokio_postgres::Config = url.parse().unwrap();
    config.options(format!("-c search_path={schema}"));
    let (client, connection) = config.connect(tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}
