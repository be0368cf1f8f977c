//! The governed tool: a rig tool that runs only what the stack passed.

use rig_core::tool::{IntoToolOutput, Tool, ToolContext, ToolExecutionError, ToolOutput};
use serde_json::{Value, json};
use toolgate::core::{ToolOutput as GateOutput, ToolResponse};
use toolgate::hosted::{Clearance, Cleared};

use crate::gate::AgentGate;
use crate::output::{Shape, content_of, output_of, refusal};

/// A rig [`Tool`] whose every call goes through the agent's toolgate stack before it runs.
///
/// - With the [`ToolgateHook`](crate::ToolgateHook), the call was decided (and asked, and
///   its send recorded) in the hook's `on_dispatch`; the tool runs it only if the input it
///   receives is the one the approval gate passed — checked by the call's permit (R38). A
///   later hook that rewrote the arguments makes another call: it is decided again, from
///   the start, before anything runs, and the passed one is recorded as not run.
/// - Without the hook (or for a call the hook did not see), the tool sends the call down the
///   stack itself.
///
/// Either way the inner tool receives the arguments the gate passed (deserialised from the
/// permitted input), and its result goes back up the stack — scrubbed, audited — before the
/// model reads it. A refused or held call returns a refusal error whose text is what the
/// model should read; the inner tool is not called.
///
/// Made by [`AgentGate::tool`]. Its arguments are the model's JSON (`Args = Value`), its name,
/// description and parameters the inner tool's.
pub struct GovernedTool<T> {
    gate: AgentGate,
    tool: T,
}

impl<T> std::fmt::Debug for GovernedTool<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GovernedTool")
            .field("tool", &std::any::type_name::<T>())
            .field("gate", &self.gate)
            .finish()
    }
}

impl<T> GovernedTool<T> {
    pub(crate) fn new(gate: AgentGate, tool: T) -> Self {
        Self { gate, tool }
    }

    /// The inner tool.
    pub fn get_ref(&self) -> &T {
        &self.tool
    }
}

impl<T: Tool> GovernedTool<T> {
    /// The clearance for a call with `args`: the one the hook kept, else one from the stack
    /// now; `Err` with what the model should read when the stack does not pass it.
    async fn clearance(&self, args: &Value) -> Result<Clearance, ToolExecutionError> {
        if let Some(passed) = self.gate.take_for(T::NAME, args) {
            return Ok(passed.clearance);
        }
        let call = self.gate.call(T::NAME, args.clone(), None);
        match self.gate.hosted().clear(call).await {
            Cleared::Sent(clearance) => Ok(clearance),
            Cleared::Answered(response) => Err(refusal(&response)),
        }
    }

    /// Runs the inner tool with the input the gate passed; the result as toolgate records it.
    async fn run(
        &self,
        context: &mut ToolContext,
        clearance: &mut Clearance,
        args: &Value,
    ) -> Result<(ToolResponse, Shape, Option<ToolExecutionError>), ToolResponse> {
        if let Err(refused) = clearance.verify(T::NAME, args) {
            return Err(ToolResponse::Refused(refused));
        }
        let typed = match serde_json::from_value::<T::Args>(clearance.call().input.clone()) {
            Ok(typed) => typed,
            Err(e) => {
                let why = format!(
                    "the arguments of `{}` do not fit its parameters: {e}",
                    T::NAME
                );
                let error = ToolExecutionError::invalid_args(why.clone());
                return Ok((
                    ToolResponse::Failed(GateOutput::new(json!(why))),
                    Shape::Text,
                    Some(error),
                ));
            }
        };
        let ran = self
            .tool
            .call(context, typed)
            .await
            .map_err(|e| self.tool.map_error(e))
            .and_then(IntoToolOutput::into_tool_output);
        Ok(match ran {
            Ok(output) => {
                let (content, shape) = content_of(&output);
                (
                    ToolResponse::Completed(GateOutput::new(content)),
                    shape,
                    None,
                )
            }
            Err(error) => {
                let (content, shape) = content_of(error.model_output());
                (
                    ToolResponse::Failed(GateOutput::new(content)),
                    shape,
                    Some(error),
                )
            }
        })
    }
}

impl<T: Tool> Tool for GovernedTool<T> {
    const NAME: &'static str = T::NAME;
    type Args = Value;
    type Output = ToolOutput;
    type Error = ToolExecutionError;

    fn description(&self) -> String {
        self.tool.description()
    }

    fn parameters(&self) -> Value {
        self.tool.parameters()
    }

    async fn call(
        &self,
        context: &mut ToolContext,
        args: Value,
    ) -> Result<ToolOutput, Self::Error> {
        let mut clearance = self.clearance(&args).await?;
        let (response, shape, error) = match self.run(context, &mut clearance, &args).await {
            Ok(ran) => ran,
            Err(refused) => {
                // INVARIANT: a call whose tool or input is not the one the gate passed never
                // reaches the inner tool; the passed one is recorded as not run.
                let text = refused.model_text();
                clearance.abandon(&text);
                return Err(refusal(&refused));
            }
        };
        match (clearance.finish(response).await, error) {
            (ToolResponse::Completed(out), _) => Ok(output_of(out.content, shape)),
            (ToolResponse::Failed(out), Some(error)) => {
                Err(error.with_model_output(output_of(out.content, shape)))
            }
            (ToolResponse::Failed(out), None) => Err(ToolExecutionError::other(
                ToolResponse::Failed(out).model_text(),
            )),
            (other, _) => Err(refusal(&other)),
        }
    }
}
