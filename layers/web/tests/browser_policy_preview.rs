//! The policy tab's preview in a real browser (Debian's `chromium` through `chromium-driver`,
//! as `browser.rs` drives it): a rule filled in, **Preview** shows what the change would do to
//! the calls the audit file recorded (R46) and saves nothing, then **Save policy** saves it.
//! A screenshot goes to `target/screenshots/policy-preview.png`.
//!
//! Without `chromium` and `chromedriver` the test skips loudly, except under `CI=true`, where
//! it fails.
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
#[path = "support/recorded.rs"]
mod recorded;

use std::path::Path;

use browser_kit::*;
use common::*;
use fantoccini::Locator;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_r46_preview_a_policy_change_then_save_it() {
    let (driver, binary) = match chromedriver() {
        Ok(d) => d,
        Err(why) => {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("CI=true and the browser test cannot run: {why}");
            }
            eprintln!(
                "\n*** SKIPPED browser_r46_preview_a_policy_change_then_save_it: {why} ***\n"
            );
            return;
        }
    };
    let (s, _dir) = recorded::recorded().await;
    let c = browser(&driver, &binary).await;

    c.goto(&format!("{}/login", s.base)).await.unwrap();
    wait_for(&c, "#token").await.send_keys(ALICE).await.unwrap();
    click(&c, "#sign-in").await;
    assert_eq!(text(&c, "#who").await, "alice");

    click(&c, "#tab-policy").await;
    click(&c, "#add-rule").await;
    wait_for(&c, "#in-effect")
        .await
        .select_by_value("deny")
        .await
        .unwrap();
    wait_for(&c, "#in-tool")
        .await
        .send_keys("lookup")
        .await
        .unwrap();
    wait_for(&c, "#in-when")
        .await
        .send_keys(r#"{"q": {"gt": 2}}"#)
        .await
        .unwrap();
    click(&c, "#preview-rule").await;
    assert_eq!(
        text(&c, "#preview-summary").await,
        "This change over the last 8 recorded calls: 3 would now be refused, 0 asked, 0 run."
    );
    assert_eq!(text(&c, "#preview-refused").await, "3");
    let rows = c
        .find_all(Locator::Css("#preview-changes tbody tr"))
        .await
        .unwrap();
    assert_eq!(rows.len(), 3);
    let png = c.screenshot().await.unwrap();
    let shots = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    std::fs::write(shots.join("policy-preview.png"), png).unwrap();
    assert!(
        s.inbox.store().get_policy().await.unwrap().is_none(),
        "a preview saves nothing"
    );

    // The panel still holds the rule: save it.
    click(&c, "#save-rule").await;
    assert!(
        text_when(&c, "#banner", |t| t.starts_with("Saved"))
            .await
            .starts_with("Saved")
    );
    let stored = s.inbox.store().get_policy().await.unwrap().unwrap();
    assert!(stored.body.contains("lookup"), "{}", stored.body);
    c.close().await.unwrap();
}
