//! The PostgreSQL quota counter (R44, issue 21): two instances of the real toolgate stack,
//! each with its own `PostgresInbox` connections and its own counter on one database, never
//! send more than `max` calls in a window together; a database that cannot be reached
//! refuses the call (fail closed).
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

use common::*;
use serde_json::json;
use toolgate::{GovernanceHandle, ToolgateLayer};
use toolgate_core::{AgentRef, RefusalCode, ToolCall, ToolOutput, ToolResponse};
use toolgate_engine::config::{Format, load_str};
use toolgate_inbox_postgres::{PostgresInbox, PostgresQuotaCounter};
use tower::util::BoxCloneService;
use tower::{Layer, ServiceExt, service_fn};

const CONFIG: &str = r#"{
    "tools": [{"kind": "http", "name": "refund"}],
    "agents": [{"name": "support", "allowed_tools": ["refund"]}],
    "policy": {"rules": [], "quotas": [{"max": 37, "window_secs": 3600, "reason": "37 refunds an hour"}]}
}"#;

/// One instance: its own connections, counter, handle and stack over a counting tool.
async fn instance(
    store: &PostgresInbox,
    sent: &Arc<AtomicUsize>,
) -> BoxCloneService<ToolCall, ToolResponse, Infallible> {
    let handle = GovernanceHandle::new(load_str(CONFIG, Format::Json).unwrap());
    let counter = PostgresQuotaCounter::for_inbox(store).await.unwrap();
    handle.set_async_quota_counter(Arc::new(counter));
    let sent = Arc::clone(sent);
    BoxCloneService::new(
        ToolgateLayer::builder(handle)
            .build()
            .unwrap()
            .layer(service_fn(move |call: ToolCall| {
                let sent = Arc::clone(&sent);
                async move {
                    sent.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, Infallible>(ToolResponse::Completed(ToolOutput::new(call.input)))
                }
            })),
    )
}

fn refund(n: usize) -> ToolCall {
    ToolCall::new(AgentRef::profile("support"), "refund", json!({"n": n}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn r44_two_instances_of_100_concurrent_calls_send_exactly_max_on_one_postgres() {
    let url = require_pg!();
    let schema = fresh_schema();
    let a = connect(&url, &schema, "quota-a").await;
    let b = connect(&url, &schema, "quota-b").await;
    let sent = Arc::new(AtomicUsize::new(0));
    let stacks = [instance(&a, &sent).await, instance(&b, &sent).await];
    let mut tasks = Vec::new();
    for (i, stack) in stacks.iter().enumerate() {
        for n in 0..100 {
            let stack = stack.clone();
            tasks.push(tokio::spawn(async move {
                stack.oneshot(refund(i * 100 + n)).await.unwrap()
            }));
        }
    }
    let mut done = 0;
    let mut limited = 0;
    for t in tasks {
        match t.await.unwrap() {
            ToolResponse::Completed(_) => done += 1,
            ToolResponse::Refused(r) => {
                assert_eq!(r.code, RefusalCode::RateLimited, "{r:?}");
                assert!(r.retry_after_secs.is_some_and(|s| s > 0), "{r:?}");
                limited += 1;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!((done, limited), (37, 163));
    assert_eq!(
        sent.load(Ordering::SeqCst),
        37,
        "exactly max sends, never 38"
    );
    // The database holds those 37 sends, one count shared by both instances.
    let raw = raw(&url, &schema).await;
    let n: i64 = raw
        .query_one("SELECT COUNT(*) FROM quota_sends", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 37);
    drop_schemas(&url, &[schema]).await;
}

/// A loopback TCP relay to the server that can be cut: every connection through it closes
/// and new ones are refused, as when the database becomes unreachable.
struct Relay {
    addr: std::net::SocketAddr,
    task: tokio::task::JoinHandle<()>,
    conns: Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl Relay {
    async fn to(server: std::net::SocketAddr) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let conns: Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>> = Arc::default();
        let kept = Arc::clone(&conns);
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let conn = tokio::spawn(async move {
                    if let Ok(mut upstream) = tokio::net::TcpStream::connect(server).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                    }
                });
                kept.lock().unwrap().push(conn);
            }
        });
        Self { addr, task, conns }
    }

    fn cut(&self) {
        self.task.abort();
        for c in self.conns.lock().unwrap().drain(..) {
            c.abort();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r44_a_counter_whose_database_cannot_be_reached_refuses_the_call() {
    let url = require_pg!();
    let schema = fresh_schema();
    let config: tokio_postgres::Config = url.parse().unwrap();
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let relay = Relay::to(std::net::SocketAddr::from(([127, 0, 0, 1], port))).await;
    let via = url.replacen(&format!(":{port}/"), &format!(":{}/", relay.addr.port()), 1);
    assert_ne!(via, url, "the URL names the port: {url}");
    let store = PostgresInbox::connect(
        &via,
        options(&schema, "quota-cut").connect_timeout(std::time::Duration::from_secs(2)),
    )
    .await
    .unwrap();
    let sent = Arc::new(AtomicUsize::new(0));
    let stack = instance(&store, &sent).await;
    let first = stack.clone().oneshot(refund(1)).await.unwrap();
    assert!(matches!(first, ToolResponse::Completed(_)), "{first:?}");
    relay.cut();
    for n in 2..4 {
        let ToolResponse::Refused(r) = stack.clone().oneshot(refund(n)).await.unwrap() else {
            panic!("a call whose quota cannot be counted must be refused");
        };
        assert_eq!(r.code, RefusalCode::RateLimited, "{r:?}");
        assert_eq!(r.retry_after_secs, None, "not full: unreachable ({r:?})");
        let why = r.reasons.join(" ");
        assert!(
            why.contains("the quota counter cannot be used") && why.contains("fail closed"),
            "{why}"
        );
    }
    assert_eq!(
        sent.load(Ordering::SeqCst),
        1,
        "nothing sent once it was cut"
    );
    drop_schemas(&url, &[schema]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r44_an_approved_call_resumed_after_the_window_filled_is_refused_and_ends_failed() {
    use toolgate_inbox::{Answer, Inbox, State};
    let url = require_pg!();
    let schema = fresh_schema();
    let store = connect(&url, &schema, "quota-held").await;
    let handle = GovernanceHandle::new(
        load_str(
            r#"{"approval": {"channel": "inbox"},
                "tools": [{"kind": "http", "name": "refund", "approval": "require_approval"}],
                "agents": [{"name": "support", "allowed_tools": ["refund"]}],
                "policy": {"rules": [], "quotas": [{"max": 1, "window_secs": 3600, "reason": "one refund an hour"}]}}"#,
            Format::Json,
        )
        .unwrap(),
    );
    handle.set_async_quota_counter(Arc::new(
        PostgresQuotaCounter::for_inbox(&store).await.unwrap(),
    ));
    let inbox = Inbox::new(store.clone());
    let sent = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&sent);
    let stack = BoxCloneService::new(
        ToolgateLayer::builder(handle)
            .shared_channel(Arc::new(inbox.channel()))
            .build()
            .unwrap()
            .layer(service_fn(move |call: ToolCall| {
                let sent = Arc::clone(&counted);
                async move {
                    sent.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, Infallible>(ToolResponse::Completed(ToolOutput::new(call.input)))
                }
            })),
    );
    let mut held = Vec::new();
    for n in 0..2 {
        let ToolResponse::Held(h) = stack.clone().oneshot(refund(n)).await.unwrap() else {
            panic!("asked calls are held, not counted");
        };
        inbox
            .store()
            .answer(&h.interaction_id, Answer::approve(format!("k{n}"), "alice"))
            .await
            .unwrap();
        held.push(h.interaction_id);
    }
    let first = inbox.resume(&held[0], stack.clone()).await.unwrap();
    assert!(
        matches!(first.response, ToolResponse::Completed(_)),
        "{:?}",
        first.response
    );
    assert_eq!(first.recorded, Some(State::Done));
    // The window is full now: the second approval is not sent, and its call ends failed.
    let second = inbox.resume(&held[1], stack.clone()).await.unwrap();
    let ToolResponse::Refused(r) = &second.response else {
        panic!("{:?}", second.response)
    };
    assert_eq!(r.code, RefusalCode::RateLimited, "{r:?}");
    assert!(r.retry_after_secs.is_some(), "{r:?}");
    assert_eq!(second.recorded, Some(State::Failed));
    assert_eq!(
        inbox.store().get(&held[1]).await.unwrap().unwrap().state,
        State::Failed
    );
    assert_eq!(sent.load(Ordering::SeqCst), 1);
    drop_schemas(&url, &[schema]).await;
}

/// R44 (issue 33 item 5): quota windows are judged by the database's clock, not the
/// replica's. Two counters on one database, the second one's process clock 45 s fast, 20 s
/// after the first filled a window of 3 sends a minute: by its own clock the first sends
/// left the window (65 s ago), by the database's they did not, so it is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r44_quota_windows_are_judged_by_the_database_clock_not_the_replicas() {
    use toolgate_engine::quota::{AsyncQuotaCounter, QuotaError, QuotaGroup};
    let url = require_pg!();
    let schema = fresh_schema();
    let a = connect(&url, &schema, "clock-a").await;
    let b = connect(&url, &schema, "clock-b").await;
    let on_time = PostgresQuotaCounter::for_inbox(&a).await.unwrap();
    let fast = PostgresQuotaCounter::for_inbox(&b).await.unwrap();
    let now = u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap();
    let group = [QuotaGroup::new("g-clock", 0, 3, 60_000)];
    for _ in 0..3 {
        on_time.reserve(&group, now).await.unwrap();
    }
    match fast.reserve(&group, now + 65_000).await {
        Err(QuotaError::Full(full)) => assert!(full.retry_after_ms > 0),
        other => panic!("a fourth send in the database's minute: {other:?}"),
    }
    assert_eq!(
        on_time
            .sends_in_window("g-clock", 60_000, now + 1_000)
            .await
            .unwrap(),
        3
    );
    drop_schemas(&url, &[schema]).await;
}
