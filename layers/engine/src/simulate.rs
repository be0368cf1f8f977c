//! Simulation (R46, SPEC §7 `simulate`): a list of calls decided in time order, as a running
//! host would decide them, each against the sends the calls before it left (R44) and the
//! grants' uses so far (R45). The same decision code as every call
//! ([`Governance::decide_call_at`], [`Governance::record_send`]) over the in-memory counter
//! and grant store: there is no second decision path.
//!
//! ```
//! use serde_json::json;
//! use toolgate_core::{AgentRef, ToolCall};
//! use toolgate_engine::config::{load_str, Format};
//! use toolgate_engine::simulate::{Answer, Simulation};
//! use toolgate_engine::CallView;
//! let gov = load_str(r#"{"tools": [{"kind": "http", "name": "search"}],
//!     "agents": [{"name": "a", "allowed_tools": ["search"]}],
//!     "policy": {"rules": [], "quotas": [{"max": 1, "window_secs": 10}]}}"#, Format::Json).unwrap();
//! let call = ToolCall::new(AgentRef::profile("a"), "search", json!({}));
//! let mut sim = Simulation::new(Vec::new());
//! assert!(sim.step(&gov, CallView::of(&call), None, 0, None).unwrap().sent);
//! let again = sim.step(&gov, CallView::of(&call), None, 4_000, None).unwrap();
//! assert!(!again.sent);
//! assert_eq!(again.decision.retry_after_secs, Some(6));
//! ```

use std::fmt;

use toolgate_core::{Decision, Verdict};

use crate::decide::{CallView, History};
use crate::governance::Governance;
use crate::grant::{Grant, MemoryGrants};
use crate::quota::{MemoryQuotaCounter, Millis};

/// A person's answer to an asked call, should it be asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Approve: the call is sent (when its quotas still have room at that instant).
    Approve,
    /// Deny: the call is not sent.
    Deny,
}

impl Answer {
    /// Reads `approve` or `deny`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "approve" => Some(Answer::Approve),
            "deny" => Some(Answer::Deny),
            _ => None,
        }
    }
}

/// One simulated call's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The decision, as `decide` gives it (with the history).
    pub decision: Decision,
    /// Whether the call was sent: it ran (no ask, the run mode, a grant), or it was asked
    /// and answered `approve` and its quotas had room; it then counts as a send.
    pub sent: bool,
}

/// A call was given out of time order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfOrder {
    /// The time of the call before.
    pub previous: Millis,
    /// The time of the call given.
    pub at: Millis,
}

impl fmt::Display for OutOfOrder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a call at `{}` comes after one at `{}`: calls are simulated in non-decreasing time order",
            self.at, self.previous
        )
    }
}

impl std::error::Error for OutOfOrder {}

/// A simulation in progress: the sends so far and the grants with their uses.
#[derive(Debug, Default)]
pub struct Simulation {
    sends: MemoryQuotaCounter,
    grants: MemoryGrants,
    latest: Option<Millis>,
}

/// Counts of a simulation's results (SPEC §7 `summary`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Summary {
    /// Calls sent.
    pub sent: usize,
    /// Calls whose outcome is `ask`, whatever the answer.
    pub asked: usize,
    /// Calls refused.
    pub refused: usize,
}

impl Summary {
    /// The counts of `steps`.
    pub fn of<'a>(steps: impl IntoIterator<Item = &'a Step>) -> Self {
        let mut s = Summary::default();
        for step in steps {
            s.sent += usize::from(step.sent);
            match step.decision.verdict {
                Verdict::Ask { .. } => s.asked += 1,
                Verdict::Refused(_) => s.refused += 1,
                Verdict::Run { .. } => {}
            }
        }
        s
    }
}

impl Simulation {
    /// A simulation with these grants, in order, none used, and no sends.
    pub fn new(grants: Vec<Grant>) -> Self {
        Self {
            sends: MemoryQuotaCounter::new(),
            grants: MemoryGrants::new(grants),
            latest: None,
        }
    }

    /// Decides the next call, made at `at` in `session`, with the person's `answer` should
    /// it be asked; a call that is sent is recorded (R44, R45). Calls must come in
    /// non-decreasing `at` order.
    pub fn step(
        &mut self,
        gov: &Governance,
        call: CallView<'_>,
        session: Option<&str>,
        at: Millis,
        answer: Option<Answer>,
    ) -> Result<Step, OutOfOrder> {
        if let Some(previous) = self.latest
            && at < previous
        {
            return Err(OutOfOrder { previous, at });
        }
        self.latest = Some(at);
        let history = History::new(at, &self.sends, &self.grants).in_session(session);
        let decided = gov.decide_call_at(call, Vec::new(), &history);
        let (decision, sent) = match decided.decision.verdict {
            Verdict::Run { .. } => match gov.record_send(&decided, &history) {
                Ok(()) => (decided.decision, true),
                Err(refusal) => (Decision::refused(refusal), false),
            },
            // R38: an approved call is checked again right before it is sent, here at the
            // same instant, together with recording the send.
            Verdict::Ask { .. } if answer == Some(Answer::Approve) => {
                let sent = gov.record_send(&decided, &history).is_ok();
                (decided.decision, sent)
            }
            _ => (decided.decision, false),
        };
        Ok(Step { decision, sent })
    }

    /// How many sends were counted under a grant so far.
    pub fn grant_uses(&self, id: &str) -> Option<u64> {
        self.grants.uses(id)
    }
}
