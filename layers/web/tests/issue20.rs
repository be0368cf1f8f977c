//! Issue 20 on the approval page: hidden characters shown, who sees which calls, where
//! requests may come from, sign-in throttling, bounded reasons, and the log of each sign-in,
//! answer and policy save. Against the real server on 127.0.0.1:0 and a real SQLite inbox.
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

/// Every hidden character the page must never show raw.
const HIDDEN: [char; 8] = [
    '\u{202E}',
    '\u{2066}',
    '\u{200B}',
    '\u{200D}',
    '\u{FEFF}',
    '\u{061C}',
    '\u{E0041}',
    '\u{85}',
];

fn assert_no_hidden(what: &str, body: &str) {
    for c in HIDDEN {
        assert!(
            !body.contains(c),
            "{what}: U+{:04X} shown raw: {body}",
            u32::from(c)
        );
    }
}

#[tokio::test]
async fn issue20_the_page_shows_hidden_characters_marked() {
    let s = start("token").await;
    let c = signed_in(&s, ALICE).await;
    let id = s
        .hold_refund(json!({
            "amount": "100\u{202E}0",
            "to\u{200B}": "ali\u{200D}ce\u{2066}\u{FEFF}\u{061C}\u{E0041}\u{85}"
        }))
        .await;
    for path in [
        "/".to_owned(),
        format!("/calls/{id}"),
        "/?fragment=1".to_owned(),
    ] {
        let body = c.get(&path).await.body;
        assert_no_hidden(&path, &body);
        assert!(body.contains("100⟦U+202E⟧0"), "{path}: {body}");
        assert!(body.contains("to⟦U+200B⟧"), "{path}: {body}");
        assert!(
            body.contains("ali⟦U+200D⟧ce⟦U+2066⟧⟦U+FEFF⟧⟦U+061C⟧⟦U+E0041⟧⟦U+0085⟧"),
            "{path}: {body}"
        );
    }
    // A denial's reason, in the card and the history.
    let csrf = c.csrf().await;
    let r = c
        .post(
            &format!("/calls/{id}/answer"),
            &[
                ("csrf", &csrf),
                ("decision", "deny"),
                ("idempotency_key", "k"),
                ("reason", "no\u{202E}sey"),
            ],
        )
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    for path in [format!("/calls/{id}"), "/history".to_owned()] {
        let body = c.get(&path).await.body;
        assert_no_hidden(&path, &body);
        assert!(body.contains("no⟦U+202E⟧sey"), "{path}: {body}");
    }
    // The stored answer is the reason as given: only its display is marked.
    let rec = s.inbox.store().get(&id).await.unwrap().unwrap();
    assert_eq!(rec.answer_reason.as_deref(), Some("no\u{202E}sey"));
}

#[tokio::test]
async fn issue20_an_approver_sees_only_the_calls_they_may_answer() {
    let s = start("token").await;
    let alice = signed_in(&s, ALICE).await;
    let bob = signed_in(&s, BOB).await;
    // bob may answer only github's calls.
    let refund = s.hold_refund(json!({"secret_order": "R-99"})).await;
    let issue = s
        .hold(toolgate_core::ToolCall::new(
            toolgate_core::AgentRef::profile("support"),
            "github__create_issue",
            json!({"title": "t"}),
        ))
        .await;
    for path in ["/", "/?fragment=1"] {
        let page = bob.get(path).await.body;
        assert!(!page.contains(&format!("card-{refund}")), "{path}: {page}");
        assert!(
            !page.contains("R-99"),
            "{path}: the input of a call bob may not answer"
        );
        assert!(page.contains(&format!("card-{issue}")), "{path}: {page}");
        assert!(page.contains("id=\"pending-count\">1<"), "{path}: {page}");
    }
    // The card itself: as if it did not exist.
    let r = bob.get(&format!("/calls/{refund}")).await;
    assert_eq!(r.status, 404, "{}", r.body);
    assert!(!r.body.contains("R-99"));
    assert!(
        r.body
            .contains(&format!("no held call `{refund}` that you may answer")),
        "{}",
        r.body
    );
    // alice sees both.
    let page = alice.get("/").await.body;
    assert!(page.contains(&format!("card-{refund}")) && page.contains(&format!("card-{issue}")));
    // History: alice denies the refund; bob's history does not show it, alice's does.
    let csrf = alice.csrf().await;
    let r = alice
        .post(
            &format!("/calls/{refund}/answer"),
            &[
                ("csrf", &csrf),
                ("decision", "deny"),
                ("idempotency_key", "k"),
            ],
        )
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    assert!(
        !bob.get("/history")
            .await
            .body
            .contains(&format!("row-{refund}"))
    );
    assert!(
        alice
            .get("/history")
            .await
            .body
            .contains(&format!("row-{refund}"))
    );
    // The answer path still checks rights (R26).
    let csrf = bob.csrf().await;
    let r = bob
        .post(
            &format!("/calls/{issue}/answer"),
            &[
                ("csrf", &csrf),
                ("decision", "deny"),
                ("idempotency_key", "b"),
            ],
        )
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
}

/// A request to the page with the given extra headers (`host`, `origin`, …).
async fn raw(
    s: &Server,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<String>,
) -> (u16, String) {
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let url = format!("{}{path}", s.base);
    let mut r = match method {
        "POST" => http.post(url),
        _ => http.get(url),
    };
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    if let Some(b) = body {
        r = r
            .header("content-type", "application/x-www-form-urlencoded")
            .body(b);
    }
    let reply = r.send().await.unwrap();
    let status = reply.status().as_u16();
    (status, reply.text().await.unwrap_or_default())
}

#[tokio::test]
async fn issue20_a_request_for_another_host_is_refused() {
    for auth in ["token", "proxy"] {
        let s = start(auth).await;
        let id = s.hold_refund(json!({"order": 1})).await;
        let mut headers = vec![("host", "rebound.evil.example:8788")];
        if auth == "proxy" {
            headers.push(("x-remote-user", "alice"));
        }
        for (method, path) in [("GET", "/"), ("GET", "/events"), ("GET", "/login")] {
            let (status, body) = raw(&s, method, path, &headers, None).await;
            assert_eq!(status, 421, "{auth} {path}: {body}");
            assert!(
                body.contains("the request was for `rebound.evil.example:8788`")
                    && body.contains("approvers.allowed_hosts"),
                "{body}"
            );
        }
        let (status, _) = raw(
            &s,
            "POST",
            &format!("/calls/{id}/answer"),
            &headers,
            Some(form(&[("decision", "deny"), ("idempotency_key", "k")])),
        )
        .await;
        assert_eq!(status, 421);
        // The page's own address still works.
        let own = s.addr.to_string();
        let mut headers = vec![("host", own.as_str())];
        if auth == "proxy" {
            headers.push(("x-remote-user", "alice"));
        }
        let (status, body) = raw(&s, "GET", "/login", &headers, None).await;
        assert!(status == 200 || status == 303, "{auth}: {status} {body}");
        let port = format!("localhost:{}", s.addr.port());
        headers[0] = ("host", port.as_str());
        let (status, _) = raw(&s, "GET", "/login", &headers, None).await;
        assert!(status == 200 || status == 303, "{auth}: localhost");
        assert_eq!(
            s.inbox.store().get(&id).await.unwrap().unwrap().state,
            toolgate_inbox::State::Pending
        );
    }
}

#[tokio::test]
async fn issue20_a_form_from_another_origin_is_refused() {
    let s = start("proxy").await;
    let mut c = s.client();
    c.user = Some(("X-Remote-User".into(), "alice".into()));
    let id = s.hold_refund(json!({"order": 2})).await;
    let csrf = c.csrf().await;
    let fields = form(&[
        ("csrf", &csrf),
        ("decision", "deny"),
        ("idempotency_key", "k"),
    ]);
    let own = format!("http://{}", s.addr);
    for (headers, why) in [
        (
            vec![("origin", "https://evil.example")],
            "`https://evil.example`",
        ),
        (vec![("origin", "null")], "`null`"),
        (
            vec![("origin", "http://127.0.0.1.evil.example")],
            "127.0.0.1.evil.example",
        ),
        (vec![("sec-fetch-site", "cross-site")], "another site"),
        (
            vec![("origin", own.as_str()), ("sec-fetch-site", "cross-site")],
            "not from this page",
        ),
    ] {
        let mut h = headers.clone();
        h.push(("x-remote-user", "alice"));
        let (status, body) = raw(
            &s,
            "POST",
            &format!("/calls/{id}/answer"),
            &h,
            Some(fields.clone()),
        )
        .await;
        assert_eq!(status, 403, "{headers:?}: {body}");
        assert!(
            body.contains(why) && body.contains("not from this page"),
            "{body}"
        );
    }
    assert_eq!(
        s.inbox.store().get(&id).await.unwrap().unwrap().state,
        toolgate_inbox::State::Pending
    );
    // From the page itself: answered.
    let (status, body) = raw(
        &s,
        "POST",
        &format!("/calls/{id}/answer"),
        &[
            ("origin", own.as_str()),
            ("sec-fetch-site", "same-origin"),
            ("x-remote-user", "alice"),
        ],
        Some(fields),
    )
    .await;
    assert_eq!(status, 303, "{body}");
}

#[tokio::test]
async fn issue20_the_configured_allowed_hosts_replace_the_defaults() {
    let gov = governance_tweaked("token", |c| {
        c["approvers"]["allowed_hosts"] = json!(["approve.example.com"]);
    });
    let s = start_gov(gov, std::time::Duration::from_millis(100)).await;
    let (status, _) = raw(
        &s,
        "GET",
        "/login",
        &[("host", "approve.example.com")],
        None,
    )
    .await;
    assert_eq!(status, 200);
    let own = s.addr.to_string();
    let (status, body) = raw(&s, "GET", "/login", &[("host", own.as_str())], None).await;
    assert_eq!(status, 421, "{body}");
    assert!(body.contains("only for `approve.example.com`"), "{body}");
}

#[tokio::test]
async fn issue20_a_deny_reason_past_the_bound_is_refused_naming_the_field() {
    let s = start("token").await;
    let c = signed_in(&s, ALICE).await;
    let id = s.hold_refund(json!({"order": 3})).await;
    let csrf = c.csrf().await;
    let bound = toolgate_inbox::MAX_REASON_CHARS;
    assert_eq!(bound, 2000);
    let card = c.get(&format!("/calls/{id}")).await.body;
    assert!(card.contains("maxlength=\"2000\""), "{card}");
    let long = "é".repeat(bound + 1);
    let r = c
        .post(
            &format!("/calls/{id}/answer"),
            &[
                ("csrf", &csrf),
                ("decision", "deny"),
                ("idempotency_key", "k1"),
                ("reason", &long),
            ],
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(
        r.body
            .contains("`reason` is 2001 characters long; at most 2000 are kept"),
        "{}",
        r.body
    );
    assert_eq!(
        s.inbox.store().get(&id).await.unwrap().unwrap().state,
        toolgate_inbox::State::Pending
    );
    // At the bound: kept whole.
    let exact = "é".repeat(bound);
    let r = c
        .post(
            &format!("/calls/{id}/answer"),
            &[
                ("csrf", &csrf),
                ("decision", "deny"),
                ("idempotency_key", "k2"),
                ("reason", &exact),
            ],
        )
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let rec = s.inbox.store().get(&id).await.unwrap().unwrap();
    assert_eq!(rec.answer_reason.as_deref(), Some(exact.as_str()));
}

/// Signs in with `token` from the local address `from`; the status and `Retry-After` of
/// the sign-in POST.
async fn login_from(s: &Server, from: &str, token: &str) -> (u16, String, String) {
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .local_address(from.parse::<std::net::IpAddr>().unwrap())
        .build()
        .unwrap();
    let page = http.get(format!("{}/login", s.base)).send().await.unwrap();
    let cookie = page
        .headers()
        .get("set-cookie")
        .unwrap()
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let nonce = field(&page.text().await.unwrap(), "csrf").unwrap();
    let r = http
        .post(format!("{}/login", s.base))
        .header("cookie", cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form(&[("csrf", &nonce), ("token", token)]))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let retry = r
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, retry, r.text().await.unwrap_or_default())
}

#[tokio::test]
async fn issue20_sign_in_attempts_are_throttled_per_address() {
    let s = start("token").await;
    for i in 0..5 {
        let (status, _, _) = login_from(&s, "127.0.0.1", &format!("guess-{i}")).await;
        assert_eq!(status, 401, "guess {i}");
    }
    // The sixth attempt from that address is refused, even with the right token.
    let (status, retry, body) = login_from(&s, "127.0.0.1", ALICE).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(retry, "10");
    assert!(
        body.contains("too many sign-in attempts from this address; try again in 10 s"),
        "{body}"
    );
    // Another address signs in.
    let (status, _, body) = login_from(&s, "127.0.0.2", ALICE).await;
    assert_eq!(status, 303, "{body}");
}
