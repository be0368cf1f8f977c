//! Grants on the approval page over HTTP (R45), against the real server and a real SQLite
//! inbox: "Approve, and allow matching calls for …" approves the call and stores the grant,
//! pre-filled from the card and bound to its hashes (R35); a refused grant approves nothing;
//! an approver grants only what their selectors cover; a double submit is one grant; the
//! Grants tab lists each grant's state and revokes after a confirmation (CSRF, rights); and
//! a grant given on the page answers the gate's next matching call, never loosening a deny.
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
use toolgate_core::{AgentRef, RefusalCode, ToolCall, ToolResponse};
use toolgate_inbox::{GrantState, State, Timestamp};

#[tokio::test]
async fn r45_approve_and_allow_is_prefilled_from_the_card_and_answers_the_next_matching_call() {
    let s = start("token").await;
    s.handle.set_grants(s.inbox.store().grant_store().unwrap());
    let c = signed_in(&s, ALICE).await;
    let id = s
        .hold(
            ToolCall::new(
                AgentRef::profile("support"),
                "refund",
                json!({"order": "A-17", "amount": 80}),
            )
            .in_turn("sess-9", "turn-1"),
        )
        .await;
    let page = c.get(&format!("/calls/{id}")).await;
    assert!(
        page.body
            .contains("Approve, and allow matching calls for …"),
        "{}",
        page.body
    );
    let fields = grant_fields(&page.body, &[]);
    let get = |k: &str| fields.iter().find(|(n, _)| n == k).unwrap().1.clone();
    assert_eq!(get("agent"), "support");
    assert_eq!(get("tool"), "refund");
    assert_eq!(get("server"), "");
    assert_eq!(get("session"), "sess-9");
    assert_eq!((get("for"), get("max_calls")), ("30m".into(), "5".into()));
    // Issue 34 item 7: every value the card shows, bound with `equals`.
    let when: serde_json::Value = serde_json::from_str(&get("when")).unwrap();
    assert_eq!(
        when,
        json!({"order": {"equals": "A-17"}, "amount": {"equals": 80}})
    );

    // Edited: any order up to 100, two calls, any session — shown in words first.
    let fields = grant_fields(
        &page.body,
        &[
            ("when", r#"{"amount": {"lte": 100}}"#),
            ("max_calls", "2"),
            ("session", ""),
        ],
    );
    let (check, r) = post_grant_confirmed(&c, &id, &fields).await;
    for said in [
        "<code>amount</code>: any value that is a number ≤ 100 passes",
        "<code>order</code> is not checked",
        "<code>session</code>: calls of any session",
    ] {
        assert!(check.body.contains(said), "{said}: {}", check.body);
    }
    assert_eq!(r.status, 303, "{}", r.body);
    let rec = s.inbox.store().get(&id).await.unwrap().unwrap();
    assert_eq!(
        (rec.state, rec.approver.as_deref()),
        (State::Approved, Some("alice"))
    );
    let grants = s.inbox.store().grants().await.unwrap();
    assert_eq!(grants.len(), 1);
    let g = &grants[0];
    assert_eq!(
        (g.grant.granted_by(), g.grant.max_calls(), g.grant.session()),
        ("alice", Some(2), None)
    );
    let expires = g.grant.expires_at() as i64 - Timestamp::now().as_millis();
    assert!((29 * 60_000..=30 * 60_000).contains(&expires), "{expires}");

    // A double submit is one approval and one grant.
    let (_, again) = post_grant_confirmed(&c, &id, &fields).await;
    assert_eq!(again.status, 303, "{}", again.body);
    assert_eq!(s.inbox.store().grants().await.unwrap().len(), 1);

    // R45: the next matching call runs without asking; one the `when` does not match asks.
    let small = ToolCall::new(
        AgentRef::profile("support"),
        "refund",
        json!({"order": "B-2", "amount": 50}),
    );
    assert!(matches!(s.send(small).await, ToolResponse::Completed(_)));
    assert_eq!(s.tool.runs(), 1);
    let big = ToolCall::new(
        AgentRef::profile("support"),
        "refund",
        json!({"order": "C-3", "amount": 150}),
    );
    assert!(matches!(s.send(big).await, ToolResponse::Held(_)));
    let g = &s.inbox.store().grants().await.unwrap()[0];
    assert_eq!(g.uses, 1);
}

#[tokio::test]
async fn r35_r45_a_grant_bound_to_hashes_the_page_did_not_show_approves_and_grants_nothing() {
    let s = start("token").await;
    let c = signed_in(&s, ALICE).await;
    let id = s.hold_refund(json!({"order": 4})).await;
    let page = c.get(&format!("/calls/{id}")).await;
    let stale = "sha256:0000000000000000000000000000000000000000000000000000000000000000";
    for (edit, status, what) in [
        (("input_hash", stale), 409, "its input differs"),
        (("definition_hash", stale), 409, "definition differs"),
        (
            ("when", r#"{"order": {"gt": "x"}}"#),
            400,
            "`when.order.gt`",
        ),
        (("for", "forever"), 400, "`for`"),
        (("max_calls", "0"), 400, "`max_calls`"),
        (("tool", "github__create_issue"), 400, "`tool`"),
        (("csrf", "0000"), 403, "CSRF"),
    ] {
        let r = post_grant(&c, &id, &grant_fields(&page.body, &[edit])).await;
        assert_eq!(r.status, status, "{edit:?}: {}", r.body);
        assert!(r.body.contains(what), "{edit:?}: {}", r.body);
    }
    assert_eq!(
        s.inbox.store().get(&id).await.unwrap().unwrap().state,
        State::Pending
    );
    assert!(s.inbox.store().grants().await.unwrap().is_empty());
}

#[tokio::test]
async fn r45_an_approver_grants_on_the_page_only_what_their_selectors_cover() {
    let s = start("token").await;
    let bob = signed_in(&s, BOB).await;
    let id = s
        .hold(ToolCall::new(
            AgentRef::profile("support"),
            "github__create_issue",
            json!({"title": "t"}),
        ))
        .await;
    let page = bob.get(&format!("/calls/{id}")).await;
    let fields = grant_fields(&page.body, &[]);
    assert_eq!(
        fields.iter().find(|(k, _)| k == "server").unwrap().1,
        "github"
    );
    // Widened to every server's tools: beyond bob's `{"server": "github"}`.
    let wide = grant_fields(&page.body, &[("server", ""), ("tool", "*")]);
    let r = post_grant(&bob, &id, &wide).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(
        r.body.contains("`tool`") && r.body.contains("refund"),
        "{}",
        r.body
    );
    assert_eq!(
        s.inbox.store().get(&id).await.unwrap().unwrap().state,
        State::Pending
    );
    let r = post_grant(&bob, &id, &fields).await;
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(
        s.inbox.store().grants().await.unwrap()[0]
            .grant
            .granted_by(),
        "bob"
    );

    // Alice's refund grant is not bob's to see or revoke.
    let alice = signed_in(&s, ALICE).await;
    let rid = s.hold_refund(json!({"order": 5})).await;
    let page = alice.get(&format!("/calls/{rid}")).await;
    let r = post_grant(&alice, &rid, &grant_fields(&page.body, &[])).await;
    assert_eq!(r.status, 303, "{}", r.body);
    let refund_grant = s.inbox.store().grants().await.unwrap()[1]
        .grant
        .id()
        .to_owned();
    let list = bob.get("/grants").await;
    assert!(!list.body.contains(&refund_grant), "{}", list.body);
    let csrf = bob.csrf().await;
    let r = bob
        .post(
            &format!("/grants/{refund_grant}/revoke"),
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(s.inbox.store().grants().await.unwrap()[1].revoked.is_none());
}

#[tokio::test]
async fn r45_the_grants_tab_shows_each_state_and_revokes_after_a_confirmation() {
    let s = start("token").await;
    s.handle.set_grants(s.inbox.store().grant_store().unwrap());
    let c = signed_in(&s, ALICE).await;
    let id = s.hold_refund(json!({"amount": 10})).await;
    let page = c.get(&format!("/calls/{id}")).await;
    let (_, r) = post_grant_confirmed(
        &c,
        &id,
        &grant_fields(&page.body, &[("when", ""), ("max_calls", "")]),
    )
    .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let g = s.inbox.store().grants().await.unwrap().remove(0);
    let gid = g.grant.id().to_owned();

    let list = c.get("/grants").await;
    assert_eq!(list.status, 200);
    assert!(
        list.body
            .contains(&format!("id=\"grant-row-{gid}\" class=\"grant-live\"")),
        "{}",
        list.body
    );
    assert!(
        list.body
            .contains(&format!("href=\"/grants/{gid}/revoke\""))
    );

    let confirm = c.get(&format!("/grants/{gid}/revoke")).await;
    assert_eq!(confirm.status, 200);
    assert!(
        confirm.body.contains("id=\"confirm-revoke\""),
        "{}",
        confirm.body
    );
    assert!(
        s.inbox.store().grants().await.unwrap()[0].revoked.is_none(),
        "a look revokes nothing"
    );
    // Without the CSRF token: refused.
    let r = c
        .post(&format!("/grants/{gid}/revoke"), &[("csrf", "0000")])
        .await;
    assert_eq!(r.status, 403);
    let csrf = field(&confirm.body, "csrf").unwrap();
    let r = c
        .post(&format!("/grants/{gid}/revoke"), &[("csrf", &csrf)])
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let g = s.inbox.store().grants().await.unwrap().remove(0);
    assert_eq!(g.state(Timestamp::now()), GrantState::Revoked);
    assert_eq!(g.revoked.as_ref().unwrap().by, "alice");
    let list = c.get(&format!("/grants?revoked={gid}")).await;
    assert!(
        list.body.contains("class=\"grant-revoked\""),
        "{}",
        list.body
    );
    assert!(
        list.body
            .contains("revoked by <span class=\"revoked-by\">alice</span>")
    );
    assert!(
        !list
            .body
            .contains(&format!("href=\"/grants/{gid}/revoke\"")),
        "no Revoke twice"
    );
    let r = c
        .post(&format!("/grants/{gid}/revoke"), &[("csrf", &csrf)])
        .await;
    assert_eq!(r.status, 409, "{}", r.body);
    assert!(r.body.contains("revoked already"));

    // Revoked: the next call is asked again.
    assert!(matches!(
        s.send(ToolCall::new(
            AgentRef::profile("support"),
            "refund",
            json!({"amount": 11})
        ))
        .await,
        ToolResponse::Held(_)
    ));
    assert_eq!(s.tool.runs(), 0);
}

#[tokio::test]
async fn r45_a_grant_from_the_page_never_loosens_a_deny() {
    let gov = governance_tweaked("token", |c| {
        c["policy"] = json!({"rules": [{"effect": "deny", "tool": "refund", "when": {"amount": {"gt": 100}}, "reason": "too big"}]});
    });
    let s = start_gov(gov, std::time::Duration::from_millis(100)).await;
    s.handle.set_grants(s.inbox.store().grant_store().unwrap());
    let c = signed_in(&s, ALICE).await;
    let id = s.hold_refund(json!({"amount": 10})).await;
    let page = c.get(&format!("/calls/{id}")).await;
    let (_, r) = post_grant_confirmed(&c, &id, &grant_fields(&page.body, &[("when", "")])).await;
    assert_eq!(r.status, 303, "{}", r.body);
    match s
        .send(ToolCall::new(
            AgentRef::profile("support"),
            "refund",
            json!({"amount": 500}),
        ))
        .await
    {
        ToolResponse::Refused(r) => assert_eq!(r.code, RefusalCode::Denied, "{r:?}"),
        other => panic!("R45: a grant never turns a deny into a run, got {other:?}"),
    }
    assert_eq!(s.tool.runs(), 0);
    assert_eq!(
        s.inbox.store().grants().await.unwrap()[0].uses,
        0,
        "nothing spent"
    );
}
