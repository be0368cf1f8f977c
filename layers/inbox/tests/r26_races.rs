//! Races (R26): 50 concurrent approvals of one held call and 50 concurrent senders, each on
//! its own SQLite connection to one file, as separate runtime instances would be. Exactly one
//! answer wins; exactly one tool invocation.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use serde_json::json;
use toolgate::GovernanceHandle;
use toolgate_core::{ToolCall, ToolResponse};
use toolgate_inbox::HeldCalls;
use toolgate_inbox::{Answer, AnswerError, Inbox, ResumeError, SqliteInbox, SqliteOptions, State};

const N: usize = 50;

fn options() -> SqliteOptions {
    SqliteOptions::default().busy_timeout(Duration::from_secs(30))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn r26_fifty_concurrent_approvals_with_distinct_keys_have_exactly_one_winner() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.db");
    let handle = GovernanceHandle::new(governance());
    let inbox = Inbox::new(SqliteInbox::open(&path, options()).unwrap());
    let stack = stack(&handle, &inbox, &Tool::default());
    let id = held(&stack, ToolCall::new(support(), "refund", json!({"n": 1}))).await;

    // Each approver on its own connection.
    let stores: Vec<SqliteInbox> = (0..N)
        .map(|_| SqliteInbox::open(&path, options()).unwrap())
        .collect();
    let barrier = Arc::new(tokio::sync::Barrier::new(N));
    let tasks: Vec<_> = stores
        .into_iter()
        .enumerate()
        .map(|(i, store)| {
            let id = id.clone();
            let barrier = Arc::clone(&barrier);
            tokio::spawn(async move {
                barrier.wait().await;
                let answer = if i % 5 == 4 {
                    Answer::deny(format!("key-{i}"), format!("person-{i}"), None)
                } else {
                    Answer::approve(format!("key-{i}"), format!("person-{i}"))
                };
                store.answer(&id, answer).await
            })
        })
        .collect();
    let mut winners = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            Ok(receipt) => winners.push(receipt),
            Err(AnswerError::AlreadyDecided { .. }) => {}
            Err(e) => panic!("a losing answer must be refused as already decided: {e:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "R26: exactly one answer wins");
    let rec = inbox.store().get(&id).await.unwrap().unwrap();
    assert_eq!(rec.approver.as_deref(), Some(winners[0].approver.as_str()));
    assert_eq!(
        rec.state,
        if winners[0].approved {
            State::Approved
        } else {
            State::Denied
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn r26_fifty_concurrent_senders_invoke_the_tool_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.db");
    let handle = GovernanceHandle::new(governance());
    let tool = Tool::default();
    let first = Inbox::new(SqliteInbox::open(&path, options()).unwrap());
    let id = held(
        &stack(&handle, &first, &tool),
        ToolCall::new(support(), "refund", json!({"order": 9})),
    )
    .await;
    first
        .store()
        .answer(&id, Answer::approve("k", "alice"))
        .await
        .unwrap();

    // 50 senders, each its own inbox connection and its own stack over the one tool.
    let senders: Vec<(Inbox, Stack)> = (0..N)
        .map(|_| {
            let inbox = Inbox::new(SqliteInbox::open(&path, options()).unwrap());
            let s = stack(&handle, &inbox, &tool);
            (inbox, s)
        })
        .collect();
    let barrier = Arc::new(tokio::sync::Barrier::new(N));
    let tasks: Vec<_> = senders
        .into_iter()
        .map(|(inbox, s)| {
            let id = id.clone();
            let barrier = Arc::clone(&barrier);
            tokio::spawn(async move {
                barrier.wait().await;
                inbox.resume(&id, s).await
            })
        })
        .collect();
    let (mut sent, mut refused, mut not_approved) = (0, 0, 0);
    for t in tasks {
        match t.await.unwrap() {
            Ok(r) if r.recorded == Some(State::Done) => {
                assert!(matches!(r.response, ToolResponse::Completed(_)));
                sent += 1;
            }
            Ok(r) => {
                assert!(r.response.is_refused(), "{r:?}");
                assert_eq!(r.recorded, None, "a loser records nothing");
                refused += 1;
            }
            Err(ResumeError::NotApproved { state, .. }) => {
                assert!(matches!(state, State::Claimed | State::Done), "{state}");
                not_approved += 1;
            }
            Err(e) => panic!("unexpected: {e}"),
        }
    }
    assert_eq!(sent, 1, "R26: exactly one sender wins");
    assert_eq!(sent + refused + not_approved, N);
    assert_eq!(tool.runs(), 1, "R26: exactly one tool invocation");
    assert_eq!(tool.received()[0].input, json!({"order": 9}));
    assert_eq!(
        first.store().get(&id).await.unwrap().unwrap().state,
        State::Done
    );
    eprintln!(
        "senders: 1 sent, {refused} refused at the gate, {not_approved} refused before sending"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn r26_fifty_concurrent_senders_on_one_shared_store_invoke_the_tool_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let handle = GovernanceHandle::new(governance());
    let tool = Tool::default();
    let inbox = Inbox::new(SqliteInbox::open(dir.path().join("inbox.db"), options()).unwrap());
    let s = stack(&handle, &inbox, &tool);
    let id = held(&s, ToolCall::new(support(), "refund", json!({"order": 10}))).await;
    inbox
        .store()
        .answer(&id, Answer::approve("k", "alice"))
        .await
        .unwrap();
    let tasks: Vec<_> = (0..N)
        .map(|_| {
            let (inbox, s, id) = (inbox.clone(), s.clone(), id.clone());
            tokio::spawn(async move { inbox.resume(&id, s).await })
        })
        .collect();
    let mut done = 0;
    for t in tasks {
        if let Ok(r) = t.await.unwrap()
            && r.recorded == Some(State::Done)
        {
            done += 1;
        }
    }
    assert_eq!(done, 1);
    assert_eq!(tool.runs(), 1, "R26: exactly one tool invocation");
}
