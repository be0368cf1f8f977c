//! Issue 35 item 8: held calls as MCP tasks (the Tasks extension, SEP-2663). A call held in
//! the durable inbox for a client that declared the extension is a task whose id is the held
//! call's: `tasks/get` reports it `working` while a person decides, sends it once when it is
//! approved and completes with the tool's result, fails it with the reason when it is denied
//! or expires, and `tasks/cancel` cancels it. The task lives in the inbox: another server on
//! the same inbox (a restart, a replica) answers for it. Without the extension, a held call
//! is a held tool result as before.
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

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientCapabilities, ClientConfig,
    GetTaskParams, TaskPayload, TaskStatus,
};
use rmcp::service::RunningService;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};
use toolgate::GovernanceHandle;
use toolgate_engine::config::{Format, load_str};
use toolgate_inbox::{Answer, Inbox, SqliteInbox, SqliteOptions, State};
use toolgate_mcp::serve::{GovernedServer, ServeConfig, WireNames, token_hash};

const CONFIG: &str = r#"{
    "approval": {"channel": "inbox"},
    "servers": {"drift": {"trust_tool_annotations": true}},
    "behavior_gating": {"require_approval_for_non_read_only": true},
    "agents": [
        {"name": "dev", "allowed_tools": ["drift__bare", "drift__stats"]},
        {"name": "other", "allowed_tools": ["drift__bare"]}
    ]
}"#;

/// A client that declares the Tasks extension (or not).
#[derive(Clone)]
struct TaskClient(bool);

impl ClientHandler for TaskClient {
    fn get_info(&self) -> ClientConfig {
        let caps = if self.0 {
            ClientCapabilities::builder().enable_tasks().build()
        } else {
            ClientCapabilities::default()
        };
        ClientConfig::new(caps, rmcp::model::Implementation::new("task-client", "1"))
    }
}

async fn start(path: &std::path::Path) -> GovernedServer {
    let inbox = Inbox::new(SqliteInbox::open(path, SqliteOptions::default()).unwrap());
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

async fn connect(
    server: &GovernedServer,
    agent: &str,
    tasks: bool,
) -> RunningService<RoleClient, TaskClient> {
    let (client_end, server_end) = tokio::io::duplex(256 * 1024);
    let server = server.clone();
    let agent = agent.to_owned();
    tokio::spawn(async move { server.serve_io(&agent, server_end).await });
    TaskClient(tasks).serve(client_end).await.unwrap()
}

async fn call(client: &RunningService<RoleClient, TaskClient>, args: Value) -> CallToolResponse {
    let Value::Object(args) = args else { panic!() };
    client
        .peer()
        .call_tool_once(CallToolRequestParams::new("drift__bare").with_arguments(args))
        .await
        .unwrap()
}

/// The task id of a call answered with a task.
fn task_id(r: &CallToolResponse) -> String {
    match r {
        CallToolResponse::Task(t) => {
            assert_eq!(t.task.status, TaskStatus::Working, "{t:?}");
            t.task.task_id.clone()
        }
        other => panic!("a task: {other:?}"),
    }
}

async fn bare_runs(client: &RunningService<RoleClient, TaskClient>) -> u64 {
    let Value::Object(args) = json!({}) else {
        panic!()
    };
    let r = client
        .peer()
        .call_tool(CallToolRequestParams::new("drift__stats").with_arguments(args))
        .await
        .unwrap();
    r.structured_content.unwrap()["calls"]["bare"]
        .as_u64()
        .unwrap_or(0)
}

fn result_text(payload: &TaskPayload) -> String {
    let TaskPayload::Completed { result } = payload else {
        panic!("completed: {payload:?}")
    };
    result["content"][0]["text"]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue35_a_held_call_is_a_task_completed_once_by_its_approval() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.db");
    let server = start(&path).await;
    let dev = connect(&server, "dev", true).await;
    assert!(
        dev.peer_info().unwrap().capabilities.supports_tasks(),
        "declared with a durable inbox"
    );
    let id = task_id(&call(&dev, json!({"n": 1})).await);
    let inbox = Inbox::new(SqliteInbox::open(&path, SqliteOptions::default()).unwrap());
    let store = inbox.store();
    assert_eq!(
        store.get(&id).await.unwrap().unwrap().state,
        State::Pending,
        "the task is the held call"
    );
    // The agent's repeat is the same task, not a second card.
    assert_eq!(task_id(&call(&dev, json!({"n": 1})).await), id);
    let got = dev.peer().get_task(GetTaskParams::new(&id)).await.unwrap();
    assert_eq!(got.task.status(), TaskStatus::Working);
    assert!(
        got.task
            .task
            .status_message
            .as_deref()
            .unwrap_or("")
            .contains("held for a person's approval"),
        "{got:?}"
    );
    assert_eq!(bare_runs(&dev).await, 0);

    store
        .answer(&id, Answer::approved_by("alice"))
        .await
        .unwrap();
    // The poll after the approval sends it, once, and completes with its result.
    let got = dev.peer().get_task(GetTaskParams::new(&id)).await.unwrap();
    assert_eq!(got.task.status(), TaskStatus::Completed, "{got:?}");
    assert_eq!(result_text(&got.task.payload), "bare ran");
    assert_eq!(store.get(&id).await.unwrap().unwrap().state, State::Done);
    // A restarted server (or a replica) on the same inbox answers for it: the result as
    // recorded, never sent again.
    let again = start(&path).await;
    let elsewhere = connect(&again, "dev", true).await;
    let got = elsewhere
        .peer()
        .get_task(GetTaskParams::new(&id))
        .await
        .unwrap();
    assert_eq!(got.task.status(), TaskStatus::Completed, "{got:?}");
    assert_eq!(result_text(&got.task.payload), "bare ran");
    assert_eq!(bare_runs(&dev).await, 1, "sent exactly once");
    // Another agent's poll: no such task.
    let other = connect(&server, "other", true).await;
    assert!(
        other
            .peer()
            .get_task(GetTaskParams::new(&id))
            .await
            .is_err()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue35_a_denied_task_fails_with_the_reason_and_a_cancelled_one_is_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.db");
    let server = start(&path).await;
    let dev = connect(&server, "dev", true).await;
    let inbox = Inbox::new(SqliteInbox::open(&path, SqliteOptions::default()).unwrap());
    let store = inbox.store();
    let denied = task_id(&call(&dev, json!({"n": 2})).await);
    store
        .answer(
            &denied,
            Answer::deny("k", "bob", Some(String::from("not on a Friday"))),
        )
        .await
        .unwrap();
    let got = dev
        .peer()
        .get_task(GetTaskParams::new(&denied))
        .await
        .unwrap();
    match &got.task.payload {
        TaskPayload::Failed { error } => {
            let m = error["message"].as_str().unwrap();
            assert!(
                m.contains("denied by bob") && m.contains("not on a Friday"),
                "{m}"
            );
        }
        other => panic!("failed: {other:?}"),
    }
    let cancelled = task_id(&call(&dev, json!({"n": 3})).await);
    dev.peer()
        .cancel_task(CancelTaskParams::new(&cancelled))
        .await
        .unwrap();
    assert_eq!(
        store.get(&cancelled).await.unwrap().unwrap().state,
        State::Cancelled
    );
    let got = dev
        .peer()
        .get_task(GetTaskParams::new(&cancelled))
        .await
        .unwrap();
    assert_eq!(got.task.status(), TaskStatus::Cancelled);
    assert_eq!(bare_runs(&dev).await, 0, "nothing was sent");
    // Without the extension, a held call is a held tool result as before.
    let plain = connect(&server, "dev", false).await;
    match call(&plain, json!({"n": 4})).await {
        CallToolResponse::Complete(r) => {
            assert_eq!(r.structured_content.unwrap()["toolgate"]["outcome"], "held");
        }
        other => panic!("a held result: {other:?}"),
    }
}
