//! The stored tenant policy (R22, R23): running gates pick up a new policy without a restart;
//! a refused put keeps the old one; a stored policy that cannot be read refuses every `mcp`
//! and `http` call with `policy_unreadable`, and `local` tools are unaffected.
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
use toolgate::GovernanceHandle;
use toolgate_core::{RefusalCode, ToolCall, ToolResponse};
use toolgate_engine::policy::Limits;
use toolgate_inbox::{
    Inbox, PolicyPoll, PolicyWatch, PutPolicyError, load_policy_state, poll_policy, put_policy_text,
};

const DENY_LOOKUPS: &str =
    r#"{"rules": [{"effect": "deny", "tool": "lookup", "reason": "lookups are paused"}]}"#;

fn setup() -> (tempfile::TempDir, GovernanceHandle, Inbox, Tool, Stack) {
    let dir = tempfile::tempdir().unwrap();
    let handle = GovernanceHandle::new(governance());
    let inbox = Inbox::new(sqlite(&dir.path().join("inbox.db")));
    let tool = Tool::default();
    let stack = stack(&handle, &inbox, &tool);
    (dir, handle, inbox, tool, stack)
}

async fn lookup(stack: &Stack) -> ToolResponse {
    send(stack, ToolCall::new(support(), "lookup", json!({}))).await
}

async fn notes(stack: &Stack) -> ToolResponse {
    send(stack, ToolCall::new(support(), "notes__read", json!({}))).await
}

#[tokio::test]
async fn r22_a_running_gate_picks_up_a_new_stored_policy_without_a_restart() {
    let (_dir, handle, inbox, _tool, stack) = setup();
    let mut watch = PolicyWatch::new(handle.clone(), None);
    assert_eq!(
        watch.poll_once(&**inbox.store()).await,
        PolicyPoll::Unchanged
    );
    assert!(matches!(lookup(&stack).await, ToolResponse::Completed(_)));

    let stored = put_policy_text(&**inbox.store(), DENY_LOOKUPS, &Limits::default())
        .await
        .unwrap();
    assert_eq!(
        watch.poll_once(&**inbox.store()).await,
        PolicyPoll::Replaced {
            updated_at: stored.updated_at.clone(),
            readable: true
        }
    );
    let r = lookup(&stack).await;
    let refusal = r.refusal().unwrap();
    assert_eq!(refusal.code, RefusalCode::Denied);
    assert!(
        refusal.reasons.iter().any(|x| x == "lookups are paused"),
        "{refusal:?}"
    );
    assert_eq!(
        watch.poll_once(&**inbox.store()).await,
        PolicyPoll::Unchanged
    );

    // A refused put keeps the old policy, in the store and in the gate.
    let e = put_policy_text(
        &**inbox.store(),
        r#"{"rules": [{"effect": "perhaps"}]}"#,
        &Limits::default(),
    )
    .await
    .unwrap_err();
    assert!(matches!(e, PutPolicyError::Invalid(_)));
    assert_eq!(
        watch.poll_once(&**inbox.store()).await,
        PolicyPoll::Unchanged
    );
    assert_eq!(
        lookup(&stack).await.refusal().unwrap().code,
        RefusalCode::Denied
    );
    match handle.load().policy() {
        toolgate_engine::PolicyState::Readable(p) => {
            assert_eq!(p.updated_at(), Some(stored.updated_at.as_str()));
            assert_eq!(p.rules().len(), 1, "the policy in force is the stored one");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn r22_a_stored_policy_that_cannot_be_read_refuses_every_mcp_and_http_call() {
    let (dir, handle, inbox, _tool, stack) = setup();
    put_policy_text(&**inbox.store(), r#"{"rules": []}"#, &Limits::default())
        .await
        .unwrap();
    let mut watch = PolicyWatch::new(handle.clone(), None);
    assert!(matches!(
        watch.poll_once(&**inbox.store()).await,
        PolicyPoll::Replaced { readable: true, .. }
    ));

    corrupt_policy_row(&dir.path().join("inbox.db"));
    // The corrupted row has the same `updatedAt`: a fresh start reads it as unreadable.
    let state = load_policy_state(&**inbox.store(), &Limits::default())
        .await
        .unwrap();
    handle.replace_policy(state).unwrap();
    let r = lookup(&stack).await;
    let refusal = r.refusal().unwrap();
    assert_eq!(refusal.code, RefusalCode::PolicyUnreadable);
    assert!(refusal.reasons[0].contains("cannot be read"), "{refusal:?}");
    let r = send(&stack, ToolCall::new(support(), "refund", json!({}))).await;
    assert_eq!(
        r.refusal().unwrap().code,
        RefusalCode::PolicyUnreadable,
        "{r:?}"
    );
    assert!(
        inbox.store().list(None).await.unwrap().is_empty(),
        "nothing was held"
    );
    assert!(
        matches!(notes(&stack).await, ToolResponse::Completed(_)),
        "R22: local tools are unaffected"
    );

    // A valid policy replaces it.
    put_policy_text(&**inbox.store(), r#"{"rules": []}"#, &Limits::default())
        .await
        .unwrap();
    assert!(matches!(
        watch.poll_once(&**inbox.store()).await,
        PolicyPoll::Replaced { readable: true, .. }
    ));
    assert!(matches!(lookup(&stack).await, ToolResponse::Completed(_)));
}

#[tokio::test]
async fn r22_a_corrupted_row_seen_by_the_watcher_makes_the_policy_unreadable() {
    let (dir, handle, inbox, _tool, stack) = setup();
    let mut watch = PolicyWatch::new(handle.clone(), None);
    put_policy_text(&**inbox.store(), r#"{"rules": []}"#, &Limits::default())
        .await
        .unwrap();
    let conn = rusqlite::Connection::open(dir.path().join("inbox.db")).unwrap();
    conn.execute(
        "UPDATE stored_policy SET body = 'garbage', updated_at = '2099-01-01T00:00:00.000000Z'",
        [],
    )
    .unwrap();
    assert!(matches!(
        watch.poll_once(&**inbox.store()).await,
        PolicyPoll::Replaced {
            readable: false,
            ..
        }
    ));
    assert_eq!(
        lookup(&stack).await.refusal().unwrap().code,
        RefusalCode::PolicyUnreadable
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r22_the_policy_watcher_task_applies_a_put_from_elsewhere() {
    let (dir, handle, inbox, _tool, stack) = setup();
    let task = poll_policy(
        handle.clone(),
        std::sync::Arc::clone(inbox.store()),
        None,
        Duration::from_millis(20),
    );
    // Another process (here: another connection) puts a policy.
    let other = sqlite(&dir.path().join("inbox.db"));
    put_policy_text(&other, DENY_LOOKUPS, &Limits::default())
        .await
        .unwrap();
    let started = Instant::now();
    while !lookup(&stack).await.is_refused() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the watcher never applied the policy"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    task.abort();
}
