//! The model-facing projection: the tools one agent's model is shown, with their schemas.

use serde_json::Value;
use toolgate_engine::{Governance, UnknownAgent};

/// One tool as the model is shown it: the qualified name, the description and the input
/// schema, and whether calls to it wait for approval.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelTool {
    /// The qualified (wire) name the model calls (`server__tool`).
    pub name: String,
    /// The description.
    pub description: Option<String>,
    /// The input schema, as the server advertised it.
    pub input_schema: Option<Value>,
    /// Wrapped for approval (R10, R12).
    pub wrapped: bool,
}

/// The tools one agent's model is shown (R6–R13), with their schemas: the same exposed
/// set as [`Governance::expose`], so nothing omitted there can be shown here.
pub fn model_tools(governance: &Governance, agent: &str) -> Result<Vec<ModelTool>, UnknownAgent> {
    let exposure = governance.expose(agent)?;
    Ok(exposure
        .tools
        .into_iter()
        .map(|t| {
            let input_schema = governance
                .catalog()
                .get(&t.name)
                .and_then(|e| e.records.iter().find_map(|r| r.decl.input_schema.clone()));
            ModelTool {
                name: t.name.to_string(),
                description: t.description.as_deref().map(str::to_owned),
                input_schema,
                wrapped: t.wrapped,
            }
        })
        .collect())
}
