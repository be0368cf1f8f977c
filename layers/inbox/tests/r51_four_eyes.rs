//! Four eyes at run time (R51) on a SQLite inbox: the store's cases, and a real toolgate
//! stack (exposure → confidentiality → air gap → approval gate with the inbox channel → a
//! counting tool) whose policy asks for two approvals: the call is held, one approval keeps
//! it held, the second lets it be sent once.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;

use common::*;
use serde_json::{Value, json};
use toolgate::GovernanceHandle;
use toolgate_core::{RefusalCode, ToolCall, ToolResponse};
use toolgate_engine::Governance;
use toolgate_engine::config::{Format, load_str};
use toolgate_inbox::{Answer, Inbox, ResumeError, SqliteOptions, State};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn r51_sqlite_passes_the_four_eyes_cases() {
    let fixture = SqliteFixture::new(SqliteOptions::default());
    toolgate_inbox_suite::four_eyes::run_four_eyes(&fixture).await;
}

/// `refund` asks; the tenant policy asks for `approvals` people's approvals of it.
fn four_eyes(approvals: u8) -> Governance {
    let config = json!({
        "approval": {"channel": "inbox"},
        "tools": [
            {"kind": "http", "name": "refund", "approval": "require_approval", "description": DESCRIPTION}
        ],
        "agents": [{"name": "support", "allowed_tools": ["refund"]}],
        "policy": {"rules": [
            {"effect": "ask", "tool": "refund", "reason": "refunds need two people", "approvals": approvals}
        ]}
    });
    load_str(&config.to_string(), Format::Json).unwrap()
}

fn setup(approvals: u8) -> (tempfile::TempDir, GovernanceHandle, Inbox, Tool, Stack) {
    let dir = tempfile::tempdir().unwrap();
    let handle = GovernanceHandle::new(four_eyes(approvals));
    let inbox = Inbox::new(sqlite(&dir.path().join("inbox.db")));
    let tool = Tool::default();
    let stack = stack(&handle, &inbox, &tool);
    (dir, handle, inbox, tool, stack)
}

fn refund(input: Value) -> ToolCall {
    ToolCall::new(support(), "refund", input)
}

#[tokio::test]
async fn r51_the_gate_holds_a_call_one_approval_keeps_it_held_and_the_second_sends_it_once() {
    let (_dir, _handle, inbox, tool, stack) = setup(2);
    let input = json!({"order": "A-51", "amount": 5000});
    // Before R51 ran, the inbox gathered one approval and the gate refused such a call
    // `no_approval_channel`: it is held now, recording what it needs.
    let id = held(&stack, refund(input.clone())).await;
    let rec = inbox.store().get(&id).await.unwrap().unwrap();
    assert_eq!(rec.approvals_needed(), 2, "R51: the decision's approvals");
    assert_eq!(tool.runs(), 0);

    let first = inbox
        .store()
        .answer(&id, Answer::approve("k-alice", "alice"))
        .await
        .unwrap();
    assert_eq!(first.waiting_for(), 1);
    // One approval keeps it held: resuming is refused, and the agent calling again gets
    // the same card.
    match inbox.resume(&id, stack.clone()).await {
        Err(ResumeError::NotApproved {
            state: State::Pending,
            ..
        }) => {}
        other => panic!("R51: one approval of two sends nothing, got {other:?}"),
    }
    match send(&stack, refund(input.clone())).await {
        ToolResponse::Held(h) => assert_eq!(h.interaction_id, id, "R26: the same card"),
        other => panic!("R51: still held, got {other:?}"),
    }
    assert_eq!(tool.runs(), 0, "R51: not sent on one approval");

    // The same person again changes nothing.
    let again = inbox
        .store()
        .answer(&id, Answer::approve("k-alice-2", "alice"))
        .await
        .unwrap();
    assert!(again.already_approved);
    assert!(inbox.resume(&id, stack.clone()).await.is_err());
    assert_eq!(tool.runs(), 0);

    // The second person: approved, sent once, through the same stack.
    inbox
        .store()
        .answer(&id, Answer::approve("k-bob", "bob"))
        .await
        .unwrap();
    let resumed = inbox.resume(&id, stack.clone()).await.unwrap();
    assert!(
        matches!(resumed.response, ToolResponse::Completed(_)),
        "{resumed:?}"
    );
    assert_eq!(resumed.recorded, Some(State::Done));
    assert_eq!(tool.runs(), 1);
    assert_eq!(tool.received()[0].input, input, "R35: the input both saw");
    let rec = inbox.store().get(&id).await.unwrap().unwrap();
    assert_eq!(rec.approved_by(), "alice and bob");
    assert!(
        inbox.resume(&id, stack.clone()).await.is_err(),
        "never twice"
    );
    assert_eq!(tool.runs(), 1);

    // The agent calling again is told it was sent, once; then it asks anew.
    let told = send(&stack, refund(input.clone())).await;
    assert!(told.refusal().is_some(), "{told:?}");
    assert_eq!(tool.runs(), 1);
}

#[tokio::test]
async fn r51_r38_a_call_that_now_needs_more_approvals_than_it_gathered_is_not_sent() {
    let (_dir, handle, inbox, tool, stack) = setup(2);
    let id = held(&stack, refund(json!({"order": "A-53"}))).await;
    for who in ["alice", "bob"] {
        inbox
            .store()
            .answer(&id, Answer::approve(format!("k-{who}"), who))
            .await
            .unwrap();
    }
    // During the wait the rule came to need three.
    handle.store(four_eyes(3));
    let resumed = inbox.resume(&id, stack.clone()).await.unwrap();
    let refusal = resumed
        .response
        .refusal()
        .unwrap_or_else(|| panic!("R38: refused, got {:?}", resumed.response));
    assert_eq!(refusal.code, RefusalCode::Rejected);
    assert!(
        refusal
            .reasons
            .iter()
            .any(|r| r.contains("now needs 3 approvals")),
        "{refusal:?}"
    );
    assert_eq!(
        tool.runs(),
        0,
        "R38: the approval answered another question"
    );
}

#[tokio::test]
async fn r51_a_call_marked_approved_with_fewer_approvals_than_it_needs_is_never_sent() {
    let (dir, _handle, inbox, tool, stack) = setup(2);
    let id = held(&stack, refund(json!({"order": "A-54"}))).await;
    inbox
        .store()
        .answer(&id, Answer::approve("k-alice", "alice"))
        .await
        .unwrap();
    // A program that does not gather approvals (an older replica) marks it approved.
    let conn = rusqlite::Connection::open(dir.path().join("inbox.db")).unwrap();
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .unwrap();
    conn.execute(
        "UPDATE held_calls SET state = 'approved', approver = 'alice' WHERE interaction_id = ?1",
        [&id],
    )
    .unwrap();
    let resumed = inbox.resume(&id, stack.clone()).await.unwrap();
    let refusal = resumed
        .response
        .refusal()
        .unwrap_or_else(|| panic!("R51: refused, got {:?}", resumed.response));
    assert!(
        refusal
            .reasons
            .iter()
            .any(|r| r.contains("needs 2 approvals from distinct people and has 1")),
        "{refusal:?}"
    );
    assert_eq!(tool.runs(), 0);
    // The store's claim refuses it too, whoever asks.
    let rec = inbox.store().get(&id).await.unwrap().unwrap();
    let claim = toolgate_inbox::Claim {
        input_hash: rec.call.input_hash.clone(),
        definition_hash: rec.call.definition_hash.clone(),
        token: "t".into(),
    };
    conn.execute(
        "UPDATE held_calls SET state = 'approved', result_json = NULL WHERE interaction_id = ?1",
        [&id],
    )
    .unwrap();
    assert!(inbox.store().claim(&id, claim).await.is_err());
}

#[tokio::test]
async fn r51_a_denial_after_one_approval_ends_the_call_and_the_agent_is_told() {
    let (_dir, _handle, inbox, tool, stack) = setup(2);
    let input = json!({"order": "A-55"});
    let id = held(&stack, refund(input.clone())).await;
    inbox
        .store()
        .answer(&id, Answer::approve("k-alice", "alice"))
        .await
        .unwrap();
    inbox
        .store()
        .answer(
            &id,
            Answer::deny("k-carol", "carol", Some("too much".into())),
        )
        .await
        .unwrap();
    let told = send(&stack, refund(input)).await;
    let refusal = told.refusal().unwrap_or_else(|| panic!("{told:?}"));
    assert_eq!(refusal.code, RefusalCode::Rejected);
    assert!(
        refusal.reasons.iter().any(|r| r.contains("carol")),
        "{refusal:?}"
    );
    assert_eq!(tool.runs(), 0);
}
