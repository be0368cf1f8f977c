//! The approval contract: where the one question about a call goes (R17, R26).
//!
//! The question ([`ApprovalRequest`]), how a wait for a person ends ([`ApprovalOutcome`]),
//! and the channel that asks it ([`ApprovalChannel`]). It lives with the engine, not with
//! the tower layers that ask it (`toolgate::approval` re-exports every name), so that a
//! durable channel — the inbox, the page, the PostgreSQL store — builds on the engine alone.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::{
    AgentRef, Ask, AskSource, CallId, ChannelKind, Interaction, RunContext, ToolIdentity, Turn,
};
use serde_json::Value;

/// A boxed, sendable future.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// The one approval question about one call (R17): the tool, the full input, every reason.
#[derive(Debug, Clone)]
pub struct ApprovalRequest {
    /// The gate-issued, unguessable interaction id (R26).
    pub interaction_id: String,
    /// The call's id.
    pub call_id: CallId,
    /// The tool's qualified (wire) name.
    pub tool: String,
    /// The identities behind that name, as the sources spelled them.
    pub identities: Vec<ToolIdentity>,
    /// The calling agent.
    pub agent: AgentRef,
    /// The input exactly as it will be sent (R35).
    pub input: Arc<Value>,
    /// The input's numbers as written where its value does not reproduce them (an integer
    /// past 64 bits, R20): what a durable channel stores and a person is shown, so that one
    /// approval never covers two inputs that round to one value.
    pub literals: crate::number::NumberLiterals,
    /// The canonical hash of that input (RFC 8785 + SHA-256).
    pub input_hash: String,
    /// The hash of the tool's definition when the question was asked (R35).
    pub definition_hash: String,
    /// Every ask, with who asked (R17).
    pub asks: Vec<Ask>,
    /// The run's settings.
    pub run: RunContext,
    /// The session and turn the call belongs to (R43), if the host has sessions.
    pub turn: Option<Turn>,
    /// When the call is the execution of a held call already answered, its interaction id
    /// ([`ResumeTicket`]): a durable channel then redeems that answer instead of asking
    /// again (R26, R38).
    pub ticket: Option<ResumeTicket>,
    /// The call's execution target (seed 000), when its declaration names the fields: shown
    /// first on every channel.
    pub target: Option<crate::ExecutionTarget>,
    /// How many distinct people must approve the call before it is sent (R51): the
    /// decision's `approvals` (1 for most calls). The gate routes a call that needs more
    /// than one only to a channel that gathers that many
    /// ([`ApprovalChannel::approvals_gathered`]); a durable channel records the number with
    /// the held call, and redeems a resumed call only when the held call gathered at least
    /// the number its fresh decision asks for (R38).
    pub approvals: u8,
    /// The labels the decision read (R49): the tool's and its session's when it was asked
    /// about, shown to the person beside the reasons; `None` when no rule or quota reads
    /// labels.
    pub labels: Option<crate::LabelsRead>,
}

/// Marks a call as the execution of a held call (put it in the call's extensions). The
/// call still passes every check (R38); the gate hands the ticket to its channel, which
/// approves it only if that held call was approved for exactly this input and definition.
/// The gate asks under the held call's own interaction id, so the hold and the send
/// correlate in records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumeTicket {
    /// The held call's interaction id.
    pub interaction_id: String,
    /// A claim token the durable channel uses to make the send exactly-once.
    pub claim: Option<String>,
}

impl ApprovalRequest {
    /// Every reason, in order.
    pub fn reasons(&self) -> Vec<String> {
        self.asks.iter().map(|a| a.reason.clone()).collect()
    }

    /// The approval interaction a person sees (R43): the id, the prompt naming the tool's
    /// own name, every reason, the identity as the rule matched it (the first record's, R24),
    /// the model's name for the tool, the agent, the input and the session and turn.
    pub fn interaction(&self) -> Interaction {
        let identity = self
            .identities
            .first()
            .cloned()
            .unwrap_or_else(|| ToolIdentity::http(self.tool.clone()));
        Interaction::new(self.interaction_id.clone(), identity, self.tool.clone())
            .reasons(self.reasons())
            .agent(self.agent.rule_name())
            .input((*self.input).clone())
            .turn(self.turn.clone())
            .target(self.target.clone())
            .labels(self.labels.clone())
    }

    /// The prompt (R43): `Approve server / tool?` for an MCP tool, `Approve tool?` otherwise.
    pub fn prompt(&self) -> String {
        self.interaction().prompt
    }

    /// The question as text a person reads: [`Interaction::render`].
    pub fn render(&self) -> String {
        self.interaction().render()
    }
}

/// How a wait for a person ended. Each ending is distinct in the record: a timeout is
/// `Expired`, never a person's no (R26).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalOutcome {
    /// A person approved this one call.
    Approved {
        /// Who approved.
        approver: String,
    },
    /// A person denied it.
    Denied {
        /// Who denied.
        approver: String,
        /// Why, if they said.
        reason: Option<String>,
    },
    /// Nobody answered in time.
    Expired,
    /// The wait was cancelled.
    Cancelled,
    /// The call is held in a durable inbox; the agent pauses its turn.
    Held {
        /// The interaction id to answer later.
        interaction_id: String,
    },
    /// The channel could not route the request: an error, never an approval.
    Unroutable(String),
    /// The channel itself refused (a durable inbox redeeming a ticket that is not good for
    /// this call): not a person's denial.
    Refused {
        /// Why.
        reason: String,
    },
}

/// Where approval questions go. Implementations must fail closed: anything but a person's
/// explicit approval is not an approval.
pub trait ApprovalChannel: fmt::Debug + Send + Sync + 'static {
    /// The kind of channel, matched against the configuration's `approval.channel`.
    fn kind(&self) -> ChannelKind;

    /// Asks the question; resolves when the wait ends.
    fn request(&self, request: ApprovalRequest) -> BoxFuture<ApprovalOutcome>;

    /// How many distinct people's approvals of one call this channel can gather before it
    /// says `Approved` (R51). The default is one: the approval gate refuses a call that
    /// needs more (`no_approval_channel`, fail closed) rather than send it on fewer answers
    /// than it needs. The durable inbox (`toolgate_inbox::InboxChannel`) gathers up to five,
    /// the most a rule may ask for.
    fn approvals_gathered(&self) -> u8 {
        1
    }

    /// Asks the question like [`ApprovalChannel::request`], and says who answered by their
    /// verified identity-provider principal when the channel knows it (R47): the
    /// approval gate calls this one and records the principal with the call (the audit
    /// record's `approval.principal`). The default knows no principal; a channel whose
    /// answers come from signed-in people (the durable inbox) overrides it.
    fn request_verified(&self, request: ApprovalRequest) -> BoxFuture<VerifiedOutcome> {
        let outcome = self.request(request);
        Box::pin(async move {
            VerifiedOutcome {
                outcome: outcome.await,
                answered_by: None,
            }
        })
    }
}

/// How a wait ended, with the verified principal of the person who answered, when known
/// (R47). `answered_by` is set only beside a person's answer (approved or denied).
///
/// ```
/// use toolgate_core::approval::{ApprovalOutcome, VerifiedOutcome};
/// let v = VerifiedOutcome { outcome: ApprovalOutcome::Expired, answered_by: None };
/// assert_eq!(v.outcome, ApprovalOutcome::Expired);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedOutcome {
    /// How the wait ended.
    pub outcome: ApprovalOutcome,
    /// The verified principal (`sub`, `iss`) of whoever approved or denied, when the
    /// channel knows one; `None` for a static-token, header or command-line approver.
    pub answered_by: Option<crate::Principal>,
}

/// A channel answering every question with a closure (scripted approvers, tests).
///
/// ```
/// use toolgate_core::approval::{ApprovalOutcome, FnChannel};
/// use toolgate_core::ChannelKind;
/// let approve_all = FnChannel::new(ChannelKind::Interactive, |_req| ApprovalOutcome::Approved { approver: "script".into() });
/// # let _ = approve_all;
/// ```
pub struct FnChannel<F> {
    kind: ChannelKind,
    answer: F,
}

impl<F> FnChannel<F>
where
    F: Fn(&ApprovalRequest) -> ApprovalOutcome + Send + Sync + 'static,
{
    /// A channel of `kind` answered by `answer`.
    pub fn new(kind: ChannelKind, answer: F) -> Self {
        Self { kind, answer }
    }
}

impl<F> fmt::Debug for FnChannel<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnChannel")
            .field("kind", &self.kind)
            .finish()
    }
}

impl<F> ApprovalChannel for FnChannel<F>
where
    F: Fn(&ApprovalRequest) -> ApprovalOutcome + Send + Sync + 'static,
{
    fn kind(&self) -> ChannelKind {
        self.kind
    }

    fn request(&self, request: ApprovalRequest) -> BoxFuture<ApprovalOutcome> {
        let outcome = (self.answer)(&request);
        Box::pin(std::future::ready(outcome))
    }
}

/// The first of `fresh`'s asks that the question a person answered (`asked`) did not carry,
/// if any: a fresh decision may ask for *fewer* reasons than were approved, never for a new
/// one (R38: an approval answers only the question it was asked). Two asks are the same
/// question when they come from the same kind of source (the agent's mode, the tenant
/// policy, the posture, a hook) with the same reason text; a policy rule that only moved in
/// the rule list is the same question.
pub fn new_question<'a>(asked: &[Ask], fresh: &'a [Ask]) -> Option<&'a Ask> {
    fn class(source: &AskSource) -> u8 {
        match source {
            AskSource::Agent => 0,
            AskSource::PolicyRule(_) | AskSource::PolicyDefault => 1,
            AskSource::Posture => 2,
            AskSource::Hook => 3,
        }
    }
    fresh.iter().find(|f| {
        !asked
            .iter()
            .any(|a| class(&a.source) == class(&f.source) && a.reason == f.reason)
    })
}

/// A fresh unguessable interaction id: 128 bits from the operating system's generator.
/// When no randomness can be had, `None`: the gate then refuses the call.
///
/// ```
/// let a = toolgate_core::approval::interaction_id().unwrap();
/// assert!(a.starts_with("ia_") && a.len() == 35);
/// assert_ne!(a, toolgate_core::approval::interaction_id().unwrap());
/// ```
pub fn interaction_id() -> Option<String> {
    crate::id::random_id("ia_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r26_interaction_ids_are_unguessable_and_distinct() {
        let a = interaction_id().unwrap();
        let b = interaction_id().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.len(), 35);
        assert!(a[3..].chars().all(|c| c.is_ascii_hexdigit()));
    }
}
