#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::borrow::Cow;

use serde_json::{Value, json};

use super::*;
use crate::{
    Ask, AskSource, ChannelKind, Check, Decision, DecisionNote, Delegation, Effect, Granted,
    LabelSet, LabelsRead, MatchedRule, Principal, Refusal, RefusalCode, ShadowNote, Verdict,
    WaitEnd,
};

/// A record as the audit layer writes it today, chained (every optional part present).
const FULL: &str = r#"{"agent":"ops","approval":{"approver":"dave","interaction_id":"ia_fixed","principal":{"issuer":"https://idp.example","subject":"u-dave"},"wait":"approved"},"call_id":"call-n1","decision":{"asks":[{"reason":"rule two: Bearer [REDACTED]","source":"policy_rule:2"},{"reason":"the hook","source":"hook"}],"check":"approval routing","granted":{"granted_by":"carol","id":"g-7"},"labels":{"session":null,"tool":["egress","private"]},"matched_rules":[{"effect":"ask","rule":2},{"effect":"allow","rule":4}],"outcome":"ask","reasons":["asked, with Bearer [REDACTED]"],"refusal":null,"retry_after_secs":null,"rule":null},"delegation":{"act":{"act":{"sub":"router"},"sub":"support-bot"},"server":"crm","subject":"alice","token_url":"https://idp.example/token"},"duration_ms":0.412,"edit":{"edited_by":"dave","original_input":{"amount":500,"password":"[REDACTED]"},"original_input_hash":"sha256:00"},"error":"the upstream broke: Bearer [REDACTED]","hash":"sha256:b1","identities":[{"kind":"mcp","name":"refund","network_declared":"egress","network_effective":"incidental","source":"crm"}],"input":{"amount":50},"input_hash":"sha256:0b88","outcome":"error","output":{"error":"Bearer [REDACTED]"},"policy_updated_at":"2030-01-01T00:00:00Z","prev":"sha256:a0","principal":{"issuer":"https://idp.example","subject":"u-ops"},"seq":2,"session":"s9","shadow":{"check":"all checks passed","disagrees":true,"outcome":"run","reasons":["shadow: Bearer [REDACTED]"],"refusal":null,"rule":null},"subagent":"sub-1","time":"2030-01-01T00:00:00.000001Z","tool":"crm__refund"}"#;

/// A record as the first audit layer wrote it (before identities carried network scopes,
/// records their session and policy, and decisions their quota and grant).
const FIRST: &str = r#"{"seq":1,"prev":"sha256:0000000000000000000000000000000000000000000000000000000000000000","hash":"sha256:5e","time":"2026-11-29T23:26:55.000001Z","call_id":"c-1","tool":"refund","identities":[{"kind":"http","source":"","name":"refund"}],"agent":"dev","subagent":null,"input_hash":"sha256:7e","decision":{"outcome":"refused","check":"tenant policy","refusal":"denied","rule":0,"matched_rules":[{"rule":0,"effect":"deny"}],"reasons":["too large"],"asks":[]},"approval":{"wait":"refused","approver":null,"interaction_id":null},"outcome":"refused","duration_ms":1.5}"#;

/// A record as the replay bench writes them (`benches/benches/policy_simulate.rs`).
const BENCH: &str = r#"{"seq":7,"prev":"sha256:0000000000000000000000000000000000000000000000000000000000000007","hash":"sha256:0000000000000000000000000000000000000000000000000000000000000008","time":"2030-01-01T00:00:00.420Z","call_id":"call-00000007","tool":"github__create_issue","identities":[{"kind":"mcp","source":"github","name":"create_issue","network_declared":"none","network_effective":"none"}],"agent":"support","subagent":null,"input_hash":"sha256:0000000000000000000000000000000000000000000000000000000000000031","input":{"title":"Ticket 7","body":"Crash on start, seen 7 times"},"decision":{"outcome":"run","check":"passed","refusal":null,"rule":null,"matched_rules":[],"reasons":[],"asks":[],"retry_after_secs":null,"granted":null},"approval":{"wait":"not_asked","approver":"alice","interaction_id":null},"outcome":"completed","duration_ms":0.412}"#;

/// Event records as the gateway writes them.
const EVENTS: [&str; 3] = [
    r#"{"changes":[{"change":"added","definition":{"kind":"mcp","name":"transfer","source":"bank"},"name":"transfer","new_hash":"sha256:00","posture":null,"tool":"bank__transfer"}],"event":"mcp_tools_changed","hash":"sha256:02","prev":"sha256:01","seq":4,"server":"bank","time":"2030-01-01T00:00:00.000001Z","trigger":"discovery"}"#,
    r#"{"time":"2030-01-01T00:00:01Z","event":"mcp_resource_read","agent":"dev","session":"s-1","server":"kb","name":"kb__page","uri":"kb://page/1","outcome":"refused","code":"not_allowed","reasons":["not allowed"]}"#,
    r#"{"event":"mcp_listing_failed","server":"kb","trigger":"list_changed","error":"connection refused"}"#,
];

fn value(line: &str) -> Value {
    serde_json::from_str(line).unwrap()
}

#[test]
fn r33_a_record_of_every_part_reads_and_writes_back_the_same() {
    let record: AuditRecord<'_> = serde_json::from_str(FULL).unwrap();
    assert_eq!(record.seq, Some(2));
    assert_eq!(record.decision.asks[0].source, "policy_rule:2");
    assert_eq!(
        record
            .approval
            .as_ref()
            .unwrap()
            .principal
            .as_ref()
            .unwrap()
            .subject,
        "u-dave"
    );
    assert_eq!(
        record.delegation.as_ref().unwrap().act["sub"],
        "support-bot"
    );
    assert_eq!(serde_json::to_value(&record).unwrap(), value(FULL));
    assert_eq!(Value::Object(record.to_map().unwrap()), value(FULL));
}

#[test]
fn r33_records_already_on_disk_still_parse() {
    let first: AuditRecord<'_> = serde_json::from_str(FIRST).unwrap();
    assert_eq!(
        (first.tool.as_ref(), first.agent.as_ref()),
        ("refund", "dev")
    );
    assert_eq!(first.identities[0].network_declared, "", "not written then");
    assert_eq!(first.session, None);
    assert_eq!(first.decision.rule, Some(0));
    assert_eq!(first.decision.granted, None);
    assert_eq!(first.approval.unwrap().wait, "refused");
    assert_eq!(first.duration_ms, 1.5);

    let bench: AuditRecord<'_> = serde_json::from_str(BENCH).unwrap();
    assert_eq!(
        bench.input,
        Some(json!({"title": "Ticket 7", "body": "Crash on start, seen 7 times"}))
    );
    assert_eq!(serde_json::to_value(&bench).unwrap(), {
        let mut v = value(BENCH);
        // Fields written since: `null` when they do not apply.
        v["session"] = Value::Null;
        v["policy_updated_at"] = Value::Null;
        v
    });

    // Replay's hand-written logs: only what it needs.
    let minimal: AuditRecord<'_> = serde_json::from_str(
        r#"{"time": "2030-01-01T00:00:00Z", "tool": "refund", "agent": "support"}"#,
    )
    .unwrap();
    assert_eq!(minimal.input, None);
    assert_eq!(minimal.approval, None);
}

#[test]
fn r33_absent_and_null_are_kept_apart() {
    let base = r#"{"time":"t","call_id":"c","tool":"x","agent":"a""#;
    let (absent, null) = (format!("{base}}}"), format!(r#"{base},"input":null}}"#));
    let absent: AuditRecord<'_> = serde_json::from_str(&absent).unwrap();
    let null: AuditRecord<'_> = serde_json::from_str(&null).unwrap();
    assert_eq!(absent.input, None);
    assert_eq!(
        null.input,
        Some(Value::Null),
        "an input of null was recorded"
    );
    let written = serde_json::to_string(&null).unwrap();
    assert!(written.contains(r#""input":null"#), "{written}");
    assert!(!serde_json::to_string(&absent).unwrap().contains("input\""));
    // Always written, `null` when it does not apply.
    for field in [
        "subagent",
        "session",
        "policy_updated_at",
        "input_hash",
        "approval",
    ] {
        assert!(
            written.contains(&format!(r#""{field}":null"#)),
            "{field}: {written}"
        );
    }
    // Absent when it does not apply.
    for field in [
        "principal",
        "edit",
        "shadow",
        "delegation",
        "error",
        "output",
        "seq",
        "prev",
        "hash",
        "labels",
        "event",
    ] {
        assert!(
            !written.contains(&format!(r#""{field}""#)),
            "{field}: {written}"
        );
    }
}

#[test]
fn r33_strings_are_borrowed_from_the_line_where_they_can_be() {
    let line = r#"{"time":"t","call_id":"c","tool":"x","agent":"a","subagent":"s","session":"s\u00e9","approval":{"wait":"held","approver":null,"interaction_id":"ia_1"},"decision":{"outcome":"ask","reasons":["r"]}}"#;
    let r: AuditRecord<'_> = serde_json::from_str(line).unwrap();
    assert!(matches!(r.tool, Cow::Borrowed("x")));
    assert!(matches!(r.subagent, Some(Cow::Borrowed("s"))));
    assert!(
        matches!(r.session, Some(Cow::Owned(ref s)) if s == "sé"),
        "an escape is copied"
    );
    let approval = r.approval.unwrap();
    assert!(matches!(approval.wait, Cow::Borrowed("held")));
    assert!(matches!(
        approval.interaction_id,
        Some(Cow::Borrowed("ia_1"))
    ));
    assert!(matches!(r.decision.reasons[0], Cow::Borrowed("r")));
}

#[test]
fn r33_events_are_told_apart_from_calls_and_kept_as_written() {
    for line in EVENTS {
        let AuditEntry::Event(e) = AuditEntry::parse(line).unwrap() else {
            panic!("{line}")
        };
        assert_eq!(serde_json::to_value(&e).unwrap(), value(line), "{line}");
        assert_eq!(
            Value::Object(AuditEntry::Event(e).to_map().unwrap()),
            value(line)
        );
    }
    let AuditEntry::Event(e) = AuditEntry::parse(EVENTS[0]).unwrap() else {
        panic!()
    };
    assert_eq!(e.event, AuditEvent::MCP_TOOLS_CHANGED);
    assert_eq!(e.str("server"), Some("bank"));
    assert_eq!(e.fields["changes"][0]["change"], "added");
    assert!(matches!(
        AuditEntry::parse(FULL).unwrap(),
        AuditEntry::Call(_)
    ));
    assert_eq!(AuditEntry::parse(FULL).unwrap().hash(), Some("sha256:b1"));
    assert_eq!(
        AuditEntry::parse(EVENTS[0]).unwrap().hash(),
        Some("sha256:02")
    );
    assert_eq!(AuditEntry::parse(EVENTS[1]).unwrap().hash(), None);

    // An event is never read as a call.
    let e = serde_json::from_str::<AuditRecord<'_>>(EVENTS[1]).unwrap_err();
    assert!(e.to_string().contains("is an event"), "{e}");
    // A malformed line is an error either way.
    assert!(AuditEntry::parse(r#"{"event": 3}"#).is_err());
    assert!(AuditEntry::parse(r#"{"tool": 3}"#).is_err());
    assert!(AuditEntry::parse("3").is_err());
}

fn redact(s: &str) -> String {
    s.replace("secret", "[REDACTED]")
}

#[test]
fn r33_the_parts_record_their_core_types_redacted() {
    let mut d = Decision::new(
        Verdict::Ask {
            channel: ChannelKind::Inbox,
        },
        Check::Routing,
        vec!["a secret reason".into()],
    );
    d.asks = vec![Ask::new(AskSource::PolicyRule(3), "secret ask")];
    d.matched_rules = vec![MatchedRule::new(3, Effect::Ask, None)];
    d.granted = Some(Granted::new("g", "alice"));
    d.labels = Some(LabelsRead::new(
        LabelSet::of(["b", "a"]),
        Some(LabelSet::new()),
    ));
    assert_eq!(
        serde_json::to_value(AuditDecision::of(&d, &redact)).unwrap(),
        json!({"outcome": "ask", "check": "approval routing", "refusal": null, "rule": null,
               "matched_rules": [{"rule": 3, "effect": "ask"}], "reasons": ["a [REDACTED] reason"],
               "asks": [{"source": "policy_rule:3", "reason": "[REDACTED] ask"}],
               "retry_after_secs": null, "granted": {"id": "g", "granted_by": "alice"},
               "labels": {"tool": ["a", "b"], "session": []}})
    );

    let mut refusal = Refusal::new(RefusalCode::RateLimited, Check::Quota, "secret full");
    refusal.retry_after_secs = Some(9);
    let denied = Decision::refused(Refusal::new(RefusalCode::Denied, Check::TenantPolicy, "no"));
    let mut denied_by_rule = denied.clone();
    denied_by_rule.matched_rules = vec![MatchedRule::new(1, Effect::Deny, None)];
    assert_eq!(AuditDecision::of(&denied_by_rule, &redact).rule, Some(1));
    assert_eq!(
        serde_json::to_value(AuditDecision::refused(&refusal, &redact)).unwrap(),
        json!({"outcome": "refused", "check": "quota", "refusal": "rate_limited", "rule": null,
               "matched_rules": [], "reasons": ["[REDACTED] full"], "asks": [],
               "retry_after_secs": 9, "granted": null})
    );
    assert_eq!(
        serde_json::to_value(AuditDecision::ungated()).unwrap(),
        json!({"outcome": "run", "check": null, "refusal": null, "rule": null, "matched_rules": [],
               "reasons": [], "asks": [], "retry_after_secs": null, "granted": null})
    );

    let shadow = ShadowNote::new(denied_by_rule);
    assert_eq!(
        serde_json::to_value(AuditShadow::of(&shadow, &d, &redact)).unwrap(),
        json!({"outcome": "refused", "check": "tenant policy", "refusal": "denied", "rule": 1,
               "reasons": ["no"], "disagrees": true})
    );

    let mut note = DecisionNote::new(
        d,
        WaitEnd::Denied {
            approver: "bob".into(),
        },
    );
    note.interaction_id = Some("ia_2".into());
    let p = Principal {
        subject: "u-bob".into(),
        issuer: "https://idp".into(),
    };
    assert_eq!(
        serde_json::to_value(AuditApproval::of(&note, Some(&p))).unwrap(),
        json!({"wait": "denied", "approver": "bob", "interaction_id": "ia_2",
               "principal": {"subject": "u-bob", "issuer": "https://idp"}})
    );
    let note = DecisionNote::new(note.decision, WaitEnd::Expired);
    assert_eq!(
        serde_json::to_value(AuditApproval::of(&note, None)).unwrap(),
        json!({"wait": "expired", "approver": null, "interaction_id": null})
    );
    let delegation = Delegation::new("crm", "alice", vec!["bot".into()], "https://t");
    assert_eq!(
        serde_json::to_value(AuditDelegation::of(&delegation)).unwrap(),
        json!({"server": "crm", "subject": "alice", "act": {"sub": "bot"}, "token_url": "https://t"})
    );
}

#[test]
fn r33_fields_are_written_in_the_order_the_layer_always_wrote_them() {
    let mut record = AuditRecord::new("t", "c", "x", "a").input(json!(1));
    record.seq = Some(1);
    record.error = Some("e".into());
    let line = serde_json::to_string(&record).unwrap();
    let order = [
        "time",
        "call_id",
        "tool",
        "identities",
        "agent",
        "subagent",
        "session",
        "policy_updated_at",
        "input_hash",
        "input",
        "decision",
        "approval",
        "outcome",
        "error",
        "duration_ms",
        "seq",
    ];
    // Each key found after the one before it.
    let mut from = 0;
    for k in order {
        let at = line[from..].find(&format!(r#""{k}":"#));
        from += at.unwrap_or_else(|| panic!("`{k}` out of order: {line}")) + 1;
    }
}
