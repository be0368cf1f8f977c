//! The page over an inbox file deleted while it serves it (issue 20 item 12, R26): an
//! approval is refused with a clear error, never written into the deleted file and lost.
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

#[tokio::test]
async fn r26_an_approval_on_the_page_after_the_inbox_file_was_deleted_is_refused_not_lost() {
    let s = start("token").await;
    let c = signed_in(&s, ALICE).await;
    let id = s.hold_refund(json!({"order": 12})).await;
    let page = c.get(&format!("/calls/{id}")).await.body;
    let fields = [
        ("csrf", field(&page, "csrf").unwrap()),
        ("input_hash", field(&page, "input_hash").unwrap()),
        ("definition_hash", field(&page, "definition_hash").unwrap()),
        ("idempotency_key", field(&page, "idempotency_key").unwrap()),
        ("decision", String::from("approve")),
    ];
    let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", s.db.display()));
    }
    let r = c.post(&format!("/calls/{id}/answer"), &fields).await;
    assert_eq!(r.status, 503, "R26: the answer is refused: {}", r.body);
    assert!(
        r.body.contains("was deleted or moved away"),
        "R26: the refusal says why: {}",
        r.body
    );
    assert!(!s.db.exists(), "no empty inbox appears in its place");
}
