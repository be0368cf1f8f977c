//! The conformance case of the approver's selectors in the store's query (held-calls.md,
//! "Pages of held calls"): every backend's [`HeldCalls::query_held`](toolgate_inbox::HeldCalls::query_held) and
//! [`HeldCalls::count_held`](toolgate_inbox::HeldCalls::count_held) with a [`VisibleTo`] select exactly the calls
//! [`Approver::may_answer`] (what the page's `may_see` asks) lets the approver answer, and
//! the ones they answered. Run by [`super::run_all`].
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
use toolgate_core::{AgentRef, ToolIdentity, ToolKind};
use toolgate_engine::approvers::{Approver, ToolSelector};
use toolgate_engine::policy::Glob;

use super::{Fixture, request};
use toolgate_inbox::{Answer, HeldRecord, NewHeldCall, Timestamp};
use toolgate_inbox::{HeldQuery, Order, VisibleTo};

/// The cases of this file (also run by [`super::run_all`]).
pub async fn run_visible(fixture: &dyn Fixture) {
    eprintln!("suite: issue24_r24_the_stores_selector_filter_agrees_with_may_answer");
    issue24_r24_the_stores_selector_filter_agrees_with_may_answer(fixture).await;
}

/// The identities of the mix: names with `_` and `%` (literal in a glob, special in
/// `LIKE`), letters of both cases, a non-ASCII letter, several kinds and sources.
fn identity(n: usize) -> Vec<ToolIdentity> {
    match n % 11 {
        0 => vec![ToolIdentity::mcp("github", "create_issue")],
        1 => vec![ToolIdentity::mcp("GitHub", "Create_Issue")],
        2 => vec![ToolIdentity::mcp("github", "createXissue")],
        3 => vec![ToolIdentity::mcp("payments", "refund_100%")],
        4 => vec![ToolIdentity::mcp("payments", "refund_1000")],
        5 => vec![ToolIdentity::toolset("github", "create_issue")],
        6 => vec![ToolIdentity::http("fetch_url")],
        7 => vec![
            ToolIdentity::mcp("github", "create_issue"),
            ToolIdentity::toolset("github", "create_issue"),
        ],
        8 => vec![ToolIdentity::mcp("café", "Éclair")],
        9 => vec![ToolIdentity::mcp("a\\b", "x\\y")],
        _ => vec![ToolIdentity::mcp("shell", "run")],
    }
}

fn agent(n: usize) -> AgentRef {
    match n % 4 {
        0 => AgentRef::profile("support"),
        1 => AgentRef::subagent("support", "Researcher"),
        2 => AgentRef::profile("ops_1"),
        _ => AgentRef::profile("opsX1"),
    }
}

fn call(n: usize, created: Timestamp) -> NewHeldCall {
    let mut r = request(json!({"n": n}));
    r.identities = identity(n);
    r.tool = format!("tool_{}", n % 11);
    r.agent = agent(n / 11);
    NewHeldCall::from_request(&r, created, Duration::from_secs(3600)).unwrap()
}

fn sel(
    tool: Option<&str>,
    server: Option<&str>,
    kind: Option<ToolKind>,
    agent: Option<&str>,
) -> ToolSelector {
    ToolSelector {
        tool: tool.map(Glob::new),
        server: server.map(Glob::new),
        kind,
        agent: agent.map(Glob::new),
    }
}

/// The selector lists of the table: each alone, and mixed.
fn selector_sets() -> Vec<Vec<ToolSelector>> {
    let one = vec![
        sel(None, None, None, None),
        sel(Some("create_issue"), None, None, None),
        sel(Some("CREATE_*"), Some("github"), None, None),
        sel(Some("create?issue"), None, None, None),
        sel(Some("refund_100%"), None, None, None),
        sel(Some("refund_*"), Some("pay*"), Some(ToolKind::Mcp), None),
        sel(None, Some("github"), None, None),
        sel(None, None, Some(ToolKind::Local), None),
        sel(None, None, Some(ToolKind::Http), None),
        sel(Some("*_*"), None, None, Some("ops_1")),
        sel(None, None, None, Some("research*")),
        sel(None, None, None, Some("*")),
        sel(Some("éclair"), None, None, None),
        sel(Some("Éclair"), Some("CAFé"), None, None),
        sel(Some("x\\y"), Some("a\\b"), None, None),
        sel(Some("x*y"), None, None, None),
        sel(Some("c*e*e"), None, None, Some("support")),
        sel(None, Some("*"), Some(ToolKind::Local), None),
    ];
    let mut sets: Vec<Vec<ToolSelector>> = vec![Vec::new()];
    sets.extend(one.iter().cloned().map(|s| vec![s]));
    for (i, a) in one.iter().enumerate() {
        let b = &one[(i * 7 + 3) % one.len()];
        let c = &one[(i * 5 + 1) % one.len()];
        sets.push(vec![a.clone(), b.clone()]);
        sets.push(vec![a.clone(), b.clone(), c.clone()]);
    }
    sets
}

fn ids(records: &[HeldRecord]) -> Vec<String> {
    records.iter().map(|r| r.id().to_owned()).collect()
}

pub async fn issue24_r24_the_stores_selector_filter_agrees_with_may_answer(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let base = Timestamp::now().saturating_sub(Duration::from_secs(900));
    for n in 0..88 {
        store
            .hold(call(n, base.saturating_add(Duration::from_secs(n as u64))))
            .await
            .unwrap();
    }
    // Some answered, by bob and by others: bob sees his own answers whatever his rights.
    let all = store.list(None).await.unwrap();
    for (i, r) in all.iter().enumerate().filter(|(i, _)| i % 6 == 0) {
        let by = if i % 12 == 0 { "bob" } else { "carol" };
        store.answer(r.id(), Answer::approved_by(by)).await.unwrap();
    }
    let all = store.list(None).await.unwrap();
    let mut checked = 0;
    for selectors in selector_sets() {
        let bob = Approver {
            name: "bob".into(),
            token_sha256: None,
            tools: Some(selectors.clone()),
            edit_policy: false,
            may_edit: false,
        };
        // The page's `may_see`: may answer, or answered it.
        let may_see = |r: &HeldRecord| {
            bob.may_answer(&r.call.identities, r.call.agent.rule_name())
                || r.approver.as_deref() == Some("bob")
        };
        let visible = VisibleTo {
            selectors: selectors.clone(),
            approver: "bob".into(),
        };
        for base_q in [HeldQuery::pending(), HeldQuery::history()] {
            for order in [Order::OldestFirst, Order::NewestFirst] {
                let q = HeldQuery {
                    visible_to: Some(visible.clone()),
                    ..base_q.clone().order(order).limit(1_000)
                };
                let mut expected: Vec<&HeldRecord> = all
                    .iter()
                    .filter(|r| base_q.matches(r) && may_see(r))
                    .collect();
                expected
                    .sort_by(|a, b| (a.call.created_at, a.id()).cmp(&(b.call.created_at, b.id())));
                if order == Order::NewestFirst {
                    expected.reverse();
                }
                let expected: Vec<String> = expected.iter().map(|r| r.id().to_owned()).collect();
                for r in &all {
                    assert_eq!(
                        q.matches(r),
                        base_q.matches(r) && may_see(r),
                        "`VisibleTo::sees` is `may_see` for {selectors:?} on {:?}",
                        r.call.identities
                    );
                }
                let page = store.query_held(&q).await.unwrap();
                assert_eq!(
                    ids(&page.records),
                    expected,
                    "R24: the store's filter is `may_see`'s for {selectors:?}"
                );
                assert_eq!(
                    store.count_held(&q).await.unwrap(),
                    expected.len() as u64,
                    "R24: and its count, for {selectors:?}"
                );
                // Paged: the pages concatenate to the whole.
                let mut paged = Vec::new();
                let mut p = q.clone().limit(4);
                loop {
                    let got = store.query_held(&p).await.unwrap();
                    paged.extend(ids(&got.records));
                    match got.next {
                        Some(c) => p.after = Some(c),
                        None => break,
                    }
                }
                assert_eq!(paged, expected, "pages of 4, for {selectors:?}");
                checked += 1;
            }
        }
    }
    assert!(checked > 100, "the table ran: {checked}");
    // Spot checks that the table is not vacuous: `_` is literal, case folds ASCII only.
    let only = |s: ToolSelector| HeldQuery {
        visible_to: Some(VisibleTo {
            selectors: vec![s],
            approver: "nobody".into(),
        }),
        ..HeldQuery::pending().limit(1_000)
    };
    let exact = store
        .query_held(&only(sel(Some("create_issue"), Some("github"), None, None)))
        .await
        .unwrap();
    assert!(!exact.records.is_empty());
    assert!(exact.records.iter().all(|r| {
        r.call.identities[0]
            .name()
            .eq_ignore_ascii_case("create_issue")
            && r.call.identities.len() == 1
    }));
    let accent = store
        .query_held(&only(sel(Some("éclair"), None, None, None)))
        .await
        .unwrap();
    assert!(accent.records.is_empty(), "`É` is not folded (ASCII only)");
}
