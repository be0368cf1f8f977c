//! rig's tool output and results as toolgate's, and back.

use rig_core::tool::{ToolExecutionError, ToolOutput as RigOutput, ToolResult};
use serde_json::Value;
use toolgate::core::{ToolOutput, ToolResponse};

/// How a rig output was shaped, so the scrubbed content goes back the same way.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Shape {
    /// One text block: the content is a JSON string.
    Text,
    /// One JSON block: the content is the value.
    Json,
    /// Several or rich blocks: the content is the block list.
    Blocks,
}

/// A rig output as toolgate content, and its shape.
pub(crate) fn content_of(output: &RigOutput) -> (Value, Shape) {
    if let Some(text) = output.as_text() {
        return (Value::String(text.to_owned()), Shape::Text);
    }
    if let Some(json) = output.as_json() {
        return (json.clone(), Shape::Json);
    }
    match serde_json::to_value(output) {
        Ok(blocks) => (blocks, Shape::Blocks),
        Err(_) => (Value::String(output.render()), Shape::Text),
    }
}

/// toolgate content as a rig output of `shape`.
pub(crate) fn output_of(content: Value, shape: Shape) -> RigOutput {
    match (shape, content) {
        (Shape::Text, Value::String(text)) => RigOutput::text(text),
        (Shape::Blocks, blocks) => match serde_json::from_value::<RigOutput>(blocks.clone()) {
            Ok(output) => output,
            Err(_) => RigOutput::json(blocks),
        },
        (_, other) => RigOutput::json(other),
    }
}

/// A rig tool result as the response toolgate records.
pub(crate) fn response_of(result: &ToolResult) -> (ToolResponse, Shape) {
    let (content, shape) = content_of(result.output());
    let output = ToolOutput::new(content);
    if result.is_success() {
        (ToolResponse::Completed(output), shape)
    } else {
        (ToolResponse::Failed(output), shape)
    }
}

/// What the model reads for a call toolgate answered without running it (refused, held) or
/// whose result it withheld.
pub(crate) fn refusal(response: &ToolResponse) -> ToolExecutionError {
    ToolExecutionError::refused(response.model_text())
}
