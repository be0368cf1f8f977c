//! Approve with edits (issue 24 item 3), over the API and on the card, against the real
//! server and a real SQLite inbox shared with a real gate: `may_edit` off by default, the
//! edited call decided again in full on the edited input (R38) and bound to its hash
//! (R35), both inputs and who edited kept in the inbox and in the audit record.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;

use std::convert::Infallible;

use common::*;
use serde_json::{Value, json};
use toolgate::ToolgateLayer;
use toolgate_core::{AgentRef, ToolCall, ToolOutput, ToolResponse};
use toolgate_inbox::State;
use tower::{ServiceBuilder, ServiceExt, service_fn};

const ALICE_KEY: &str = "tgk-alice-edit-0123";
const BOB_KEY: &str = "tgk-bob-edit-0123";

fn tweak(c: &mut Value, audit: &std::path::Path) {
    c["approvers"]["people"][0]["may_edit"] = json!(true);
    c["approvers"]["api_keys"] = json!([
        {"name": "alice-bot", "key_sha256": toolgate_web::hash_token(ALICE_KEY), "scopes": ["approvals"], "approver": "alice"},
        {"name": "bob-bot", "key_sha256": toolgate_web::hash_token(BOB_KEY), "scopes": ["approvals"], "approver": "bob"}
    ]);
    c["audit"] = json!({"file": audit, "include_input": true});
}

async fn post(s: &Server, key: &str, path: &str, body: Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{}{path}", s.base))
        .header("authorization", format!("Bearer {key}"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (
        status,
        serde_json::from_str(&r.text().await.unwrap()).unwrap_or(Value::Null),
    )
}

async fn get(s: &Server, key: &str, path: &str) -> Value {
    let r = reqwest::Client::new()
        .get(format!("{}{path}", s.base))
        .header("authorization", format!("Bearer {key}"))
        .send()
        .await
        .unwrap();
    serde_json::from_str(&r.text().await.unwrap()).unwrap()
}

/// The composite stack (audit included) over the server's inbox; the tool records inputs.
fn full_stack(
    s: &Server,
) -> (
    impl tower::Service<ToolCall, Response = ToolResponse, Error = Infallible, Future: Send>
    + Clone
    + Send,
    std::sync::Arc<std::sync::Mutex<Vec<Value>>>,
) {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let tool_seen = seen.clone();
    let stack = ServiceBuilder::new()
        .layer(
            ToolgateLayer::builder(s.handle.clone())
                .channel(s.inbox.channel())
                .build()
                .unwrap(),
        )
        .service(service_fn(move |c: ToolCall| {
            tool_seen.lock().unwrap().push(c.input.clone());
            async { Ok::<_, Infallible>(ToolResponse::Completed(ToolOutput::new(json!("ok")))) }
        }));
    (stack, seen)
}

async fn hold(
    stack: &mut (impl tower::Service<ToolCall, Response = ToolResponse, Error = Infallible> + Clone),
    input: Value,
) -> String {
    let r = stack
        .clone()
        .oneshot(ToolCall::new(AgentRef::profile("support"), "refund", input))
        .await
        .unwrap();
    match r {
        ToolResponse::Held(h) => h.interaction_id,
        other => panic!("expected a held call, got {other:?}"),
    }
}

#[tokio::test]
async fn issue24_r38_an_edited_approval_is_sent_with_the_edited_input_and_audited_with_both() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let s = start_gov(
        governance_tweaked("token", |c| tweak(c, &audit)),
        std::time::Duration::from_millis(100),
    )
    .await;
    let (mut stack, seen) = full_stack(&s);
    let id = hold(&mut stack, json!({"order": 7, "amount": 500})).await;
    let rec = s.inbox.store().get(&id).await.unwrap().unwrap();
    let shown =
        json!({"inputHash": rec.call.input_hash, "definitionHash": rec.call.definition_hash});

    let edited = json!({"order": 7, "amount": 50});
    let mut body = shown.clone();
    body["approved"] = json!(true);
    body["input"] = edited.clone();
    body["idempotencyKey"] = json!("e1");
    let (status, a) = post(
        &s,
        ALICE_KEY,
        &format!("/v1/interactions/{id}/answer"),
        body.clone(),
    )
    .await;
    assert_eq!(status, 200, "{a}");
    assert_eq!(a["approver"], "alice");
    // Bound to the edited input's hash (R35); the original kept beside it.
    let now = s.inbox.store().get(&id).await.unwrap().unwrap();
    assert_eq!(now.state, State::Approved);
    assert_eq!(now.input().unwrap(), edited);
    assert_ne!(now.call.input_hash, rec.call.input_hash);
    let call = get(&s, ALICE_KEY, &format!("/v1/calls/{id}")).await;
    assert_eq!(call["input"], edited);
    assert_eq!(
        call["edit"]["originalInput"],
        json!({"order": 7, "amount": 500})
    );
    assert_eq!(
        call["edit"]["originalInputHash"],
        rec.call.input_hash.as_str()
    );
    assert_eq!(call["edit"]["editedBy"], "alice");
    // The same key and the same edit: replayed; the same key with another edit: refused.
    let (status, a) = post(
        &s,
        ALICE_KEY,
        &format!("/v1/interactions/{id}/answer"),
        body.clone(),
    )
    .await;
    assert_eq!((status, a["replayed"].clone()), (200, json!(true)), "{a}");
    body["input"] = json!({"order": 7, "amount": 5});
    let (status, _) = post(
        &s,
        ALICE_KEY,
        &format!("/v1/interactions/{id}/answer"),
        body,
    )
    .await;
    assert_eq!(status, 409);

    // Sent once, with the edited input, through every check again (R38).
    let resumed = s.inbox.resume(&id, stack.clone()).await.unwrap();
    assert!(
        matches!(resumed.response, ToolResponse::Completed(_)),
        "{:?}",
        resumed.response
    );
    assert_eq!(*seen.lock().unwrap(), vec![edited.clone()]);
    // The audit record of the send keeps both inputs and who edited.
    let text = std::fs::read_to_string(&audit).unwrap();
    let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(last["input"], edited, "{last}");
    assert_eq!(
        last["edit"]["original_input"],
        json!({"order": 7, "amount": 500}),
        "{last}"
    );
    assert_eq!(last["edit"]["edited_by"], "alice");
    assert_eq!(last["approval"]["approver"], "alice");
    // The agent calling again with the input it sent repeats the edited call (issue 35,
    // R26): it is told, once, that the call was sent, and nothing new is held or sent; the
    // repeat after that asks afresh.
    let original = || {
        ToolCall::new(
            AgentRef::profile("support"),
            "refund",
            json!({"order": 7, "amount": 500}),
        )
    };
    let again = stack.clone().oneshot(original()).await.unwrap();
    match &again {
        ToolResponse::Refused(r) => assert!(
            r.reasons[0].contains(&format!(
                "held call `{id}` with this input was already sent"
            )),
            "{again:?}"
        ),
        other => panic!("a repeat of the sent edited call is told so, got {other:?}"),
    }
    let third = stack.clone().oneshot(original()).await.unwrap();
    assert!(matches!(third, ToolResponse::Held(_)), "{third:?}");
    assert_eq!(seen.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn issue24_r38_an_edited_input_that_a_rule_refuses_is_never_sent() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let s = start_gov(
        governance_tweaked("token", |c| tweak(c, &audit)),
        std::time::Duration::from_millis(100),
    )
    .await;
    toolgate_inbox::put_policy_text(
        &**s.inbox.store(),
        r#"{"rules": [{"effect": "deny", "tool": "refund", "when": {"amount": {"gt": 1000}}, "reason": "too large"}]}"#,
        &toolgate_engine::policy::Limits::default(),
    )
    .await
    .unwrap();
    s.reload_policy().await;
    let (mut stack, seen) = full_stack(&s);
    let id = hold(&mut stack, json!({"amount": 10})).await;
    let rec = s.inbox.store().get(&id).await.unwrap().unwrap();
    let (status, a) = post(
        &s,
        ALICE_KEY,
        &format!("/v1/interactions/{id}/answer"),
        json!({"approved": true, "inputHash": rec.call.input_hash, "definitionHash": rec.call.definition_hash, "input": {"amount": 5000}}),
    )
    .await;
    assert_eq!(status, 200, "{a}");
    let resumed = s.inbox.resume(&id, stack.clone()).await.unwrap();
    match &resumed.response {
        ToolResponse::Refused(r) => {
            assert!(r.reasons.iter().any(|x| x.contains("too large")), "{r:?}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(seen.lock().unwrap().is_empty(), "never sent");
    assert_eq!(resumed.recorded, Some(State::Failed));
}

#[tokio::test]
async fn issue24_may_edit_is_off_by_default_and_an_edit_is_bound_to_what_was_shown() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let s = start_gov(
        governance_tweaked("token", |c| tweak(c, &audit)),
        std::time::Duration::from_millis(100),
    )
    .await;
    let issue = s
        .hold(ToolCall::new(
            AgentRef::profile("support"),
            "github__create_issue",
            json!({"title": "a"}),
        ))
        .await;
    let rec = s.inbox.store().get(&issue).await.unwrap().unwrap();
    let body = json!({"approved": true, "inputHash": rec.call.input_hash, "definitionHash": rec.call.definition_hash, "input": {"title": "b"}});
    // Bob may answer github's calls, but not edit them.
    let (status, a) = post(
        &s,
        BOB_KEY,
        &format!("/v1/interactions/{issue}/answer"),
        body.clone(),
    )
    .await;
    assert_eq!(status, 403, "{a}");
    assert!(a["message"].as_str().unwrap().contains("may_edit"), "{a}");
    // An edit of another input than the one shown (R35), or not an object: refused.
    let mut stale = body.clone();
    stale["inputHash"] = json!("sha256:00");
    let (status, _) = post(
        &s,
        ALICE_KEY,
        &format!("/v1/interactions/{issue}/answer"),
        stale,
    )
    .await;
    assert_eq!(status, 409);
    let mut not_object = body.clone();
    not_object["input"] = json!([1]);
    let (status, _) = post(
        &s,
        ALICE_KEY,
        &format!("/v1/interactions/{issue}/answer"),
        not_object,
    )
    .await;
    assert_eq!(status, 400);
    let (status, _) = post(
        &s,
        ALICE_KEY,
        &format!("/v1/interactions/{issue}/answer"),
        json!({"approved": false, "input": {"title": "b"}}),
    )
    .await;
    assert_eq!(status, 400, "an edit applies only to an approval");
    assert_eq!(
        s.inbox.store().get(&issue).await.unwrap().unwrap().state,
        State::Pending
    );

    // On the card: alice has the editor, bob does not.
    let alice = signed_in(&s, ALICE).await;
    let page = alice.get(&format!("/calls/{issue}")).await;
    assert!(
        page.body.contains(&format!("id=\"edit-input-{issue}\"")),
        "{}",
        page.body
    );
    let bob = signed_in(&s, BOB).await;
    let page = bob.get(&format!("/calls/{issue}")).await;
    assert!(!page.body.contains("edit-input-"));
    // Bob posting the form anyway is refused.
    let csrf = bob.csrf().await;
    let form = [
        ("csrf", csrf.as_str()),
        ("input_hash", rec.call.input_hash.as_str()),
        ("definition_hash", rec.call.definition_hash.as_str()),
        ("idempotency_key", "f1"),
        ("input", "{\"title\": \"b\"}"),
    ];
    let r = bob
        .post(&format!("/calls/{issue}/approve-edited"), &form)
        .await;
    assert_eq!(r.status, 403, "{}", r.body);
    // Alice's malformed JSON is refused; her edit is recorded.
    let csrf = alice.csrf().await;
    let mut form = form;
    form[0].1 = csrf.as_str();
    let mut broken = form;
    broken[4].1 = "{not json";
    let r = alice
        .post(&format!("/calls/{issue}/approve-edited"), &broken)
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    let r = alice
        .post(&format!("/calls/{issue}/approve-edited"), &form)
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let now = s.inbox.store().get(&issue).await.unwrap().unwrap();
    assert_eq!(now.state, State::Approved);
    assert_eq!(now.input().unwrap(), json!({"title": "b"}));
    let edit = s.inbox.store().edit_of(&issue).await.unwrap().unwrap();
    assert_eq!(edit.edited_by, "alice");
    assert_eq!(edit.original_input().unwrap(), json!({"title": "a"}));
    // Issue 35: the card shows the edit beside the input the agent sent.
    let page = bob.get(&format!("/calls/{issue}")).await;
    assert!(
        page.body.contains("Input, as edited by alice and approved"),
        "{}",
        page.body
    );
    let original = page
        .body
        .split("<pre class=\"original\">")
        .nth(1)
        .and_then(|rest| rest.split("</pre>").next())
        .unwrap_or_else(|| panic!("no original input on the card: {}", page.body));
    assert!(
        original.contains("&quot;a&quot;") || original.contains("\"a\""),
        "{original}"
    );
    let shown = page
        .body
        .split("<pre class=\"input\">")
        .nth(1)
        .and_then(|rest| rest.split("</pre>").next())
        .unwrap();
    assert!(
        shown.contains("&quot;b&quot;") || shown.contains("\"b\""),
        "{shown}"
    );
}
