//! R26 "exactly once" and R38 "a held call that is resumed is claimed before it is sent,
//! whatever the new decision is": a held call whose reason to ask went away while it waited
//! (the policy or posture relaxed, an exemption or override added, or only an agent-level ask
//! left under `auto_approve_required`) still has its ticket redeemed — the inbox's
//! conditional claim — before the tool runs, so repeated or concurrent resumes send it once.
//! A held call the fresh decision refuses is never sent, and is ended `failed` with the
//! refusal recorded.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};

use common::*;
use serde_json::json;
use toolgate::GovernanceHandle;
use toolgate::approval::{ApprovalGateLayer, ApprovalOutcome, FnChannel, ResumeTicket};
use toolgate_core::{ChannelKind, RefusalCode, ToolCall, ToolResponse};
use toolgate_engine::CallView;
use toolgate_inbox::{Answer, Inbox, ResumeError, SqliteInbox, SqliteOptions, State};

fn refusal(r: &ToolResponse) -> &toolgate_core::Refusal {
    r.refusal()
        .unwrap_or_else(|| panic!("expected a refusal, got {r:?}"))
}

/// Holds a call under `v`'s configuration, approves it, relaxes the configuration, and
/// resumes it three times (then once more with a ticket sent straight through the stack).
async fn sent_once_across_resumes(v: Relaxed) {
    let dir = tempfile::tempdir().unwrap();
    let handle = GovernanceHandle::new(v.governance(false));
    let inbox = Inbox::new(sqlite(&dir.path().join("inbox.db")));
    let tool = Tool::default();
    let s = stack(&handle, &inbox, &tool);
    let input = json!({"amount": 42, "variant": v.name()});
    let id = held(&s, v.call(input.clone())).await;
    inbox
        .store()
        .answer(&id, Answer::approve("k-1", "alice"))
        .await
        .unwrap();

    handle.store(v.governance(true));
    // The fresh decision no longer asks: this is the path that used to skip the claim.
    let fresh = v.call(input.clone());
    assert!(
        handle.load().decide(CallView::of(&fresh)).runs(),
        "{}: the relaxed configuration runs the call without asking",
        v.name()
    );

    let first = inbox.resume(&id, s.clone()).await.unwrap();
    assert!(
        matches!(first.response, ToolResponse::Completed(_)),
        "{}: {first:?}",
        v.name()
    );
    assert_eq!(
        first.recorded,
        Some(State::Done),
        "{}: R38: the resume claimed the call and recorded its result",
        v.name()
    );
    for _ in 0..2 {
        match inbox.resume(&id, s.clone()).await {
            Err(ResumeError::NotApproved {
                state: State::Done, ..
            }) => {}
            other => panic!(
                "{}: R26: a second resume must be refused: {other:?}",
                v.name()
            ),
        }
    }
    // A stale ticket sent straight through the stack (as a resume that read the state
    // before the first one finished would send it) is refused by the claim.
    let mut stale = v.call(input.clone());
    stale.extensions.insert(ResumeTicket {
        interaction_id: id.clone(),
        claim: None,
    });
    let r = send(&s, stale).await;
    assert_eq!(refusal(&r).code, RefusalCode::Rejected, "{}", v.name());
    assert!(
        refusal(&r).reasons[0].contains("sent exactly once"),
        "{r:?}"
    );

    assert_eq!(
        tool.runs(),
        1,
        "{}: R26: the tool ran exactly once",
        v.name()
    );
    assert_eq!(tool.received()[0].input, input);
    let rec = inbox.store().get(&id).await.unwrap().unwrap();
    assert_eq!(rec.state, State::Done, "{}", v.name());
    assert_eq!(rec.result.unwrap()["outcome"], "completed");
}

#[tokio::test]
async fn r38_resumed_call_is_claimed_even_when_it_now_runs_policy_relaxed() {
    sent_once_across_resumes(Relaxed::Policy).await;
}

#[tokio::test]
async fn r38_resumed_call_is_claimed_even_when_it_now_runs_posture_relaxed() {
    sent_once_across_resumes(Relaxed::Posture).await;
}

#[tokio::test]
async fn r38_resumed_call_is_claimed_even_when_it_now_runs_exemption_added() {
    sent_once_across_resumes(Relaxed::Exemption).await;
}

#[tokio::test]
async fn r38_resumed_call_is_claimed_even_when_it_now_runs_override_added() {
    sent_once_across_resumes(Relaxed::Override).await;
}

#[tokio::test]
async fn r38_resumed_call_is_claimed_even_when_it_now_runs_auto_approved_agent_ask_only() {
    sent_once_across_resumes(Relaxed::AutoApproveAgentOnly).await;
}

#[tokio::test]
async fn r38_a_deny_installed_while_held_ends_the_call_failed_and_it_is_never_sent() {
    let dir = tempfile::tempdir().unwrap();
    let v = Relaxed::Policy;
    let handle = GovernanceHandle::new(v.governance(false));
    let inbox = Inbox::new(sqlite(&dir.path().join("inbox.db")));
    let tool = Tool::default();
    let s = stack(&handle, &inbox, &tool);
    let id = held(&s, v.call(json!({"amount": 1}))).await;
    inbox
        .store()
        .answer(&id, Answer::approve("k", "alice"))
        .await
        .unwrap();
    let deny = toolgate_engine::policy::Policy::from_json_str(
        r#"{"rules": [{"effect": "deny", "tool": "charge", "reason": "charges are frozen"}]}"#,
        &Default::default(),
    )
    .unwrap();
    handle
        .replace_policy(toolgate_engine::PolicyState::readable(deny))
        .unwrap();

    let resumed = inbox.resume(&id, s.clone()).await.unwrap();
    let r = refusal(&resumed.response);
    assert_eq!(r.code, RefusalCode::Denied);
    assert_eq!(r.reasons[0], "charges are frozen");
    assert_eq!(
        resumed.recorded,
        Some(State::Failed),
        "ended, with the refusal recorded"
    );
    let rec = inbox.store().get(&id).await.unwrap().unwrap();
    assert_eq!(rec.state, State::Failed);
    let result = rec.result.unwrap();
    assert_eq!(result["outcome"], "refused");
    assert_eq!(result["code"], "denied");

    // The deny is lifted: the old approval is not redeemed any more.
    handle.store(v.governance(true));
    match inbox.resume(&id, s.clone()).await {
        Err(ResumeError::NotApproved {
            state: State::Failed,
            ..
        }) => {}
        other => panic!("R38: a refusal that arrived while held wins: {other:?}"),
    }
    assert_eq!(tool.runs(), 0, "R38: a refused held call is never sent");
}

#[tokio::test]
async fn r38_a_new_reason_to_ask_while_held_is_not_answered_by_the_old_approval() {
    let dir = tempfile::tempdir().unwrap();
    // Held for the agent-level ask alone.
    let v = Relaxed::Override;
    let handle = GovernanceHandle::new(v.governance(false));
    let inbox = Inbox::new(sqlite(&dir.path().join("inbox.db")));
    let tool = Tool::default();
    let s = stack(&handle, &inbox, &tool);
    let id = held(&s, v.call(json!({"amount": 2}))).await;
    assert_eq!(
        inbox
            .store()
            .get(&id)
            .await
            .unwrap()
            .unwrap()
            .call
            .reasons
            .len(),
        1
    );
    inbox
        .store()
        .answer(&id, Answer::approve("k", "alice"))
        .await
        .unwrap();
    // A tenant rule that asks is added while the call is held.
    let ask = toolgate_engine::policy::Policy::from_json_str(
        r#"{"rules": [{"effect": "ask", "tool": "charge", "reason": "charges now need finance"}]}"#,
        &Default::default(),
    )
    .unwrap();
    handle
        .replace_policy(toolgate_engine::PolicyState::readable(ask))
        .unwrap();

    let resumed = inbox.resume(&id, s.clone()).await.unwrap();
    let r = refusal(&resumed.response);
    assert_eq!(r.code, RefusalCode::Rejected);
    assert!(
        r.reasons[0].contains("decision changed")
            && r.reasons[0].contains("charges now need finance"),
        "{r:?}"
    );
    assert_eq!(resumed.recorded, Some(State::Failed));
    assert_eq!(
        tool.runs(),
        0,
        "R38: the approval answers only the question it was asked"
    );
    // The same call asked afresh is held again, with the new reason.
    let again = held(&s, v.call(json!({"amount": 2}))).await;
    assert_ne!(again, id);
    assert_eq!(
        inbox
            .store()
            .get(&again)
            .await
            .unwrap()
            .unwrap()
            .call
            .reasons
            .len(),
        2
    );
}

#[tokio::test]
async fn r38_a_ticket_is_never_redeemed_by_a_channel_that_cannot_claim() {
    // A gate whose channel approves everything but cannot claim a held call (an interactive
    // channel): a call carrying a resume ticket is refused, never sent, whether its fresh
    // decision runs it or asks.
    let tool = Tool::default();
    for relaxed in [true, false] {
        let v = Relaxed::Policy;
        let mut config = v.governance(relaxed);
        if !relaxed {
            let text = json!({
                "approval": {"channel": "interactive"},
                "tools": [{"kind": "http", "name": "charge", "description": "Charge a card"}],
                "agents": [{"name": "support", "allowed_tools": ["charge"]}],
                "policy": {"rules": [{"effect": "ask", "tool": "charge"}]}
            });
            config = toolgate_engine::config::load_str(
                &text.to_string(),
                toolgate_engine::config::Format::Json,
            )
            .unwrap();
        }
        let handle = GovernanceHandle::new(config);
        let approve_all =
            FnChannel::new(ChannelKind::Interactive, |_req| ApprovalOutcome::Approved {
                approver: "anyone".into(),
            });
        let counting = tool.clone();
        let svc = tower::ServiceBuilder::new()
            .layer(ApprovalGateLayer::new(handle).channel(approve_all))
            .service(tower::service_fn(move |call: ToolCall| {
                counting
                    .runs
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                std::future::ready(Ok::<_, std::convert::Infallible>(ToolResponse::Completed(
                    toolgate_core::ToolOutput::new(call.input),
                )))
            }));
        let mut call = v.call(json!({}));
        call.extensions.insert(ResumeTicket {
            interaction_id: "ia_0123456789abcdef0123456789abcdef".into(),
            claim: Some("claim_x".into()),
        });
        let r = tower::ServiceExt::oneshot(svc, call).await.unwrap();
        assert_eq!(refusal(&r).code, RefusalCode::NoApprovalChannel, "{r:?}");
        assert!(
            refusal(&r).reasons[0].contains("durable `inbox` channel"),
            "{r:?}"
        );
    }
    assert_eq!(tool.runs(), 0);
}

// ----- concurrent resumes from two processes on one SQLite file -----

const CHILD_ENV: &str = "TOOLGATE_INBOX_RESUME_CHILD";
const CHILD_TEST: &str = "resume_child_process";
const CALLS: usize = 8;

/// Not a test on its own: a child process of
/// `r38_two_processes_resuming_relaxed_held_calls_send_each_exactly_once`. Without its
/// environment variable it returns at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_child_process() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let parts: Vec<&str> = spec.split('\n').collect();
    let (db, marker, go, name) = (
        PathBuf::from(parts[0]),
        PathBuf::from(parts[1]),
        PathBuf::from(parts[2]),
        parts[3],
    );
    let ids: Vec<&str> = parts[4].split(',').collect();
    let reverse = parts[5] == "reverse";
    let v = Relaxed::parse(name);
    let handle = GovernanceHandle::new(v.governance(true));
    let inbox = Inbox::new(SqliteInbox::open(&db, SqliteOptions::default()).unwrap());
    let s = file_stack(&handle, &inbox, marker, false);
    // Both children start together.
    while !go.exists() {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let order: Vec<&str> = if reverse {
        ids.iter().rev().copied().collect()
    } else {
        ids
    };
    for id in order {
        match inbox.resume(id, s.clone()).await {
            Ok(r) => println!(
                "{id} {:?} {:?}",
                r.recorded,
                r.response.refusal().map(|r| r.code)
            ),
            Err(ResumeError::NotApproved { state, .. }) => println!("{id} not approved: {state}"),
            Err(e) => panic!("{id}: {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r38_two_processes_resuming_relaxed_held_calls_send_each_exactly_once() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    for v in [Relaxed::Policy, Relaxed::AutoApproveAgentOnly] {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("inbox.db");
        let marker = dir.path().join("invocations.txt");
        let go = dir.path().join("go");
        let handle = GovernanceHandle::new(v.governance(false));
        let inbox = Inbox::new(sqlite(&db));
        let tool = Tool::default();
        let s = stack(&handle, &inbox, &tool);
        let mut ids = Vec::new();
        for i in 0..CALLS {
            let id = held(&s, v.call(json!({"order": i}))).await;
            inbox
                .store()
                .answer(&id, Answer::approve(format!("k-{i}"), "alice"))
                .await
                .unwrap();
            ids.push(id);
        }
        let children: Vec<_> = ["forward", "reverse"]
            .into_iter()
            .map(|order| {
                Command::new(std::env::current_exe().unwrap())
                    .args([CHILD_TEST, "--exact", "--nocapture", "--test-threads=1"])
                    .env(
                        CHILD_ENV,
                        format!(
                            "{}\n{}\n{}\n{}\n{}\n{order}",
                            db.display(),
                            marker.display(),
                            go.display(),
                            v.name(),
                            ids.join(",")
                        ),
                    )
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        std::fs::write(&go, b"go").unwrap();
        let mut sent_by = Vec::new();
        for child in children {
            let out = child.wait_with_output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "{}: a child failed: {stdout}\n{}",
                v.name(),
                String::from_utf8_lossy(&out.stderr)
            );
            sent_by.push(stdout.lines().filter(|l| l.contains("Some(Done)")).count());
        }
        eprintln!(
            "{}: the two processes sent {sent_by:?} of {CALLS} calls",
            v.name()
        );
        assert_eq!(sent_by.iter().sum::<usize>(), CALLS, "{}", v.name());
        let invoked = lines(&marker);
        for i in 0..CALLS {
            let line = format!("invoked {}", json!({"order": i}));
            assert_eq!(
                invoked.iter().filter(|l| **l == line).count(),
                1,
                "{}: R26: call {i} was sent exactly once across two processes: {invoked:?}",
                v.name()
            );
        }
        assert_eq!(invoked.len(), CALLS);
        for id in &ids {
            assert_eq!(
                inbox.store().get(id).await.unwrap().unwrap().state,
                State::Done,
                "{}",
                v.name()
            );
        }
        assert_eq!(tool.runs(), 0, "the parent sent nothing");
    }
}
