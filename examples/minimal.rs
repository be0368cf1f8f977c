use serde_json::json;
use toolgate::core::{AgentRef, ToolCall, ToolOutput, ToolResponse};
use toolgate::engine::config::{Format, load_str};
use toolgate::{GovernanceHandle, ToolgateLayer};
use tower::{ServiceBuilder, ServiceExt, service_fn};

const CONFIG: &str = r#"{"tools": [{"kind": "http", "name": "lookup"}, {"kind": "http", "name": "wipe"}],
                         "agents": [{"name": "support", "allowed_tools": ["lookup"]}]}"#;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let tool = service_fn(|call: ToolCall| async move {
        Ok::<_, std::io::Error>(ToolResponse::Completed(ToolOutput::new(call.input)))
    });
    let governed = ToolgateLayer::builder(GovernanceHandle::new(load_str(CONFIG, Format::Json)?));
    let stack = ServiceBuilder::new().layer(governed.build()?).service(tool);
    let support = AgentRef::profile("support");
    let lookup = ToolCall::new(support.clone(), "lookup", json!({"id": 7}));
    println!("{}", stack.clone().oneshot(lookup).await?.model_text()); // {"id":7}
    let wipe = ToolCall::new(support, "wipe", json!({}));
    println!("{}", stack.oneshot(wipe).await?.model_text()); // The call was refused (not_allowed): …
    Ok(())
}
