//! What a snapshot works out once per (profile, tool) pair and caches (issues 21, 26) decides
//! as the plain reading does, whether read from the cache, built for the first time, or
//! skipped (a subagent's call):
//!
//! - R44: the quota groups a decision carries against every quota covering any record of
//!   the call ([`Policy::covering_quotas`]), keyed by its counter id and `per` values
//!   ([`group_key`]), over random quotas (`tool`, `agent`, `when`, `per`) and calls;
//! - R18–R21: the rules a decision matched and its verdict against
//!   [`Policy::evaluate_exact`] (the index walked and every selector read per call), over
//!   random rules (`effect`, `tool`, `agent`, `kind`, `when`) and calls.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use proptest::prelude::*;
use serde_json::{Value, json};
use toolgate_core::{AgentRef, RunContext, ToolRef};
use toolgate_engine::config::{Format, load_str};
use toolgate_engine::grant::NoGrants;
use toolgate_engine::policy::{Limits, PerKey, Policy, Subject};
use toolgate_engine::quota::{NoSends, QuotaGroup, group_key};
use toolgate_engine::{CallInput, CallView, Governance, History, PolicyState};

const TOOLS: [&str; 3] = ["search", "refund", "refund_all"];

fn quota() -> impl Strategy<Value = Value> {
    (
        prop_oneof![
            Just(None),
            Just(Some("search")),
            Just(Some("REFUND")),
            Just(Some("re*"))
        ],
        prop_oneof![
            Just(None),
            Just(Some("support")),
            Just(Some("sub*")),
            Just(Some("ops"))
        ],
        proptest::bool::weighted(0.3),
        proptest::sample::subsequence(vec!["agent", "session", "tool"], 0..=3),
        1u64..5,
    )
        .prop_map(|(tool, agent, when, per, window)| {
            let mut q = json!({"max": 5, "window_secs": window, "per": per});
            if let Some(t) = tool {
                q["tool"] = json!(t);
            }
            if let Some(a) = agent {
                q["agent"] = json!(a);
            }
            if when {
                q["when"] = json!({"amount": {"gt": 10}});
            }
            q
        })
}

#[derive(Debug, Clone)]
struct Call {
    agent: AgentRef,
    tool: String,
    amount: u64,
    session: Option<&'static str>,
}

fn call() -> impl Strategy<Value = Call> {
    (
        prop_oneof![
            Just(AgentRef::profile("support")),
            Just(AgentRef::profile("SUPPORT")),
            Just(AgentRef::profile("ops")),
            Just(AgentRef::subagent("support", "sub-1")),
            Just(AgentRef::subagent("ops", "Sub-2")),
        ],
        0..TOOLS.len(),
        proptest::bool::ANY,
        0u64..20,
        prop_oneof![Just(None), Just(Some("s1")), Just(Some("s2"))],
    )
        .prop_map(|(agent, tool, upper, amount, session)| Call {
            agent,
            tool: if upper {
                TOOLS[tool].to_ascii_uppercase()
            } else {
                TOOLS[tool].to_owned()
            },
            amount,
            session,
        })
}

fn rule() -> impl Strategy<Value = Value> {
    (
        prop_oneof![Just("allow"), Just("ask"), Just("deny")],
        prop_oneof![
            Just(None),
            Just(Some("search")),
            Just(Some("REFUND")),
            Just(Some("re*")),
            Just(Some("*_all"))
        ],
        prop_oneof![
            Just(None),
            Just(Some("support")),
            Just(Some("sub*")),
            Just(Some("ops"))
        ],
        prop_oneof![Just(None), Just(Some("http")), Just(Some("mcp"))],
        proptest::bool::weighted(0.4),
    )
        .prop_map(|(effect, tool, agent, kind, when)| {
            let mut r = json!({"effect": effect});
            if let Some(t) = tool {
                r["tool"] = json!(t);
            }
            if let Some(a) = agent {
                r["agent"] = json!(a);
            }
            if let Some(k) = kind {
                r["kind"] = json!(k);
            }
            if when {
                r["when"] = json!({"amount": {"gt": 10}});
            }
            r
        })
}

fn governance(quotas: &[Value]) -> Governance {
    governance_with(quotas, &[], "allow")
}

fn governance_with(quotas: &[Value], rules: &[Value], default: &str) -> Governance {
    let tools: Vec<Value> = TOOLS
        .iter()
        .map(|t| json!({"kind": "http", "name": t}))
        .collect();
    let doc = json!({
        "tools": tools,
        "agents": [{"name": "support", "allowed_tools": ["*"]},
                   {"name": "ops", "allowed_tools": ["*"]}],
        "policy": {"default": default, "rules": rules, "quotas": quotas}
    });
    load_str(&doc.to_string(), Format::Json).expect("the configuration loads")
}

/// R44 read plainly: every quota covering the call's one record, in policy order, keyed by
/// its counter id and `per` values.
fn reference(policy: &Policy, c: &Call, input: &Value) -> Vec<QuotaGroup> {
    let tool = c.tool.to_ascii_lowercase();
    let subject = Subject {
        kind: toolgate_core::ToolKind::Http,
        tool: &tool,
        server: None,
        agent: c.agent.rule_name(),
    };
    let agent = c.agent.rule_name().to_ascii_lowercase();
    // R50: the SHA-256 of the input's canonical JSON.
    let input_part = toolgate_engine::canon::sha256_hex(
        toolgate_engine::canon::canonical_json(input)
            .unwrap()
            .as_bytes(),
    );
    policy
        .covering_quotas(
            &subject,
            input,
            toolgate_engine::number::NumberLiterals::none(),
        )
        .into_iter()
        .map(|i| {
            let q = &policy.quotas()[i];
            let parts: Vec<Option<&str>> = q
                .per()
                .iter()
                .map(|k| match k {
                    PerKey::Agent => Some(agent.as_str()),
                    PerKey::Session => c.session,
                    PerKey::Tool => Some(tool.as_str()),
                    PerKey::Input => Some(input_part.as_str()),
                })
                .collect();
            QuotaGroup::new(group_key(q.counter_id(), &parts), i, q.max(), q.window_ms())
        })
        .collect()
}

fn groups(gov: &Governance, c: &Call, input: &Value, shadow: bool) -> Vec<QuotaGroup> {
    let tool = ToolRef::Name(c.tool.clone());
    let view = CallView {
        tool: &tool,
        agent: &c.agent,
        input: CallInput::Value(input),
        run: RunContext::default(),
    };
    let at = History::new(0, &NoSends, &NoGrants).in_session(c.session);
    let d = if shadow {
        gov.decide_shadow_at(view, Vec::new(), &at)
            .expect("a shadow is set")
    } else {
        gov.decide_call_at(view, Vec::new(), &at)
    };
    assert!(d.decision.runs(), "{:?}", d.decision);
    d.quota_groups().to_vec()
}

fn enforced(gov: &Governance) -> std::sync::Arc<Policy> {
    match gov.policy() {
        PolicyState::Readable(p) => std::sync::Arc::clone(p),
        PolicyState::Unreadable(why) => panic!("{why}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// R18–R21: a decision from the snapshot's cached rule candidates matches the rules,
    /// and takes the verdict, that evaluating the policy afresh gives, call after call.
    #[test]
    fn r18_cached_rule_candidates_decide_as_the_policy_evaluates(
        rules in proptest::collection::vec(rule(), 0..8),
        default in prop_oneof![Just("allow"), Just("ask"), Just("deny")],
        calls in proptest::collection::vec(call(), 1..12),
    ) {
        let gov = governance_with(&[], &rules, default);
        let policy = enforced(&gov);
        for c in calls.iter().chain(&calls) {
            let input = json!({"amount": c.amount});
            let tool_key = c.tool.to_ascii_lowercase();
            let subject = Subject {
                kind: toolgate_core::ToolKind::Http,
                tool: &tool_key,
                server: None,
                agent: c.agent.rule_name(),
            };
            let want = policy.evaluate_exact(&subject, &input, toolgate_engine::number::NumberLiterals::none());
            let tool = ToolRef::Name(c.tool.clone());
            let d = gov.decide(CallView {
                tool: &tool,
                agent: &c.agent,
                input: CallInput::Value(&input),
                run: RunContext::default(),
            });
            let matched: Vec<usize> = d.matched_rules.iter().map(|m| m.index).collect();
            prop_assert_eq!(&matched, &want.matched, "{:?}", c);
            let verdict = match want.effect {
                Some(toolgate_engine::policy::Effect::Deny) => "refused",
                Some(toolgate_engine::policy::Effect::Ask) => "asked",
                _ => "runs",
            };
            let got = if d.runs() {
                "runs"
            } else if d.verdict == toolgate_core::Verdict::Refused(toolgate_core::RefusalCode::Denied) {
                "refused"
            } else {
                // No approval channel is configured: an asked call is refused for that.
                prop_assert_eq!(d.verdict.clone(), toolgate_core::Verdict::Refused(toolgate_core::RefusalCode::NoApprovalChannel));
                "asked"
            };
            prop_assert_eq!(got, verdict, "{:?}", c);
        }
    }

    /// R44: cached covers give the groups of the plain reading, call after call (the first
    /// call of a pair fills the cache, the next ones read it), for profiles and subagents.
    #[test]
    fn r44_cached_quota_groups_are_those_of_the_plain_reading(
        quotas in proptest::collection::vec(quota(), 0..6),
        calls in proptest::collection::vec(call(), 1..12),
    ) {
        let gov = governance(&quotas);
        let policy = enforced(&gov);
        for c in calls.iter().chain(&calls) {
            let input = json!({"amount": c.amount});
            prop_assert_eq!(groups(&gov, c, &input, false), reference(&policy, c, &input), "{:?}", c);
        }
    }

    /// R44, R46: a replaced policy (enforced or shadow) is decided with its own quotas,
    /// never with covers cached for the policy before it.
    #[test]
    fn r44_a_replaced_policy_never_reads_the_covers_of_the_one_before(
        before in proptest::collection::vec(quota(), 1..4),
        after in proptest::collection::vec(quota(), 0..4),
        calls in proptest::collection::vec(call(), 1..8),
    ) {
        let gov = governance(&before);
        for c in &calls {
            let input = json!({"amount": c.amount});
            groups(&gov, c, &input, false);
        }
        let text = json!({"rules": [], "quotas": after}).to_string();
        let next_policy = Policy::from_json_str(&text, &Limits::default()).expect("parses");
        let next = gov.with_policy(PolicyState::readable(next_policy.clone())).expect("replaces");
        let next_arc = enforced(&next);
        let shadowed = gov.with_shadow_policy(Some(next_policy)).expect("shadow set");
        let shadow_arc = std::sync::Arc::clone(shadowed.shadow_policy().expect("a shadow"));
        for c in &calls {
            let input = json!({"amount": c.amount});
            prop_assert_eq!(groups(&next, c, &input, false), reference(&next_arc, c, &input));
            prop_assert_eq!(groups(&shadowed, c, &input, true), reference(&shadow_arc, c, &input));
            prop_assert_eq!(groups(&shadowed, c, &input, false), reference(&enforced(&gov), c, &input));
        }
    }
}
