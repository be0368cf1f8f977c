//! The tool-call request every layer speaks.

use std::any::{Any, TypeId};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::decl::ToolIdentity;

/// How a call names its tool: by the wire name the model used (R3), by identity, or both
/// (then both must name the same record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolRef {
    /// The qualified (wire) name the model called.
    Name(String),
    /// The tool's identity.
    Identity(ToolIdentity),
    /// Both; a call whose two names disagree is refused as an unknown tool.
    Both {
        /// The wire name.
        name: String,
        /// The identity.
        identity: ToolIdentity,
    },
}

impl ToolRef {
    /// The name to show in reasons.
    pub fn display_name(&self) -> String {
        match self {
            ToolRef::Name(n) | ToolRef::Both { name: n, .. } => n.clone(),
            ToolRef::Identity(id) => id.qualified_name().unwrap_or_else(|_| id.name().to_owned()),
        }
    }
}

/// Which agent makes the call: its profile and, for a subagent, its id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentRef {
    /// The agent profile the call runs under.
    pub profile: String,
    /// A subagent's id; tenant rules' `agent` patterns match it instead of the profile (R19).
    pub subagent: Option<String>,
}

impl AgentRef {
    /// An agent calling under its own profile.
    pub fn profile(profile: impl Into<String>) -> Self {
        Self {
            profile: profile.into(),
            subagent: None,
        }
    }

    /// A subagent with its own id running under `profile`.
    ///
    /// The id must come from the host (the agent framework that spawned the subagent), never
    /// from the model: tenant rules' `agent` patterns match it (R19). An id that is the name
    /// of another agent profile is refused `not_allowed`, so it can never take that
    /// profile's rules by accident (SPEC §8).
    pub fn subagent(profile: impl Into<String>, id: impl Into<String>) -> Self {
        Self {
            profile: profile.into(),
            subagent: Some(id.into()),
        }
    }

    /// The name that tenant rules' `agent` patterns match (R19).
    pub fn rule_name(&self) -> &str {
        self.subagent.as_deref().unwrap_or(&self.profile)
    }
}

/// The session and the turn a call belongs to (R43, seed 002).
///
/// A turn is paused while any call held in it is unanswered, and goes on when every one is
/// answered. A subagent's call carries its **parent's** session and turn (its held call
/// pauses the parent's turn and is answered on the parent's session, with the subagent's id
/// as `agent`); a subagent that runs in a session of its own (a flow agent) carries its own.
///
/// ```
/// use serde_json::json;
/// use toolgate_core::{AgentRef, ToolCall, Turn};
/// let call = ToolCall::new(AgentRef::subagent("support", "researcher"), "refund", json!({}))
///     .in_turn("sess-1", "turn-3");
/// assert_eq!(call.turn, Some(Turn::new("sess-1", "turn-3")));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Turn {
    /// The session's id.
    pub session: String,
    /// The turn's id within the session.
    pub turn: String,
}

impl Turn {
    /// The turn `turn` of session `session`.
    pub fn new(session: impl Into<String>, turn: impl Into<String>) -> Self {
        Self {
            session: session.into(),
            turn: turn.into(),
        }
    }
}

impl fmt::Display for Turn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} / {}", self.session, self.turn)
    }
}

/// A run's approval mode (R25).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum RunMode {
    /// Route asks to the approval channel.
    #[default]
    UseAgentPolicy,
    /// Approve agent-level asks without asking; operator asks are still routed.
    AutoApproveRequired,
    /// Refuse every asked call with `rejected`.
    AutoRejectRequired,
}

impl RunMode {
    /// The spelling used in calls.
    pub fn as_str(self) -> &'static str {
        match self {
            RunMode::UseAgentPolicy => "use_agent_policy",
            RunMode::AutoApproveRequired => "auto_approve_required",
            RunMode::AutoRejectRequired => "auto_reject_required",
        }
    }

    /// Parses the exact spelling; anything else is `None`.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "use_agent_policy" => RunMode::UseAgentPolicy,
            "auto_approve_required" => RunMode::AutoApproveRequired,
            "auto_reject_required" => RunMode::AutoRejectRequired,
            _ => return None,
        })
    }
}

/// Per-run settings (SPEC §1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RunContext {
    /// The run approval mode.
    pub mode: RunMode,
    /// Whether the run is a background task (it cannot wait for an interactive answer).
    pub background: bool,
}

/// A call id, unique per call. Shared, so the layers that keep it (the permit, audit, hooks)
/// clone a pointer, not the text.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CallId(std::sync::Arc<str>);

impl CallId {
    /// A call id from the agent framework's own id.
    pub fn new(id: impl Into<String>) -> Self {
        Self(std::sync::Arc::from(id.into()))
    }

    /// A fresh process-unique id (`call-N`).
    pub fn generate() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Self::new(format!("call-{}", NEXT.fetch_add(1, Ordering::Relaxed)))
    }

    /// The id's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CallId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A type map carried by a call, for layers to pass data inward (like `http::Extensions`).
///
/// A call carries a handful of entries (the pin, the permit, a layer's note), so they are
/// kept in a small vector searched by type id: no hashing per look-up, one allocation for the
/// vector when the first entry is put in (and one per entry for its box).
///
/// ```
/// use toolgate_core::Extensions;
/// let mut ext = Extensions::new();
/// assert_eq!(ext.insert(1u8), None);
/// assert_eq!(ext.insert(2u8), Some(1));
/// ext.insert("note");
/// assert_eq!(ext.get::<u8>(), Some(&2));
/// assert_eq!(ext.remove::<&str>(), Some("note"));
/// assert!(ext.get::<&str>().is_none() && !ext.is_empty());
/// ```
#[derive(Default)]
pub struct Extensions {
    entries: Vec<(TypeId, Box<dyn Any + Send + Sync>)>,
}

impl Extensions {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    fn position<T: 'static>(&self) -> Option<usize> {
        let id = TypeId::of::<T>();
        self.entries.iter().position(|(t, _)| *t == id)
    }

    /// Inserts a value, returning the previous one of that type.
    pub fn insert<T: Send + Sync + 'static>(&mut self, value: T) -> Option<T> {
        match self.position::<T>() {
            Some(i) => {
                let slot = self.entries.get_mut(i)?;
                match slot.1.downcast_mut::<T>() {
                    Some(old) => Some(std::mem::replace(old, value)),
                    // Never: an entry is stored under its own type's id.
                    None => {
                        slot.1 = Box::new(value);
                        None
                    }
                }
            }
            None => {
                if self.entries.capacity() == 0 {
                    self.entries.reserve_exact(4);
                }
                self.entries.push((TypeId::of::<T>(), Box::new(value)));
                None
            }
        }
    }

    /// The value of type `T`, if any.
    pub fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        let i = self.position::<T>()?;
        self.entries.get(i).and_then(|(_, b)| b.downcast_ref::<T>())
    }

    /// The value of type `T`, mutably, if any.
    pub fn get_mut<T: Send + Sync + 'static>(&mut self) -> Option<&mut T> {
        let i = self.position::<T>()?;
        self.entries
            .get_mut(i)
            .and_then(|(_, b)| b.downcast_mut::<T>())
    }

    /// Removes and returns the value of type `T`.
    pub fn remove<T: Send + Sync + 'static>(&mut self) -> Option<T> {
        let i = self.position::<T>()?;
        let (_, b) = self.entries.swap_remove(i);
        b.downcast::<T>().ok().map(|b| *b)
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl fmt::Debug for Extensions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Extensions")
            .field("len", &self.entries.len())
            .finish()
    }
}

/// One tool call from an agent's model.
///
/// ```
/// use serde_json::json;
/// use toolgate_core::{AgentRef, ToolCall};
/// let call = ToolCall::new(AgentRef::profile("support"), "github__create_issue", json!({"title": "x"}));
/// assert_eq!(call.tool.display_name(), "github__create_issue");
/// ```
#[derive(Debug)]
pub struct ToolCall {
    /// The call's id.
    pub id: CallId,
    /// The tool, as the model named it or by identity.
    pub tool: ToolRef,
    /// The calling agent.
    pub agent: AgentRef,
    /// The JSON input (an object).
    pub input: serde_json::Value,
    /// The run's settings.
    pub run: RunContext,
    /// The session and turn the call belongs to, when the host has sessions (R43).
    pub turn: Option<Turn>,
    /// Data layers pass inward (the pinned configuration snapshot, for one).
    pub extensions: Extensions,
}

impl ToolCall {
    /// A call by wire name with a fresh id and default run settings.
    pub fn new(agent: AgentRef, name: impl Into<String>, input: serde_json::Value) -> Self {
        Self {
            id: CallId::generate(),
            tool: ToolRef::Name(name.into()),
            agent,
            input,
            run: RunContext::default(),
            turn: None,
            extensions: Extensions::new(),
        }
    }

    /// A call by identity with a fresh id and default run settings.
    pub fn by_identity(agent: AgentRef, identity: ToolIdentity, input: serde_json::Value) -> Self {
        Self {
            id: CallId::generate(),
            tool: ToolRef::Identity(identity),
            agent,
            input,
            run: RunContext::default(),
            turn: None,
            extensions: Extensions::new(),
        }
    }

    /// Sets the call id.
    #[must_use]
    pub fn with_id(mut self, id: CallId) -> Self {
        self.id = id;
        self
    }

    /// Places the call in turn `turn` of session `session` (R43). A subagent's call takes
    /// its parent's session and turn, unless the subagent runs in a session of its own.
    #[must_use]
    pub fn in_turn(mut self, session: impl Into<String>, turn: impl Into<String>) -> Self {
        self.turn = Some(Turn::new(session, turn));
        self
    }

    /// Sets (or clears) the call's session and turn.
    #[must_use]
    pub fn with_turn(mut self, turn: Option<Turn>) -> Self {
        self.turn = turn;
        self
    }

    /// Sets the run context.
    #[must_use]
    pub fn with_run(mut self, run: RunContext) -> Self {
        self.run = run;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extensions_round_trip() {
        let mut e = Extensions::new();
        assert!(e.insert(5u32).is_none());
        assert_eq!(e.insert(6u32), Some(5));
        assert_eq!(e.get::<u32>(), Some(&6));
        assert_eq!(e.get::<u64>(), None);
        assert_eq!(e.remove::<u32>(), Some(6));
        assert!(e.is_empty());
    }

    #[test]
    fn r19_rule_name_is_the_subagent_id_when_present() {
        assert_eq!(AgentRef::profile("a").rule_name(), "a");
        assert_eq!(AgentRef::subagent("a", "sub-1").rule_name(), "sub-1");
    }

    #[test]
    fn run_modes_parse_exactly() {
        assert_eq!(
            RunMode::parse("use_agent_policy"),
            Some(RunMode::UseAgentPolicy)
        );
        assert_eq!(RunMode::parse("Use_Agent_Policy"), None);
        assert_eq!(RunMode::parse(""), None);
    }

    #[test]
    fn generated_ids_differ() {
        assert_ne!(CallId::generate(), CallId::generate());
    }
}
