//! Four eyes on the approval page (R51): a held call that needs two people's approvals shows
//! how many it has and from whom — on its card, in the HTTP API's JSON and in the Slack
//! message — and an approval that is not the last tells the approver it waits for one more
//! person; the second person's approval lets it be sent, once.
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
use toolgate_core::{AgentRef, ToolCall, Turn};
use toolgate_inbox::State;
use toolgate_web::slack::signature;

const CAROL: &str = "carol-token-0123456789";
const ALICE_KEY: &str = "tgk-alice-0123456789";
const CAROL_KEY: &str = "tgk-carol-0123456789";

/// `refund` needs two people's approvals; carol may answer it too (alice may answer
/// anything; bob only github's calls).
fn four_eyes(c: &mut Value) {
    c["approvers"]["people"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "carol", "token_sha256": toolgate_web::hash_token(CAROL)}));
    c["policy"] = json!({"rules": [
        {"effect": "ask", "tool": "refund", "reason": "two people sign off refunds", "approvals": 2}
    ]});
    c["approvers"]["api_keys"] = json!([
        {"name": "alice-bot", "key_sha256": toolgate_web::hash_token(ALICE_KEY), "scopes": ["approvals"], "approver": "alice"},
        {"name": "carol-bot", "key_sha256": toolgate_web::hash_token(CAROL_KEY), "scopes": ["approvals"], "approver": "carol"}
    ]);
}

async fn server() -> Server {
    start_gov(
        governance_tweaked("token", four_eyes),
        Duration::from_millis(50),
    )
    .await
}

/// Posts the Approve form of `id` as the page rendered it for `c`.
async fn approve_on_page(c: &Client, id: &str) -> Reply {
    let page = c.get(&format!("/calls/{id}")).await;
    assert_eq!(page.status, 200, "{}", page.body);
    let at = page
        .body
        .find("class=\"approve\">")
        .expect("an Approve form");
    let form = &page.body[at..];
    let field_of = |name: &str| field(form, name).unwrap();
    c.post(
        &format!("/calls/{id}/answer"),
        &[
            ("csrf", &field_of("csrf")),
            ("input_hash", &field_of("input_hash")),
            ("definition_hash", &field_of("definition_hash")),
            ("idempotency_key", &field_of("idempotency_key")),
            ("decision", "approve"),
        ],
    )
    .await
}

#[tokio::test]
async fn r51_the_card_shows_the_count_and_names_and_the_second_approval_sends_the_call() {
    let s = server().await;
    let id = s.hold_refund(json!({"order": 51, "amount": 5000})).await;
    let alice = signed_in(&s, ALICE).await;
    let page = alice.get(&format!("/calls/{id}")).await.body;
    assert!(page.contains("<dt>Approvals</dt>"), "{page}");
    assert!(page.contains("0 of 2 approvals"), "{page}");
    assert!(page.contains("it waits for 2 more people"), "{page}");
    assert!(page.contains(&format!("id=\"approve-{id}\"")));
    // A grant is one person's answer and an edit one approver's: neither is offered.
    assert!(!page.contains(&format!("grant-panel-{id}")), "{page}");
    assert!(!page.contains(&format!("edit-panel-{id}")), "{page}");

    let r = approve_on_page(&alice, &id).await;
    assert_eq!(r.status, 303, "{}", r.body);
    let page = alice.get(&format!("/calls/{id}")).await.body;
    assert!(
        page.contains(
            "Your approval is recorded: 1 of 2 approvals: alice; it waits for one more person."
        ),
        "R51: an approval that is not the last says so: {page}"
    );
    assert!(
        !page.contains(&format!("id=\"approve-{id}\"")),
        "R51: one person's approvals count once: {page}"
    );
    assert!(
        page.contains(&format!("id=\"deny-{id}\"")),
        "they may still deny"
    );
    assert_eq!(s.tool.runs(), 0);
    assert_eq!(
        s.inbox.store().get(&id).await.unwrap().unwrap().state,
        State::Pending
    );

    // The list shows the count too.
    let carol = signed_in(&s, CAROL).await;
    let list = carol.get("/").await.body;
    assert!(list.contains("1 of 2 approvals: alice"), "{list}");
    let page = carol.get(&format!("/calls/{id}")).await.body;
    assert!(page.contains(&format!("id=\"approve-{id}\"")), "{page}");
    let r = approve_on_page(&carol, &id).await;
    assert_eq!(r.status, 303, "{}", r.body);
    let page = carol.get(&format!("/calls/{id}")).await.body;
    assert!(page.contains("2 of 2 approvals: alice, carol"), "{page}");
    assert!(page.contains("alice and carol"), "{page}");
    let rec = s.inbox.store().get(&id).await.unwrap().unwrap();
    assert_eq!(rec.state, State::Approved);
    let resumed = s.inbox.resume(&id, s.stack.clone()).await.unwrap();
    assert_eq!(resumed.recorded, Some(State::Done));
    assert_eq!(s.tool.runs(), 1, "R26: sent once");
    let history = carol.get("/history").await.body;
    assert!(
        history.contains("<td class=\"approver\">alice and carol</td>"),
        "{history}"
    );
}

struct Api {
    http: reqwest::Client,
    base: String,
}

impl Api {
    async fn get(&self, path: &str, key: &str) -> (u16, Value) {
        let res = self
            .http
            .get(format!("{}{path}", self.base))
            .bearer_auth(key)
            .send()
            .await
            .unwrap();
        (
            res.status().as_u16(),
            serde_json::from_str(&res.text().await.unwrap()).unwrap(),
        )
    }

    async fn answer(&self, key: &str, id: &str, body: Value) -> (u16, Value) {
        let res = self
            .http
            .post(format!("{}/v1/interactions/{id}/answer", self.base))
            .bearer_auth(key)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        (
            res.status().as_u16(),
            serde_json::from_str(&res.text().await.unwrap()).unwrap(),
        )
    }
}

#[tokio::test]
async fn r51_the_api_shows_the_count_and_names_and_an_approval_not_the_last_says_so() {
    let s = server().await;
    let api = Api {
        http: reqwest::Client::new(),
        base: s.base.clone(),
    };
    let call = ToolCall::new(AgentRef::profile("support"), "refund", json!({"order": 52}))
        .with_turn(Some(Turn::new("s-51", "t1")));
    let id = s.hold(call).await;
    let (status, v) = api.get(&format!("/v1/calls/{id}"), ALICE_KEY).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["approvals"]["needed"], 2);
    assert_eq!(v["approvals"]["given"], json!([]));
    assert_eq!(v["approvals"]["summary"], "0 of 2 approvals");
    let bound = json!({"approved": true, "inputHash": v["inputHash"], "definitionHash": v["definitionHash"]});

    let (status, r) = api.answer(ALICE_KEY, &id, bound.clone()).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(
        (
            r["approvals"].clone(),
            r["approvalsNeeded"].clone(),
            r["waitingFor"].clone()
        ),
        (json!(1), json!(2), json!(1))
    );
    assert_eq!(
        r["message"],
        "recorded: 1 of 2 approvals; it waits for one more person"
    );
    let (_, again) = api.answer(ALICE_KEY, &id, bound.clone()).await;
    assert_eq!(again["alreadyApproved"], true, "{again}");
    assert_eq!(again["waitingFor"], 1);

    let (_, v) = api.get(&format!("/v1/calls/{id}"), CAROL_KEY).await;
    assert_eq!(v["state"], "pending");
    assert_eq!(v["approvals"]["given"][0]["approver"], "alice");
    assert_eq!(v["approvals"]["missing"], 1);
    assert_eq!(v["approvals"]["summary"], "1 of 2 approvals: alice");
    let (_, pending) = api.get("/v1/sessions/s-51/pending", CAROL_KEY).await;
    assert_eq!(
        pending["interactions"][0]["approvals"]["summary"], "1 of 2 approvals: alice",
        "{pending}"
    );
    // Bound to another input: refused, nothing recorded (R35).
    let (status, r) = api
        .answer(
            CAROL_KEY,
            &id,
            json!({"approved": true, "inputHash": "sha256:other", "definitionHash": v["definitionHash"]}),
        )
        .await;
    assert_eq!((status, r["code"].clone()), (409, json!("not_as_shown")));

    let (status, r) = api.answer(CAROL_KEY, &id, bound).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["waitingFor"], 0);
    assert_eq!(
        r["message"],
        "recorded: 2 of 2 approvals; the call is approved"
    );
    let (_, v) = api.get(&format!("/v1/calls/{id}"), CAROL_KEY).await;
    assert_eq!(v["state"], "approved");
    assert_eq!(v["approvals"]["summary"], "2 of 2 approvals: alice, carol");
    assert_eq!(s.tool.runs(), 0, "sent only when resumed");
}

// ----- Slack -----

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn press_body(user: &str, value: &str, ts: &str) -> String {
    let payload = json!({
        "type": "block_actions",
        "user": {"id": user},
        "actions": [{"action_id": "approve", "value": value, "action_ts": ts}]
    })
    .to_string();
    format!("payload={}", enc(&payload))
}

async fn press(base: &str, secret: &str, body: &str) -> (u16, Value) {
    let ts = now().to_string();
    let sig = signature(secret.as_bytes(), &ts, body.as_bytes());
    let res = reqwest::Client::new()
        .post(format!("{base}/v1/callbacks/slack"))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("x-slack-request-timestamp", ts)
        .header("x-slack-signature", sig)
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    (
        res.status().as_u16(),
        serde_json::from_str(&res.text().await.unwrap()).unwrap(),
    )
}

/// Every text of a Block Kit message, joined.
fn texts(blocks: &Value) -> String {
    blocks
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["text"]["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn r51_the_slack_message_shows_the_count_and_keeps_its_buttons_for_the_second_person() {
    let dir = tempfile::tempdir().unwrap();
    let secret = toolgate_core::id::random_hex(32).unwrap();
    let file = dir.path().join("slack.secret");
    std::fs::write(&file, format!("{secret}\n")).unwrap();
    let gov = governance_tweaked("token", |c| {
        four_eyes(c);
        c["approvers"]["slack"] = json!({
            "signing_secret_file": file,
            "users": [
                {"slack_user": "U_ALICE", "approver": "alice"},
                {"slack_user": "U_CAROL", "approver": "carol"}
            ]
        });
    });
    let s = start_gov(gov, Duration::from_millis(50)).await;
    let id = s.hold_refund(json!({"order": 53})).await;
    let rec = s.inbox.store().get(&id).await.unwrap().unwrap();
    let value = format!(
        "{}|{}|{}",
        rec.id(),
        rec.call.input_hash,
        rec.call.definition_hash
    );
    let (status, reply) = press(&s.base, &secret, &press_body("U_ALICE", &value, "1.1")).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["replace_original"], true);
    assert!(
        reply["text"]
            .as_str()
            .unwrap()
            .contains("recorded: 1 of 2 approvals; it waits for one more person"),
        "{reply}"
    );
    let shown = texts(&reply["blocks"]);
    assert!(shown.contains("*1 of 2 approvals: alice*"), "{shown}");
    assert!(
        reply["blocks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["type"] == "actions"),
        "R51: the buttons stay for the next person: {reply}"
    );
    let (status, reply) = press(&s.base, &secret, &press_body("U_CAROL", &value, "1.2")).await;
    assert_eq!(status, 200, "{reply}");
    let text = reply["text"].as_str().unwrap();
    assert!(
        text.contains("Approved by carol") && text.contains("2 of 2 approvals"),
        "{reply}"
    );
    assert_eq!(
        s.inbox.store().get(&id).await.unwrap().unwrap().state,
        State::Approved
    );
}
