//! Two gate instances on one Postgres inbox (R26, R38): each is its own `PostgresInbox`
//! (its own connections and instance name) behind its own toolgate stack with the inbox
//! channel. Held calls are sent exactly once when both resume them at the same moment;
//! `recover` on one instance touches only its own claims; an answer given on one instance
//! wakes a waiter on the other at once.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use serde_json::json;
use toolgate::GovernanceHandle;
use toolgate_core::{RefusalCode, ToolCall, ToolResponse};
use toolgate_engine::policy::Limits;
use toolgate_inbox::{
    Answer, Claim, Completion, Inbox, Outcome, ResumeError, State, put_policy_text,
};
use toolgate_inbox::{HeldCalls, StoredPolicies};
use toolgate_inbox_postgres::{Notice, PostgresInbox, WaitError};

const CALLS: usize = 24;

struct Gate {
    store: PostgresInbox,
    inbox: Inbox,
    tool: Tool,
    stack: Stack,
    handle: GovernanceHandle,
}

async fn gate(url: &str, schema: &str, instance: &str) -> Gate {
    let store = connect(url, schema, instance).await;
    gate_on(store)
}

fn gate_on(store: PostgresInbox) -> Gate {
    let handle = GovernanceHandle::new(governance());
    let inbox = Inbox::new(store.clone());
    let tool = Tool::default();
    let stack = stack(&handle, &inbox, &tool);
    Gate {
        store,
        inbox,
        tool,
        stack,
        handle,
    }
}

fn claim_of(rec: &toolgate_inbox::HeldRecord, token: &str) -> Claim {
    Claim {
        input_hash: rec.call.input_hash.clone(),
        definition_hash: rec.call.definition_hash.clone(),
        token: token.into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn r26_two_gate_instances_resuming_concurrently_send_each_held_call_exactly_once() {
    let url = require_pg!();
    let schema = fresh_schema();
    let a = gate(&url, &schema, "gate-a").await;
    let b = gate(&url, &schema, "gate-b").await;

    // Calls are held by both gates; a person approves each from either one.
    let mut ids = Vec::new();
    for i in 0..CALLS {
        let g = if i % 2 == 0 { &a } else { &b };
        let id = held(
            &g.stack,
            ToolCall::new(support(), "refund", json!({"order": i})),
        )
        .await;
        let answering = if i % 3 == 0 { &a } else { &b };
        answering
            .store
            .answer(&id, Answer::approve(format!("k-{i}"), "alice"))
            .await
            .unwrap();
        ids.push(id);
    }
    assert_eq!(a.tool.runs() + b.tool.runs(), 0, "held calls are not sent");

    // Both instances resume every call at the same moment.
    let barrier = Arc::new(tokio::sync::Barrier::new(2 * CALLS));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for g in [&a, &b] {
        for id in &ids {
            let (inbox, stack, id, barrier) = (
                g.inbox.clone(),
                g.stack.clone(),
                id.clone(),
                Arc::clone(&barrier),
            );
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                inbox.resume(&id, stack).await
            }));
        }
    }
    let (mut done, mut refused, mut not_approved) = (0, 0, 0);
    for t in tasks {
        match t.await.unwrap() {
            Ok(r) if r.recorded == Some(State::Done) => done += 1,
            Ok(r) => {
                let refusal = r.response.refusal().expect("a loser is refused");
                assert_eq!(refusal.code, RefusalCode::Rejected);
                assert_eq!(r.recorded, None);
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
        "{} resumes in {:?}: {done} sent, {refused} refused at the gate, {not_approved} refused before sending; \
         gate-a sent {}, gate-b sent {}",
        2 * CALLS,
        started.elapsed(),
        a.tool.runs(),
        b.tool.runs()
    );
    assert_eq!(done, CALLS, "R26: every held call is sent");
    assert_eq!(
        a.tool.runs() + b.tool.runs(),
        CALLS,
        "R26: exactly one tool invocation per held call"
    );
    // Each call's input reached a tool exactly once, on one of the two gates.
    let mut seen: HashMap<String, usize> = HashMap::new();
    for r in a.tool.received().into_iter().chain(b.tool.received()) {
        *seen.entry(r.input.to_string()).or_default() += 1;
    }
    assert_eq!(seen.len(), CALLS);
    assert!(seen.values().all(|&n| n == 1), "{seen:?}");
    for (i, id) in ids.iter().enumerate() {
        let rec = a.store.get(id).await.unwrap().unwrap();
        assert_eq!(rec.state, State::Done);
        let by = rec.claimed_by.as_deref().unwrap();
        assert!(by == "gate-a" || by == "gate-b", "{by}");
        let tool = if by == "gate-a" { &a.tool } else { &b.tool };
        assert!(
            tool.received()
                .iter()
                .any(|r| r.input == json!({"order": i})),
            "the instance that claimed call {i} is the one that sent it"
        );
        assert_eq!(
            rec.result.unwrap()["content"]["refunded"],
            json!({"order": i})
        );
    }
    drop_schemas(&url, &[schema]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn r26_recover_on_one_instance_marks_only_its_own_claimed_calls_unknown() {
    let url = require_pg!();
    let schema = fresh_schema();
    let a = gate(&url, &schema, "gate-a").await;
    let b = gate(&url, &schema, "gate-b").await;
    let mut ids = Vec::new();
    for i in 0..5 {
        let id = held(
            &a.stack,
            ToolCall::new(support(), "refund", json!({"n": i})),
        )
        .await;
        a.store
            .answer(&id, Answer::approve(format!("k{i}"), "alice"))
            .await
            .unwrap();
        ids.push(id);
    }
    let pending = held(
        &b.stack,
        ToolCall::new(support(), "refund", json!({"n": "p"})),
    )
    .await;
    // gate-a claims calls 0 and 1 and dies before recording them; gate-b is sending call 2
    // (claimed, still in flight); calls 3 and 4 wait, approved.
    let mut records = Vec::new();
    for id in &ids {
        records.push(a.store.get(id).await.unwrap().unwrap());
    }
    a.store
        .claim(&ids[0], claim_of(&records[0], "ta0"))
        .await
        .unwrap();
    a.store
        .claim(&ids[1], claim_of(&records[1], "ta1"))
        .await
        .unwrap();
    b.store
        .claim(&ids[2], claim_of(&records[2], "tb2"))
        .await
        .unwrap();
    let before = a.store.list(None).await.unwrap();
    drop(a);

    // gate-a restarts: a new process, the same instance name.
    let restarted = connect(&url, &schema, "gate-a").await;
    let mut unknown = restarted.recover().await.unwrap();
    // Calls held within one millisecond tie on age, and the id orders them: compare sets.
    unknown.sort_unstable();
    let mut own = vec![ids[0].clone(), ids[1].clone()];
    own.sort_unstable();
    assert_eq!(unknown, own, "R26: only its own claims");
    let after = restarted.list(None).await.unwrap();
    assert_eq!(before.len(), after.len());
    for (was, is) in before.iter().zip(&after) {
        if is.id() == ids[0] || is.id() == ids[1] {
            assert_eq!(is.state, State::Unknown);
            assert_eq!(is.call, was.call);
        } else {
            assert_eq!(is, was, "R26: nothing else changed, on any instance");
        }
    }
    let state = |id: &str| {
        let rec = after.iter().find(|r| r.id() == id).unwrap();
        rec.state
    };
    assert_eq!(
        state(&ids[2]),
        State::Claimed,
        "gate-b's call in flight is untouched"
    );
    assert_eq!(state(&ids[3]), State::Approved);
    assert_eq!(state(&pending), State::Pending);
    assert!(restarted.recover().await.unwrap().is_empty(), "idempotent");

    // gate-b is alive: it records its result as usual.
    let recorded = b
        .store
        .complete(
            &ids[2],
            Completion {
                outcome: Outcome::Done,
                result: json!({"ok": true}),
                token: "tb2".into(),
            },
        )
        .await
        .unwrap();
    assert_eq!(recorded, State::Done);
    // The unknown calls are never sent again, by either instance.
    for g in [&b, &gate_on(restarted.clone())] {
        match g.inbox.resume(&ids[0], g.stack.clone()).await {
            Err(ResumeError::NotApproved {
                state: State::Unknown,
                ..
            }) => {}
            other => panic!("an unknown call must not be resent: {other:?}"),
        }
    }
    assert_eq!(b.tool.runs(), 0);
    // gate-b's restart recovers nothing of gate-a's.
    let b_restarted = connect(&url, &schema, "gate-b").await;
    assert!(b_restarted.recover().await.unwrap().is_empty());
    drop_schemas(&url, &[schema]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn r26_an_answer_on_one_instance_wakes_a_waiter_on_the_other_at_once() {
    let url = require_pg!();
    let schema = fresh_schema();
    let a = gate(&url, &schema, "gate-a").await;
    // gate-b looks by itself only once a minute: only a notification wakes it sooner.
    let b = gate_on(
        PostgresInbox::connect(
            &url,
            options(&schema, "gate-b").poll_interval(Duration::from_secs(60)),
        )
        .await
        .unwrap(),
    );
    let id = held(
        &a.stack,
        ToolCall::new(support(), "refund", json!({"w": 1})),
    )
    .await;

    let waiter = {
        let store = b.store.clone();
        let id = id.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let r = store
                .wait_for(&id, State::Approved, Duration::from_secs(30))
                .await;
            (r, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let answered = Instant::now();
    a.store
        .answer(&id, Answer::approve("k", "alice"))
        .await
        .unwrap();
    let (r, waited) = waiter.await.unwrap();
    let rec = r.unwrap();
    let latency = answered.elapsed();
    eprintln!("waited {waited:?}; woke {latency:?} after the answer");
    assert_eq!(rec.state, State::Approved);
    assert!(
        latency < Duration::from_secs(5),
        "a notification woke the waiter (took {latency:?}, its own poll is every 60 s)"
    );
    // The waiter's instance sends it, once.
    let resumed = b.inbox.resume(&id, b.stack.clone()).await.unwrap();
    assert_eq!(resumed.recorded, Some(State::Done));
    assert_eq!((a.tool.runs(), b.tool.runs()), (0, 1));
    let done = b
        .store
        .wait_until(&id, Duration::from_secs(5), State::is_final)
        .await
        .unwrap();
    assert_eq!(done.state, State::Done);

    // A call denied while waiting for `approved` ends the wait at once.
    let denied = held(
        &a.stack,
        ToolCall::new(support(), "refund", json!({"w": 2})),
    )
    .await;
    let waiter = {
        let store = b.store.clone();
        let id = denied.clone();
        tokio::spawn(async move {
            store
                .wait_for(&id, State::Approved, Duration::from_secs(30))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    a.store
        .answer(&denied, Answer::deny("k", "bob", Some("no".into())))
        .await
        .unwrap();
    let started = Instant::now();
    assert_eq!(
        waiter.await.unwrap().unwrap_err(),
        WaitError::Unreachable {
            id: denied.clone(),
            state: State::Denied
        }
    );
    assert!(started.elapsed() < Duration::from_secs(5));

    // Nobody answers: the wait times out, saying where the call is.
    let idle = held(
        &a.stack,
        ToolCall::new(support(), "refund", json!({"w": 3})),
    )
    .await;
    match b
        .store
        .wait_for(&idle, State::Approved, Duration::from_millis(300))
        .await
    {
        Err(WaitError::Timeout {
            state: State::Pending,
            ..
        }) => {}
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert_eq!(
        b.store
            .wait_for("ia_never_issued", State::Approved, Duration::from_secs(1))
            .await
            .unwrap_err(),
        WaitError::UnknownId("ia_never_issued".into())
    );

    // Every change is announced, with the new state, to every subscriber.
    let mut notices = b.store.subscribe().await.unwrap();
    a.store.cancel(&idle).await.unwrap();
    let notice = tokio::time::timeout(Duration::from_secs(5), notices.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        notice,
        Notice::State {
            interaction_id: idle.clone(),
            state: State::Cancelled
        }
    );
    drop_schemas(&url, &[schema]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn r22_a_policy_put_on_one_instance_reaches_the_other_gate_without_a_restart() {
    let url = require_pg!();
    let schema = fresh_schema();
    let a = gate(&url, &schema, "gate-a").await;
    let b = gate(&url, &schema, "gate-b").await;
    let lookup = || ToolCall::new(support(), "lookup", json!({}));
    assert!(matches!(
        send(&b.stack, lookup()).await,
        ToolResponse::Completed(_)
    ));
    // gate-b falls back to looking once a minute: only a notification is faster.
    let watch = b
        .store
        .watch_policy(b.handle.clone(), None, Duration::from_secs(60));
    tokio::time::sleep(Duration::from_millis(300)).await;

    let stored = put_policy_text(
        &a.store,
        r#"{"rules": [{"effect": "deny", "tool": "lookup", "reason": "lookups are paused"}]}"#,
        &Limits::default(),
    )
    .await
    .unwrap();
    let put = Instant::now();
    loop {
        let r = send(&b.stack, lookup()).await;
        if let Some(refusal) = r.refusal() {
            assert_eq!(refusal.code, RefusalCode::Denied);
            assert!(refusal.reasons.iter().any(|x| x == "lookups are paused"));
            break;
        }
        assert!(
            put.elapsed() < Duration::from_secs(5),
            "gate-b did not pick up the policy put on gate-a"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!(
        "gate-b enforced the new policy {:?} after the put",
        put.elapsed()
    );
    match b.handle.load().policy() {
        toolgate_engine::PolicyState::Readable(p) => {
            assert_eq!(p.updated_at(), Some(stored.updated_at.as_str()));
        }
        other => panic!("expected a readable policy, got {other:?}"),
    }
    watch.abort();
    drop_schemas(&url, &[schema]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn r22_racing_puts_from_two_instances_get_strictly_increasing_updated_at() {
    let url = require_pg!();
    let schema = fresh_schema();
    let a = connect(&url, &schema, "gate-a").await;
    let b = connect(&url, &schema, "gate-b").await;
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let store = if i % 2 == 0 { a.clone() } else { b.clone() };
            tokio::spawn(async move {
                let text = format!(
                    r#"{{"rules": [{{"effect": "deny", "tool": "t{i}", "reason": "r{i}"}}]}}"#
                );
                put_policy_text(&store, &text, &Limits::default())
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut puts = Vec::new();
    for t in tasks {
        puts.push(t.await.unwrap());
    }
    let mut stamps: Vec<_> = puts
        .iter()
        .map(|p| humantime::parse_rfc3339(&p.updated_at).unwrap())
        .collect();
    stamps.sort();
    stamps.dedup();
    assert_eq!(stamps.len(), 20, "R23: every put has its own `updatedAt`");
    // The stored policy is the last put, whole.
    let last = puts
        .iter()
        .max_by_key(|p| humantime::parse_rfc3339(&p.updated_at).unwrap())
        .unwrap();
    assert_eq!(a.get_policy().await.unwrap().unwrap(), *last);
    drop_schemas(&url, &[schema]).await;
}
