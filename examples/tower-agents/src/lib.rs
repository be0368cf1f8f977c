//! toolgate's layer inside the tool stacks of two tower-based agent crates, as tested
//! examples (issue 36 item 3): [`tower_llm`] for `tower-llm`, [`entelix`] for entelix's
//! `ReActAgentBuilder`.
//!
//! Both crates run each tool as a `tower::Service` of their own request type. toolgate decides
//! `ToolCall`s, so each adapter maps at both ends (the quick start's "A stack whose request
//! type is not `ToolCall`"): outside toolgate's layer the framework's invocation becomes a
//! tool call of the agent's profile; inside it, the call that was decided — its input bound
//! to the permit (R35) — becomes the framework's invocation again. Exposure, rules, quotas,
//! the approval channel, audit and output scrubbing all apply as for any tool behind
//! toolgate; a refused or held call never reaches the tool, and the model reads why.
//!
//! The two crates live in a workspace of their own (`examples/tower-agents`): `tower-llm`
//! links SQLite through an older `rusqlite` than toolgate's inbox, and one build cannot hold
//! both. They need only the `toolgate` crate.
#![forbid(unsafe_code)]

pub mod entelix;
pub mod tower_llm;

use serde_json::{Value, json};
use toolgate::core::ToolResponse;

/// What the model reads for a call toolgate did not let through, or the tool's failure: the
/// refusal's or the held call's model-facing text, and toolgate's outcome and code.
pub fn model_view(response: &ToolResponse) -> Result<Value, String> {
    match response {
        ToolResponse::Completed(o) => Ok(o.content.clone()),
        ToolResponse::Failed(o) => Err(match &o.content {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        }),
        ToolResponse::Refused(_) | ToolResponse::Held(_) => Err(response.model_text()),
    }
}

/// The outcome of `response` as the tool result's JSON carries it.
pub fn outcome_json(response: &ToolResponse, text: &str) -> Value {
    let code = match response {
        ToolResponse::Refused(r) => Some(r.code.as_str()),
        _ => None,
    };
    json!({"error": text, "toolgate": {"outcome": response.outcome().as_str(), "code": code}})
}
