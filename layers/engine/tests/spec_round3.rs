//! SPEC round three in the engine: quotas (R44), grants (R45), simulation (R46), the
//! `elicitation` channel (R26, R47) and allowed-name patterns (R48).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::sync::Arc;

use serde_json::{Value, json};
use toolgate_core::{
    AgentRef, Ask, AskSource, ChannelKind, Check, RefusalCode, RunContext, RunMode, ToolCall,
    Verdict,
};
use toolgate_engine::config::{Format, load_str};
use toolgate_engine::grant::{Grant, MemoryGrants, NoGrants, parse_grants};
use toolgate_engine::policy::{Limits, Policy};
use toolgate_engine::quota::{
    Clock, ManualClock, MemoryQuotaCounter, NoSends, QuotaCounter, QuotaGroup,
};
use toolgate_engine::simulate::{Answer, Simulation};
use toolgate_engine::{CallView, Governance, History};

fn gov(config: Value) -> Governance {
    load_str(&config.to_string(), Format::Json).unwrap_or_else(|e| panic!("{e}"))
}

fn load_errors(config: Value) -> Vec<String> {
    load_str(&config.to_string(), Format::Json)
        .unwrap_err()
        .errors
        .into_iter()
        .map(|e| e.path)
        .collect()
}

fn call(agent: &str, tool: &str, input: Value) -> ToolCall {
    ToolCall::new(AgentRef::profile(agent), tool, input)
}

fn grants(v: Value) -> Vec<Grant> {
    parse_grants(&v.to_string()).unwrap_or_else(|e| panic!("{e}"))
}

/// One call through the engine as a host sends it: decided at `now`, recorded when it runs.
fn send(
    gov: &Governance,
    c: &ToolCall,
    now: u64,
    sends: &dyn QuotaCounter,
    store: &dyn toolgate_engine::grant::GrantStore,
) -> toolgate_core::Decision {
    let history = History::new(now, sends, store);
    let decided = gov.decide_call_at(CallView::of(c), Vec::new(), &history);
    if decided.decision.runs() {
        gov.record_send(&decided, &history).unwrap();
    }
    decided.decision
}

fn search_config(quotas: Value) -> Value {
    json!({
        "tools": [{"kind": "http", "name": "search"}, {"kind": "http", "name": "fetch"}],
        "agents": [{"name": "support", "allowed_tools": ["search", "fetch"]},
                   {"name": "ops", "allowed_tools": ["search", "fetch"]}],
        "policy": {"rules": [], "quotas": quotas}
    })
}

// ----- R44 quotas -----

#[test]
fn r44_a_quota_refuses_the_max_plus_first_send_in_a_window() {
    let g = gov(search_config(
        json!([{"max": 3, "window_secs": 60, "reason": "three a minute"}]),
    ));
    let sends = MemoryQuotaCounter::new();
    let c = call("support", "search", json!({}));
    for t in 0..3 {
        assert!(send(&g, &c, t * 1000, &sends, &NoGrants).runs(), "send {t}");
    }
    let d = send(&g, &c, 3000, &sends, &NoGrants);
    assert_eq!(d.verdict, Verdict::Refused(RefusalCode::RateLimited));
    assert_eq!(d.decided_by, Check::Quota);
    assert_eq!(d.retry_after_secs, Some(57));
    assert!(
        d.reasons.iter().any(|r| r == "three a minute"),
        "{:?}",
        d.reasons
    );
    assert_eq!(d.refusal().unwrap().retry_after_secs, Some(57));
}

#[test]
fn r44_the_window_reopens_at_its_edge_with_a_controllable_clock() {
    let g = gov(search_config(json!([{"max": 1, "window_secs": 10}])));
    let clock = ManualClock::new(5_000);
    let sends = MemoryQuotaCounter::new();
    let c = call("support", "search", json!({}));
    assert!(send(&g, &c, clock.now_ms(), &sends, &NoGrants).runs());
    clock.advance_ms(9_999);
    let d = send(&g, &c, clock.now_ms(), &sends, &NoGrants);
    assert_eq!(d.verdict, Verdict::Refused(RefusalCode::RateLimited));
    assert_eq!(d.retry_after_secs, Some(1), "1 ms rounds up to a second");
    clock.advance_ms(1);
    assert!(
        send(&g, &c, clock.now_ms(), &sends, &NoGrants).runs(),
        "a send at t leaves the window at t + W: `now - W < t` no longer holds"
    );
}

#[test]
fn r44_retry_after_rounds_up_until_every_covering_quota_has_room() {
    let g = gov(search_config(json!([
        {"max": 1, "window_secs": 10, "reason": "short"},
        {"max": 1, "window_secs": 30, "reason": "long"}
    ])));
    let sends = MemoryQuotaCounter::new();
    let c = call("support", "search", json!({}));
    assert!(send(&g, &c, 0, &sends, &NoGrants).runs());
    let d = send(&g, &c, 500, &sends, &NoGrants);
    assert_eq!(
        d.retry_after_secs,
        Some(30),
        "29.5 s rounded up, the longer of the two"
    );
    assert!(d.reasons.contains(&"short".to_owned()) && d.reasons.contains(&"long".to_owned()));
    let d = send(&g, &c, 20_000, &sends, &NoGrants);
    assert_eq!(d.retry_after_secs, Some(10));
    assert_eq!(
        d.reasons[0], "long",
        "only the full quota's reason: {:?}",
        d.reasons
    );
}

#[test]
fn r44_per_keys_group_by_agent_session_and_tool() {
    let g = gov(search_config(json!([
        {"max": 1, "window_secs": 60, "per": ["agent", "session", "tool"]}
    ])));
    let sends = MemoryQuotaCounter::new();
    let at = |session| History::new(0, &sends, &NoGrants).in_session(session);
    let run = |agent: &str, tool: &str, session| {
        let c = call(agent, tool, json!({}));
        let h = at(session);
        let d = g.decide_call_at(CallView::of(&c), Vec::new(), &h);
        if d.decision.runs() {
            g.record_send(&d, &h).unwrap();
        }
        d.decision.runs()
    };
    assert!(run("support", "search", Some("s1")));
    assert!(
        !run("SUPPORT", "SEARCH", Some("s1")),
        "agent and tool compare case-insensitively"
    );
    assert!(run("ops", "search", Some("s1")), "another agent");
    assert!(run("support", "fetch", Some("s1")), "another tool");
    assert!(run("support", "search", Some("s2")), "another session");
    assert!(
        run("support", "search", None),
        "no session is a group of its own"
    );
    assert!(
        !run("support", "search", None),
        "calls without a session share one group"
    );
    assert!(!run("support", "search", Some("s2")));
}

#[test]
fn r44_one_group_for_all_when_per_is_absent_or_empty() {
    for per in [json!(null), json!([])] {
        let mut q = json!({"max": 1, "window_secs": 60});
        if !per.is_null() {
            q["per"] = per;
        }
        let g = gov(search_config(json!([q])));
        let sends = MemoryQuotaCounter::new();
        assert!(
            send(
                &g,
                &call("support", "search", json!({})),
                0,
                &sends,
                &NoGrants
            )
            .runs()
        );
        let d = send(&g, &call("ops", "fetch", json!({})), 1, &sends, &NoGrants);
        assert_eq!(d.verdict, Verdict::Refused(RefusalCode::RateLimited));
    }
}

#[test]
fn r44_a_quota_selects_as_a_rule_local_only_when_named() {
    let config = |quota: Value| {
        json!({
            "approval": {"channel": "interactive"},
            "tools": [{"toolset": "coding", "name": "write_file"},
                      {"server": "github", "name": "create_issue"}],
            "agents": [{"name": "dev", "allowed_tools": ["coding__write_file", "github__create_issue"]}],
            "policy": {"rules": [], "quotas": [quota]}
        })
    };
    let local = call("dev", "coding__write_file", json!({}));
    let mcp = call("dev", "github__create_issue", json!({"title": "x"}));
    let full_after_one = |g: &Governance, c: &ToolCall| {
        let sends = MemoryQuotaCounter::new();
        send(g, c, 0, &sends, &NoGrants);
        !send(g, c, 1, &sends, &NoGrants).runs()
    };
    let g = gov(config(json!({"max": 1, "window_secs": 60})));
    assert!(
        !full_after_one(&g, &local),
        "no selector: never a local tool"
    );
    assert!(full_after_one(&g, &mcp));
    let g = gov(config(
        json!({"max": 1, "window_secs": 60, "kind": "local"}),
    ));
    assert!(full_after_one(&g, &local));
    assert!(!full_after_one(&g, &mcp));
    let g = gov(config(
        json!({"max": 1, "window_secs": 60, "server": "git*", "tool": "create_*", "when": {"title": {}}}),
    ));
    assert!(full_after_one(&g, &mcp));
    let untitled = call("dev", "github__create_issue", json!({}));
    assert!(
        !full_after_one(&g, &untitled),
        "a `when` the input lacks never covers"
    );
}

#[test]
fn r44_a_quota_never_applies_to_an_ungoverned_tool() {
    let g = gov(json!({
        "tools": [{"toolset": "skills", "name": "read_skill", "governed": false,
                   "ungoverned_reason": "reads the skill's own instructions"}],
        "agents": [{"name": "dev", "allowed_tools": ["skills__read_skill"]}],
        "policy": {"rules": [], "quotas": [{"max": 1, "window_secs": 60, "kind": "local"}]}
    }));
    let sends = MemoryQuotaCounter::new();
    let c = call("dev", "skills__read_skill", json!({}));
    for t in 0..3 {
        assert!(send(&g, &c, t, &sends, &NoGrants).runs());
    }
}

#[test]
fn r44_under_a_collision_a_quota_covers_the_call_when_it_covers_any_record() {
    let g = gov(json!({
        "tools": [{"toolset": "github", "name": "create_issue"},
                  {"server": "github", "name": "create_issue"}],
        "agents": [{"name": "dev", "allowed_tools": ["github__create_issue"]}],
        "policy": {"rules": [], "quotas": [{"max": 1, "window_secs": 60, "kind": "local"}]}
    }));
    let sends = MemoryQuotaCounter::new();
    let c = call("dev", "github__create_issue", json!({}));
    assert!(send(&g, &c, 0, &sends, &NoGrants).runs());
    assert_eq!(
        send(&g, &c, 1, &sends, &NoGrants).verdict,
        Verdict::Refused(RefusalCode::RateLimited)
    );
}

#[test]
fn r44_r14_a_tenant_deny_comes_first_and_nobody_is_asked_about_a_full_quota() {
    let g = gov(json!({
        "approval": {"channel": "interactive"},
        "tools": [{"kind": "http", "name": "refund"}],
        "agents": [{"name": "support", "allowed_tools": ["refund"]}],
        "policy": {"rules": [{"effect": "deny", "tool": "refund", "when": {"amount": {"gt": 100}}, "reason": "big"},
                             {"effect": "ask", "tool": "refund", "reason": "refunds need a person"}],
                   "quotas": [{"max": 1, "window_secs": 60}]}
    }));
    let sends = MemoryQuotaCounter::new();
    let small = call("support", "refund", json!({"amount": 5}));
    let h = History::new(0, &sends, &NoGrants);
    let d = g.decide_call_at(CallView::of(&small), Vec::new(), &h);
    assert!(matches!(d.decision.verdict, Verdict::Ask { .. }));
    g.record_send(&d, &h).unwrap(); // approved and sent
    let big = call("support", "refund", json!({"amount": 500}));
    let d = send(&g, &big, 1, &sends, &NoGrants);
    assert_eq!(
        d.verdict,
        Verdict::Refused(RefusalCode::Denied),
        "a deny before the quota"
    );
    let d = send(&g, &small, 1, &sends, &NoGrants);
    assert_eq!(
        d.verdict,
        Verdict::Refused(RefusalCode::RateLimited),
        "refused before the ask is routed"
    );
}

#[test]
fn r44_decide_without_history_never_sees_a_full_quota() {
    let g = gov(search_config(json!([{"max": 1, "window_secs": 60}])));
    let c = call("support", "search", json!({}));
    for _ in 0..3 {
        assert!(g.decide(CallView::of(&c)).runs());
    }
    let h = History::new(0, &NoSends, &NoGrants);
    let d = g.decide_call_at(CallView::of(&c), Vec::new(), &h);
    assert_eq!(
        d.quota_groups().len(),
        1,
        "the groups are still named for sending"
    );
}

#[test]
fn r44_validation_errors_name_their_path() {
    let paths = |quotas: Value| load_errors(search_config(quotas));
    assert_eq!(
        paths(
            json!([{"max": 1, "window_secs": 1}, {"max": 1, "window_secs": 1},
                     {"max": 1, "window_secs": 2678401}])
        ),
        ["policy.quotas[2].window_secs"]
    );
    assert_eq!(
        paths(json!([{"max": 0, "window_secs": 1}])),
        ["policy.quotas[0].max"]
    );
    assert_eq!(
        paths(json!([{"max": 1000000001u64, "window_secs": 1}])),
        ["policy.quotas[0].max"]
    );
    assert_eq!(
        paths(json!([{"max": 1.5, "window_secs": 1}])),
        ["policy.quotas[0].max"]
    );
    assert_eq!(
        paths(json!([{"max": "1", "window_secs": 1}])),
        ["policy.quotas[0].max"]
    );
    assert_eq!(paths(json!([{"window_secs": 1}])), ["policy.quotas[0].max"]);
    assert_eq!(paths(json!([{"max": 1}])), ["policy.quotas[0].window_secs"]);
    assert_eq!(
        paths(json!([{"max": 1, "window_secs": 1, "per": ["tool", "tool"]}])),
        ["policy.quotas[0].per[1]"]
    );
    assert_eq!(
        paths(json!([{"max": 1, "window_secs": 1, "per": ["user"]}])),
        ["policy.quotas[0].per[0]"]
    );
    assert_eq!(
        paths(json!([{"max": 1, "window_secs": 1, "burst": 2}])),
        ["policy.quotas[0].burst"]
    );
    assert_eq!(
        paths(json!([{"max": 1, "window_secs": 1, "tool": "github__x"}])),
        ["policy.quotas[0].tool"]
    );
    assert_eq!(
        paths(json!([{"max": 1, "window_secs": 1, "when": {"a": {"gt": "x"}}}])),
        ["policy.quotas[0].when.a.gt"]
    );
    assert_eq!(
        paths(json!([{"max": 1, "window_secs": 1, "agent": " "}])),
        ["policy.quotas[0].agent"]
    );
    assert_eq!(
        paths(json!([{"max": 1, "window_secs": 1, "reason": "x".repeat(501)}])),
        ["policy.quotas[0].reason"]
    );
    assert_eq!(paths(json!({})), ["policy.quotas"]);
    assert_eq!(paths(json!([null])), ["policy.quotas[0]"]);
}

#[test]
fn r44_quotas_count_toward_tool_rules() {
    let limits = Limits {
        tool_rules: 2,
        ..Limits::default()
    };
    let ok = json!({"rules": [{"effect": "ask"}], "quotas": [{"max": 1, "window_secs": 1}]});
    assert!(Policy::from_json(&ok, &limits).is_ok());
    let over = json!({"rules": [{"effect": "ask"}],
                      "quotas": [{"max": 1, "window_secs": 1}, {"max": 2, "window_secs": 1}]});
    let e = Policy::from_json(&over, &limits).unwrap_err();
    assert_eq!(e.errors[0].path, "quotas", "{e}");
}

#[test]
fn r44_r15_a_policy_with_quotas_is_not_empty() {
    let p = Policy::from_json(
        &json!({"rules": [], "quotas": [{"max": 1, "window_secs": 1}]}),
        &Limits::default(),
    )
    .unwrap();
    assert!(!p.is_empty());
    let mut config = search_config(json!([{"max": 1, "window_secs": 1}]));
    config["enforce_tool_invocation"] = json!(false);
    assert_eq!(load_errors(config), ["policy"]);
}

#[test]
fn r44_quotas_round_trip_through_to_json_and_text() {
    let source = json!({"default": "allow", "rules": [],
        "quotas": [{"max": 5, "window_secs": 60, "per": ["agent", "session"], "tool": "refund_*",
                    "when": {"amount": {"gt": 10}}, "reason": "fair use"}]});
    let p = Policy::from_json(&source, &Limits::default()).unwrap();
    assert_eq!(p.to_json(), source);
    let again = Policy::from_json_str(&p.to_json_text(), &Limits::default()).unwrap();
    assert_eq!(again.to_json(), source);
    assert_eq!(again.quotas()[0].counter_id(), p.quotas()[0].counter_id());
    // `max` and `reason` are not part of a counter's identity: raising `max` keeps the sends.
    let raised = Policy::from_json(
        &json!({"rules": [], "quotas": [{"max": 9, "window_secs": 60, "per": ["agent", "session"],
                 "tool": "refund_*", "when": {"amount": {"gt": 10}}}]}),
        &Limits::default(),
    )
    .unwrap();
    assert_eq!(raised.quotas()[0].counter_id(), p.quotas()[0].counter_id());
}

#[test]
fn r44_concurrent_reserves_never_pass_max() {
    // INVARIANT (MemoryQuotaCounter): never more than `max` sends in a window.
    let counter = Arc::new(MemoryQuotaCounter::new());
    let groups = Arc::new(vec![
        QuotaGroup::new("shared", 0, 37, 60_000),
        QuotaGroup::new("other", 1, 1_000, 60_000),
    ]);
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let counter = Arc::clone(&counter);
            let groups = Arc::clone(&groups);
            std::thread::spawn(move || {
                (0..50)
                    .filter(|i| counter.reserve(&groups, 1_000 + i % 3).is_ok())
                    .count()
            })
        })
        .collect();
    let sent: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(sent, 37);
    assert_eq!(counter.sends_in_window("shared", 60_000, 2_000), 37);
    assert_eq!(
        counter.sends_in_window("other", 60_000, 2_000),
        37,
        "a refusal records nothing"
    );
}

// ----- R45 grants -----

fn refund_config(channel: &str) -> Value {
    json!({
        "approval": {"channel": channel},
        "tools": [{"kind": "http", "name": "refund", "approval": "require_approval"},
                  {"toolset": "coding", "name": "write_file", "approval": "require_approval"}],
        "agents": [{"name": "support", "allowed_tools": ["refund", "coding__write_file"]},
                   {"name": "helper", "as_tool": true, "allowed_tools": ["refund"],
                    "overrides": [{"tool": "refund", "approval": "auto_approve"}]}],
        "policy": {"rules": [{"effect": "deny", "tool": "refund", "when": {"amount": {"gt": 1000}}, "reason": "big"},
                             {"effect": "ask", "tool": "refund", "reason": "refunds need a person"}],
                   "quotas": [{"max": 2, "window_secs": 60, "tool": "refund"}]}
    })
}

fn everything(expires_at: u64) -> Vec<Grant> {
    grants(
        json!([{"id": "g-all", "agent": "*", "tool": "*", "expires_at": expires_at,
                   "granted_by": "alice", "reason": "backlog"}]),
    )
}

#[test]
fn r45_a_live_grant_answers_an_ask_names_itself_and_carries_the_reasons() {
    let g = gov(refund_config("inbox"));
    let store = MemoryGrants::new(everything(60_000));
    let d = send(
        &g,
        &call("support", "refund", json!({"amount": 5})),
        1,
        &NoSends,
        &store,
    );
    assert_eq!(
        d.verdict,
        Verdict::Run {
            auto_approved: false
        }
    );
    assert_eq!(d.decided_by, Check::Grant);
    let granted = d.granted.unwrap();
    assert_eq!(
        (granted.id.as_str(), granted.granted_by.as_str()),
        ("g-all", "alice")
    );
    assert!(
        d.reasons.contains(&"refunds need a person".to_owned()),
        "{:?}",
        d.reasons
    );
    assert_eq!(
        store.uses("g-all"),
        Some(1),
        "the send counts under the grant"
    );
}

#[test]
fn r45_a_grant_never_turns_a_refusal_into_a_run() {
    let store = MemoryGrants::new(everything(u64::MAX));
    let g = gov(refund_config("inbox"));
    let big = call("support", "refund", json!({"amount": 5000}));
    assert_eq!(
        g.decide_at(CallView::of(&big), &History::new(0, &NoSends, &store))
            .verdict,
        Verdict::Refused(RefusalCode::Denied)
    );
    let sends = MemoryQuotaCounter::new();
    let small = call("support", "refund", json!({"amount": 5}));
    assert!(send(&g, &small, 0, &sends, &store).runs());
    assert!(send(&g, &small, 1, &sends, &store).runs());
    let d = send(&g, &small, 2, &sends, &store);
    assert_eq!(d.verdict, Verdict::Refused(RefusalCode::RateLimited));
    assert_eq!(d.granted, None);
    let rejecting = call("support", "refund", json!({"amount": 5})).with_run(RunContext {
        mode: RunMode::AutoRejectRequired,
        background: false,
    });
    let d = g.decide_at(CallView::of(&rejecting), &History::new(0, &NoSends, &store));
    assert_eq!(d.verdict, Verdict::Refused(RefusalCode::Rejected));
    let helper = call("helper", "refund", json!({"amount": 5}));
    let d = g.decide_at(CallView::of(&helper), &History::new(0, &NoSends, &store));
    assert_eq!(
        d.verdict,
        Verdict::Refused(RefusalCode::NoApprovalChannel),
        "as a tool"
    );
    let none = gov(refund_config("none"));
    let d = none.decide_at(CallView::of(&small), &History::new(0, &NoSends, &store));
    assert_eq!(
        d.verdict,
        Verdict::Refused(RefusalCode::NoApprovalChannel),
        "no channel"
    );
}

#[test]
fn r45_r26_a_grant_answers_before_the_background_rejection() {
    let g = gov(refund_config("interactive"));
    let store = MemoryGrants::new(everything(u64::MAX));
    let background = call("support", "refund", json!({"amount": 5})).with_run(RunContext {
        mode: RunMode::UseAgentPolicy,
        background: true,
    });
    assert_eq!(
        g.decide(CallView::of(&background)).verdict,
        Verdict::Refused(RefusalCode::Rejected)
    );
    let d = g.decide_at(
        CallView::of(&background),
        &History::new(0, &NoSends, &store),
    );
    assert!(d.runs() && d.granted.is_some());
}

#[test]
fn r45_a_grant_is_live_while_now_is_before_expires_at_and_uses_are_below_max_calls() {
    let g = gov(refund_config("inbox"));
    let c = call("support", "refund", json!({"amount": 5}));
    let store = MemoryGrants::new(everything(1_000));
    let at = |now| g.decide_at(CallView::of(&c), &History::new(now, &NoSends, &store));
    assert!(at(999).runs());
    assert!(
        matches!(at(1_000).verdict, Verdict::Ask { .. }),
        "now < expires_at"
    );
    let spent = MemoryGrants::new(grants(json!([
        {"id": "one", "agent": "support", "tool": "refund", "expires_at": 9999999, "max_calls": 1,
         "granted_by": "alice", "reason": "once"},
        {"id": "two", "agent": "support", "tool": "refund", "expires_at": 9999999,
         "granted_by": "bob", "reason": "after"}
    ])));
    let first = send(&g, &c, 0, &NoSends, &spent);
    assert_eq!(
        first.granted.unwrap().id,
        "one",
        "the first live grant, in order"
    );
    let second = send(&g, &c, 0, &NoSends, &spent);
    assert_eq!(second.granted.unwrap().id, "two", "`one` is spent");
    assert!(spent.revoke("two"));
    assert!(matches!(
        send(&g, &c, 0, &NoSends, &spent).verdict,
        Verdict::Ask { .. }
    ));
}

#[test]
fn r45_every_field_a_grant_sets_must_match_and_unset_fields_match_local_tools() {
    let g = gov(refund_config("inbox"));
    let store = MemoryGrants::new(grants(json!([
        {"id": "small", "agent": "supp*", "tool": "refund", "kind": "http", "session": "s-1",
         "when": {"amount": {"lte": 100}}, "expires_at": 9999999, "granted_by": "alice", "reason": "r"},
        {"id": "local", "agent": "support", "tool": "write_file", "expires_at": 9999999,
         "granted_by": "alice", "reason": "r"}
    ])));
    let at = |c: &ToolCall, session| {
        g.decide_at(
            CallView::of(c),
            &History::new(0, &NoSends, &store).in_session(session),
        )
        .granted
        .map(|x| x.id)
    };
    let small = call("support", "refund", json!({"amount": 50}));
    assert_eq!(at(&small, Some("s-1")).as_deref(), Some("small"));
    assert_eq!(at(&small, Some("S-1")), None, "sessions compare exactly");
    assert_eq!(at(&small, None), None);
    let big = call("support", "refund", json!({"amount": 500}));
    assert_eq!(at(&big, Some("s-1")), None);
    let local = call("support", "coding__write_file", json!({}));
    assert_eq!(
        at(&local, None).as_deref(),
        Some("local"),
        "local tools included"
    );
}

#[test]
fn r45_r24_under_a_collision_a_grant_must_match_every_record() {
    let g = gov(json!({
        "approval": {"channel": "inbox"},
        "tools": [{"toolset": "github", "name": "create_issue", "approval": "require_approval"},
                  {"server": "github", "name": "create_issue"}],
        "agents": [{"name": "dev", "allowed_tools": ["github__create_issue"]}]
    }));
    let c = call("dev", "github__create_issue", json!({}));
    let one = |grant: Value| {
        let store = MemoryGrants::new(grants(json!([grant])));
        g.decide_at(CallView::of(&c), &History::new(0, &NoSends, &store))
            .granted
            .is_some()
    };
    let base = json!({"id": "g", "agent": "dev", "tool": "create_issue", "expires_at": 99,
                      "granted_by": "a", "reason": "r"});
    assert!(one(base.clone()));
    let mut mcp_only = base.clone();
    mcp_only["kind"] = json!("mcp");
    assert!(!one(mcp_only), "matches only one record");
    let mut server = base;
    server["server"] = json!("github");
    assert!(!one(server), "a `server` never matches the local record");
}

#[test]
fn r45_a_grant_answers_a_hooks_ask_too() {
    let g = gov(json!({
        "approval": {"channel": "inbox"},
        "tools": [{"kind": "http", "name": "lookup"}],
        "agents": [{"name": "dev", "allowed_tools": ["lookup"]}]
    }));
    let store = MemoryGrants::new(grants(json!([{"id": "g", "agent": "dev", "tool": "lookup",
        "expires_at": 99, "granted_by": "alice", "reason": "r"}])));
    let c = call("dev", "lookup", json!({}));
    let h = History::new(0, &NoSends, &store);
    let decided = g.decide_call_at(CallView::of(&c), Vec::new(), &h);
    let hook = vec![Ask::new(AskSource::Hook, String::from("the hook asks"))];
    let d = g.with_extra_asks_at(&decided, CallView::of(&c), hook.clone(), &h);
    assert_eq!(d.granted.map(|x| x.id).as_deref(), Some("g"));
    let d = g.with_extra_asks(&decided, c.run, hook);
    assert!(matches!(d.verdict, Verdict::Ask { .. }), "no grants: asked");
}

#[test]
fn r45_grants_documents_report_every_error_with_its_path() {
    let e = parse_grants(
        r#"[{"id": "a", "agent": "x", "tool": "t", "expires_at": 1, "granted_by": "p", "reason": "r"},
            {"id": "a", "agent": "", "tool": "s__t", "expires_at": -1, "granted_by": "p", "reason": "r",
             "kind": "ftp", "when": {"a.": {}}, "max_calls": 0, "colour": 1}]"#,
    )
    .unwrap_err();
    let paths: Vec<&str> = e.errors.iter().map(|e| e.path.as_str()).collect();
    for want in [
        "[1].colour",
        "[1].agent",
        "[1].tool",
        "[1].kind",
        "[1].when[\"a.\"]",
        "[1].expires_at",
        "[1].max_calls",
    ] {
        assert!(
            paths.iter().any(|p| p.starts_with(want)),
            "{want} in {paths:?}"
        );
    }
    assert!(parse_grants(r#"[{"id": "a"}, {"id": "a"}]"#).is_err());
    let dup = parse_grants(
        r#"[{"id": "a", "agent": "x", "tool": "t", "expires_at": 1, "granted_by": "p", "reason": "r"},
            {"id": "a", "agent": "x", "tool": "t", "expires_at": 1, "granted_by": "p", "reason": "r"}]"#,
    )
    .unwrap_err();
    assert_eq!(dup.errors[0].path, "[1].id");
    assert!(
        parse_grants(
            r#"[{"id": "A", "agent": "x", "tool": "t", "expires_at": 1, "granted_by": "p", "reason": "r"},
                {"id": "a", "agent": "x", "tool": "t", "expires_at": 1, "granted_by": "p", "reason": "r"}]"#
        )
        .is_ok(),
        "ids compare exactly"
    );
}

// ----- R46 simulation -----

#[test]
fn r46_simulate_counts_only_sends_and_rechecks_an_approved_call() {
    let g = gov(json!({
        "approval": {"channel": "inbox"},
        "tools": [{"kind": "http", "name": "refund", "approval": "require_approval"}],
        "agents": [{"name": "support", "allowed_tools": ["refund"]}],
        "policy": {"rules": [], "quotas": [{"max": 1, "window_secs": 3600}]}
    }));
    let mut sim = Simulation::new(Vec::new());
    let c = call("support", "refund", json!({}));
    let mut step = |at, answer| sim.step(&g, CallView::of(&c), None, at, answer).unwrap();
    assert!(!step(0, None).sent, "held");
    assert!(!step(1, Some(Answer::Deny)).sent);
    assert!(step(2, Some(Answer::Approve)).sent);
    let last = step(3, Some(Answer::Approve));
    assert_eq!(
        last.decision.verdict,
        Verdict::Refused(RefusalCode::RateLimited)
    );
    assert_eq!(last.decision.retry_after_secs, Some(3600));
    assert!(
        sim.step(&g, CallView::of(&c), None, 2, None).is_err(),
        "out of order"
    );
}

// ----- R26, R47 elicitation -----

#[test]
fn r26_r47_elicitation_asks_in_the_foreground_and_rejects_a_background_run() {
    let g = gov(json!({
        "approval": {"channel": "inbox"},
        "tools": [{"kind": "http", "name": "refund", "approval": "require_approval"}],
        "agents": [{"name": "client", "allowed_tools": ["refund"], "approval": {"channel": "elicitation"}},
                   {"name": "desk", "allowed_tools": ["refund"]}]
    }));
    let c = call("client", "refund", json!({}));
    assert_eq!(
        g.decide(CallView::of(&c)).verdict,
        Verdict::Ask {
            channel: ChannelKind::Elicitation
        }
    );
    let bg = call("client", "refund", json!({})).with_run(RunContext {
        mode: RunMode::UseAgentPolicy,
        background: true,
    });
    assert_eq!(
        g.decide(CallView::of(&bg)).verdict,
        Verdict::Refused(RefusalCode::Rejected)
    );
    assert_eq!(
        g.decide(CallView::of(&call("desk", "refund", json!({}))))
            .verdict,
        Verdict::Ask {
            channel: ChannelKind::Inbox
        },
        "never chosen in place of the inbox"
    );
    let warnings = g.warnings();
    let elicit: Vec<_> = warnings
        .iter()
        .filter(|w| w.message.contains("elicitation"))
        .collect();
    assert_eq!(elicit.len(), 1, "{warnings:?}");
    assert_eq!(elicit[0].path, "agents[0].approval.channel");
    assert!(elicit[0].message.contains("`client`"));
}

// ----- R48 allowed-name patterns -----

fn pattern_config(allowed: Value, sub_allowed: Value) -> Value {
    json!({
        "tools": [{"server": "github", "name": "create_issue"}, {"server": "GitHub", "name": "list_issues"},
                  {"server": "kb", "name": "search"}, {"toolset": "coding", "name": "write_file"}],
        "agents": [{"name": "dev", "allowed_tools": allowed},
                   {"name": "sub", "parent": "dev", "allowed_tools": sub_allowed}]
    })
}

fn exposed(g: &Governance, agent: &str) -> Vec<String> {
    g.expose(agent)
        .unwrap()
        .tools
        .into_iter()
        .map(|t| t.name.to_string())
        .collect()
}

#[test]
fn r48_a_pattern_allows_every_matching_qualified_name_case_insensitively() {
    let g = gov(pattern_config(
        json!(["GITHUB__*", "coding__write_file"]),
        json!([]),
    ));
    assert_eq!(
        exposed(&g, "dev"),
        [
            "coding__write_file",
            "github__create_issue",
            "GitHub__list_issues"
        ]
    );
    let d = g.decide(CallView::of(&call("dev", "github__list_issues", json!({}))));
    assert!(d.runs());
    let d = g.decide(CallView::of(&call("dev", "kb__search", json!({}))));
    assert_eq!(d.verdict, Verdict::Refused(RefusalCode::NotAllowed));
    let g = gov(pattern_config(json!(["*"]), json!([])));
    assert_eq!(exposed(&g, "dev").len(), 4);
}

#[test]
fn r48_r39_a_subagent_gets_only_what_its_own_entries_and_its_parents_both_allow() {
    let g = gov(pattern_config(
        json!(["github__*", "kb__search"]),
        json!(["*__*issue*"]),
    ));
    assert_eq!(
        exposed(&g, "sub"),
        ["github__create_issue", "GitHub__list_issues"]
    );
    let g = gov(pattern_config(
        json!(["*_issue*"]),
        json!(["github__*", "kb__search"]),
    ));
    assert_eq!(
        exposed(&g, "sub"),
        ["github__create_issue", "GitHub__list_issues"]
    );
    let sub = AgentRef::subagent("sub", "sub");
    let kb = ToolCall::new(sub, "kb__search", json!({}));
    assert_eq!(
        g.decide(CallView::of(&kb)).verdict,
        Verdict::Refused(RefusalCode::NotAllowed)
    );
}

#[test]
fn r48_check_warns_once_for_a_pattern_that_matches_nothing() {
    let g = gov(pattern_config(
        json!(["jira__*", "JIRA__*", "github__*"]),
        json!(["jira__*"]),
    ));
    let warned: Vec<_> = g
        .warnings()
        .into_iter()
        .filter(|w| w.message.contains("jira__*") || w.message.contains("JIRA__*"))
        .collect();
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert_eq!(warned[0].path, "agents[0].allowed_tools[0]");
    assert!(warned[0].message.contains("R48"));
}

#[test]
fn r44_r40_check_warns_about_a_quota_that_selects_no_declared_tool() {
    let g = gov(search_config(json!([
        {"max": 1, "window_secs": 1, "tool": "search"},
        {"max": 1, "window_secs": 1, "server": "jira"},
        {"max": 1, "window_secs": 1, "kind": "local"}
    ])));
    let paths: Vec<String> = g
        .warnings()
        .into_iter()
        .filter(|w| w.message.contains("quota"))
        .map(|w| w.path)
        .collect();
    assert_eq!(paths, ["policy.quotas[1]", "policy.quotas[2]"]);
}

#[test]
fn r45_max_calls_is_exact_under_concurrent_sends() {
    let store = Arc::new(MemoryGrants::new(grants(json!([
        {"id": "five", "agent": "*", "tool": "*", "expires_at": 99, "max_calls": 5,
         "granted_by": "alice", "reason": "r"}
    ]))));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                use toolgate_engine::grant::GrantStore;
                (0..10)
                    .filter(|_| store.record_use("five", 1).unwrap())
                    .count()
            })
        })
        .collect();
    let used: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(used, 5);
    assert_eq!(store.uses("five"), Some(5));
}
