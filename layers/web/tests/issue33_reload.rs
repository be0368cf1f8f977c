//! Issue 33 item 4: a reload reaches every surface. `toolgate serve` on SIGHUP replaces the
//! configuration in force whole ([`toolgate_web::ApproversInForce::replace_configuration`]);
//! from the next request, callback and stream event on, a removed management key answers
//! nothing, a removed Slack user approves nothing, an approver narrowed to lookups answers
//! and grants no refund (on the page, the API or Slack), and their open `/events` stream
//! stops carrying refunds — inputs included.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use serde_json::{Value, json};
use toolgate_inbox::State;
use toolgate_web::slack::signature;

const ALICE_KEY: &str = "tgk-alice-0123456789";

struct Reloading {
    s: Server,
    secret: String,
    file: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

/// The configuration: alice answers everything (before) or only lookups (after); her
/// management key and her Slack mapping are there before and gone after.
fn configuration(file: &std::path::Path, before: bool) -> toolgate_engine::Governance {
    governance_tweaked("token", |c| {
        c["approvers"]["slack"] = json!({
            "signing_secret_file": file,
            "users": if before {
                json!([{"slack_user": "U_ALICE", "approver": "alice"}, {"slack_user": "U_BOB", "approver": "bob"}])
            } else {
                json!([{"slack_user": "U_BOB", "approver": "bob"}])
            }
        });
        c["approvers"]["api_keys"] = if before {
            json!([{"name": "alice-bot", "key_sha256": toolgate_web::hash_token(ALICE_KEY), "scopes": ["approvals"], "approver": "alice"}])
        } else {
            json!([])
        };
        if !before {
            c["approvers"]["people"][0]["tools"] = json!([{"tool": "lookup"}]);
        }
    })
}

async fn start_reloading() -> Reloading {
    let dir = tempfile::tempdir().unwrap();
    let secret = toolgate_core::id::random_hex(32).unwrap();
    let file = dir.path().join("slack.secret");
    std::fs::write(&file, format!("{secret}\n")).unwrap();
    let s = start_gov(configuration(&file, true), Duration::from_millis(50)).await;
    s.handle.set_grants(s.inbox.store().grant_store().unwrap());
    Reloading {
        s,
        secret,
        file,
        _dir: dir,
    }
}

fn reload(r: &Reloading) {
    r.s.in_force
        .replace_configuration(Arc::new(configuration(&r.file, false)))
        .unwrap();
}

async fn api_answer(r: &Reloading, id: &str) -> u16 {
    reqwest::Client::new()
        .post(format!("{}/v1/interactions/{id}/answer", r.s.base))
        .header("authorization", format!("Bearer {ALICE_KEY}"))
        .header("content-type", "application/json")
        .body(json!({"approved": true}).to_string())
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

async fn slack_press(r: &Reloading, user: &str, id: &str) -> (u16, Value) {
    let rec = r.s.inbox.store().get(id).await.unwrap().unwrap();
    let value = format!("{id}|{}|{}", rec.call.input_hash, rec.call.definition_hash);
    let payload = json!({
        "type": "block_actions",
        "user": {"id": user},
        "actions": [{"action_id": "approve", "value": value, "action_ts": "1.1"}]
    })
    .to_string();
    let body = format!("payload={}", enc(&payload));
    let ts = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        .to_string();
    let sig = signature(r.secret.as_bytes(), &ts, body.as_bytes());
    let res = reqwest::Client::new()
        .post(format!("{}/v1/callbacks/slack", r.s.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("x-slack-request-timestamp", ts)
        .header("x-slack-signature", sig)
        .body(body)
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
async fn issue33_a_reload_revokes_the_key_the_slack_user_and_the_narrowed_rights_everywhere() {
    let r = start_reloading().await;
    // Before: alice's key answers (a denial, so nothing runs).
    let first = r.s.hold_refund(json!({"order": 1})).await;
    let denied = reqwest::Client::new()
        .post(format!("{}/v1/interactions/{first}/answer", r.s.base))
        .header("authorization", format!("Bearer {ALICE_KEY}"))
        .header("content-type", "application/json")
        .body(json!({"approved": false}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(denied.status().as_u16(), 200);
    let alice = signed_in(&r.s, ALICE).await;

    reload(&r);
    let held = r.s.hold_refund(json!({"order": 2, "amount": 5000})).await;

    // The management key a reload removed: 401, nothing answered.
    assert_eq!(api_answer(&r, &held).await, 401);
    // The Slack user whose mapping a reload removed: refused.
    let (status, reply) = slack_press(&r, "U_ALICE", &held).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["response_type"], "ephemeral", "{reply}");
    assert!(
        reply["text"]
            .as_str()
            .unwrap()
            .contains("not mapped to an approver"),
        "{reply}"
    );
    // Alice, narrowed to lookups, on the page: she may not approve the refund, nor save
    // a grant from its card.
    let page = alice.get(&format!("/calls/{held}")).await;
    assert_ne!(page.status, 200, "{}", page.body);
    let csrf = alice.csrf().await;
    let rec = r.s.inbox.store().get(&held).await.unwrap().unwrap();
    let answer = alice
        .post(
            &format!("/calls/{held}/answer"),
            &[
                ("csrf", csrf.as_str()),
                ("decision", "approve"),
                ("input_hash", rec.call.input_hash.as_str()),
                ("definition_hash", rec.call.definition_hash.as_str()),
                ("idempotency_key", "k-0"),
            ],
        )
        .await;
    assert_eq!(answer.status, 403, "{}", answer.body);
    let grant = alice
        .post(
            &format!("/calls/{held}/grant"),
            &[
                ("csrf", csrf.as_str()),
                ("idempotency_key", "k-1"),
                ("input_hash", rec.call.input_hash.as_str()),
                ("definition_hash", rec.call.definition_hash.as_str()),
                ("agent", "support"),
                ("tool", "*"),
                ("for", "30d"),
                ("reason", "all of it"),
            ],
        )
        .await;
    assert!(grant.status >= 400, "{} {}", grant.status, grant.body);
    assert!(r.s.inbox.store().grants().await.unwrap().is_empty());

    let after = r.s.inbox.store().get(&held).await.unwrap().unwrap();
    assert_eq!(after.state, State::Pending);
    assert_eq!(r.s.tool.runs(), 0, "nothing ran");
}

/// Reads `added` events' data from a `/events` response until `until`.
async fn added(res: &mut reqwest::Response, until: Instant) -> Vec<String> {
    let mut buf = String::new();
    let mut out = Vec::new();
    while Instant::now() < until {
        let chunk = tokio::time::timeout(Duration::from_millis(200), res.chunk()).await;
        let Ok(Ok(Some(bytes))) = chunk else {
            continue;
        };
        buf.push_str(&String::from_utf8_lossy(&bytes));
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            if block
                .lines()
                .any(|l| l.trim_start_matches("event:").trim() == "added")
            {
                out.push(block);
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue33_an_open_event_stream_follows_the_rights_in_force() {
    let r = start_reloading().await;
    let alice = signed_in(&r.s, ALICE).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut res = reqwest::Client::new()
        .get(format!("{}/events", r.s.base))
        .header("cookie", alice.cookie.clone().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let before = r.s.hold_refund(json!({"order": "before"})).await;
    let seen = added(&mut res, Instant::now() + Duration::from_secs(5)).await;
    assert!(
        seen.iter().any(|b| b.contains(&before)),
        "the stream carries refunds while alice may answer them: {seen:?}"
    );
    reload(&r);
    let after =
        r.s.hold_refund(json!({"order": "secret-after-the-reload"}))
            .await;
    let seen = added(&mut res, Instant::now() + Duration::from_secs(3)).await;
    assert!(
        !seen
            .iter()
            .any(|b| b.contains(&after) || b.contains("secret-after-the-reload")),
        "a narrowed approver's open stream still carries refunds: {seen:?}"
    );
}
