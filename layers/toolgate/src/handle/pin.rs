//! Pins: the snapshot a call was pinned to by the first layer of a handle it met, and the
//! decision made by it, each bound to its handle, call and generation (R23, R38).

use super::*;

/// The snapshot a call was pinned to by the first toolgate layer of a handle it met, and —
/// once one of them decided it — that decision ([`PinnedDecision`]). Every later layer of
/// the same handle decides by the same snapshot and reads the same decision, so a
/// replacement mid-call never splits a decision (R23) and a call is decided once.
///
/// Only toolgate makes one, and each is bound to the handle that made it, to the call it
/// was made for and to its snapshot's generation ([`GovernanceHandle::generation`]): a
/// layer of another handle (a second stack nested inside the first) ignores it and pins its
/// own, and a pin put on another call — kept by a layer from an earlier call, say — is not
/// about the call at hand, so the layers of the handle ignore it and decide that call by
/// the snapshot in force (R23, R38). A pin is read only on the call with its id, and only
/// while that call still has the tool, agent, run settings and number literals it was
/// pinned with (at the gate also the input a decision was made for). The call it was made
/// for keeps it across a replacement (R23: decided wholly by the snapshot it was pinned
/// to); the generation it records tells which snapshot that was.
///
/// Nothing outside toolgate can make one:
///
/// ```compile_fail,E0451
/// # use toolgate::Pinned;
/// let forged = Pinned { handle: 1, call: todo!(), generation: 0, state: todo!() }; // private fields
/// ```
///
/// nor copy one (it is not `Clone`):
///
/// ```compile_fail,E0277
/// fn copyable<T: Clone>() {}
/// copyable::<toolgate::Pinned>(); // `Pinned: Clone` is not satisfied
/// ```
pub struct Pinned {
    pub(super) handle: u64,
    /// The call it was made for.
    pub(super) call: CallId,
    /// The handle's generation when its snapshot was loaded (see [`Pinned::generation`]).
    pub(super) generation: u64,
    pub(super) state: PinState,
}

/// A pin holds its snapshot once: a decided pin through its decision (so that the layers
/// reading it clone only the call's own `Arc`, never the snapshot's shared count).
// The pin lives boxed in the call's extensions already: boxing `About` apart would cost an
// allocation per pin for nothing.
#[allow(
    clippy::large_enum_variant,
    reason = "built once per call and moved, never stored in bulk: boxing would add an allocation per call"
)]
pub(super) enum PinState {
    /// Pinned with no decision yet, about the call as it looked then (no input hash: the
    /// decision pinned later takes this over, so a call allocates one `About`).
    Snapshot(Arc<Governance>, About),
    Decided(PinnedDecision),
}

impl fmt::Debug for Pinned {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pinned")
            .field("handle", &self.handle)
            .field("call", &self.call)
            .field("generation", &self.generation)
            .field("decided", &self.decided())
            .finish_non_exhaustive()
    }
}

impl Pinned {
    /// The snapshot the call is decided by.
    pub fn governance(&self) -> &Arc<Governance> {
        match &self.state {
            PinState::Snapshot(g, _) => g,
            PinState::Decided(d) => d.governance(),
        }
    }

    /// The decision, once a deciding layer of the handle made it.
    pub fn decided(&self) -> Option<&PinnedDecision> {
        match &self.state {
            PinState::Snapshot(..) => None,
            PinState::Decided(d) => Some(d),
        }
    }

    /// Whether `handle` (or a clone of it) made this pin.
    pub fn is_from(&self, handle: &GovernanceHandle) -> bool {
        self.handle == handle.id
    }

    /// The id of the call the pin was made for: on any other call it is ignored.
    pub fn call_id(&self) -> &CallId {
        &self.call
    }

    /// The handle's [generation](GovernanceHandle::generation) when the pinned snapshot
    /// was loaded (a lower bound: a replacement stored meanwhile may be the one pinned).
    pub fn generation(&self) -> u64 {
        self.generation
    }
}

/// One call's decision, made once by the first deciding toolgate layer of a handle and read
/// by every later one ([`GovernanceHandle::decide`]): the engine's [`Decision`] with the
/// snapshot that made it, the tool's entry and the agent's profile (one look-up of each per
/// call). Cheap to clone: one `Arc`, the call's own (the snapshot's count is not touched).
///
/// Only toolgate makes one:
///
/// ```compile_fail,E0451
/// # use toolgate::PinnedDecision;
/// let forged = PinnedDecision { decided: todo!() }; // private fields
/// ```
#[derive(Clone)]
pub struct PinnedDecision {
    pub(super) decided: Arc<Shared>,
}

/// A fresh seal for one composite stack ([`Shared::seal`]): never 0.
pub(crate) fn new_seal() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// What a decision was made about: everything of the call the engine decides by.
pub(super) struct About {
    pub(super) tool: ToolRef,
    pub(super) agent: AgentRef,
    pub(super) run: RunContext,
    pub(super) literals: Option<NumberLiterals>,
    /// The binding of the input the decision was made for (`binding.rs`: a keyed hash, the
    /// permit's), `None` when the pin records none (an undecided pin, a sealed decision).
    pub(super) input: Option<crate::binding::Binding>,
}

impl About {
    pub(super) fn of(call: &ToolCall, input: Option<crate::binding::Binding>) -> Self {
        Self {
            tool: call.tool.clone(),
            agent: call.agent.clone(),
            run: call.run,
            literals: call.extensions.get::<NumberLiterals>().cloned(),
            input,
        }
    }

    /// Whether `call` has the tool, agent (and subagent), run settings and number literals
    /// this decision was made about. The input is checked apart ([`About::input`]).
    pub(super) fn names(&self, call: &ToolCall) -> bool {
        self.tool == call.tool
            && self.agent == call.agent
            && self.run == call.run
            && self.literals.as_ref() == call.extensions.get::<NumberLiterals>()
    }
}

impl fmt::Debug for PinnedDecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PinnedDecision")
            .field("decision", &self.decided.decided.decision)
            .finish_non_exhaustive()
    }
}

impl PinnedDecision {
    /// The decision.
    pub fn decision(&self) -> &Decision {
        &self.decided.decided.decision
    }

    /// The snapshot that made it.
    pub fn governance(&self) -> &Arc<Governance> {
        &self.decided.governance
    }

    /// The tool's entry in that snapshot (none when the look-up refused the call).
    pub fn entry(&self) -> Option<&Entry> {
        self.decided.governance.decided_entry(&self.decided.decided)
    }

    /// The agent's profile in that snapshot (none when the call was refused before it was
    /// resolved).
    pub fn agent(&self) -> Option<&ResolvedAgent> {
        self.decided.governance.decided_agent(&self.decided.decided)
    }

    /// The agent (and subagent) of the call the decision was made about.
    pub(crate) fn agent_ref(&self) -> &AgentRef {
        &self.decided.about.agent
    }

    /// The engine's record of the decision, for [`Governance`] methods taking one.
    pub fn decided(&self) -> &Decided {
        &self.decided.decided
    }

    /// The shadow tenant policy's decision of the call (R46), made beside the enforced one
    /// by the same snapshot, on the same input, history and grants; `None` when the
    /// snapshot has no shadow policy. It is recorded, never enforced.
    pub fn shadow(&self) -> Option<&Decided> {
        self.decided.shadow.as_ref()
    }

    /// The canonical hash of `input` — the input of the call this decision was pinned on —
    /// computed once per call and shared by the layers of the handle.
    pub(crate) fn canonical_input_hash(&self, input: &serde_json::Value) -> Option<String> {
        self.decided
            .input_hash
            .get_or_init(|| toolgate_engine::canon::input_hash(input))
            .clone()
    }
}
