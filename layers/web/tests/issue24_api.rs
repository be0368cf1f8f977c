//! The HTTP API on `toolgate serve` (issue 24, seed 002), against the real server on
//! 127.0.0.1:0 over a real SQLite inbox shared with a real gate: every route and status,
//! management keys and their scopes, R22 (every error with its path, 409 for an unreadable
//! stored policy), R35 (an approval carries the hashes it was shown), idempotent answers,
//! and identity-provider tokens.
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
use toolgate_core::{AgentRef, ToolCall, Turn};

const READ: &str = "tgk-read-0123456789";
const WRITE: &str = "tgk-write-0123456789";
const ALICE_KEY: &str = "tgk-alice-0123456789";
const BOB_KEY: &str = "tgk-bob-0123456789";

fn keys(c: &mut Value) {
    c["approvers"]["api_keys"] = json!([
        {"name": "reader", "key_sha256": toolgate_web::hash_token(READ), "scopes": ["policy:read"]},
        {"name": "ci", "key_sha256": toolgate_web::hash_token(WRITE), "scopes": ["policy:read", "policy:write"]},
        {"name": "alice-bot", "key_sha256": toolgate_web::hash_token(ALICE_KEY), "scopes": ["approvals"], "approver": "alice"},
        {"name": "bob-bot", "key_sha256": toolgate_web::hash_token(BOB_KEY), "scopes": ["approvals", "policy:read"], "approver": "bob"}
    ]);
}

async fn server() -> Server {
    start_gov(
        governance_tweaked("token", keys),
        std::time::Duration::from_millis(100),
    )
    .await
}

struct Api {
    http: reqwest::Client,
    base: String,
}

struct Got {
    status: u16,
    headers: reqwest::header::HeaderMap,
    json: Value,
}

impl Got {
    fn code(&self) -> &str {
        self.json["code"].as_str().unwrap_or("")
    }
}

impl Api {
    fn new(s: &Server) -> Self {
        Self {
            http: reqwest::Client::new(),
            base: s.base.clone(),
        }
    }

    async fn send(
        &self,
        method: &str,
        path: &str,
        key: Option<&str>,
        headers: &[(&str, &str)],
        body: Option<String>,
    ) -> Got {
        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut r = self.http.request(m, format!("{}{path}", self.base));
        if let Some(k) = key {
            r = r.header("authorization", format!("Bearer {k}"));
        }
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        if let Some(b) = body {
            r = r.header("content-type", "application/json").body(b);
        }
        let res = r.send().await.unwrap();
        let status = res.status().as_u16();
        let headers = res.headers().clone();
        let text = res.text().await.unwrap();
        let json = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Got {
            status,
            headers,
            json,
        }
    }

    async fn get(&self, path: &str, key: &str) -> Got {
        self.send("GET", path, Some(key), &[], None).await
    }

    async fn put_policy(&self, key: &str, doc: &Value, headers: &[(&str, &str)]) -> Got {
        self.send(
            "PUT",
            "/v1/tenant/tool-policy",
            Some(key),
            headers,
            Some(doc.to_string()),
        )
        .await
    }

    async fn answer(&self, key: &str, id: &str, body: Value) -> Got {
        self.send(
            "POST",
            &format!("/v1/interactions/{id}/answer"),
            Some(key),
            &[],
            Some(body.to_string()),
        )
        .await
    }
}

fn in_session(tool: &str, input: Value, session: &str) -> ToolCall {
    ToolCall::new(AgentRef::profile("support"), tool, input)
        .with_turn(Some(Turn::new(session, "t1")))
}

#[tokio::test]
async fn issue24_every_route_refuses_without_a_key_an_unknown_key_and_a_missing_scope() {
    let s = server().await;
    let api = Api::new(&s);
    let routes = [
        ("GET", "/v1/tenant/tool-policy"),
        ("PUT", "/v1/tenant/tool-policy"),
        ("GET", "/v1/sessions/s1/pending"),
        ("POST", "/v1/interactions/x/answer"),
        ("GET", "/v1/calls/x"),
    ];
    for (m, p) in routes {
        let none = api.send(m, p, None, &[], Some("{}".into())).await;
        assert_eq!(none.status, 401, "{m} {p}: {:?}", none.json);
        assert_eq!(none.code(), "unauthorized");
        assert_eq!(none.headers["www-authenticate"], "Bearer");
        let unknown = api
            .send(m, p, Some("not-a-key"), &[], Some("{}".into()))
            .await;
        assert_eq!(unknown.status, 401, "{m} {p}");
        // An approver's sign-in token is not a management key.
        let token = api.send(m, p, Some(ALICE), &[], Some("{}".into())).await;
        assert_eq!(token.status, 401, "{m} {p}");
    }
    // Scopes: a reader may not write or answer; an approvals key may not read the policy.
    let w = api.put_policy(READ, &json!({"rules": []}), &[]).await;
    assert_eq!((w.status, w.code()), (403, "forbidden"), "{:?}", w.json);
    assert!(
        w.json["message"]
            .as_str()
            .unwrap()
            .contains("`policy:write`")
    );
    assert_eq!(api.get("/v1/sessions/s1/pending", READ).await.status, 403);
    assert_eq!(api.get("/v1/calls/x", WRITE).await.status, 403);
    let a = api.answer(READ, "x", json!({"approved": false})).await;
    assert_eq!(a.status, 403);
    assert_eq!(
        api.get("/v1/tenant/tool-policy", ALICE_KEY).await.status,
        403
    );
    assert_eq!(api.get("/v1/tenant/tool-policy", BOB_KEY).await.status, 200);
    // Nothing was stored by any refused request.
    assert!(s.inbox.store().get_policy().await.unwrap().is_none());
}

#[tokio::test]
async fn issue24_r22_policy_get_and_put_round_trip_conditional_on_updated_at() {
    let s = server().await;
    let api = Api::new(&s);
    // Nothing stored: the empty policy.
    let g = api.get("/v1/tenant/tool-policy", READ).await;
    assert_eq!(g.status, 200);
    assert_eq!(
        g.json,
        json!({"default": "allow", "rules": [], "updatedAt": null})
    );

    let doc = json!({"rules": [
        {"effect": "ask", "agent": "support", "tool": "refund", "reason": "Refunds need a person"},
        {"effect": "deny", "kind": "http", "tool": "refund_*", "when": {"amount": {"gt": 10000}}}
    ]});
    let p = api.put_policy(WRITE, &doc, &[]).await;
    assert_eq!(p.status, 200, "{:?}", p.json);
    let first = p.json["updatedAt"].as_str().unwrap().to_owned();
    assert_eq!(p.headers["etag"], format!("\"{first}\""));
    let g = api.get("/v1/tenant/tool-policy", READ).await;
    assert_eq!(g.status, 200);
    assert_eq!(g.json["rules"], doc["rules"]);
    assert_eq!(g.json["updatedAt"], first.as_str());

    // What `get` answers, `put` takes back, conditional on its `updatedAt`.
    let etag = g.headers["etag"].to_str().unwrap().to_owned();
    let p = api.put_policy(WRITE, &g.json, &[("if-match", &etag)]).await;
    assert_eq!(p.status, 200, "{:?}", p.json);
    let second = p.json["updatedAt"].as_str().unwrap().to_owned();
    assert_ne!(first, second);
    // A put based on the first is stale now: 412, nothing saved.
    let stale = json!({"rules": []});
    let p = api.put_policy(WRITE, &stale, &[("if-match", &first)]).await;
    assert_eq!(
        (p.status, p.code()),
        (412, "precondition_failed"),
        "{:?}",
        p.json
    );
    // `If-None-Match: *` only saves when nothing is stored.
    let p = api
        .put_policy(WRITE, &stale, &[("if-none-match", "*")])
        .await;
    assert_eq!(p.status, 412, "{:?}", p.json);
    let p = api
        .put_policy(WRITE, &stale, &[("if-none-match", "x")])
        .await;
    assert_eq!((p.status, p.code()), (400, "invalid_request"));
    let g = api.get("/v1/tenant/tool-policy", READ).await;
    assert_eq!(g.json["updatedAt"], second.as_str());
    assert_eq!(g.json["rules"].as_array().unwrap().len(), 2);

    // 400 with every error and its path; nothing saved.
    let bad = json!({"rules": [
        {"effect": "maybe", "tool": "x"},
        {"effect": "ask", "tool": "github__create_issue"}
    ], "extra": 1});
    let p = api.put_policy(WRITE, &bad, &[]).await;
    assert_eq!(
        (p.status, p.code()),
        (400, "invalid_policy"),
        "{:?}",
        p.json
    );
    let paths: Vec<&str> = p.json["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    for want in ["rules[0].effect", "rules[1].tool", "extra"] {
        assert!(paths.contains(&want), "{want} not in {paths:?}");
    }
    let p = api
        .send(
            "PUT",
            "/v1/tenant/tool-policy",
            Some(WRITE),
            &[],
            Some("{not json".into()),
        )
        .await;
    assert_eq!(p.status, 400, "{:?}", p.json);
    assert_eq!(
        api.get("/v1/tenant/tool-policy", READ).await.json["updatedAt"],
        second.as_str()
    );
}

#[tokio::test]
async fn issue24_an_unreadable_stored_policy_is_409_request_rejected_until_put_again() {
    let s = server().await;
    let api = Api::new(&s);
    let p = api.put_policy(WRITE, &json!({"rules": []}), &[]).await;
    assert_eq!(p.status, 200);
    // A policy stored before the gate refused `server__tool` names (seed 002).
    let conn = rusqlite::Connection::open(&s.db).unwrap();
    conn.execute(
        "UPDATE stored_policy SET body = ?1",
        [r#"{"rules": [{"effect": "ask", "tool": "github__create_issue"}]}"#],
    )
    .unwrap();
    let g = api.get("/v1/tenant/tool-policy", READ).await;
    assert_eq!(
        (g.status, g.code()),
        (409, "request_rejected"),
        "{:?}",
        g.json
    );
    assert!(
        g.json["message"]
            .as_str()
            .unwrap()
            .contains("github__create_issue"),
        "{:?}",
        g.json
    );
    // Put again, it reads.
    let fixed = json!({"rules": [{"effect": "ask", "server": "github", "tool": "create_issue"}]});
    assert_eq!(api.put_policy(WRITE, &fixed, &[]).await.status, 200);
    let g = api.get("/v1/tenant/tool-policy", READ).await;
    assert_eq!(g.status, 200);
    assert_eq!(g.json["rules"], fixed["rules"]);
}

#[tokio::test]
async fn issue24_r43_pending_lists_a_sessions_open_interactions_within_the_approvers_rights() {
    let s = server().await;
    let api = Api::new(&s);
    let refund = s
        .hold(in_session("refund", json!({"order": 1}), "s1"))
        .await;
    // Held a few milliseconds apart: two calls of one millisecond tie on age, and a tie is
    // ordered by id, not by which was held first.
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let issue = s
        .hold(in_session(
            "github__create_issue",
            json!({"title": "t"}),
            "s1",
        ))
        .await;
    let _other = s
        .hold(in_session("refund", json!({"order": 2}), "s2"))
        .await;
    let p = api.get("/v1/sessions/s1/pending", ALICE_KEY).await;
    assert_eq!(p.status, 200, "{:?}", p.json);
    let ids: Vec<&str> = p.json["interactions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [refund.as_str(), issue.as_str()], "oldest first");
    let first = &p.json["interactions"][0];
    assert_eq!(first["prompt"], "Approve refund?");
    assert_eq!(first["tool"], "refund");
    assert_eq!(first["server"], Value::Null);
    assert_eq!(first["input"], json!({"order": 1}));
    assert!(first["inputHash"].as_str().unwrap().starts_with("sha256:"));
    assert_eq!(p.json["interactions"][1]["server"], "github");
    // Bob may answer only github's calls: only those are listed for his key.
    let p = api.get("/v1/sessions/s1/pending", BOB_KEY).await;
    let ids: Vec<&str> = p.json["interactions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [issue.as_str()]);
    // A session with nothing held.
    let p = api.get("/v1/sessions/nobody/pending", ALICE_KEY).await;
    assert_eq!(p.json["interactions"], json!([]));
}

#[tokio::test]
async fn issue24_r35_an_api_approval_carries_the_hashes_it_was_shown_and_is_idempotent_per_key() {
    let s = server().await;
    let api = Api::new(&s);
    let id = s.hold_refund(json!({"order": 42})).await;
    let rec = s.inbox.store().get(&id).await.unwrap().unwrap();
    let (ih, dh) = (
        rec.call.input_hash.clone(),
        rec.call.definition_hash.clone(),
    );

    let a = api.answer(ALICE_KEY, &id, json!({"approved": true})).await;
    assert_eq!(
        (a.status, a.code()),
        (400, "invalid_request"),
        "{:?}",
        a.json
    );
    assert!(a.json["message"].as_str().unwrap().contains("`inputHash`"));
    let a = api
        .answer(
            ALICE_KEY,
            &id,
            json!({"approved": true, "inputHash": "sha256:00", "definitionHash": dh}),
        )
        .await;
    assert_eq!((a.status, a.code()), (409, "not_as_shown"), "{:?}", a.json);
    assert!(a.json["message"].as_str().unwrap().contains("its input"));
    for bad in [
        json!({"approved": "yes"}),
        json!({}),
        json!({"approved": true, "inputHash": ih, "definitionHash": dh, "surprise": 1}),
        json!({"approved": false, "reason": 5}),
        json!({"approved": false, "idempotencyKey": " "}),
    ] {
        let a = api.answer(ALICE_KEY, &id, bad.clone()).await;
        assert_eq!(a.status, 400, "{bad}: {:?}", a.json);
    }
    let a = api
        .send(
            "POST",
            &format!("/v1/interactions/{id}/answer"),
            Some(ALICE_KEY),
            &[],
            Some("[1]".into()),
        )
        .await;
    assert_eq!(a.status, 400);
    assert_eq!(
        s.inbox.store().get(&id).await.unwrap().unwrap().state,
        toolgate_inbox::State::Pending
    );

    let ok =
        json!({"approved": true, "inputHash": ih, "definitionHash": dh, "idempotencyKey": "k1"});
    let a = api.answer(ALICE_KEY, &id, ok.clone()).await;
    assert_eq!(a.status, 200, "{:?}", a.json);
    assert_eq!(a.json["approved"], true);
    assert_eq!(a.json["approver"], "alice");
    assert_eq!(a.json["replayed"], false);
    // The same key again: the same answer, replayed.
    let a = api.answer(ALICE_KEY, &id, ok).await;
    assert_eq!(
        (a.status, a.json["replayed"].clone()),
        (200, json!(true)),
        "{:?}",
        a.json
    );
    // The same key the other way, or another answer: refused.
    let a = api
        .answer(
            ALICE_KEY,
            &id,
            json!({"approved": false, "idempotencyKey": "k1"}),
        )
        .await;
    assert_eq!(a.status, 409, "{:?}", a.json);
    let a = api.answer(ALICE_KEY, &id, json!({"approved": false})).await;
    assert_eq!(
        (a.status, a.code()),
        (409, "already_answered"),
        "{:?}",
        a.json
    );

    // The approved call is sent once, with the input shown.
    let resumed = s.inbox.resume(&id, s.stack.clone()).await.unwrap();
    assert!(matches!(
        resumed.response,
        toolgate_core::ToolResponse::Completed(_)
    ));
    assert_eq!(s.tool.runs(), 1);
    let c = api.get(&format!("/v1/calls/{id}"), ALICE_KEY).await;
    assert_eq!(c.status, 200, "{:?}", c.json);
    assert_eq!(c.json["state"], "done");
    assert_eq!(c.json["approver"], "alice");
    assert_eq!(c.json["result"]["outcome"], "completed");
    assert_eq!(c.json["open"], false);
}

#[tokio::test]
async fn issue24_r24_an_api_answer_is_checked_against_the_approvers_rights() {
    let s = server().await;
    let api = Api::new(&s);
    let refund = s.hold_refund(json!({"order": 3})).await;
    // Bob may not answer `refund`: 403, and he is not shown it.
    let a = api
        .answer(BOB_KEY, &refund, json!({"approved": false}))
        .await;
    assert_eq!((a.status, a.code()), (403, "forbidden"), "{:?}", a.json);
    assert_eq!(
        api.get(&format!("/v1/calls/{refund}"), BOB_KEY)
            .await
            .status,
        404
    );
    // An id the inbox did not issue.
    let a = api
        .answer(ALICE_KEY, "nope", json!({"approved": false}))
        .await;
    assert_eq!((a.status, a.code()), (404, "not_found"));
    assert_eq!(api.get("/v1/calls/nope", ALICE_KEY).await.status, 404);
    // A denial with a reason: recorded, shown on the call.
    let a = api
        .answer(
            ALICE_KEY,
            &refund,
            json!({"approved": false, "reason": "not today"}),
        )
        .await;
    assert_eq!(a.status, 200, "{:?}", a.json);
    let c = api.get(&format!("/v1/calls/{refund}"), ALICE_KEY).await;
    assert_eq!(c.json["state"], "denied");
    assert_eq!(c.json["answerReason"], "not today");
    assert_eq!(s.tool.runs(), 0);
}

#[tokio::test]
async fn issue24_the_openapi_document_is_served_and_each_operation_answers() {
    let s = server().await;
    let api = Api::new(&s);
    let d = api.send("GET", "/v1/openapi.json", None, &[], None).await;
    assert_eq!(d.status, 200);
    assert_eq!(d.json["openapi"], "3.1.0");
    for (path, ops) in d.json["paths"].as_object().unwrap() {
        for method in ops.as_object().unwrap().keys() {
            let p = path.replace("{id}", "x");
            let r = api
                .send(
                    &method.to_uppercase(),
                    &p,
                    Some(WRITE),
                    &[],
                    Some("{}".into()),
                )
                .await;
            assert!(
                r.status != 404 || r.code() == "not_found",
                "{method} {path}: {} {:?}",
                r.status,
                r.json
            );
            assert_ne!(r.status, 405, "{method} {path}");
        }
    }
}

#[tokio::test]
async fn issue24_identity_provider_tokens_are_accepted_with_the_approvers_rights() {
    use toolgate_idp_kit::{SigningKey, claims, jwks};
    const ISS: &str = "https://idp.test/realms/people";
    const AUD: &str = "toolgate-approvals";
    let key = SigningKey::rsa1();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("jwks.json");
    std::fs::write(&file, jwks(&[&key]).to_string()).unwrap();
    let gov = governance_tweaked("token", |c| {
        c["approvers"] = json!({
            "auth": "jwt",
            "jwt": {"issuer": ISS, "audience": AUD, "jwks_file": file},
            "people": [{"name": "carol", "edit_policy": true}],
            "groups": [{"group": "payments", "tools": [{"tool": "refund"}]}],
            "api_keys": [{"name": "ci", "key_sha256": toolgate_web::hash_token(WRITE), "scopes": ["policy:write", "policy:read"]}]
        });
    });
    let s = start_gov(gov, std::time::Duration::from_millis(100)).await;
    let api = Api::new(&s);
    let token = |name: &str, groups: &[&str]| {
        key.sign(&claims(
            ISS,
            AUD,
            &format!("id-{name}"),
            json!({"preferred_username": name, "groups": groups}),
        ))
    };
    let carol = token("carol", &[]);
    let dave = token("dave", &["payments"]);
    let mallory = token("mallory", &["everyone"]);
    // carol edits the policy; dave reads it, may not write it.
    let p = api.put_policy(&carol, &json!({"rules": []}), &[]).await;
    assert_eq!(p.status, 200, "{:?}", p.json);
    assert_eq!(api.get("/v1/tenant/tool-policy", &dave).await.status, 200);
    let p = api.put_policy(&dave, &json!({"rules": []}), &[]).await;
    assert_eq!(p.status, 403, "{:?}", p.json);
    // A verified token of nobody the configuration names: 403; a forged one: 401.
    assert_eq!(
        api.get("/v1/tenant/tool-policy", &mallory).await.status,
        403
    );
    assert_eq!(
        api.get("/v1/tenant/tool-policy", "e30.e30.e30")
            .await
            .status,
        401
    );
    // The management key still works beside the identity provider.
    assert_eq!(api.get("/v1/tenant/tool-policy", WRITE).await.status, 200);
    // dave answers a refund, recorded under his name.
    let id = s
        .hold(in_session("refund", json!({"order": 9}), "s9"))
        .await;
    let listed = api.get("/v1/sessions/s9/pending", &dave).await;
    let shown = &listed.json["interactions"][0];
    let a = api
        .answer(
            &dave,
            &id,
            json!({"approved": true, "inputHash": shown["inputHash"], "definitionHash": shown["definitionHash"]}),
        )
        .await;
    assert_eq!(a.status, 200, "{:?}", a.json);
    assert_eq!(a.json["approver"], "dave");
}
