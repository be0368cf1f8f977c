//! Slack, done as Slack expects (issue 35 item 3), against the real server and a receiver on
//! loopback standing where Slack's `response_url` would be: Slack ignores the HTTP reply to a
//! button press, so the message is updated through the press's `response_url` — replaced by
//! its outcome once answered (the buttons gone), a refusal shown to the presser alone as an
//! ephemeral message in toolgate's words — the link button "Open the card" is acknowledged
//! (it was a 400), a `response_url` that is not the configured prefix's is never posted to,
//! and the input's lines are shown as lines.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use toolgate_inbox::State;
use toolgate_web::slack::signature;

/// What a receiver on loopback was posted, each body as JSON.
#[derive(Clone, Default)]
struct Receiver {
    posts: Arc<Mutex<Vec<(String, Value)>>>,
}

impl Receiver {
    /// Listens on loopback; every request is answered 200 and kept (path, body).
    async fn start() -> (Self, String) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}/", listener.local_addr().unwrap());
        let me = Self::default();
        let posts = Arc::clone(&me.posts);
        tokio::spawn(async move {
            loop {
                let Ok((mut conn, _)) = listener.accept().await else {
                    return;
                };
                let posts = Arc::clone(&posts);
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0_u8; 8192];
                    loop {
                        let Ok(n) = conn.read(&mut chunk).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        let text = String::from_utf8_lossy(&buf).into_owned();
                        let Some(end) = text.find("\r\n\r\n") else {
                            continue;
                        };
                        let length = text[..end]
                            .lines()
                            .find_map(|l| {
                                let (k, v) = l.split_once(':')?;
                                k.eq_ignore_ascii_case("content-length")
                                    .then(|| v.trim().parse::<usize>().ok())?
                            })
                            .unwrap_or(0);
                        if buf.len() < end + 4 + length {
                            continue;
                        }
                        let path = text.split_whitespace().nth(1).unwrap_or("").to_owned();
                        let body = serde_json::from_slice(&buf[end + 4..end + 4 + length])
                            .unwrap_or(Value::Null);
                        posts.lock().unwrap().push((path, body));
                        let _ = conn
                            .write_all(
                                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                            )
                            .await;
                        return;
                    }
                });
            }
        });
        (me, base)
    }

    /// Waits (up to 20 s) for `n` posts.
    async fn wait_for(&self, n: usize) -> Vec<(String, Value)> {
        for _ in 0..400 {
            let now = self.posts.lock().unwrap().clone();
            if now.len() >= n {
                return now;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "expected {n} posts, got {:?}",
            self.posts.lock().unwrap().clone()
        );
    }
}

struct Slack {
    s: Server,
    secret: String,
    _dir: tempfile::TempDir,
}

/// The page with Slack answering configured and `prefix` as the allowed `response_url`
/// start; `webhook` where held calls are posted.
async fn slack_server(prefix: &str, webhook: Option<String>) -> Slack {
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
        c["approvers"]["public_url"] = json!("https://toolgate.example");
        if let Some(url) = webhook {
            c["approvers"]["webhook"] = json!(url);
        }
    });
    let prefix = prefix.to_owned();
    let s = start_gov_with(gov, Duration::from_millis(50), move |settings| {
        settings.slack_response_url_prefix = prefix;
    })
    .await;
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

/// A press as Slack sends it: the action, the user and the message's `response_url`.
fn press_body(user: &str, action: Value, response_url: &str) -> String {
    let payload = json!({
        "type": "block_actions",
        "user": {"id": user},
        "response_url": response_url,
        "actions": [action]
    })
    .to_string();
    format!("payload={}", enc(&payload))
}

async fn press(sl: &Slack, body: &str) -> (u16, Value) {
    let ts = now().to_string();
    let sig = signature(sl.secret.as_bytes(), &ts, body.as_bytes());
    let res = reqwest::Client::new()
        .post(format!("{}/v1/callbacks/slack", sl.s.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("x-slack-request-timestamp", &ts)
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

fn button(action_id: &str, r: &toolgate_inbox::HeldRecord, ts: &str) -> Value {
    json!({"action_id": action_id, "action_ts": ts,
        "value": format!("{}|{}|{}", r.id(), r.call.input_hash, r.call.definition_hash)})
}

#[tokio::test]
async fn issue35_an_answer_and_a_refusal_reach_slack_through_the_response_url() {
    let (receiver, base) = Receiver::start().await;
    let sl = slack_server(&base, None).await;
    let id = sl.s.hold_refund(json!({"order": 5})).await;
    let rec = sl.s.inbox.store().get(&id).await.unwrap().unwrap();
    let url = format!("{base}actions/T1/1/secret");

    // Bob may not answer a refund: told, in Slack, to him alone; nothing changed.
    let (status, reply) = press(
        &sl,
        &press_body("U_BOB", button("approve", &rec, "1.1"), &url),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    let posts = receiver.wait_for(1).await;
    assert_eq!(posts[0].0, "/actions/T1/1/secret");
    let told = &posts[0].1;
    assert_eq!(told["response_type"], "ephemeral", "{told}");
    assert_eq!(told["replace_original"], false, "{told}");
    assert!(
        told["text"]
            .as_str()
            .unwrap()
            .contains("`bob` may not answer"),
        "{told}"
    );
    assert_eq!(
        sl.s.inbox.store().get(&id).await.unwrap().unwrap().state,
        State::Pending
    );

    // Alice approves: the message is replaced by its outcome, its buttons gone.
    let (status, _) = press(
        &sl,
        &press_body("U_ALICE", button("approve", &rec, "1.2"), &url),
    )
    .await;
    assert_eq!(status, 200);
    let posts = receiver.wait_for(2).await;
    let update = &posts[1].1;
    assert_eq!(update["replace_original"], true, "{update}");
    assert!(
        update["text"]
            .as_str()
            .unwrap()
            .contains("Approved by alice"),
        "{update}"
    );
    assert!(update.get("blocks").is_none(), "no buttons left: {update}");
    assert_eq!(
        sl.s.inbox.store().get(&id).await.unwrap().unwrap().state,
        State::Approved
    );

    // Pressed again (by another message still showing the buttons): already answered, told
    // in toolgate's words instead of an HTTP 409 Slack shows as a generic error.
    let (status, reply) = press(
        &sl,
        &press_body("U_ALICE", button("deny", &rec, "1.3"), &url),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    let posts = receiver.wait_for(3).await;
    assert_eq!(posts[2].1["response_type"], "ephemeral", "{}", posts[2].1);
    assert_eq!(
        sl.s.inbox.store().get(&id).await.unwrap().unwrap().state,
        State::Approved
    );
}

#[tokio::test]
async fn issue35_the_open_the_card_button_is_acknowledged_and_changes_nothing() {
    let (receiver, base) = Receiver::start().await;
    let sl = slack_server(&base, None).await;
    let id = sl.s.hold_refund(json!({"order": 6})).await;
    let open = json!({"action_id": "open", "action_ts": "2.1",
        "url": format!("https://toolgate.example/calls/{id}")});
    let (status, reply) = press(&sl, &press_body("U_ALICE", open, &format!("{base}x"))).await;
    assert_eq!(status, 200, "{reply}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(receiver.posts.lock().unwrap().is_empty());
    assert_eq!(
        sl.s.inbox.store().get(&id).await.unwrap().unwrap().state,
        State::Pending
    );
}

#[tokio::test]
async fn issue35_a_response_url_that_is_not_slacks_is_never_posted_to() {
    let (receiver, base) = Receiver::start().await;
    // The page takes only Slack's own response URLs (the default prefix).
    let sl = slack_server(toolgate_web::slack::SLACK_RESPONSE_URL_PREFIX, None).await;
    let id = sl.s.hold_refund(json!({"order": 7})).await;
    let rec = sl.s.inbox.store().get(&id).await.unwrap().unwrap();
    let (status, reply) = press(
        &sl,
        &press_body(
            "U_ALICE",
            button("approve", &rec, "3.1"),
            &format!("{base}steal"),
        ),
    )
    .await;
    // The answer is taken (the press was signed by Slack); nothing is posted elsewhere.
    assert_eq!(status, 200, "{reply}");
    assert_eq!(
        sl.s.inbox.store().get(&id).await.unwrap().unwrap().state,
        State::Approved
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(receiver.posts.lock().unwrap().is_empty());
}

#[tokio::test]
async fn issue35_the_slack_message_shows_the_inputs_lines_as_lines() {
    let (receiver, base) = Receiver::start().await;
    let sl = slack_server("https://hooks.slack.com/", Some(format!("{base}hook"))).await;
    assert_eq!(sl.s.client().get("/login").await.status, 200);
    sl.s.hold_refund(json!({"order": 8, "note": "a\u{200B}b"}))
        .await;
    let posts = receiver.wait_for(1).await;
    let blocks = posts[0].1["blocks"].as_array().unwrap().clone();
    let input = blocks
        .iter()
        .filter_map(|b| b["text"]["text"].as_str())
        .find(|t| t.starts_with("```"))
        .unwrap();
    assert!(input.contains("{\n  \"note\""), "{input}");
    assert!(!input.contains("U+000A"), "{input}");
    // Hidden characters inside the values are still marked.
    assert!(input.contains("a⟦U+200B⟧b"), "{input}");
}
