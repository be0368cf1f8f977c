//! Arbitrary bytes as a GRANTS file (SPEC §7, R45): parsing never panics, and every grant that
//! parses matches calls without panicking and is never live once revoked, spent or expired.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::json;
use toolgate_core::ToolKind;
use toolgate_engine::grant::parse_grants;
use toolgate_core::number::NumberLiterals;
use toolgate_engine::policy::Subject;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(grants) = parse_grants(text) else {
        return;
    };
    let inputs = [json!({}), json!({"amount": 100, "note": "x"})];
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
            agent: "support",
        },
    ];
    for g in &grants {
        for s in &subjects {
            for input in &inputs {
                let _ = g.matches(s, Some("s-1"), input, NumberLiterals::none());
                let _ = g.matches(s, None, input, NumberLiterals::none());
            }
        }
        let at = g.expires_at();
        assert!(!g.is_live(at, 0, false), "live at its expiry");
        assert!(!g.is_live(at.saturating_sub(1), 0, true), "live once revoked");
        if let Some(max) = g.max_calls() {
            assert!(!g.is_live(at.saturating_sub(1), max, false), "live once spent");
        }
    }
});
