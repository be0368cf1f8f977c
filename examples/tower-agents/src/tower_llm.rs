//! `tower-llm`: a tool's service runs only through toolgate's layer.
//!
//! [`governed_tool`] takes a `tower_llm::ToolDef` and gives back one whose service is the
//! toolgate stack around the original service, for one agent profile. Register the governed
//! tools with `Agent::builder(...).tool(...)`: the agent's router sends each invocation through
//! toolgate, and a refused or held call comes back to the model as a tool result
//! `{"error": "...", "toolgate": {"outcome": "refused", "code": "..."}}` (never a run error, so
//! the model reads why and the run goes on).
//!
//! ```no_run
//! # fn f(lookup: tower_llm::ToolDef) -> Result<(), Box<dyn std::error::Error>> {
//! use toolgate::core::AgentRef;
//! use toolgate::{GovernanceHandle, ToolgateLayer};
//! use toolgate::engine::config::{Format, load_str};
//!
//! let handle = GovernanceHandle::new(load_str(
//!     r#"{"tools": [{"kind": "http", "name": "lookup"}],
//!        "agents": [{"name": "support", "allowed_tools": ["lookup"]}]}"#,
//!     Format::Json,
//! )?);
//! let layer = ToolgateLayer::builder(handle).build()?;
//! let lookup = toolgate_tower_agents::tower_llm::governed_tool(
//!     lookup,
//!     &layer,
//!     AgentRef::profile("support"),
//! );
//! # let _ = lookup; Ok(()) }
//! ```

use std::convert::Infallible;

use serde_json::json;
use toolgate::ToolgateLayer;
use toolgate::core::{AgentRef, ToolCall, ToolResponse};
use tower::util::BoxCloneService;
use tower::{BoxError, Layer, ServiceExt, service_fn};
use tower_llm::{ToolDef, ToolInvocation, ToolOutput};

/// `tool`, its service wrapped in `layer` (a built toolgate layer) for calls of `agent`.
pub fn governed_tool(tool: ToolDef, layer: &ToolgateLayer, agent: AgentRef) -> ToolDef {
    let ToolDef {
        name,
        description,
        parameters_schema,
        service,
    } = tool;
    // Inside the layer: the call that was decided becomes the tool's invocation again.
    let inner = service_fn(move |call: ToolCall| {
        let service = service.clone();
        async move {
            let invocation = ToolInvocation {
                id: call.id.to_string(),
                name: name.to_owned(),
                arguments: call.input,
            };
            let response = match service.oneshot(invocation).await {
                Ok(out) => ToolResponse::Completed(toolgate::core::ToolOutput::new(out.result)),
                Err(e) => {
                    ToolResponse::Failed(toolgate::core::ToolOutput::new(json!(e.to_string())))
                }
            };
            Ok::<_, Infallible>(response)
        }
    });
    let stack = BoxCloneService::new(layer.layer(inner));
    // Outside it: the router's invocation becomes a tool call of `agent`.
    let outer = service_fn(move |invocation: ToolInvocation| {
        let stack = stack.clone();
        let agent = agent.clone();
        async move {
            let call = ToolCall::new(agent, invocation.name.clone(), invocation.arguments);
            let response = stack.oneshot(call).await?;
            let result = match crate::model_view(&response) {
                Ok(content) => content,
                Err(text) => crate::outcome_json(&response, &text),
            };
            Ok::<_, BoxError>(ToolOutput {
                id: invocation.id,
                result,
            })
        }
    });
    ToolDef {
        name,
        description,
        parameters_schema,
        service: BoxCloneService::new(outer),
    }
}
