//! The response every layer returns.

use crate::decision::{CallOutcome, Refusal};

/// What a tool returned.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolOutput {
    /// The content the model reads.
    pub content: serde_json::Value,
    /// Structured content, when the tool returned some.
    pub structured: Option<serde_json::Value>,
}

impl ToolOutput {
    /// Output with just content.
    pub fn new(content: serde_json::Value) -> Self {
        Self {
            content,
            structured: None,
        }
    }
}

/// A call held in a durable inbox (R26): the agent pauses its turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldCall {
    /// The unguessable interaction id the gate issued.
    pub interaction_id: String,
    /// Every reason that asked.
    pub reasons: Vec<String>,
}

/// The outcome of a call, as the agent hands it to its model.
///
/// A refusal is a response, not a transport error: the inner service's error type is
/// never changed by a layer that only decides.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolResponse {
    /// The tool ran and succeeded.
    Completed(ToolOutput),
    /// The tool ran and reported a failure (a tool result, not a transport error).
    Failed(ToolOutput),
    /// The call was refused and never sent.
    Refused(Refusal),
    /// The call is held for a person's answer.
    Held(HeldCall),
}

impl ToolResponse {
    /// How the call ended: `completed`, `failed`, `refused` or `held`
    /// ([`CallOutcome::as_str`]).
    pub fn outcome(&self) -> CallOutcome {
        match self {
            ToolResponse::Completed(_) => CallOutcome::Completed,
            ToolResponse::Failed(_) => CallOutcome::Failed,
            ToolResponse::Refused(_) => CallOutcome::Refused,
            ToolResponse::Held(_) => CallOutcome::Held,
        }
    }

    /// The refusal, if the call was refused.
    pub fn refusal(&self) -> Option<&Refusal> {
        match self {
            ToolResponse::Refused(r) => Some(r),
            _ => None,
        }
    }

    /// Whether the call was refused.
    pub fn is_refused(&self) -> bool {
        matches!(self, ToolResponse::Refused(_))
    }

    /// A short text the agent can hand its model.
    pub fn model_text(&self) -> String {
        match self {
            ToolResponse::Completed(o) | ToolResponse::Failed(o) => match &o.content {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            },
            ToolResponse::Refused(r) => format!(
                "The call was refused ({}): {}",
                r.code,
                r.reasons.join("; ")
            ),
            ToolResponse::Held(h) => format!(
                "The call is waiting for a person's approval (interaction {}): {}",
                h.interaction_id,
                h.reasons.join("; ")
            ),
        }
    }
}
