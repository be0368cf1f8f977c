//! R38: an approved call passes every check again, against the configuration in force, right
//! before it is sent. Each test asks one interactive question, changes the configuration
//! through the `GovernanceHandle` while the question waits, then has a person approve it: a
//! refusal that arrived during the wait wins (keeping its own code), and a new reason to ask
//! is not answered by the old approval (`rejected`, fail closed).

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use serde_json::{Value, json};
use toolgate::GovernanceHandle;
use toolgate::approval::{ApprovalGateLayer, InteractiveChannel};
use toolgate_core::{AgentRef, RefusalCode, ToolCall, ToolOutput, ToolResponse};
use toolgate_engine::config::{Format, load_str};
use toolgate_engine::policy::{Limits, Policy};
use toolgate_engine::{Governance, PolicyState};
use tower::{ServiceBuilder, ServiceExt, service_fn};

/// `refund` (an egress HTTP tool that asks at the agent level) and a read-only `lookup`;
/// the agent `support` is allowed both. `edit` changes the configuration before loading.
fn governance(edit: impl FnOnce(&mut Value)) -> Governance {
    let mut config = json!({
        "approval": {"channel": "interactive"},
        "tools": [
            {"kind": "http", "name": "refund", "approval": "require_approval", "network": "egress"},
            {"kind": "http", "name": "lookup", "read_only": true}
        ],
        "agents": [{"name": "support", "allowed_tools": ["refund", "lookup"]}]
    });
    edit(&mut config);
    load_str(&config.to_string(), Format::Json).unwrap()
}

fn policy(rules: Value) -> PolicyState {
    let text = json!({ "rules": rules }).to_string();
    PolicyState::readable(Policy::from_json_str(&text, &Limits::default()).unwrap())
}

/// Asks about `refund`, applies `change` while the question waits, approves it, and returns
/// the response and how many times the tool ran.
async fn approved_after(change: impl FnOnce(&GovernanceHandle)) -> (ToolResponse, usize) {
    let handle = GovernanceHandle::new(governance(|_| {}));
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&runs);
    let (channel, mut questions) = InteractiveChannel::new(Duration::from_secs(600));
    let svc = ServiceBuilder::new()
        .layer(ApprovalGateLayer::new(handle.clone()).channel(channel))
        .service(service_fn(move |call: ToolCall| {
            counter.fetch_add(1, SeqCst);
            std::future::ready(Ok::<_, Infallible>(ToolResponse::Completed(
                ToolOutput::new(call.input),
            )))
        }));
    let call = ToolCall::new(AgentRef::profile("support"), "refund", json!({"order": 7}));
    let waiting = tokio::spawn(svc.oneshot(call));
    let question = questions.recv().await.unwrap();
    assert_eq!(question.request().tool, "refund");
    change(&handle);
    question.approve("alice").unwrap();
    let response = waiting.await.unwrap().unwrap();
    (response, runs.load(SeqCst))
}

/// Expects a refusal with `code` that says the approval came before it.
fn refused_after_approval(response: &ToolResponse, code: RefusalCode) -> Vec<String> {
    let r = response
        .refusal()
        .unwrap_or_else(|| panic!("expected a refusal, got {response:?}"));
    assert_eq!(r.code, code, "{r:?}");
    assert!(
        r.reasons.iter().any(|x| x.contains("approved by alice")),
        "the refusal says a person had approved: {r:?}"
    );
    r.reasons.clone()
}

#[tokio::test]
async fn r38_a_deny_installed_during_the_wait_wins_over_the_approval() {
    let (response, runs) = approved_after(|h| {
        h.replace_policy(policy(json!([
            {"effect": "deny", "tool": "refund", "reason": "refunds are frozen"}
        ])))
        .unwrap();
    })
    .await;
    let reasons = refused_after_approval(&response, RefusalCode::Denied);
    assert_eq!(reasons[0], "refunds are frozen");
    assert_eq!(runs, 0, "R38: a refused call is never sent");
}

#[tokio::test]
async fn r38_a_policy_that_became_unreadable_during_the_wait_refuses_the_approved_call() {
    let (response, runs) = approved_after(|h| {
        h.replace_policy(PolicyState::Unreadable(String::from(
            "the stored body is not JSON",
        )))
        .unwrap();
    })
    .await;
    let reasons = refused_after_approval(&response, RefusalCode::PolicyUnreadable);
    assert!(
        reasons[0].contains("the stored body is not JSON"),
        "{reasons:?}"
    );
    assert_eq!(runs, 0);
}

#[tokio::test]
async fn r38_a_tool_taken_from_the_agent_during_the_wait_refuses_the_approved_call() {
    let (response, runs) = approved_after(|h| {
        h.store(governance(|c| {
            c["agents"][0]["allowed_tools"] = json!(["lookup"]);
        }));
    })
    .await;
    refused_after_approval(&response, RefusalCode::NotAllowed);
    assert_eq!(runs, 0);
}

#[tokio::test]
async fn r38_an_air_gap_switched_on_during_the_wait_refuses_the_approved_call() {
    let (response, runs) = approved_after(|h| {
        h.store(governance(|c| c["air_gapped"] = json!(true)));
    })
    .await;
    refused_after_approval(&response, RefusalCode::AirGapped);
    assert_eq!(runs, 0);
}

#[tokio::test]
async fn r38_a_tool_made_deny_for_the_agent_during_the_wait_refuses_the_approved_call() {
    let (response, runs) = approved_after(|h| {
        h.store(governance(|c| {
            c["agents"][0]["overrides"] = json!([{"tool": "refund", "approval": "deny"}]);
        }));
    })
    .await;
    refused_after_approval(&response, RefusalCode::Denied);
    assert_eq!(runs, 0);
}

#[tokio::test]
async fn r38_a_new_reason_to_ask_during_the_wait_is_not_answered_by_the_old_approval() {
    let (response, runs) = approved_after(|h| {
        h.replace_policy(policy(json!([
            {"effect": "ask", "tool": "refund", "reason": "refunds now need a second person"}
        ])))
        .unwrap();
    })
    .await;
    let reasons = refused_after_approval(&response, RefusalCode::Rejected);
    assert!(
        reasons[0].contains("the decision changed during the wait")
            && reasons[0].contains("refunds now need a second person"),
        "{reasons:?}"
    );
    assert_eq!(
        runs, 0,
        "R38: the approval answers only the question it was asked"
    );
}

#[tokio::test]
async fn r38_an_approved_call_whose_decision_is_unchanged_or_relaxed_is_sent() {
    // Unchanged (a new snapshot of the same configuration): sent once.
    let (response, runs) = approved_after(|h| h.store(governance(|_| {}))).await;
    assert!(
        matches!(response, ToolResponse::Completed(_)),
        "{response:?}"
    );
    assert_eq!(runs, 1);
    // Relaxed: the tool no longer asks at all. The approval covers more than is needed.
    let (response, runs) = approved_after(|h| {
        h.store(governance(|c| {
            c["agents"][0]["overrides"] = json!([{"tool": "refund", "approval": "auto_approve"}]);
        }));
    })
    .await;
    assert!(
        matches!(response, ToolResponse::Completed(_)),
        "{response:?}"
    );
    assert_eq!(runs, 1);
    // A rule that allows, added meanwhile, changes nothing either.
    let (response, runs) = approved_after(|h| {
        h.replace_policy(policy(json!([{"effect": "allow", "tool": "refund"}])))
            .unwrap();
    })
    .await;
    assert!(
        matches!(response, ToolResponse::Completed(_)),
        "{response:?}"
    );
    assert_eq!(runs, 1);
}
