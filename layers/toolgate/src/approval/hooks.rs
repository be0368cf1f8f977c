//! The hook trait (R32, seed 004): `evaluate_approval` → `before_call` → the tool →
//! `after_call`. Every method is asynchronous — a hook may consult a remote decision service
//! or wait for anything — and has a no-op default; [`Hooks`] builds one from closures.
//!
//! A hook can only tighten: `evaluate_approval` adds an ask (joined to the one question, R17),
//! `before_call` cancels the call before it is sent (and a cancelled call is no send, R44),
//! `after_call` rejects the result. None of them can loosen a decision, change the input, or
//! see a call the checks refused.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;
use toolgate_core::{AgentRef, CallId, RunContext, ToolResponse, Turn};

/// What a hook method returns: a boxed future, so the trait stays object-safe
/// (`Arc<dyn ToolHooks>`).
pub type HookFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a hook sees of a call: the call, its session and turn (R43), and its run's settings.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct HookCall<'a> {
    /// The call's id.
    pub call_id: &'a CallId,
    /// The tool's qualified name.
    pub tool: &'a str,
    /// The calling agent.
    pub agent: &'a AgentRef,
    /// The input.
    pub input: &'a Value,
    /// The session and turn the call belongs to (R43), when the host has sessions.
    pub turn: Option<&'a Turn>,
    /// The run's settings (its approval mode, whether it runs in the background).
    pub run: RunContext,
}

impl<'a> HookCall<'a> {
    /// What a hook sees of `call`, whose tool's qualified name is `tool`.
    ///
    /// ```
    /// use serde_json::json;
    /// use toolgate::approval::HookCall;
    /// use toolgate::core::{AgentRef, ToolCall};
    /// let call = ToolCall::new(AgentRef::profile("support"), "refund", json!({"amount": 5}))
    ///     .in_turn("s1", "t1");
    /// let view = HookCall::of(&call, "refund");
    /// assert_eq!(view.turn.map(|t| t.session.as_str()), Some("s1"));
    /// ```
    pub fn of(call: &'a toolgate_core::ToolCall, tool: &'a str) -> Self {
        Self {
            call_id: &call.id,
            tool,
            agent: &call.agent,
            input: &call.input,
            turn: call.turn.as_ref(),
            run: call.run,
        }
    }
}

/// A custom policy hooked into every call the approval gate lets through its checks. Every
/// method may await (a remote decision service, a person, a rate limiter of its own).
///
/// ```
/// use toolgate::approval::{HookCall, HookFuture, ToolHooks};
/// struct AskAboutDeletes;
/// impl ToolHooks for AskAboutDeletes {
///     fn evaluate_approval<'a>(&'a self, call: &'a HookCall<'a>) -> HookFuture<'a, Option<String>> {
///         Box::pin(async move {
///             call.tool.contains("delete").then(|| format!("`{}` deletes data", call.tool))
///         })
///     }
/// }
/// ```
pub trait ToolHooks: Send + Sync + 'static {
    /// Asks a person (with this message) about the call; the ask joins the one question
    /// (R17) and no run mode loosens it. `None` adds nothing.
    fn evaluate_approval<'a>(&'a self, call: &'a HookCall<'a>) -> HookFuture<'a, Option<String>> {
        let _ = call;
        Box::pin(std::future::ready(None))
    }

    /// Runs just before the tool, after any approval. An error cancels the call (it is no
    /// send, R44); its text goes back to the model.
    fn before_call<'a>(&'a self, call: &'a HookCall<'a>) -> HookFuture<'a, Result<(), String>> {
        let _ = call;
        Box::pin(std::future::ready(Ok(())))
    }

    /// Runs after the tool. An error rejects the result: the model gets the error text as
    /// a failed tool result instead.
    fn after_call<'a>(
        &'a self,
        call: &'a HookCall<'a>,
        response: &'a ToolResponse,
    ) -> HookFuture<'a, Result<(), String>> {
        let _ = (call, response);
        Box::pin(std::future::ready(Ok(())))
    }
}

type Evaluate = Arc<dyn Fn(&HookCall<'_>) -> Option<String> + Send + Sync>;
type Before = Arc<dyn Fn(&HookCall<'_>) -> Result<(), String> + Send + Sync>;
type After = Arc<dyn Fn(&HookCall<'_>, &ToolResponse) -> Result<(), String> + Send + Sync>;

/// Hooks made of synchronous closures (each wrapped in a ready future); unset points do
/// nothing. Implement [`ToolHooks`] for a hook that awaits.
///
/// ```
/// use toolgate::approval::Hooks;
/// let hooks = Hooks::new()
///     .evaluate_approval(|c| (c.input.get("amount").and_then(|a| a.as_f64()) > Some(100.0)).then(|| "large amount".to_owned()))
///     .before_call(|c| if c.input.get("dry_run").is_some() { Err("dry runs are not supported".into()) } else { Ok(()) });
/// # let _ = hooks;
/// ```
#[derive(Clone, Default)]
#[must_use]
pub struct Hooks {
    evaluate: Option<Evaluate>,
    before: Option<Before>,
    after: Option<After>,
}

impl fmt::Debug for Hooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hooks")
            .field("evaluate_approval", &self.evaluate.is_some())
            .field("before_call", &self.before.is_some())
            .field("after_call", &self.after.is_some())
            .finish()
    }
}

impl Hooks {
    /// No hooks.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `evaluate_approval`.
    pub fn evaluate_approval(
        mut self,
        f: impl Fn(&HookCall<'_>) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.evaluate = Some(Arc::new(f));
        self
    }

    /// Sets `before_call`.
    pub fn before_call(
        mut self,
        f: impl Fn(&HookCall<'_>) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.before = Some(Arc::new(f));
        self
    }

    /// Sets `after_call`.
    pub fn after_call(
        mut self,
        f: impl Fn(&HookCall<'_>, &ToolResponse) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.after = Some(Arc::new(f));
        self
    }
}

impl ToolHooks for Hooks {
    fn evaluate_approval<'a>(&'a self, call: &'a HookCall<'a>) -> HookFuture<'a, Option<String>> {
        Box::pin(std::future::ready(
            self.evaluate.as_ref().and_then(|f| f(call)),
        ))
    }

    fn before_call<'a>(&'a self, call: &'a HookCall<'a>) -> HookFuture<'a, Result<(), String>> {
        Box::pin(std::future::ready(
            self.before.as_ref().map_or(Ok(()), |f| f(call)),
        ))
    }

    fn after_call<'a>(
        &'a self,
        call: &'a HookCall<'a>,
        response: &'a ToolResponse,
    ) -> HookFuture<'a, Result<(), String>> {
        Box::pin(std::future::ready(
            self.after.as_ref().map_or(Ok(()), |f| f(call, response)),
        ))
    }
}
