//! An approval with an edited input (approval-page.md, "Approve with edits"): the call is
//! sent with the input a person changed it to, and what it was before travels with it, for
//! the audit record.

/// Carried in a resumed call's [`Extensions`](crate::Extensions) when the person who
/// approved it changed its input first: the call's `input` is the edited one (decided
/// again in full, R38, and bound to its own hash, R35); this keeps the input the agent
/// sent and who edited it. The audit layer records both inputs.
///
/// ```
/// use serde_json::json;
/// use toolgate_core::{AgentRef, InputEdit, ToolCall};
/// let mut call = ToolCall::new(AgentRef::profile("support"), "refund", json!({"amount": 50}));
/// call.extensions.insert(InputEdit {
///     original_input: json!({"amount": 500}),
///     original_input_hash: String::from("sha256:…"),
///     edited_by: String::from("alice"),
/// });
/// assert_eq!(call.extensions.get::<InputEdit>().unwrap().edited_by, "alice");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct InputEdit {
    /// The input as the agent sent it and the call was held with.
    pub original_input: serde_json::Value,
    /// Its RFC 8785 hash (`sha256:…`).
    pub original_input_hash: String,
    /// Who changed it (the approver).
    pub edited_by: String,
}
