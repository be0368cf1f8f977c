//! Arbitrary bytes as a stored POLICY (SPEC §7, R22): parsing never panics, and a policy
//! that parses decides a few calls identically through its index and the naive loop, and
//! reads back from its own `to_json`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::json;
use toolgate_core::ToolKind;
use toolgate_engine::policy::{Limits, Policy, Subject};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(policy) = Policy::from_json_str(text, &Limits::default()) else {
        return;
    };
    let inputs = [
        json!({}),
        json!({"amount": 100, "customer": {"tier": "free"}, "note": "urgent", "a": {"b": null}}),
    ];
    let subjects = [
        Subject {
            kind: ToolKind::Mcp,
            tool: "create_issue",
            server: Some("GitHub"),
            agent: "support",
        },
        Subject {
            kind: ToolKind::Http,
            tool: "refund_order",
            server: None,
            agent: "sub-1",
        },
        Subject {
            kind: ToolKind::Local,
            tool: "write_file",
            server: None,
            agent: "Support",
        },
    ];
    for subject in &subjects {
        for input in &inputs {
            let indexed = policy.evaluate(subject, input);
            let naive = policy.evaluate_naive(subject, input);
            assert_eq!(
                indexed, naive,
                "index and naive loop disagree for {subject:?} {input}"
            );
        }
    }
    let again = Policy::from_json(&policy.to_json(), &Limits::default());
    assert!(
        again.is_ok(),
        "a valid policy's own JSON does not read back: {again:?}"
    );
});
