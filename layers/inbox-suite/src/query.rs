//! The conformance cases of the paged, filtered reads (held-calls.md, "Pages of held
//! calls"): every backend's [`HeldCalls::query_held`](toolgate_inbox::HeldCalls::query_held), [`HeldCalls::count_held`](toolgate_inbox::HeldCalls::count_held) and
//! [`HeldCalls::changed_since`](toolgate_inbox::HeldCalls::changed_since) give what [`HeldQuery::matches`] says, in order, page by
//! page. Run by [`super::run_all`].
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    reason = "a conformance suite: a broken promise of the store fails the case that found it"
)]

use std::time::Duration;

use serde_json::json;
use toolgate_core::{AgentRef, Ask, AskSource, ToolIdentity, Turn};

use super::{Fixture, request};
use toolgate_inbox::InboxStore;
use toolgate_inbox::{Answer, HeldRecord, NewHeldCall, Timestamp};
use toolgate_inbox::{HeldCursor, HeldQuery, Listing, Order};

/// The cases of this file (also run by [`super::run_all`]).
pub async fn run_query(fixture: &dyn Fixture) {
    eprintln!("suite: issue24_pages_filter_and_order_as_matches_says");
    issue24_pages_filter_and_order_as_matches_says(fixture).await;
    eprintln!("suite: issue24_the_change_feed_lists_each_change_since_a_moment");
    issue24_the_change_feed_lists_each_change_since_a_moment(fixture).await;
}

/// A varied call: `n` picks agent, tool, server, session, reasons and input; `created`
/// is its moment (several share one, so the id orders them).
fn varied(n: usize, created: Timestamp) -> NewHeldCall {
    let mut r = request(
        json!({"order": format!("Order-{n}"), "note": if n.is_multiple_of(3) { "URGENT refund" } else { "routine" }}),
    );
    r.agent = match n % 3 {
        0 => AgentRef::profile("support"),
        1 => AgentRef::subagent("support", "researcher"),
        _ => AgentRef::profile("ops"),
    };
    if n.is_multiple_of(2) {
        r.tool = "github__create_issue".into();
        r.identities = vec![ToolIdentity::mcp("github", "create_issue")];
    }
    r.turn = match n % 4 {
        0 => None,
        k => Some(Turn::new(format!("sess-{k}"), "turn-1")),
    };
    r.asks = match n % 3 {
        0 => vec![Ask::new(AskSource::Posture, "destructive")],
        1 => vec![Ask::new(AskSource::PolicyRule(1), "a rule")],
        _ => vec![Ask::new(AskSource::Agent, "agent mode")],
    };
    NewHeldCall::from_request(&r, created, Duration::from_secs(3600)).unwrap()
}

/// Every page of `q` in turn, concatenated.
async fn walk(store: &dyn InboxStore, q: &HeldQuery) -> Vec<String> {
    let mut q = q.clone();
    let mut out = Vec::new();
    for _ in 0..100 {
        let page = store.query_held(&q).await.unwrap();
        assert!(
            page.records.len() <= q.page_size(),
            "a page is at most its size"
        );
        out.extend(page.records.iter().map(|r| r.id().to_owned()));
        match page.next {
            Some(c) => q.after = Some(c),
            None => return out,
        }
    }
    panic!("paging never ended");
}

fn ids(records: &[HeldRecord]) -> Vec<String> {
    records.iter().map(|r| r.id().to_owned()).collect()
}

pub async fn issue24_pages_filter_and_order_as_matches_says(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let base = Timestamp::now().saturating_sub(Duration::from_secs(600));
    let all = hold_varied_and_answer_some(&*store, base).await;
    let mid = base.saturating_add(Duration::from_secs(55));
    for q in &queries(mid) {
        pages_give_what_matches_says(&*store, q, &all).await;
    }
    // Spot checks of what the filters mean.
    filters_mean_what_they_say(&*store).await;
    order_and_a_cursor_past_an_answered_call(&*store).await;
}

/// Holds 24 varied calls from `base` on, answers every fifth, and returns every call.
async fn hold_varied_and_answer_some(store: &dyn InboxStore, base: Timestamp) -> Vec<HeldRecord> {
    for n in 0..24 {
        // Pairs share a moment: the id breaks the tie, in both orders.
        let created = base.saturating_add(Duration::from_secs(10 * (n as u64 / 2)));
        store.hold(varied(n, created)).await.unwrap();
    }
    let all = store.list(None).await.unwrap();
    // A few answered: they leave the pending listing for the history.
    for (i, r) in all.iter().enumerate().filter(|(i, _)| i % 5 == 0) {
        store
            .answer(
                r.id(),
                Answer {
                    approve: i % 2 == 0,
                    idempotency_key: None,
                    approver: "alice".into(),
                    reason: None,
                    principal: None,
                    binding: None,
                },
            )
            .await
            .unwrap();
    }
    store.list(None).await.unwrap()
}

/// The queries the case pages through: each listing, order and filter, some combined.
fn queries(mid: Timestamp) -> Vec<HeldQuery> {
    let mut queries = vec![
        HeldQuery::pending(),
        HeldQuery::history(),
        HeldQuery::pending().order(Order::NewestFirst),
        HeldQuery::pending().tool("github__create_issue"),
        HeldQuery::pending().text("urgent"),
        HeldQuery::pending().text("ORDER-1"),
        HeldQuery::pending().text("no such text"),
    ];
    for q in [
        HeldQuery {
            agent: Some("researcher".into()),
            ..HeldQuery::pending()
        },
        HeldQuery {
            agent: Some("support".into()),
            ..HeldQuery::pending()
        },
        HeldQuery {
            server: Some("payments".into()),
            ..HeldQuery::pending()
        },
        HeldQuery {
            session: Some("sess-2".into()),
            ..HeldQuery::pending()
        },
        HeldQuery {
            reason_source: Some("posture".into()),
            ..HeldQuery::pending()
        },
        HeldQuery {
            reason_source: Some("policy_rule".into()),
            listing: Listing::History,
            ..HeldQuery::pending()
        },
        HeldQuery {
            held_before: Some(mid),
            ..HeldQuery::pending()
        },
        HeldQuery {
            held_after: Some(mid),
            order: Order::NewestFirst,
            server: Some("github".into()),
            ..HeldQuery::pending()
        },
    ] {
        queries.push(q);
    }
    queries
}

/// For `q`: `count_held` counts, one page lists and pages of 1, 3 and 7 concatenate to
/// what [`HeldQuery::matches`] says of `all`, in order.
async fn pages_give_what_matches_says(store: &dyn InboxStore, q: &HeldQuery, all: &[HeldRecord]) {
    let expected = ids(&q.clone().limit(1_000).page_of(all.to_vec()).records);
    let count = store.count_held(q).await.unwrap();
    assert_eq!(
        count,
        expected.len() as u64,
        "count_held counts what matches says, for {q:?}"
    );
    let whole = store.query_held(&q.clone().limit(1_000)).await.unwrap();
    assert_eq!(ids(&whole.records), expected, "one page, for {q:?}");
    assert!(whole.next.is_none());
    for size in [1, 3, 7] {
        assert_eq!(
            walk(store, &q.clone().limit(size)).await,
            expected,
            "pages of {size} concatenate to the whole, in order, for {q:?}"
        );
    }
}

/// The text filter finds what the input says (case-insensitively); the agent filter finds
/// a subagent by its name.
async fn filters_mean_what_they_say(store: &dyn InboxStore) {
    let urgent = store
        .query_held(&HeldQuery::pending().text("urgent").limit(100))
        .await
        .unwrap();
    assert!(!urgent.records.is_empty());
    assert!(
        urgent
            .records
            .iter()
            .all(|r| r.call.input_json.contains("URGENT"))
    );
    let sub = store
        .query_held(&HeldQuery {
            agent: Some("researcher".into()),
            ..HeldQuery::pending()
        })
        .await
        .unwrap();
    assert!(!sub.records.is_empty());
    assert!(
        sub.records
            .iter()
            .all(|r| r.call.agent.subagent.as_deref() == Some("researcher"))
    );
}

/// Newest first starts later than oldest first; a cursor naming a call since answered
/// still pages on from where it was.
async fn order_and_a_cursor_past_an_answered_call(store: &dyn InboxStore) {
    let newest = store
        .query_held(&HeldQuery::pending().order(Order::NewestFirst).limit(2))
        .await
        .unwrap();
    let oldest = store
        .query_held(&HeldQuery::pending().limit(2))
        .await
        .unwrap();
    assert!(newest.records[0].call.created_at > oldest.records[0].call.created_at);
    // A cursor that names a call since answered still pages on from where it was.
    let first = &oldest.records[0];
    store
        .answer(
            first.id(),
            Answer {
                approve: false,
                idempotency_key: None,
                approver: "alice".into(),
                reason: None,
                principal: None,
                binding: None,
            },
        )
        .await
        .unwrap();
    let on = store
        .query_held(&HeldQuery {
            after: Some(HeldCursor::after(first)),
            ..HeldQuery::pending().limit(1)
        })
        .await
        .unwrap();
    assert_eq!(on.records[0].id(), oldest.records[1].id());
}

pub async fn issue24_the_change_feed_lists_each_change_since_a_moment(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let a = varied(1, Timestamp::now());
    let b = varied(2, Timestamp::now());
    store.hold(a.clone()).await.unwrap();
    store.hold(b.clone()).await.unwrap();
    let before = Timestamp::now().saturating_sub(Duration::from_secs(1));
    let seen = store.changed_since(before, 100).await.unwrap();
    assert_eq!(seen.len(), 2, "both held calls are changes");
    tokio::time::sleep(Duration::from_millis(5)).await;
    let mark = Timestamp::now();
    tokio::time::sleep(Duration::from_millis(5)).await;
    store
        .answer(
            &a.interaction_id,
            Answer {
                approve: true,
                idempotency_key: None,
                approver: "alice".into(),
                reason: None,
                principal: None,
                binding: None,
            },
        )
        .await
        .unwrap();
    let later = store.changed_since(mark, 100).await.unwrap();
    assert_eq!(
        ids(&later),
        vec![a.interaction_id.clone()],
        "only the answer"
    );
    assert_eq!(later[0].state, toolgate_inbox::State::Approved);
    assert!(later[0].updated_at >= mark);
    assert_eq!(
        store.changed_since(before, 1).await.unwrap().len(),
        1,
        "the limit holds"
    );
}
