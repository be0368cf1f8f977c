//! R35, R38 through `toolgate mcp serve`: a repeat of a held call redeems (or reports) the
//! open held call whose input is exactly its own, among every open call sharing its
//! canonical hash — `{"amount": 1.0}` and `{"amount": 1}` canonicalise alike but are two
//! inputs, and an approval of one never answers, hides or blocks the other.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;

use std::collections::HashMap;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use toolgate::GovernanceHandle;
use toolgate_engine::config::{Format, load_str};
use toolgate_inbox::{Answer, EditedInput, Inbox, SqliteInbox, SqliteOptions, State};
use toolgate_mcp::serve::{GovernedServer, ServeConfig, WireNames, token_hash};

const CONFIG: &str = r#"{
    "approval": {"channel": "inbox"},
    "servers": {"drift": {"trust_tool_annotations": true}},
    "behavior_gating": {"require_approval_for_non_read_only": true},
    "agents": [{"name": "dev", "allowed_tools": ["drift__bare", "drift__stats"]}]
}"#;

async fn server(inbox: Inbox) -> GovernedServer {
    let config = ServeConfig {
        servers: vec![common::drift("drift")],
        tokens: HashMap::from([(token_hash("dev-token"), String::from("dev"))]),
        token_names: HashMap::new(),
        call_timeout: Duration::from_secs(20),
        wire_names: WireNames::Qualified,
        jwt: None,
        gateway: Default::default(),
        hooks: Vec::new(),
    };
    let handle = GovernanceHandle::new(load_str(CONFIG, Format::Json).unwrap());
    GovernedServer::start(handle, &config, Some(inbox))
        .await
        .unwrap()
}

async fn connect(server: &GovernedServer) -> RunningService<RoleClient, ()> {
    let (client_end, server_end) = tokio::io::duplex(256 * 1024);
    let server = server.clone();
    tokio::spawn(async move { server.serve_io("dev", server_end).await });
    ().serve(client_end).await.unwrap()
}

async fn call(client: &RunningService<RoleClient, ()>, tool: &str, args: Value) -> CallToolResult {
    let Value::Object(args) = args else { panic!() };
    client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(args))
        .await
        .unwrap_or_else(|e| panic!("`{tool}` must be answered with a tool result, got {e}"))
}

fn text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The interaction id of a held result.
fn held_id(r: &CallToolResult) -> String {
    let meta = &r
        .structured_content
        .as_ref()
        .unwrap_or_else(|| panic!("{r:?}"))["toolgate"];
    assert_eq!(meta["outcome"], "held", "{r:?}");
    meta["interaction_id"].as_str().unwrap().to_owned()
}

async fn bare_runs(client: &RunningService<RoleClient, ()>) -> u64 {
    let stats = call(client, "drift__stats", json!({})).await;
    stats.structured_content.unwrap()["calls"]["bare"]
        .as_u64()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r35_r38_an_approved_call_is_redeemed_past_a_newer_open_call_with_the_same_hash() {
    let dir = tempfile::tempdir().unwrap();
    let inbox = Inbox::new(
        SqliteInbox::open(dir.path().join("inbox.db"), SqliteOptions::default()).unwrap(),
    );
    let server = server(inbox.clone()).await;
    let dev = connect(&server).await;

    // `1.0` is held and approved; then `1` (the same canonical hash) is held and approved
    // too, so it is the newest approved call with that hash.
    let float = held_id(&call(&dev, "drift__bare", json!({"amount": 1.0})).await);
    inbox
        .store()
        .answer(&float, Answer::approved_by("alice"))
        .await
        .unwrap();
    let int = held_id(&call(&dev, "drift__bare", json!({"amount": 1})).await);
    assert_ne!(int, float, "two inputs, two held calls");
    inbox
        .store()
        .answer(&int, Answer::approved_by("alice"))
        .await
        .unwrap();

    // The repeat of `1.0` redeems its own approval, not held again.
    let ran = call(&dev, "drift__bare", json!({"amount": 1.0})).await;
    assert_eq!(text(&ran), "bare ran", "{ran:?}");
    let store = inbox.store();
    assert_eq!(store.get(&float).await.unwrap().unwrap().state, State::Done);
    assert_eq!(
        store.get(&int).await.unwrap().unwrap().state,
        State::Approved
    );
    // …and the repeat of `1` its own.
    let ran = call(&dev, "drift__bare", json!({"amount": 1})).await;
    assert_eq!(text(&ran), "bare ran", "{ran:?}");
    assert_eq!(store.get(&int).await.unwrap().unwrap().state, State::Done);
    assert_eq!(
        bare_runs(&dev).await,
        2,
        "each approval sent its own call once"
    );
    assert_eq!(
        store.list(None).await.unwrap().len(),
        2,
        "nothing held anew"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r26_r35_a_pending_call_is_reported_again_past_an_approved_one_with_the_same_hash() {
    let dir = tempfile::tempdir().unwrap();
    let inbox = Inbox::new(
        SqliteInbox::open(dir.path().join("inbox.db"), SqliteOptions::default()).unwrap(),
    );
    let server = server(inbox.clone()).await;
    let dev = connect(&server).await;

    // `1.0` approved, `1` pending: a repeat of `1` is its pending call, not a third card
    // (the approved `1.0` is found first by the hash, and is not its input).
    let float = held_id(&call(&dev, "drift__bare", json!({"amount": 1.0})).await);
    inbox
        .store()
        .answer(&float, Answer::approved_by("alice"))
        .await
        .unwrap();
    let int = held_id(&call(&dev, "drift__bare", json!({"amount": 1})).await);
    let again = held_id(&call(&dev, "drift__bare", json!({"amount": 1})).await);
    assert_eq!(again, int, "R26: the same held call, not a second one");
    assert_eq!(inbox.store().list(None).await.unwrap().len(), 2);
    assert_eq!(bare_runs(&dev).await, 0, "nothing was sent");
}

/// Issue 35 item 9: a person edits a held call's input and approves it. The agent's repeat
/// carries the input it sent (it never learns the edit): it is answered by the edited call,
/// sent once with the edited input, audited with both; the repeat after that is told it was
/// sent; nothing new is held for the original input.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue35_r26_a_repeat_of_an_edited_call_is_answered_by_the_edited_call_sent_once() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let inbox = Inbox::new(
        SqliteInbox::open(dir.path().join("inbox.db"), SqliteOptions::default()).unwrap(),
    );
    let document = format!(
        r#"{{"approval": {{"channel": "inbox"}},
            "servers": {{"drift": {{"trust_tool_annotations": true}}}},
            "policy": {{"rules": [{{"effect": "ask", "server": "drift", "tool": "write_note", "reason": "notes are read by customers"}}]}},
            "audit": {{"file": {}}},
            "agents": [{{"name": "dev", "allowed_tools": ["drift__write_note", "drift__stats"]}}]}}"#,
        json!(audit.to_str().unwrap())
    );
    let config = ServeConfig {
        servers: vec![common::drift("drift")],
        tokens: HashMap::from([(token_hash("dev-token"), String::from("dev"))]),
        token_names: HashMap::new(),
        call_timeout: Duration::from_secs(20),
        wire_names: WireNames::Qualified,
        jwt: None,
        gateway: Default::default(),
        hooks: Vec::new(),
    };
    let handle = GovernanceHandle::new(load_str(&document, Format::Json).unwrap());
    let server = GovernedServer::start(handle, &config, Some(inbox.clone()))
        .await
        .unwrap();
    let dev = connect(&server).await;
    let sent = json!({"text": "refund 1000 to A-1"});
    let id = held_id(&call(&dev, "drift__write_note", sent.clone()).await);
    let edited = json!({"text": "refund 100 to A-1"});
    let edit = EditedInput::new(&edited).unwrap();
    inbox
        .store()
        .answer_edited(&id, Answer::approve("k-edit", "alice"), edit)
        .await
        .unwrap();

    // The agent repeats what it sent: the edited call is sent, once.
    let ran = call(&dev, "drift__write_note", sent.clone()).await;
    assert_eq!(text(&ran), "saved", "{ran:?}");
    let stats = call(&dev, "drift__stats", json!({})).await;
    assert_eq!(
        stats.structured_content.unwrap()["notes"],
        json!(["refund 100 to A-1"]),
        "the edited input was sent, never the original"
    );
    let store = inbox.store();
    assert_eq!(store.get(&id).await.unwrap().unwrap().state, State::Done);

    // The next repeat is told it was sent (R26), and nothing new is held.
    let again = call(&dev, "drift__write_note", sent.clone()).await;
    assert_eq!(again.is_error, Some(true), "{again:?}");
    assert!(text(&again).contains("already sent"), "{again:?}");
    assert_eq!(store.list(None).await.unwrap().len(), 1, "no fresh card");

    // The audit record of the send binds the edited input and the one the agent sent (by
    // hash: the audit keeps inputs only when told to).
    let records: Vec<Value> = std::fs::read_to_string(&audit)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let send = records
        .iter()
        .find(|r| r.get("edit").is_some_and(|e| !e.is_null()))
        .unwrap_or_else(|| panic!("no audit record of the edited send: {records:#?}"));
    let hash = |v: &Value| toolgate_engine::canon::input_hash(v).unwrap();
    assert_eq!(send["outcome"], "completed", "{send:#}");
    assert_eq!(send["input_hash"], hash(&edited), "{send:#}");
    assert_eq!(send["edit"]["original_input_hash"], hash(&sent), "{send:#}");
    assert_eq!(send["edit"]["edited_by"], "alice", "{send:#}");
}
