//! R24 on the approval page: when two records share a qualified name, an approver whose
//! selectors cover only one of them may not answer a held call of that name (the card says
//! so and the answer is refused, nothing changed); one whose rights cover every record may.
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
use toolgate_core::{AgentRef, ToolCall};
use toolgate_inbox::State;

#[tokio::test]
async fn r24_an_approver_for_one_record_of_a_collision_may_not_answer_on_the_page() {
    // A local toolset `github` with a `create_issue` collides with the MCP server's tool;
    // bob's selector (`server: github`) covers only the MCP record.
    let gov = governance_tweaked("token", |c| {
        c["tools"]
            .as_array_mut()
            .unwrap()
            .push(json!({"toolset": "github", "name": "create_issue"}));
    });
    let s = start_gov(gov, std::time::Duration::from_millis(100)).await;
    let issue = s
        .hold(ToolCall::new(
            AgentRef::profile("support"),
            "github__create_issue",
            json!({"title": "t"}),
        ))
        .await;
    let rec = s.inbox.store().get(&issue).await.unwrap().unwrap();
    assert_eq!(rec.call.identities.len(), 2, "{:?}", rec.call.identities);

    let bob = signed_in(&s, BOB).await;
    let page = bob.get("/").await.body;
    assert!(
        !page.contains(&format!("id=\"approve-{issue}\"")),
        "bob is offered no answer"
    );
    let csrf = bob.csrf().await;
    let r = bob
        .post(
            &format!("/calls/{issue}/answer"),
            &[
                ("csrf", &csrf),
                ("decision", "approve"),
                ("idempotency_key", "b1"),
                ("input_hash", &rec.call.input_hash),
                ("definition_hash", &rec.call.definition_hash),
            ],
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(
        r.body.contains("approver `bob` may not answer"),
        "{}",
        r.body
    );
    assert_eq!(
        s.inbox.store().get(&issue).await.unwrap().unwrap().state,
        State::Pending
    );
    assert_eq!(s.tool.runs(), 0);

    // alice may answer every call, so this one too.
    let alice = signed_in(&s, ALICE).await;
    let csrf = alice.csrf().await;
    let r = alice
        .post(
            &format!("/calls/{issue}/answer"),
            &[
                ("csrf", &csrf),
                ("decision", "approve"),
                ("idempotency_key", "a1"),
                ("input_hash", &rec.call.input_hash),
                ("definition_hash", &rec.call.definition_hash),
            ],
        )
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let rec = s.inbox.store().get(&issue).await.unwrap().unwrap();
    assert_eq!(rec.state, State::Approved);
    assert_eq!(rec.approver.as_deref(), Some("alice"));
}
