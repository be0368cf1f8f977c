//! R46: the shadow tenant policy, decided beside the enforced one on the same input,
//! history and grants, and never changing what happens to a call.
//!
//! The property test decides random call sequences (quotas, grants, run modes) under random
//! enforced and shadow policies three ways: by a snapshot without a shadow, by the same
//! snapshot with the shadow (its enforced decisions and sends must be identical), and the
//! shadow's decisions against a snapshot that *enforces* the shadow policy over the same
//! history (they must be equal: the shadow is the enforced decision it would have been).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use proptest::prelude::*;
use serde_json::{Value, json};
use toolgate_core::{AgentRef, RefusalCode, RunContext, RunMode, ToolCall, Verdict};
use toolgate_engine::config::{Format, load_str};
use toolgate_engine::grant::{MemoryGrants, parse_grants};
use toolgate_engine::policy::{Limits, Policy};
use toolgate_engine::quota::MemoryQuotaCounter;
use toolgate_engine::{CallView, Governance, History, PolicyState};

const BASE: &str = r#"{
    "approval": {"channel": "interactive"},
    "tools": [{"kind": "http", "name": "search"}, {"kind": "http", "name": "refund", "approval": "require_approval"}],
    "agents": [{"name": "support", "allowed_tools": ["search", "refund"]}, {"name": "ops", "allowed_tools": ["search"]}]
}"#;

fn with(extra: &str) -> String {
    let mut v: Value = serde_json::from_str(BASE).unwrap();
    let e: Value = serde_json::from_str(extra).unwrap();
    for (k, x) in e.as_object().unwrap() {
        v[k] = x.clone();
    }
    v.to_string()
}

#[test]
fn r46_policy_shadow_loads_from_the_configuration_and_is_decided_beside() {
    let gov = load_str(
        &with(r#"{"policy_shadow": {"rules": [{"effect": "deny", "tool": "search", "reason": "no more searching"}]}}"#),
        Format::Json,
    )
    .unwrap();
    assert!(gov.shadow_policy().is_some());
    let call = ToolCall::new(AgentRef::profile("support"), "search", json!({}));
    let h = History::none();
    let enforced = gov.decide_call_at(CallView::of(&call), Vec::new(), &h);
    assert!(enforced.decision.runs(), "the shadow is never enforced");
    let shadow = gov
        .decide_shadow_at(CallView::of(&call), Vec::new(), &h)
        .unwrap();
    assert_eq!(
        shadow.decision.verdict,
        Verdict::Refused(RefusalCode::Denied)
    );
    assert_eq!(shadow.decision.reasons, ["no more searching"]);
    // Written back with the configuration.
    let printed = toolgate_engine::config::effective(&gov);
    assert_eq!(printed["policy_shadow"]["rules"][0]["effect"], "deny");
}

#[test]
fn r46_an_unreadable_policy_shadow_is_a_load_error_at_its_path() {
    let errs = load_str(
        &with(r#"{"policy_shadow": {"rules": [{"effect": "maybe"}]}}"#),
        Format::Json,
    )
    .unwrap_err();
    assert!(
        errs.errors
            .iter()
            .any(|e| e.path == "policy_shadow.rules[0].effect"),
        "{errs}"
    );
    let errs = load_str(&with(r#"{"policy_shadow": []}"#), Format::Json).unwrap_err();
    assert!(
        errs.errors
            .iter()
            .all(|e| e.path.starts_with("policy_shadow")),
        "{errs}"
    );
}

#[test]
fn r46_a_shadow_with_the_governor_disarmed_is_refused() {
    let text =
        r#"{"enforce_tool_invocation": false, "policy_shadow": {"rules": [{"effect": "deny"}]}}"#;
    let errs = load_str(text, Format::Json).unwrap_err();
    assert_eq!(errs.errors[0].path, "policy_shadow");
    let gov = load_str(r#"{"enforce_tool_invocation": false}"#, Format::Json).unwrap();
    let deny =
        Policy::from_json_str(r#"{"rules": [{"effect": "deny"}]}"#, &Limits::default()).unwrap();
    assert!(gov.with_shadow_policy(Some(deny)).is_err());
}

#[test]
fn r46_no_shadow_decides_nothing() {
    let gov = load_str(BASE, Format::Json).unwrap();
    let call = ToolCall::new(AgentRef::profile("support"), "search", json!({}));
    assert!(
        gov.decide_shadow_at(CallView::of(&call), Vec::new(), &History::none())
            .is_none()
    );
}

// ----- the property -----

const TOOLS: [&str; 3] = ["search", "refund", "nothing"];
const AGENTS: [&str; 2] = ["support", "ops"];

/// One random policy: rules over the tools and an amount, a default and maybe a quota.
fn policy() -> impl Strategy<Value = Value> {
    let rule = (
        prop_oneof![Just("allow"), Just("ask"), Just("deny")],
        prop::option::of(prop_oneof![Just("search"), Just("refund"), Just("*")]),
        prop::option::of(0u64..200),
    )
        .prop_map(|(effect, tool, lte)| {
            let mut r = json!({"effect": effect});
            if let Some(t) = tool {
                r["tool"] = json!(t);
            }
            if let Some(n) = lte {
                r["when"] = json!({"amount": {"lte": n}});
            }
            r
        });
    (
        prop::collection::vec(rule, 0..4),
        prop_oneof![Just("allow"), Just("ask"), Just("deny")],
        prop::option::of((1u64..4, 1u64..30)),
    )
        .prop_map(|(rules, default, quota)| {
            let mut p = json!({"default": default, "rules": rules});
            if let Some((max, window)) = quota {
                p["quotas"] = json!([{"max": max, "window_secs": window, "per": ["agent"]}]);
            }
            p
        })
}

#[derive(Debug, Clone)]
struct Step {
    dt: u64,
    agent: usize,
    tool: usize,
    amount: u64,
    mode: RunMode,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        (
            0u64..8_000,
            0..AGENTS.len(),
            0..TOOLS.len(),
            0u64..250,
            prop_oneof![
                Just(RunMode::UseAgentPolicy),
                Just(RunMode::AutoApproveRequired),
                Just(RunMode::AutoRejectRequired)
            ],
        )
            .prop_map(|(dt, agent, tool, amount, mode)| Step {
                dt,
                agent,
                tool,
                amount,
                mode,
            }),
        1..30,
    )
}

const GRANTS: &str = r#"[{"id": "g1", "agent": "support", "tool": "refund", "when": {"amount": {"lte": 100}},
    "granted_by": "alice", "reason": "small refunds", "expires_at": 60000, "max_calls": 3}]"#;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("TOOLGATE_PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(256)
    ))]

    #[test]
    fn r46_shadow_changes_nothing_and_decides_as_the_policy_would(
        enforced in policy(),
        shadow in policy(),
        steps in steps(),
    ) {
        let limits = Limits::default();
        let plain: Governance = load_str(&with(&json!({"policy": enforced}).to_string()), Format::Json).unwrap();
        let shadow_policy = Policy::from_json_str(&shadow.to_string(), &limits).unwrap();
        let shadowed = plain.with_shadow_policy(Some(shadow_policy.clone())).unwrap();
        let reference = plain.with_policy(PolicyState::readable(shadow_policy)).unwrap();

        // Each side keeps its own sends and grants; the reference reads the shadowed side's.
        let (sends_a, sends_b) = (MemoryQuotaCounter::new(), MemoryQuotaCounter::new());
        let grants_a = MemoryGrants::new(parse_grants(GRANTS).unwrap());
        let grants_b = MemoryGrants::new(parse_grants(GRANTS).unwrap());
        let mut at = 0u64;
        for s in &steps {
            at += s.dt;
            let mut call = ToolCall::new(AgentRef::profile(AGENTS[s.agent]), TOOLS[s.tool], json!({"amount": s.amount}));
            call.run = RunContext { mode: s.mode, ..RunContext::default() };
            let ha = History::new(at, &sends_a, &grants_a);
            let hb = History::new(at, &sends_b, &grants_b);
            let a = plain.decide_call_at(CallView::of(&call), Vec::new(), &ha);
            let sh = shadowed.decide_shadow_at(CallView::of(&call), Vec::new(), &hb).unwrap();
            let want = reference.decide_call_at(CallView::of(&call), Vec::new(), &hb);
            prop_assert_eq!(&sh.decision, &want.decision, "the shadow decides as its policy would");
            let b = shadowed.decide_call_at(CallView::of(&call), Vec::new(), &hb);
            prop_assert_eq!(&a.decision, &b.decision, "a shadow never changes the enforced decision");
            // Calls that run are sent (and asks approved), by the enforced decision only.
            let send = !matches!(a.decision.verdict, Verdict::Refused(_));
            if send {
                let sa = plain.record_send(&a, &ha);
                let sb = shadowed.record_send(&b, &hb);
                prop_assert_eq!(sa, sb, "the same sends, refused alike");
            }
        }
        prop_assert_eq!(grants_a.uses("g1"), grants_b.uses("g1"), "the shadow never spends a grant");
    }
}
