//! `decide_call` keeps where a decision was made, and `with_extra_asks` joins a hook's ask
//! (R32) into it exactly as deciding again with that ask would (R17), so the approval gate
//! never decides a call twice.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use serde_json::json;
use toolgate_core::{AgentRef, Ask, AskSource, RunContext, RunMode, ToolRef};
use toolgate_engine::config::{Format, load_str};
use toolgate_engine::{CallInput, CallView, Governance};

fn gov(channel: &str) -> Governance {
    load_str(
        &format!(
            r#"{{"approval": {{"channel": "{channel}"}}, "air_gapped": true,
                "tools": [{{"kind": "http", "name": "lookup"}},
                          {{"kind": "http", "name": "refund", "approval": "require_approval"}},
                          {{"kind": "http", "name": "fetch", "network": "egress"}},
                          {{"toolset": "host", "name": "tool", "governed": false, "ungoverned_reason": "the host's own"}}],
                "agents": [{{"name": "dev", "allowed_tools": ["lookup", "refund", "fetch", "host__tool"]}},
                           {{"name": "tool", "as_tool": true, "allowed_tools": ["lookup", "refund"]}}],
                "policy": {{"rules": [{{"effect": "deny", "tool": "lookup", "when": {{"n": {{"gt": 10}}}}}},
                                      {{"effect": "ask", "tool": "lookup", "when": {{"n": {{"gt": 5}}}}}}]}}}}"#
        ),
        Format::Json,
    )
    .unwrap()
}

#[test]
fn r17_r32_a_hooks_ask_joined_into_a_pinned_decision_equals_deciding_again() {
    let hook = || vec![Ask::new(AskSource::Hook, String::from("the hook asks"))];
    let mut compared = 0;
    for channel in ["none", "interactive", "inbox"] {
        let g = gov(channel);
        for agent in ["dev", "tool", "nobody"] {
            for tool in ["lookup", "refund", "fetch", "host__tool", "nope"] {
                for input in [json!({}), json!({"n": 7}), json!({"n": 11}), json!([1])] {
                    for mode in [
                        RunMode::UseAgentPolicy,
                        RunMode::AutoApproveRequired,
                        RunMode::AutoRejectRequired,
                    ] {
                        for background in [false, true] {
                            let (t, a) = (ToolRef::Name(tool.into()), AgentRef::profile(agent));
                            let run = RunContext { mode, background };
                            let view = CallView {
                                tool: &t,
                                agent: &a,
                                input: CallInput::Value(&input),
                                run,
                            };
                            let decided = g.decide_call(view);
                            assert_eq!(decided.decision, g.decide(view));
                            let joined = g.with_extra_asks(&decided, run, hook());
                            let again = g.decide_with(view, hook());
                            assert_eq!(joined, again, "{channel} {agent} {tool} {input} {mode:?}");
                            if let Some(e) = g.decided_entry(&decided) {
                                assert!(e.name.eq_ignore_ascii_case(tool));
                            }
                            if let Some(p) = g.decided_agent(&decided) {
                                assert_eq!(p.name, agent);
                            }
                            compared += 1;
                        }
                    }
                }
            }
        }
    }
    assert_eq!(compared, 3 * 3 * 5 * 4 * 3 * 2);
}
