//! R46: the policy tab previews a change before it is saved — the calls the configuration's
//! audit file recorded (by a real governed stack) replayed under the policy in force and the
//! proposed one: "this change over the last N recorded calls: X would now be refused, Y
//! asked, Z run". Nothing is saved by a preview.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;
#[path = "support/recorded.rs"]
mod recorded;

use common::*;
use recorded::recorded;

#[tokio::test]
async fn r46_the_policy_tab_counts_what_a_change_would_refuse_ask_and_run_before_a_save() {
    let (s, _dir) = recorded().await;
    let c = signed_in(&s, ALICE).await;
    let panel = c.get("/policy?edit=new").await.body;
    assert!(panel.contains("id=\"preview-rule\""), "{panel}");
    let csrf = c.csrf().await;

    // A rule: deny look-ups past q 2.
    let r = c
        .post(
            "/policy/rule",
            &[
                ("csrf", &csrf),
                ("updated_at", ""),
                ("index", "new"),
                ("effect", "deny"),
                ("tool", "lookup"),
                ("when", r#"{"q": {"gt": 2}}"#),
                ("preview", "1"),
            ],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.body.contains(
            "This change over the last 8 recorded calls: 3 would now be refused, 0 asked, 0 run."
        ),
        "{}",
        r.body
    );
    assert!(r.body.contains("id=\"preview-changes\""));
    assert!(
        r.body.contains("refused denied by rules[0] (deny)"),
        "{}",
        r.body
    );
    // The panel keeps the rule for the save; nothing was saved.
    assert!(r.body.contains("id=\"save-rule\""));
    assert!(r.body.contains("value=\"lookup\""), "{}", r.body);
    assert!(s.inbox.store().get_policy().await.unwrap().is_none());

    // The whole document: deny by default, allow look-ups — the held refunds would be
    // refused, and asking the look-ups is counted as asked.
    let r = c
        .post(
            "/policy/whole",
            &[
                ("csrf", &csrf),
                ("updated_at", ""),
                (
                    "document",
                    r#"{"default": "deny", "rules": [{"effect": "ask", "tool": "lookup", "when": {"q": {"lt": 1}}}, {"effect": "allow", "tool": "lookup"}]}"#,
                ),
                ("preview", "1"),
            ],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.body.contains(
            "This change over the last 8 recorded calls: 2 would now be refused, 1 asked, 0 run."
        ),
        "{}",
        r.body
    );
    assert!(r.body.contains("<details class=\"whole\" open>"));
    assert!(s.inbox.store().get_policy().await.unwrap().is_none());

    // After a save, the policy in force is the stored one: the same change changes nothing.
    let r = c
        .post(
            "/policy/rule",
            &[
                ("csrf", &csrf),
                ("updated_at", ""),
                ("index", "new"),
                ("effect", "deny"),
                ("tool", "lookup"),
                ("when", r#"{"q": {"gt": 2}}"#),
            ],
        )
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let stored = s.inbox.store().get_policy().await.unwrap().unwrap();
    let r = c
        .post(
            "/policy/whole",
            &[
                ("csrf", &csrf),
                ("updated_at", &stored.updated_at),
                ("document", &stored.body),
                ("preview", "1"),
            ],
        )
        .await;
    assert!(
        r.body.contains(
            "This change over the last 8 recorded calls: 0 would now be refused, 0 asked, 0 run."
        ),
        "{}",
        r.body
    );

    // An invalid change is refused as a save would be, with its errors.
    let r = c
        .post(
            "/policy/whole",
            &[
                ("csrf", &csrf),
                ("updated_at", &stored.updated_at),
                ("document", r#"{"rules": [{"effect": "maybe"}]}"#),
                ("preview", "1"),
            ],
        )
        .await;
    assert_eq!(r.status, 422, "{}", r.body);
    assert!(r.body.contains("rules[0].effect"), "{}", r.body);
}

#[tokio::test]
async fn r46_without_an_audit_file_there_is_no_preview() {
    let s = start("token").await;
    let c = signed_in(&s, ALICE).await;
    let panel = c.get("/policy?edit=new").await.body;
    assert!(panel.contains("id=\"save-rule\""));
    assert!(!panel.contains("id=\"preview-rule\""), "{panel}");
}
