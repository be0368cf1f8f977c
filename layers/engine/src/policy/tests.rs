//! The policy's unit tests: parsing, validation and evaluation against SPEC R18–R23.

use std::cmp::Ordering;

use super::*;
use crate::number::Exact;
use serde_json::json;

fn policy(v: Value) -> Policy {
    Policy::from_json(&v, &Limits::default()).unwrap()
}

fn http(tool: &str) -> Subject<'_> {
    Subject {
        kind: ToolKind::Http,
        tool,
        server: None,
        agent: "a",
    }
}

fn mcp<'a>(server: &'a str, tool: &'a str) -> Subject<'a> {
    Subject {
        kind: ToolKind::Mcp,
        tool,
        server: Some(server),
        agent: "a",
    }
}

fn errors(v: Value) -> Vec<String> {
    Policy::from_json(&v, &Limits::default())
        .unwrap_err()
        .errors
        .into_iter()
        .map(|e| e.path)
        .collect()
}

#[test]
fn r18_effect_only_matches_every_mcp_and_http_call() {
    let p = policy(json!({"rules": [{"effect": "deny"}]}));
    assert_eq!(
        p.evaluate(&http("x"), &json!({})).effect,
        Some(Effect::Deny)
    );
    assert_eq!(
        p.evaluate(&mcp("s", "x"), &json!({})).effect,
        Some(Effect::Deny)
    );
    let local = Subject {
        kind: ToolKind::Local,
        tool: "x",
        server: None,
        agent: "a",
    };
    assert_eq!(
        p.evaluate(&local, &json!({})).effect,
        None,
        "R15: local only where a rule names it"
    );
    let p = policy(json!({"rules": [{"effect": "deny", "kind": "local"}]}));
    assert_eq!(p.evaluate(&local, &json!({})).effect, Some(Effect::Deny));
    assert_eq!(p.evaluate(&http("x"), &json!({})).effect, None);
}

#[test]
fn r19_server_never_matches_http() {
    let p = policy(json!({"rules": [{"effect": "deny", "server": "*"}]}));
    assert_eq!(p.evaluate(&http("x"), &json!({})).effect, None);
    assert_eq!(
        p.evaluate(&mcp("gh", "x"), &json!({})).effect,
        Some(Effect::Deny)
    );
}

#[test]
fn r19_agent_pattern() {
    let p = policy(json!({"rules": [{"effect": "ask", "agent": "sup*"}]}));
    let mut s = http("x");
    s.agent = "Support";
    assert_eq!(p.evaluate(&s, &json!({})).effect, Some(Effect::Ask));
    s.agent = "sub-1";
    assert_eq!(p.evaluate(&s, &json!({})).effect, None);
}

#[test]
fn r16_strictest_wins_whatever_the_order() {
    let p = policy(json!({"rules": [
        {"effect": "allow"}, {"effect": "ask", "tool": "x"}, {"effect": "deny", "tool": "x*"}
    ]}));
    let e = p.evaluate(&http("xy"), &json!({}));
    assert_eq!(e.effect, Some(Effect::Deny));
    assert_eq!(e.decided_by, Some(2));
    assert_eq!(e.matched, vec![0, 2]);
}

#[test]
fn r20_when_tests() {
    let p = policy(json!({"rules": [
        {"effect": "deny", "when": {"customer.tier": {"equals": "free"}, "amount": {"gte": 100}}},
    ]}));
    let deny = |input: Value| p.evaluate(&http("r"), &input).effect == Some(Effect::Deny);
    assert!(deny(json!({"customer": {"tier": "free"}, "amount": 100})));
    assert!(deny(json!({"customer": {"tier": "free"}, "amount": 100.0})));
    assert!(!deny(json!({"customer": {"tier": "free"}, "amount": 99})));
    assert!(
        !deny(json!({"amount": 500})),
        "a missing path never matches"
    );
    assert!(
        !deny(json!({"customer": {"tier": "free"}, "amount": "500"})),
        "gte holds only for numbers"
    );
    assert!(
        !deny(json!({"customer": [{"tier": "free"}], "amount": 500})),
        "arrays are never indexed"
    );
}

#[test]
fn r20_equals_null_and_presence() {
    let p = policy(json!({"rules": [{"effect": "deny", "when": {"a": {"equals": null}}}]}));
    assert_eq!(
        p.evaluate(&http("r"), &json!({"a": null})).effect,
        Some(Effect::Deny)
    );
    assert_eq!(p.evaluate(&http("r"), &json!({})).effect, None);
    let p = policy(json!({"rules": [{"effect": "deny", "when": {"a": {}}}]}));
    assert_eq!(
        p.evaluate(&http("r"), &json!({"a": 0})).effect,
        Some(Effect::Deny)
    );
    assert_eq!(p.evaluate(&http("r"), &json!({"b": 0})).effect, None);
}

#[test]
fn r20_in_and_matches() {
    let p = policy(json!({"rules": [
        {"effect": "deny", "when": {"region": {"in": ["eu", 1]}}},
        {"effect": "ask", "when": {"note": {"matches": "urgent"}}},
    ]}));
    assert_eq!(
        p.evaluate(&http("r"), &json!({"region": "eu"})).effect,
        Some(Effect::Deny)
    );
    assert_eq!(
        p.evaluate(&http("r"), &json!({"region": 1.0})).effect,
        Some(Effect::Deny)
    );
    assert_eq!(
        p.evaluate(&http("r"), &json!({"region": "us"})).effect,
        None
    );
    assert_eq!(
        p.evaluate(&http("r"), &json!({"note": "very urgent!"}))
            .effect,
        Some(Effect::Ask)
    );
    assert_eq!(p.evaluate(&http("r"), &json!({"note": 5})).effect, None);
}

#[test]
fn r20_numbers_compare_exactly_past_2_pow_53() {
    let big = |n: &str| -> Exact {
        let n: serde_json::Number = serde_json::from_str(n).unwrap();
        Exact::of(&n, None).unwrap()
    };
    let cmp_num = |a: &Exact, b: &Exact| a.compare(b);
    assert_eq!(
        cmp_num(&big("9007199254740993"), &big("9007199254740992.0")),
        Some(Ordering::Greater)
    );
    assert_eq!(
        cmp_num(&big("9007199254740992.0"), &big("9007199254740993")),
        Some(Ordering::Less)
    );
    assert_eq!(
        cmp_num(&big("18446744073709551615"), &big("18446744073709551616.0")),
        Some(Ordering::Less)
    );
    assert_eq!(cmp_num(&big("3"), &big("3.5")), Some(Ordering::Less));
    assert_eq!(cmp_num(&big("-3"), &big("-3.5")), Some(Ordering::Greater));
    assert_eq!(cmp_num(&big("1"), &big("1.0")), Some(Ordering::Equal));
    assert_eq!(cmp_num(&big("1"), &big("1e300")), Some(Ordering::Less));
    assert_eq!(cmp_num(&big("-1"), &big("-1e300")), Some(Ordering::Greater));
}

#[test]
fn r21_default_applies_only_without_a_match() {
    let p = policy(
        json!({"default": "deny", "rules": [{"effect": "allow", "tool": "ok"}, {"effect": "ask", "tool": "q*"}]}),
    );
    assert_eq!(
        p.evaluate(&http("x"), &json!({})).effect,
        Some(Effect::Deny)
    );
    assert!(p.evaluate(&http("x"), &json!({})).by_default);
    assert_eq!(
        p.evaluate(&http("ok"), &json!({})).effect,
        Some(Effect::Allow)
    );
    assert_eq!(
        p.evaluate(&http("q1"), &json!({})).effect,
        Some(Effect::Ask)
    );
}

#[test]
fn r22_validation_names_every_problem() {
    let paths = errors(json!({"rules": [
        {"effect": "block"},
        {"effect": "ask", "tool": "github__create_issue"},
        {"effect": "ask", "colour": "red"},
        {"effect": "ask", "when": {"a..b": {"gt": "5"}}},
        {"effect": "ask", "when": {"a": {"matches": "("}}},
        {"effect": "ask", "when": {"a": {"in": 5}}},
        {"tool": "x"},
        {"effect": "ask", "tool": "  "},
        {"effect": "ask", "reason": null},
    ], "extra": 1}));
    assert_eq!(
        paths,
        [
            "extra",
            "rules[0].effect",
            "rules[1].tool",
            "rules[2].colour",
            "rules[3].when[\"a..b\"]",
            "rules[3].when[\"a..b\"].gt",
            "rules[4].when.a.matches",
            "rules[5].when.a.in",
            "rules[6].effect",
            "rules[7].tool",
            "rules[8].reason",
        ]
    );
}

#[test]
fn r22_limits() {
    let limits = Limits {
        tool_rules: 2,
        tool_rule_field_chars: 3,
        tool_rule_text_chars: 4,
        ..Limits::default()
    };
    let err = Policy::from_json(
        &json!({"rules": [{"effect": "ask"}, {"effect": "ask"}, {"effect": "ask"}]}),
        &limits,
    )
    .unwrap_err();
    assert_eq!(err.errors[0].path, "rules");
    assert!(
        Policy::from_json(
            &json!({"rules": [{"effect": "ask", "tool": "abcd"}]}),
            &limits
        )
        .is_err()
    );
    assert!(
        Policy::from_json(
            &json!({"rules": [{"effect": "ask", "tool": "äöü"}]}),
            &limits
        )
        .is_ok(),
        "counted in scalar values"
    );
    assert!(
        Policy::from_json(
            &json!({"rules": [{"effect": "ask", "reason": "12345"}]}),
            &limits
        )
        .is_err()
    );
    assert!(
        Policy::from_json(
            &json!({"rules": [{"effect": "ask", "when": {"abcd": {}}}]}),
            &limits
        )
        .is_err()
    );
}

#[test]
fn r37_regex_size_limit_is_a_validation_error() {
    let limits = Limits {
        regex_size_limit: 1000,
        ..Limits::default()
    };
    let big = json!({"rules": [{"effect": "ask", "when": {"a": {"matches": "\\w{50}\\w{50}"}}}]});
    assert!(Policy::from_json(&big, &limits).is_err());
    assert!(Policy::from_json(&big, &Limits::default()).is_ok());
    let lookaround = json!({"rules": [{"effect": "ask", "when": {"a": {"matches": "(?=x)"}}}]});
    assert!(Policy::from_json(&lookaround, &Limits::default()).is_err());
}

#[test]
fn r23_empty() {
    assert!(policy(json!({"rules": []})).is_empty());
    assert!(!policy(json!({"default": "ask", "rules": []})).is_empty());
    assert_eq!(
        policy(json!({"rules": []}))
            .evaluate(&http("x"), &json!({}))
            .effect,
        None
    );
}

#[test]
fn index_agrees_with_the_naive_loop_on_bucketed_rules() {
    let p = policy(json!({"rules": [
        {"effect": "ask", "tool": "create_issue"},
        {"effect": "deny", "tool": "refund_*"},
        {"effect": "ask", "tool": "*_order"},
        {"effect": "ask", "server": "github"},
        {"effect": "deny", "server": "git*"},
        {"effect": "ask", "tool": "*x*"},
    ]}));
    for (server, tool) in [
        ("github", "create_issue"),
        ("gitlab", "refund_order"),
        ("x", "y"),
        ("GitHub", "fox"),
    ] {
        let s = mcp(server, tool);
        assert_eq!(
            p.evaluate(&s, &json!({})),
            p.evaluate_naive(&s, &json!({})),
            "{server} {tool}"
        );
    }
}

#[test]
fn round_trip_to_json() {
    let v = json!({"default": "ask", "rules": [{"effect": "deny", "tool": "x"}], "updatedAt": "2026-01-01T00:00:00Z"});
    let p = policy(v.clone());
    assert_eq!(p.to_json(), v);
}
