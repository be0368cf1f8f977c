//! The inbox file deleted or replaced while a process has it open (issue 20 item 12, R26):
//! an answer never goes into a file nobody reads again.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a test: a failed step fails it"
)]

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use toolgate_inbox::HeldCalls;
use toolgate_inbox::{Answer, AnswerError, InboxErrorKind, SqliteInbox, SqliteOptions, State};
use toolgate_inbox_suite::held;

const HOUR: Duration = Duration::from_secs(3600);

fn remove_with_sidecars(path: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let p = format!("{}{suffix}", path.display());
        let _ = std::fs::remove_file(p);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r26_an_answer_after_the_inbox_file_was_deleted_is_refused_and_no_new_file_appears() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.db");
    let store = SqliteInbox::open(&path, SqliteOptions::default()).unwrap();
    let c = held(json!({"n": 1}), HOUR);
    store.hold(c.clone()).await.unwrap();
    remove_with_sidecars(&path);
    let e = store
        .answer(&c.interaction_id, Answer::approved_by("alice"))
        .await
        .unwrap_err();
    match &e {
        AnswerError::Store(e) => {
            assert_eq!(e.kind(), InboxErrorKind::Unavailable, "{e}");
            assert!(e.to_string().contains("was deleted or moved away"), "{e}");
        }
        other => panic!("R26: an answer to a deleted inbox file is refused, got {other:?}"),
    }
    // Reads are refused too (the page shows the error, not a stale inbox) …
    assert!(store.list(None).await.is_err());
    // … and no empty inbox is created in its place.
    assert!(
        !path.exists(),
        "a deleted inbox is not silently created anew"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r26_an_inbox_file_replaced_by_another_is_reopened_and_answers_land_in_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.db");
    let store = SqliteInbox::open(&path, SqliteOptions::default()).unwrap();
    let old = held(json!({"n": 1}), HOUR);
    store.hold(old.clone()).await.unwrap();
    // Another inbox file (a restored backup, say) is moved over the path.
    let other_path = dir.path().join("restored.db");
    let new = held(json!({"n": 2}), HOUR);
    {
        let other = SqliteInbox::open(&other_path, SqliteOptions::default()).unwrap();
        other.hold(new.clone()).await.unwrap();
    }
    remove_with_sidecars(&path);
    std::fs::rename(&other_path, &path).unwrap();
    // The call held in the old file is not in the file at the path: refused, not lost.
    let e = store
        .answer(&old.interaction_id, Answer::approved_by("alice"))
        .await
        .unwrap_err();
    assert!(matches!(e, AnswerError::UnknownId(_)), "{e:?}");
    // The call in the file at the path is answered there, where every reader finds it.
    store
        .answer(&new.interaction_id, Answer::approved_by("alice"))
        .await
        .unwrap();
    let reader = SqliteInbox::open(&path, SqliteOptions::default().create(false)).unwrap();
    assert_eq!(
        reader
            .get(&new.interaction_id)
            .await
            .unwrap()
            .unwrap()
            .state,
        State::Approved,
        "R26: the answer is in the file at the path"
    );
    assert!(reader.get(&old.interaction_id).await.unwrap().is_none());
}
