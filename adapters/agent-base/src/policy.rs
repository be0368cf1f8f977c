//! agent-base's `ToolPolicy` over a hosted toolgate stack.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use agent_base::{
    AgentError, AgentResult, ApprovalRequest, Content, ToolContext, ToolDecision, ToolPolicy,
};
use async_trait::async_trait;
use serde_json::Value;
use toolgate::core::{AgentRef, ToolCall, ToolOutput, ToolResponse};
use toolgate::hosted::{Clearance, Cleared, HostedStack};

/// How long a decided call waits for its tool: an engine that stopped between the approval
/// phase and the execution phase, or a tool that failed (agent-base calls no `after_call`
/// then), leaves its call behind.
const DECIDED_CALLS_WAIT: Duration = Duration::from_secs(600);

/// agent-base's [`ToolPolicy`], every hook over one governed toolgate stack, for one toolgate
/// agent:
///
/// - **`evaluate_approval`** sends the call down the whole stack — audit, exposure, the
///   tenant policy, quotas and grants; an ask goes to the stack's configured channel (a
///   person at a terminal, the durable inbox); a passed call's send is recorded (R44) and its
///   permit minted (R38). It always answers `None`: toolgate has asked whoever the
///   configuration names, so agent-base's own approval handler is not asked again;
/// - **`before_call`** applies the verdict: a refused or held call is blocked with the text the
///   model should read (the refusal and its reasons, or the held call's interaction); a passed
///   call proceeds only if the tool and arguments are the ones the gate passed (its permit).
///   It never modifies the arguments;
/// - **`after_call`** hands the result back up the stack — scrubbed, then audited with the
///   call's outcome. agent-base's `after_call` cannot replace a result, so a result the
///   configuration scrubs (`redaction.scrub_output`) is rejected with its scrubbed text as
///   the message the model reads.
///
/// agent-base decides every call of a turn (`evaluate_approval`) before it runs any
/// (`before_call`, the tool, `after_call`); the policy keeps each decided call until its tool
/// runs, matched by tool and arguments (the hooks carry no call id). A call whose tool fails
/// or times out gets no `after_call`: it is recorded as not run (`failed`) when dropped, at
/// the latest ten minutes after its decision.
#[derive(Clone)]
pub struct ToolgatePolicy {
    inner: Arc<Inner>,
}

struct Inner {
    hosted: HostedStack,
    agent: AgentRef,
    session: Option<String>,
    /// Decided calls, from `evaluate_approval` to `before_call`.
    decided: Mutex<Vec<Kept<Cleared>>>,
    /// Passed calls whose tool is running, from `before_call` to `after_call`.
    running: Mutex<Vec<Kept<Clearance>>>,
}

/// A call kept between two hooks.
struct Kept<T> {
    tool: String,
    input: Value,
    at: Instant,
    value: T,
}

impl std::fmt::Debug for ToolgatePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolgatePolicy")
            .field("agent", &self.inner.agent)
            .field("session", &self.inner.session)
            .field("decided", &lock(&self.inner.decided).len())
            .field("running", &lock(&self.inner.running).len())
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Takes the oldest kept entry for `tool` with `input`, after letting go of stale ones.
fn take<T>(kept: &Mutex<Vec<Kept<T>>>, tool: &str, input: &Value) -> Option<T> {
    let mut kept = lock(kept);
    let now = Instant::now();
    kept.retain(|k| now.duration_since(k.at) <= DECIDED_CALLS_WAIT);
    let i = kept
        .iter()
        .position(|k| k.tool == tool && k.input == *input)?;
    Some(kept.remove(i).value)
}

fn keep<T>(kept: &Mutex<Vec<Kept<T>>>, tool: &str, input: &Value, value: T) {
    lock(kept).push(Kept {
        tool: tool.to_owned(),
        input: input.clone(),
        at: Instant::now(),
        value,
    });
}

/// agent-base's tool output as the content toolgate records: one text block as a string,
/// anything else as the block list.
fn content_of(result: &[Content]) -> Value {
    match result {
        [Content::Text { text }] => Value::String(text.clone()),
        blocks => serde_json::to_value(blocks).unwrap_or(Value::Null),
    }
}

impl ToolgatePolicy {
    /// The policy of the toolgate agent `agent` (its profile, as `agents[].name` says) over
    /// `hosted`.
    pub fn new(hosted: HostedStack, agent: AgentRef) -> Self {
        Self {
            inner: Arc::new(Inner {
                hosted,
                agent,
                session: None,
                decided: Mutex::new(Vec::new()),
                running: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Puts every call in the session `session` (R43: held calls and session labels gather
    /// under it). agent-base's `evaluate_approval` carries no session, so a policy serves
    /// one conversation's session, or none.
    pub fn with_session(self, session: impl Into<String>) -> Self {
        let inner = &self.inner;
        Self {
            inner: Arc::new(Inner {
                hosted: inner.hosted.clone(),
                agent: inner.agent.clone(),
                session: Some(session.into()),
                decided: Mutex::new(Vec::new()),
                running: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The stack every call goes through.
    pub fn hosted(&self) -> &HostedStack {
        &self.inner.hosted
    }

    /// The tools the agent's model may be shown (R6–R13), in exposure order: register only
    /// these with agent-base (an unknown agent has none).
    pub fn exposed_tools(&self) -> Vec<String> {
        let governance = self.inner.hosted.handle().load();
        governance
            .exposure(&self.inner.agent.profile)
            .map(|e| e.tools.iter().map(|t| t.name.to_string()).collect())
            .unwrap_or_default()
    }

    fn call(&self, tool: &str, input: Value) -> ToolCall {
        let call = ToolCall::new(self.inner.agent.clone(), tool, input);
        match &self.inner.session {
            Some(session) => call.in_turn(session.clone(), "0"),
            None => call,
        }
    }

    /// The result's scrubbed content, when scrubbing changes it.
    fn scrubbed(&self, tool: &str, content: &Value) -> Option<Value> {
        let hosted = &self.inner.hosted;
        if !hosted.scrubs_output() {
            return None;
        }
        let redactor = hosted.redactor();
        let scrubbed = match redactor.redact_value(tool, content) {
            Value::String(s) => Value::String(redactor.truncate(&s)),
            other => other,
        };
        (scrubbed != *content).then_some(scrubbed)
    }
}

#[async_trait]
impl ToolPolicy for ToolgatePolicy {
    async fn evaluate_approval(&self, tool_name: &str, args: &Value) -> Option<ApprovalRequest> {
        let cleared = self
            .inner
            .hosted
            .clear(self.call(tool_name, args.clone()))
            .await;
        keep(&self.inner.decided, tool_name, args, cleared);
        None
    }

    fn before_call(
        &self,
        tool_name: &str,
        args: &Value,
        _ctx: &ToolContext,
    ) -> AgentResult<ToolDecision> {
        let Some(cleared) = take(&self.inner.decided, tool_name, args) else {
            // INVARIANT: a call toolgate did not decide never runs.
            return Ok(ToolDecision::Block(format!(
                "toolgate has not decided this call to `{tool_name}` with these arguments (its evaluate_approval did not see them), so it is not run"
            )));
        };
        match cleared {
            Cleared::Answered(response) => Ok(ToolDecision::Block(response.model_text())),
            Cleared::Sent(mut clearance) => match clearance.verify(tool_name, args) {
                Ok(()) => {
                    keep(&self.inner.running, tool_name, args, clearance);
                    Ok(ToolDecision::Proceed)
                }
                Err(refused) => {
                    let text = ToolResponse::Refused(refused).model_text();
                    clearance.abandon(&text);
                    Ok(ToolDecision::Block(text))
                }
            },
        }
    }

    fn after_call(
        &self,
        tool_name: &str,
        args: &Value,
        result: &[Content],
        _ctx: &ToolContext,
    ) -> AgentResult<()> {
        let content = content_of(result);
        if let Some(clearance) = take(&self.inner.running, tool_name, args) {
            // Up the stack: scrubbed and audited on its own task.
            drop(clearance.finish(ToolResponse::Completed(ToolOutput::new(content.clone()))));
        }
        match self.scrubbed(tool_name, &content) {
            None => Ok(()),
            Some(scrubbed) => {
                let text = match scrubbed {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                Err(AgentError::ToolBlocked(format!(
                    "toolgate scrubbed the result of `{tool_name}`; what may be read of it: {text}"
                )))
            }
        }
    }
}
