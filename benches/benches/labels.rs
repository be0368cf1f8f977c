//! R49 (issue 37 item 7): a decision under 50 rules and 50 quotas that select by `labels` and
//! `session_labels`, beside the same decision under 50 rules and 50 quotas that do not — the
//! tool's labels and the session's read per call, one criterion group, so both come from one
//! run. Target: labelled ÷ plain ≤ 1.15×. Figures in `benches/README.md`.
//!
//! `cargo bench -p toolgate-benches --bench labels`

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use toolgate_core::{AgentRef, ToolCall};
use toolgate_engine::config::{Format, load_str};
use toolgate_engine::quota::{MemoryQuotaCounter, QuotaCounter, QuotaGroup};
use toolgate_engine::{CallView, Governance, History, grant::MemoryGrants, labels::LabelSet};

const N: usize = 50;

/// 50 rules and 50 quotas that never match the benched call; `labelled`: each selects by
/// labels and session labels too.
fn governance(labelled: bool) -> Governance {
    let select = |i: usize| {
        if labelled {
            format!(r#""labels": ["egress"], "session_labels": ["private", "l{i}"]"#)
        } else {
            format!(r#""tool": "other_{i}""#)
        }
    };
    let rules: Vec<String> = (0..N)
        .map(|i| format!(r#"{{"effect": "ask", {}, "reason": "r{i}"}}"#, select(i)))
        .collect();
    let quotas: Vec<String> = (0..N)
        .map(|i| format!(r#"{{"max": 1000000, "window_secs": 60, {}}}"#, select(i)))
        .collect();
    let text = format!(
        r#"{{"servers": {{"mail": {{"labels": ["private"]}}}},
            "tools": [{{"kind": "http", "name": "post", "network": "egress"}},
                      {{"server": "mail", "name": "read"}}],
            "agents": [{{"name": "a", "allowed_tools": ["post", "mail__read"]}}],
            "policy": {{"rules": [{}], "quotas": [{}]}}}}"#,
        rules.join(", "),
        quotas.join(", ")
    );
    load_str(&text, Format::Json).unwrap()
}

fn bench(c: &mut Criterion) {
    let (plain, labelled) = (governance(false), governance(true));
    let sends = MemoryQuotaCounter::new();
    // The session has read private mail (not every label a rule asks for: no rule matches).
    sends
        .reserve_labelled(
            &[] as &[QuotaGroup],
            0,
            Some("s"),
            &LabelSet::of(["private"]),
        )
        .unwrap();
    let grants = MemoryGrants::new(Vec::new());
    let call = ToolCall::new(AgentRef::profile("a"), "post", json!({"text": "hello"}));
    let view = CallView::of(&call);
    let history = History::new(1_000, &sends, &grants).in_session(Some("s"));
    assert!(
        labelled
            .decide_call_at(view, Vec::new(), &history)
            .decision
            .runs()
    );
    assert!(
        plain
            .decide_call_at(view, Vec::new(), &history)
            .decision
            .runs()
    );
    let mut group = c.benchmark_group("r49_decide_50_rules_50_quotas");
    group.bench_function("plain", |b| {
        b.iter(|| black_box(&plain).decide_call_at(black_box(view), Vec::new(), &history))
    });
    group.bench_function("labelled", |b| {
        b.iter(|| black_box(&labelled).decide_call_at(black_box(view), Vec::new(), &history))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
