//! Issue 24: an inbox created before the PostgreSQL store kept edited approvals, execution
//! targets and the nonces of signed callbacks gains `held_edits`, `target_json` and
//! `seen_nonces` on connect, its calls intact; the calls held after keep their target, an
//! edited approval is recorded and a nonce is taken once.
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
use toolgate_core::ExecutionTarget;
use toolgate_inbox::{Answer, EditedInput, State};
use toolgate_inbox::{HeldCalls, Nonces};
use toolgate_inbox_suite::held;

#[tokio::test]
async fn issue24_an_inbox_without_edits_and_targets_gains_them_and_keeps_its_calls() {
    let url = require_pg!();
    let schema = fresh_schema();
    let old = held(json!({"cmd": "ls"}), Duration::from_secs(3600));
    {
        let store = connect(&url, &schema, "gate").await;
        store.hold(old.clone()).await.unwrap();
    }
    // The inbox as the program before this one left it.
    let client = raw(&url, &schema).await;
    client
        .batch_execute(
            "DROP TABLE held_edits; DROP TABLE seen_nonces; \
             ALTER TABLE held_calls DROP COLUMN target_json;",
        )
        .await
        .unwrap();
    let store = connect(&url, &schema, "gate").await;
    let r = store.get(&old.interaction_id).await.unwrap().unwrap();
    assert_eq!(r.state, State::Pending);
    assert_eq!(r.call.target, None, "held before: no target");
    assert_eq!(r.call.input_json, old.input_json);

    let mut new = held(json!({"cmd": "make"}), Duration::from_secs(3600));
    let target = ExecutionTarget {
        host: Some("build-7".into()),
        working_directory: Some("/srv".into()),
        sandbox: None,
    };
    new.target = Some(target.clone());
    store.hold(new.clone()).await.unwrap();
    assert_eq!(
        store
            .get(&new.interaction_id)
            .await
            .unwrap()
            .unwrap()
            .call
            .target,
        Some(target)
    );
    // The call held before the upgrade is approved with edits.
    let edit = EditedInput::new(&json!({"cmd": "ls -l"})).unwrap();
    store
        .answer_edited(
            &old.interaction_id,
            Answer::approve("k-1", "alice"),
            edit.clone(),
        )
        .await
        .unwrap();
    let kept = store.edit_of(&old.interaction_id).await.unwrap().unwrap();
    assert_eq!(kept.original_input_hash, old.input_hash);
    assert_eq!(
        store
            .get(&old.interaction_id)
            .await
            .unwrap()
            .unwrap()
            .call
            .input_hash,
        edit.input_hash
    );
    let n: i64 = client
        .query_one(
            "SELECT (SELECT count(*) FROM information_schema.columns WHERE table_schema = $1 \
             AND table_name = 'held_calls' AND column_name = 'target_json') \
             + (SELECT count(*) FROM pg_tables WHERE schemaname = $1 \
             AND tablename IN ('held_edits', 'seen_nonces'))",
            &[&schema],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 3);
    let now = toolgate_inbox::Timestamp::now();
    let until = now.saturating_add(Duration::from_secs(600));
    assert!(store.take_nonce("slack:n", until, now).await.unwrap());
    assert!(!store.take_nonce("slack:n", until, now).await.unwrap());
    let version: String = client
        .query_one(
            "SELECT value FROM toolgate_inbox_meta WHERE key = 'schema_version'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, "2", "no schema version of its own");
    // A second connect finds them and changes nothing.
    drop(connect(&url, &schema, "gate-2").await);
    drop(store);
    drop_schemas(&url, &[schema]).await;
}
