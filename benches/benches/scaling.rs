//! Decision cost by rule count, one criterion group: the whole decision
//! (`Governance::decide`), the indexed policy evaluation alone (`Policy::evaluate`) and the
//! plain loop over every rule (`Policy::evaluate_naive`, for reference) at 10, 200, 2,000
//! and 20,000 rules of the same mix (75% exact names, 20% `*` patterns, 5% `when` rules;
//! `limits.tool_rules` raised so every size validates), on the allow path.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use toolgate_benches::{
    SIZES, call_agent, call_input, call_subject, call_tool, governance, policy,
};
use toolgate_core::Verdict;
use toolgate_engine::{CallInput, CallView};

fn bench(c: &mut Criterion) {
    let (tool, agent, input) = (call_tool(), call_agent(), call_input());
    let subject = call_subject();
    let view = CallView {
        tool: &tool,
        agent: &agent,
        input: CallInput::Value(&input),
        run: Default::default(),
    };

    let mut group = c.benchmark_group("rule_count");
    for n in SIZES {
        let gov = governance(n);
        let policy = policy(n);
        assert_eq!(
            gov.decide(view).verdict,
            Verdict::Run {
                auto_approved: false
            }
        );
        assert!(policy.evaluate(&subject, &input).matched.is_empty());
        group.bench_with_input(BenchmarkId::new("decide", n), &n, |b, _| {
            b.iter(|| black_box(&gov).decide(black_box(view)))
        });
        group.bench_with_input(BenchmarkId::new("evaluate", n), &n, |b, _| {
            b.iter(|| black_box(&policy).evaluate(black_box(&subject), black_box(&input)))
        });
        group.bench_with_input(BenchmarkId::new("evaluate_naive", n), &n, |b, _| {
            b.iter(|| black_box(&policy).evaluate_naive(black_box(&subject), black_box(&input)))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
