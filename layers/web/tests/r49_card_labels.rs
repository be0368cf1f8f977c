//! Issue 37 item 3 (R49) on the page: a held call's card shows what its session had already
//! done when the call was asked about ("this session has read: private") beside the reasons,
//! so the person sees why a rule on session labels matched; a session that read nothing
//! labelled says so, and a policy that reads no labels shows no such line.
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
use toolgate_core::{AgentRef, ToolCall, ToolResponse};

fn in_session(tool: &str, session: &str) -> ToolCall {
    // One order per session: the same input again would be a repeat of the first (R38).
    let order = if session == "s1" { 7 } else { 8 };
    ToolCall::new(AgentRef::profile("support"), tool, json!({"order": order}))
        .in_turn(session, "t1")
}

#[tokio::test]
async fn r49_a_card_shows_what_its_session_had_read_when_it_was_asked() {
    let gov = governance_tweaked("token", |c| {
        c["tools"][1]["labels"] = json!(["private"]);
        c["policy"] = json!({"rules": [{"effect": "ask", "tool": "refund", "session_labels": ["private"],
            "reason": "this session read the customer's private data"}]});
    });
    let s = start_gov(gov, std::time::Duration::from_millis(100)).await;
    let c = signed_in(&s, ALICE).await;
    // s1 reads private data, then a refund is asked about.
    assert!(matches!(
        s.send(in_session("lookup", "s1")).await,
        ToolResponse::Completed(_)
    ));
    let asked = s.hold(in_session("refund", "s1")).await;
    let page = c.get(&format!("/calls/{asked}")).await;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains(
            "<dt>Labels</dt><dd class=\"labels\">this session has read: private; the tool carries: nothing labelled</dd>"
        ),
        "{}",
        page.body
    );
    assert!(page.body.contains("this session read the customer"));
    // s2 read nothing labelled: the refund is asked by its own declaration only, and the
    // card says what the session had read — nothing labelled.
    let fresh = s.hold(in_session("refund", "s2")).await;
    let page = c.get(&format!("/calls/{fresh}")).await;
    assert!(
        page.body
            .contains("this session has read: nothing labelled"),
        "{}",
        page.body
    );
    // The list's cards show it too.
    let list = c.get("/").await;
    assert!(
        list.body.contains("this session has read: private"),
        "{}",
        list.body
    );
}

#[tokio::test]
async fn r49_a_policy_that_reads_no_labels_shows_no_labels_line() {
    let s = start("token").await;
    let c = signed_in(&s, ALICE).await;
    let id = s.hold(in_session("refund", "s1")).await;
    let page = c.get(&format!("/calls/{id}")).await;
    assert_eq!(page.status, 200);
    assert!(!page.body.contains("<dt>Labels</dt>"), "{}", page.body);
}
