//! Issue 24: a Previous link in paging, on the pending and the history lists, keeping the
//! filters: walking Next to the end and Previous back gives the same pages in reverse, the
//! first page has none, and a Previous that reaches the start shows the first page full.
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
use toolgate_core::{AgentRef, ToolCall};

fn card_ids(html: &str) -> Vec<String> {
    html.split("id=\"card-")
        .skip(1)
        .map(|rest| rest[..rest.find('"').unwrap()].to_owned())
        .collect()
}

fn row_ids(html: &str) -> Vec<String> {
    html.split("id=\"row-")
        .skip(1)
        .map(|rest| rest[..rest.find('"').unwrap()].to_owned())
        .collect()
}

/// The `href` of the element with id `id`, unescaped.
fn href(html: &str, id: &str) -> Option<String> {
    let tag_at = html.find(&format!("id=\"{id}\""))?;
    let start = html[..tag_at].rfind("href=\"")? + 6;
    let end = start + html[start..].find('"')?;
    Some(html[start..end].replace("&amp;", "&"))
}

/// Follows `page-next` from `first` to the end, then `page-prev` back to the start,
/// checking at every page that the links keep `keep`; returns the pages both ways.
async fn walk(
    c: &Client,
    first: &str,
    ids: fn(&str) -> Vec<String>,
    keep: &str,
) -> (Vec<Vec<String>>, Vec<Vec<String>>) {
    let page = c.get(first).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        href(&page.body, "page-prev").is_none(),
        "issue 24: the first page has no Previous link"
    );
    let mut forward = vec![ids(&page.body)];
    let mut body = page.body;
    while let Some(next) = href(&body, "page-next") {
        assert!(next.contains(keep), "Next keeps the filters: {next}");
        let p = c.get(&next).await;
        assert_eq!(p.status, 200, "{next}: {}", p.body);
        body = p.body;
        forward.push(ids(&body));
    }
    let mut backward = vec![ids(&body)];
    while let Some(prev) = href(&body, "page-prev") {
        assert!(prev.contains(keep), "Previous keeps the filters: {prev}");
        let first_link = href(&body, "page-first").expect("past the first page: First page too");
        assert!(first_link.contains(keep), "{first_link}");
        let p = c.get(&prev).await;
        assert_eq!(p.status, 200, "{prev}: {}", p.body);
        body = p.body;
        backward.push(ids(&body));
        assert!(
            backward.len() <= forward.len(),
            "Previous never passes the start"
        );
    }
    backward.reverse();
    (forward, backward)
}

async fn hold_mix(s: &Server, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        let id = if i % 4 == 0 {
            s.hold(ToolCall::new(
                AgentRef::profile("support"),
                "github__create_issue",
                json!({"title": format!("Issue {i}")}),
            ))
            .await
        } else {
            s.hold_refund(json!({"order": format!("A-{i}"), "amount": i}))
                .await
        };
        ids.push(id);
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue24_previous_pages_back_through_pending_keeping_the_filters() {
    let s = start("token").await;
    let c = signed_in(&s, ALICE).await;
    let ids = hold_mix(&s, 40).await;
    let refunds: Vec<String> = ids
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 4 != 0)
        .map(|(_, id)| id.clone())
        .collect();
    for (first, keep) in [
        ("/?tool=refund&size=7", "tool=refund"),
        ("/?tool=refund&size=7&order=newest", "order=newest"),
    ] {
        let (forward, backward) = walk(&c, first, card_ids, keep).await;
        assert!(forward.len() >= 4, "{forward:?}");
        assert_eq!(
            backward, forward,
            "issue 24: Previous walks back through the same pages, for {first}"
        );
        let mut all: Vec<String> = forward.concat();
        all.sort();
        let mut want = refunds.clone();
        want.sort();
        assert_eq!(all, want, "every refund once, no create_issue");
    }
    // A Previous that reaches the start shows the first page full, not a short one.
    let p1 = c.get("/?tool=refund&size=7").await;
    let p2 = c.get(&href(&p1.body, "page-next").unwrap()).await;
    let third = get_page(&c, &href(&p2.body, "page-next").unwrap()).await;
    let before_third = format!(
        "/?tool=refund&size=7&before={}",
        href_cursor(&third.1, "page-prev")
    );
    let back = c.get(&before_third).await;
    assert_eq!(card_ids(&back.body), card_ids(&p2.body));
    // From page 2 less one call: fewer than a page before it, so the first page, full.
    let short = format!(
        "/?tool=refund&size=7&before={}",
        cursor_of_card(&s, &card_ids(&p1.body)[3]).await
    );
    let back = c.get(&short).await;
    assert_eq!(card_ids(&back.body), card_ids(&p1.body));
    assert!(href(&back.body, "page-prev").is_none());
    // `before` is read like `after`, and not both.
    let r = c.get("/?before=nonsense").await;
    assert_eq!(r.status, 400);
    assert!(r.body.contains("`before`"), "{}", r.body);
    let r = c.get("/?before=1.x&after=1.y").await;
    assert_eq!(r.status, 400);
    assert!(r.body.contains("`after`"), "{}", r.body);
}

async fn get_page(c: &Client, link: &str) -> (Vec<String>, String) {
    let p = c.get(link).await;
    assert_eq!(p.status, 200);
    (card_ids(&p.body), p.body)
}

/// The `before=` value of the link with id `id`.
fn href_cursor(html: &str, id: &str) -> String {
    let link = href(html, id).unwrap();
    let at = link.find("before=").unwrap() + 7;
    link[at..].split('&').next().unwrap().to_owned()
}

/// The cursor text (`<millis>.<id>`) of held call `id` (its id needs no encoding).
async fn cursor_of_card(s: &Server, id: &str) -> String {
    let r = s.inbox.store().get(id).await.unwrap().unwrap();
    format!("{}.{}", r.call.created_at.as_millis(), r.id())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue24_previous_pages_back_through_history_keeping_the_filters() {
    let s = start("token").await;
    let c = signed_in(&s, ALICE).await;
    let ids = hold_mix(&s, 24).await;
    let csrf = c.csrf().await;
    for (i, id) in ids.iter().enumerate() {
        let r = c
            .post(
                &format!("/calls/{id}/answer"),
                &[
                    ("csrf", &csrf),
                    ("decision", "deny"),
                    ("idempotency_key", &format!("h{i}")),
                    ("reason", "no"),
                ],
            )
            .await;
        assert_eq!(r.status, 303, "{}", r.body);
    }
    let (forward, backward) = walk(&c, "/history?q=order&size=5", row_ids, "q=order").await;
    assert_eq!(forward.len(), 4, "18 refunds, 5 a page: {forward:?}");
    assert_eq!(backward, forward, "issue 24: Previous through the history");
    assert!(
        forward
            .concat()
            .iter()
            .all(|id| ids.iter().position(|x| x == id).is_some_and(|i| i % 4 != 0))
    );
}
