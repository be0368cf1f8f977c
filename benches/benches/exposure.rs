//! Exposure at catalog scale (issue 12): one agent over 10,000 MCP tools. Agents ask for
//! their tool list every turn, so a repeated `exposure` must cost about a map look-up; the
//! first one is measured per tool. Ratios are read inside the group: `exposure_cached` ÷
//! `decide_one_call` (target ≤ 1) and `expose_first` ÷ 10,000 (target ≤ 100 ns per tool).
//!
//! `cargo bench -p toolgate-benches --bench exposure`

use std::hint::black_box;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use serde_json::json;
use toolgate_benches::catalog;
use toolgate_core::{AgentRef, RunContext, ToolRef};
use toolgate_engine::{CallInput, CallView};

const TOOLS: usize = 10_000;

fn bench(c: &mut Criterion) {
    let gov = catalog(TOOLS);
    let tool = ToolRef::Name(String::from("srv1__tool_1"));
    let agent = AgentRef::profile("support");
    let input = json!({"q": "x"});
    let mut group = c.benchmark_group("exposure_10k_tools");
    group.bench_function("decide_one_call", |b| {
        b.iter(|| {
            black_box(gov.decide(CallView {
                tool: &tool,
                agent: &agent,
                input: CallInput::Value(&input),
                run: RunContext::default(),
            }))
        });
    });
    let _ = gov.exposure("support");
    group.bench_function("exposure_cached", |b| {
        b.iter(|| black_box(gov.exposure(black_box("support"))));
    });
    group.bench_function("search_cached", |b| {
        b.iter(|| {
            let Ok(e) = gov.exposure("support") else {
                return 0;
            };
            black_box(e.search("number 99").count())
        });
    });
    group.sample_size(20);
    group.bench_function("expose_first", |b| {
        // The snapshot is built and dropped outside the measurement.
        b.iter_batched_ref(
            || catalog(TOOLS),
            |fresh| black_box(fresh.exposure("support").map(|e| e.tools.len())),
            BatchSize::PerIteration,
        );
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
