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
use crate::exposure::{
    ExposedTool, Exposure, Omission, OmissionKind, OmittedTool, Reason, UnknownAgent,
};
use crate::governance::{Governance, PolicyState, ResolvedAgent};
use crate::grant::{GrantStore, NoGrants};
use crate::json;
use crate::number::{self, NumberLiterals};
use crate::policy::{Effect, PerKey, Policy, RuleCover, Subject};
use crate::quota::{Millis, NoSends, QuotaCounter, QuotaError, QuotaGroup, group_key};
use crate::quota_cover::{Cover, Item};
use std::sync::Arc;
use toolgate_core::names::lower_key;

mod approval;
mod over_time;
mod steps;

use over_time::{GrantLookup, Groups, record_subject};
use steps::as_tool_refusal;

/// One call's [`Decision`] with where it was made: the tool's entry and the agent's
/// profile, as positions in the snapshot that decided it ([`Governance::decide_call`]).
/// Read them back with the **same** snapshot ([`Governance::decided_entry`],
/// [`Governance::decided_agent`]); `toolgate` keeps the two together in one pin.
#[derive(Debug, Clone)]
#[non_exhaustive]
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
    /// Omitted, by this kind of omission found by this check (its text written when read).
    Omitted(OmissionKind, Check),
}

impl Governance {
    // ----- the checks, one place each -----

    // ----- exposure -----

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
            return Decision::new(
                Verdict::Run {
                    auto_approved: false,
                },
                Check::Passed,
                Vec::new(),
            );
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
}
