//! `toolgate policy simulate` (R46, issue 21): recorded calls replayed under the policy in
//! force and a proposed one, with what would change.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::path::Path;

use serde_json::{Value, json};

mod common;

use common::toolgate;

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_owned()
}

const CONFIG: &str = r#"{
  "approval": {"channel": "inbox"},
  "tools": [{"kind": "http", "name": "refund_order"}, {"kind": "http", "name": "lookup"}],
  "agents": [{"name": "support", "allowed_tools": ["refund_order", "lookup"]}],
  "policy": {"rules": []}
}"#;

fn record(time: &str, tool: &str, input: Option<Value>, wait: &str) -> String {
    let mut r = json!({"time": time, "call_id": "c", "tool": tool, "agent": "support",
        "subagent": null, "approval": {"wait": wait}, "outcome": "completed"});
    if let Some(i) = input {
        r["input"] = i;
    }
    r.to_string()
}

#[test]
fn r46_policy_simulate_replays_recorded_calls_and_reports_what_a_change_would_do() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(dir.path(), "config.json", CONFIG);
    let audit = [
        record(
            "2026-12-01T10:00:00Z",
            "refund_order",
            Some(json!({"amount": 50})),
            "not_asked",
        ),
        record(
            "2026-12-01T10:00:01Z",
            "refund_order",
            Some(json!({"amount": 500})),
            "not_asked",
        ),
        record("2026-12-01T10:00:02Z", "lookup", None, "not_asked"),
        record(
            "2026-12-01T10:00:03Z",
            "lookup",
            Some(json!({"q": "x"})),
            "not_asked",
        ),
        record(
            "2026-12-01T10:00:04Z",
            "lookup",
            Some(json!({"q": "y"})),
            "not_asked",
        ),
    ]
    .join("\n");
    let audit = write(dir.path(), "audit.jsonl", &audit);
    let proposed = write(
        dir.path(),
        "new.json",
        r#"{"rules": [
            {"effect": "deny", "tool": "refund_order", "when": {"amount": {"gt": 100}}, "reason": "big refunds"},
            {"effect": "ask", "tool": "refund_order", "reason": "refunds need a person"}
        ], "quotas": [{"tool": "lookup", "max": 1, "window_secs": 60}]}"#,
    );
    let out = toolgate(&[
        "policy", "simulate", "--config", &config, "--audit", &audit, "--policy", &proposed,
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["replayed"], 4, "{report}");
    assert_eq!(report["skipped"], 1, "the record without an input");
    let changed = report["changed"].as_array().unwrap();
    let lines: Vec<u64> = changed
        .iter()
        .map(|c| c["line"].as_u64().unwrap())
        .collect();
    // The small refund is now asked, the big one refused by rules[0], the second lookup
    // in the minute is rate limited; the first lookup is unchanged.
    assert_eq!(lines, [1, 2, 5], "{report}");
    assert_eq!(changed[0]["proposed"]["outcome"], "ask");
    assert_eq!(changed[1]["proposed"]["refusal"], "denied");
    assert_eq!(changed[1]["proposed"]["decided_by"], "rules[0] (deny)");
    assert_eq!(changed[1]["current"]["outcome"], "run");
    assert_eq!(changed[2]["proposed"]["refusal"], "rate_limited");
    assert_eq!(
        report["totals"],
        json!({"now_refused": 2, "now_asked": 1, "now_run": 0})
    );

    // The text form ends with the one-line verdict a person reads.
    let text = toolgate(&[
        "policy", "simulate", "--config", &config, "--audit", &audit, "--policy", &proposed,
    ]);
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.trim_end().ends_with(
            "this change over the last 4 recorded calls: 2 would now be refused, 1 asked, 0 run"
        ),
        "{text}"
    );

    // A proposed policy that does not load is an error naming its field, not a report.
    let broken = write(
        dir.path(),
        "broken.json",
        r#"{"rules": [{"effect": "maybe"}]}"#,
    );
    let out = toolgate(&[
        "policy", "simulate", "--config", &config, "--audit", &audit, "--policy", &broken,
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("policy.rules[0].effect"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
