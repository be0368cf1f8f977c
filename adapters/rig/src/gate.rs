//! One agent's gate: the hosted stack, the agent it decides for, the tools it knows and the
//! calls it passed that have not run yet.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rig_core::effect::EffectId;
use rig_core::tool::Tool;
use serde_json::Value;
use toolgate::core::{AgentRef, ToolCall};
use toolgate::hosted::{Clearance, HostedStack};

use crate::hook::ToolgateHook;
use crate::tool::GovernedTool;

/// How long a passed call waits for its tool before the gate gives up on it: a run that
/// ended between the dispatch and the tool leaves its clearance behind.
const PASSED_CALLS_WAIT: Duration = Duration::from_secs(600);

/// One rig agent's governance: a [`HostedStack`] and the toolgate agent (profile) its calls
/// are decided for. Clones share everything.
///
/// Make one per agent (several may share one stack), then give the agent its tools through
/// [`AgentGate::tool`] and its hook through [`AgentGate::hook`] (see the crate docs).
#[derive(Clone)]
pub struct AgentGate {
    inner: Arc<Inner>,
}

struct Inner {
    hosted: HostedStack,
    agent: AgentRef,
    session: Option<String>,
    /// The names of the tools the agent was given through this gate (wrapped, or declared).
    tools: Mutex<BTreeSet<String>>,
    /// The names of the tools wrapped as [`GovernedTool`]s.
    wrapped: Mutex<BTreeSet<String>>,
    /// Calls the stack passed in `on_dispatch`, waiting for their tool.
    passed: Mutex<Vec<Passed>>,
}

/// A call the stack passed, not yet run.
pub(crate) struct Passed {
    /// The dispatch it was passed in (none for a call cleared by the tool itself).
    pub(crate) effect: Option<EffectId>,
    pub(crate) clearance: Clearance,
    at: Instant,
}

impl std::fmt::Debug for AgentGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentGate")
            .field("agent", &self.inner.agent)
            .field("session", &self.inner.session)
            .field("tools", &*lock(&self.inner.tools))
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl AgentGate {
    /// The gate of the toolgate agent `agent` (its profile, as `agents[].name` says) over
    /// `hosted`.
    pub fn new(hosted: HostedStack, agent: AgentRef) -> Self {
        Self {
            inner: Arc::new(Inner {
                hosted,
                agent,
                session: None,
                tools: Mutex::new(BTreeSet::new()),
                wrapped: Mutex::new(BTreeSet::new()),
                passed: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Puts every call in the session `session` (R43: held calls, session labels); by default
    /// each rig run is its own session, named by its run id. Set it before giving out tools
    /// and the hook: a gate already cloned becomes a new gate over the same stack, agent and
    /// tools.
    pub fn with_session(self, session: impl Into<String>) -> Self {
        let mut inner = Arc::try_unwrap(self.inner).unwrap_or_else(|shared| Inner {
            hosted: shared.hosted.clone(),
            agent: shared.agent.clone(),
            session: None,
            tools: Mutex::new(lock(&shared.tools).clone()),
            wrapped: Mutex::new(lock(&shared.wrapped).clone()),
            passed: Mutex::new(Vec::new()),
        });
        inner.session = Some(session.into());
        Self {
            inner: Arc::new(inner),
        }
    }

    /// `tool`, governed: its calls run only as the stack passed them (see [`GovernedTool`]).
    /// Its name is one the hook may show the model.
    pub fn tool<T: Tool>(&self, tool: T) -> GovernedTool<T> {
        self.declare(T::NAME);
        lock(&self.inner.wrapped).insert(T::NAME.to_owned());
        GovernedTool::new(self.clone(), tool)
    }

    /// Declares a tool the agent was given unwrapped, so that the hook may show it to the
    /// model when the exposure has it. Its calls are still decided, asked, audited and
    /// scrubbed by the hook, but nothing checks at the tool that it runs the input the gate
    /// passed: wrap it with [`AgentGate::tool`] for that.
    pub fn declare(&self, name: impl Into<String>) {
        lock(&self.inner.tools).insert(name.into());
    }

    /// The agent hook: the turn's active tools, refusals and held calls as skips, results
    /// finished through the stack (see [`ToolgateHook`]).
    pub fn hook(&self) -> ToolgateHook {
        ToolgateHook::new(self.clone())
    }

    /// The tools the model may be shown this turn: the agent's exposure (R6–R13) among the
    /// tools given through this gate, in the exposure's order. An unknown agent sees none.
    pub fn active_tools(&self) -> Vec<String> {
        let governance = self.inner.hosted.handle().load();
        let Ok(exposure) = governance.exposure(&self.inner.agent.profile) else {
            return Vec::new();
        };
        let known = lock(&self.inner.tools);
        exposure
            .tools
            .iter()
            .map(|t| t.name.to_string())
            .filter(|name| known.contains(name))
            .collect()
    }

    /// The stack every call goes through.
    pub fn hosted(&self) -> &HostedStack {
        &self.inner.hosted
    }

    /// The toolgate agent the calls are decided for.
    pub fn agent(&self) -> &AgentRef {
        &self.inner.agent
    }

    /// The call the model made to `tool` with `input`, in `run`'s session (unless the gate has
    /// its own) and turn `turn`.
    pub(crate) fn call(&self, tool: &str, input: Value, run: Option<(String, usize)>) -> ToolCall {
        let call = ToolCall::new(self.inner.agent.clone(), tool, input);
        match (&self.inner.session, run) {
            (Some(session), Some((_, turn))) => call.in_turn(session.clone(), turn.to_string()),
            (Some(session), None) => call.in_turn(session.clone(), "0"),
            (None, Some((run, turn))) => call.in_turn(run, turn.to_string()),
            (None, None) => call,
        }
    }

    /// Whether `tool` was wrapped as a [`GovernedTool`].
    pub(crate) fn wraps(&self, tool: &str) -> bool {
        lock(&self.inner.wrapped).contains(tool)
    }

    /// Keeps a passed call for its tool, and lets go of calls that waited too long.
    pub(crate) fn keep(&self, effect: Option<EffectId>, clearance: Clearance) {
        let mut passed = lock(&self.inner.passed);
        let now = Instant::now();
        let (stale, fresh): (Vec<_>, Vec<_>) = std::mem::take(&mut *passed)
            .into_iter()
            .partition(|p| now.duration_since(p.at) > PASSED_CALLS_WAIT);
        *passed = fresh;
        passed.push(Passed {
            effect,
            clearance,
            at: now,
        });
        drop(passed);
        for p in stale {
            p.clearance
                .abandon("the tool was not run within ten minutes of toolgate passing the call");
        }
    }

    /// Takes the passed call to `tool` whose input is `input`, oldest first.
    pub(crate) fn take_for(&self, tool: &str, input: &Value) -> Option<Passed> {
        let mut passed = lock(&self.inner.passed);
        let i = passed.iter().position(|p| {
            let call = p.clearance.call();
            call.tool.display_name() == tool && call.input == *input
        })?;
        Some(passed.remove(i))
    }

    /// Takes the passed call of the dispatch `effect`, if its tool has not taken it.
    pub(crate) fn take_effect(&self, effect: EffectId) -> Option<Passed> {
        let mut passed = lock(&self.inner.passed);
        let i = passed.iter().position(|p| p.effect == Some(effect))?;
        Some(passed.remove(i))
    }
}
