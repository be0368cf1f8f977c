//! Figures, not assertions about time (issue 24): one page and the count of 10,000 pending
//! calls in PostgreSQL, for a person with rights over every tool and for an approver whose
//! selectors cover none of them (the selectors in the statement, `HeldQuery::visible_to`).
//! Run with `cargo test -p toolgate-inbox-postgres --test measure_visible -- --ignored
//! --nocapture`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::json;
use toolgate_engine::approvers::ToolSelector;
use toolgate_engine::policy::Glob;
use toolgate_inbox::HeldCalls;
use toolgate_inbox::{HeldQuery, VisibleTo};
use toolgate_inbox_suite::held;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a timed run for the figures in the report; prints, asserts nothing about time"]
async fn measure_issue24_an_approvers_page_of_10000_pending_in_postgres() {
    let url = require_pg!();
    let schema = fresh_schema();
    let store = connect(&url, &schema, "measure").await;
    let t = Instant::now();
    for i in 0..10_000 {
        store
            .hold(held(
                json!({"order": format!("A-{i}")}),
                Duration::from_secs(7200),
            ))
            .await
            .unwrap();
    }
    eprintln!("held 10,000 in {:?}", t.elapsed());
    let everyone = HeldQuery::pending().limit(15);
    let bob = HeldQuery {
        visible_to: Some(VisibleTo {
            selectors: vec![ToolSelector {
                server: Some(Glob::new("github")),
                ..Default::default()
            }],
            approver: "bob".into(),
        }),
        ..HeldQuery::pending().limit(15)
    };
    for (name, q) in [("every tool", &everyone), ("selectors covering none", &bob)] {
        let mut runs = Vec::new();
        let mut n = 0;
        for _ in 0..9 {
            let t = Instant::now();
            let page = store.query_held(q).await.unwrap();
            n = store.count_held(q).await.unwrap();
            runs.push(t.elapsed());
            std::hint::black_box(page);
        }
        runs.sort();
        eprintln!(
            "page + count, {name}: median {:?}, max {:?} ({n} match)",
            runs[4], runs[8]
        );
    }
    drop(store);
    drop_schemas(&url, &[schema]).await;
}
