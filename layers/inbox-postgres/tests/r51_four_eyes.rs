//! Four eyes at run time (R51) on PostgreSQL: the store's cases; two approvals given at the
//! same instant through two replicas (two `PostgresInbox`es, each behind its own gate, on
//! one database) approve the call once, and it is sent once, only after the second; an
//! inbox created before held calls recorded their approvals gains the columns on connect.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::*;
use serde_json::json;
use toolgate::GovernanceHandle;
use toolgate::approval::ApprovalGateLayer;
use toolgate_core::{ToolCall, ToolOutput, ToolResponse};
use toolgate_engine::Governance;
use toolgate_engine::config::{Format, load_str};
use toolgate_inbox::HeldCalls;
use toolgate_inbox::{Answer, Inbox, ResumeError, State};
use toolgate_inbox_postgres::PostgresOptions;
use tower::ServiceBuilder;
use tower::util::BoxCloneService;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn r51_postgres_passes_the_four_eyes_cases() {
    let url = require_pg!();
    let fixture = PgFixture::new(url, PostgresOptions::default().instance("suite-r51"));
    toolgate_inbox_suite::four_eyes::run_four_eyes(&fixture).await;
    fixture.cleanup().await;
}

fn two_people() -> Governance {
    let config = json!({
        "approval": {"channel": "inbox"},
        "tools": [{"kind": "http", "name": "refund", "approval": "require_approval"}],
        "agents": [{"name": "support", "allowed_tools": ["refund"]}],
        "policy": {"rules": [
            {"effect": "ask", "tool": "refund", "reason": "two people sign off refunds", "approvals": 2}
        ]}
    });
    load_str(&config.to_string(), Format::Json).unwrap()
}

/// One replica: its own connections and instance name, its own gate, and a tool that, when
/// it is invoked, checks on a connection of its own that the call it was sent had been
/// approved by two people (`early` counts the sends that had not).
struct Replica {
    inbox: Inbox,
    stack: Stack,
    runs: Arc<AtomicUsize>,
}

async fn replica(url: &str, schema: &str, instance: &str, early: &Arc<AtomicUsize>) -> Replica {
    let store = connect(url, schema, instance).await;
    let inbox = Inbox::new(store);
    let handle = GovernanceHandle::new(two_people());
    let runs = Arc::new(AtomicUsize::new(0));
    let look = Arc::new(raw(url, schema).await);
    let (counter, early) = (Arc::clone(&runs), Arc::clone(early));
    let tool = tower::service_fn(move |call: ToolCall| {
        let (counter, early, look) = (Arc::clone(&counter), Arc::clone(&early), Arc::clone(&look));
        async move {
            counter.fetch_add(1, Ordering::SeqCst);
            let hash = toolgate_engine::canon::input_hash(&call.input).unwrap();
            let approvals: i32 = look
                .query_one(
                    "SELECT COALESCE(json_array_length(approvals_json::json), 0) FROM held_calls \
                     WHERE input_hash = $1 AND state = 'claimed'",
                    &[&hash],
                )
                .await
                .unwrap()
                .get(0);
            if approvals != 2 {
                early.fetch_add(1, Ordering::SeqCst);
            }
            Ok::<_, Infallible>(ToolResponse::Completed(ToolOutput::new(
                json!({"refunded": call.input}),
            )))
        }
    });
    let stack = BoxCloneService::new(
        ServiceBuilder::new()
            .layer(ApprovalGateLayer::new(handle).channel(inbox.channel()))
            .service(tool),
    );
    Replica { inbox, stack, runs }
}

/// Resumes `id` through `stack` until it is sent by someone: `true` when this replica sent
/// it.
async fn resume_once_approved(inbox: Inbox, stack: Stack, id: String) -> bool {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        match inbox.resume(&id, stack.clone()).await {
            Ok(done) if done.recorded == Some(State::Done) => return true,
            // Another replica claimed it first.
            Ok(lost) => {
                assert!(lost.response.refusal().is_some(), "{lost:?}");
                return false;
            }
            Err(ResumeError::NotApproved {
                state: State::Pending,
                ..
            }) => {
                assert!(Instant::now() < until, "never approved");
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            Err(ResumeError::NotApproved { state, .. }) => {
                assert!(matches!(state, State::Claimed | State::Done), "{state}");
                return false;
            }
            Err(e) => panic!("{e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn r51_two_approvals_at_the_same_instant_through_two_replicas_send_the_call_once_after_the_second()
 {
    const CALLS: usize = 12;
    let url = require_pg!();
    let schema = fresh_schema();
    let early = Arc::new(AtomicUsize::new(0));
    let a = replica(&url, &schema, "gate-a", &early).await;
    let b = replica(&url, &schema, "gate-b", &early).await;
    let started = Instant::now();
    for i in 0..CALLS {
        let holder = if i % 2 == 0 { &a } else { &b };
        let call = ToolCall::new(support(), "refund", json!({"order": i}));
        let id = held(&holder.stack, call).await;
        // Alice on one replica and Bob on the other, at the same instant; meanwhile both
        // replicas try to send the call, over and over, from before the answers.
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        let senders: Vec<_> = [&a, &b]
            .into_iter()
            .map(|r| {
                tokio::spawn(resume_once_approved(
                    r.inbox.clone(),
                    r.stack.clone(),
                    id.clone(),
                ))
            })
            .collect();
        let answers: Vec<_> = [("alice", &a), ("bob", &b)]
            .into_iter()
            .map(|(who, r)| {
                let (store, id, barrier) = (
                    Arc::clone(r.inbox.store()),
                    id.clone(),
                    Arc::clone(&barrier),
                );
                tokio::spawn(async move {
                    barrier.wait().await;
                    store
                        .answer(&id, Answer::approve(format!("k-{who}"), who))
                        .await
                })
            })
            .collect();
        let mut counts = Vec::new();
        for t in answers {
            let receipt = t.await.unwrap().expect("R51: both approvals are taken");
            assert!(!receipt.already_approved);
            counts.push((receipt.approvals, receipt.waiting_for()));
        }
        counts.sort_unstable();
        assert_eq!(
            counts,
            vec![(1, 1), (2, 0)],
            "R51: one approval waited for the other, call {i}"
        );
        let mut sent = 0;
        for t in senders {
            if t.await.unwrap() {
                sent += 1;
            }
        }
        assert_eq!(sent, 1, "R26: sent by exactly one replica, call {i}");
        let rec = a.inbox.store().get(&id).await.unwrap().unwrap();
        assert_eq!(rec.state, State::Done);
        assert_eq!(rec.approvals.len(), 2, "R51: exactly two approvals");
        let mut names: Vec<&str> = rec.approvals.iter().map(|g| g.approver.as_str()).collect();
        names.sort_unstable();
        assert_eq!(names, ["alice", "bob"]);
    }
    eprintln!(
        "{CALLS} calls approved by two people at once through two replicas in {:?}",
        started.elapsed()
    );
    assert_eq!(
        a.runs.load(Ordering::SeqCst) + b.runs.load(Ordering::SeqCst),
        CALLS,
        "R26: each call sent exactly once"
    );
    assert_eq!(
        early.load(Ordering::SeqCst),
        0,
        "R51: no call was sent before its second approval"
    );
    drop_schemas(&url, &[schema]).await;
}

#[tokio::test]
async fn r51_an_inbox_without_the_approvals_columns_gains_them_on_connect_and_its_calls_need_one() {
    let url = require_pg!();
    let schema = fresh_schema();
    let old = toolgate_inbox_suite::held(json!({"n": 1}), Duration::from_secs(3600));
    {
        let store = connect(&url, &schema, "gate").await;
        store.hold(old.clone()).await.unwrap();
    }
    // The inbox as the program before this one left it.
    let client = raw(&url, &schema).await;
    client
        .batch_execute(
            "ALTER TABLE held_calls DROP COLUMN approvals_needed; \
             ALTER TABLE held_calls DROP COLUMN approvals_json;",
        )
        .await
        .unwrap();
    let store = connect(&url, &schema, "gate").await;
    let r = store.get(&old.interaction_id).await.unwrap().unwrap();
    assert_eq!(r.approvals_needed(), 1, "held before: one approval");
    let receipt = store
        .answer(&old.interaction_id, Answer::approved_by("alice"))
        .await
        .unwrap();
    assert_eq!((receipt.approvals, receipt.approvals_needed), (1, 1));
    let two = toolgate_inbox_suite::four_eyes::held_needing(2, json!({"n": 2}));
    store.hold(two.clone()).await.unwrap();
    store
        .answer(&two.interaction_id, Answer::approved_by("alice"))
        .await
        .unwrap();
    let r = store.get(&two.interaction_id).await.unwrap().unwrap();
    assert_eq!((r.state, r.approvals.len()), (State::Pending, 1));
    let n: i64 = client
        .query_one(
            "SELECT count(*) FROM information_schema.columns WHERE table_schema = $1 \
             AND table_name = 'held_calls' AND column_name IN ('approvals_needed', 'approvals_json')",
            &[&schema],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 2);
    drop(store);
    drop_schemas(&url, &[schema]).await;
}
