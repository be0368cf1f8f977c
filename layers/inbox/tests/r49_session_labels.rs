//! A session's labels (R49, issue 37 item 2) kept in the SQLite inbox's file beside the
//! quota counts: written in the transaction that records the send, read back by a new inbox
//! and counter on the same file (a restart), one history for the calls made in no session,
//! and the table added to a file written before it existed.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::convert::Infallible;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;
use toolgate::{GovernanceHandle, ToolgateLayer};
use toolgate_core::{AgentRef, ToolCall, ToolOutput, ToolResponse};
use toolgate_engine::config::{Format, load_str};
use toolgate_engine::labels::LabelSet;
use toolgate_engine::quota::{QuotaCounter, QuotaError, QuotaGroup};
use toolgate_inbox::{Inbox, SqliteInbox, SqliteOptions, SqliteQuotaCounter, State};
use tower::util::BoxCloneService;
use tower::{Layer, ServiceExt, service_fn};

/// Seed 003's combination: private data and untrusted content read in one session, then a
/// way out is asked about.
const CONFIG: &str = r#"{
    "approval": {"channel": "inbox"},
    "tools": [{"kind": "http", "name": "read_mail", "labels": ["private"]},
              {"kind": "http", "name": "fetch_page", "labels": ["untrusted"]},
              {"kind": "http", "name": "post", "network": "egress"}],
    "agents": [{"name": "support", "allowed_tools": ["read_mail", "fetch_page", "post"]}],
    "policy": {"rules": [{"effect": "ask", "labels": ["egress"], "session_labels": ["private", "untrusted"],
                          "reason": "the session read private data and untrusted content"}]}
}"#;

type Stack = BoxCloneService<ToolCall, ToolResponse, Infallible>;

/// One process on the inbox file `db`, as `toolgate mcp serve` opens it: the inbox first,
/// then the counter in its file; a stack over a tool that counts its sends.
fn process(db: &Path, sent: &Arc<AtomicUsize>) -> (Inbox, Stack) {
    let handle = GovernanceHandle::new(load_str(CONFIG, Format::Json).unwrap());
    let inbox = Inbox::new(SqliteInbox::open(db, SqliteOptions::default()).unwrap());
    handle.set_quota_counter(Arc::new(SqliteQuotaCounter::open(db).unwrap()));
    let counted = Arc::clone(sent);
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
    (inbox, stack)
}

fn call(tool: &str, session: Option<&str>) -> ToolCall {
    let c = ToolCall::new(AgentRef::profile("support"), tool, json!({}));
    match session {
        Some(s) => c.in_turn(s, "t1"),
        None => c,
    }
}

async fn run(stack: &Stack, tool: &str, session: Option<&str>) -> ToolResponse {
    stack.clone().oneshot(call(tool, session)).await.unwrap()
}

fn completed(r: &ToolResponse) -> bool {
    matches!(r, ToolResponse::Completed(_))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r49_a_sessions_labels_survive_a_restart_and_decide_the_way_out() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("inbox.db");
    let sent = Arc::new(AtomicUsize::new(0));
    {
        let (_inbox, stack) = process(&db, &sent);
        // s1 reads private data and untrusted content; s2 only private data; the calls made
        // in no session read both, as one history.
        for (tool, session) in [
            ("read_mail", Some("s1")),
            ("fetch_page", Some("s1")),
            ("read_mail", Some("s2")),
            ("read_mail", None),
            ("fetch_page", None),
        ] {
            let r = run(&stack, tool, session).await;
            assert!(completed(&r), "{tool} in {session:?}: {r:?}");
        }
        // Before a restart too, s1's way out is asked.
        let r = run(&stack, "post", Some("s1")).await;
        assert!(matches!(r, ToolResponse::Held(_)), "{r:?}");
    }
    assert_eq!(sent.load(Ordering::SeqCst), 5);

    // A restart: a new inbox and counter on the same file.
    let (inbox, stack) = process(&db, &sent);
    let ToolResponse::Held(held) = run(&stack, "post", Some("s1")).await else {
        panic!("s1 read private data and untrusted content before the restart: asked")
    };
    assert!(
        held.reasons
            .iter()
            .any(|r| r.contains("private data and untrusted content")),
        "{held:?}"
    );
    let record = inbox
        .store()
        .get(&held.interaction_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.state, State::Pending);
    // Issue 37 item 3: the held call keeps what its session had done when it was asked, and
    // every channel's interaction (the page's card, the API, `inbox show`) shows it beside
    // the reasons.
    let shown = record.interaction();
    assert_eq!(
        shown.labels_line().as_deref(),
        Some("this session has read: private, untrusted; the tool carries: egress")
    );
    assert!(
        shown
            .render()
            .contains("labels: this session has read: private, untrusted"),
        "{}",
        shown.render()
    );
    assert_eq!(
        shown.to_json()["labels"],
        json!({"tool": ["egress"], "session": ["private", "untrusted"]})
    );
    let r = run(&stack, "post", None).await;
    assert!(
        matches!(r, ToolResponse::Held(_)),
        "the calls made in no session share one history: {r:?}"
    );
    // Other sessions are judged by their own sends: s2 read no untrusted content, and a
    // session named `null` is not the calls made in no session.
    for session in ["s2", "s3", "null"] {
        let r = run(&stack, "post", Some(session)).await;
        assert!(completed(&r), "{session}: {r:?}");
    }
    assert_eq!(sent.load(Ordering::SeqCst), 8);
    // What the file holds: each session's labels, the way out counted where it was sent.
    let counter = SqliteQuotaCounter::open(&db).unwrap();
    let labels = |s: Option<&str>| counter.session_labels(s).unwrap().to_vec();
    assert_eq!(labels(Some("s1")), ["private", "untrusted"]);
    assert_eq!(labels(Some("s2")), ["egress", "private"]);
    assert_eq!(labels(None), ["private", "untrusted"]);
    assert_eq!(labels(Some("null")), ["egress"]);
    assert!(labels(Some("s4")).is_empty());
}

#[test]
fn r49_labels_are_written_in_the_reservations_transaction_and_read_by_every_counter_on_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("quota.db");
    let one = SqliteQuotaCounter::open(&db).unwrap();
    let other = SqliteQuotaCounter::open(&db).unwrap();
    let group = [QuotaGroup::new("posts", 0, 1, 60_000)];
    let private = LabelSet::of(["private"]);
    one.reserve_labelled(&group, 1_000, Some("s1"), &private)
        .unwrap();
    // Another connection (another process) reads them at once.
    assert_eq!(other.session_labels(Some("s1")).unwrap(), private);
    // A refused reservation records neither the send nor the labels.
    let untrusted = LabelSet::of(["untrusted"]);
    assert!(matches!(
        other.reserve_labelled(&group, 2_000, Some("s1"), &untrusted),
        Err(QuotaError::Full(_))
    ));
    assert_eq!(one.session_labels(Some("s1")).unwrap(), private);
    assert_eq!(one.sends_in_window("posts", 60_000, 2_000).unwrap(), 1);
    // A send in no quota group records its labels alone.
    other
        .reserve_labelled(&[], 3_000, Some("s1"), &untrusted)
        .unwrap();
    assert_eq!(
        one.session_labels(Some("s1")).unwrap().to_vec(),
        ["private", "untrusted"]
    );
    // A plain reservation (a policy without `session_labels`) records no labels.
    one.reserve(&group, 61_000).unwrap();
    assert_eq!(one.session_labels(Some("s1")).unwrap().to_vec().len(), 2);
    assert!(one.session_labels(None).unwrap().is_empty());
}

#[test]
fn r49_an_inbox_file_from_before_session_labels_gets_the_table_and_keeps_its_sends() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("inbox.db");
    drop(SqliteInbox::open(&db, SqliteOptions::default()).unwrap());
    {
        // The counter's table as releases before session labels wrote it, with a send.
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute_batch(
            "CREATE TABLE quota_sends (key TEXT NOT NULL, at_ms INTEGER NOT NULL);
             CREATE INDEX quota_sends_by_key ON quota_sends (key, at_ms);
             INSERT INTO quota_sends (key, at_ms) VALUES ('posts', 1000);",
        )
        .unwrap();
    }
    drop(SqliteInbox::open(&db, SqliteOptions::default()).unwrap());
    let counter = SqliteQuotaCounter::open(&db).unwrap();
    assert_eq!(counter.sends_in_window("posts", 60_000, 2_000).unwrap(), 1);
    assert!(counter.session_labels(Some("s1")).unwrap().is_empty());
    counter
        .reserve_labelled(
            &[QuotaGroup::new("posts", 0, 5, 60_000)],
            3_000,
            Some("s1"),
            &LabelSet::of(["private"]),
        )
        .unwrap();
    assert_eq!(counter.sends_in_window("posts", 60_000, 3_000).unwrap(), 2);
    drop(counter);
    // The inbox still opens the file, and a new counter reads the labels.
    drop(SqliteInbox::open(&db, SqliteOptions::default()).unwrap());
    assert_eq!(
        SqliteQuotaCounter::open(&db)
            .unwrap()
            .session_labels(Some("s1"))
            .unwrap()
            .to_vec(),
        ["private"]
    );
}
