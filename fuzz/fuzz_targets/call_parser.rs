//! Arbitrary bytes as a CALL file (SPEC §7, §8), through the `toolgate decide` command's own
//! parser (`cli/src/call.rs`, compiled into this target as a module): parsing never panics,
//! and a call that parses keeps its input as JSON object text and is decided by a small fixed
//! configuration without panicking, whatever its input text holds (R36: depth is measured
//! before any value is built).
#![no_main]

// The CLI is a binary crate; its CALL parser is included as a module so that the fuzzer
// exercises exactly the code `toolgate decide --call` runs.
#[path = "../../cli/src/call.rs"]
#[allow(dead_code, unreachable_pub)]
mod call;

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use toolgate_engine::config::{self, Format};
use toolgate_engine::{CallInput, CallView, Governance};

/// A configuration with a tool of each kind, a posture, a tenant policy with a `when`, an
/// inbox channel and a subagent, so that parsed calls reach every step of `decide`.
const CONFIG: &str = r#"{
  "approval": {"channel": "inbox"},
  "behavior_gating": {"require_approval_for_non_read_only": true,
    "exemptions": [{"tool": "list_issues", "server": "github", "reason": "reads"}]},
  "servers": {"github": {"trust_tool_annotations": true}},
  "tools": [
    {"toolset": "coding", "name": "write_file", "approval": "require_approval"},
    {"server": "github", "name": "list_issues", "annotations": {"readOnlyHint": true}},
    {"server": "github", "name": "create_issue"},
    {"kind": "http", "name": "refund_order", "network": "egress"}
  ],
  "agents": [
    {"name": "support", "allowed_tools": ["coding__write_file", "github__list_issues", "github__create_issue", "refund_order"]},
    {"name": "helper", "parent": "support", "as_tool": true, "allowed_tools": ["github__list_issues"]}
  ],
  "policy": {"rules": [
    {"effect": "deny", "tool": "refund_*", "when": {"amount": {"gt": 100}}, "reason": "big refunds"},
    {"effect": "ask", "server": "git*", "agent": "sub-*"}
  ]},
  "limits": {"max_input_bytes": 4096, "max_input_depth": 16}
}"#;

fn governance() -> &'static Governance {
    static GOV: OnceLock<Governance> = OnceLock::new();
    GOV.get_or_init(|| match config::load_str(CONFIG, Format::Json) {
        Ok(gov) => gov,
        Err(e) => panic!("the fuzz target's own configuration does not load: {e:?}"),
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(call) = call::parse(text) else {
        return;
    };
    assert!(
        call.input.trim_start().starts_with('{'),
        "a parsed call's input is not object text: {:?}",
        call.input
    );
    let _ = governance().decide(CallView {
        tool: &call.tool,
        agent: &call.agent,
        input: CallInput::Text(&call.input),
        run: call.run,
    });
});
