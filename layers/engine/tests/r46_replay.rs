//! R46: the replay of recorded calls under a proposed policy (`toolgate policy simulate`,
//! the policy tab's preview), from the engine's one implementation.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

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

/// Issue 33 item 8 (R46, R52): an `mcp serve` audit log — its `mcp_tools_changed` records,
/// content events, a held call and its later send — replays what ran.
mod gateway_log {
    use super::*;

    const GATEWAY: &str = r#"{"approval": {"channel": "inbox"},
        "agents": [{"name": "dev", "allowed_tools": ["bank__*"]}]}"#;

    fn listing(with_definition: bool) -> String {
        let definition = serde_json::json!({
            "kind": "mcp", "source": "bank", "name": "transfer", "listed_name": null,
            "description": "Moves money", "input_schema": {"type": "object"},
            "annotations": {"title": null, "readOnlyHint": false, "destructiveHint": true,
                            "idempotentHint": null, "openWorldHint": true},
            "approval": "default", "confidential": false, "network_override": null
        });
        let mut change = serde_json::json!({"change": "added", "tool": "bank__transfer",
            "name": "transfer", "new_hash": "sha256:00", "posture": null});
        if with_definition {
            change["definition"] = definition;
        }
        serde_json::json!({"time": "2030-01-01T00:00:00Z", "event": "mcp_tools_changed",
            "server": "bank", "trigger": "discovery", "changes": [change]})
        .to_string()
    }

    fn log(with_definition: bool) -> String {
        [
            listing(with_definition),
            r#"{"time": "2030-01-01T00:00:01Z", "event": "mcp_resource_read", "agent": "dev", "outcome": "allowed"}"#.to_owned(),
            r#"{"time": "2030-01-01T00:00:02Z", "tool": "bank__transfer", "agent": "dev", "session": "s-1", "input": {"amount": 5000}, "approval": {"wait": "not_asked", "approver": null, "interaction_id": null}}"#.to_owned(),
            r#"{"time": "2030-01-01T00:00:03Z", "tool": "bank__transfer", "agent": "dev", "input": {"amount": 7}, "approval": {"wait": "held", "approver": null, "interaction_id": "ia_1"}}"#.to_owned(),
            r#"{"time": "2030-01-01T00:01:00Z", "tool": "bank__transfer", "agent": "dev", "input": {"amount": 7}, "approval": {"wait": "approved", "approver": "alice", "interaction_id": "ia_1"}}"#.to_owned(),
            String::new(),
        ]
        .join("\n")
    }

    fn policies() -> (toolgate_engine::Governance, toolgate_engine::Governance) {
        let current = load_str(GATEWAY, Format::Json).unwrap();
        let strict = Policy::from_json_str(
            r#"{"rules": [{"effect": "deny", "server": "bank", "tool": "transfer"}]}"#,
            &Limits::default(),
        )
        .unwrap();
        let proposed = current.with_policy(PolicyState::readable(strict)).unwrap();
        (current, proposed)
    }

    #[test]
    fn r52_discovered_tools_are_judged_and_a_held_call_and_its_send_are_one_call() {
        let (current, proposed) = policies();
        let r = replay::replay(&current, &proposed, &log(true), None).unwrap();
        assert_eq!(
            r.other_records, 1,
            "the content event is read, not replayed"
        );
        assert_eq!(r.paired, 1, "the send of the held call is folded into it");
        assert_eq!(r.replayed, 2, "{r:?}");
        assert!(r.unjudged.is_empty(), "{r:?}");
        assert_eq!(r.changed.len(), 2, "{r:?}");
        assert!(
            r.changed
                .iter()
                .all(|c| c.proposed.refusal == Some("denied"))
        );
        assert_eq!(r.changed[1].current.outcome, "run");
        assert!(
            r.changed[1].current.sent,
            "the held call was sent once approved"
        );
        assert!(r.unchained);
    }

    #[test]
    fn r52_a_call_to_a_tool_the_log_does_not_define_is_never_reported_unchanged() {
        let (current, proposed) = policies();
        let r = replay::replay(&current, &proposed, &log(false), None).unwrap();
        assert!(r.changed.is_empty());
        assert_eq!(r.unjudged.len(), 2, "{r:?}");
        assert!(
            r.sentence().contains("2 could not be judged"),
            "{}",
            r.sentence()
        );
    }

    #[test]
    fn r46_a_log_whose_chain_is_broken_is_not_replayed() {
        let (current, proposed) = policies();
        let mut text = String::new();
        let mut prev = String::from(toolgate_engine::chain::GENESIS);
        for (seq, line) in log(true).lines().filter(|l| !l.is_empty()).enumerate() {
            let record: serde_json::Map<String, serde_json::Value> =
                serde_json::from_str(line).unwrap();
            let (linked, hash) = toolgate_engine::chain::link(record, seq as u64, &prev).unwrap();
            text.push_str(&linked);
            text.push('\n');
            prev = hash;
        }
        let intact = replay::replay(&current, &proposed, &text, None);
        let intact = match intact {
            Ok(r) => r,
            Err(e) => panic!("{e}"),
        };
        assert!(!intact.unchained);
        let altered = text.replacen("\"amount\":5000", "\"amount\":1", 1);
        assert_ne!(altered, text);
        let e = replay::replay(&current, &proposed, &altered, None).unwrap_err();
        assert!(e.contains("hash chain is broken"), "{e}");
    }
}
