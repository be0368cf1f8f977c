//! Where an ask goes and how the wait for a person ends (R25–R26, R39): the routing the
//! approval gate applies and `toolgate explain` shows, and the refusal each end of a wait
//! becomes. The gate only carries the question to the channel object of the kind named
//! here and hands back what the channel answered.

use std::time::Duration;

use toolgate_core::{Ask, ChannelKind, Check, Refusal, RefusalCode};

use crate::governance::{Governance, ResolvedAgent};

/// Where one agent's asks go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AskRoute {
    /// The kind of channel that answers: the agent's own `agents[i].approval.channel`
    /// (inherited by subagents, never looser, R39), else the host's `approval.channel`.
    pub channel: ChannelKind,
    /// Whether the channel is the agent's own (or inherited from its parent) rather than
    /// the host's.
    pub agent_channel: bool,
    /// How long the call waits for a person before it expires:
    /// `agents[i].approval.timeout_secs` (inherited likewise); `None`: as long as the
    /// channel takes.
    pub timeout: Option<Duration>,
}

impl Governance {
    /// Where `agent`'s asks go (R26, R39).
    ///
    /// ```
    /// use toolgate_core::ChannelKind;
    /// use toolgate_engine::config::{load_str, Format};
    /// let gov = load_str(r#"{"approval": {"channel": "interactive"},
    ///     "agents": [{"name": "dev"},
    ///                {"name": "nightly", "approval": {"channel": "inbox", "timeout_secs": 30}},
    ///                {"name": "nightly-sub", "parent": "nightly"}]}"#, Format::Json).unwrap();
    /// let route = |name| gov.ask_route(gov.agent(name).unwrap());
    /// assert_eq!(route("dev").channel, ChannelKind::Interactive);
    /// assert_eq!(route("nightly-sub").channel, ChannelKind::Inbox);
    /// assert_eq!(route("nightly-sub").timeout, Some(std::time::Duration::from_secs(30)));
    /// ```
    pub fn ask_route(&self, agent: &ResolvedAgent) -> AskRoute {
        AskRoute {
            channel: agent.approval_channel.unwrap_or(self.settings.channel),
            agent_channel: agent.approval_channel.is_some(),
            timeout: agent.approval_timeout,
        }
    }
}

/// How a wait for a person ended without an approval, as the gate reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitRefused<'a> {
    /// A person denied, perhaps saying why.
    Denied {
        /// Who denied.
        approver: &'a str,
        /// Their reason.
        reason: Option<&'a str>,
    },
    /// Nobody answered in time.
    Expired,
    /// The wait was cancelled.
    Cancelled,
    /// The channel refused the question.
    ChannelRefused {
        /// The channel's reason.
        reason: &'a str,
    },
    /// The channel could not route the question.
    Unroutable {
        /// Why.
        why: &'a str,
    },
}

/// A refusal after an ask: `rejected` by routing, the reason first, then every ask's reason
/// (R17: the refused call says what it was asked about).
pub fn rejected_after_ask(why: impl Into<String>, asks: &[Ask]) -> Refusal {
    let mut reasons = vec![why.into()];
    reasons.extend(asks.iter().map(|a| a.reason.clone()));
    Refusal::with_reasons(RefusalCode::Rejected, Check::Routing, reasons)
}

/// The refusal a wait that ended without an approval becomes (R26): a denial is a
/// person's, an expiry or cancellation is never a denial, an unroutable question is
/// `no_approval_channel`.
///
/// ```
/// use toolgate_core::RefusalCode;
/// use toolgate_engine::ask::{WaitRefused, wait_refusal};
/// let r = wait_refusal(WaitRefused::Expired, &[]);
/// assert_eq!(r.code, RefusalCode::Rejected);
/// assert!(r.reasons[0].contains("not a person's denial"));
/// let r = wait_refusal(WaitRefused::Unroutable { why: "no inbox" }, &[]);
/// assert_eq!(r.code, RefusalCode::NoApprovalChannel);
/// ```
pub fn wait_refusal(end: WaitRefused<'_>, asks: &[Ask]) -> Refusal {
    match end {
        WaitRefused::Denied { approver, reason } => rejected_after_ask(
            match reason {
                Some(r) => format!("denied by {approver}: {r}"),
                None => format!("denied by {approver}"),
            },
            asks,
        ),
        WaitRefused::Expired => rejected_after_ask(
            "the approval request expired: nobody answered in time (this is not a person's denial)",
            asks,
        ),
        WaitRefused::Cancelled => rejected_after_ask("the approval wait was cancelled", asks),
        WaitRefused::ChannelRefused { reason } => {
            rejected_after_ask(format!("the approval channel refused: {reason}"), asks)
        }
        WaitRefused::Unroutable { why } => {
            let mut r = rejected_after_ask(
                format!("the approval channel could not route the request: {why}"),
                asks,
            );
            r.code = RefusalCode::NoApprovalChannel;
            r
        }
    }
}
