//! The agent hook: exposure per turn, decisions at dispatch, results through the stack.

use rig_agent::agent::{
    CompletionCallAction, CompletionCallEvent, DispatchAction, DispatchEvent,
    InvalidToolCallAction, InvalidToolCallContext, InvalidToolCallReason, OutcomeAction,
    OutcomeEvent, RequestPatch,
};
use rig_agent::{AgentHook, HookContext};
use rig_core::effect::Outcome;
use rig_core::tool::ToolResult;
use serde_json::Value;
use toolgate::core::Verdict;
use toolgate::hosted::Cleared;

use crate::gate::AgentGate;
use crate::output::{output_of, refusal, response_of};

/// The rig [`AgentHook`] of one agent's [`AgentGate`]:
///
/// - **`on_completion_call`**: the turn's `active_tools` are the agent's exposure (R6–R13)
///   among the tools given through the gate, so the model is shown exactly what it may call;
/// - **`on_invalid_tool_call`** (a tool the model was not shown): a call toolgate refuses is
///   sent down the stack, so its refusal is audited, and skipped with the refusal's text;
///   any other is skipped as not available, and not sent;
/// - **`on_dispatch`** (tool calls): the call is sent down the stack — decided, asked through
///   the configured channel, audited, its send recorded. A refused call is answered with a
///   skip carrying the refusal the model should read, a held call (the durable inbox) with a
///   skip carrying the held text; a passed call proceeds to its tool. The hook never rewrites
///   a call;
/// - **`on_outcome`** (tool results): a passed call whose tool was not a
///   [`GovernedTool`](crate::GovernedTool) is finished here — its result goes up the stack,
///   scrubbed when the configuration says `redaction.scrub_output`, and the model reads the
///   scrubbed output. A result of arguments rewritten after the gate passed the call is
///   withheld.
///
/// Register it on the agent (`AgentBuilder::add_hook`) or the run (`AgentRunner::add_hook`);
/// a hook registered after it sees the calls it passed.
#[derive(Debug, Clone)]
pub struct ToolgateHook {
    gate: AgentGate,
}

impl ToolgateHook {
    pub(crate) fn new(gate: AgentGate) -> Self {
        Self { gate }
    }
}

impl AgentHook for ToolgateHook {
    fn name(&self) -> Option<String> {
        Some(format!("toolgate:{}", self.gate.agent().rule_name()))
    }

    async fn on_completion_call(
        &self,
        _ctx: &HookContext,
        _event: CompletionCallEvent<'_>,
    ) -> CompletionCallAction {
        CompletionCallAction::patch(RequestPatch::new().active_tools(self.gate.active_tools()))
    }

    async fn on_invalid_tool_call(
        &self,
        ctx: &HookContext,
        event: &InvalidToolCallContext,
    ) -> Option<InvalidToolCallAction> {
        if event.reason != InvalidToolCallReason::UnknownTool {
            return None;
        }
        // A tool the model was not shown this turn. One toolgate refuses is sent down the
        // stack, so the refusal is audited, and the model reads it; any other is not sent.
        let tool = &event.tool_name;
        let input = event
            .args
            .as_deref()
            .and_then(|a| serde_json::from_str::<Value>(a).ok())
            .unwrap_or_else(|| Value::Object(serde_json::Map::new()));
        let run = Some((ctx.run_id().to_string(), ctx.turn()));
        let mut probe = self.gate.call(tool, input.clone(), run.clone());
        let refused = matches!(
            self.gate
                .hosted()
                .handle()
                .decide(&mut probe)
                .decision()
                .verdict,
            Verdict::Refused(_)
        );
        let not_shown = || format!("The tool `{tool}` is not available to this agent now");
        if !refused {
            return Some(InvalidToolCallAction::skip(not_shown()));
        }
        let reason = match self
            .gate
            .hosted()
            .clear(self.gate.call(tool, input, run))
            .await
        {
            Cleared::Answered(response) => response.model_text(),
            Cleared::Sent(clearance) => {
                clearance.abandon("the tool was not offered to the model this turn");
                not_shown()
            }
        };
        Some(InvalidToolCallAction::skip(reason))
    }

    async fn on_dispatch(&self, ctx: &HookContext, event: DispatchEvent<'_>) -> DispatchAction {
        let (Some(tool), Some(args)) = (event.tool_name(), event.tool_args()) else {
            return DispatchAction::proceed();
        };
        let Ok(input) = serde_json::from_str::<Value>(args) else {
            return DispatchAction::skip(format!(
                "toolgate refused the call to `{tool}`: its arguments are not JSON"
            ));
        };
        let run = Some((ctx.run_id().to_string(), event.turn));
        match self
            .gate
            .hosted()
            .clear(self.gate.call(tool, input, run))
            .await
        {
            Cleared::Sent(clearance) => {
                self.gate.keep(Some(event.id), clearance);
                DispatchAction::proceed()
            }
            Cleared::Answered(response) => DispatchAction::skip(response.model_text()),
        }
    }

    async fn on_outcome(&self, _ctx: &HookContext, event: OutcomeEvent<'_>) -> OutcomeAction {
        if event.tool_name().is_none() {
            return OutcomeAction::proceed();
        }
        // Taken by its governed tool (the usual case): finished there.
        let Some(passed) = self.gate.take_effect(event.id) else {
            return OutcomeAction::proceed();
        };
        let mut clearance = passed.clearance;
        let tool = event.tool_name().unwrap_or_default();
        if self.gate.wraps(tool) {
            // Its governed tool did not take it: the arguments were rewritten after the gate
            // passed the call, and the tool decided the rewritten call on its own (or it did
            // not run).
            clearance.abandon(
                "the call was not run as passed: a hook after toolgate's rewrote or skipped it",
            );
            return OutcomeAction::proceed();
        }
        let result = match event.outcome {
            Ok(Outcome::ToolResult { result }) if !result.is_skipped() => result,
            _ => {
                clearance
                    .abandon("the call was not run: a hook after toolgate's skipped or denied it");
                return OutcomeAction::proceed();
            }
        };
        let ran_with = event
            .tool_args()
            .and_then(|a| serde_json::from_str::<Value>(a).ok())
            .unwrap_or(Value::Null);
        if let Err(refused) = clearance.verify(tool, &ran_with) {
            // The tool already ran, with input the gate did not pass: its result is withheld.
            clearance.abandon(&refused.to_string());
            let withheld = toolgate::core::ToolResponse::Refused(refused);
            return OutcomeAction::replace(Ok(Outcome::ToolResult {
                result: ToolResult::failed(refusal(&withheld)),
            }));
        }
        let (response, shape) = response_of(result);
        let finished = clearance.finish(response).await;
        let content = match finished {
            toolgate::core::ToolResponse::Completed(out)
            | toolgate::core::ToolResponse::Failed(out) => out.content,
            other => Value::String(other.model_text()),
        };
        OutcomeAction::rewrite_tool_output(&event, output_of(content, shape))
    }
}
