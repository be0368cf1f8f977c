//! Issue 24: a SQLite inbox file written before the store kept execution targets gains the
//! `target_json` column on open (and `held_edits` with the first edited approval), its
//! calls intact.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::time::Duration;

use serde_json::json;
use toolgate_core::ExecutionTarget;
use toolgate_inbox::HeldCalls;
use toolgate_inbox::{Answer, EditedInput, SqliteInbox, SqliteOptions, State};
use toolgate_inbox_suite::held;

#[tokio::test]
async fn issue24_an_inbox_file_without_targets_and_edits_gains_them_and_keeps_its_calls() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.db");
    let old = held(json!({"cmd": "ls"}), Duration::from_secs(3600));
    {
        let store = SqliteInbox::open(&path, SqliteOptions::default()).unwrap();
        store.hold(old.clone()).await.unwrap();
    }
    {
        // The file as the program before this one left it.
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "DROP TABLE IF EXISTS held_edits; ALTER TABLE held_calls DROP COLUMN target_json;",
        )
        .unwrap();
    }
    let store = SqliteInbox::open(&path, SqliteOptions::default()).unwrap();
    let r = store.get(&old.interaction_id).await.unwrap().unwrap();
    assert_eq!(r.state, State::Pending);
    assert_eq!(r.call.target, None, "held before: no target");
    let mut new = held(json!({"cmd": "make"}), Duration::from_secs(3600));
    let target = ExecutionTarget {
        sandbox: Some("bwrap".into()),
        ..Default::default()
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
    let edit = EditedInput::new(&json!({"cmd": "ls -l"})).unwrap();
    store
        .answer_edited(&old.interaction_id, Answer::approve("k-1", "alice"), edit)
        .await
        .unwrap();
    let kept = store.edit_of(&old.interaction_id).await.unwrap().unwrap();
    assert_eq!(kept.original_input_hash, old.input_hash);
    drop(store);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let n: i64 = conn
        .query_row(
            "SELECT (SELECT count(*) FROM pragma_table_info('held_calls') WHERE name = 'target_json') \
             + (SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'held_edits')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(n, 2);
}
