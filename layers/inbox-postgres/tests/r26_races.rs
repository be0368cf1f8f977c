//! Races (R26) on one Postgres inbox: 50 concurrent approvals of one held call with
//! distinct keys, and 50 concurrent senders, each on its own connection as separate runtime
//! instances would be. Exactly one answer wins; exactly one tool invocation.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;

use std::sync::Arc;
use std::time::Instant;

use common::*;
use serde_json::json;
use toolgate::GovernanceHandle;
use toolgate_core::{ToolCall, ToolResponse};
use toolgate_inbox::HeldCalls;
use toolgate_inbox::{Answer, AnswerError, Inbox, ResumeError, State};
use toolgate_inbox_postgres::PostgresInbox;

const N: usize = 50;

/// The tests here open 50 connections each: one at a time, so a server with the default
/// `max_connections` (100) copes.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn instances(url: &str, schema: &str, prefix: &str) -> Vec<PostgresInbox> {
    let mut stores = Vec::with_capacity(N);
    for i in 0..N {
        stores.push(
            PostgresInbox::connect(url, options(schema, &format!("{prefix}-{i}")).pool_size(1))
                .await
                .unwrap(),
        );
    }
    stores
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn r26_fifty_concurrent_approvals_with_distinct_keys_have_exactly_one_winner() {
    let url = require_pg!();
    let _serial = ONE_AT_A_TIME.lock().await;
    let schema = fresh_schema();
    let handle = GovernanceHandle::new(governance());
    let inbox = Inbox::new(connect(&url, &schema, "gate").await);
    let stack = stack(&handle, &inbox, &Tool::default());

    for round in 0..3 {
        let id = held(
            &stack,
            ToolCall::new(support(), "refund", json!({"round": round})),
        )
        .await;
        // Each approver on its own connection, released together.
        let stores = instances(&url, &schema, "approver").await;
        let barrier = Arc::new(tokio::sync::Barrier::new(N));
        let started = Instant::now();
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
        eprintln!("round {round}: 50 answers in {:?}", started.elapsed());
        assert_eq!(winners.len(), 1, "R26: exactly one answer wins");
        assert!(!winners[0].replayed);
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
        // The winner's key, repeated by the winner, is the same one answer; by someone else,
        // no repeat at all (issue 34 item 5: a key is its approver's).
        let repeat = |approver: &str| Answer {
            approve: winners[0].approved,
            idempotency_key: Some(rec.answer_key.clone().unwrap()),
            approver: approver.into(),
            reason: None,
            principal: None,
            binding: None,
        };
        let again = inbox
            .store()
            .answer(&id, repeat(&winners[0].approver))
            .await
            .unwrap();
        assert!(again.replayed && again.approver == winners[0].approver);
        let other = inbox.store().answer(&id, repeat("someone else")).await;
        assert!(
            matches!(other, Err(AnswerError::AlreadyDecided { .. })),
            "{other:?}"
        );
    }
    drop_schemas(&url, &[schema]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn r26_fifty_concurrent_senders_on_their_own_connections_invoke_the_tool_exactly_once() {
    let url = require_pg!();
    let _serial = ONE_AT_A_TIME.lock().await;
    let schema = fresh_schema();
    let handle = GovernanceHandle::new(governance());
    let tool = Tool::default();
    let first = Inbox::new(connect(&url, &schema, "gate").await);
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

    // 50 senders, each its own instance, connection and stack over the one tool.
    let senders: Vec<(Inbox, Stack)> = instances(&url, &schema, "sender")
        .await
        .into_iter()
        .map(|store| {
            let inbox = Inbox::new(store);
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
    eprintln!(
        "senders: 1 sent, {refused} refused at the gate, {not_approved} refused before sending"
    );
    assert_eq!(sent, 1, "R26: exactly one sender wins");
    assert_eq!(sent + refused + not_approved, N);
    assert_eq!(tool.runs(), 1, "R26: exactly one tool invocation");
    assert_eq!(tool.received()[0].input, json!({"order": 9}));
    let rec = first.store().get(&id).await.unwrap().unwrap();
    assert_eq!(rec.state, State::Done);
    assert!(rec.claimed_by.unwrap().starts_with("sender-"));
    drop_schemas(&url, &[schema]).await;
}
