//! The approval page over HTTP, against the real server on 127.0.0.1:0 and a real SQLite
//! inbox: every refusal (R26 who may answer, R35 what was seen, R22 policy saves), the
//! cards (R43), escaping, and the event stream.
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
use toolgate_inbox::State;

#[tokio::test]
async fn sign_in_refuses_no_token_and_a_wrong_token() {
    let s = start("token").await;
    let anon = s.client();
    // No token: pages send you to sign in; state-changing requests are 401.
    let r = anon.get("/").await;
    assert_eq!(r.status, 303);
    assert_eq!(r.header("location"), "/login");
    let id = s.hold_refund(json!({"order": 1})).await;
    let r = anon
        .post(
            &format!("/calls/{id}/answer"),
            &[
                ("decision", "approve"),
                ("csrf", "x"),
                ("idempotency_key", "k"),
            ],
        )
        .await;
    assert_eq!(r.status, 401, "{}", r.body);
    assert_eq!(anon.get("/events").await.status, 401);
    assert_eq!(anon.get("/policy").await.status, 303);

    // A wrong token: 401, no session cookie.
    let mut c = s.client();
    let r = c.login("not-a-token").await;
    assert_eq!(r.status, 401);
    assert!(!r.header("set-cookie").contains("tg_session"));
    assert!(c.get("/").await.status == 303);

    // A sign-in form without its nonce is refused (sign-in CSRF).
    let r = c.post("/login", &[("token", ALICE)]).await;
    assert_eq!(r.status, 403);

    // The right token: an HttpOnly, SameSite=Strict session cookie.
    let r = c.login(ALICE).await;
    assert_eq!(r.status, 303);
    let set = r.header("set-cookie");
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    let page = c.get("/").await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("id=\"who\">alice<"), "{}", page.body);
    let csp = page.header("content-security-policy");
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    assert_eq!(
        s.inbox.store().get(&id).await.unwrap().unwrap().state,
        State::Pending
    );
}

#[tokio::test]
async fn an_answer_without_the_csrf_token_is_refused() {
    let s = start("token").await;
    let c = signed_in(&s, ALICE).await;
    let id = s.hold_refund(json!({"order": 2})).await;
    let rec = s.inbox.store().get(&id).await.unwrap().unwrap();
    for csrf in [None, Some("0000")] {
        let mut fields = vec![
            ("decision", "approve"),
            ("idempotency_key", "k1"),
            ("input_hash", rec.call.input_hash.as_str()),
            ("definition_hash", rec.call.definition_hash.as_str()),
        ];
        if let Some(t) = csrf {
            fields.push(("csrf", t));
        }
        let r = c.post(&format!("/calls/{id}/answer"), &fields).await;
        assert_eq!(r.status, 403, "{}", r.body);
        assert!(r.body.contains("CSRF"));
    }
    // Policy saves and sign-out need it too.
    let r = c
        .post("/policy/rule", &[("effect", "deny"), ("updated_at", "")])
        .await;
    assert_eq!(r.status, 403);
    assert_eq!(c.post("/logout", &[]).await.status, 403);
    assert_eq!(
        s.inbox.store().get(&id).await.unwrap().unwrap().state,
        State::Pending
    );
}

#[tokio::test]
async fn r26_an_approver_not_allowed_for_the_tool_is_refused() {
    let s = start("token").await;
    let bob = signed_in(&s, BOB).await;
    let refund = s.hold_refund(json!({"order": 3})).await;
    let issue = s
        .hold(ToolCall::new(
            AgentRef::profile("support"),
            "github__create_issue",
            json!({"title": "t"}),
        ))
        .await;
    let page = bob.get("/").await.body;
    // Issue 20: bob is not shown the call he may not answer at all.
    assert!(!page.contains(&format!("card-{refund}")));
    assert!(page.contains(&format!("id=\"approve-{issue}\"")));
    let csrf = bob.csrf().await;
    let rec = s.inbox.store().get(&refund).await.unwrap().unwrap();
    let r = bob
        .post(
            &format!("/calls/{refund}/answer"),
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
        r.body
            .contains("approver `bob` may not answer calls to `refund`"),
        "{}",
        r.body
    );
    assert_eq!(
        s.inbox.store().get(&refund).await.unwrap().unwrap().state,
        State::Pending
    );
    // github's call bob may answer.
    let r = bob
        .post(
            &format!("/calls/{issue}/answer"),
            &[
                ("csrf", &csrf),
                ("decision", "deny"),
                ("idempotency_key", "b2"),
                ("reason", "not today"),
            ],
        )
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let rec = s.inbox.store().get(&issue).await.unwrap().unwrap();
    assert_eq!(rec.state, State::Denied);
    assert_eq!(rec.approver.as_deref(), Some("bob"));
    assert_eq!(rec.answer_reason.as_deref(), Some("not today"));
}

#[tokio::test]
async fn r35_an_approval_of_a_hash_the_page_did_not_show_is_refused() {
    let s = start("token").await;
    let c = signed_in(&s, ALICE).await;
    let id = s.hold_refund(json!({"order": 4})).await;
    let rec = s.inbox.store().get(&id).await.unwrap().unwrap();
    let csrf = c.csrf().await;
    let stale = "sha256:0000000000000000000000000000000000000000000000000000000000000000";
    for (input, definition, what) in [
        (
            stale,
            rec.call.definition_hash.as_str(),
            "its input differs",
        ),
        (rec.call.input_hash.as_str(), stale, "definition differs"),
        ("", "", "definition differ from"),
    ] {
        let r = c
            .post(
                &format!("/calls/{id}/answer"),
                &[
                    ("csrf", &csrf),
                    ("decision", "approve"),
                    ("idempotency_key", "a1"),
                    ("input_hash", input),
                    ("definition_hash", definition),
                ],
            )
            .await;
        assert_eq!(r.status, 409, "{}", r.body);
        assert!(r.body.contains(what), "{}", r.body);
    }
    assert_eq!(
        s.inbox.store().get(&id).await.unwrap().unwrap().state,
        State::Pending
    );
}

#[tokio::test]
async fn r26_a_double_submitted_approval_is_one_answer_by_the_signed_in_person() {
    let s = start("token").await;
    let c = signed_in(&s, ALICE).await;
    let id = s.hold_refund(json!({"order": 5})).await;
    let page = c.get(&format!("/calls/{id}")).await.body;
    // The form exactly as the page rendered it, plus a forged approver name.
    let fields = [
        ("csrf", field(&page, "csrf").unwrap()),
        ("input_hash", field(&page, "input_hash").unwrap()),
        ("definition_hash", field(&page, "definition_hash").unwrap()),
        ("idempotency_key", field(&page, "idempotency_key").unwrap()),
        ("decision", String::from("approve")),
        ("approver", String::from("mallory")),
    ];
    let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
    for _ in 0..2 {
        let r = c.post(&format!("/calls/{id}/answer"), &fields).await;
        assert_eq!(r.status, 303, "{}", r.body);
        assert_eq!(r.header("location"), format!("/calls/{id}"));
    }
    let rec = s.inbox.store().get(&id).await.unwrap().unwrap();
    assert_eq!(rec.state, State::Approved);
    assert_eq!(
        rec.approver.as_deref(),
        Some("alice"),
        "the authenticated name, never a form field"
    );
    // Another form (another key) cannot answer it again.
    let csrf = c.csrf().await;
    let r = c
        .post(
            &format!("/calls/{id}/answer"),
            &[
                ("csrf", &csrf),
                ("decision", "deny"),
                ("idempotency_key", "other"),
            ],
        )
        .await;
    assert_eq!(r.status, 409, "{}", r.body);
    // The card shows who approved it; the held call is then sent once.
    let card = c.get(&format!("/calls/{id}")).await.body;
    assert!(
        card.contains("Approved by") && card.contains(">alice <"),
        "{card}"
    );
    let resumed = s.inbox.resume(&id, s.stack.clone()).await.unwrap();
    assert!(matches!(resumed.response, ToolResponse::Completed(_)));
    assert_eq!(s.tool.runs(), 1);
}

#[tokio::test]
async fn an_input_holding_markup_renders_as_text() {
    let s = start("token").await;
    let c = signed_in(&s, ALICE).await;
    let id = s
        .hold_refund(
            json!({"note": "<script>alert('x')</script>", "q": "\"><img src=x onerror=alert(1)>"}),
        )
        .await;
    for path in [
        "/".to_owned(),
        format!("/calls/{id}"),
        "/?fragment=1".to_owned(),
    ] {
        let body = c.get(&path).await.body;
        // `'` needs no escape: every attribute value is double-quoted.
        assert!(
            body.contains("&lt;script&gt;alert('x')&lt;/script&gt;"),
            "{path}: {body}"
        );
        assert!(!body.contains("<script>alert"), "{path}");
        assert!(!body.contains("<img src=x"), "{path}");
        assert_eq!(
            body.matches("<script").count(),
            usize::from(path != "/?fragment=1"),
            "{path}: only the static script"
        );
    }
}

#[tokio::test]
async fn r43_cards_are_grouped_by_session_and_turn_oldest_first() {
    let s = start("token").await;
    let c = signed_in(&s, ALICE).await;
    let call = |n: u32, session: &str, turn: &str| {
        ToolCall::new(AgentRef::profile("support"), "refund", json!({"n": n}))
            .in_turn(session, turn)
    };
    // "Oldest" is the held time, stored to the millisecond; calls held within one
    // millisecond are ordered by their (random) id. Each call here is held in a later
    // millisecond than the one before it, so the expected order is the only one.
    let tick = || tokio::time::sleep(std::time::Duration::from_millis(3));
    let a = s.hold(call(1, "sess-b", "turn-1")).await;
    tick().await;
    let b = s.hold(call(2, "sess-a", "turn-9")).await;
    tick().await;
    let c2 = s.hold(call(3, "sess-b", "turn-2")).await;
    tick().await;
    let d = s.hold(call(4, "sess-b", "turn-1")).await;
    tick().await;
    let e = s.hold_refund(json!({"n": 5})).await;
    tick().await;
    let sub = s
        .hold(
            ToolCall::new(
                AgentRef::subagent("support", "researcher"),
                "refund",
                json!({"n": 6}),
            )
            .in_turn("sess-a", "turn-9"),
        )
        .await;
    let page = c.get("/").await.body;
    let pos = |id: &str| {
        page.find(&format!("id=\"card-{id}\""))
            .unwrap_or_else(|| panic!("{id} missing"))
    };
    // Session sess-b (oldest call first): turn-1 (a, d), then turn-2 (c); then sess-a;
    // calls outside any session last.
    assert!(
        pos(&a) < pos(&d)
            && pos(&d) < pos(&c2)
            && pos(&c2) < pos(&b)
            && pos(&b) < pos(&sub)
            && pos(&sub) < pos(&e)
    );
    assert!(
        page.contains("Session <code>sess-b</code>")
            && page.contains("Turn <code>turn-1</code> · paused by 2 held calls")
    );
    assert!(page.contains("Approve refund?"));
    assert!(page.contains("researcher (subagent of support)"));
    assert!(page.contains("<span class=\"source\">agent approval mode</span>"));
    assert!(page.contains("id=\"pending-count\">6<"));
}

#[tokio::test]
async fn history_shows_who_answered_and_what_ended_the_wait() {
    let s = start("token").await;
    let c = signed_in(&s, ALICE).await;
    let denied = s.hold_refund(json!({"n": 1})).await;
    let cancelled = s
        .hold(
            ToolCall::new(AgentRef::profile("support"), "refund", json!({"n": 2}))
                .in_turn("s", "t"),
        )
        .await;
    let csrf = c.csrf().await;
    let r = c
        .post(
            &format!("/calls/{denied}/answer"),
            &[
                ("csrf", &csrf),
                ("decision", "deny"),
                ("idempotency_key", "d"),
                ("reason", "too <big>"),
            ],
        )
        .await;
    assert_eq!(r.status, 303);
    s.inbox.store().cancel_turn("s", "t").await.unwrap();
    let page = c.get("/history").await.body;
    assert!(page.contains(&format!("id=\"row-{denied}\"")), "{page}");
    assert!(page.contains("too &lt;big&gt;"));
    assert!(page.contains("<td class=\"approver\">alice</td>"));
    assert!(page.contains(&format!("id=\"row-{cancelled}\"")));
    assert!(page.contains("nobody: its turn was cancelled"));
    let pending = c.get("/").await.body;
    assert!(pending.contains("No held call is waiting"));
}

#[tokio::test]
async fn r22_policy_saves_validate_by_field_and_refuse_a_stale_updated_at() {
    let s = start("token").await;
    let c = signed_in(&s, ALICE).await;
    let csrf = c.csrf().await;
    // An error is shown at its field; nothing is stored.
    let r = c
        .post(
            "/policy/rule",
            &[
                ("csrf", &csrf),
                ("updated_at", ""),
                ("index", "new"),
                ("effect", "deny"),
                ("tool", "github__create_issue"),
            ],
        )
        .await;
    assert_eq!(r.status, 422, "{}", r.body);
    assert!(r.body.contains("id=\"error-tool\""), "{}", r.body);
    assert!(r.body.contains("rules[0].tool"));
    assert!(s.inbox.store().get_policy().await.unwrap().is_none());
    // A `when` that is not JSON is shown at `when`.
    let r = c
        .post(
            "/policy/rule",
            &[
                ("csrf", &csrf),
                ("updated_at", ""),
                ("index", "new"),
                ("effect", "deny"),
                ("when", "{amount"),
            ],
        )
        .await;
    assert_eq!(r.status, 422);
    assert!(r.body.contains("id=\"error-when\""));
    // A valid rule is saved whole.
    let r = c
        .post(
            "/policy/rule",
            &[
                ("csrf", &csrf),
                ("updated_at", ""),
                ("index", "new"),
                ("effect", "deny"),
                ("tool", "refund"),
                ("when", r#"{"amount": {"gt": 100}}"#),
                ("reason", "too much"),
            ],
        )
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let stored = s.inbox.store().get_policy().await.unwrap().unwrap();
    assert!(stored.body.contains("too much"));
    // A save based on the old (empty) updatedAt is a conflict, never an overwrite.
    let r = c
        .post(
            "/policy/rule",
            &[
                ("csrf", &csrf),
                ("updated_at", ""),
                ("index", "new"),
                ("effect", "allow"),
            ],
        )
        .await;
    assert_eq!(r.status, 409, "{}", r.body);
    assert!(r.body.contains("Conflict"));
    let r = c
        .post(
            "/policy/delete",
            &[
                ("csrf", &csrf),
                ("updated_at", "2000-01-01T00:00:00Z"),
                ("index", "0"),
            ],
        )
        .await;
    assert_eq!(r.status, 409);
    assert_eq!(s.inbox.store().get_policy().await.unwrap().unwrap(), stored);
    // The stored rule decides the next call once the gate picks it up.
    s.reload_policy().await;
    match s
        .send(ToolCall::new(
            AgentRef::profile("support"),
            "refund",
            json!({"amount": 500}),
        ))
        .await
    {
        ToolResponse::Refused(r) => {
            assert!(r.reasons.iter().any(|x| x.contains("too much")), "{r:?}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    // The tab lists it; delete with the current updatedAt.
    let page = c.get("/policy").await.body;
    assert!(page.contains("id=\"rule-0\""));
    let updated = field(&page, "updated_at").unwrap();
    assert_eq!(updated, stored.updated_at);
    let r = c
        .post(
            "/policy/delete",
            &[("csrf", &csrf), ("updated_at", &updated), ("index", "0")],
        )
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    assert!(
        !s.inbox
            .store()
            .get_policy()
            .await
            .unwrap()
            .unwrap()
            .body
            .contains("too much")
    );
}

#[tokio::test]
async fn an_approver_without_edit_policy_cannot_save() {
    let s = start("token").await;
    let bob = signed_in(&s, BOB).await;
    let page = bob.get("/policy").await;
    assert_eq!(page.status, 200);
    assert!(!page.body.contains("id=\"add-rule\""));
    let csrf = bob.csrf().await;
    let r = bob
        .post(
            "/policy/rule",
            &[
                ("csrf", &csrf),
                ("updated_at", ""),
                ("index", "new"),
                ("effect", "allow"),
            ],
        )
        .await;
    assert_eq!(r.status, 403);
    assert!(r.body.contains("may not edit the policy"));
    assert!(s.inbox.store().get_policy().await.unwrap().is_none());
}

#[tokio::test]
async fn an_oversized_body_is_refused() {
    let s = start("token").await;
    let c = signed_in(&s, ALICE).await;
    let id = s.hold_refund(json!({"n": 1})).await;
    let csrf = c.csrf().await;
    let big = "x".repeat(toolgate_web::MAX_BODY_BYTES + 1);
    let r = c
        .post(
            &format!("/calls/{id}/answer"),
            &[
                ("csrf", &csrf),
                ("decision", "deny"),
                ("idempotency_key", "k"),
                ("reason", &big),
            ],
        )
        .await;
    assert_eq!(r.status, 413);
    assert_eq!(
        s.inbox.store().get(&id).await.unwrap().unwrap().state,
        State::Pending
    );
}

#[tokio::test]
async fn proxy_header_mode_trusts_only_named_approvers() {
    let s = start("proxy").await;
    let mut c = s.client();
    assert_eq!(c.get("/").await.status, 401);
    c.user = Some(("X-Remote-User".into(), "mallory".into()));
    assert_eq!(c.get("/").await.status, 401);
    c.user = Some(("X-Remote-User".into(), "alice".into()));
    let id = s.hold_refund(json!({"n": 1})).await;
    let page = c.get("/").await;
    assert_eq!(page.status, 200);
    let csrf = field(&page.body, "csrf").unwrap();
    let r = c
        .post(
            &format!("/calls/{id}/answer"),
            &[
                ("csrf", &csrf),
                ("decision", "deny"),
                ("idempotency_key", "k"),
            ],
        )
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(
        s.inbox
            .store()
            .get(&id)
            .await
            .unwrap()
            .unwrap()
            .approver
            .as_deref(),
        Some("alice")
    );
    // bob's CSRF token is not alice's.
    c.user = Some(("X-Remote-User".into(), "bob".into()));
    let r = c
        .post(
            "/policy/rule",
            &[("csrf", &csrf), ("updated_at", ""), ("effect", "allow")],
        )
        .await;
    assert_eq!(r.status, 403);
}

#[tokio::test]
async fn the_page_does_not_start_without_an_approver() {
    let gov = toolgate_engine::config::load_str(
        r#"{"inbox": {"sqlite": "x.db"}}"#,
        toolgate_engine::config::Format::Json,
    )
    .unwrap();
    let err = toolgate_web::WebSettings::from_governance(
        &gov,
        std::path::Path::new("/etc/toolgate.json"),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("`/etc/toolgate.json`") && err.contains("approvers"),
        "{err}"
    );
}

#[tokio::test]
async fn the_event_stream_announces_a_new_held_call() {
    let s = start_with("token", std::time::Duration::from_millis(20)).await;
    let c = signed_in(&s, ALICE).await;
    let http = reqwest::Client::new();
    let mut events = http
        .get(format!("{}/events", s.base))
        .header("cookie", c.cookie.clone().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(events.status().as_u16(), 200);
    assert!(
        events.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let id = s.hold_refund(json!({"n": 1})).await;
    let mut seen = String::new();
    let got = tokio::time::timeout(std::time::Duration::from_secs(60), async {
        while let Some(chunk) = events.chunk().await.unwrap() {
            seen.push_str(&String::from_utf8_lossy(&chunk));
            if seen.contains("event: changed") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(got, Ok(true), "{seen}");
    // The live part the script fetches then holds the new card.
    assert!(
        c.get("/?fragment=1")
            .await
            .body
            .contains(&format!("card-{id}"))
    );
}

#[test]
fn the_example_configuration_signs_in_with_its_documented_token() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/approvals.json");
    let gov = toolgate_engine::config::load_path(&path).unwrap();
    let settings = toolgate_web::WebSettings::from_governance(&gov, &path).unwrap();
    let alice = settings.approvers.approver("alice").unwrap();
    assert_eq!(
        alice.token_sha256.as_deref(),
        Some(toolgate_web::hash_token("demo-token-alice").as_str())
    );
    assert!(settings.approvers.listen.ip().is_loopback());
}

#[tokio::test]
async fn r22_a_stored_policy_nested_too_deep_is_shown_unreadable() {
    let s = start("token").await;
    let c = signed_in(&s, ALICE).await;
    // Stored past validation, nested far deeper than any reader's bound.
    let deep = format!(
        r#"{{"default":"allow","rules":[{{"effect":"ask","tool":"t","when":{}1{}}}]}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let conn = rusqlite::Connection::open(&s.db).unwrap();
    conn.execute(
        "INSERT INTO stored_policy (id, body, updated_at) VALUES (1, ?1, '2020-01-01T00:00:00.000000Z')",
        [&deep],
    )
    .unwrap();
    let r = c.get("/policy").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("id=\"unreadable\""), "{}", r.body);
    // The empty document is shown in its place, never the stored one.
    assert!(!r.body.contains("[[[["));
}

#[tokio::test]
async fn r22_an_unreadable_stored_policy_is_shown_and_replaced_whole() {
    let s = start("token").await;
    let c = signed_in(&s, ALICE).await;
    // A rule written before wire names were refused (seed 002), stored past validation.
    let conn = rusqlite::Connection::open(&s.db).unwrap();
    conn.execute(
        "INSERT INTO stored_policy (id, body, updated_at) VALUES (1, ?1, '2020-01-01T00:00:00.000000Z')",
        [r#"{"default":"allow","rules":[{"effect":"ask","tool":"github__create_issue"}]}"#],
    )
    .unwrap();
    let page = c.get("/policy").await.body;
    assert!(page.contains("id=\"unreadable\""), "{page}");
    assert!(page.contains("rules[0].tool"));
    let csrf = field(&page, "csrf").unwrap();
    let fixed = r#"{"default": "allow", "rules": [{"effect": "ask", "server": "github", "tool": "create_issue"}]}"#;
    // The whole document, still wrong: refused with its path, nothing stored.
    let r = c
        .post(
            "/policy/whole",
            &[
                ("csrf", &csrf),
                ("updated_at", "2020-01-01T00:00:00.000000Z"),
                ("document", &fixed.replace("create_issue", "x__y")),
            ],
        )
        .await;
    assert_eq!(r.status, 422);
    assert!(r.body.contains("rules[0].tool"));
    // Stale: refused as a conflict.
    let r = c
        .post(
            "/policy/whole",
            &[("csrf", &csrf), ("updated_at", ""), ("document", fixed)],
        )
        .await;
    assert_eq!(r.status, 409);
    // Corrected, on the stored updatedAt: saved, readable again.
    let r = c
        .post(
            "/policy/whole",
            &[
                ("csrf", &csrf),
                ("updated_at", "2020-01-01T00:00:00.000000Z"),
                ("document", fixed),
            ],
        )
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let page = c.get("/policy").await.body;
    assert!(!page.contains("id=\"unreadable\""));
    assert!(page.contains("github / create_issue"));
}
