//! A held call resumed after its quota's window filled (R44, R38, issue 21): the approval is
//! not a send; the resume is refused `rate_limited` and the held call ends `failed`, on
//! SQLite (the inbox's file counting the sends, as `toolgate mcp serve` does).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;
use toolgate::{GovernanceHandle, ToolgateLayer};
use toolgate_core::{AgentRef, RefusalCode, ToolCall, ToolOutput, ToolResponse};
use toolgate_engine::config::{Format, load_str};
use toolgate_inbox::{Answer, Inbox, SqliteInbox, SqliteOptions, SqliteQuotaCounter, State};
use tower::util::BoxCloneService;
use tower::{Layer, ServiceExt, service_fn};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r44_a_resume_after_the_window_filled_is_refused_rate_limited_and_the_held_call_ends_failed()
 {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("inbox.db");
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
    // The inbox first, then the counter in its file (as `toolgate mcp serve` opens them).
    let inbox = Inbox::new(SqliteInbox::open(&db, SqliteOptions::default()).unwrap());
    handle.set_quota_counter(Arc::new(SqliteQuotaCounter::open(&db).unwrap()));
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
        let call = ToolCall::new(AgentRef::profile("support"), "refund", json!({"n": n}));
        let ToolResponse::Held(h) = stack.clone().oneshot(call).await.unwrap() else {
            panic!("an asked call is held, and not counted");
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
    // The window is full: the second approved call is refused and never sent.
    let second = inbox.resume(&held[1], stack.clone()).await.unwrap();
    let ToolResponse::Refused(r) = &second.response else {
        panic!("{:?}", second.response)
    };
    assert_eq!(r.code, RefusalCode::RateLimited, "{r:?}");
    assert!(r.retry_after_secs.is_some_and(|s| s > 0), "{r:?}");
    assert!(
        r.reasons.iter().any(|x| x.contains("one refund an hour")),
        "{r:?}"
    );
    assert_eq!(second.recorded, Some(State::Failed));
    let record = inbox.store().get(&held[1]).await.unwrap().unwrap();
    assert_eq!(record.state, State::Failed);
    assert_eq!(sent.load(Ordering::SeqCst), 1, "one send in the window");
    // A resume again of the ended call sends nothing.
    let again = inbox.resume(&held[1], stack).await;
    assert!(
        again
            .as_ref()
            .map_or(true, |r| !matches!(r.response, ToolResponse::Completed(_))),
        "{:?}",
        again.map(|r| r.response)
    );
    assert_eq!(sent.load(Ordering::SeqCst), 1);
}
