//! `tool_search` (`mcp.deferred_tools`, issue 23) over an agent's exposure of 10,000 tools:
//! one search of a few words, the 10 best, from the index `toolgate mcp serve` builds once per
//! governance snapshot and agent. Target: ≤ 2 ms (benches/README.md).
//!
//! `cargo bench -p toolgate-mcp --features serve --bench tool_search`
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a bench: a failed setup stops it"
)]

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use rmcp::model::Tool;
use serde_json::{Map, json};
use toolgate_mcp::serve::ToolIndex;

const VERBS: &[&str] = &[
    "create", "read", "update", "delete", "list", "search", "sync", "export",
];
const NOUNS: &[&str] = &[
    "issue",
    "page",
    "invoice",
    "customer",
    "order",
    "file",
    "ticket",
    "report",
    "user",
    "repo",
    "branch",
    "comment",
    "label",
    "refund",
    "payment",
    "message",
    "channel",
    "event",
    "alert",
    "dashboard",
];

fn tools(n: usize) -> Vec<Tool> {
    let schema = match json!({"type": "object", "properties": {"id": {"type": "string"}}}) {
        serde_json::Value::Object(m) => Arc::new(m),
        _ => Arc::new(Map::new()),
    };
    (0..n)
        .map(|i| {
            let verb = VERBS[i % VERBS.len()];
            let noun = NOUNS[(i / VERBS.len()) % NOUNS.len()];
            let server = format!("srv{}", i / 100);
            Tool::new(
                format!("{server}__{verb}_{noun}_{i}"),
                format!(
                    "{verb} a {noun} in the {server} system; returns the {noun} as JSON with its id, owner and timestamps (tool {i})."
                ),
                Arc::clone(&schema),
            )
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let index = ToolIndex::new(Arc::new(tools(10_000)));
    let mut g = c.benchmark_group("tool_search");
    g.bench_function("10000_tools/refund_order", |b| {
        b.iter(|| black_box(index.search(black_box("refund an order"), 10)))
    });
    g.bench_function("10000_tools/no_match", |b| {
        b.iter(|| black_box(index.search(black_box("kubernetes pod"), 10)))
    });
    g.bench_function("10000_tools/build_index", |b| {
        let list = Arc::new(tools(10_000));
        b.iter(|| black_box(ToolIndex::new(Arc::clone(&list))))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
