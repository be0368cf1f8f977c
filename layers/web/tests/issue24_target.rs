//! The execution target (issue 24 item 4, seed 000): a declaration names the fields of the
//! input (or the host's value on the call) that make up where the call runs; the inbox keeps
//! what the gate captured, and the card, the API and the text a person reads show it first.
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
use toolgate_core::{AgentRef, ExecutionTarget, ToolCall};

#[tokio::test]
async fn issue24_the_execution_target_is_captured_kept_and_shown_first() {
    let gov = governance_tweaked("token", |c| {
        c["tools"].as_array_mut().unwrap().push(json!({
            "toolset": "shell", "name": "run", "approval": "require_approval",
            "target": {"host": "extension", "working_directory": "input.cwd", "sandbox": "input.opts.sandbox"}
        }));
        c["agents"][0]["allowed_tools"]
            .as_array_mut()
            .unwrap()
            .push(json!("shell__run"));
    });
    let s = start_gov(gov, std::time::Duration::from_millis(100)).await;
    let mut call = ToolCall::new(
        AgentRef::profile("support"),
        "shell__run",
        json!({"cmd": "make deploy", "cwd": "/srv/app\u{202e}", "opts": {}}),
    );
    call.extensions.insert(ExecutionTarget {
        host: Some("build-7".into()),
        ..Default::default()
    });
    let id = s.hold(call).await;
    // The inbox keeps what the gate captured (the host's value included).
    let rec = s.inbox.store().get(&id).await.unwrap().unwrap();
    let t = rec.call.target.clone().unwrap();
    assert_eq!(t.host.as_deref(), Some("build-7"));
    assert_eq!(t.working_directory.as_deref(), Some("/srv/app\u{202e}"));
    assert_eq!(t.sandbox.as_deref(), Some("(not given)"));
    // The text of the terminal prompt and the elicitation starts with it, hidden
    // characters marked.
    let text = rec.interaction().render();
    assert!(
        text.starts_with("Runs on: host `build-7` · working directory `/srv/app⟦U+202E⟧` · sandbox `(not given)`\n"),
        "{text}"
    );
    // The card shows it before the prompt.
    let alice = signed_in(&s, ALICE).await;
    let page = alice.get(&format!("/calls/{id}")).await;
    let at = page
        .body
        .find(&format!("id=\"target-{id}\""))
        .expect("the target on the card");
    let prompt = page.body.find("class=\"prompt\"").unwrap();
    assert!(at < prompt, "the target comes first");
    assert!(
        page.body.contains("host <code>build-7</code>"),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("/srv/app⟦U+202E⟧"),
        "hidden characters marked"
    );
    // A call to a tool whose declaration names no target shows none.
    let refund = s.hold_refund(json!({"order": 1})).await;
    let page = alice.get(&format!("/calls/{refund}")).await;
    assert!(!page.body.contains("class=\"target\""));
}
