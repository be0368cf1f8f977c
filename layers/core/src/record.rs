//! A request-scoped sink through which inner layers tell outer ones (audit, spans) how a
//! call was decided and how any wait for a person ended.

use std::sync::{Arc, Mutex};

use crate::decision::Decision;

/// How a wait for a person ended, or why there was none (R26, R33).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitEnd {
    /// Nothing asked: the call ran without a question.
    NotAsked,
    /// The run mode approved an agent-level ask (`auto_approve_required`, R25).
    AutoApproved,
    /// A person approved.
    Approved {
        /// Who.
        approver: String,
    },
    /// A person denied.
    Denied {
        /// Who.
        approver: String,
    },
    /// Nobody answered in time (not a person's denial).
    Expired,
    /// The wait was cancelled.
    Cancelled,
    /// The channel could not route the question.
    Unroutable,
    /// The call is held in a durable inbox.
    Held,
    /// The call was refused before any question (by a check, a rule or routing).
    Refused,
}

impl WaitEnd {
    /// A short name for records: `not_asked`, `auto_approved`, `approved`, …
    pub fn as_str(&self) -> &'static str {
        match self {
            WaitEnd::NotAsked => "not_asked",
            WaitEnd::AutoApproved => "auto_approved",
            WaitEnd::Approved { .. } => "approved",
            WaitEnd::Denied { .. } => "denied",
            WaitEnd::Expired => "expired",
            WaitEnd::Cancelled => "cancelled",
            WaitEnd::Unroutable => "unroutable",
            WaitEnd::Held => "held",
            WaitEnd::Refused => "refused",
        }
    }
}

/// What the approval gate recorded about one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecisionNote {
    /// The engine's decision (with the hook's ask, if any).
    pub decision: Decision,
    /// How the wait ended.
    pub wait: WaitEnd,
    /// The interaction id of the question, when one was asked.
    pub interaction_id: Option<String>,
    /// The canonical hash of the input the decision was made on (R35).
    pub input_hash: Option<String>,
}

/// Put a `DecisionSink` in a call's extensions before sending it inward; after the
/// response, [`DecisionSink::take`] returns what the gate recorded. Cheap to clone.
///
/// ```
/// use toolgate_core::{DecisionSink, Decision, Refusal, RefusalCode, Check, DecisionNote, WaitEnd};
/// let sink = DecisionSink::default();
/// sink.record(DecisionNote {
///     decision: Decision::refused(Refusal::new(RefusalCode::Denied, Check::TenantPolicy, "no")),
///     wait: WaitEnd::Refused, interaction_id: None, input_hash: None,
/// });
/// assert_eq!(sink.take().unwrap().wait, WaitEnd::Refused);
/// assert!(sink.take().is_none());
/// ```
#[derive(Debug, Clone, Default)]
pub struct DecisionSink(Arc<Mutex<Option<DecisionNote>>>);

impl DecisionSink {
    /// Records a note, replacing any earlier one.
    pub fn record(&self, note: DecisionNote) {
        if let Ok(mut slot) = self.0.lock() {
            *slot = Some(note);
        }
    }

    /// Updates the recorded note in place, if there is one.
    pub fn update(&self, f: impl FnOnce(&mut DecisionNote)) {
        if let Ok(mut slot) = self.0.lock()
            && let Some(note) = slot.as_mut()
        {
            f(note);
        }
    }

    /// A copy of the note, leaving it for other readers (the span and audit layers both
    /// read it).
    pub fn get(&self) -> Option<DecisionNote> {
        self.0.lock().ok().and_then(|slot| slot.clone())
    }

    /// Takes the note.
    pub fn take(&self) -> Option<DecisionNote> {
        self.0.lock().ok().and_then(|mut slot| slot.take())
    }
}
