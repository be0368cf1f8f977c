//! The hook trait (R32, seed 004): `evaluate_approval` → `before_call` → the tool →
//! `after_call`. Every method has a no-op default; [`Hooks`] builds one from closures.

use std::fmt;
use std::sync::Arc;

use serde_json::Value;
use toolgate_core::{AgentRef, CallId, ToolResponse};

/// What a hook sees of a call.
#[derive(Debug, Clone, Copy)]
pub struct HookCall<'a> {
    /// The call's id.
    pub call_id: &'a CallId,
    /// The tool's qualified name.
    pub tool: &'a str,
    /// The calling agent.
    pub agent: &'a AgentRef,
    /// The input.
    pub input: &'a Value,
}

/// A custom policy hooked into every call the approval gate lets through its checks.
///
/// ```
/// use toolgate::approval::{HookCall, ToolHooks};
/// struct AskAboutDeletes;
/// impl ToolHooks for AskAboutDeletes {
///     fn evaluate_approval(&self, call: &HookCall<'_>) -> Option<String> {
///         call.tool.contains("delete").then(|| format!("`{}` deletes data", call.tool))
///     }
/// }
/// ```
pub trait ToolHooks: Send + Sync + 'static {
    /// Asks a person (with this message) about the call; the ask joins the one question
    /// (R17) and no run mode loosens it. `None` adds nothing.
    fn evaluate_approval(&self, call: &HookCall<'_>) -> Option<String> {
        let _ = call;
        None
    }

    /// Runs just before the tool, after any approval. An error cancels the call; its text
    /// goes back to the model.
    fn before_call(&self, call: &HookCall<'_>) -> Result<(), String> {
        let _ = call;
        Ok(())
    }

    /// Runs after the tool. An error rejects the result: the model gets the error text as
    /// a failed tool result instead.
    fn after_call(&self, call: &HookCall<'_>, response: &ToolResponse) -> Result<(), String> {
        let _ = (call, response);
        Ok(())
    }
}

type Evaluate = Arc<dyn Fn(&HookCall<'_>) -> Option<String> + Send + Sync>;
type Before = Arc<dyn Fn(&HookCall<'_>) -> Result<(), String> + Send + Sync>;
type After = Arc<dyn Fn(&HookCall<'_>, &ToolResponse) -> Result<(), String> + Send + Sync>;

/// Hooks made of closures; unset points do nothing.
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
    fn evaluate_approval(&self, call: &HookCall<'_>) -> Option<String> {
        self.evaluate.as_ref().and_then(|f| f(call))
    }

    fn before_call(&self, call: &HookCall<'_>) -> Result<(), String> {
        self.before.as_ref().map_or(Ok(()), |f| f(call))
    }

    fn after_call(&self, call: &HookCall<'_>, response: &ToolResponse) -> Result<(), String> {
        self.after.as_ref().map_or(Ok(()), |f| f(call, response))
    }
}
