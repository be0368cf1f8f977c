//! The one pure decision core: exposure (R6–R13) and invocation (R14–R17, R22, R25–R26,
//! R36). Synchronous, no I/O: the tower layers and the CLI call these functions, and no
//! check is written anywhere else.
//!
//! One thing because exposure and invocation must read the same resolution of agent, tool and
//! posture: kept in one `impl Governance` so the two cannot drift apart (R8, R13).

use serde_json::Value;
use toolgate_core::{
    AgentRef, ApprovalMode, Ask, AskSource, ChannelKind, Check, Decision, MatchedRule,
    NetworkScope, Refusal, RefusalCode, RunContext, RunMode, ToolRef, Verdict,
};

use crate::catalog::Entry;
use crate::exposure::{ExposedTool, Exposure, OmittedTool, UnknownAgent};
use crate::governance::{Governance, PolicyState, ResolvedAgent};
use crate::grant::{GrantStore, NoGrants};
use crate::json;
use crate::number::{self, NumberLiterals};
use crate::policy::{Effect, PerKey, Policy, RuleCover, Subject};
use crate::quota::{Millis, NoSends, QuotaCounter, QuotaError, QuotaGroup, group_key};
use crate::quota_cover::{Cover, Item};
use std::sync::Arc;
use toolgate_core::names::lower_key;

/// One call's [`Decision`] with where it was made: the tool's entry and the agent's
/// profile, as positions in the snapshot that decided it ([`Governance::decide_call`]).
/// Read them back with the **same** snapshot ([`Governance::decided_entry`],
/// [`Governance::decided_agent`]); `toolgate` keeps the two together in one pin.
#[derive(Debug, Clone)]
pub struct Decided {
    /// The decision.
    pub decision: Decision,
    entry: Option<usize>,
    agent: Option<usize>,
    /// The quota groups the call falls in (R44), for [`Governance::record_send`].
    quotas: Groups,
}

impl Decided {
    /// The groups of every quota covering the call (R44): what a send of it counts in.
    pub fn quota_groups(&self) -> &[QuotaGroup] {
        self.quotas.as_slice()
    }
}

/// A call's quota groups: none, a slice the snapshot shares between every call of one
/// profile to one tool (`quota_cover.rs`: nothing allocated per call), or the call's own.
#[derive(Debug, Clone, Default)]
enum Groups {
    #[default]
    None,
    Shared(Arc<[QuotaGroup]>),
    Owned(Vec<QuotaGroup>),
}

impl Groups {
    fn as_slice(&self) -> &[QuotaGroup] {
        match self {
            Groups::None => &[],
            Groups::Shared(g) => g,
            Groups::Owned(g) => g,
        }
    }
}

/// What a call is decided against besides the snapshot and the call itself (R44, R45): the
/// time it is made at, its session (R43), the sends before it (quotas) and the grants given.
/// [`History::none`] is what [`Governance::decide`] sees: no sends, no grants.
///
/// ```
/// use serde_json::json;
/// use toolgate_core::{AgentRef, RefusalCode, ToolCall, Verdict};
/// use toolgate_engine::config::{load_str, Format};
/// use toolgate_engine::grant::NoGrants;
/// use toolgate_engine::quota::MemoryQuotaCounter;
/// use toolgate_engine::{CallView, History};
/// let gov = load_str(r#"{"tools": [{"kind": "http", "name": "search"}],
///     "agents": [{"name": "a", "allowed_tools": ["search"]}],
///     "policy": {"rules": [], "quotas": [{"max": 1, "window_secs": 60, "reason": "one a minute"}]}}"#,
///     Format::Json).unwrap();
/// let call = ToolCall::new(AgentRef::profile("a"), "search", json!({}));
/// let sends = MemoryQuotaCounter::new();
/// let at = |now| History::new(now, &sends, &NoGrants);
/// let first = gov.decide_call_at(CallView::of(&call), Vec::new(), &at(0));
/// assert!(first.decision.runs());
/// gov.record_send(&first, &at(0)).unwrap();
/// let second = gov.decide_at(CallView::of(&call), &at(1_000));
/// assert_eq!(second.verdict, Verdict::Refused(RefusalCode::RateLimited));
/// assert_eq!(second.retry_after_secs, Some(59));
/// assert_eq!(second.reasons[0], "one a minute");
/// ```
#[derive(Clone, Copy)]
pub struct History<'a> {
    /// When the call is made, in milliseconds since the Unix epoch.
    pub now: Millis,
    /// The session the call belongs to (R43): quotas `per: ["session"]` and grants'
    /// `session` read it.
    pub session: Option<&'a str>,
    /// The sends counted for quotas (R44).
    pub sends: &'a dyn QuotaCounter,
    /// The grants (R45).
    pub grants: &'a dyn GrantStore,
}

impl History<'static> {
    /// No history: no sends (no quota is ever full), no grants.
    pub fn none() -> Self {
        History {
            now: 0,
            session: None,
            sends: &NoSends,
            grants: &NoGrants,
        }
    }
}

impl<'a> History<'a> {
    /// A call made at `now` against these sends and grants, in no session.
    pub fn new(now: Millis, sends: &'a dyn QuotaCounter, grants: &'a dyn GrantStore) -> Self {
        Self {
            now,
            session: None,
            sends,
            grants,
        }
    }

    /// The same, for a call of `session`.
    #[must_use]
    pub fn in_session(mut self, session: Option<&'a str>) -> Self {
        self.session = session;
        self
    }
}

impl std::fmt::Debug for History<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("History")
            .field("now", &self.now)
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

/// A call's input as the engine receives it.
#[derive(Debug, Clone, Copy)]
pub enum CallInput<'a> {
    /// A parsed value (the tower layers).
    Value(&'a Value),
    /// JSON text not yet parsed (the CLI): its depth is measured before any value is built,
    /// so an input nested past a parser's recursion limit is still refused `invalid_input`.
    /// Its numbers are read as written ([`crate::number`]).
    Text(&'a str),
    /// A parsed value with the number literals of the text it was parsed from
    /// ([`crate::number::parse_with_literals`]): numbers are compared (R20) and counted
    /// (R36) as written.
    WithLiterals(&'a Value, &'a NumberLiterals),
}

/// One call, borrowed, as the engine decides it.
#[derive(Debug, Clone, Copy)]
pub struct CallView<'a> {
    /// The tool as the call names it.
    pub tool: &'a ToolRef,
    /// The calling agent.
    pub agent: &'a AgentRef,
    /// The input.
    pub input: CallInput<'a>,
    /// The run's settings.
    pub run: RunContext,
}

impl<'a> CallView<'a> {
    /// A view of a [`toolgate_core::ToolCall`], with the [`NumberLiterals`] its extensions
    /// carry, if any.
    pub fn of(call: &'a toolgate_core::ToolCall) -> Self {
        let input = match call.extensions.get::<NumberLiterals>() {
            Some(literals) => CallInput::WithLiterals(&call.input, literals),
            None => CallInput::Value(&call.input),
        };
        Self {
            tool: &call.tool,
            agent: &call.agent,
            input,
            run: call.run,
        }
    }
}

/// What exposure decides about one tool for one agent (shared by `expose` and the checks).
enum Standing {
    Raw,
    Wrapped,
    Omitted(Refusal),
}

impl Governance {
    // ----- the checks, one place each -----

    /// R14 step 1: the tool resolves to a registered tool.
    pub fn lookup(&self, tool: &ToolRef) -> Result<&Entry, Refusal> {
        let unknown = |shown: String| {
            Refusal::new(
                RefusalCode::UnknownTool,
                Check::UnknownTool,
                format!("no registered tool is named `{shown}`"),
            )
        };
        match tool {
            ToolRef::Name(name) => self.catalog.get(name).ok_or_else(|| unknown(name.clone())),
            ToolRef::Identity(id) => self
                .catalog
                .get_identity(id)
                .ok_or_else(|| unknown(tool.display_name())),
            ToolRef::Both { name, identity } => {
                let by_name = self.catalog.get(name);
                let by_id = self.catalog.get_identity(identity);
                match (by_name, by_id) {
                    (Some(a), Some(b)) if a.key == b.key => Ok(a),
                    (Some(_), Some(_)) => Err(Refusal::new(
                        RefusalCode::UnknownTool,
                        Check::UnknownTool,
                        format!(
                            "the call names `{name}` and {identity}, which are different tools"
                        ),
                    )),
                    _ => Err(unknown(name.clone())),
                }
            }
        }
    }

    /// R36: the input is an object within the size and depth bounds. Never recurses past
    /// the depth bound.
    pub fn check_input(&self, input: &Value) -> Result<(), Refusal> {
        self.check_input_exact(input, NumberLiterals::none())
    }

    /// As [`Governance::check_input`], counting numbers as written where `literals` records
    /// them (SPEC §8: the compact serialisation has each number as written).
    pub fn check_input_exact(
        &self,
        input: &Value,
        literals: &NumberLiterals,
    ) -> Result<(), Refusal> {
        #[cfg(feature = "walk-count")]
        crate::walk_count::bump();
        let limits = &self.settings.limits;
        // One walk for both bounds (the depth is still reported first, SPEC §8).
        let m = number::measure(
            input,
            literals,
            limits.max_input_depth,
            limits.max_input_bytes,
        );
        if m.too_deep {
            return Err(too_deep(limits.max_input_depth));
        }
        if !input.is_object() {
            return Err(Refusal::new(
                RefusalCode::InvalidInput,
                Check::InputBounds,
                "the input must be a JSON object",
            ));
        }
        if !m.within {
            return Err(too_big(limits.max_input_bytes));
        }
        Ok(())
    }

    /// R14 step 2 (with R39): the profile exists and allows the tool.
    pub fn check_allowed<'g>(
        &'g self,
        agent: &AgentRef,
        entry: &Entry,
    ) -> Result<&'g ResolvedAgent, Refusal> {
        let Some(profile) = self.agent(&agent.profile) else {
            return Err(Refusal::new(
                RefusalCode::NotAllowed,
                Check::Allowed,
                format!("no agent profile is named `{}`", agent.profile),
            ));
        };
        // SPEC §8: a subagent id never shadows a profile. Rules' `agent` patterns match the
        // subagent id (R19), so an id that is another profile's name would take that
        // profile's rules by accident; such a call is refused at this step.
        if let Some(id) = &agent.subagent
            && let Some(other) = self.agent(id)
            && !std::ptr::eq(other, profile)
        {
            return Err(Refusal::new(
                RefusalCode::NotAllowed,
                Check::Allowed,
                format!(
                    "subagent id `{id}` is the name of agent profile `{}`, but the call runs under profile `{}`: a subagent id may not shadow a profile",
                    other.name, profile.name
                ),
            ));
        }
        if !profile.allows(&entry.key) {
            return Err(not_allowed(profile, entry));
        }
        Ok(profile)
    }

    /// R14 step 3: confidential work (R7).
    pub fn check_confidential(&self, agent: &ResolvedAgent, entry: &Entry) -> Result<(), Refusal> {
        if agent.confidential && entry.confidential {
            return Err(Refusal::new(
                RefusalCode::Confidential,
                Check::Confidentiality,
                format!(
                    "agent `{}` does confidential work and `{}` is withheld from confidential work",
                    agent.name, entry.name
                ),
            ));
        }
        Ok(())
    }

    /// R14 step 4: the air gap (R8).
    pub fn check_air_gap(&self, entry: &Entry) -> Result<(), Refusal> {
        if self.settings.air_gapped && entry.network == NetworkScope::Egress {
            return Err(Refusal::new(
                RefusalCode::AirGapped,
                Check::AirGap,
                format!(
                    "the host is air-gapped and `{}` has effective network scope `egress`",
                    entry.name
                ),
            ));
        }
        Ok(())
    }

    /// R14 steps 5–6: the effective mode denies (R10), or wraps a tool for an agent with no
    /// approval channel (R11). Returns the effective mode.
    pub fn check_agent_mode(
        &self,
        agent: &ResolvedAgent,
        entry: &Entry,
    ) -> Result<ApprovalMode, Refusal> {
        let mode = self.effective_mode(agent, entry);
        if mode == ApprovalMode::Deny {
            return Err(Refusal::new(
                RefusalCode::Denied,
                Check::AgentMode,
                format!(
                    "the effective approval mode of `{}` for agent `{}` is `deny`",
                    entry.name, agent.name
                ),
            ));
        }
        if mode == ApprovalMode::RequireApproval && agent.as_tool {
            return Err(as_tool_refusal(agent, entry, Check::AgentMode));
        }
        Ok(mode)
    }

    /// Whether the posture gates this tool, and why (R12, R27–R31).
    pub fn posture_ask(&self, entry: &Entry) -> Option<String> {
        if !(self.settings.require_approval_for_non_read_only
            && self.settings.enforce_tool_invocation)
        {
            return None;
        }
        entry.posture_gated().map(|why| {
            format!(
                "`{}` has not credibly declared itself read-only: {why} (behaviour posture)",
                entry.name
            )
        })
    }

    // ----- exposure -----

    fn standing(&self, agent: &ResolvedAgent, entry: &Entry) -> Standing {
        if !agent.allows(&entry.key) {
            return Standing::Omitted(not_allowed(agent, entry));
        }
        let mode = self
            .check_confidential(agent, entry)
            .and_then(|()| self.check_air_gap(entry))
            .and_then(|()| self.check_agent_mode(agent, entry));
        let mode = match mode {
            Ok(m) => m,
            Err(r) => return Standing::Omitted(r),
        };
        if entry.ungoverned {
            // R42: the approval decision never applies, so the tool is never wrapped.
            return Standing::Raw;
        }
        // Whether the posture gates the tool, without writing its reason (exposure only).
        let posture = self.settings.require_approval_for_non_read_only
            && self.settings.enforce_tool_invocation
            && entry.posture_gated().is_some();
        if mode == ApprovalMode::RequireApproval || posture {
            if agent.as_tool {
                // R11: a tool the posture would wrap is omitted too.
                return Standing::Omitted(as_tool_refusal(agent, entry, Check::Routing));
            }
            return Standing::Wrapped;
        }
        Standing::Raw
    }

    /// The tools one agent's model is shown, and those omitted with their refusal
    /// (R6–R13). A copy of [`Governance::exposure`].
    pub fn expose(&self, agent: &str) -> Result<Exposure, UnknownAgent> {
        self.exposure(agent).map(|e| (*e).clone())
    }

    /// As [`Governance::expose`], shared: computed once per agent per snapshot, so an agent
    /// asking for its tool list every turn costs one look-up and one `Arc` clone.
    ///
    /// ```
    /// use toolgate_core::{ToolDeclaration, ToolIdentity};
    /// use toolgate_engine::{AgentProfile, Governance};
    /// let gov = Governance::builder()
    ///     .tool(ToolDeclaration::new(ToolIdentity::http("refund_order")))
    ///     .agent(AgentProfile::new("support").allow(["refund_order"]))
    ///     .build().unwrap();
    /// let first = gov.exposure("support").unwrap();
    /// let again = gov.exposure("SUPPORT").unwrap();
    /// assert!(std::sync::Arc::ptr_eq(&first, &again));
    /// assert_eq!(first.tools[0].name, "refund_order");
    /// ```
    pub fn exposure(&self, agent: &str) -> Result<std::sync::Arc<Exposure>, UnknownAgent> {
        let unknown = || UnknownAgent(agent.to_owned());
        let &index = self
            .agent_index
            .get(toolgate_core::names::lower_key(agent).as_ref())
            .ok_or_else(unknown)?;
        let profile = self.agents.get(index).ok_or_else(unknown)?;
        self.exposures
            .get_or_init(index, || self.compute_exposure(profile))
            .ok_or_else(unknown)
    }

    fn compute_exposure(&self, profile: &ResolvedAgent) -> Exposure {
        // Sized once: growing the lists by doubling was over half of a first exposure's
        // instructions at 10,000 tools (issue 26), each step a reallocation and a copy.
        // Whatever is left over is given back below (the exposure is kept per agent).
        let mut tools = Vec::with_capacity(self.catalog.entries().len());
        let mut omitted = Vec::new();
        // Walked in name order (sealed once per snapshot): no sort, no key allocation.
        for entry in self.catalog.sorted() {
            match self.standing(profile, entry) {
                Standing::Raw => tools.push(ExposedTool {
                    name: entry.name.clone(),
                    wrapped: false,
                    description: entry.description().map(str::to_owned),
                }),
                Standing::Wrapped => tools.push(ExposedTool {
                    name: entry.name.clone(),
                    wrapped: true,
                    description: entry.description().map(str::to_owned),
                }),
                Standing::Omitted(refusal) => omitted.push(OmittedTool {
                    name: entry.name.clone(),
                    refusal,
                }),
            }
        }
        tools.shrink_to_fit();
        Exposure {
            agent: profile.name.clone(),
            tools,
            omitted,
        }
    }

    // ----- invocation -----

    /// Decides one call: every check of R14 in order, first refusal wins, then the approval
    /// decision (R15–R17, R22, R25–R26). Pure: the same snapshot and call always give the
    /// same decision.
    pub fn decide(&self, call: CallView<'_>) -> Decision {
        self.decide_with(call, Vec::new())
    }

    /// As [`Governance::decide`], with asks from outside the engine (a hook's, R32) joined
    /// into the one question (R17). Such asks are operator decisions: no run mode loosens
    /// them (R25).
    pub fn decide_with(&self, call: CallView<'_>, extra_asks: Vec<Ask>) -> Decision {
        self.decide_call_at(call, extra_asks, &History::none())
            .decision
    }

    /// As [`Governance::decide`], at a time and against a history of sends and grants
    /// (R44, R45): a full quota refuses `rate_limited` (step 7, after a tenant deny and
    /// before any ask is routed), and a live matching grant answers an ask. Nothing is
    /// recorded: a call that is sent is counted with [`Governance::record_send`].
    pub fn decide_at(&self, call: CallView<'_>, history: &History<'_>) -> Decision {
        self.decide_call_at(call, Vec::new(), history).decision
    }

    /// As [`Governance::decide`], keeping where the decision was made: the tool's entry and
    /// the agent's profile in this snapshot, so a caller holding the snapshot reads them
    /// without a second look-up ([`Governance::decided_entry`],
    /// [`Governance::decided_agent`]) and can join a hook's ask without deciding again
    /// ([`Governance::with_extra_asks`]).
    ///
    /// ```
    /// use serde_json::json;
    /// use toolgate_core::{AgentRef, ToolRef, Verdict, RunContext};
    /// use toolgate_engine::{config::{self, Format}, CallInput, CallView};
    /// let gov = config::load_str(r#"{"tools": [{"kind": "http", "name": "lookup"}],
    ///     "agents": [{"name": "dev", "allowed_tools": ["lookup"]}]}"#, Format::Json).unwrap();
    /// let (tool, agent, input) = (ToolRef::Name("LOOKUP".into()), AgentRef::profile("dev"), json!({}));
    /// let d = gov.decide_call(CallView { tool: &tool, agent: &agent, input: CallInput::Value(&input), run: RunContext::default() });
    /// assert!(d.decision.runs());
    /// assert_eq!(gov.decided_entry(&d).unwrap().name, "lookup");
    /// assert_eq!(gov.decided_agent(&d).unwrap().name, "dev");
    /// ```
    pub fn decide_call(&self, call: CallView<'_>) -> Decided {
        self.decide_call_at(call, Vec::new(), &History::none())
    }

    /// As [`Governance::decide_call`], with a hook's asks (as [`Governance::decide_with`])
    /// and at a time, against a history (as [`Governance::decide_at`]).
    pub fn decide_call_at(
        &self,
        call: CallView<'_>,
        extra_asks: Vec<Ask>,
        history: &History<'_>,
    ) -> Decided {
        self.decide_under(&self.policy, call, extra_asks, history)
    }

    /// As [`Governance::decide_call_at`], under the shadow tenant policy (R46) in place of
    /// the enforced one: the same call, history (sends, grants, time) and hook asks, so the
    /// two decisions differ only where the policies do. `None` when no shadow is set.
    ///
    /// Nothing is recorded or enforced: the caller records the shadow's decision (audit,
    /// span, metric) and acts on the enforced one only. The shadow never asks anyone, never
    /// counts a send ([`Governance::record_send`] is for the enforced decision) and never
    /// spends a grant.
    ///
    /// ```
    /// use serde_json::json;
    /// use toolgate_core::{AgentRef, RefusalCode, ToolCall, Verdict};
    /// use toolgate_engine::config::{load_str, Format};
    /// use toolgate_engine::{CallView, History};
    /// let gov = load_str(r#"{"tools": [{"kind": "http", "name": "refund"}],
    ///     "agents": [{"name": "a", "allowed_tools": ["refund"]}],
    ///     "policy_shadow": {"rules": [{"effect": "deny", "tool": "refund"}]}}"#, Format::Json).unwrap();
    /// let call = ToolCall::new(AgentRef::profile("a"), "refund", json!({}));
    /// let enforced = gov.decide_call_at(CallView::of(&call), Vec::new(), &History::none());
    /// let shadow = gov.decide_shadow_at(CallView::of(&call), Vec::new(), &History::none()).unwrap();
    /// assert!(enforced.decision.runs());
    /// assert_eq!(shadow.decision.verdict, Verdict::Refused(RefusalCode::Denied));
    /// ```
    pub fn decide_shadow_at(
        &self,
        call: CallView<'_>,
        extra_asks: Vec<Ask>,
        history: &History<'_>,
    ) -> Option<Decided> {
        let shadow = PolicyState::Readable(std::sync::Arc::clone(self.shadow.as_ref()?));
        Some(self.decide_under(&shadow, call, extra_asks, history))
    }

    /// The one decision, under `policy` (the enforced one, or the shadow).
    fn decide_under(
        &self,
        policy: &PolicyState,
        call: CallView<'_>,
        extra_asks: Vec<Ask>,
        history: &History<'_>,
    ) -> Decided {
        let entry = match self.lookup(call.tool) {
            Ok(e) => e,
            Err(r) => {
                return Decided {
                    decision: Decision::refused(r),
                    entry: None,
                    agent: None,
                    quotas: Groups::None,
                };
            }
        };
        let mut agent = None;
        let mut quotas = Groups::None;
        let decision = self.decide_entry(
            policy,
            entry,
            call,
            extra_asks,
            history,
            &mut agent,
            &mut quotas,
        );
        Decided {
            decision,
            entry: self.catalog.index_of(entry),
            agent,
            quotas,
        }
    }

    /// Records that a call decided by **this** snapshot is being sent (R38, R44, R45): checks
    /// every quota group it falls in and records the send in each, atomically
    /// ([`QuotaCounter::reserve`]), then counts the send under the grant that answered it.
    /// Call it right before sending a call that runs, or an asked call once approved; a
    /// refusal means the call must not be sent.
    ///
    /// The grant is read from `decided.decision.granted`: when a hook's ask was joined
    /// later ([`Governance::with_extra_asks_at`]), put that decision into `decided` first.
    ///
    /// A full quota refuses `rate_limited`. A grant that stopped being live since the
    /// decision (spent by a concurrent call, revoked, expired) refuses `rejected`; the quota
    /// send already recorded then stays counted (strict: never more than `max` sends).
    pub fn record_send(&self, decided: &Decided, history: &History<'_>) -> Result<(), Refusal> {
        let groups = decided.quotas.as_slice();
        if let Err(e) = history.sends.reserve(groups, history.now) {
            return Err(self.quota_refusal_in(&self.policy, groups, &e));
        }
        if let Some(g) = &decided.decision.granted {
            let used = history.grants.record_use(&g.id, history.now);
            if !matches!(used, Ok(true)) {
                let why = match used {
                    Err(e) => e.to_string(),
                    _ => format!(
                        "grant `{}` no longer answers the call: it expired, was revoked or was spent",
                        g.id
                    ),
                };
                return Err(Refusal::with_reasons(
                    RefusalCode::Rejected,
                    Check::Grant,
                    std::iter::once(why)
                        .chain(decided.decision.reasons.iter().cloned())
                        .collect(),
                ));
            }
        }
        Ok(())
    }

    /// The refusal for a counter's answer about `groups` (R44): `rate_limited` with the
    /// quotas' reasons and `retry_after_secs` when full; refused (fail closed) when the
    /// counter cannot be used. For a host that reserves sends itself (an asynchronous
    /// counter) and must refuse as [`Governance::record_send`] does.
    pub fn quota_refusal(&self, groups: &[QuotaGroup], err: &QuotaError) -> Refusal {
        self.quota_refusal_in(&self.policy, groups, err)
    }

    /// As [`Governance::quota_refusal`], with the quotas of `policy` (the enforced one or
    /// the shadow, R46).
    fn quota_refusal_in(
        &self,
        policy: &PolicyState,
        groups: &[QuotaGroup],
        err: &QuotaError,
    ) -> Refusal {
        let policy = match policy {
            PolicyState::Readable(p) => Some(p.as_ref()),
            PolicyState::Unreadable(_) => None,
        };
        match err {
            QuotaError::Full(full) => {
                let mut reasons: Vec<String> = Vec::new();
                for &i in &full.full {
                    let Some(g) = groups.get(i) else { continue };
                    let why = policy
                        .and_then(|p| p.quotas().get(g.quota))
                        .map(|q| q.describe(g.quota))
                        .unwrap_or_else(|| format!("tenant policy quota {} is full", g.quota));
                    if !reasons.contains(&why) {
                        reasons.push(why);
                    }
                }
                let secs = full.retry_after_secs();
                reasons.push(format!(
                    "the call's quota is full; it could run again in {secs} s (R44)"
                ));
                let mut r = Refusal::with_reasons(RefusalCode::RateLimited, Check::Quota, reasons);
                r.retry_after_secs = Some(secs);
                r
            }
            QuotaError::Unavailable(why) => Refusal::new(
                RefusalCode::RateLimited,
                Check::Quota,
                format!(
                    "the quota counter cannot be used, so the call is refused (fail closed): {why}"
                ),
            ),
        }
    }

    /// The groups of every quota covering a call (R44): a quota covers the call when it
    /// covers any of its records (R24). Read from the snapshot's cover of the (profile,
    /// tool) pair (`quota_cover.rs`): only quotas with a `when` or a session key are looked
    /// at per call, and a call with neither allocates nothing.
    fn quota_groups(
        &self,
        policy: &Arc<Policy>,
        entry: &Entry,
        agent: &ResolvedAgent,
        who: &AgentRef,
        session: Option<&str>,
        (input, literals): (&Value, &NumberLiterals),
    ) -> Groups {
        if policy.quotas().is_empty() {
            return Groups::None;
        }
        let build = || self.quota_cover(policy, entry, who.rule_name());
        // A subagent's id is the rules' agent (R19): such calls are not cached.
        let cached = match (
            &who.subagent,
            self.agent_position(agent),
            self.catalog.index_of(entry),
        ) {
            (None, Some(a), Some(e)) => self.quota_covers.get(policy, a, e, build),
            _ => None,
        };
        let (held, owned);
        let cover: &Cover = match cached {
            Some(h) => {
                held = h;
                &held
            }
            None => {
                owned = build();
                &owned
            }
        };
        if let Some(fixed) = &cover.fixed {
            return Groups::Shared(Arc::clone(fixed));
        }
        let mut out = Vec::new();
        for item in &cover.items {
            match item {
                Item::Fixed(g) => out.push(g.clone()),
                Item::PerCall { quota, by_input } => {
                    if *by_input
                        && !entry.records.iter().any(|r| {
                            let id = r.identity();
                            let subject = Subject {
                                kind: id.kind(),
                                tool: id.name(),
                                server: id.server(),
                                agent: who.rule_name(),
                            };
                            policy.quota_covers(*quota, &subject, input, literals)
                        })
                    {
                        continue;
                    }
                    out.extend(quota_group(policy, *quota, entry, who.rule_name(), session));
                }
            }
        }
        if out.is_empty() {
            Groups::None
        } else {
            Groups::Owned(out)
        }
    }

    /// Which quotas could cover the calls of `agent` (the rules' agent name) to `entry`,
    /// and the groups of those that cover every such call the same way.
    fn quota_cover(&self, policy: &Policy, entry: &Entry, agent: &str) -> Cover {
        let mut candidates: Vec<(usize, bool)> = Vec::new();
        for record in &entry.records {
            let id = record.identity();
            let subject = Subject {
                kind: id.kind(),
                tool: id.name(),
                server: id.server(),
                agent,
            };
            policy.quota_candidates(&subject, &mut candidates);
        }
        // A quota that covers one record whatever the input covers the call (R24): sorted,
        // its `false` comes first and is the one kept.
        candidates.sort_unstable();
        candidates.dedup_by_key(|c| c.0);
        let items = candidates
            .into_iter()
            .filter_map(|(i, by_input)| {
                let q = policy.quotas().get(i)?;
                let per_session = q.per().contains(&PerKey::Session);
                Some(if by_input || per_session {
                    Item::PerCall { quota: i, by_input }
                } else {
                    Item::Fixed(quota_group(policy, i, entry, agent, None)?)
                })
            })
            .collect();
        Cover::new(items)
    }

    /// The steps after the look-up, recording the agent's index when it is resolved.
    #[expect(
        clippy::too_many_arguments,
        reason = "the resolved parts of one call, each borrowed once; a struct would only rename them"
    )]
    fn decide_entry(
        &self,
        policy: &PolicyState,
        entry: &Entry,
        call: CallView<'_>,
        extra_asks: Vec<Ask>,
        history: &History<'_>,
        agent_at: &mut Option<usize>,
        quotas: &mut Groups,
    ) -> Decision {
        let parsed;
        let (input, literals): (&Value, &NumberLiterals) = match call.input {
            CallInput::Value(v) => (v, NumberLiterals::none()),
            CallInput::WithLiterals(v, l) => (v, l),
            CallInput::Text(text) => match self.parse_input(text) {
                Ok(v) => {
                    parsed = (v, NumberLiterals::scan(text));
                    (&parsed.0, &parsed.1)
                }
                Err(r) => return Decision::refused(r),
            },
        };
        if let Err(r) = self.check_input_exact(input, literals) {
            return Decision::refused(r);
        }
        let agent = match self.check_allowed(call.agent, entry) {
            Ok(a) => a,
            Err(r) => return Decision::refused(r),
        };
        *agent_at = self.agent_position(agent);
        let mode = match self
            .check_confidential(agent, entry)
            .and_then(|()| self.check_air_gap(entry))
            .and_then(|()| self.check_agent_mode(agent, entry))
        {
            Ok(m) => m,
            Err(r) => return Decision::refused(r),
        };
        if entry.ungoverned {
            // R42: the host's own tool bypasses the approval decision entirely: no
            // agent-level ask, no tenant rule, no posture, no hook's ask.
            return Decision {
                verdict: Verdict::Run {
                    auto_approved: false,
                },
                decided_by: Check::Passed,
                reasons: Vec::new(),
                asks: Vec::new(),
                matched_rules: Vec::new(),
                granted: None,
                retry_after_secs: None,
            };
        }
        self.approval(
            policy,
            entry,
            agent,
            mode,
            call,
            (input, literals),
            extra_asks,
            history,
            quotas,
        )
    }

    /// The index of a profile of this snapshot (pointer identity: O(1)).
    fn agent_position(&self, agent: &ResolvedAgent) -> Option<usize> {
        let base = self.agents.as_ptr() as usize;
        let at = (agent as *const ResolvedAgent as usize).checked_sub(base)?
            / std::mem::size_of::<ResolvedAgent>().max(1);
        self.agents
            .get(at)
            .filter(|a| std::ptr::eq(*a, agent))
            .map(|_| at)
    }

    /// The tool entry a [`Decided`] made by **this** snapshot was decided for (none when the
    /// look-up refused the call).
    pub fn decided_entry(&self, decided: &Decided) -> Option<&Entry> {
        decided.entry.and_then(|i| self.catalog.entries().get(i))
    }

    /// The agent profile a [`Decided`] made by **this** snapshot was decided for (none when
    /// the call was refused before the profile was resolved).
    pub fn decided_agent(&self, decided: &Decided) -> Option<&ResolvedAgent> {
        decided.agent.and_then(|i| self.agents.get(i))
    }

    /// A [`Decided`] made by **this** snapshot with asks from outside the engine (a hook's,
    /// R32) joined in: the same decision as [`Governance::decide_with`] gives with those asks,
    /// without deciding again (no look-up, no input walk, no policy evaluation). A decision
    /// that was refused before routing stays refused; one with no entry or agent (never a
    /// routed one) is returned unchanged.
    pub fn with_extra_asks(&self, decided: &Decided, run: RunContext, extra: Vec<Ask>) -> Decision {
        self.join_asks(decided, run, extra, &mut || Ok(None))
    }

    /// As [`Governance::with_extra_asks`], with the grants of `history` (R45: a grant
    /// answers the call's one question whatever asked it, a hook included). `call` is the
    /// call `decided` was made for.
    pub fn with_extra_asks_at(
        &self,
        decided: &Decided,
        call: CallView<'_>,
        extra: Vec<Ask>,
        history: &History<'_>,
    ) -> Decision {
        let Some(entry) = self.decided_entry(decided) else {
            return decided.decision.clone();
        };
        let parsed;
        let (input, literals): (&Value, &NumberLiterals) = match call.input {
            CallInput::Value(v) => (v, NumberLiterals::none()),
            CallInput::WithLiterals(v, l) => (v, l),
            CallInput::Text(text) => match self.parse_input(text) {
                Ok(v) => {
                    parsed = (v, NumberLiterals::scan(text));
                    (&parsed.0, &parsed.1)
                }
                Err(_) => return self.with_extra_asks(decided, call.run, extra),
            },
        };
        let mut find = || self.find_grant(entry, call.agent, (input, literals), history);
        self.join_asks(decided, call.run, extra, &mut find)
    }

    fn join_asks(
        &self,
        decided: &Decided,
        run: RunContext,
        extra: Vec<Ask>,
        find_grant: &mut dyn FnMut() -> GrantLookup,
    ) -> Decision {
        let routed = !matches!(decided.decision.verdict, Verdict::Refused(_))
            || decided.decision.decided_by == Check::Routing;
        let (Some(entry), Some(agent)) = (self.decided_entry(decided), self.decided_agent(decided))
        else {
            return decided.decision.clone();
        };
        if !routed || entry.ungoverned || extra.is_empty() {
            return decided.decision.clone();
        }
        let mut asks = decided.decision.asks.clone();
        asks.extend(extra);
        self.route_with(
            entry,
            agent,
            asks,
            decided.decision.matched_rules.clone(),
            run,
            find_grant,
        )
    }

    /// The first live grant answering a call (R45): it must match every record (R24).
    fn find_grant(
        &self,
        entry: &Entry,
        who: &AgentRef,
        (input, literals): (&Value, &NumberLiterals),
        history: &History<'_>,
    ) -> GrantLookup {
        history
            .grants
            .first_live(history.now, &mut |g| {
                entry.records.iter().all(|r| {
                    let id = r.identity();
                    let subject = Subject {
                        kind: id.kind(),
                        tool: id.name(),
                        server: id.server(),
                        agent: who.rule_name(),
                    };
                    g.matches(&subject, history.session, input, literals)
                })
            })
            .map_err(|e| e.to_string())
    }

    /// Parses input text after measuring its depth (R36, SPEC §8).
    fn parse_input(&self, text: &str) -> Result<Value, Refusal> {
        let limits = &self.settings.limits;
        if json::raw_depth(text) > limits.max_input_depth {
            return Err(too_deep(limits.max_input_depth));
        }
        let mut de = serde_json::Deserializer::from_str(text);
        // The depth was just measured to be within the bound, which is itself bounded
        // (MAX_INPUT_DEPTH_CEILING), so parsing cannot run away.
        de.disable_recursion_limit();
        let v = <Value as serde::Deserialize>::deserialize(&mut de).map_err(|e| {
            Refusal::new(
                RefusalCode::InvalidInput,
                Check::InputBounds,
                format!("the input is not valid JSON: {e}"),
            )
        })?;
        de.end().map_err(|e| {
            Refusal::new(
                RefusalCode::InvalidInput,
                Check::InputBounds,
                format!("the input is not valid JSON: {e}"),
            )
        })?;
        Ok(v)
    }

    /// R14 step 7: the approval decision for a call that passed steps 1–6.
    #[expect(
        clippy::too_many_arguments,
        reason = "the resolved parts of one call, each borrowed once; a struct would only rename them"
    )]
    fn approval(
        &self,
        state: &PolicyState,
        entry: &Entry,
        agent: &ResolvedAgent,
        mode: ApprovalMode,
        call: CallView<'_>,
        (input, literals): (&Value, &NumberLiterals),
        extra_asks: Vec<Ask>,
        history: &History<'_>,
        quotas: &mut Groups,
    ) -> Decision {
        let who = call.agent;
        let run = call.run;
        let mut asks = Vec::new();
        let mut matched_rules = Vec::new();
        if mode == ApprovalMode::RequireApproval {
            asks.push(Ask {
                source: AskSource::Agent,
                reason: format!(
                    "agent `{}` requires approval for `{}` (effective mode `require_approval`)",
                    agent.name, entry.name
                ),
            });
        }

        // The tenant policy (R18–R22), evaluated against every record (R24).
        match state {
            PolicyState::Unreadable(why) if entry.has_policy_kind() => {
                return Decision::refused(Refusal::new(
                    RefusalCode::PolicyUnreadable,
                    Check::TenantPolicy,
                    format!("the stored tenant policy cannot be read: {why}"),
                ));
            }
            PolicyState::Readable(policy) if self.settings.enforce_tool_invocation => {
                let mut deny: Option<String> = None;
                // The rules that could match this profile's calls to this tool, found once
                // per snapshot (a subagent's id is the rules' agent, R19: not cached).
                let subject_of = |record| record_subject(record, who.rule_name());
                let cover = match (&who.subagent, self.catalog.index_of(entry)) {
                    (None, Some(e)) => self.agent_position(agent).and_then(|a| {
                        self.rule_covers.get(policy, a, e, || {
                            RuleCover(
                                entry
                                    .records
                                    .iter()
                                    .map(|r| policy.rule_candidates(&subject_of(r)))
                                    .collect(),
                            )
                        })
                    }),
                    _ => None,
                };
                for (at, record) in entry.records.iter().enumerate() {
                    let eval = match cover.as_ref().and_then(|c| c.0.get(at)) {
                        Some(candidates) => policy.evaluate_candidates(candidates, input, literals),
                        None => policy.evaluate_exact(&subject_of(record), input, literals),
                    };
                    for &i in &eval.matched {
                        if matched_rules.iter().any(|m: &MatchedRule| m.index == i) {
                            continue;
                        }
                        if let Some(rule) = policy.rules().get(i) {
                            matched_rules.push(MatchedRule {
                                index: i,
                                effect: rule.effect(),
                                reason: rule.reason().map(str::to_owned),
                            });
                            if rule.effect() == Effect::Ask {
                                push_unique(&mut asks, AskSource::PolicyRule(i), rule.describe(i));
                            }
                        }
                    }
                    match (eval.effect, eval.decided_by) {
                        (Some(Effect::Deny), Some(i)) if deny.is_none() => {
                            deny = policy.rules().get(i).map(|r| r.describe(i));
                        }
                        (Some(Effect::Deny), None) if deny.is_none() => {
                            deny = Some(format!(
                                "the tenant policy's default is `deny` and no rule matches `{}`",
                                entry.name
                            ));
                        }
                        (Some(Effect::Ask), None) => push_unique(
                            &mut asks,
                            AskSource::PolicyDefault,
                            format!(
                                "the tenant policy's default is `ask` and no rule matches `{}`",
                                entry.name
                            ),
                        ),
                        _ => {}
                    }
                }
                if let Some(reason) = deny {
                    matched_rules.sort_by_key(|m| m.index);
                    let mut d = Decision::refused(Refusal::new(
                        RefusalCode::Denied,
                        Check::TenantPolicy,
                        reason,
                    ));
                    d.matched_rules = matched_rules;
                    return d;
                }
                // R44: a full quota refuses before any ask is routed, so nobody is asked
                // about a call that could not be sent.
                *quotas = self.quota_groups(
                    policy,
                    entry,
                    agent,
                    who,
                    history.session,
                    (input, literals),
                );
                let groups = quotas.as_slice();
                if !groups.is_empty()
                    && let Err(e) = history.sends.check(groups, history.now)
                {
                    matched_rules.sort_by_key(|m| m.index);
                    let mut d = Decision::refused(self.quota_refusal_in(state, groups, &e));
                    d.matched_rules = matched_rules;
                    return d;
                }
            }
            _ => {}
        }
        matched_rules.sort_by_key(|m| m.index);

        if let Some(reason) = self.posture_ask(entry) {
            asks.push(Ask {
                source: AskSource::Posture,
                reason,
            });
        }
        asks.extend(extra_asks);
        let mut find = || self.find_grant(entry, who, (input, literals), history);
        self.route_with(entry, agent, asks, matched_rules, run, &mut find)
    }

    /// Routes a call's asks (R25–R26). With no ask, the call runs.
    pub fn route(
        &self,
        entry: &Entry,
        agent: &ResolvedAgent,
        asks: Vec<Ask>,
        matched_rules: Vec<MatchedRule>,
        run: RunContext,
    ) -> Decision {
        self.route_with(entry, agent, asks, matched_rules, run, &mut || Ok(None))
    }

    /// As [`Governance::route`], with a look-up of the live grant answering the call
    /// (R45), made only where R26's order reaches grants.
    fn route_with(
        &self,
        entry: &Entry,
        agent: &ResolvedAgent,
        asks: Vec<Ask>,
        matched_rules: Vec<MatchedRule>,
        run: RunContext,
        find_grant: &mut dyn FnMut() -> GrantLookup,
    ) -> Decision {
        let ask_reasons: Vec<String> = asks.iter().map(|a| a.reason.clone()).collect();
        let decision = |verdict, decided_by, reasons| Decision {
            verdict,
            decided_by,
            reasons,
            asks: asks.clone(),
            matched_rules: matched_rules.clone(),
            granted: None,
            retry_after_secs: None,
        };
        if asks.is_empty() {
            return decision(
                Verdict::Run {
                    auto_approved: false,
                },
                Check::Passed,
                Vec::new(),
            );
        }
        let refuse = |code, why: String| {
            let mut reasons = vec![why];
            reasons.extend(ask_reasons.iter().cloned());
            decision(Verdict::Refused(code), Check::Routing, reasons)
        };
        if run.mode == RunMode::AutoRejectRequired {
            return refuse(
                RefusalCode::Rejected,
                String::from(
                    "the run's approval mode `auto_reject_required` rejects every asked call",
                ),
            );
        }
        let agent_only = asks.iter().all(|a| a.source == AskSource::Agent);
        if agent_only && run.mode == RunMode::AutoApproveRequired {
            return decision(
                Verdict::Run {
                    auto_approved: true,
                },
                Check::Routing,
                ask_reasons.clone(),
            );
        }
        if agent.as_tool {
            return refuse(
                RefusalCode::NoApprovalChannel,
                as_tool_refusal(agent, entry, Check::Routing)
                    .reasons
                    .join("; "),
            );
        }
        // A per-agent channel (inherited by subagents, R39) replaces the host's.
        let channel = self.ask_route(agent).channel;
        if channel == ChannelKind::None {
            return refuse(
                RefusalCode::NoApprovalChannel,
                String::from(
                    "the call needs a person's approval and no approval channel is configured",
                ),
            );
        }
        // R45: a live grant answers the one question, whatever asked it; only here, after
        // every refusal that stands before it in R26's order.
        let mut grant_trouble = None;
        match find_grant() {
            Ok(Some(granted)) => {
                let mut d = decision(
                    Verdict::Run {
                        auto_approved: false,
                    },
                    Check::Grant,
                    ask_reasons.clone(),
                );
                d.granted = Some(granted);
                return d;
            }
            Ok(None) => {}
            // A grant store that cannot be read answers nothing: the call is asked.
            Err(why) => grant_trouble = Some(why),
        }
        let with_trouble = |mut d: Decision| {
            if let Some(why) = &grant_trouble {
                d.reasons.push(why.clone());
            }
            d
        };
        match channel {
            channel if channel.waits() && run.background => refuse(
                RefusalCode::Rejected,
                format!(
                    "a background task cannot wait for an approval on the `{}` channel",
                    channel.as_str()
                ),
            ),
            channel => with_trouble(decision(
                Verdict::Ask { channel },
                Check::Routing,
                ask_reasons.clone(),
            )),
        }
    }
}

/// A grant look-up's answer: the grant that answers, none, or why the grants could not be
/// read.
type GrantLookup = Result<Option<toolgate_core::Granted>, String>;

/// How the rules see one record of a call by `agent` (R19, R24).
fn record_subject<'a>(record: &'a crate::catalog::Record, agent: &'a str) -> Subject<'a> {
    let id = record.identity();
    Subject {
        kind: id.kind(),
        tool: id.name(),
        server: id.server(),
        agent,
    }
}

/// Quota `i`'s group for a call of `agent` (the rules' agent name) to `entry` in `session`.
fn quota_group(
    policy: &Policy,
    i: usize,
    entry: &Entry,
    agent: &str,
    session: Option<&str>,
) -> Option<QuotaGroup> {
    let q = policy.quotas().get(i)?;
    let agent = lower_key(agent);
    // `per` names each of its three keys at most once (validated).
    let mut parts: [Option<&str>; 3] = [None; 3];
    for (part, k) in parts.iter_mut().zip(q.per()) {
        *part = match k {
            PerKey::Agent => Some(agent.as_ref()),
            PerKey::Session => session,
            PerKey::Tool => Some(entry.key.as_str()),
        };
    }
    let parts = parts.get(..q.per().len()).unwrap_or(&parts);
    let key = group_key(q.counter_id(), parts);
    Some(QuotaGroup::new(key, i, q.max(), q.window_ms()))
}

fn push_unique(asks: &mut Vec<Ask>, source: AskSource, reason: String) {
    if !asks.iter().any(|a| a.source == source) {
        asks.push(Ask { source, reason });
    }
}

fn not_allowed(agent: &ResolvedAgent, entry: &Entry) -> Refusal {
    Refusal::new(
        RefusalCode::NotAllowed,
        Check::Allowed,
        format!(
            "`{}` is not among the allowed tools of agent `{}`",
            entry.name, agent.name
        ),
    )
}

fn as_tool_refusal(agent: &ResolvedAgent, entry: &Entry, check: Check) -> Refusal {
    Refusal::new(
        RefusalCode::NoApprovalChannel,
        check,
        format!(
            "`{}` needs approval and agent `{}` runs as a tool of another agent, with no approval channel",
            entry.name, agent.name
        ),
    )
}

fn too_deep(limit: usize) -> Refusal {
    Refusal::new(
        RefusalCode::InvalidInput,
        Check::InputBounds,
        format!("the input nests deeper than the limit `max_input_depth` ({limit})"),
    )
}

fn too_big(limit: usize) -> Refusal {
    Refusal::new(
        RefusalCode::InvalidInput,
        Check::InputBounds,
        format!(
            "the input is larger than the limit `max_input_bytes` ({limit} bytes, compact JSON)"
        ),
    )
}
