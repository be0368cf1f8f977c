//! The listening connection that wakes waiters survives being cut: it reconnects by itself,
//! says notices may have been missed, and waiters still wake.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::json;
use toolgate_inbox::HeldCalls;
use toolgate_inbox::{Answer, State};
use toolgate_inbox_postgres::{Notice, PostgresInbox};
use toolgate_inbox_suite::held as held_call;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_listening_connection_reconnects_and_says_notices_were_missed() {
    let url = require_pg!();
    let schema = fresh_schema();
    let store = PostgresInbox::connect(
        &url,
        options(&schema, "listener-test").poll_interval(Duration::from_millis(200)),
    )
    .await
    .unwrap();
    let mut notices = store.subscribe().await.unwrap();

    // Cut the listening connection from the server's side.
    let admin = raw(&url, &schema).await;
    let cut: i64 = admin
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE application_name = 'toolgate-inbox listener-test' AND query LIKE 'LISTEN%'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(cut, 1, "one listening connection per inbox");
    let notice = tokio::time::timeout(Duration::from_secs(10), notices.next())
        .await
        .expect("the listener came back")
        .unwrap();
    assert_eq!(notice, Notice::Missed, "subscribers are told to look again");

    // Notifications flow again.
    let c = held_call(json!({"after": "reconnect"}), Duration::from_secs(3600));
    let id = c.interaction_id.clone();
    store.hold(c).await.unwrap();
    let notice = tokio::time::timeout(Duration::from_secs(5), notices.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        notice,
        Notice::State {
            interaction_id: id.clone(),
            state: State::Pending
        }
    );
    let waiter = {
        let store = store.clone();
        let id = id.clone();
        tokio::spawn(async move {
            store
                .wait_for(&id, State::Approved, Duration::from_secs(10))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    store
        .answer(&id, Answer::approve("k", "alice"))
        .await
        .unwrap();
    assert_eq!(waiter.await.unwrap().unwrap().state, State::Approved);
    assert!(started.elapsed() < Duration::from_secs(5));
    drop_schemas(&url, &[schema]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooled_connections_cut_by_the_server_are_replaced() {
    let url = require_pg!();
    let schema = fresh_schema();
    let store = connect(&url, &schema, "pool-test").await;
    let c = held_call(json!({"n": 1}), Duration::from_secs(3600));
    let id = c.interaction_id.clone();
    store.hold(c).await.unwrap();
    let admin = raw(&url, &schema).await;
    admin
        .batch_execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name = 'toolgate-inbox pool-test'",
        )
        .await
        .unwrap();
    // A connection the pool had not yet seen closing may fail one operation (the caller fails
    // closed); the pool then opens a new one.
    let mut failures = 0;
    let started = Instant::now();
    let rec = loop {
        match store.get(&id).await {
            Ok(rec) => break rec.unwrap(),
            Err(e) => {
                eprintln!("while reconnecting: {e}");
                failures += 1;
                assert!(started.elapsed() < Duration::from_secs(10), "{e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    assert_eq!(rec.state, State::Pending);
    assert!(failures <= 1, "{failures} failures");
    drop_schemas(&url, &[schema]).await;
}
