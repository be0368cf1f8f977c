//! Sessions and turns through a real stack over a SQLite inbox (R43, seed 002): a held call
//! records its session and turn, a subagent's held call pauses its parent's turn, a flow
//! agent holds on its own session, the interaction carries every field a person sees, and a
//! version-1 inbox file is upgraded in place.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;

use common::*;
use serde_json::json;
use toolgate::GovernanceHandle;
use toolgate_core::{AgentRef, ToolCall, ToolResponse, Turn};
use toolgate_engine::config::{Format, load_str};
use toolgate_inbox::HeldCalls;
use toolgate_inbox::{Answer, Inbox, SCHEMA_V1, SCHEMA_VERSION, State};
use tower::ServiceExt;

fn setup() -> (tempfile::TempDir, Inbox, Tool, Stack) {
    let dir = tempfile::tempdir().unwrap();
    let handle = GovernanceHandle::new(governance());
    let inbox = Inbox::new(sqlite(&dir.path().join("inbox.db")));
    let tool = Tool::default();
    let stack = stack(&handle, &inbox, &tool);
    (dir, inbox, tool, stack)
}

#[tokio::test]
async fn r43_a_subagents_held_call_pauses_the_parents_turn_and_is_answered_there() {
    let (_dir, inbox, tool, stack) = setup();
    let call = ToolCall::new(
        AgentRef::subagent("support", "researcher"),
        "refund",
        json!({"order": "A-1"}),
    )
    .in_turn("parent-session", "turn-4");
    let id = held(&stack, call).await;
    let store = inbox.store();

    let turn = store.turn_state("parent-session", "turn-4").await.unwrap();
    assert!(
        turn.is_paused(),
        "R43: the subagent's held call pauses the parent's turn"
    );
    assert_eq!(turn.pausing()[0].id(), id);
    let pending = store.pending("parent-session").await.unwrap();
    assert_eq!(pending.len(), 1, "R43: listed on the parent's session");
    let shown = pending[0].interaction();
    assert_eq!(
        shown.agent, "researcher",
        "R43: `agent` is the subagent's id"
    );
    assert_eq!(shown.prompt, "Approve refund?");
    assert_eq!(shown.model_name, "refund");
    assert_eq!(shown.input, json!({"order": "A-1"}));
    assert_eq!(shown.turn, Some(Turn::new("parent-session", "turn-4")));

    store
        .answer(&id, Answer::approved_by("alice"))
        .await
        .unwrap();
    assert!(
        store
            .turn_state("parent-session", "turn-4")
            .await
            .unwrap()
            .can_go_on(),
        "R43: every held call answered: the turn goes on"
    );
    let resumed = inbox.resume(&id, stack.clone()).await.unwrap();
    assert!(matches!(resumed.response, ToolResponse::Completed(_)));
    assert_eq!(tool.runs(), 1);
    assert_eq!(
        tool.received()[0].turn,
        Some(Turn::new("parent-session", "turn-4")),
        "the resumed call carries its session and turn"
    );
}

#[tokio::test]
async fn r43_a_flow_agent_in_its_own_session_holds_its_calls_there() {
    let (_dir, inbox, _tool, stack) = setup();
    // The parent's own call, and a flow agent's call in the flow's own session.
    let parent = held(
        &stack,
        ToolCall::new(support(), "refund", json!({"order": 1})).in_turn("parent", "t1"),
    )
    .await;
    let flow = held(
        &stack,
        ToolCall::new(
            AgentRef::subagent("support", "refund-flow"),
            "payout",
            json!({"order": 2}),
        )
        .in_turn("flow-7", "f1"),
    )
    .await;
    let store = inbox.store();
    let on_parent: Vec<_> = store
        .pending("parent")
        .await
        .unwrap()
        .iter()
        .map(|r| r.id().to_owned())
        .collect();
    assert_eq!(
        on_parent,
        vec![parent.clone()],
        "R43: the flow's call is not the parent's"
    );
    let on_flow = store.pending("flow-7").await.unwrap();
    assert_eq!(on_flow.len(), 1);
    assert_eq!(
        on_flow[0].id(),
        flow,
        "R43: it waits on the flow's own session"
    );
    assert_eq!(on_flow[0].interaction().agent, "refund-flow");

    // Cancelling the parent's turn leaves the flow's call alone.
    assert_eq!(
        store.cancel_turn("parent", "t1").await.unwrap(),
        vec![parent.clone()]
    );
    assert_eq!(
        store.get(&parent).await.unwrap().unwrap().state,
        State::Cancelled
    );
    assert_eq!(
        store.get(&flow).await.unwrap().unwrap().state,
        State::Pending
    );
}

#[tokio::test]
async fn r43_r22_a_rule_without_a_reason_is_described_to_the_person() {
    let governance = load_str(
        &json!({
            "approval": {"channel": "inbox"},
            "tools": [{"kind": "mcp", "server": "github", "name": "create_issue"}],
            "agents": [{"name": "support", "allowed_tools": ["github__create_issue"]}],
            "policy": {"rules": [
                {"effect": "ask", "server": "github", "tool": "create_*", "when": {"title": {}}}
            ]}
        })
        .to_string(),
        Format::Json,
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let handle = GovernanceHandle::new(governance);
    let inbox = Inbox::new(sqlite(&dir.path().join("inbox.db")));
    let tool = Tool::default();
    let stack = stack(&handle, &inbox, &tool);
    let id = held(
        &stack,
        ToolCall::new(support(), "github__create_issue", json!({"title": "x"})).in_turn("s", "t"),
    )
    .await;
    let shown = inbox.store().get(&id).await.unwrap().unwrap().interaction();
    assert_eq!(
        shown.prompt, "Approve github / create_issue?",
        "R43: server / own name"
    );
    assert_eq!(shown.model_name, "github__create_issue");
    assert_eq!(
        shown.reasons,
        vec![
            "tenant policy rule 0 asks about server `github`, tool `create_*`, when `title`"
                .to_owned()
        ],
        "R43: a rule without a reason is described"
    );
    let j = shown.to_json();
    assert_eq!(
        (j["server"].as_str(), j["tool"].as_str()),
        (Some("github"), Some("create_issue"))
    );
}

#[tokio::test]
async fn r43_a_version_1_inbox_file_is_upgraded_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(SCHEMA_V1).unwrap();
        conn.pragma_update(None, "application_id", toolgate_inbox::APPLICATION_ID)
            .unwrap();
        conn.pragma_update(None, "user_version", 1).unwrap();
        conn.execute(
            "INSERT INTO held_calls (interaction_id, call_id, tool, identities, definition_hash, \
             agent_profile, input_json, input_canonical, input_hash, reasons, run_mode, \
             run_background, created_at, expires_at, state, updated_at) VALUES ('ia_old', 'c1', \
             'refund', '[{\"kind\":\"http\",\"source\":\"\",\"name\":\"refund\"}]', 'sha256:d', \
             'support', '{}', '{}', 'sha256:i', '[{\"source\":\"agent\",\"reason\":\"r\"}]', \
             'use_agent_policy', 0, 1, 9999999999999, 'pending', 1)",
            [],
        )
        .unwrap();
    }
    let store = sqlite(&path);
    let old = store.get("ia_old").await.unwrap().unwrap();
    assert_eq!(
        old.state,
        State::Pending,
        "the held call survives the upgrade"
    );
    assert_eq!(old.call.turn, None, "a call held before sessions has none");
    let version: i64 = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    assert_eq!(SCHEMA_VERSION, 2);
    let indexed: i64 = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = 'held_calls_open'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(indexed, 1, "the upgrade adds the index of open calls");
    let mut c = toolgate_inbox_suite::held(json!({"n": 1}), std::time::Duration::from_secs(60));
    c.turn = Some(Turn::new("s", "t"));
    store.hold(c.clone()).await.unwrap();
    assert_eq!(store.pending("s").await.unwrap()[0].call, c);
    drop(store);
    // Opening again is a no-op.
    let again = sqlite(&path);
    assert_eq!(again.list(None).await.unwrap().len(), 2);
}

/// The held-calls guide's "Sessions and turns" example (layers/inbox/docs/held-calls.md), as a test.
#[tokio::test]
async fn r43_readme_a_host_pauses_and_resumes_a_turn() {
    let (_dir, inbox, tool, stack) = setup();
    let store = inbox.store();

    // The model asks for two refunds in turn 3 of session `s-42`: both are held.
    let mut held_ids = Vec::new();
    for order in [1, 2] {
        let call =
            ToolCall::new(support(), "refund", json!({ "order": order })).in_turn("s-42", "turn-3");
        if let ToolResponse::Held(h) = stack.clone().oneshot(call).await.unwrap() {
            held_ids.push(h.interaction_id);
        }
    }
    // The host pauses the turn and shows each interaction.
    let state = store.turn_state("s-42", "turn-3").await.unwrap();
    assert!(state.is_paused());
    for r in store.pending("s-42").await.unwrap() {
        let shown = r.interaction();
        assert_eq!(shown.prompt, "Approve refund?");
    }
    // A person approves one and denies the other, later, maybe from another process.
    store
        .answer(&held_ids[0], Answer::approved_by("alice"))
        .await
        .unwrap();
    store
        .answer(
            &held_ids[1],
            Answer::denied_by("alice", Some("duplicate".into())),
        )
        .await
        .unwrap();
    // Every held call is answered: the turn goes on, sending the approved call.
    let state = store.turn_state("s-42", "turn-3").await.unwrap();
    assert!(state.can_go_on());
    for r in &state.held {
        if r.state == State::Approved {
            let resumed = inbox.resume(r.id(), stack.clone()).await.unwrap();
            assert!(matches!(resumed.response, ToolResponse::Completed(_)));
        }
    }
    assert_eq!(tool.runs(), 1);
}
