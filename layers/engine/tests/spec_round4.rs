//! SPEC round four (§6e): R49 labels and session labels, R50 quotas per input, R51 four
//! eyes — what the public cases 055–060 do not reach.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use proptest::prelude::*;
use serde_json::{Value, json};
use toolgate_core::{AgentRef, RefusalCode, ToolCall, Verdict};
use toolgate_engine::CallView;
use toolgate_engine::config::{Format, load_str};
use toolgate_engine::simulate::{Answer, Simulation};

fn paths(text: &str) -> Vec<String> {
    load_str(text, Format::Json)
        .unwrap_err()
        .errors
        .into_iter()
        .map(|e| e.path)
        .collect()
}

const TOOLS: &str = r#""servers": {"mail": {"labels": ["private"]}, "web": {"labels": ["untrusted"]}},
    "tools": [{"server": "mail", "name": "read_inbox", "annotations": {"readOnlyHint": true, "openWorldHint": false}},
              {"server": "web", "name": "fetch", "annotations": {"readOnlyHint": true, "openWorldHint": false}},
              {"kind": "http", "name": "post_webhook", "network": "egress"},
              {"kind": "http", "name": "lookup", "network": "none", "labels": ["cheap"]}],
    "agents": [{"name": "a", "allowed_tools": ["mail__*", "web__*", "post_webhook", "lookup"]},
               {"name": "sub", "parent": "a", "allowed_tools": ["mail__*", "web__*", "post_webhook", "lookup"]}]"#;

fn config(policy: &str) -> String {
    format!(r#"{{"approval": {{"channel": "inbox"}}, {TOOLS}, "policy": {policy}}}"#)
}

#[test]
fn r49_labels_are_validated_at_their_paths() {
    for (label, why) in [
        ("Private", "lower-case"),
        ("-x", "starts with"),
        ("a b", "lower-case"),
        (&*"x".repeat(65), "at most 64"),
    ] {
        let text = format!(
            r#"{{"tools": [{{"kind": "http", "name": "t", "labels": [{}]}}]}}"#,
            json!(label)
        );
        let e = load_str(&text, Format::Json).unwrap_err();
        assert_eq!(e.errors[0].path, "tools[0].labels[0]", "{label}");
        assert!(e.errors[0].message.contains(why), "{label}: {e}");
    }
    let seventeen: Vec<String> = (0..17).map(|i| format!("l{i}")).collect();
    assert_eq!(
        paths(&format!(
            r#"{{"servers": {{"s": {{"labels": {}}}}}}}"#,
            json!(seventeen)
        )),
        ["servers.s.labels"]
    );
    // An ungoverned host tool carries none (R42).
    assert_eq!(
        paths(
            r#"{"tools": [{"toolset": "skills", "name": "read", "governed": false, "ungoverned_reason": "r", "labels": ["x"]}]}"#
        ),
        ["tools[0].labels"]
    );
    // A rule's and a quota's lists: not empty, no repeats, a list.
    assert_eq!(
        paths(&config(
            r#"{"rules": [{"effect": "ask", "labels": []},
                                    {"effect": "ask", "session_labels": ["a", "a"]},
                                    {"effect": "deny", "labels": "egress"}],
                         "quotas": [{"max": 1, "window_secs": 1, "session_labels": []}]}"#
        )),
        [
            "policy.rules[0].labels",
            "policy.rules[1].session_labels[1]",
            "policy.rules[2].labels",
            "policy.quotas[0].session_labels"
        ]
    );
}

#[test]
fn r49_a_tools_labels_are_its_records_its_servers_and_egress_and_check_warns_of_unknown_ones() {
    let g = load_str(
        &config(r#"{"rules": [{"effect": "ask", "labels": ["egress"], "session_labels": ["private", "secret"]}],
                   "quotas": [{"max": 1, "window_secs": 1, "labels": ["nowhere"]}]}"#),
        Format::Json,
    )
    .unwrap();
    assert_eq!(
        g.tool_labels("mail__read_inbox").unwrap().to_vec(),
        ["private"]
    );
    assert_eq!(g.tool_labels("post_webhook").unwrap().to_vec(), ["egress"]);
    assert_eq!(g.tool_labels("lookup").unwrap().to_vec(), ["cheap"]);
    let warned: Vec<String> = g
        .warnings()
        .into_iter()
        .filter(|w| w.message.contains("R49"))
        .map(|w| format!("{} {}", w.path, w.message))
        .collect();
    assert_eq!(warned.len(), 2, "{warned:#?}");
    assert!(warned[0].starts_with("policy.rules[0]") && warned[0].contains("`secret`"));
    assert!(warned[1].starts_with("policy.quotas[0]") && warned[1].contains("`nowhere`"));
}

#[test]
fn r49_a_subagents_sends_count_in_the_parents_session_and_a_label_never_changes_the_list() {
    let g = load_str(
        &config(r#"{"rules": [{"effect": "deny", "labels": ["egress"], "session_labels": ["private", "untrusted"], "reason": "trifecta"}]}"#),
        Format::Json,
    )
    .unwrap();
    let mut sim = Simulation::new(Vec::new());
    let mut step = |who: AgentRef, name: &str, at: u64, session: &str| {
        let call = ToolCall::new(who, name, json!({}));
        sim.step(&g, CallView::of(&call), Some(session), at, None)
            .unwrap()
    };
    assert!(step(AgentRef::profile("a"), "mail__read_inbox", 0, "s").sent);
    // The subagent's untrusted read counts in the same session.
    assert!(step(AgentRef::profile("sub"), "web__fetch", 1, "s").sent);
    let refused = step(AgentRef::profile("a"), "post_webhook", 2, "s");
    assert_eq!(
        refused.decision.verdict,
        Verdict::Refused(RefusalCode::Denied),
        "{:?}",
        refused.decision
    );
    // Another session, and `decide` (no history), are not touched.
    assert!(step(AgentRef::profile("a"), "post_webhook", 3, "t").sent);
    let call = ToolCall::new(AgentRef::profile("a"), "post_webhook", json!({}));
    assert!(g.decide(CallView::of(&call)).runs());
    // R49: labels never change what an agent is shown.
    let shown: Vec<String> = g
        .expose("a")
        .unwrap()
        .tools
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    assert!(shown.contains(&String::from("post_webhook")), "{shown:?}");
}

#[test]
fn r49_labels_are_counted_when_the_send_is_recorded_not_when_a_call_is_refused_or_held() {
    let g = load_str(
        &config(r#"{"rules": [{"effect": "ask", "tool": "fetch", "server": "web"},
                              {"effect": "deny", "labels": ["egress"], "session_labels": ["untrusted"]}]}"#),
        Format::Json,
    )
    .unwrap();
    let mut sim = Simulation::new(Vec::new());
    let mut step = |name: &str, at: u64, answer: Option<Answer>| {
        let call = ToolCall::new(AgentRef::profile("a"), name, json!({}));
        sim.step(&g, CallView::of(&call), Some("s"), at, answer)
            .unwrap()
    };
    // Held, never answered: not sent, no label.
    assert!(!step("web__fetch", 0, None).sent);
    assert!(
        step("post_webhook", 1, None).sent,
        "untrusted was never sent"
    );
    // Denied by the person: not sent, no label.
    assert!(!step("web__fetch", 2, Some(Answer::Deny)).sent);
    assert!(step("post_webhook", 3, None).sent);
    // Approved and sent: the session now has `untrusted`.
    assert!(step("web__fetch", 4, Some(Answer::Approve)).sent);
    assert!(!step("post_webhook", 5, None).sent);
}

#[test]
fn r51_approvals_are_for_ask_rules_from_one_to_five_and_check_warns_off_an_inbox() {
    assert_eq!(
        paths(&config(
            r#"{"rules": [{"effect": "deny", "approvals": 2},
                                    {"effect": "ask", "approvals": 6},
                                    {"effect": "ask", "approvals": 0},
                                    {"effect": "ask", "approvals": 1.5},
                                    {"effect": "ask", "approvals": "2"}]}"#
        )),
        [
            "policy.rules[0].approvals",
            "policy.rules[1].approvals",
            "policy.rules[2].approvals",
            "policy.rules[3].approvals",
            "policy.rules[4].approvals"
        ]
    );
    let inbox = load_str(
        &config(r#"{"rules": [{"effect": "ask", "tool": "lookup", "approvals": 3}]}"#),
        Format::Json,
    )
    .unwrap();
    assert!(!inbox.warnings().iter().any(|w| w.message.contains("R51")));
    let call = ToolCall::new(AgentRef::profile("a"), "lookup", json!({}));
    let d = inbox.decide(CallView::of(&call));
    assert!(matches!(d.verdict, Verdict::Ask { .. }), "{d:?}");
    assert_eq!(
        d.approvals, 3,
        "the largest `approvals` of the matching asks"
    );
    let terminal = load_str(
        &config(r#"{"rules": [{"effect": "ask", "tool": "lookup", "approvals": 2}]}"#)
            .replace(r#""channel": "inbox""#, r#""channel": "interactive""#),
        Format::Json,
    )
    .unwrap();
    let warned: Vec<_> = terminal
        .warnings()
        .into_iter()
        .filter(|w| w.message.contains("R51"))
        .collect();
    assert_eq!(warned.len(), 1);
    assert_eq!(warned[0].path, "policy.rules[0].approvals");
}

fn send_all(policy: &str, inputs: &[Value]) -> Vec<bool> {
    let g = load_str(&config(policy), Format::Json).unwrap();
    let mut sim = Simulation::new(Vec::new());
    inputs
        .iter()
        .enumerate()
        .map(|(i, input)| {
            let call = ToolCall::new(AgentRef::profile("a"), "lookup", input.clone());
            sim.step(&g, CallView::of(&call), Some("s"), i as u64, None)
                .unwrap()
                .sent
        })
        .collect()
}

const ONE_PER_INPUT: &str =
    r#"{"rules": [], "quotas": [{"max": 1, "window_secs": 60, "per": ["input"]}]}"#;

fn reorder(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<_> = m.keys().cloned().collect();
            keys.reverse();
            let mut out = serde_json::Map::new();
            for k in keys {
                out.insert(k.clone(), reorder(&m[&k]));
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(reorder).collect()),
        other => other.clone(),
    }
}

fn input() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        any::<i32>().prop_map(|n| json!(n)),
        "[a-c]{0,3}".prop_map(|s| json!(s)),
        any::<bool>().prop_map(|b| json!(b)),
        Just(Value::Null),
    ];
    let value = leaf.prop_recursive(3, 12, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::btree_map("[a-d]", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    prop::collection::btree_map("[a-d]", value, 0..4)
        .prop_map(|m| Value::Object(m.into_iter().collect()))
}

proptest! {
    /// R50: two inputs are one group exactly when they are equal as JSON values — keys in
    /// any order, a whole number written as `7` or `7.0` — and any other input is another.
    #[test]
    fn r50_one_group_per_input_equal_as_json_values(a in input(), b in input()) {
        let same = send_all(ONE_PER_INPUT, &[a.clone(), reorder(&a)]);
        prop_assert_eq!(same, vec![true, false], "a reordered object is the same input");
        let other = send_all(ONE_PER_INPUT, &[a.clone(), b.clone()]);
        prop_assert_eq!(other[1], a != b, "{} vs {}", a, b);
    }
}

#[test]
fn r50_numbers_are_equal_by_value_and_strings_exactly() {
    let sent = send_all(
        ONE_PER_INPUT,
        &[
            json!({"id": 7}),
            json!({"id": 7.0}),
            json!({"id": "7"}),
            json!({"id": "7 "}),
            json!({"id": 70e-1}),
        ],
    );
    assert_eq!(sent, [true, false, true, true, false]);
}
