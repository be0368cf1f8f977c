//! One example per use (issue 36), each run here as it is built by `cargo test`: what it
//! prints is what the use promises.

use std::path::PathBuf;
use std::process::Command;

/// Runs the example `name` (built by `cargo test` next to this test) and returns its output.
fn run(name: &str) -> String {
    let me = std::env::current_exe().unwrap();
    let profile = me.parent().and_then(|deps| deps.parent()).unwrap();
    let binary: PathBuf = profile
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    let out = Command::new(&binary).output().unwrap_or_else(|e| {
        panic!("{} does not run: {e}", binary.display());
    });
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{name} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn issue36_minimal_runs_one_call_and_refuses_another() {
    let out = run("minimal");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], r#"{"id":7}"#, "{out}");
    assert!(
        lines[1].starts_with("The call was refused (not_allowed): `wipe`"),
        "{out}"
    );
}

#[test]
fn issue36_own_request_type_is_governed_through_map_request() {
    let out = run("own_request_type");
    assert!(
        out.contains(r#"lookup: done {"ran":"lookup","with":{"id":1}}"#),
        "{out}"
    );
    assert!(
        out.contains("delete: refused: The call was refused (not_allowed)"),
        "{out}"
    );
}

#[test]
fn issue36_per_agent_two_exposures_one_stack() {
    let out = run("per_agent");
    assert!(out.contains("support is shown: lookup, refund"), "{out}");
    assert!(out.contains("analyst is shown: lookup, report"), "{out}");
    assert!(
        out.contains("support calls refund: refund ran for support"),
        "{out}"
    );
    assert!(
        out.contains("analyst calls report: report ran for analyst"),
        "{out}"
    );
    assert!(
        out.contains("support calls report: The call was refused (not_allowed)"),
        "{out}"
    );
    assert!(
        out.contains("analyst calls refund: The call was refused (not_allowed)"),
        "{out}"
    );
}

#[test]
fn issue36_otel_spans_one_span_per_call_with_its_decision() {
    let out = run("otel_spans");
    for name in [
        "execute_tool lookup",
        "execute_tool refund",
        "execute_tool wipe",
    ] {
        assert!(out.contains(name), "{name}: {out}");
    }
    assert!(out.contains("toolgate.refusal.code=not_allowed"), "{out}");
    assert!(out.contains("alice"), "the approver is on the span: {out}");
    assert!(
        !out.contains("4111 1111 1111 1111"),
        "arguments are redacted: {out}"
    );
}
