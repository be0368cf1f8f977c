//! `simulate`'s engine path (R44–R46) against a small reference model of quotas and grants
//! written straight from SPEC R44, R45 and R26, over random call sequences.
//!
//! The default case count is modest for debug runs. `TOOLGATE_SIM_CASES` scales it: a
//! release run of at least 100,000 steps is
//! `TOOLGATE_SIM_CASES=6000 cargo test --release -p toolgate-engine --test simulate_reference`
//! (each case is up to 40 calls, 20 on average; the test prints the steps it made).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};
use toolgate_core::{AgentRef, RunContext, RunMode, ToolCall, Verdict};
use toolgate_engine::CallView;
use toolgate_engine::config::{Format, load_str};
use toolgate_engine::grant::parse_grants;
use toolgate_engine::simulate::{Answer, Simulation};

const AGENTS: [&str; 2] = ["support", "ops"];
/// (wire name, own name, local?, asks at agent level?)
const TOOLS: [(&str, &str, bool, bool); 3] = [
    ("search", "search", false, false),
    ("refund", "refund", false, true),
    ("coding__write_file", "write_file", true, true),
];
const SESSIONS: [Option<&str>; 3] = [None, Some("s1"), Some("s2")];

#[derive(Debug, Clone)]
struct Quota {
    max: u64,
    window_secs: u64,
    per: Vec<&'static str>,
    tool: Option<&'static str>,
    local: bool,
}

#[derive(Debug, Clone)]
struct Grant {
    agent: &'static str,
    tool: &'static str,
    session: Option<&'static str>,
    expires_at: u64,
    max_calls: Option<u64>,
}

#[derive(Debug, Clone)]
struct Call {
    dt: u64,
    agent: usize,
    tool: usize,
    session: usize,
    answer: Option<Answer>,
    mode: RunMode,
    background: bool,
}

fn quota() -> impl Strategy<Value = Quota> {
    (
        1u64..4,
        1u64..20,
        proptest::sample::subsequence(vec!["agent", "session", "tool"], 0..=3),
        prop_oneof![
            Just(None),
            Just(Some("search")),
            Just(Some("refund")),
            Just(Some("write_file"))
        ],
        proptest::bool::weighted(0.3),
    )
        .prop_map(|(max, window_secs, per, tool, local)| Quota {
            max,
            window_secs,
            per,
            tool,
            local,
        })
}

fn grant() -> impl Strategy<Value = Grant> {
    (
        prop_oneof![Just("*"), Just("support"), Just("ops"), Just("sup*")],
        prop_oneof![Just("*"), Just("refund"), Just("write_file"), Just("re*")],
        prop_oneof![Just(None), Just(Some("s1")), Just(Some("s2"))],
        prop_oneof![3 => (0u64..40).prop_map(|k| k * 500), 1 => 0u64..120_000],
        prop_oneof![Just(None), (1u64..4).prop_map(Some)],
    )
        .prop_map(|(agent, tool, session, expires_at, max_calls)| Grant {
            agent,
            tool,
            session,
            expires_at,
            max_calls,
        })
}

fn call() -> impl Strategy<Value = Call> {
    (
        // Steps of 500 ms land on window edges and expiries exactly.
        prop_oneof![
            2 => Just(0u64),
            5 => (0u64..6).prop_map(|k| k * 500),
            2 => (0u64..40).prop_map(|k| k * 500),
            1 => 0u64..1_200
        ],
        0..AGENTS.len(),
        0..TOOLS.len(),
        0..SESSIONS.len(),
        prop_oneof![
            Just(None),
            Just(Some(Answer::Approve)),
            Just(Some(Answer::Deny))
        ],
        prop_oneof![
            6 => Just(RunMode::UseAgentPolicy),
            1 => Just(RunMode::AutoApproveRequired),
            1 => Just(RunMode::AutoRejectRequired)
        ],
        proptest::bool::weighted(0.25),
    )
        .prop_map(
            |(dt, agent, tool, session, answer, mode, background)| Call {
                dt,
                agent,
                tool,
                session,
                answer,
                mode,
                background,
            },
        )
}

fn config(quotas: &[Quota]) -> Value {
    let quotas: Vec<Value> = quotas
        .iter()
        .map(|q| {
            let mut v = json!({"max": q.max, "window_secs": q.window_secs, "per": q.per});
            if let Some(t) = q.tool {
                v["tool"] = json!(t);
            }
            if q.local {
                v["kind"] = json!("local");
            }
            v
        })
        .collect();
    json!({
        "approval": {"channel": "inbox"},
        "tools": [{"kind": "http", "name": "search"},
                  {"kind": "http", "name": "refund", "approval": "require_approval"},
                  {"toolset": "coding", "name": "write_file", "approval": "require_approval"}],
        "agents": [{"name": "support", "allowed_tools": ["search", "refund", "coding__write_file"]},
                   {"name": "ops", "allowed_tools": ["*"], "approval": {"channel": "interactive"}}],
        "policy": {"rules": [], "quotas": quotas}
    })
}

fn grants_json(grants: &[Grant]) -> Value {
    Value::Array(
        grants
            .iter()
            .enumerate()
            .map(|(i, g)| {
                let mut v = json!({"id": format!("g{i}"), "agent": g.agent, "tool": g.tool,
                                   "expires_at": g.expires_at, "granted_by": "alice", "reason": "r"});
                if let Some(s) = g.session {
                    v["session"] = json!(s);
                }
                if let Some(m) = g.max_calls {
                    v["max_calls"] = json!(m);
                }
                v
            })
            .collect(),
    )
}

/// What the model says about one call.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Outcome {
    outcome: &'static str,
    refusal: Option<&'static str>,
    auto_approved: bool,
    granted: Option<String>,
    sent: bool,
    retry_after_secs: Option<u64>,
}

/// SPEC R44, R45, R26 for this vocabulary, written out plainly.
#[derive(Debug, Default)]
struct Model {
    /// (quota index, group values, send time)
    sends: Vec<(usize, Vec<String>, u64)>,
    uses: Vec<u64>,
}

fn pattern(p: &str, name: &str) -> bool {
    match p.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => p == name,
    }
}

impl Model {
    fn step(&mut self, quotas: &[Quota], grants: &[Grant], c: &Call, now: u64) -> Outcome {
        let (_, own, local, asks) = TOOLS[c.tool];
        let agent = AGENTS[c.agent];
        let session = SESSIONS[c.session];
        self.uses.resize(grants.len(), 0);
        let covering: Vec<(usize, Vec<String>)> = quotas
            .iter()
            .enumerate()
            .filter(|(_, q)| q.local == local && q.tool.is_none_or(|t| t == own))
            .map(|(i, q)| {
                let group = q
                    .per
                    .iter()
                    .map(|k| match *k {
                        "agent" => agent.to_owned(),
                        "session" => format!("{session:?}"),
                        _ => TOOLS[c.tool].0.to_owned(),
                    })
                    .collect();
                (i, group)
            })
            .collect();
        let mut retry_ms: Option<u64> = None;
        for (i, group) in &covering {
            let q = &quotas[*i];
            let w = q.window_secs * 1000;
            let mut times: Vec<u64> = self
                .sends
                .iter()
                .filter(|(j, g, t)| j == i && g == group && now < t + w && *t <= now)
                .map(|(_, _, t)| *t)
                .collect();
            times.sort_unstable();
            let n = times.len() as u64;
            if n >= q.max {
                let oldest = times[(n - q.max) as usize];
                let wait = oldest + w - now;
                retry_ms = Some(retry_ms.map_or(wait, |r| r.max(wait)));
            }
        }
        let refused = |code, retry| Outcome {
            outcome: "refused",
            refusal: Some(code),
            auto_approved: false,
            granted: None,
            sent: false,
            retry_after_secs: retry,
        };
        if let Some(ms) = retry_ms {
            return refused("rate_limited", Some(ms.div_ceil(1000)));
        }
        let mut out = Outcome {
            outcome: "run",
            refusal: None,
            auto_approved: false,
            granted: None,
            sent: true,
            retry_after_secs: None,
        };
        if asks {
            if c.mode == RunMode::AutoRejectRequired {
                return refused("rejected", None);
            } else if c.mode == RunMode::AutoApproveRequired {
                out.auto_approved = true;
            } else if let Some(i) = grants.iter().enumerate().position(|(i, g)| {
                now < g.expires_at
                    && g.max_calls.is_none_or(|m| self.uses[i] < m)
                    && pattern(g.agent, agent)
                    && pattern(g.tool, own)
                    && g.session.is_none_or(|s| Some(s) == session)
            }) {
                self.uses[i] += 1;
                out.granted = Some(format!("g{i}"));
            } else if c.background && agent == "ops" {
                // R26: a background task cannot wait for an interactive approval.
                return refused("rejected", None);
            } else {
                out.outcome = "ask";
                out.sent = c.answer == Some(Answer::Approve);
            }
        }
        if out.sent {
            for (i, group) in covering {
                self.sends.push((i, group, now));
            }
        }
        out
    }
}

static STEPS: AtomicUsize = AtomicUsize::new(0);

fn check(quotas: &[Quota], grants: &[Grant], calls: &[Call]) -> Result<(), TestCaseError> {
    let gov = load_str(&config(quotas).to_string(), Format::Json)
        .map_err(|e| TestCaseError::fail(format!("config: {e}")))?;
    let parsed = parse_grants(&grants_json(grants).to_string())
        .map_err(|e| TestCaseError::fail(format!("grants: {e}")))?;
    let mut sim = Simulation::new(parsed);
    let mut model = Model::default();
    let mut now = 0u64;
    for (k, c) in calls.iter().enumerate() {
        now += c.dt;
        let tc = ToolCall::new(
            AgentRef::profile(AGENTS[c.agent]),
            TOOLS[c.tool].0,
            json!({}),
        )
        .with_run(RunContext {
            mode: c.mode,
            background: c.background,
        });
        let step = sim
            .step(&gov, CallView::of(&tc), SESSIONS[c.session], now, c.answer)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let d = &step.decision;
        let got = Outcome {
            outcome: d.verdict.as_str(),
            refusal: d.refusal().map(|r| r.code.as_str()),
            auto_approved: matches!(
                d.verdict,
                Verdict::Run {
                    auto_approved: true
                }
            ),
            granted: d.granted.as_ref().map(|g| g.id.clone()),
            sent: step.sent,
            retry_after_secs: d.retry_after_secs,
        };
        let want = model.step(quotas, grants, c, now);
        prop_assert_eq!(&got, &want, "call {} at {}: {:?}", k, now, c);
        STEPS.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

#[test]
fn r44_r45_r46_simulate_agrees_with_the_reference_model() {
    let cases = std::env::var("TOOLGATE_SIM_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(96);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (
        proptest::collection::vec(quota(), 0..4),
        proptest::collection::vec(grant(), 0..4),
        proptest::collection::vec(call(), 1..40),
    );
    runner
        .run(&strategy, |(quotas, grants, calls)| {
            check(&quotas, &grants, &calls)
        })
        .unwrap();
    eprintln!(
        "simulate_reference: {} steps agreed",
        STEPS.load(Ordering::Relaxed)
    );
}
