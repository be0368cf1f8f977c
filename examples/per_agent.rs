//! Two agents, two exposures, one stack (issue 36): each agent is shown only its own tools
//! (R6–R13) and every call is decided for the agent that makes it, by the same governed
//! stack.
//!
//! ```sh
//! cargo run --example per_agent
//! ```

use serde_json::json;
use toolgate::core::{AgentRef, ToolCall, ToolOutput, ToolResponse};
use toolgate::engine::config::{Format, load_str};
use toolgate::{GovernanceHandle, ToolgateLayer};
use tower::{ServiceBuilder, ServiceExt, service_fn};

const CONFIG: &str = r#"{
    "tools": [
        {"kind": "http", "name": "lookup", "read_only": true, "description": "Look a customer up"},
        {"kind": "http", "name": "refund", "description": "Refund an order"},
        {"kind": "http", "name": "report", "read_only": true, "description": "Weekly figures"}
    ],
    "agents": [
        {"name": "support", "allowed_tools": ["lookup", "refund"]},
        {"name": "analyst", "allowed_tools": ["lookup", "report"]}
    ]
}"#;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let handle = GovernanceHandle::new(load_str(CONFIG, Format::Json)?);
    let governed = ToolgateLayer::builder(handle.clone()).build()?;
    let stack =
        ServiceBuilder::new()
            .layer(governed)
            .service(service_fn(|call: ToolCall| async move {
                let ran = format!(
                    "{} ran for {}",
                    call.tool.display_name(),
                    call.agent.profile
                );
                Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::new(json!(
                    ran
                ))))
            }));

    // What each agent's model is shown: its own exposure, from the same snapshot.
    let governance = handle.load();
    for agent in ["support", "analyst"] {
        let exposure = governance.exposure(agent)?;
        let shown: Vec<&str> = exposure.tools.iter().map(|t| &*t.name).collect();
        println!("{agent} is shown: {}", shown.join(", "));
    }

    // The same calls through the one stack, decided per agent.
    for agent in ["support", "analyst"] {
        for tool in ["refund", "report"] {
            let call = ToolCall::new(AgentRef::profile(agent), tool, json!({"order": 7}));
            let response = stack.clone().oneshot(call).await?;
            println!("{agent} calls {tool}: {}", response.model_text());
        }
    }
    Ok(())
}
