//! Quotas (R44) and grants (R45) enforced by the governed stack: decided when the call is
//! made, and counted atomically with the check right before it is sent.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;
use toolgate::approval::{ApprovalOutcome, FnChannel};
use toolgate::{GovernanceHandle, ToolgateLayer};
use toolgate_core::{AgentRef, ChannelKind, RefusalCode, ToolCall, ToolOutput, ToolResponse};
use toolgate_engine::config::{Format, load_str};
use toolgate_engine::grant::{MemoryGrants, parse_grants};
use toolgate_engine::quota::ManualClock;
use tower::{ServiceBuilder, ServiceExt, service_fn};

const CONFIG: &str = r#"{
    "approval": {"channel": "interactive"},
    "tools": [{"kind": "http", "name": "lookup"},
              {"kind": "http", "name": "refund", "approval": "require_approval"}],
    "agents": [{"name": "dev", "allowed_tools": ["lookup", "refund"]}],
    "policy": {"rules": [], "quotas": [
        {"tool": "lookup", "max": 2, "window_secs": 60, "reason": "two look-ups a minute"},
        {"tool": "refund", "max": 1, "window_secs": 60, "reason": "one refund a minute"}
    ]}
}"#;

type Svc = tower::util::BoxCloneService<ToolCall, ToolResponse, std::convert::Infallible>;

struct Harness {
    svc: Svc,
    clock: Arc<ManualClock>,
    sent: Arc<AtomicUsize>,
    asked: Arc<AtomicUsize>,
    handle: GovernanceHandle,
}

fn harness(config: &str) -> Harness {
    let handle = GovernanceHandle::new(load_str(config, Format::Json).unwrap());
    let clock = Arc::new(ManualClock::new(1_000_000));
    handle.set_clock(clock.clone());
    let asked = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&asked);
    let channel = FnChannel::new(ChannelKind::Interactive, move |_r| {
        counted.fetch_add(1, Ordering::SeqCst);
        ApprovalOutcome::Approved {
            approver: "alice".into(),
        }
    });
    let sent = Arc::new(AtomicUsize::new(0));
    let hits = Arc::clone(&sent);
    let svc = ServiceBuilder::new()
        .layer(
            ToolgateLayer::builder(handle.clone())
                .channel(channel)
                .build()
                .unwrap(),
        )
        .service(service_fn(move |_call: ToolCall| {
            hits.fetch_add(1, Ordering::SeqCst);
            async {
                Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::new(json!(
                    "ok"
                ))))
            }
        }));
    Harness {
        svc: tower::util::BoxCloneService::new(svc),
        clock,
        sent,
        asked,
        handle,
    }
}

async fn call(h: &Harness, tool: &str) -> ToolResponse {
    h.svc
        .clone()
        .oneshot(ToolCall::new(AgentRef::profile("dev"), tool, json!({})))
        .await
        .unwrap()
}

#[tokio::test]
async fn r44_the_stack_refuses_a_send_past_the_quota_and_the_window_reopens() {
    let h = harness(CONFIG);
    assert!(matches!(
        call(&h, "lookup").await,
        ToolResponse::Completed(_)
    ));
    h.clock.advance_ms(10_000);
    assert!(matches!(
        call(&h, "lookup").await,
        ToolResponse::Completed(_)
    ));
    h.clock.advance_ms(10_000);
    let ToolResponse::Refused(r) = call(&h, "lookup").await else {
        panic!("the third look-up in the minute is refused")
    };
    assert_eq!(r.code, RefusalCode::RateLimited);
    assert_eq!(r.retry_after_secs, Some(40), "{r:?}");
    assert!(
        r.reasons
            .iter()
            .any(|x| x.contains("two look-ups a minute")),
        "{r:?}"
    );
    assert_eq!(
        h.sent.load(Ordering::SeqCst),
        2,
        "a refused call is never sent"
    );
    // The window slides: 60 s after the first send there is room for one more.
    h.clock.advance_ms(40_000);
    assert!(matches!(
        call(&h, "lookup").await,
        ToolResponse::Completed(_)
    ));
    assert_eq!(h.sent.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn r44_an_asked_call_counts_only_once_approved_and_sent_and_nobody_is_asked_about_a_full_quota()
 {
    let h = harness(CONFIG);
    assert!(matches!(
        call(&h, "refund").await,
        ToolResponse::Completed(_)
    ));
    assert_eq!(h.asked.load(Ordering::SeqCst), 1);
    // Full now: refused before anyone is asked (R44: before routing).
    let ToolResponse::Refused(r) = call(&h, "refund").await else {
        panic!("the second refund in the minute is refused")
    };
    assert_eq!(r.code, RefusalCode::RateLimited);
    assert_eq!(
        h.asked.load(Ordering::SeqCst),
        1,
        "nobody is asked about it"
    );
    assert_eq!(h.sent.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r44_concurrent_calls_never_send_more_than_max() {
    let config = CONFIG.replace(
        r#""max": 2, "window_secs": 60"#,
        r#""max": 37, "window_secs": 60"#,
    );
    let h = harness(&config);
    let tasks: Vec<_> = (0..200)
        .map(|_| {
            let svc = h.svc.clone();
            tokio::spawn(async move {
                svc.oneshot(ToolCall::new(AgentRef::profile("dev"), "lookup", json!({})))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut ran = 0;
    let mut limited = 0;
    for t in tasks {
        match t.await.unwrap() {
            ToolResponse::Completed(_) => ran += 1,
            ToolResponse::Refused(r) if r.code == RefusalCode::RateLimited => limited += 1,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!((ran, limited), (37, 163));
    assert_eq!(h.sent.load(Ordering::SeqCst), 37, "exactly max sends");
}

#[tokio::test]
async fn r45_a_live_grant_answers_an_ask_until_spent_and_never_a_full_quota() {
    let h = harness(&CONFIG.replace(
        r#""max": 1, "window_secs": 60"#,
        r#""max": 5, "window_secs": 60"#,
    ));
    let grants = parse_grants(
        r#"[{"id": "g-1", "agent": "dev", "tool": "refund", "expires_at": 9999999999999,
             "max_calls": 2, "granted_by": "alice", "reason": "refund backlog"}]"#,
    )
    .unwrap();
    h.handle.set_grants(Arc::new(MemoryGrants::new(grants)));
    for _ in 0..2 {
        assert!(matches!(
            call(&h, "refund").await,
            ToolResponse::Completed(_)
        ));
    }
    assert_eq!(h.asked.load(Ordering::SeqCst), 0, "the grant answered both");
    // Spent: the third is asked.
    assert!(matches!(
        call(&h, "refund").await,
        ToolResponse::Completed(_)
    ));
    assert_eq!(h.asked.load(Ordering::SeqCst), 1);
    assert_eq!(h.sent.load(Ordering::SeqCst), 3);
}

/// R32, R44 (issue 33 item 6): a call `before_call` cancels is never sent, so it is no send:
/// with one call a minute, a cancelled first call leaves the quota's room to the second —
/// on the run path and on the path of a call a person approved.
#[tokio::test]
async fn r44_a_call_before_call_cancels_does_not_count_as_a_send() {
    use toolgate::approval::Hooks;
    let config = r#"{
        "approval": {"channel": "interactive"},
        "tools": [{"kind": "http", "name": "lookup"},
                  {"kind": "http", "name": "refund", "approval": "require_approval"}],
        "agents": [{"name": "dev", "allowed_tools": ["lookup", "refund"]}],
        "policy": {"rules": [], "quotas": [
            {"max": 1, "window_secs": 60, "per": ["tool"], "reason": "one call a minute"}
        ]}
    }"#;
    let handle = GovernanceHandle::new(load_str(config, Format::Json).unwrap());
    handle.set_clock(Arc::new(ManualClock::new(1_000_000)));
    let channel = FnChannel::new(ChannelKind::Interactive, |_r| ApprovalOutcome::Approved {
        approver: "alice".into(),
    });
    let sent = Arc::new(AtomicUsize::new(0));
    let hits = Arc::clone(&sent);
    let svc = ServiceBuilder::new()
        .layer(
            ToolgateLayer::builder(handle.clone())
                .channel(channel)
                .hooks(Hooks::new().before_call(|c| match c.input.get("cancel") {
                    Some(_) => Err("cancelled by the hook".to_owned()),
                    None => Ok(()),
                }))
                .build()
                .unwrap(),
        )
        .service(service_fn(move |_call: ToolCall| {
            hits.fetch_add(1, Ordering::SeqCst);
            async {
                Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::new(json!(
                    "ok"
                ))))
            }
        }));
    for tool in ["lookup", "refund"] {
        let before = sent.load(Ordering::SeqCst);
        let cancelled = svc
            .clone()
            .oneshot(ToolCall::new(
                AgentRef::profile("dev"),
                tool,
                json!({"cancel": true}),
            ))
            .await
            .unwrap();
        let ToolResponse::Refused(r) = &cancelled else {
            panic!("{tool}: {cancelled:?}")
        };
        assert!(
            r.reasons
                .iter()
                .any(|x| x.contains("cancelled by the hook")),
            "{r:?}"
        );
        let ran = svc
            .clone()
            .oneshot(ToolCall::new(AgentRef::profile("dev"), tool, json!({})))
            .await
            .unwrap();
        assert!(
            matches!(ran, ToolResponse::Completed(_)),
            "{tool}: the cancelled call used the quota's room: {ran:?}"
        );
        assert_eq!(sent.load(Ordering::SeqCst), before + 1, "{tool}");
    }
}
