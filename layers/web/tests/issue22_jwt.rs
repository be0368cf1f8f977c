//! The approval page takes identity-provider tokens (issue 22): two approvers from two groups
//! with different rights, signed in by JWT (one in `Authorization: Bearer`, one in the
//! trusted proxy's `X-Forwarded-Access-Token`), tokens signed by the tests' own keys.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;

use common::*;
use serde_json::{Value, json};
use toolgate_core::{AgentRef, ToolCall};
use toolgate_engine::config::{Format, load_str};
use toolgate_idp_kit::{RSA1_PUBLIC_PEM, SigningKey, claims, hs256, jwks, now};
use toolgate_inbox::State;

const ISS: &str = "https://idp.test/realms/people";
const AUD: &str = "toolgate-approvals";

/// The page's configuration: `carol` named (edits the policy), `payments` may answer
/// `refund`, `github-admins` github's calls.
fn governance(jwks_file: &std::path::Path) -> toolgate_engine::Governance {
    let mut c = config("token");
    c["approvers"] = json!({
        "auth": "jwt",
        "jwt": {"issuer": ISS, "audience": AUD, "jwks_file": jwks_file,
                "header": "X-Forwarded-Access-Token", "leeway_secs": 5},
        "people": [{"name": "carol", "edit_policy": true}],
        "groups": [
            {"group": "payments", "tools": [{"tool": "refund"}]},
            {"group": "github-admins", "tools": [{"server": "github"}]}
        ]
    });
    load_str(&c.to_string(), Format::Json).unwrap()
}

fn person(name: &str, groups: &[&str], extra: Value) -> Value {
    let mut c = claims(
        ISS,
        AUD,
        &format!("id-{name}"),
        json!({"preferred_username": name, "groups": groups}),
    );
    if let (Some(o), Value::Object(e)) = (c.as_object_mut(), extra) {
        o.extend(e);
    }
    c
}

fn as_bearer(s: &Server, token: &str) -> Client {
    let mut c = s.client();
    c.user = Some((String::from("authorization"), format!("Bearer {token}")));
    c
}

async fn answer(c: &Client, s: &Server, id: &str, key: &str) -> Reply {
    let rec = s.inbox.store().get(id).await.unwrap().unwrap();
    let csrf = c.csrf().await;
    c.post(
        &format!("/calls/{id}/answer"),
        &[
            ("csrf", &csrf),
            ("decision", "approve"),
            ("idempotency_key", key),
            ("input_hash", &rec.call.input_hash),
            ("definition_hash", &rec.call.definition_hash),
        ],
    )
    .await
}

#[tokio::test]
async fn issue22_two_approvers_from_two_groups_answer_what_their_groups_may() {
    let key = SigningKey::rsa1();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("jwks.json");
    std::fs::write(&file, jwks(&[&key]).to_string()).unwrap();
    let s = start_gov(governance(&file), std::time::Duration::from_millis(100)).await;
    let refund = s.hold_refund(json!({"order": 7})).await;
    let issue = s
        .hold(ToolCall::new(
            AgentRef::profile("support"),
            "github__create_issue",
            json!({"title": "t"}),
        ))
        .await;

    // dave (payments) by `Authorization: Bearer`; erin (github-admins) through the proxy.
    let dave = as_bearer(&s, &key.sign(&person("dave", &["payments"], json!({}))));
    let mut erin = s.client();
    erin.user = Some((
        String::from("x-forwarded-access-token"),
        key.sign(&person("erin", &["github-admins", "staff"], json!({}))),
    ));
    assert_eq!(dave.get("/").await.status, 200);
    let r = answer(&dave, &s, &issue, "d1").await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(
        r.body.contains("approver `dave` may not answer"),
        "{}",
        r.body
    );
    let r = answer(&erin, &s, &refund, "e1").await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(
        s.inbox.store().get(&refund).await.unwrap().unwrap().state,
        State::Pending
    );
    assert_eq!(answer(&dave, &s, &refund, "d2").await.status, 303);
    assert_eq!(answer(&erin, &s, &issue, "e2").await.status, 303);
    for (id, who) in [(&refund, "dave"), (&issue, "erin")] {
        let rec = s.inbox.store().get(id).await.unwrap().unwrap();
        assert_eq!(rec.state, State::Approved);
        assert_eq!(
            rec.approver.as_deref(),
            Some(who),
            "the claim's name is recorded"
        );
    }
    // Neither group may edit the policy; carol, named in `people`, may.
    let csrf = dave.csrf().await;
    let r = dave
        .post(
            "/policy/whole",
            &[("csrf", &csrf), ("document", "{}"), ("updated_at", "")],
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.body.contains("may not edit the policy"), "{}", r.body);
    let carol = as_bearer(&s, &key.sign(&person("carol", &[], json!({}))));
    let policy = carol.get("/policy").await;
    assert_eq!(policy.status, 200);
    assert!(!policy.body.contains("may not edit"), "{}", policy.body);
}

#[tokio::test]
async fn issue22_the_page_refuses_tokens_that_do_not_verify_or_name_no_approver() {
    let key = SigningKey::rsa1();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("jwks.json");
    std::fs::write(&file, jwks(&[&key]).to_string()).unwrap();
    let s = start_gov(governance(&file), std::time::Duration::from_millis(100)).await;
    let none = s.client().get("/").await;
    assert_eq!(none.status, 401, "{}", none.body);
    assert!(none.header("www-authenticate").starts_with("Bearer"));
    let cases = [
        (
            "expired",
            key.sign(&person("dave", &["payments"], json!({"exp": now() - 120}))),
            401,
            "expired",
        ),
        (
            "wrong aud",
            key.sign(&person("dave", &["payments"], json!({"aud": "mcp"}))),
            401,
            "audience",
        ),
        (
            "wrong iss",
            key.sign(&person(
                "dave",
                &["payments"],
                json!({"iss": "https://evil.test/"}),
            )),
            401,
            "issuer",
        ),
        (
            "HS256 with the public key",
            hs256(
                RSA1_PUBLIC_PEM.as_bytes(),
                "rsa-1",
                &person("dave", &["payments"], json!({})),
            ),
            401,
            "HS256",
        ),
        (
            "another key",
            SigningKey::rsa2()
                .with_kid("rsa-1")
                .sign(&person("dave", &["payments"], json!({}))),
            401,
            "signature",
        ),
        (
            "no approver",
            key.sign(&person("mallory", &["everyone"], json!({}))),
            403,
            "is no approver",
        ),
        (
            "no name claim",
            key.sign(&claims(ISS, AUD, "x", json!({"groups": ["payments"]}))),
            401,
            "preferred_username",
        ),
    ];
    for (what, token, status, why) in cases {
        let r = as_bearer(&s, &token).get("/").await;
        assert_eq!(r.status, status, "{what}: {}", r.body);
        assert!(r.body.contains(why), "{what}: {}", r.body);
    }
    // A key removed from the file: still taken until the page re-reads it (the page reads
    // its keys at start; `toolgate serve` restarts to re-read them).
    let _ = std::fs::remove_file(&file);
    assert_eq!(
        as_bearer(&s, &key.sign(&person("dave", &["payments"], json!({}))))
            .get("/")
            .await
            .status,
        200
    );
}

/// Issue 22, R47: an answer given with an identity-provider token is kept with the
/// approver's verified subject and issuer; the call's page and the history show them, and
/// the audit record of the call, sent after the answer, names them under `approval`.
#[tokio::test]
async fn issue22_r47_an_answer_by_jwt_records_the_approvers_subject_and_issuer() {
    use std::sync::Arc;
    use toolgate::audit::{AuditLayer, MemorySink};
    use tower::ServiceBuilder;

    let key = SigningKey::rsa1();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("jwks.json");
    std::fs::write(&file, jwks(&[&key]).to_string()).unwrap();
    let s = start_gov(governance(&file), std::time::Duration::from_millis(100)).await;
    let refund = s.hold_refund(json!({"order": 22})).await;
    let dave = as_bearer(&s, &key.sign(&person("dave", &["payments"], json!({}))));
    assert_eq!(answer(&dave, &s, &refund, "d22").await.status, 303);

    let rec = s.inbox.store().get(&refund).await.unwrap().unwrap();
    assert_eq!(rec.approver.as_deref(), Some("dave"));
    let p = rec
        .approver_principal
        .clone()
        .expect("R47: the principal is kept");
    assert_eq!((p.subject.as_str(), p.issuer.as_str()), ("id-dave", ISS));
    let shown = format!("id-dave ({ISS})");
    let one = dave.get(&format!("/calls/{refund}")).await;
    assert!(one.body.contains(&shown), "{}", one.body);
    let history = dave.get("/history").await;
    assert!(history.body.contains(&shown), "{}", history.body);

    // The call goes on: its audit record names who approved it, by name and principal.
    let sink = Arc::new(MemorySink::new());
    let audited = ServiceBuilder::new()
        .layer(AuditLayer::shared(sink.clone()))
        .service(s.stack.clone());
    s.inbox.resume(&refund, audited).await.unwrap();
    let lines = sink.lines();
    let record: Value = serde_json::from_str(lines.last().expect("a record")).unwrap();
    assert_eq!(record["approval"]["wait"], "approved", "{record}");
    assert_eq!(record["approval"]["approver"], "dave", "{record}");
    assert_eq!(
        record["approval"]["principal"],
        json!({"subject": "id-dave", "issuer": ISS}),
        "{record}"
    );
    assert_eq!(s.tool.runs(), 1);
}

/// Issue 22: a static-token approver's answer keeps the name only: no principal is made up.
#[tokio::test]
async fn issue22_a_static_token_approvers_answer_keeps_the_name_and_no_principal() {
    let s = start("token").await;
    let id = s.hold_refund(json!({"order": 23})).await;
    let c = signed_in(&s, ALICE).await;
    let rec = s.inbox.store().get(&id).await.unwrap().unwrap();
    let csrf = c.csrf().await;
    let r = c
        .post(
            &format!("/calls/{id}/answer"),
            &[
                ("csrf", &csrf),
                ("decision", "approve"),
                ("idempotency_key", "a23"),
                ("input_hash", &rec.call.input_hash),
                ("definition_hash", &rec.call.definition_hash),
            ],
        )
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let rec = s.inbox.store().get(&id).await.unwrap().unwrap();
    assert_eq!(rec.approver.as_deref(), Some("alice"));
    assert_eq!(rec.approver_principal, None);
    let one = c.get(&format!("/calls/{id}")).await;
    assert!(!one.body.contains("class=\"principal\""), "{}", one.body);
}

/// Issue 34 item 5: "Approve, and allow …" given with an identity-provider token records
/// the approver's subject and issuer with the approval, as a plain Approve does (one
/// function builds every answer of the page), and the page shows them.
#[tokio::test]
async fn issue34_a_grant_saved_by_jwt_records_the_approvers_subject_and_issuer() {
    let key = SigningKey::rsa1();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("jwks.json");
    std::fs::write(&file, jwks(&[&key]).to_string()).unwrap();
    let s = start_gov(governance(&file), std::time::Duration::from_millis(100)).await;
    s.handle.set_grants(s.inbox.store().grant_store().unwrap());
    let refund = s.hold_refund(json!({"order": 34})).await;
    // carol, named in `people` (a grant is given by a named approver), signs in by token.
    let carol = as_bearer(&s, &key.sign(&person("carol", &[], json!({}))));
    let page = carol.get(&format!("/calls/{refund}")).await;
    assert_eq!(page.status, 200, "{}", page.body);
    let r = post_grant(&carol, &refund, &grant_fields(&page.body, &[])).await;
    assert_eq!(r.status, 303, "{}", r.body);

    let rec = s.inbox.store().get(&refund).await.unwrap().unwrap();
    assert_eq!(rec.state, State::Approved);
    assert_eq!(rec.approver.as_deref(), Some("carol"));
    let p = rec
        .approver_principal
        .clone()
        .expect("the grant's approval keeps the principal");
    assert_eq!((p.subject.as_str(), p.issuer.as_str()), ("id-carol", ISS));
    let grants = s.inbox.store().grants().await.unwrap();
    assert_eq!(grants.len(), 1);
    assert_eq!(grants[0].grant.granted_by(), "carol");
    // The grant itself records who gave it, as the approval does (issue 34 item 5).
    let giver = grants[0]
        .principal
        .clone()
        .expect("the grant keeps its giver's principal");
    assert_eq!(
        (giver.subject.as_str(), giver.issuer.as_str()),
        ("id-carol", ISS)
    );
    let json = grants[0].to_json(toolgate_inbox::Timestamp::now());
    assert_eq!(
        json["granted_by_principal"]["subject"], "id-carol",
        "{json}"
    );
    let shown = format!("id-carol ({ISS})");
    let one = carol.get(&r.header("location")).await;
    assert!(one.body.contains(&shown), "{}", one.body);
    let history = carol.get("/history").await;
    assert!(history.body.contains(&shown), "{}", history.body);
}
