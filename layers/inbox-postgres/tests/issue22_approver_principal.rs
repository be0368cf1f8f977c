//! Issue 22 (R47): an answer keeps the approver's verified principal in PostgreSQL, and an
//! inbox created before the store kept it gains the columns on connect, its answers intact.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;

use std::time::Duration;

use common::*;
use serde_json::json;
use toolgate_core::Principal;
use toolgate_inbox::Answer;
use toolgate_inbox::HeldCalls;
use toolgate_inbox_suite::held;

#[tokio::test]
async fn issue22_an_inbox_without_the_principal_columns_gains_them_and_keeps_its_answers() {
    let url = require_pg!();
    let schema = fresh_schema();
    let old = held(json!({"n": 1}), Duration::from_secs(3600));
    let new = held(json!({"n": 2}), Duration::from_secs(3600));
    {
        let store = connect(&url, &schema, "gate").await;
        store.hold(old.clone()).await.unwrap();
        store
            .answer(&old.interaction_id, Answer::approved_by("alice"))
            .await
            .unwrap();
    }
    // The inbox as the program before this one left it.
    let client = raw(&url, &schema).await;
    client
        .batch_execute(
            "ALTER TABLE held_calls DROP COLUMN approver_subject; \
             ALTER TABLE held_calls DROP COLUMN approver_issuer;",
        )
        .await
        .unwrap();
    let store = connect(&url, &schema, "gate").await;
    let r = store.get(&old.interaction_id).await.unwrap().unwrap();
    assert_eq!(r.approver.as_deref(), Some("alice"));
    assert_eq!(r.approver_principal, None, "answered before: a name only");
    store.hold(new.clone()).await.unwrap();
    let p = Principal {
        subject: "00u-bob".into(),
        issuer: "https://idp.example/".into(),
    };
    store
        .answer(
            &new.interaction_id,
            Answer::approved_by("bob").principal(Some(p.clone())),
        )
        .await
        .unwrap();
    let r = store.get(&new.interaction_id).await.unwrap().unwrap();
    assert_eq!(r.approver_principal, Some(p));
    let n: i64 = client
        .query_one(
            "SELECT count(*) FROM information_schema.columns WHERE table_schema = $1 \
             AND table_name = 'held_calls' AND column_name IN ('approver_subject', 'approver_issuer')",
            &[&schema],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 2);
    drop(store);
    drop_schemas(&url, &[schema]).await;
}
