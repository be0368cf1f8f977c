//! Issue 24: the Slack replay guard is kept in the inbox, so that two page servers on one
//! inbox (replicas behind a load balancer) and a server started again each refuse a signed
//! callback another already took.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use serde_json::{Value, json};
use toolgate_inbox::{Inbox, InboxStore, SqliteInbox, SqliteOptions, State};
use toolgate_web::slack::signature;

fn gov(secret_file: &std::path::Path) -> toolgate_engine::Governance {
    governance_tweaked("token", |c| {
        c["approvers"]["slack"] = json!({
            "signing_secret_file": secret_file,
            "users": [{"slack_user": "U_ALICE", "approver": "alice"}]
        });
    })
}

/// Another page server on `first`'s inbox file.
async fn replica(first: &Server, secret_file: &std::path::Path) -> Server {
    let open = || SqliteInbox::open(&first.db, SqliteOptions::default()).unwrap();
    let page: Arc<dyn InboxStore> = Arc::new(open());
    start_stores(
        gov(secret_file),
        Duration::from_millis(50),
        Inbox::new(open()),
        page,
        None,
        tempfile::tempdir().unwrap(),
        first.db.clone(),
    )
    .await
}

async fn send(base: &str, body: &str, ts: &str, sig: &str) -> (u16, Value) {
    let res = reqwest::Client::new()
        .post(format!("{base}/v1/callbacks/slack"))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("x-slack-request-timestamp", ts)
        .header("x-slack-signature", sig)
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    (
        status,
        serde_json::from_str(&res.text().await.unwrap()).unwrap_or(Value::Null),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue24_a_slack_callback_taken_by_one_replica_is_refused_by_the_other_and_after_a_restart()
{
    let dir = tempfile::tempdir().unwrap();
    let secret = toolgate_core::id::random_hex(32).unwrap();
    let file = dir.path().join("slack.secret");
    std::fs::write(&file, format!("{secret}\n")).unwrap();
    let a = start_gov(gov(&file), Duration::from_millis(50)).await;
    let b = replica(&a, &file).await;
    let id = a.hold_refund(json!({"order": 5})).await;
    let rec = a.inbox.store().get(&id).await.unwrap().unwrap();
    let value = format!(
        "{}|{}|{}",
        rec.id(),
        rec.call.input_hash,
        rec.call.definition_hash
    );
    // A denial, so that the replay would change nothing the state could show: only the
    // guard refuses it.
    let payload = json!({
        "type": "block_actions",
        "user": {"id": "U_ALICE"},
        "actions": [{"action_id": "deny", "value": value, "action_ts": "1700.1"}]
    })
    .to_string();
    let body = format!("payload={}", enc(&payload));
    let ts = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        .to_string();
    let sig = signature(secret.as_bytes(), &ts, body.as_bytes());
    let (status, reply) = send(&a.base, &body, &ts, &sig).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(
        a.inbox.store().get(&id).await.unwrap().unwrap().state,
        State::Denied
    );
    // The same signed request at the other replica: refused as a replay.
    let (status, reply) = send(&b.base, &body, &ts, &sig).await;
    assert_eq!(
        (status, reply["code"].clone()),
        (409, json!("replayed")),
        "issue 24: the replica refuses what the other took: {reply}"
    );
    // A server started again on the inbox: refused too.
    drop(b);
    let c = replica(&a, &file).await;
    let (status, reply) = send(&c.base, &body, &ts, &sig).await;
    assert_eq!(
        (status, reply["code"].clone()),
        (409, json!("replayed")),
        "issue 24: a restarted process refuses it: {reply}"
    );
}
