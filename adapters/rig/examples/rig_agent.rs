//! A rig agent governed by toolgate (issue 36): a real `rig_agent::Agent` with two governed
//! tools and toolgate's hook, driven by a scripted model (the one stand-in: it returns the
//! tool calls a model would, shared with this crate's tests). It prints what the model was
//! shown each turn and every tool result it read — a lookup scrubbed, a refund refused by the
//! tenant policy, a smaller refund run.
//!
//! ```sh
//! cargo run -p toolgate-rig --example rig_agent
//! ```
//!
//! It is an example of `toolgate-rig` rather than of the workspace's examples crate: rig-core
//! turns on serde_json's `preserve_order` for every crate built with it (see the crate's
//! README), which must not leak into the other crates' builds.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "an example: a failed step ends it with why"
)]

#[path = "../tests/support/scripted.rs"]
mod scripted;

use rig_agent::AgentBuilder;
use rig_core::completion::Message;
use rig_core::message::{ToolResultContent, UserContent};
use rig_core::tool::{PortableTool, ToolExecutionError};
use serde_json::{Value, json};
use toolgate::core::AgentRef;
use toolgate::engine::config::{Format, load_str};
use toolgate::{GovernanceHandle, ToolgateLayer};
use toolgate_rig::{AgentGate, HostedStack};

use scripted::{Scripted, call, say};

const CONFIG: &str = r#"{
    "redaction": {"keys": ["ssn"], "scrub_output": true},
    "tools": [{"kind": "http", "name": "lookup"}, {"kind": "http", "name": "refund"}],
    "agents": [{"name": "support", "allowed_tools": ["lookup", "refund"]}],
    "policy": {"rules": [{"effect": "deny", "tool": "refund", "when": {"amount": {"gt": 100}},
                          "reason": "refunds over 100 need finance"}]}
}"#;

/// Looks a customer up.
struct Lookup;

impl PortableTool for Lookup {
    const NAME: &'static str = "lookup";
    type Args = Value;
    type Output = Value;
    type Error = ToolExecutionError;

    fn description(&self) -> String {
        "Look a customer up".into()
    }

    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"id": {"type": "integer"}}})
    }

    async fn call(&self, args: Value) -> Result<Value, ToolExecutionError> {
        Ok(json!({"id": args["id"], "name": "Ada", "ssn": "078-05-1120"}))
    }
}

/// Refunds an order.
struct Refund;

impl PortableTool for Refund {
    const NAME: &'static str = "refund";
    type Args = Value;
    type Output = String;
    type Error = ToolExecutionError;

    fn description(&self) -> String {
        "Refund an order".into()
    }

    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"order": {"type": "integer"}, "amount": {"type": "integer"}}})
    }

    async fn call(&self, args: Value) -> Result<String, ToolExecutionError> {
        Ok(format!(
            "refunded {} on order {}",
            args["amount"], args["order"]
        ))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let handle = GovernanceHandle::new(load_str(CONFIG, Format::Json)?);
    let stack = HostedStack::new(ToolgateLayer::builder(handle).build()?);
    let gate = AgentGate::new(stack, AgentRef::profile("support"));

    let (model, script) = Scripted::model([
        vec![
            call("c1", "lookup", json!({"id": 7})),
            call("c2", "refund", json!({"order": 7, "amount": 500})),
        ],
        vec![call("c3", "refund", json!({"order": 7, "amount": 50}))],
        vec![say("Refunded 50; a larger refund needs finance.")],
    ]);
    let agent = AgentBuilder::new(model)
        .tool(gate.tool(Lookup))
        .tool(gate.tool(Refund))
        .add_hook(gate.hook())
        .build();
    let response = agent.prompt("refund order 7").max_turns(4).await?;

    for (turn, shown) in script.advertised().iter().enumerate() {
        println!("turn {}: the model is shown {}", turn + 1, shown.join(", "));
    }
    for result in tool_results(
        &script
            .requests()
            .last()
            .map(|r| r.chat_history.clone())
            .unwrap_or_default(),
    ) {
        println!("the model read: {result}");
    }
    println!("the agent answered: {}", response.output());
    Ok(())
}

/// The text of every tool result in `history`.
fn tool_results(history: &[Message]) -> Vec<String> {
    let mut out = Vec::new();
    for message in history {
        let Message::User { content } = message else {
            continue;
        };
        for item in content.iter() {
            let UserContent::ToolResult(result) = item else {
                continue;
            };
            for c in result.content.iter() {
                out.push(match c {
                    ToolResultContent::Text(t) => t.text.clone(),
                    ToolResultContent::Json { value } => value.to_string(),
                    other => format!("{other:?}"),
                });
            }
        }
    }
    out
}
