//! Issue 24 over HTTP: the pending and history lists paged server-side (oldest or newest
//! first) and filtered; the live update sends only what changed; bulk answers bound to the
//! hashes each card showed (R35) and to the approver's rights, refused whole otherwise; a
//! rule is deleted only after a confirmation; risk cues on a card.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::*;
use serde_json::json;
use toolgate_core::{AgentRef, ToolCall};
use toolgate_inbox::State;

/// The ids of the cards on a page, in order.
fn card_ids(html: &str) -> Vec<String> {
    html.split("id=\"card-")
        .skip(1)
        .map(|rest| rest[..rest.find('"').unwrap()].to_owned())
        .collect()
}

fn count(html: &str) -> u64 {
    let at = html.find("id=\"pending-count\">").unwrap() + 19;
    html[at..at + html[at..].find('<').unwrap()]
        .parse()
        .unwrap()
}

/// The `href` of the element with id `id`, unescaped.
fn href(html: &str, id: &str) -> Option<String> {
    let tag_at = html.find(&format!("id=\"{id}\""))?;
    let start = html[..tag_at].rfind("href=\"")? + 6;
    let end = start + html[start..].find('"')?;
    Some(html[start..end].replace("&amp;", "&"))
}

/// The cards of every page from `first` on, page by page (following `page-next`).
async fn pages_of(c: &Client, first: &str) -> Vec<Vec<String>> {
    let mut pages = vec![card_ids(first)];
    let mut next = href(first, "page-next");
    while let Some(link) = next {
        let p = c.get(&link).await;
        assert_eq!(p.status, 200, "{link}: {}", p.body);
        pages.push(card_ids(&p.body));
        next = href(&p.body, "page-next");
    }
    pages
}

/// Every call of `held` (in the order held) is on exactly one page, and each page holds
/// the calls after the previous page's (within a page, cards are grouped by session, R43).
fn assert_pages_in_order(pages: &[Vec<String>], held: &[String]) {
    let mut at = 0;
    for page in pages {
        let mut want: Vec<&String> = held[at..at + page.len()].iter().collect();
        let mut got: Vec<&String> = page.iter().collect();
        want.sort();
        got.sort();
        assert_eq!(got, want, "issue 24: page after page, oldest first");
        at += page.len();
    }
    assert_eq!(at, held.len(), "issue 24: every call is on a page");
}

async fn hold_many(s: &Server, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        let id = if i % 3 == 0 {
            s.hold(
                ToolCall::new(
                    AgentRef::profile("support"),
                    "github__create_issue",
                    json!({"title": format!("Issue {i}"), "body": "crash"}),
                )
                .in_turn(format!("sess-{}", i % 2), "turn-1"),
            )
            .await
        } else {
            s.hold_refund(json!({"order": format!("A-{i}"), "amount": i}))
                .await
        };
        ids.push(id);
        // Distinct moments, so the order is the order held.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue24_pending_is_paged_oldest_or_newest_first_and_filtered() {
    let s = start("token").await;
    let c = signed_in(&s, ALICE).await;
    let ids = hold_many(&s, 60).await;

    // Oldest first by default, 15 a page, the count of all.
    let first = c.get("/").await;
    assert_eq!(first.status, 200);
    assert_eq!(count(&first.body), 60);
    let page1 = card_ids(&first.body);
    assert_eq!(page1.len(), 15);
    assert_eq!(page1[0], ids[0]);
    // Every page in turn, by its cursor: each call once, in the order held.
    assert_pages_in_order(&pages_of(&c, &first.body).await, &ids);

    // Newest first.
    let newest = c.get("/?order=newest&size=10").await;
    let mut n = card_ids(&newest.body);
    n.sort();
    let mut last10: Vec<String> = ids[50..].to_vec();
    last10.sort();
    assert_eq!(n, last10, "the ten newest");

    // Filters: tool, server, session, agent, reason source, text, age.
    let github: HashSet<String> = ids.iter().step_by(3).cloned().collect();
    let by_tool = c.get("/?tool=github__create_issue&size=200").await;
    assert_eq!(count(&by_tool.body), 20);
    assert!(card_ids(&by_tool.body).iter().all(|id| github.contains(id)));
    let by_server = c.get("/?server=github&size=200").await;
    assert_eq!(card_ids(&by_server.body), card_ids(&by_tool.body));
    let by_session = c.get("/?session=sess-1&size=200").await;
    assert_eq!(count(&by_session.body), 10);
    let by_text = c.get("/?q=a-17").await;
    assert_eq!(card_ids(&by_text.body), vec![ids[17].clone()]);
    assert_eq!(count(&c.get("/?agent=support").await.body), 60);
    assert_eq!(count(&c.get("/?agent=nobody").await.body), 0);
    assert!(
        c.get("/?agent=nobody")
            .await
            .body
            .contains("No held call matches")
    );
    assert_eq!(count(&c.get("/?source=agent").await.body), 60);
    assert_eq!(count(&c.get("/?source=hook").await.body), 0);
    assert_eq!(count(&c.get("/?older=60").await.body), 0);
    assert_eq!(count(&c.get("/?newer=60").await.body), 60);
    // A filter that cannot be read is refused, naming it.
    for (q, field) in [
        ("older=soon", "`older`"),
        ("source=gut", "`source`"),
        ("order=random", "`order`"),
        ("size=100000", "`size`"),
        ("after=nonsense", "`after`"),
    ] {
        let r = c.get(&format!("/?{q}")).await;
        assert_eq!(r.status, 400, "{q}");
        assert!(r.body.contains(field), "{q}: {}", r.body);
    }
    // Filters survive paging.
    let p = c.get("/?tool=refund&size=5").await;
    let link = href(&p.body, "page-next").unwrap();
    assert!(link.contains("tool=refund"), "{link}");
    let p2 = c.get(&link).await;
    assert!(card_ids(&p2.body).iter().all(|id| !github.contains(id)));

    // The first byte of a page is bounded by its size, not by the inbox.
    assert!(first.body.len() < 100 * 1024, "{} bytes", first.body.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue24_history_is_paged_newest_first_and_filtered() {
    let s = start("token").await;
    let c = signed_in(&s, ALICE).await;
    let ids = hold_many(&s, 12).await;
    let csrf = c.csrf().await;
    for (i, id) in ids.iter().enumerate() {
        let r = c
            .post(
                &format!("/calls/{id}/answer"),
                &[
                    ("csrf", &csrf),
                    ("decision", "deny"),
                    ("idempotency_key", &format!("h{i}")),
                    ("reason", &format!("reason {i}")),
                ],
            )
            .await;
        assert_eq!(r.status, 303, "{}", r.body);
    }
    let h = c.get("/history?size=5").await;
    assert_eq!(h.status, 200);
    let rows: Vec<&str> = h.body.split("id=\"row-").skip(1).collect();
    assert_eq!(rows.len(), 5);
    assert!(
        rows[0].starts_with(ids.last().unwrap().as_str()),
        "newest first"
    );
    assert!(h.body.contains("id=\"history-count\">12<"));
    assert!(href(&h.body, "page-next").is_some());
    // Rows tell calls apart: the input excerpt and the session are shown.
    assert!(h.body.contains("class=\"excerpt\""));
    let f = c.get("/history?q=a-1%22&size=50").await;
    assert!(f.body.contains("id=\"history-count\">1<"), "{}", f.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue24_an_approver_with_selectors_is_paged_and_counted_over_their_calls_only() {
    let s = start("token").await;
    let bob = signed_in(&s, BOB).await;
    let ids = hold_many(&s, 30).await;
    let github: Vec<String> = ids.iter().step_by(3).cloned().collect();
    let p = bob.get("/?size=4").await;
    assert_eq!(
        count(&p.body),
        10,
        "issue 20: bob counts only github's calls"
    );
    assert_pages_in_order(&pages_of(&bob, &p.body).await, &github);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue24_r35_bulk_approve_answers_each_bound_to_the_hashes_its_card_showed() {
    let s = start("token").await;
    let c = signed_in(&s, ALICE).await;
    let ids = hold_many(&s, 5).await;
    let page = c.get("/").await.body;
    let csrf = field(&page, "csrf").unwrap();
    let key = field(&page, "idempotency_key").unwrap();
    // Each checkbox carries its card's id and hashes.
    let items: Vec<String> = ids[..3]
        .iter()
        .map(|id| {
            let at = page.find(&format!("id=\"pick-{id}\" value=\"")).unwrap();
            let rest = &page[at..];
            let rest = &rest[rest.find("value=\"").unwrap() + 7..];
            rest[..rest.find('"').unwrap()].to_owned()
        })
        .collect();
    let mut fields: Vec<(&str, &str)> = vec![
        ("csrf", &csrf),
        ("idempotency_key", &key),
        ("decision", "approve"),
    ];
    for it in &items {
        fields.push(("item", it));
    }
    let r = c.post("/bulk", &fields).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("Approved 3 of 3"), "{}", r.body);
    for id in &ids[..3] {
        let rec = s.inbox.store().get(id).await.unwrap().unwrap();
        assert_eq!(rec.state, State::Approved);
        assert_eq!(rec.approver.as_deref(), Some("alice"));
        assert_eq!(
            rec.answer_key.as_deref(),
            Some(format!("{key}:{id}").as_str())
        );
    }
    // The same form again is the same answers (idempotent), not an error.
    let again = c.post("/bulk", &fields).await;
    assert_eq!(again.status, 200, "{}", again.body);
    // A card whose input hash is not the held call's refuses the selection whole.
    let stale = format!(
        "{} sha256:0000 {}",
        ids[3],
        s.inbox
            .store()
            .get(&ids[3])
            .await
            .unwrap()
            .unwrap()
            .call
            .definition_hash
    );
    let good = {
        let rec = s.inbox.store().get(&ids[4]).await.unwrap().unwrap();
        format!(
            "{} {} {}",
            ids[4], rec.call.input_hash, rec.call.definition_hash
        )
    };
    let r = c
        .post(
            "/bulk",
            &[
                ("csrf", &csrf),
                ("idempotency_key", "k2"),
                ("decision", "approve"),
                ("item", &good),
                ("item", &stale),
            ],
        )
        .await;
    assert_eq!(r.status, 409, "{}", r.body);
    assert!(r.body.contains(&ids[3]), "names the call: {}", r.body);
    assert!(r.body.contains("R35"));
    for id in &ids[3..] {
        assert_eq!(
            s.inbox.store().get(id).await.unwrap().unwrap().state,
            State::Pending,
            "refused whole: nothing answered"
        );
    }
    // Deny in bulk with a reason.
    let r = c
        .post(
            "/bulk",
            &[
                ("csrf", &csrf),
                ("idempotency_key", "k3"),
                ("decision", "deny"),
                ("reason", "not now"),
                ("item", &good),
            ],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let rec = s.inbox.store().get(&ids[4]).await.unwrap().unwrap();
    assert_eq!(rec.state, State::Denied);
    assert_eq!(rec.answer_reason.as_deref(), Some("not now"));
    // No selection, no CSRF token: refused.
    let r = c
        .post(
            "/bulk",
            &[
                ("csrf", &csrf),
                ("idempotency_key", "k4"),
                ("decision", "approve"),
            ],
        )
        .await;
    assert_eq!(r.status, 400);
    let r = c
        .post(
            "/bulk",
            &[
                ("idempotency_key", "k5"),
                ("decision", "approve"),
                ("item", &good),
            ],
        )
        .await;
    assert_eq!(r.status, 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue24_a_bulk_selection_with_a_call_the_approver_may_not_answer_is_refused_whole_naming_it()
 {
    let s = start("token").await;
    let bob = signed_in(&s, BOB).await;
    let ids = hold_many(&s, 3).await; // ids[0] github (bob's), ids[1..] refunds
    let csrf = bob.csrf().await;
    let item = |id: &str| {
        let store = s.inbox.store().clone();
        let id = id.to_owned();
        async move {
            let rec = store.get(&id).await.unwrap().unwrap();
            format!("{id} {} {}", rec.call.input_hash, rec.call.definition_hash)
        }
    };
    let mine = item(&ids[0]).await;
    let theirs = item(&ids[1]).await;
    let r = bob
        .post(
            "/bulk",
            &[
                ("csrf", &csrf),
                ("idempotency_key", "b1"),
                ("decision", "approve"),
                ("item", &mine),
                ("item", &theirs),
            ],
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.body.contains(&ids[1]), "names the call: {}", r.body);
    assert!(r.body.contains("may not answer"));
    for id in &ids {
        assert_eq!(
            s.inbox.store().get(id).await.unwrap().unwrap().state,
            State::Pending,
            "refused whole: nothing was answered"
        );
    }
    // His own alone is answered.
    let r = bob
        .post(
            "/bulk",
            &[
                ("csrf", &csrf),
                ("idempotency_key", "b2"),
                ("decision", "approve"),
                ("item", &mine),
            ],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
}

/// Reads server-sent events from `/events` until `want` events are in, or the time is up.
async fn events(
    res: &mut reqwest::Response,
    want: usize,
    until: std::time::Instant,
) -> Vec<(String, String)> {
    let mut buf = String::new();
    let mut out = Vec::new();
    while out.len() < want && std::time::Instant::now() < until {
        let chunk = tokio::time::timeout(Duration::from_millis(500), res.chunk()).await;
        let Ok(Ok(Some(bytes))) = chunk else {
            continue;
        };
        buf.push_str(&String::from_utf8_lossy(&bytes));
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let mut name = String::new();
            let mut data = Vec::new();
            for line in block.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = n.to_owned();
                } else if let Some(n) = line.strip_prefix("event:") {
                    name = n.to_owned();
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data.push(d.to_owned());
                } else if let Some(d) = line.strip_prefix("data:") {
                    data.push(d.to_owned());
                }
            }
            if name == "added" || name == "ended" {
                out.push((name, data.join("\n")));
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue24_the_live_update_sends_only_what_changed() {
    let s = start_with("token", Duration::from_millis(50)).await;
    let c = signed_in(&s, ALICE).await;
    let before = hold_many(&s, 5).await;
    // The poller has passed these on (to nobody) before the page connects.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let http = reqwest::Client::new();
    let mut res = http
        .get(format!("{}/events?tool=refund", s.base))
        .header("cookie", c.cookie.clone().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let early = events(
        &mut res,
        1,
        std::time::Instant::now() + Duration::from_millis(300),
    )
    .await;
    assert!(
        early.is_empty(),
        "nothing changed since the page connected: {early:?}"
    );
    // A github call (filtered out by the page's `tool=refund`) and a refund.
    let other = s
        .hold(ToolCall::new(
            AgentRef::profile("support"),
            "github__create_issue",
            json!({"title": "x"}),
        ))
        .await;
    let new = s.hold_refund(json!({"order": "N-1", "amount": 3})).await;
    let until = std::time::Instant::now() + Duration::from_secs(20);
    let got = events(&mut res, 1, until).await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].0, "added");
    assert!(
        got[0].1.contains(&format!("id=\"card-{new}\"")),
        "{new}: {}",
        got[0].1
    );
    assert!(!got[0].1.contains(&other), "the page's filter holds");
    for id in &before {
        assert!(
            !got[0].1.contains(id.as_str()),
            "issue 24: never the whole list"
        );
    }
    assert!(
        got[0].1.len() < 16 * 1024,
        "one card: {} bytes",
        got[0].1.len()
    );
    // An answer: `ended`, with the id and state only.
    let csrf = c.csrf().await;
    let r = c
        .post(
            &format!("/calls/{new}/answer"),
            &[
                ("csrf", &csrf),
                ("decision", "deny"),
                ("idempotency_key", "x"),
            ],
        )
        .await;
    assert_eq!(r.status, 303);
    let got = events(&mut res, 1, until).await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].0, "ended");
    let v: serde_json::Value = serde_json::from_str(&got[0].1).unwrap();
    assert_eq!(v["id"], json!(new));
    assert_eq!(v["state"], json!("denied"));
    assert_eq!(v["counted"], json!(true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue24_the_live_update_never_shows_a_call_the_approver_may_not_answer() {
    let s = start_with("token", Duration::from_millis(50)).await;
    let bob = signed_in(&s, BOB).await;
    let http = reqwest::Client::new();
    let mut res = http
        .get(format!("{}/events", s.base))
        .header("cookie", bob.cookie.clone().unwrap())
        .send()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let refund = s.hold_refund(json!({"order": "secret", "amount": 1})).await;
    let gh = s
        .hold(ToolCall::new(
            AgentRef::profile("support"),
            "github__create_issue",
            json!({"title": "y"}),
        ))
        .await;
    let until = std::time::Instant::now() + Duration::from_secs(20);
    let got = events(&mut res, 1, until).await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0].1.contains(&gh));
    assert!(!got[0].1.contains(&refund) && !got[0].1.contains("secret"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue24_a_rule_is_deleted_only_after_a_confirmation() {
    let s = start("token").await;
    let c = signed_in(&s, ALICE).await;
    toolgate_inbox::put_policy_text(
        &**s.inbox.store(),
        r#"{"rules": [{"effect": "deny", "tool": "refund", "when": {"amount": {"gt": 100}}, "reason": "over the limit"}]}"#,
        &Default::default(),
    )
    .await
    .unwrap();
    let page = c.get("/policy").await.body;
    assert!(page.contains("id=\"delete-0\""));
    assert!(
        !page.contains("action=\"/policy/delete\""),
        "the policy tab itself has no form that deletes"
    );
    let confirm = c.get("/policy?delete=0").await;
    assert_eq!(confirm.status, 200);
    assert!(confirm.body.contains("Delete rule 0?"));
    assert!(confirm.body.contains("over the limit"));
    assert!(confirm.body.contains("id=\"confirm-delete\""));
    assert!(confirm.body.contains("id=\"cancel-delete\""));
    let updated = field(&confirm.body, "updated_at").unwrap();
    let csrf = c.csrf().await;
    let r = c
        .post(
            "/policy/delete",
            &[("csrf", &csrf), ("updated_at", &updated), ("index", "0")],
        )
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let stored = s.inbox.store().get_policy().await.unwrap().unwrap();
    assert!(!stored.body.contains("over the limit"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue24_a_card_shows_its_risk_cues() {
    let gov = governance_tweaked("token", |c| {
        c["tools"][0]["network"] = json!("egress");
        c["tools"][2]["annotations"] = json!({"destructiveHint": true});
    });
    let s = start_gov(gov, Duration::from_millis(100)).await;
    let c = signed_in(&s, ALICE).await;
    toolgate_inbox::put_policy_text(
        &**s.inbox.store(),
        r#"{"rules": [{"effect": "deny", "tool": "refund", "when": {"amount": {"gt": 100}}, "reason": "over the limit"}]}"#,
        &Default::default(),
    )
    .await
    .unwrap();
    s.reload_policy().await;
    let refund = s.hold_refund(json!({"order": "A-1", "amount": 50})).await;
    let gh = s
        .hold(ToolCall::new(
            AgentRef::profile("support"),
            "github__create_issue",
            json!({"title": "rm -rf"}),
        ))
        .await;
    let one = c.get(&format!("/calls/{refund}")).await.body;
    assert!(one.contains("risk-egress"), "{one}");
    assert!(one.contains("risk-deny-near"), "{one}");
    assert!(one.contains("rules[0]"));
    let other = c.get(&format!("/calls/{gh}")).await.body;
    assert!(other.contains("risk-destructive"), "{other}");
    assert!(!other.contains("risk-deny-near"));
    let list = c.get("/").await.body;
    assert!(list.contains("risk-destructive") && list.contains("risk-egress"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue24_after_an_answer_the_card_page_confirms_it() {
    let s = start("token").await;
    let c = signed_in(&s, ALICE).await;
    let id = s.hold_refund(json!({"order": "C-1", "amount": 2})).await;
    let page = c.get(&format!("/calls/{id}")).await.body;
    assert!(!page.contains("id=\"answered\""));
    let csrf = field(&page, "csrf").unwrap();
    let rec = s.inbox.store().get(&id).await.unwrap().unwrap();
    let r = c
        .post(
            &format!("/calls/{id}/answer"),
            &[
                ("csrf", &csrf),
                ("decision", "approve"),
                ("idempotency_key", "c1"),
                ("input_hash", &rec.call.input_hash),
                ("definition_hash", &rec.call.definition_hash),
            ],
        )
        .await;
    assert_eq!(r.status, 303);
    let after = c.get(&format!("/calls/{id}")).await.body;
    assert!(after.contains("id=\"answered\""));
    assert!(after.contains("You approved this call"));
    assert!(after.contains("id=\"next-pending\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue24_a_burst_of_changes_never_stalls_the_live_update() {
    let s = start_with("token", Duration::from_millis(50)).await;
    let c = signed_in(&s, ALICE).await;
    let first = s.hold_refund(json!({"order": "T-0", "amount": 1})).await;
    let template = s.inbox.store().get(&first).await.unwrap().unwrap();
    // 1,200 calls changed in one millisecond: more than the poller reads at once.
    let at = toolgate_inbox::Timestamp::now();
    for i in 0..1200 {
        let mut call = template.call.clone();
        call.interaction_id = format!("ia_burst_{i:05}");
        call.created_at = at;
        s.inbox.store().hold(call).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let http = reqwest::Client::new();
    let mut res = http
        .get(format!("{}/events", s.base))
        .header("cookie", c.cookie.clone().unwrap())
        .send()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let new = s.hold_refund(json!({"order": "T-1", "amount": 2})).await;
    let until = std::time::Instant::now() + Duration::from_secs(20);
    let mut found = false;
    while !found && std::time::Instant::now() < until {
        for (_, data) in events(&mut res, 1, until).await {
            found |= data.contains(&format!("id=\"card-{new}\""));
        }
    }
    assert!(
        found,
        "issue 24: the call held after the burst reaches the page"
    );
}
