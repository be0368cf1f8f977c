//! Issue 24 in a real browser (Debian's `chromium` through `chromedriver`): approve with
//! edits on a card — an approver with `may_edit` edits the JSON input, approves, and the call
//! sent has the edited input; JSON that does not read, and an input the tool's schema
//! refuses, are refused on the card with a message and nothing is answered — and the
//! execution target line shown first on a shell card. Screenshots go to
//! `target/screenshots/`.
//!
//! Without `chromium` and `chromedriver` the test skips loudly, except under `CI=true`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

#[path = "support/browser.rs"]
mod browser_kit;
mod common;

use std::time::Duration;

use browser_kit::*;
use common::*;
use fantoccini::{Client, Locator};
use serde_json::{Value, json};
use toolgate_core::{
    AgentRef, ApprovalMode, ExecutionTarget, ToolCall, ToolDeclaration, ToolIdentity, ToolResponse,
};
use toolgate_inbox::State;

async fn js(c: &Client, script: &str) -> Value {
    c.execute(script, vec![]).await.unwrap()
}

/// Replaces the text of the card's editor with `text` and presses its approve button.
async fn edit_and_approve(c: &Client, id: &str, text: &str) {
    let area = wait_for(c, &format!("#edit-input-{id}")).await;
    area.clear().await.unwrap();
    area.send_keys(text).await.unwrap();
    click(c, &format!("#edit-approve-{id}")).await;
}

/// The configuration of the page tests, with alice allowed to edit, a `payout` tool whose
/// declaration has an input schema, and a shell tool whose target is the host's value and
/// the input's `cwd`.
fn governance_for_edits() -> toolgate_engine::Governance {
    let gov = governance_tweaked("token", |c| {
        c["approvers"]["people"][0]["may_edit"] = json!(true);
        let tools = c["tools"].as_array_mut().unwrap();
        tools.push(json!({"kind": "http", "name": "payout", "approval": "require_approval"}));
        tools.push(json!({
            "toolset": "shell", "name": "run", "approval": "require_approval",
            "target": {"host": "extension", "working_directory": "input.cwd"}
        }));
        let allowed = c["agents"][0]["allowed_tools"].as_array_mut().unwrap();
        allowed.push(json!("payout"));
        allowed.push(json!("shell__run"));
    });
    // The schema, as an MCP server's listing or a host's declaration gives it.
    let mut payout =
        ToolDeclaration::new(ToolIdentity::http("payout")).approval(ApprovalMode::RequireApproval);
    payout.input_schema = Some(json!({
        "type": "object", "required": ["amount"], "additionalProperties": false,
        "properties": {"amount": {"type": "integer"}, "note": {"type": "string"}}
    }));
    gov.to_builder()
        .remove_tool(&ToolIdentity::http("payout"))
        .tool(payout)
        .build()
        .unwrap()
}

async fn state_of(s: &Server, id: &str) -> State {
    s.inbox.store().get(id).await.unwrap().unwrap().state
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_issue24_edit_on_the_card_and_the_target_line_first() {
    let Some((driver, binary)) =
        chromedriver_or_skip("browser_issue24_edit_on_the_card_and_the_target_line_first")
    else {
        return;
    };
    let s = start_gov(governance_for_edits(), Duration::from_millis(100)).await;
    let payout = s
        .hold(ToolCall::new(
            AgentRef::profile("support"),
            "payout",
            json!({"amount": 500, "note": "order 7"}),
        ))
        .await;
    let mut shell = ToolCall::new(
        AgentRef::profile("support"),
        "shell__run",
        json!({"cmd": "make deploy", "cwd": "/srv/app"}),
    );
    shell.extensions.insert(ExecutionTarget {
        host: Some("build-7".into()),
        ..Default::default()
    });
    let shell = s.hold(shell).await;

    let c = browser(&driver, &binary).await;
    c.goto(&format!("{}/login", s.base)).await.unwrap();
    wait_for(&c, "#token").await.send_keys(ALICE).await.unwrap();
    click(&c, "#sign-in").await;
    assert_eq!(text(&c, "#who").await, "alice");
    wait_for(&c, &format!("#card-{payout}")).await;

    // The execution target is the card's first line, before the prompt.
    let target = text(&c, &format!("#target-{shell}")).await;
    assert!(target.starts_with("Runs on"), "{target}");
    assert!(target.contains("host build-7"), "{target}");
    assert!(target.contains("working directory /srv/app"), "{target}");
    let first = js(
        &c,
        &format!(
            "const card = document.getElementById('card-{shell}'); \
             return [card.firstElementChild.id, \
             !!(card.querySelector('.target').compareDocumentPosition(card.querySelector('h3.prompt')) & Node.DOCUMENT_POSITION_FOLLOWING)]"
        ),
    )
    .await;
    assert_eq!(
        first,
        json!([format!("target-{shell}"), true]),
        "seed 000: the target is shown first"
    );
    let none = c
        .find_all(Locator::Css(&format!("#card-{payout} .target")))
        .await
        .unwrap();
    assert!(none.is_empty(), "a tool with no target shows none");
    shot(&c, "issue24-target-first.png").await;

    // The editor opens on the card with the input as held.
    click(&c, &format!("#edit-open-{payout}")).await;
    let area = wait_for(&c, &format!("#edit-input-{payout}")).await;
    let held: Value = serde_json::from_str(&area.prop("value").await.unwrap().unwrap()).unwrap();
    assert_eq!(held, json!({"amount": 500, "note": "order 7"}));

    // JSON that does not read: refused on the card, nothing sent.
    edit_and_approve(&c, &payout, r#"{"amount": 50,"#).await;
    let msg = text_when(&c, &format!("#edit-error-{payout}"), |t| !t.is_empty()).await;
    assert!(msg.contains("not JSON"), "{msg}");
    assert_eq!(
        js(
            &c,
            &format!(
                "return document.getElementById('edit-input-{payout}').getAttribute('aria-invalid')"
            )
        )
        .await,
        json!("true")
    );
    shot(&c, "issue24-edit-bad-json.png").await;
    // Not an object.
    edit_and_approve(&c, &payout, "[50]").await;
    let msg = text_when(&c, &format!("#edit-error-{payout}"), |t| {
        t.contains("object")
    })
    .await;
    assert!(msg.contains("must be a JSON object"), "{msg}");
    assert_eq!(state_of(&s, &payout).await, State::Pending);

    // An input the tool's schema refuses: the server's refusal, on the card, naming the field.
    edit_and_approve(&c, &payout, r#"{"amount": "fifty"}"#).await;
    let msg = text_when(&c, &format!("#edit-error-{payout}"), |t| {
        t.contains("schema")
    })
    .await;
    assert!(msg.contains("`input.amount`"), "{msg}");
    edit_and_approve(&c, &payout, r#"{"amount": 50, "to": "elsewhere"}"#).await;
    let msg = text_when(&c, &format!("#edit-error-{payout}"), |t| {
        t.contains("`input.to`")
    })
    .await;
    assert!(msg.contains("`input.to`"), "{msg}");
    assert!(
        c.current_url().await.unwrap().path() == "/",
        "still on the list: the card keeps the person's text"
    );
    assert_eq!(state_of(&s, &payout).await, State::Pending);
    assert!(
        s.inbox.store().edit_of(&payout).await.unwrap().is_none(),
        "nothing was answered"
    );
    shot(&c, "issue24-edit-schema.png").await;

    // A valid edit: approved with it, the card leaves with a confirmation.
    edit_and_approve(&c, &payout, r#"{"amount": 50, "note": "order 7, partial"}"#).await;
    let ok = text_when(&c, "#toast-text", |t| t.starts_with("Approved")).await;
    assert!(ok.contains("edited input"), "{ok}");
    shot(&c, "issue24-edit-approved.png").await;
    let rec = s.inbox.store().get(&payout).await.unwrap().unwrap();
    assert_eq!(rec.state, State::Approved);
    assert_eq!(rec.approver.as_deref(), Some("alice"));
    let edited = json!({"amount": 50, "note": "order 7, partial"});
    assert_eq!(rec.input().unwrap(), edited);
    let kept = s.inbox.store().edit_of(&payout).await.unwrap().unwrap();
    assert_eq!(
        kept.original_input().unwrap(),
        json!({"amount": 500, "note": "order 7"})
    );
    assert_eq!(kept.edited_by, "alice");
    let gone = c
        .find_all(Locator::Css(&format!("#card-{payout}")))
        .await
        .unwrap();
    assert!(gone.is_empty(), "the approved card left the list");

    // The call sent has the edited input (decided again in full on it, R38).
    let sent = s.inbox.resume(&payout, s.stack.clone()).await.unwrap();
    assert!(
        matches!(sent.response, ToolResponse::Completed(_)),
        "{:?}",
        sent.response
    );
    assert_eq!(*s.tool.received.lock().unwrap(), vec![edited]);
    assert_eq!(s.tool.runs(), 1);
    assert_eq!(state_of(&s, &shell).await, State::Pending);
}
