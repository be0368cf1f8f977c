//! `decide` p99 under reload (issue 12): the latency distribution of one `decide` (the
//! snapshot loaded from a `GovernanceHandle`, then `Governance::decide` on the allowed call)
//! at 20,000 rules, alone and while another thread replaces the 20,000-rule policy in a loop
//! (parses its JSON text, `Policy::from_json_str`, and `GovernanceHandle::replace_policy`),
//! as a tenant re-putting its policy without pause would. Criterion reports means and
//! medians, so this bench times each call itself (`Instant` around it; the timer's own cost
//! is in every sample of both sides) and prints percentiles; no assertion on them.
//!
//! Rounds alternate quiet / under reload, so slow drift of the machine's load touches both.
//!
//! Run: `cargo bench -p toolgate-benches --bench reload` (`RELOAD_SAMPLES`, `RELOAD_ROUNDS`
//! override 200,000 samples and 3 rounds).

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use toolgate::GovernanceHandle;
use toolgate_benches::{call_agent, call_input, call_tool, governance, policy_json};
use toolgate_core::Verdict;
use toolgate_engine::policy::{Limits, Policy};
use toolgate_engine::{CallInput, CallView, PolicyState};

const RULES: usize = 20_000;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `samples` timed decisions; sorted nanoseconds.
fn sample(handle: &GovernanceHandle, samples: usize) -> Vec<u64> {
    let (tool, agent, input) = (call_tool(), call_agent(), call_input());
    let view = CallView {
        tool: &tool,
        agent: &agent,
        input: CallInput::Value(&input),
        run: Default::default(),
    };
    let mut out = Vec::with_capacity(samples);
    for _ in 0..samples {
        let start = Instant::now();
        let decision = black_box(handle.load()).decide(black_box(view));
        let took = start.elapsed();
        debug_assert!(matches!(decision.verdict, Verdict::Run { .. }));
        black_box(decision);
        out.push(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX));
    }
    out.sort_unstable();
    out
}

fn pct(sorted: &[u64], p: f64) -> u64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or(0)
}

fn main() {
    // `cargo bench` passes `--bench` and perhaps a filter: both are ignored.
    let samples = env("RELOAD_SAMPLES", 200_000);
    let rounds = env("RELOAD_ROUNDS", 3);
    let handle = GovernanceHandle::new(governance(RULES));
    let text = policy_json(RULES).to_string();
    let limits = Limits {
        tool_rules: RULES,
        ..Default::default()
    };
    {
        let check = sample(&handle, 10);
        assert!(!check.is_empty());
        let view_tool = call_tool();
        let (agent, input) = (call_agent(), call_input());
        let d = handle.load().decide(CallView {
            tool: &view_tool,
            agent: &agent,
            input: CallInput::Value(&input),
            run: Default::default(),
        });
        assert!(
            matches!(d.verdict, Verdict::Run { .. }),
            "the benched call does not run: {d:?}"
        );
    }
    println!(
        "decide at {RULES} rules, {samples} samples per side per round; nanoseconds (p50 / p90 / p99 / p99.9 / max)"
    );
    let mut ratios = Vec::new();
    for round in 1..=rounds {
        let quiet = sample(&handle, samples);

        let stop = Arc::new(AtomicBool::new(false));
        let reloads = Arc::new(AtomicU64::new(0));
        let reloader = {
            let (stop, reloads, handle, text) =
                (stop.clone(), reloads.clone(), handle.clone(), text.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let p = Policy::from_json_str(&text, &limits).expect("the policy validates");
                    handle
                        .replace_policy(PolicyState::readable(p))
                        .expect("the policy replaces");
                    reloads.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        // Let the first replacement land before sampling.
        while reloads.load(Ordering::Relaxed) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let started = Instant::now();
        let loaded = sample(&handle, samples);
        let window = started.elapsed();
        stop.store(true, Ordering::Relaxed);
        reloader.join().expect("reloader");
        let during = reloads.load(Ordering::Relaxed);

        let row = |name: &str, s: &[u64]| {
            println!(
                "round {round} {name:>14}: {} / {} / {} / {} / {}",
                pct(s, 0.5),
                pct(s, 0.9),
                pct(s, 0.99),
                pct(s, 0.999),
                s.last().copied().unwrap_or(0)
            );
        };
        row("quiet", &quiet);
        row("under reload", &loaded);
        let ratio = pct(&loaded, 0.99) as f64 / pct(&quiet, 0.99).max(1) as f64;
        println!(
            "round {round}: {during} replacements in all ({:.1} per second of sampling); p99 under reload / quiet = {ratio:.2}×",
            during as f64 / window.as_secs_f64().max(1e-9)
        );
        ratios.push(ratio);
    }
    ratios.sort_by(f64::total_cmp);
    println!(
        "median over rounds of p99 under reload / quiet: {:.2}× (target ≤ 2×)",
        ratios[ratios.len() / 2]
    );
}
