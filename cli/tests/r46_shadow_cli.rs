//! R46 on the command line: `policy_shadow` in a configuration is checked like `policy`
//! (every error at its path) and written back by `config print`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use serde_json::Value;

mod common;

use common::toolgate;

const BASE: &str = r#""tools": [{"kind": "http", "name": "lookup"}],
    "agents": [{"name": "support", "allowed_tools": ["lookup"]}]"#;

#[test]
fn r46_check_reports_a_shadow_policy_that_does_not_load_at_its_path() {
    let d = tempfile::tempdir().unwrap();
    let bad = d.path().join("bad.json");
    std::fs::write(
        &bad,
        format!(r#"{{{BASE}, "policy_shadow": {{"rules": [{{"effect": "maybe"}}]}}}}"#),
    )
    .unwrap();
    let o = toolgate(&["check", bad.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["valid"], false);
    assert_eq!(
        v["errors"][0]["path"], "policy_shadow.rules[0].effect",
        "{v}"
    );
    // `decide` refuses to start on it (a load error), rather than deciding without it.
    let call = d.path().join("call.json");
    std::fs::write(
        &call,
        r#"{"kind": "http", "tool": "lookup", "agent": "support", "input": {}}"#,
    )
    .unwrap();
    let o = toolgate(&[
        "decide",
        bad.to_str().unwrap(),
        "--call",
        call.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(o.stdout.is_empty());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("policy_shadow.rules[0].effect"),
        "{o:?}"
    );
}

#[test]
fn r46_a_shadow_policy_is_never_enforced_by_decide_and_is_printed_back() {
    let d = tempfile::tempdir().unwrap();
    let good = d.path().join("good.json");
    std::fs::write(
        &good,
        format!(
            r#"{{{BASE}, "policy_shadow": {{"rules": [{{"effect": "deny", "tool": "lookup"}}]}}}}"#
        ),
    )
    .unwrap();
    let o = toolgate(&["check", good.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let call = d.path().join("call.json");
    std::fs::write(
        &call,
        r#"{"kind": "http", "tool": "lookup", "agent": "support", "input": {}}"#,
    )
    .unwrap();
    let o = toolgate(&[
        "decide",
        good.to_str().unwrap(),
        "--call",
        call.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["outcome"], "run", "the shadow is never enforced: {v}");
    let o = toolgate(&["config", "print", good.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["policy_shadow"]["rules"][0]["effect"], "deny", "{v}");
}
