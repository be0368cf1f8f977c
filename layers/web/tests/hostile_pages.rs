//! Every page kind rendered with hostile values: a tool's name, an input, an approver's name,
//! an agent, a session, a rule's and a denial's reason each holding `<script>`, an attribute
//! break-out (`"'><img …>`) and a right-to-left override (U+202E). Each page shows the markup
//! as text — no `<script` but the page's own script, no `<img` — and the override marked
//! `⟦U+202E⟧`, never raw in text a person reads.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use serde_json::json;
use toolgate::ToolgateLayer;
use toolgate_core::approval::ApprovalRequest;
use toolgate_core::{
    AgentRef, Ask, AskSource, CallId, ExecutionTarget, RunContext, RunMode, ToolCall, ToolIdentity,
    ToolOutput, ToolResponse, Turn,
};
use toolgate_inbox::{NewHeldCall, State, Timestamp};
use toolgate_web::hash_token;
use tower::{ServiceBuilder, ServiceExt, service_fn};

/// Markup a value must never inject, and the override it must show marked.
const SCRIPT: &str = "<script>alert(1)</script>";
const BREAK_OUT: &str = "\"'><img src=x onerror=1>";
const MARKED: &str = "⟦U+202E⟧";

/// `what` with the hostile tail: both markups and a right-to-left override.
fn hostile(what: &str) -> String {
    format!("{what}{SCRIPT}{BREAK_OUT}\u{202e}")
}

const MALLORY: &str = "mallory-token-0123456789";

/// The common configuration, an approver whose name is hostile (and who may edit the policy
/// and inputs), and an audit file for the policy preview.
fn governance(audit: &std::path::Path) -> toolgate_engine::Governance {
    governance_tweaked("token", |c| {
        c["audit"] = json!({"file": audit, "include_input": true});
        c["approvers"]["people"]
            .as_array_mut()
            .unwrap()
            .push(json!({
                "name": hostile("mallory"),
                "token_sha256": hash_token(MALLORY),
                "edit_policy": true,
                "may_edit": true,
            }));
    })
}

/// A held call put in the store as a gate would, every value of it hostile: the tool's name
/// and server, the subagent, every reason, the session and turn, the execution target, the
/// input. `approvals`: how many people must approve it.
fn hostile_call(approvals: u8) -> NewHeldCall {
    let input = json!({
        "note": hostile("note"),
        hostile("key"): [hostile("item"), 7],
    });
    let request = ApprovalRequest {
        interaction_id: toolgate_core::id::random_id("ia_").unwrap(),
        call_id: CallId::new("call-hostile"),
        tool: hostile("srv__tool"),
        identities: vec![ToolIdentity::mcp(hostile("srv"), hostile("tool"))],
        agent: AgentRef::subagent("support", hostile("sub")),
        input_hash: toolgate_engine::canon::input_hash(&input).unwrap(),
        input: Arc::new(input),
        literals: Default::default(),
        definition_hash: "sha256:definition-hostile".into(),
        asks: vec![
            Ask::new(AskSource::PolicyRule(0), hostile("rule reason")),
            Ask::new(AskSource::Posture, hostile("destructive posture")),
        ],
        run: RunContext {
            mode: RunMode::UseAgentPolicy,
            background: true,
        },
        turn: Some(Turn::new(hostile("session"), hostile("turn"))),
        ticket: None,
        target: Some(ExecutionTarget {
            host: Some(hostile("host")),
            working_directory: Some(hostile("/srv")),
            sandbox: None,
        }),
        approvals,
        labels: None,
    };
    NewHeldCall::from_request(&request, Timestamp::now(), Duration::from_secs(3600)).unwrap()
}

/// With `TOOLGATE_WEB_DUMP` set to a folder, writes each page there (to compare how the
/// pages render before and after a change).
fn dump(kind: &str, body: &str) {
    if let Ok(dir) = std::env::var("TOOLGATE_WEB_DUMP") {
        std::fs::write(format!("{dir}/{kind}.html"), body).unwrap();
    }
}

/// Two refunds recorded in the audit file by the composite stack, for the policy preview
/// to replay.
async fn record_refunds(s: &Server) {
    let stack = ServiceBuilder::new()
        .layer(
            ToolgateLayer::builder(s.handle.clone())
                .channel(s.inbox.channel())
                .build()
                .unwrap(),
        )
        .service(service_fn(|_c: ToolCall| async {
            Ok::<_, Infallible>(ToolResponse::Completed(ToolOutput::new(json!("ok"))))
        }));
    for amount in [50, 500] {
        let call = ToolCall::new(
            AgentRef::profile("support"),
            "refund",
            json!({"amount": amount}),
        );
        let r = stack.clone().oneshot(call).await.unwrap();
        assert!(matches!(r, ToolResponse::Held(_)), "{r:?}");
    }
}

/// Checks one page: the hostile markup is text, the override marked.
fn check(kind: &str, body: &str) {
    dump(kind, body);
    let own = body.matches("<script src=\"/static/app.js\"").count();
    assert!(own <= 1, "{kind}: {body}");
    assert_eq!(
        body.matches("<script").count(),
        own,
        "{kind}: only the page's own script: {body}"
    );
    assert!(!body.contains("<img"), "{kind}: {body}");
    assert!(body.contains(MARKED), "{kind}: the override marked: {body}");
    assert!(
        body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{kind}: the markup shown as text: {body}"
    );
}

#[tokio::test]
async fn every_page_kind_shows_hostile_values_as_text_with_hidden_characters_marked() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_gov(
        governance(&dir.path().join("audit.jsonl")),
        Duration::from_millis(100),
    )
    .await;
    let store = s.inbox.store();
    record_refunds(&s).await;
    // The sign-in page.
    let anon = s.client();
    let login = anon.get("/login").await;
    assert_eq!(login.status, 200, "{}", login.body);
    dump("login", &login.body);
    assert!(!login.body.contains("<img"));
    // A refusal naming a hostile id.
    let alice = signed_in(&s, ALICE).await;
    let m = signed_in(&s, MALLORY).await;
    let csrf = m.csrf().await;
    let refusal = m
        .get(&format!("/calls/{}", enc(&hostile("ia_nothing"))))
        .await;
    assert_eq!(refusal.status, 404, "{}", refusal.body);
    check("refusal", &refusal.body);

    // Held calls: one for one approval, one for two (R51), one to deny, and a refund whose
    // input is hostile, to grant from.
    let mut ids = Vec::new();
    for approvals in [1, 2, 1] {
        // A millisecond apart: the lists show them in one order.
        tokio::time::sleep(Duration::from_millis(3)).await;
        let call = hostile_call(approvals);
        ids.push(call.interaction_id.clone());
        store.hold(call).await.unwrap();
    }
    let [one_id, two_id, deny_id] = <[String; 3]>::try_from(ids).unwrap();
    let refund = s
        .hold(
            ToolCall::new(
                AgentRef::profile("support"),
                "refund",
                json!({"order": hostile("A-1"), "amount": 80}),
            )
            .in_turn(hostile("session"), "turn-1"),
        )
        .await;

    // Mallory approves the call that needs two approvals; denies one with a hostile reason.
    let rec = store.get(&two_id).await.unwrap().unwrap();
    let r = m
        .post(
            &format!("/calls/{two_id}/answer"),
            &[
                ("csrf", &csrf),
                ("decision", "approve"),
                ("idempotency_key", "k-two"),
                ("input_hash", &rec.call.input_hash),
                ("definition_hash", &rec.call.definition_hash),
            ],
        )
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let r = m
        .post(
            &format!("/calls/{deny_id}/answer"),
            &[
                ("csrf", &csrf),
                ("decision", "deny"),
                ("idempotency_key", "k-deny"),
                ("reason", &hostile("reason")),
            ],
        )
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(
        store.get(&deny_id).await.unwrap().unwrap().state,
        State::Denied
    );

    // The lists, as alice and as mallory, and the live part the script fetches.
    for (who, c) in [("alice", &alice), ("mallory", &m)] {
        check(&format!("pending-{who}"), &c.get("/").await.body);
        check(
            &format!("pending-filtered-{who}"),
            &c.get(&format!("/?q={}", enc(&format!("note{SCRIPT}"))))
                .await
                .body,
        );
        check(
            &format!("fragment-{who}"),
            &c.get("/?fragment=1").await.body,
        );
        check(&format!("history-{who}"), &c.get("/history").await.body);
    }
    // Each call's page: pending (with the grant and edit forms), needing a second approval,
    // denied.
    check(
        "call-pending",
        &alice.get(&format!("/calls/{one_id}")).await.body,
    );
    check(
        "call-two-alice",
        &alice.get(&format!("/calls/{two_id}")).await.body,
    );
    check(
        "call-two-mallory",
        &m.get(&format!("/calls/{two_id}")).await.body,
    );
    check(
        "call-denied",
        &m.get(&format!("/calls/{deny_id}")).await.body,
    );
    check(
        "call-refund",
        &m.get(&format!("/calls/{refund}")).await.body,
    );

    // A grant from the refund's card that leaves more open than offered: the check page,
    // then saved from it; the call's page after it, the Grants tab, the revoke step.
    let page = m.get(&format!("/calls/{refund}")).await.body;
    let fields = grant_fields(
        &page,
        &[("session", ""), ("reason", &hostile("grant reason"))],
    );
    let (check_page, saved) = post_grant_confirmed(&m, &refund, &fields).await;
    check("grant-check", &check_page.body);
    assert_eq!(saved.status, 303, "{}", saved.body);
    let after = saved.header("location");
    check("call-granted", &m.get(&after).await.body);
    let grants = m.get("/grants").await.body;
    check("grants", &grants);
    let gid = store.grants().await.unwrap()[0].grant.id().to_owned();
    check(
        "grant-revoke",
        &m.get(&format!("/grants/{gid}/revoke")).await.body,
    );
    let r = m
        .post(&format!("/grants/{gid}/revoke"), &[("csrf", &csrf)])
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    check("grants-revoked", &m.get(&r.header("location")).await.body);

    // The policy tab: a rule whose reason, agent and condition are hostile.
    let doc = json!({
        "default": "allow",
        "rules": [{
            "effect": "ask",
            "tool": "refund",
            "reason": hostile("rule"),
            "when": {"order": {"equals": hostile("order")}},
        }],
    });
    let r = m
        .post(
            "/policy/whole",
            &[
                ("csrf", &csrf),
                ("updated_at", ""),
                ("document", &doc.to_string()),
            ],
        )
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    check("policy", &m.get("/policy").await.body);
    check("policy-edit", &m.get("/policy?edit=0").await.body);
    check("policy-delete", &m.get("/policy?delete=0").await.body);
    let updated_at = store.get_policy().await.unwrap().unwrap().updated_at;
    // A rule the store refuses, its errors by field; and a preview.
    for (kind, preview) in [("policy-refused", None), ("policy-preview", Some("1"))] {
        let mut form = vec![
            ("csrf", csrf.as_str()),
            ("updated_at", updated_at.as_str()),
            ("index", "0"),
            ("effect", "deny"),
            ("tool", "refund"),
        ];
        let reason = hostile("new reason");
        let when = if preview.is_some() {
            json!({"amount": {"gt": 1}}).to_string()
        } else {
            json!({hostile("bad"): {"gt": hostile("x")}}).to_string()
        };
        form.push(("reason", &reason));
        form.push(("when", &when));
        if let Some(p) = preview {
            form.push(("preview", p));
        }
        let r = m.post("/policy/rule", &form).await;
        check(kind, &r.body);
    }

    // A bulk answer: denied with a hostile reason, and a selection refused whole.
    let rec = store.get(&one_id).await.unwrap().unwrap();
    let item = format!(
        "{one_id} {} {}",
        rec.call.input_hash, rec.call.definition_hash
    );
    let r = m
        .post(
            "/bulk",
            &[
                ("csrf", &csrf),
                ("idempotency_key", "k-bulk"),
                ("decision", "deny"),
                ("reason", &hostile("bulk")),
                ("item", &item),
            ],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    check("bulk", &r.body);
    let r = m
        .post(
            "/bulk",
            &[
                ("csrf", &csrf),
                ("idempotency_key", "k-bulk-2"),
                ("decision", "approve"),
                ("item", &format!("{} sha256:0 sha256:0", hostile("ia_x"))),
            ],
        )
        .await;
    check("bulk-refused", &r.body);
}
