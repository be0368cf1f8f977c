//! The approval page over a shared PostgreSQL inbox (`toolgate serve --pg-url`): the gate
//! holds a call through one connection, a person approves it on the page served from
//! another, and the call is sent once (R26, R38).
//!
//! Needs `TOOLGATE_PG_URL` (`eval "$(bash .ci/postgres.sh)"`): without it the test fails
//! under CI and skips loudly elsewhere.
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
use toolgate_core::ToolResponse;
use toolgate_inbox::{Inbox, InboxStore, State};
use toolgate_inbox_postgres::{PostgresInbox, PostgresOptions};

fn pg_url() -> Option<String> {
    match std::env::var("TOOLGATE_PG_URL")
        .ok()
        .filter(|u| !u.trim().is_empty())
    {
        Some(u) => Some(u),
        None if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!(
                "CI=true and TOOLGATE_PG_URL is unset: run `eval \"$(bash .ci/postgres.sh)\"` first"
            )
        }
        None => {
            eprintln!(
                "\n*** SKIPPED the approval page over PostgreSQL: TOOLGATE_PG_URL is unset (eval \"$(bash .ci/postgres.sh)\") ***\n"
            );
            None
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r26_a_call_held_in_postgres_is_approved_on_the_page_and_sent_once() {
    let Some(url) = pg_url() else { return };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let schema = format!("web_{}_{nanos}", std::process::id());
    let opts = || PostgresOptions::default().schema(schema.clone());
    let gate = Inbox::new(PostgresInbox::connect(&url, opts()).await.unwrap());
    let page_inbox = PostgresInbox::connect(&url, opts()).await.unwrap();
    // The page wakes on the inbox's LISTEN feed (as `toolgate serve --pg-url` does); the poll
    // interval is an hour, so only a notice can announce the held call.
    let mut feed = page_inbox.subscribe().await.unwrap();
    let wake = Arc::new(tokio::sync::Notify::new());
    let notify = Arc::clone(&wake);
    tokio::spawn(async move {
        while feed.next().await.is_some() {
            notify.notify_one();
        }
    });
    let page: Arc<dyn InboxStore> = Arc::new(page_inbox);
    let dir = tempfile::tempdir().unwrap();
    let s = start_stores(
        governance("token"),
        Duration::from_secs(3600),
        gate,
        page,
        Some(wake),
        dir,
        "unused".into(),
    )
    .await;
    let c = signed_in(&s, ALICE).await;
    let mut events = reqwest::Client::new()
        .get(format!("{}/events", s.base))
        .header("cookie", c.cookie.clone().unwrap())
        .send()
        .await
        .unwrap();
    let id = s.hold_refund(json!({"order": "PG-1"})).await;
    let mut seen = String::new();
    let announced = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(chunk) = events.chunk().await.unwrap() {
            seen.push_str(&String::from_utf8_lossy(&chunk));
            if seen.contains("event: changed") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(
        announced,
        Ok(true),
        "the LISTEN notice announces the held call: {seen}"
    );
    let card = c.get(&format!("/calls/{id}")).await.body;
    assert!(card.contains("PG-1"), "{card}");
    let fields = ["csrf", "input_hash", "definition_hash", "idempotency_key"]
        .map(|f| (f, field(&card, f).unwrap()));
    let mut form: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
    form.push(("decision", "approve"));
    let r = c.post(&format!("/calls/{id}/answer"), &form).await;
    assert_eq!(r.status, 303, "{}", r.body);
    let rec = s.inbox.store().get(&id).await.unwrap().unwrap();
    assert_eq!(
        (rec.state, rec.approver.as_deref()),
        (State::Approved, Some("alice"))
    );
    let resumed = s.inbox.resume(&id, s.stack.clone()).await.unwrap();
    assert!(matches!(resumed.response, ToolResponse::Completed(_)));
    assert_eq!(s.tool.runs(), 1);
    assert!(
        c.get("/history")
            .await
            .body
            .contains(&format!("id=\"row-{id}\""))
    );
}
