//! The rig agent example (issue 36), run as `cargo test` builds it: the model is shown the
//! agent's tools, reads a refusal and scrubbed results.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::process::Command;

#[test]
fn issue36_rig_agent_example_reads_refusals_and_scrubbed_results() {
    let me = std::env::current_exe().unwrap();
    let profile = me.parent().and_then(|deps| deps.parent()).unwrap();
    let binary = profile
        .join("examples")
        .join(format!("rig_agent{}", std::env::consts::EXE_SUFFIX));
    let out = Command::new(&binary)
        .output()
        .unwrap_or_else(|e| panic!("{} does not run: {e}", binary.display()));
    let out_text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{out_text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for expected in [
        "turn 1: the model is shown lookup, refund",
        "refunds over 100 need finance",
        "the model read: refunded 50 on order 7",
        "the agent answered: Refunded 50; a larger refund needs finance.",
    ] {
        assert!(out_text.contains(expected), "{expected}:\n{out_text}");
    }
    assert!(
        out_text.contains("Ada") && !out_text.contains("078-05-1120"),
        "{out_text}"
    );
}
