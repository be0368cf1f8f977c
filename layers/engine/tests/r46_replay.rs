//! R46: the replay of recorded calls under a proposed policy (`toolgate policy simulate`,
//! the policy tab's preview), from the engine's one implementation.

use toolgate_engine::config::{Format, load_str};
use toolgate_engine::policy::{Limits, Policy};
use toolgate_engine::{PolicyState, replay};

const CONFIG: &str = r#"{"approval": {"channel": "interactive"},
    "tools": [{"kind": "http", "name": "refund"}, {"kind": "http", "name": "lookup"}],
    "agents": [{"name": "support", "allowed_tools": ["refund", "lookup"]}]}"#;

fn audit() -> String {
    [
        r#"{"time": "2030-01-01T00:00:00Z", "tool": "refund", "agent": "support", "input": {"amount": 500}}"#,
        r#"{"time": "2030-01-01T00:00:01Z", "tool": "refund", "agent": "support", "input": {"amount": 5}}"#,
        r#"{"time": "2030-01-01T00:00:02Z", "tool": "lookup", "agent": "support", "input": {"q": "[REDACTED]"}}"#,
        r#"{"time": "2030-01-01T00:00:03Z", "tool": "lookup", "agent": "support"}"#,
        "",
    ]
    .join("\n")
}

#[test]
fn r46_a_replay_counts_what_the_change_would_refuse_ask_and_run() {
    let current = load_str(CONFIG, Format::Json).unwrap();
    let policy = Policy::from_json_str(
        r#"{"rules": [{"effect": "deny", "tool": "refund", "when": {"amount": {"gt": 100}}},
                      {"effect": "ask", "tool": "lookup"}]}"#,
        &Limits::default(),
    )
    .unwrap();
    let proposed = current.with_policy(PolicyState::readable(policy)).unwrap();
    let r = replay::replay(&current, &proposed, &audit(), None).unwrap();
    assert_eq!((r.replayed, r.skipped, r.redacted_inputs), (3, 1, 1));
    assert_eq!(r.changed.len(), 2);
    assert_eq!(r.changed[0].line, 1);
    assert_eq!(r.changed[0].proposed.decided_by, "rules[0] (deny)");
    assert_eq!(r.changed[1].proposed.outcome, "ask");
    assert_eq!(
        (r.totals.now_refused, r.totals.now_asked, r.totals.now_run),
        (1, 1, 0)
    );
    // Only the last records: the first refund is not among the last three.
    let r = replay::replay(&current, &proposed, &audit(), Some(3)).unwrap();
    assert_eq!((r.replayed, r.skipped), (2, 1));
    assert_eq!(
        r.sentence(),
        "this change over the last 2 recorded calls: 0 would now be refused, 1 asked, 0 run"
    );
}

#[test]
fn r46_a_record_that_cannot_be_read_names_its_line() {
    let gov = load_str(CONFIG, Format::Json).unwrap();
    let e = replay::replay(&gov, &gov, "{\"time\": 1}\n", None).unwrap_err();
    assert!(e.starts_with("line 1:"), "{e}");
}
