//! Answering from Slack (issue 24 item 6): the webhook post carries Block Kit with Approve
//! and Deny bound to the card's hashes, and `POST /v1/callbacks/slack` takes a press only
//! with a valid signature (under a signing secret this test makes), a fresh timestamp, never
//! twice, from a Slack user mapped to an approver with rights over the tool.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use toolgate_core::{AgentRef, ToolCall};
use toolgate_inbox::State;
use toolgate_web::slack::signature;

struct Slack {
    s: Server,
    secret: String,
    _dir: tempfile::TempDir,
}

async fn slack_server(webhook: Option<String>) -> Slack {
    let dir = tempfile::tempdir().unwrap();
    let secret = toolgate_core::id::random_hex(32).unwrap();
    let file = dir.path().join("slack.secret");
    std::fs::write(&file, format!("{secret}\n")).unwrap();
    let gov = governance_tweaked("token", |c| {
        c["approvers"]["slack"] = json!({
            "signing_secret_file": file,
            "users": [
                {"slack_user": "U_ALICE", "approver": "alice"},
                {"slack_user": "U_BOB", "approver": "bob"}
            ]
        });
        if let Some(url) = webhook {
            c["approvers"]["webhook"] = json!(url);
        }
    });
    let s = start_gov(gov, Duration::from_millis(50)).await;
    Slack {
        s,
        secret,
        _dir: dir,
    }
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn body(user: &str, action: &str, value: &str, ts: &str) -> String {
    let payload = json!({
        "type": "block_actions",
        "user": {"id": user},
        "actions": [{"action_id": action, "value": value, "action_ts": ts}]
    })
    .to_string();
    format!("payload={}", enc(&payload))
}

async fn press(sl: &Slack, body: &str, ts: i64, secret: &str) -> (u16, Value) {
    let ts = ts.to_string();
    let sig = signature(secret.as_bytes(), &ts, body.as_bytes());
    send(sl, body, Some(&ts), Some(&sig)).await
}

async fn send(sl: &Slack, body: &str, ts: Option<&str>, sig: Option<&str>) -> (u16, Value) {
    let mut r = reqwest::Client::new()
        .post(format!("{}/v1/callbacks/slack", sl.s.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body.to_owned());
    if let Some(ts) = ts {
        r = r.header("x-slack-request-timestamp", ts);
    }
    if let Some(sig) = sig {
        r = r.header("x-slack-signature", sig);
    }
    let res = r.send().await.unwrap();
    let status = res.status().as_u16();
    (
        status,
        serde_json::from_str(&res.text().await.unwrap()).unwrap_or(Value::Null),
    )
}

fn value_of(r: &toolgate_inbox::HeldRecord) -> String {
    format!(
        "{}|{}|{}",
        r.id(),
        r.call.input_hash,
        r.call.definition_hash
    )
}

#[tokio::test]
async fn issue24_a_signed_press_answers_as_the_mapped_approver_once() {
    let sl = slack_server(None).await;
    let id = sl.s.hold_refund(json!({"order": 5})).await;
    let rec = sl.s.inbox.store().get(&id).await.unwrap().unwrap();
    let b = body("U_ALICE", "approve", &value_of(&rec), "1700.1");
    let t = now();
    let (status, reply) = press(&sl, &b, t, &sl.secret).await;
    assert_eq!(status, 200, "{reply}");
    assert!(
        reply["text"]
            .as_str()
            .unwrap()
            .contains("Approved by alice"),
        "{reply}"
    );
    let after = sl.s.inbox.store().get(&id).await.unwrap().unwrap();
    assert_eq!(after.state, State::Approved);
    assert_eq!(after.approver.as_deref(), Some("alice"));
    // The very same signed request again: a replay, refused.
    let sig = signature(sl.secret.as_bytes(), &t.to_string(), b.as_bytes());
    let (status, reply) = send(&sl, &b, Some(&t.to_string()), Some(&sig)).await;
    assert_eq!(
        (status, reply["code"].clone()),
        (409, json!("replayed")),
        "{reply}"
    );
}

#[tokio::test]
async fn issue24_a_forged_stale_or_unsigned_callback_is_refused_and_changes_nothing() {
    let sl = slack_server(None).await;
    let id = sl.s.hold_refund(json!({"order": 6})).await;
    let rec = sl.s.inbox.store().get(&id).await.unwrap().unwrap();
    let b = body("U_ALICE", "approve", &value_of(&rec), "1.1");
    // Another secret's signature.
    let (status, _) = press(&sl, &b, now(), "not-the-secret").await;
    assert_eq!(status, 401);
    // Six minutes old, or six minutes ahead.
    let (status, r) = press(&sl, &b, now() - 360, &sl.secret).await;
    assert_eq!(status, 401, "{r}");
    assert!(r["message"].as_str().unwrap().contains("timestamp"), "{r}");
    let (status, _) = press(&sl, &b, now() + 360, &sl.secret).await;
    assert_eq!(status, 401);
    // No signature, no timestamp.
    assert_eq!(send(&sl, &b, Some(&now().to_string()), None).await.0, 401);
    assert_eq!(send(&sl, &b, None, Some("v0=00")).await.0, 401);
    // The body changed after signing.
    let t = now().to_string();
    let sig = signature(sl.secret.as_bytes(), &t, b.as_bytes());
    let tampered = body("U_ALICE", "approve", &value_of(&rec), "1.2");
    assert_eq!(send(&sl, &tampered, Some(&t), Some(&sig)).await.0, 401);
    assert_eq!(
        sl.s.inbox.store().get(&id).await.unwrap().unwrap().state,
        State::Pending
    );
}

#[tokio::test]
async fn issue24_a_press_is_checked_for_the_mapping_the_rights_and_the_hashes() {
    let sl = slack_server(None).await;
    let id = sl.s.hold_refund(json!({"order": 7})).await;
    let rec = sl.s.inbox.store().get(&id).await.unwrap().unwrap();
    // Each refusal is Slack's 200 with an ephemeral message in toolgate's words (a 403 or
    // 409 would show in Slack as a generic failure; issue 35 item 3).
    let told = |status: u16, r: &Value, words: &str| {
        assert_eq!(status, 200, "{r}");
        assert_eq!(r["response_type"], "ephemeral", "{r}");
        assert_eq!(r["replace_original"], false, "{r}");
        assert!(r["text"].as_str().unwrap().contains(words), "{words}: {r}");
    };
    // A Slack user nobody mapped.
    let (status, r) = press(
        &sl,
        &body("U_EVE", "approve", &value_of(&rec), "1"),
        now(),
        &sl.secret,
    )
    .await;
    told(status, &r, "not mapped to an approver");
    // Bob may answer only github's calls.
    let (status, r) = press(
        &sl,
        &body("U_BOB", "approve", &value_of(&rec), "2"),
        now(),
        &sl.secret,
    )
    .await;
    told(status, &r, "bob");
    // Hashes other than the held call's (R35).
    let stale = format!("{}|sha256:00|{}", id, rec.call.definition_hash);
    let (status, r) = press(
        &sl,
        &body("U_ALICE", "approve", &stale, "3"),
        now(),
        &sl.secret,
    )
    .await;
    told(status, &r, "input");
    // Not a button press.
    let (status, _) = press(&sl, "payload=%7B%7D", now(), &sl.secret).await;
    assert_eq!(status, 400);
    assert_eq!(
        sl.s.inbox.store().get(&id).await.unwrap().unwrap().state,
        State::Pending
    );
    // Bob denies a github call from Slack: recorded under his name.
    let issue =
        sl.s.hold(ToolCall::new(
            AgentRef::profile("support"),
            "github__create_issue",
            json!({"title": "x"}),
        ))
        .await;
    let rec = sl.s.inbox.store().get(&issue).await.unwrap().unwrap();
    let (status, r) = press(
        &sl,
        &body("U_BOB", "deny", &value_of(&rec), "4"),
        now(),
        &sl.secret,
    )
    .await;
    assert_eq!(status, 200, "{r}");
    let after = sl.s.inbox.store().get(&issue).await.unwrap().unwrap();
    assert_eq!(after.state, State::Denied);
    assert_eq!(after.approver.as_deref(), Some("bob"));
}

#[tokio::test]
async fn issue24_the_webhook_post_is_a_block_kit_message_with_approve_and_deny() {
    let receiver = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", receiver.local_addr().unwrap());
    let sl = slack_server(Some(url)).await;
    assert_eq!(sl.s.client().get("/login").await.status, 200);
    let id = sl.s.hold_refund(json!({"order": "<b>&"})).await;
    let (mut conn, _) = tokio::time::timeout(Duration::from_secs(60), receiver.accept())
        .await
        .unwrap()
        .unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0_u8; 8192];
    let text = loop {
        let n = conn.read(&mut chunk).await.unwrap();
        buf.extend_from_slice(&chunk[..n]);
        let t = String::from_utf8_lossy(&buf).into_owned();
        if let Some(i) = t.find("\r\n\r\n")
            && serde_json::from_str::<Value>(&t[i + 4..]).is_ok()
        {
            break t[i + 4..].to_owned();
        }
        assert!(n > 0, "the post ended early: {t}");
    };
    conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let post: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(post["id"], id);
    assert_eq!(post["text"], "Approve refund?");
    let blocks = post["blocks"].as_array().unwrap();
    assert_eq!(blocks[0]["type"], "header");
    let input = blocks[2]["text"]["text"].as_str().unwrap();
    assert!(input.contains("&lt;b&gt;&amp;"), "mrkdwn escaped: {input}");
    let actions = &blocks.last().unwrap()["elements"];
    let rec = sl.s.inbox.store().get(&id).await.unwrap().unwrap();
    assert_eq!(actions[0]["action_id"], "approve");
    assert_eq!(actions[1]["action_id"], "deny");
    assert_eq!(
        actions[0]["value"],
        value_of(&rec),
        "bound to the card's hashes"
    );
    // Pressing that very button answers the call.
    let b = body(
        "U_ALICE",
        "approve",
        actions[0]["value"].as_str().unwrap(),
        "9.9",
    );
    let (status, r) = press(&sl, &b, now(), &sl.secret).await;
    assert_eq!(status, 200, "{r}");
}
