//! A stack of your own request type, governed (issue 36): a `Service<MyRequest>` with
//! toolgate's layer in it through tower's `map_request` / `map_response` at both ends.
//! Outside the layer your requests become tool calls and toolgate's responses yours; inside
//! it, a governed call becomes your request again — the one that was decided.
//!
//! ```sh
//! cargo run --example own_request_type
//! ```

use std::convert::Infallible;

use serde_json::{Value, json};
use toolgate::core::{AgentRef, ToolCall, ToolOutput, ToolResponse};
use toolgate::engine::config::{Format, load_str};
use toolgate::{GovernanceHandle, ToolgateLayer};
use tower::{ServiceBuilder, ServiceExt, service_fn};

/// Your request.
struct MyRequest {
    agent: String,
    tool: String,
    args: Value,
}

/// Your response.
#[derive(Debug)]
enum MyResponse {
    Done(Value),
    Refused(String),
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let handle = GovernanceHandle::new(load_str(
        r#"{"tools": [{"kind": "http", "name": "lookup"}, {"kind": "http", "name": "delete"}],
            "agents": [{"name": "support", "allowed_tools": ["lookup"]}]}"#,
        Format::Json,
    )?);
    // The service you already have.
    let my_service = service_fn(|req: MyRequest| async move {
        Ok::<_, Infallible>(MyResponse::Done(json!({"ran": req.tool, "with": req.args})))
    });
    let stack = ServiceBuilder::new()
        // Outside: your request becomes a tool call, toolgate's answer your response.
        .map_request(|req: MyRequest| {
            ToolCall::new(AgentRef::profile(req.agent), req.tool, req.args)
        })
        .map_response(|r: ToolResponse| match r {
            ToolResponse::Completed(out) => MyResponse::Done(out.content),
            other => MyResponse::Refused(other.model_text()),
        })
        .layer(ToolgateLayer::builder(handle).build()?)
        // Inside: the governed call becomes your request again.
        .map_request(|call: ToolCall| MyRequest {
            agent: call.agent.profile,
            tool: call.tool.display_name(),
            args: call.input,
        })
        .map_response(|r: MyResponse| match r {
            MyResponse::Done(v) => ToolResponse::Completed(ToolOutput::new(v)),
            MyResponse::Refused(why) => ToolResponse::Failed(ToolOutput::new(json!(why))),
        })
        .service(my_service);

    for (tool, args) in [("lookup", json!({"id": 1})), ("delete", json!({"id": 1}))] {
        let request = MyRequest {
            agent: "support".into(),
            tool: tool.into(),
            args,
        };
        match stack.clone().oneshot(request).await? {
            MyResponse::Done(v) => println!("{tool}: done {v}"),
            MyResponse::Refused(why) => println!("{tool}: refused: {why}"),
        }
    }
    Ok(())
}
