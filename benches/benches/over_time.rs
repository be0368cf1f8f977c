//! Governance over time (R44, R45, issue 21): `decide` at 200 rules against `decide_at` with
//! 50 quotas (5 of them covering the benched call, each with sends recorded) and 50 live
//! grants in memory, on the same call; and the cost of recording one send (`record_send`:
//! the atomic check-and-record) in memory and in a SQLite file. One criterion group, so the
//! ratios come from one run.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use toolgate_benches::{
    AGENT, CALL_SERVER, CALL_TOOL, call_agent, call_input, call_tool, config_json,
};
use toolgate_core::RunContext;
use toolgate_engine::config::{Format, load_str};
use toolgate_engine::grant::{MemoryGrants, parse_grants};
use toolgate_engine::quota::{MemoryQuotaCounter, NoSends, QuotaCounter};
use toolgate_engine::{CallInput, CallView, History};
use toolgate_inbox::SqliteQuotaCounter;

const QUOTAS: usize = 50;
const GRANTS: usize = 50;

fn over_time(c: &mut Criterion) {
    let plain = load_str(&config_json(200).to_string(), Format::Json).expect("loads");
    let mut doc = config_json(200);
    let quotas: Vec<_> = (0..QUOTAS)
        .map(|i| {
            // Every tenth covers the benched call, the rest other tools of its server.
            let tool = if i % 10 == 0 {
                CALL_TOOL.to_owned()
            } else {
                format!("tool_{}", i % 15)
            };
            json!({"server": CALL_SERVER, "tool": tool, "max": 1_000_000_000u64,
                   "window_secs": 3600 + i, "per": ["agent"]})
        })
        .collect();
    doc["policy"]["quotas"] = json!(quotas);
    doc["limits"]["tool_rules"] = json!(200 + QUOTAS);
    let timed = load_str(&doc.to_string(), Format::Json).expect("loads with quotas");
    let grants = parse_grants(
        &json!((0..GRANTS)
            .map(|i| json!({"id": format!("g-{i}"), "agent": AGENT, "tool": format!("tool_{}", i % 15),
                            "server": CALL_SERVER, "expires_at": 9_999_999_999_999u64,
                            "granted_by": "alice", "reason": "bench"}))
            .collect::<Vec<_>>())
        .to_string(),
    )
    .expect("grants parse");
    let grants = MemoryGrants::new(grants);
    let sends = MemoryQuotaCounter::new();
    let (tool, agent, input) = (call_tool(), call_agent(), call_input());
    let view = || CallView {
        tool: &tool,
        agent: &agent,
        input: CallInput::Value(&input),
        run: RunContext::default(),
    };
    // Some sends in the covering quotas' windows.
    for t in 0..100u64 {
        let at = History::new(t, &sends, &grants);
        let d = timed.decide_call_at(view(), Vec::new(), &at);
        timed.record_send(&d, &at).expect("room");
    }
    let now = 1_000u64;
    let mut g = c.benchmark_group("over_time");
    g.bench_function("decide_200_rules", |b| {
        b.iter(|| black_box(plain.decide(view())))
    });
    g.bench_function("decide_at_50_quotas_50_grants", |b| {
        let at = History::new(now, &sends, &grants);
        b.iter(|| black_box(timed.decide_at(view(), &at)))
    });
    g.bench_function("decide_at_50_quotas_no_counter", |b| {
        // The same quotas and grants with a counter that holds nothing: what the selection
        // and the group keys cost apart from the counter's look-ups.
        let at = History::new(now, &NoSends, &grants);
        b.iter(|| black_box(timed.decide_at(view(), &at)))
    });
    let decided = timed.decide_call_at(view(), Vec::new(), &History::new(now, &sends, &grants));
    let groups = decided.quota_groups().to_vec();
    g.bench_function("reserve_memory", |b| {
        let counter = MemoryQuotaCounter::new();
        let mut t = now;
        b.iter(|| {
            t += 1;
            black_box(counter.reserve(&groups, t))
        })
    });
    let dir = std::env::temp_dir().join(format!("toolgate-bench-quota-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary folder");
    let sqlite = SqliteQuotaCounter::open(dir.join("quota.db")).expect("opens");
    g.bench_function("reserve_sqlite", |b| {
        let mut t = now;
        b.iter(|| {
            t += 1;
            black_box(sqlite.reserve(&groups, t))
        })
    });
    g.finish();
    let _ = std::fs::remove_dir_all(dir);
}

criterion_group!(benches, over_time);
criterion_main!(benches);
