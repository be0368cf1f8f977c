//! Whole-stack tests (R26, R35, R38): a real toolgate stack (exposure → confidentiality →
//! air gap → approval gate with the inbox channel → a counting tool) over a SQLite inbox.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;

use common::*;
use serde_json::json;
use toolgate::GovernanceHandle;
use toolgate::approval::ResumeTicket;
use toolgate_core::{RefusalCode, ToolCall, ToolResponse};
use toolgate_inbox::{Answer, Inbox, ResumeError, State};

fn setup() -> (tempfile::TempDir, GovernanceHandle, Inbox, Tool, Stack) {
    let dir = tempfile::tempdir().unwrap();
    let handle = GovernanceHandle::new(governance());
    let inbox = Inbox::new(sqlite(&dir.path().join("inbox.db")));
    let tool = Tool::default();
    let stack = stack(&handle, &inbox, &tool);
    (dir, handle, inbox, tool, stack)
}

fn refusal(r: &ToolResponse) -> &toolgate_core::Refusal {
    r.refusal()
        .unwrap_or_else(|| panic!("expected a refusal, got {r:?}"))
}

#[tokio::test]
async fn r38_a_held_call_approved_later_is_sent_once_through_the_same_stack() {
    let (_dir, _handle, inbox, tool, stack) = setup();
    let input = json!({"order": "A-17", "amount": 120.5, "big": 18_446_744_073_709_551_615_u64});
    let call = ToolCall::new(support(), "refund", input.clone())
        .with_id(toolgate_core::CallId::new("call-from-the-agent"));
    let id = held(&stack, call).await;
    assert!(id.starts_with("ia_") && id.len() == 35, "{id}");
    assert_eq!(tool.runs(), 0, "R26: a held call is not sent");

    // The record keeps the call exactly as decided.
    let rec = inbox.store().get(&id).await.unwrap().unwrap();
    assert_eq!(rec.state, State::Pending);
    assert_eq!(rec.call.tool, "refund");
    assert_eq!(rec.input().unwrap(), input);
    assert_eq!(
        rec.call.reasons.len(),
        2,
        "every reason: agent mode and tenant rule"
    );
    assert!(rec.call.expires_at > rec.call.created_at);

    inbox
        .store()
        .answer(&id, Answer::approve("approve-1", "alice"))
        .await
        .unwrap();
    let resumed = inbox.resume(&id, stack.clone()).await.unwrap();
    assert!(
        matches!(resumed.response, ToolResponse::Completed(_)),
        "{resumed:?}"
    );
    assert_eq!(resumed.recorded, Some(State::Done));
    assert_eq!(tool.runs(), 1);
    let got = tool.received();
    assert_eq!(got[0].input, input, "R35: exactly the input the person saw");
    assert_eq!(
        got[0].call_id.as_str(),
        "call-from-the-agent",
        "the same call id"
    );

    // The paused agent fetches the result.
    let result = inbox.result(&id).await.unwrap().unwrap();
    assert_eq!(result.state, State::Done);
    assert_eq!(result.result.unwrap()["content"]["refunded"], input);

    // Never twice.
    match inbox.resume(&id, stack.clone()).await {
        Err(ResumeError::NotApproved {
            state: State::Done, ..
        }) => {}
        other => panic!("R26: a second resume must be refused, got {other:?}"),
    }
    // Not even with a hand-made ticket through the stack.
    let mut forged = ToolCall::new(support(), "refund", input.clone());
    forged.extensions.insert(ResumeTicket {
        interaction_id: id.clone(),
        claim: None,
    });
    let r = send(&stack, forged).await;
    assert_eq!(refusal(&r).code, RefusalCode::Rejected);
    assert!(
        refusal(&r).reasons[0].contains("sent exactly once"),
        "{r:?}"
    );
    assert_eq!(tool.runs(), 1, "R26: sent exactly once");
}

#[tokio::test]
async fn r35_a_definition_changed_between_approval_and_resume_is_refused_with_a_reason() {
    let (_dir, handle, inbox, tool, stack) = setup();
    let id = held(
        &stack,
        ToolCall::new(support(), "refund", json!({"order": 1})),
    )
    .await;
    inbox
        .store()
        .answer(&id, Answer::approve("k", "alice"))
        .await
        .unwrap();
    // The tool is re-listed with a new definition (a "rug pull") before the call is sent.
    handle.store(governance_with(
        RUG_PULL,
        &["refund", "payout", "lookup", "notes__read"],
    ));
    let resumed = inbox.resume(&id, stack.clone()).await.unwrap();
    let r = refusal(&resumed.response);
    assert_eq!(r.code, RefusalCode::Rejected);
    assert!(
        r.reasons[0].contains("definition of `refund` changed"),
        "{r:?}"
    );
    assert!(r.reasons[0].contains("approved by alice"), "{r:?}");
    assert_eq!(
        tool.runs(),
        0,
        "R35: nothing sent under a changed definition"
    );
    // R38: the refused held call is ended with the refusal recorded, never sent later.
    assert_eq!(resumed.recorded, Some(State::Failed));
    let rec = inbox.store().get(&id).await.unwrap().unwrap();
    assert_eq!(rec.state, State::Failed);
    assert_eq!(rec.result.as_ref().unwrap()["outcome"], "refused");
    assert_eq!(rec.result.as_ref().unwrap()["code"], "rejected");
    match inbox.resume(&id, stack.clone()).await {
        Err(ResumeError::NotApproved {
            state: State::Failed,
            ..
        }) => {}
        other => panic!("a refused held call is not resumed again: {other:?}"),
    }
    // The changed definition is re-gated on its next call.
    let again = held(
        &stack,
        ToolCall::new(support(), "refund", json!({"order": 1})),
    )
    .await;
    assert_ne!(again, id);
    let new = inbox.store().get(&again).await.unwrap().unwrap();
    let old = inbox.store().get(&id).await.unwrap().unwrap();
    assert_ne!(new.call.definition_hash, old.call.definition_hash);
}

#[tokio::test]
async fn r38_a_resumed_call_passes_every_check_again() {
    let (_dir, handle, inbox, tool, stack) = setup();
    let id = held(
        &stack,
        ToolCall::new(support(), "refund", json!({"order": 2})),
    )
    .await;
    inbox
        .store()
        .answer(&id, Answer::approve("k", "alice"))
        .await
        .unwrap();
    // The agent loses the tool after the approval: the exposure layer refuses the resume.
    handle.store(governance_with(DESCRIPTION, &["lookup"]));
    let resumed = inbox.resume(&id, stack.clone()).await.unwrap();
    assert_eq!(refusal(&resumed.response).code, RefusalCode::NotAllowed);
    assert_eq!(tool.runs(), 0);
    // Refused before the gate: the refusal that arrived during the wait wins for good —
    // the call is ended `failed` with the refusal recorded.
    assert_eq!(resumed.recorded, Some(State::Failed));
    let rec = inbox.store().get(&id).await.unwrap().unwrap();
    assert_eq!(rec.state, State::Failed);
    assert_eq!(rec.result.as_ref().unwrap()["code"], "not_allowed");
    // Given the tool back, the old approval is not redeemed: it was ended.
    handle.store(governance());
    match inbox.resume(&id, stack.clone()).await {
        Err(ResumeError::NotApproved {
            state: State::Failed,
            ..
        }) => {}
        other => panic!("R38: a refused held call is never sent later: {other:?}"),
    }
    assert_eq!(tool.runs(), 0);
}

#[tokio::test]
async fn r35_a_ticket_with_another_input_tool_or_agent_is_refused() {
    let (_dir, _handle, inbox, tool, stack) = setup();
    let id = held(
        &stack,
        ToolCall::new(support(), "refund", json!({"amount": 5})),
    )
    .await;
    inbox
        .store()
        .answer(&id, Answer::approve("k", "alice"))
        .await
        .unwrap();

    let mut bigger = ToolCall::new(support(), "refund", json!({"amount": 5000}));
    bigger.extensions.insert(ResumeTicket {
        interaction_id: id.clone(),
        claim: None,
    });
    let r = send(&stack, bigger).await;
    assert_eq!(refusal(&r).code, RefusalCode::Rejected);
    assert!(refusal(&r).reasons[0].contains("input differs"), "{r:?}");

    // The same canonical hash is not enough: 5 and 5.0 hash alike under RFC 8785, but
    // the tool would receive a different value.
    let mut float = ToolCall::new(support(), "refund", json!({"amount": 5.0}));
    float.extensions.insert(ResumeTicket {
        interaction_id: id.clone(),
        claim: None,
    });
    let r = send(&stack, float).await;
    assert!(refusal(&r).reasons[0].contains("input differs"), "{r:?}");

    let mut other_tool = ToolCall::new(support(), "payout", json!({"amount": 5}));
    other_tool.extensions.insert(ResumeTicket {
        interaction_id: id.clone(),
        claim: None,
    });
    let r = send(&stack, other_tool).await;
    assert!(
        refusal(&r).reasons[0].contains("approved `refund`, not `payout`"),
        "{r:?}"
    );

    let helper = toolgate_core::AgentRef::profile("helper");
    let mut other_agent = ToolCall::new(helper, "refund", json!({"amount": 5}));
    other_agent.extensions.insert(ResumeTicket {
        interaction_id: id.clone(),
        claim: None,
    });
    let r = send(&stack, other_agent).await;
    assert!(
        refusal(&r).reasons[0].contains("approved for agent `support`, not `helper`"),
        "{r:?}"
    );

    let mut forged = ToolCall::new(support(), "refund", json!({"amount": 5}));
    forged.extensions.insert(ResumeTicket {
        interaction_id: "ia_00000000000000000000000000000000".into(),
        claim: None,
    });
    let r = send(&stack, forged).await;
    assert!(
        refusal(&r).reasons[0].contains("not issued by this inbox"),
        "{r:?}"
    );

    assert_eq!(tool.runs(), 0);
    assert_eq!(
        inbox.store().get(&id).await.unwrap().unwrap().state,
        State::Approved
    );
    let resumed = inbox.resume(&id, stack.clone()).await.unwrap();
    assert!(matches!(resumed.response, ToolResponse::Completed(_)));
    assert_eq!(tool.received()[0].input, json!({"amount": 5}));
}

#[tokio::test]
async fn r26_a_denied_held_call_is_never_sent() {
    let (_dir, _handle, inbox, tool, stack) = setup();
    let id = held(&stack, ToolCall::new(support(), "refund", json!({}))).await;
    inbox
        .store()
        .answer(&id, Answer::deny("k", "carol", Some("not this one".into())))
        .await
        .unwrap();
    match inbox.resume(&id, stack.clone()).await {
        Err(ResumeError::NotApproved {
            state: State::Denied,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    let mut ticket = ToolCall::new(support(), "refund", json!({}));
    ticket.extensions.insert(ResumeTicket {
        interaction_id: id.clone(),
        claim: None,
    });
    let r = send(&stack, ticket).await;
    assert_eq!(refusal(&r).code, RefusalCode::Rejected);
    assert!(
        refusal(&r).reasons[0].contains("denied by carol: not this one"),
        "{r:?}"
    );
    assert_eq!(tool.runs(), 0);
}

#[tokio::test]
async fn r26_a_held_call_nobody_answers_in_time_expires() {
    let dir = tempfile::tempdir().unwrap();
    let handle = GovernanceHandle::new(governance());
    let inbox =
        Inbox::new(sqlite(&dir.path().join("inbox.db"))).with_ttl(std::time::Duration::ZERO);
    let tool = Tool::default();
    let stack = stack(&handle, &inbox, &tool);
    let id = held(&stack, ToolCall::new(support(), "refund", json!({}))).await;
    let e = inbox
        .store()
        .answer(&id, Answer::approve("k", "alice"))
        .await
        .unwrap_err();
    assert_eq!(e, toolgate_inbox::AnswerError::Expired(id.clone()));
    assert_eq!(
        inbox.store().get(&id).await.unwrap().unwrap().state,
        State::Expired
    );
    let mut ticket = ToolCall::new(support(), "refund", json!({}));
    ticket.extensions.insert(ResumeTicket {
        interaction_id: id.clone(),
        claim: None,
    });
    let r = send(&stack, ticket).await;
    assert!(refusal(&r).reasons[0].contains("expired"), "{r:?}");
    assert_eq!(tool.runs(), 0);
}

#[tokio::test]
async fn r26_calls_that_do_not_ask_are_not_held() {
    let (_dir, _handle, inbox, tool, stack) = setup();
    let r = send(&stack, ToolCall::new(support(), "lookup", json!({"q": 1}))).await;
    assert!(matches!(r, ToolResponse::Completed(_)), "{r:?}");
    assert_eq!(tool.runs(), 1);
    assert!(inbox.store().list(None).await.unwrap().is_empty());
}
