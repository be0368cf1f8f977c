//! Tool spans (issue 36): the composite with `toolgate-otel`'s `execute_tool` span outermost,
//! exported to an in-memory exporter and printed — one span per call, with the decision on
//! it: a call that runs, one a person approves, and one refused.
//!
//! ```sh
//! cargo run --example otel_spans
//! ```

use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use serde_json::json;
use toolgate::approval::{ApprovalOutcome, FnChannel};
use toolgate::core::{AgentRef, ChannelKind, ToolCall, ToolOutput, ToolResponse};
use toolgate::engine::config::{Format, load_str};
use toolgate::{GovernanceHandle, ToolgateLayer};
use toolgate_otel::{ToolSpanLayer, ToolgateLayerExt};
use tower::{ServiceBuilder, ServiceExt, service_fn};

const CONFIG: &str = r#"{
    "approval": {"channel": "interactive"},
    "redaction": {"keys": ["card"]},
    "tools": [{"kind": "http", "name": "lookup", "read_only": true},
              {"kind": "http", "name": "refund"}, {"kind": "http", "name": "wipe"}],
    "agents": [{"name": "support", "allowed_tools": ["lookup", "refund"]}],
    "policy": {"rules": [{"effect": "ask", "tool": "refund", "reason": "refunds need a person"}]}
}"#;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let person = FnChannel::new(ChannelKind::Interactive, |_question| {
        ApprovalOutcome::Approved {
            approver: "alice".into(),
        }
    });
    let handle = GovernanceHandle::new(load_str(CONFIG, Format::Json)?);
    // The span outermost, redacting arguments and results with the stack's one redactor.
    let governed = ToolgateLayer::builder(handle)
        .channel(person)
        .build()?
        .spans(ToolSpanLayer::new(&provider).with_content(true));
    let stack =
        ServiceBuilder::new()
            .layer(governed)
            .service(service_fn(|_call: ToolCall| async {
                Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::new(json!(
                    "ok"
                ))))
            }));

    let support = AgentRef::profile("support");
    for (tool, args) in [
        ("lookup", json!({"id": 7})),
        ("refund", json!({"order": 7, "card": "4111 1111 1111 1111"})),
        ("wipe", json!({})),
    ] {
        let call = ToolCall::new(support.clone(), tool, args);
        stack.clone().oneshot(call).await?;
    }

    provider.force_flush()?;
    for span in exporter.get_finished_spans()? {
        println!("{} ({:?})", span.name, span.status);
        let mut attributes: Vec<_> = span
            .attributes
            .iter()
            .filter(|kv| {
                let key = kv.key.as_str();
                key.starts_with("toolgate.") || key.starts_with("gen_ai.tool.call.")
            })
            .map(|kv| format!("{}={}", kv.key, kv.value))
            .collect();
        attributes.sort();
        for attribute in attributes {
            println!("    {attribute}");
        }
    }
    provider.shutdown()?;
    Ok(())
}
