//! One shared configuration snapshot, replaced atomically (R23), pinned per call.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;

use crate::binding::Binding;
use toolgate_core::number::NumberLiterals;
use toolgate_core::{AgentRef, CallId, Decision, RunContext, ToolCall, ToolRef};
use toolgate_engine::catalog::Entry;
use toolgate_engine::grant::{GrantStore, NoGrants};
use toolgate_engine::quota::{
    Clock, MemoryQuotaCounter, Millis, NoSends, QuotaCounter, QuotaError, QuotaGroup, SystemClock,
};
use toolgate_engine::{
    CallView, ConfigErrors, Decided, Governance, History, PolicyState, ResolvedAgent,
};

mod labels;
mod ledger;
mod pin;

use labels::ReadLabels;
pub use labels::{LabelsReadFuture, ReadSessionLabels, SessionLabelsLayer};
use ledger::CheckOnly;
pub use ledger::Ledger;
pub(crate) use pin::new_seal;
use pin::{About, PinState};
pub use pin::{Pinned, PinnedDecision};
pub use toolgate_engine::quota::{AsyncQuotaCounter, LabelsFuture, ReserveFuture};

/// Ids of handles: each [`GovernanceHandle::new`] takes the next (clones share it).
static NEXT_HANDLE: AtomicU64 = AtomicU64::new(1);

/// What the layers of one handle share about one call.
struct Shared {
    /// The snapshot that made the decision.
    governance: Arc<Governance>,
    decided: Decided,
    /// The shadow policy's decision (R46), made beside `decided` on the same history; never
    /// enforced.
    shadow: Option<Decided>,
    /// What the call looked like when it was decided: a layer reading the pin checks the
    /// call it holds still looks so, else the decision is not about it (R14, R38).
    about: About,
    /// The canonical (RFC 8785) hash of the decided input, computed by the first layer that
    /// needs it (audit's record, the gate's decision note) and reused by the others.
    input_hash: std::sync::OnceLock<Option<String>>,
    /// The seal of the composite stack whose exposure filter made this pin (0: none): only
    /// toolgate's own filters stand between that filter and the composite's gate, so the
    /// gate may read the pin without hashing the input to compare — once (it takes the
    /// seal; a call that comes round again is compared as usual).
    seal: AtomicU64,
}

impl Shared {
    /// Takes the seal if it is `seal` (non-zero): true once.
    fn take_seal(&self, seal: u64) -> bool {
        seal != 0
            && self
                .seal
                .compare_exchange(seal, 0, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
    }
}

/// A shared, atomically replaceable [`Governance`] snapshot (`arc-swap`).
///
/// ```
/// use toolgate::GovernanceHandle;
/// use toolgate::engine::{Governance, PolicyState, policy::{Limits, Policy}};
///
/// let handle = GovernanceHandle::new(Governance::builder().build().unwrap());
/// let before = handle.load();
/// let policy = Policy::from_json_str(r#"{"rules": [{"effect": "deny"}]}"#, &Limits::default()).unwrap();
/// handle.replace_policy(PolicyState::readable(policy)).unwrap();
/// assert!(!std::sync::Arc::ptr_eq(&before, &handle.load()));
/// ```
#[derive(Clone)]
pub struct GovernanceHandle {
    inner: Arc<ArcSwap<Governance>>,
    /// What calls are decided against over time (R44, R45), shared by clones.
    ledger: Arc<ArcSwap<Ledger>>,
    /// Counts the snapshots stored (see [`GovernanceHandle::generation`]), shared by clones.
    generation: Arc<AtomicU64>,
    /// Binds the pins this handle makes to it (see [`Pinned`]).
    id: u64,
}

/// The tower layers' snapshot is where a store's policy watch puts a stored policy.
impl toolgate_engine::PolicyTarget for GovernanceHandle {
    fn limits(&self) -> toolgate_engine::policy::Limits {
        self.load().settings().limits
    }

    fn replace_policy(&self, state: PolicyState) -> Result<(), ConfigErrors> {
        GovernanceHandle::replace_policy(self, state)
    }

    fn replace_shadow_policy(
        &self,
        shadow: Option<toolgate_engine::policy::Policy>,
    ) -> Result<(), ConfigErrors> {
        GovernanceHandle::replace_shadow_policy(self, shadow)
    }
}

impl fmt::Debug for GovernanceHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GovernanceHandle")
            .field("id", &self.id)
            .field("tools", &self.inner.load().catalog().len())
            .finish()
    }
}

impl GovernanceHandle {
    /// A handle holding `governance`.
    pub fn new(governance: Governance) -> Self {
        Self {
            inner: Arc::new(ArcSwap::from_pointee(governance)),
            ledger: Arc::new(ArcSwap::from_pointee(Ledger::default())),
            generation: Arc::new(AtomicU64::new(0)),
            id: NEXT_HANDLE.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// What calls are decided against over time ([`Ledger`]).
    pub fn ledger(&self) -> Arc<Ledger> {
        self.ledger.load_full()
    }

    /// Counts the quotas' sends (R44) in `sends` from now on — a SQLite or PostgreSQL
    /// counter shared by the processes that must not exceed a quota together.
    pub fn set_quota_counter(&self, sends: Arc<dyn QuotaCounter>) {
        self.ledger.rcu(|l| Ledger {
            sends: Arc::clone(&sends),
            reserving: None,
            ..(**l).clone()
        });
    }

    /// Counts the quotas' sends (R44) in `counter` from now on, a counter reserved
    /// asynchronously ([`AsyncQuotaCounter`]: the PostgreSQL counter shared by the replicas
    /// of a shared inbox). Decisions read its advisory check; each send awaits its atomic
    /// reservation, and a counter that cannot be reached refuses the call.
    pub fn set_async_quota_counter(&self, counter: Arc<dyn AsyncQuotaCounter>) {
        self.ledger.rcu(|l| Ledger {
            sends: Arc::new(CheckOnly(Arc::clone(&counter))),
            reserving: Some(Arc::clone(&counter)),
            ..(**l).clone()
        });
    }

    /// Answers asks by the live grants of `grants` from now on (R45).
    pub fn set_grants(&self, grants: Arc<dyn GrantStore>) {
        self.ledger.rcu(|l| Ledger {
            grants: Arc::clone(&grants),
            ..(**l).clone()
        });
    }

    /// Reads the time from `clock` from now on (a controllable clock in tests).
    pub fn set_clock(&self, clock: Arc<dyn Clock>) {
        self.ledger.rcu(|l| Ledger {
            clock: Arc::clone(&clock),
            ..(**l).clone()
        });
    }

    /// R38, R44, R45: records that the call `decided` (by `governance`) is being sent now,
    /// checking and recording its quotas' sends atomically and counting the grant that
    /// answered it. A refusal means the call must not be sent.
    pub(crate) fn record_send(
        &self,
        governance: &Governance,
        decided: &Decided,
        call: &ToolCall,
    ) -> Result<(), toolgate_core::Refusal> {
        let ledger = self.ledger.load();
        governance.record_send(decided, &ledger.history(call))
    }

    /// Whether sending the call `decided` (by `governance`) must await an asynchronous
    /// reservation ([`GovernanceHandle::record_send_async`]): an asynchronous counter is set
    /// and the call falls in a quota group, or its send records its tool's labels in its
    /// session (R49).
    pub(crate) fn reserves_asynchronously(
        &self,
        governance: &Governance,
        decided: &Decided,
    ) -> bool {
        self.ledger.load().reserving.is_some()
            && (!decided.quota_groups().is_empty() || governance.records_session_labels())
    }

    /// [`GovernanceHandle::record_send`], awaiting an asynchronous counter's atomic
    /// reservation when one is set (R44) — with the sent tool's labels added to the
    /// session's in the same step when the policy selects by session labels (R49) — then
    /// counting the grant that answered the call.
    pub(crate) async fn record_send_async(
        &self,
        governance: &Governance,
        decided: &Decided,
        call: &ToolCall,
    ) -> Result<(), toolgate_core::Refusal> {
        let ledger = self.ledger.load_full();
        let history = ledger.history(call);
        let Some(counter) = &ledger.reserving else {
            return governance.record_send(decided, &history);
        };
        let groups = decided.quota_groups();
        if governance.records_session_labels() {
            let labels = governance
                .decided_entry(decided)
                .and_then(|e| governance.tool_labels(&e.name))
                .unwrap_or_default();
            counter
                .reserve_labelled(groups, history.now, history.session, &labels)
                .await
                .map_err(|e| governance.quota_refusal(groups, &e))?;
        } else if !groups.is_empty() {
            counter
                .reserve(groups, history.now)
                .await
                .map_err(|e| governance.quota_refusal(groups, &e))?;
        }
        // Counted above: the rest of the send (the grant's use) with no second count.
        let rest = History {
            sends: &NoSends,
            ..history
        };
        governance.record_send(decided, &rest)
    }

    /// The id binding pins and permits to this handle and its clones.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// The current snapshot.
    pub fn load(&self) -> Arc<Governance> {
        self.inner.load_full()
    }

    /// How many replacements of the snapshot this handle (or a clone) stored: 0 for the
    /// first snapshot, one more after each [`store`](Self::store), successful
    /// [`replace_policy`](Self::replace_policy), [`update`](Self::update) and
    /// [`update_with`](Self::update_with). A pin records it ([`Pinned::generation`]).
    ///
    /// ```
    /// use toolgate::GovernanceHandle;
    /// use toolgate::engine::Governance;
    /// let handle = GovernanceHandle::new(Governance::builder().build().unwrap());
    /// assert_eq!(handle.generation(), 0);
    /// handle.store(Governance::builder().build().unwrap());
    /// assert_eq!(handle.generation(), 1);
    /// ```
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Counts one replacement, after it was stored.
    fn stored(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Replaces the whole snapshot atomically: every call is decided wholly by the old or
    /// wholly by the new one (R23).
    pub fn store(&self, governance: Governance) {
        self.inner.store(Arc::new(governance));
        self.stored();
    }

    /// Replaces the tenant policy. A refused replacement keeps the old policy (R22).
    pub fn replace_policy(&self, state: PolicyState) -> Result<(), ConfigErrors> {
        let mut error = None;
        self.inner
            .rcu(|current| match current.with_policy(state.clone()) {
                Ok(next) => {
                    // `rcu` may run this again after a concurrent store: only the last
                    // run's result counts.
                    error = None;
                    Arc::new(next)
                }
                Err(e) => {
                    error = Some(e);
                    Arc::clone(current)
                }
            });
        match error {
            Some(e) => Err(e),
            None => {
                self.stored();
                Ok(())
            }
        }
    }

    /// Replaces the shadow tenant policy (R46; `None` removes it), hot like the enforced
    /// policy: calls pinned before keep the snapshot they were pinned to (R23). A refused
    /// replacement (a non-empty shadow with the governor disarmed) keeps the old one.
    ///
    /// ```
    /// use toolgate::GovernanceHandle;
    /// use toolgate::engine::{Governance, policy::{Limits, Policy}};
    /// let handle = GovernanceHandle::new(Governance::builder().build().unwrap());
    /// let deny = Policy::from_json_str(r#"{"rules": [{"effect": "deny"}]}"#, &Limits::default()).unwrap();
    /// handle.replace_shadow_policy(Some(deny)).unwrap();
    /// assert!(handle.load().shadow_policy().is_some());
    /// handle.replace_shadow_policy(None).unwrap();
    /// assert!(handle.load().shadow_policy().is_none());
    /// ```
    pub fn replace_shadow_policy(
        &self,
        shadow: Option<toolgate_engine::policy::Policy>,
    ) -> Result<(), ConfigErrors> {
        self.update_with(|current| {
            current
                .with_shadow_policy(shadow.clone())
                .map(|next| (next, ()))
        })
        .map(|_| ())
    }

    /// Changes the configuration atomically (read-copy-update): `change` gets a builder
    /// holding the current snapshot and returns the next one, which is validated whole. A
    /// change that does not build keeps the current snapshot and returns every error; a
    /// concurrent replacement makes `change` run again on the newer snapshot, so no update
    /// is lost. Calls already pinned keep the snapshot they were pinned to (R23).
    ///
    /// ```
    /// use toolgate::GovernanceHandle;
    /// use toolgate::core::{ApprovalMode, ToolDeclaration, ToolIdentity};
    /// use toolgate::engine::{AgentProfile, Governance};
    ///
    /// let handle = GovernanceHandle::new(
    ///     Governance::builder()
    ///         .tool(ToolDeclaration::new(ToolIdentity::http("refund_order")))
    ///         .agent(AgentProfile::new("support").allow(["refund_order"]))
    ///         .build()
    ///         .unwrap(),
    /// );
    /// handle.update(|b| b.set_override("support", "refund_order", ApprovalMode::Deny)).unwrap();
    /// assert!(handle.load().expose("support").unwrap().tools.is_empty());
    /// assert!(handle.update(|b| b.set_override("nobody", "refund_order", ApprovalMode::Deny)).is_err());
    /// ```
    pub fn update<F>(&self, mut change: F) -> Result<(), ConfigErrors>
    where
        F: FnMut(toolgate_engine::GovernanceBuilder) -> toolgate_engine::GovernanceBuilder,
    {
        self.update_with(|current| change(current.to_builder()).build().map(|next| (next, ())))
            .map(|_| ())
    }

    /// The general form of [`GovernanceHandle::update`]: `change` reads the current snapshot
    /// and returns the next one with a value of its own (what it left out, say), or an error
    /// that keeps the current snapshot. Runs again on the newer snapshot when another writer
    /// stored first (read-copy-update), so no writer's change is lost; returns the snapshot
    /// it stored.
    pub fn update_with<T, F>(&self, mut change: F) -> Result<(Arc<Governance>, T), ConfigErrors>
    where
        F: FnMut(&Governance) -> Result<(Governance, T), ConfigErrors>,
    {
        let mut outcome = None;
        self.inner.rcu(|current| match change(current) {
            Ok((next, value)) => {
                // `rcu` may run this again after a concurrent store: only the last run counts.
                let next = Arc::new(next);
                outcome = Some(Ok((Arc::clone(&next), value)));
                next
            }
            Err(e) => {
                outcome = Some(Err(e));
                Arc::clone(current)
            }
        });
        if matches!(outcome, Some(Ok(_))) {
            self.stored();
        }
        outcome.unwrap_or_else(|| {
            Err(ConfigErrors::one(
                "",
                "the configuration was not changed (internal: no update ran)",
            ))
        })
    }

    /// The snapshot this call is pinned to, pinning the current one if the call has no pin
    /// of this handle made for it. A pin of another handle, or one made for another call
    /// ([`Pinned`]), is replaced: a stack never decides by another stack's snapshot, nor a
    /// call by a snapshot pinned for another call.
    pub fn pin(&self, call: &mut ToolCall) -> Arc<Governance> {
        if let Some(p) = self.pinned(call) {
            return Arc::clone(p.governance());
        }
        let (generation, g) = self.load_counted();
        call.extensions.insert(Pinned {
            handle: self.id,
            call: call.id.clone(),
            generation,
            state: PinState::Snapshot(Arc::clone(&g), About::of(call, None)),
        });
        g
    }

    /// The current snapshot with the generation read just before it (a lower bound of its
    /// own: a replacement stored in between counts only after the load).
    pub(crate) fn load_counted(&self) -> (u64, Arc<Governance>) {
        let generation = self.generation();
        (generation, self.load())
    }

    /// The call's decision by this handle: the one pinned by an earlier layer of this
    /// handle, or else decided now — one [`Governance::decide_call`] (one look-up, one
    /// input-bounds walk) on the pinned snapshot — and pinned for every later layer.
    ///
    /// A pinned decision is read only while it is about the call at hand: a pin made for
    /// another call ([`Pinned`]) is ignored, and a layer between two layers of one handle
    /// that changed the call's tool, agent or subagent, or run settings makes the pin
    /// stale; the call is then decided again by the snapshot in force and pinned anew. The
    /// approval gate also checks the input (`GovernanceHandle::decide_to_send`): no call
    /// runs on a decision made for another input (R14, R38).
    ///
    /// Pinning a new decision hashes the input once (the in-process keyed binding of
    /// `binding.rs`, no serialisation), so that the gate can tell a changed input.
    pub fn decide(&self, call: &mut ToolCall) -> PinnedDecision {
        self.decide_sealing(call, 0)
    }

    /// [`GovernanceHandle::decide`] by the exposure filter of a composite stack whose seal
    /// is `seal` (non-zero): a decision it pins is sealed for that composite's gate and
    /// records no hash of the input (the gate hashes it once, for the permit).
    pub(crate) fn decide_sealing(&self, call: &mut ToolCall, seal: u64) -> PinnedDecision {
        if let Some(d) = self.pinned_decision(call) {
            return d.clone();
        }
        if seal != 0 {
            return self.decide_anew(call, None, seal);
        }
        let input = Some(crate::binding::input(&call.input));
        self.decide_anew(call, input, 0)
    }

    /// The gate's [`GovernanceHandle::decide`]: a pinned decision is read only when the
    /// call's input is also the one it was made for — hashed now and compared with the hash
    /// taken when it was pinned. Returns that hash of the input too, for the permit (one
    /// hash of the input per gate pass).
    ///
    /// The gate of a composite stack passes its `seal` (0 for any other gate): a decision
    /// the composite's own exposure filter pinned and sealed with it is read without the
    /// comparison — nothing but toolgate's filters ran on the call since — and the seal is
    /// taken, so it serves once.
    pub(crate) fn decide_to_send(
        &self,
        call: &mut ToolCall,
        seal: u64,
    ) -> (PinnedDecision, Option<Binding>) {
        let input = Some(crate::binding::input(&call.input));
        if let Some(d) = self.pinned_decision(call)
            && input.is_some()
            && (d.decided.about.input == input || d.decided.take_seal(seal))
        {
            return (d.clone(), input);
        }
        (self.decide_anew(call, input, 0), input)
    }

    /// The decision this handle pinned for `call` while it still names the call's tool,
    /// agent, run settings and literals ([`GovernanceHandle::pinned`]); the input is the
    /// caller's to compare.
    fn pinned_decision<'c>(&self, call: &'c ToolCall) -> Option<&'c PinnedDecision> {
        self.pinned(call).and_then(Pinned::decided)
    }

    /// Decides `call` (whose input hashes to `input`) by the snapshot its pin holds when
    /// the pin is an undecided one this handle pinned for this call, still about it (see
    /// [`Pinned`]), else by the snapshot in force — a decision pinned on it that is read no
    /// more is not about it (it was made for another call, or the call changed since) — and
    /// pins the decision, replacing any other pin.
    fn decide_anew(
        &self,
        call: &mut ToolCall,
        input: Option<Binding>,
        seal: u64,
    ) -> PinnedDecision {
        // The pin is replaced below: its snapshot is moved out, not cloned, where it can be.
        let pinned = call
            .extensions
            .remove::<Pinned>()
            .filter(|p| self.binds(p, call));
        let (generation, governance, about) = match pinned {
            Some(Pinned {
                generation,
                state: PinState::Snapshot(g, mut about),
                ..
            }) => {
                about.input = input;
                (generation, g, about)
            }
            _ => {
                let (generation, g) = self.load_counted();
                (generation, g, About::of(call, input))
            }
        };
        // R44, R45: decided at the time the call is made, against the sends and grants.
        let ledger = self.ledger.load();
        let history = ledger.history(call);
        let decision = governance.decide_call_at(CallView::of(call), Vec::new(), &history);
        // R46: the shadow, on the very same history (one reading of the clock); it reads the
        // sends and grants and records nothing.
        let shadow = governance.decide_shadow_at(CallView::of(call), Vec::new(), &history);
        let decided = PinnedDecision {
            decided: Arc::new(Shared {
                decided: decision,
                shadow,
                about,
                input_hash: std::sync::OnceLock::new(),
                seal: AtomicU64::new(seal),
                governance,
            }),
        };
        call.extensions.insert(Pinned {
            handle: self.id,
            call: call.id.clone(),
            generation,
            state: PinState::Decided(decided.clone()),
        });
        decided
    }

    /// Pins `governance` (a newer snapshot, after an approval wait, loaded when the handle
    /// was at `generation`) for the layers inside, with no decision: they decide again by it.
    pub(crate) fn repin(&self, call: &mut ToolCall, generation: u64, governance: Arc<Governance>) {
        call.extensions.insert(Pinned {
            handle: self.id,
            call: call.id.clone(),
            generation,
            state: PinState::Snapshot(governance, About::of(call, None)),
        });
    }

    /// The pin this handle made on `call` for `call` (see [`Pinned`]), if any: a pin of
    /// another handle, one made for another call and an undecided one older than the
    /// snapshot in force are none.
    pub fn pinned<'c>(&self, call: &'c ToolCall) -> Option<&'c Pinned> {
        call.extensions
            .get::<Pinned>()
            .filter(|p| self.binds(p, call))
    }

    /// Whether `pin` is this handle's pin for `call`: made by it, for the call with this
    /// id, which still has the tool, agent, run settings and number literals it was pinned
    /// with ([`About::names`]; the gate also compares the input, [`About::input`]).
    fn binds(&self, pin: &Pinned, call: &ToolCall) -> bool {
        pin.handle == self.id
            && pin.call == call.id
            && match &pin.state {
                PinState::Snapshot(_, about) => about.names(call),
                PinState::Decided(d) => d.decided.about.names(call),
            }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate_engine::config::{Format, load_str};
    use toolgate_engine::policy::{Limits, Policy};

    #[test]
    fn r22_a_refused_policy_update_keeps_the_old_policy() {
        let h = GovernanceHandle::new(
            load_str(r#"{"enforce_tool_invocation": false}"#, Format::Json).unwrap(),
        );
        let before = h.load();
        let deny = Policy::from_json_str(r#"{"rules": [{"effect": "deny"}]}"#, &Limits::default())
            .unwrap();
        assert!(h.replace_policy(PolicyState::readable(deny)).is_err());
        assert!(Arc::ptr_eq(&before, &h.load()), "nothing was replaced");
    }
}
