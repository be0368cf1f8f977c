//! The composition chapter's worked example (`layers/toolgate/docs/composition.md`), run
//! through the binary: `check` and `simulate` on `examples/session-labels.json` (SPEC R49–R51).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use serde_json::Value;

mod common;

use common::{repo, toolgate};

fn run_json(args: &[&str]) -> Value {
    let o = toolgate(args);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn r49_r50_r51_the_chapters_example_checks_clean_and_simulates_as_its_table_says() {
    let root = repo();
    let config = root.join("examples/session-labels.json");
    let calls = root.join("examples/session-labels-calls.json");
    let (config, calls) = (config.to_str().unwrap(), calls.to_str().unwrap());
    let checked = run_json(&["check", config, "--json"]);
    assert_eq!(checked["valid"], true, "{checked}");
    assert_eq!(checked["warnings"], serde_json::json!([]), "{checked}");
    let sim = run_json(&["simulate", config, "--calls", calls, "--json"]);
    let rows: Vec<(String, Option<String>, bool)> = sim["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["outcome"].as_str().unwrap().to_owned(),
                r["refusal"].as_str().map(str::to_owned),
                r["sent"].as_bool().unwrap(),
            )
        })
        .collect();
    let want = |o: &str, r: Option<&str>, s: bool| (o.to_owned(), r.map(str::to_owned), s);
    assert_eq!(
        rows,
        [
            want("run", None, true),
            want("run", None, true),
            want("run", None, true),
            want("ask", None, false),
            want("run", None, true),
            want("run", None, true),
            want("run", None, true),
            want("run", None, true),
            want("refused", Some("rate_limited"), false),
            want("ask", None, true),
        ]
    );
    let reasons = |i: usize| sim["results"][i]["reasons"].to_string();
    assert!(
        reasons(3).contains("private data and untrusted content"),
        "{}",
        reasons(3)
    );
    assert!(reasons(8).contains("looping"), "{}", reasons(8));
    assert!(reasons(9).contains("two people"), "{}", reasons(9));
    // A check of the same file with a rule naming a label nothing carries, and four eyes
    // routed to a terminal, warns about both.
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(config)
        .unwrap()
        .replace(r#""payment"], "approvals""#, r#""paymnet"], "approvals""#)
        .replace(r#""channel": "inbox""#, r#""channel": "interactive""#);
    let bad = dir.path().join("c.json");
    std::fs::write(&bad, text).unwrap();
    let checked = run_json(&["check", bad.to_str().unwrap(), "--json"]);
    let warnings = checked["warnings"].to_string();
    assert!(warnings.contains("`paymnet`"), "{warnings}");
    assert!(warnings.contains("approvals"), "{warnings}");
}
