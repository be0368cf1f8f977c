//! A tool declaration's execution target (issue 24, seed 000): read, printed back, and
//! refused with the field's path when it is wrong.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use toolgate_core::TargetSource;
use toolgate_engine::config::{Format, load_str};

fn errors(target: &str) -> Vec<String> {
    let text =
        format!(r#"{{"tools": [{{"toolset": "shell", "name": "run", "target": {target}}}]}}"#);
    match load_str(&text, Format::Json) {
        Ok(_) => Vec::new(),
        Err(e) => e.errors.iter().map(|e| e.to_string()).collect(),
    }
}

#[test]
fn issue24_a_declarations_target_is_read_and_printed_back() {
    let text = r#"{"tools": [{"toolset": "shell", "name": "run",
        "target": {"host": "extension", "working_directory": "input.cwd", "sandbox": "input.opts.box"}}]}"#;
    let gov = load_str(text, Format::Json).unwrap();
    let entry = gov.catalog().get("shell__run").unwrap();
    let spec = entry.records[0].decl.target.clone().unwrap();
    assert_eq!(spec.host, Some(TargetSource::Extension));
    assert_eq!(
        spec.sandbox,
        Some(TargetSource::Input(vec!["opts".into(), "box".into()]))
    );
    let printed = toolgate_engine::config::effective(&gov);
    let again = load_str(&printed.to_string(), Format::Json).unwrap();
    assert_eq!(
        again.catalog().get("shell__run").unwrap().records[0]
            .decl
            .target,
        Some(spec)
    );
}

#[test]
fn issue24_a_wrong_target_names_its_field() {
    assert_eq!(
        errors(r#"{"host": "cwd"}"#),
        [
            "tools[0].target.host: `cwd` is neither `input.<field>` (a field of the call's input, by dotted path) nor `extension` (the host's value on the call)"
        ]
    );
    assert_eq!(
        errors(r#"{"working_directory": "input.a..b", "shell": 1}"#).len(),
        2
    );
    assert!(errors(r#"{}"#)[0].starts_with("tools[0].target: "));
    assert!(errors(r#""input.cwd""#)[0].starts_with("tools[0].target: expected an object"));
    assert!(errors(r#"{"sandbox": "input.box"}"#).is_empty());
}
