//! Where the time of one allowed decision goes, at 200 rules: each public step of
//! `Governance::decide` alone (R14 step 1 look-up, R36 input bounds, step 2 allowed names,
//! steps 3–6, the tenant policy), beside the whole decision. One criterion group, so the
//! parts and the whole come from one run. Used to explain the stack-overhead figures.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use toolgate_benches::{call_agent, call_input, call_subject, call_tool, governance, policy};
use toolgate_engine::{CallInput, CallView};

const RULES: usize = 200;

fn bench(c: &mut Criterion) {
    let gov = governance(RULES);
    let policy = policy(RULES);
    let (tool, agent, input) = (call_tool(), call_agent(), call_input());
    let subject = call_subject();
    let view = CallView {
        tool: &tool,
        agent: &agent,
        input: CallInput::Value(&input),
        run: Default::default(),
    };
    let Ok(entry) = gov.lookup(&tool) else {
        panic!("the benched tool is registered")
    };
    let Ok(profile) = gov.check_allowed(&agent, entry) else {
        panic!("the benched agent is allowed the tool")
    };

    let mut group = c.benchmark_group("decide_anatomy_200_rules");
    group.bench_function("1_lookup", |b| {
        b.iter(|| black_box(&gov).lookup(black_box(&tool)).is_ok())
    });
    group.bench_function("2_check_input", |b| {
        b.iter(|| black_box(&gov).check_input(black_box(&input)).is_ok())
    });
    group.bench_function("3_check_allowed", |b| {
        b.iter(|| {
            black_box(&gov)
                .check_allowed(black_box(&agent), black_box(entry))
                .is_ok()
        })
    });
    group.bench_function("4_confidential_air_gap_mode", |b| {
        b.iter(|| {
            let g = black_box(&gov);
            g.check_confidential(profile, entry)
                .and_then(|()| g.check_air_gap(entry))
                .and_then(|()| g.check_agent_mode(profile, entry))
                .is_ok()
        })
    });
    group.bench_function("5_policy_evaluate", |b| {
        b.iter(|| black_box(&policy).evaluate(black_box(&subject), black_box(&input)))
    });
    group.bench_function("6_decide_whole", |b| {
        b.iter(|| black_box(&gov).decide(black_box(view)))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
