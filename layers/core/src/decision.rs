//! Decisions that explain themselves: which check decided, and every reason.

use std::fmt;

/// A refusal code, exactly as SPEC §7 spells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RefusalCode {
    /// The wire name resolves to no registered tool (R14 step 1).
    UnknownTool,
    /// The tool is not in the agent's allowed names, or the agent profile does not exist (R6).
    NotAllowed,
    /// The agent is confidential and the tool is withheld from confidential work (R7).
    Confidential,
    /// The host is air-gapped and the tool's effective scope is egress (R8).
    AirGapped,
    /// The effective mode is deny, or a tenant rule (or the policy default) denies (R10, R16).
    Denied,
    /// The call would ask but there is no one to ask (R11, R26).
    NoApprovalChannel,
    /// The ask was rejected: by the run mode, a person, a timeout, a cancellation, or
    /// because a background task cannot wait (R25, R26, R35).
    Rejected,
    /// The stored tenant policy cannot be read (R22).
    PolicyUnreadable,
    /// The input is over the bounds or fails the tool's schema (R36).
    InvalidInput,
    /// A quota covering the call is full (R44); see [`Refusal::retry_after_secs`].
    RateLimited,
}

impl RefusalCode {
    /// Every code, in SPEC order.
    pub const ALL: [RefusalCode; 10] = [
        RefusalCode::UnknownTool,
        RefusalCode::NotAllowed,
        RefusalCode::Confidential,
        RefusalCode::AirGapped,
        RefusalCode::Denied,
        RefusalCode::NoApprovalChannel,
        RefusalCode::Rejected,
        RefusalCode::PolicyUnreadable,
        RefusalCode::InvalidInput,
        RefusalCode::RateLimited,
    ];

    /// The code's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalCode::UnknownTool => "unknown_tool",
            RefusalCode::NotAllowed => "not_allowed",
            RefusalCode::Confidential => "confidential",
            RefusalCode::AirGapped => "air_gapped",
            RefusalCode::Denied => "denied",
            RefusalCode::NoApprovalChannel => "no_approval_channel",
            RefusalCode::Rejected => "rejected",
            RefusalCode::PolicyUnreadable => "policy_unreadable",
            RefusalCode::InvalidInput => "invalid_input",
            RefusalCode::RateLimited => "rate_limited",
        }
    }
}

impl fmt::Display for RefusalCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which check decided (R14's order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Check {
    /// Step 1: the name resolves to a registered tool.
    UnknownTool,
    /// R36: the input is within the bounds.
    InputBounds,
    /// Step 2: the agent profile exists and allows the tool (R6, R39).
    Allowed,
    /// Step 3: confidential work (R7).
    Confidentiality,
    /// Step 4: the air gap (R8).
    AirGap,
    /// Steps 5–6: the agent's effective approval mode (R9–R11).
    AgentMode,
    /// Step 7: the tenant rule policy (R18–R23).
    TenantPolicy,
    /// Step 7: the tenant policy's quotas (R44).
    Quota,
    /// Step 7: the routing of an ask (R25–R26).
    Routing,
    /// Step 7: a live grant answered the ask (R45).
    Grant,
    /// A custom hook (R32).
    Hook,
    /// R36: the input matches the tool's advertised input schema (MCP).
    InputSchema,
    /// R35: the tool's definition is still the one the call was decided or approved for.
    DefinitionChanged,
    /// R38: the call carries a valid permit from the approval gate.
    Permit,
    /// R33: the audit sink can record the call.
    AuditSink,
    /// Every check passed and nothing asked.
    Passed,
}

impl Check {
    /// A short human name.
    pub fn as_str(self) -> &'static str {
        match self {
            Check::UnknownTool => "tool lookup",
            Check::InputBounds => "input bounds",
            Check::Allowed => "allowed tools",
            Check::Confidentiality => "confidentiality",
            Check::AirGap => "air gap",
            Check::AgentMode => "agent approval mode",
            Check::TenantPolicy => "tenant policy",
            Check::Quota => "quota",
            Check::Routing => "approval routing",
            Check::Grant => "grant",
            Check::Hook => "hook",
            Check::InputSchema => "input schema",
            Check::DefinitionChanged => "tool definition changed",
            Check::Permit => "gate permit",
            Check::AuditSink => "audit sink",
            Check::Passed => "all checks passed",
        }
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refused call: its code, which check refused it, and every reason. A refused call is
/// never sent to the tool.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Refusal {
    /// The refusal code.
    pub code: RefusalCode,
    /// The check that refused.
    pub decided_by: Check,
    /// Every reason, for the model and the audit record.
    pub reasons: Vec<String>,
    /// For `rate_limited` (R44): the whole seconds, rounded up, until every quota covering
    /// the call has room again; `None` for every other refusal.
    pub retry_after_secs: Option<u64>,
}

impl Refusal {
    /// A refusal with one reason.
    pub fn new(code: RefusalCode, decided_by: Check, reason: impl Into<String>) -> Self {
        Self {
            code,
            decided_by,
            reasons: vec![reason.into()],
            retry_after_secs: None,
        }
    }

    /// A refusal with several reasons.
    pub fn with_reasons(code: RefusalCode, decided_by: Check, reasons: Vec<String>) -> Self {
        Self {
            code,
            decided_by,
            reasons,
            retry_after_secs: None,
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "refused ({}): {}", self.code, self.reasons.join("; "))
    }
}

impl std::error::Error for Refusal {}

/// The host's approval channel (SPEC §7 `approval.channel`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum ChannelKind {
    /// No channel: asks are refused `no_approval_channel`.
    #[default]
    None,
    /// A person answers while the call waits.
    Interactive,
    /// A durable inbox: the call is held and answered later.
    Inbox,
    /// MCP elicitation (R47): the calling MCP client asks its own user while the call
    /// waits. Whoever controls that client answers, so it is a channel only where the
    /// operator names it, and never chosen in place of `inbox` or `interactive`. For R26
    /// it is an interactive channel: a background task cannot wait for it.
    Elicitation,
}

impl ChannelKind {
    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ChannelKind::None => "none",
            ChannelKind::Interactive => "interactive",
            ChannelKind::Inbox => "inbox",
            ChannelKind::Elicitation => "elicitation",
        }
    }

    /// Parses the configuration spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "none" => ChannelKind::None,
            "interactive" => ChannelKind::Interactive,
            "inbox" => ChannelKind::Inbox,
            "elicitation" => ChannelKind::Elicitation,
            _ => return None,
        })
    }

    /// Whether a call waits on this channel while a person answers (`interactive`,
    /// `elicitation`): a background task cannot wait for one (R26). An inbox holds the call
    /// instead, and `none` never asks.
    ///
    /// ```
    /// use toolgate_core::ChannelKind;
    /// assert!(ChannelKind::Elicitation.waits());
    /// assert!(!ChannelKind::Inbox.waits());
    /// ```
    pub fn waits(self) -> bool {
        matches!(self, ChannelKind::Interactive | ChannelKind::Elicitation)
    }
}

/// Where an ask came from (R15, R32).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AskSource {
    /// The agent's effective mode is `require_approval` (the only kind a run mode loosens).
    Agent,
    /// A tenant rule, by its index in the policy's `rules`.
    PolicyRule(usize),
    /// The tenant policy's `default: "ask"`.
    PolicyDefault,
    /// The behaviour posture (R27–R31).
    Posture,
    /// A custom hook (R32).
    Hook,
}

impl AskSource {
    /// The kind of source, without a rule's index: `agent`, `policy_rule`, `policy_default`,
    /// `posture` or `hook` (the stored form keeps the index apart).
    pub fn kind(&self) -> &'static str {
        match self {
            AskSource::Agent => "agent",
            AskSource::PolicyRule(_) => "policy_rule",
            AskSource::PolicyDefault => "policy_default",
            AskSource::Posture => "posture",
            AskSource::Hook => "hook",
        }
    }

    /// A short description of who asked, for people (the CLI, the inbox): `agent approval
    /// mode`, `tenant policy rule 3`, `tenant policy default`, `behaviour posture`, `hook`.
    ///
    /// ```
    /// use toolgate_core::AskSource;
    /// assert_eq!(AskSource::PolicyRule(3).describe(), "tenant policy rule 3");
    /// assert_eq!(AskSource::Agent.describe(), "agent approval mode");
    /// ```
    pub fn describe(&self) -> String {
        match self {
            AskSource::Agent => String::from("agent approval mode"),
            AskSource::PolicyRule(i) => format!("tenant policy rule {i}"),
            AskSource::PolicyDefault => String::from("tenant policy default"),
            AskSource::Posture => String::from("behaviour posture"),
            AskSource::Hook => String::from("hook"),
        }
    }
}

/// The machine form audit records and spans carry: the [kind](AskSource::kind), with a
/// rule's index after a colon (`policy_rule:3`).
///
/// ```
/// use toolgate_core::AskSource;
/// assert_eq!(AskSource::PolicyRule(3).to_string(), "policy_rule:3");
/// assert_eq!(AskSource::Posture.to_string(), "posture");
/// ```
impl fmt::Display for AskSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AskSource::PolicyRule(i) => write!(f, "{}:{i}", self.kind()),
            other => f.write_str(other.kind()),
        }
    }
}

/// One reason that asked.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Ask {
    /// Who asked.
    pub source: AskSource,
    /// Why, in words an approver reads.
    pub reason: String,
}

/// What happens to a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The call runs; `auto_approved` when an ask was approved by the run mode (R25).
    Run {
        /// An agent-level ask approved by `auto_approve_required`.
        auto_approved: bool,
    },
    /// The call waits for a person on this channel (interactive, or held in an inbox).
    Ask {
        /// The channel that will carry the one question (R17).
        channel: ChannelKind,
    },
    /// The call is refused and never sent.
    Refused(RefusalCode),
}

/// A rule's effect, or the policy default's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Effect {
    /// Run.
    Allow,
    /// Ask a person.
    Ask,
    /// Refuse with `denied`.
    Deny,
}

impl Effect {
    /// The spelling in policies.
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::Allow => "allow",
            Effect::Ask => "ask",
            Effect::Deny => "deny",
        }
    }

    /// Reads the spelling in policies (`allow`, `ask`, `deny`).
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "allow" => Effect::Allow,
            "ask" => Effect::Ask,
            "deny" => Effect::Deny,
            _ => return None,
        })
    }
}

impl fmt::Display for Effect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Verdict {
    /// The text of [`Verdict::Run`]: `run`.
    pub const RUN: &'static str = "run";
    /// The text of [`Verdict::Ask`]: `ask`.
    pub const ASK: &'static str = "ask";
    /// The text of [`Verdict::Refused`]: `refused`.
    pub const REFUSED: &'static str = "refused";

    /// The verdict's kind as audit records, spans and the CLI spell it: `run`, `ask` or
    /// `refused`.
    ///
    /// ```
    /// use toolgate_core::{RefusalCode, Verdict};
    /// assert_eq!(Verdict::Run { auto_approved: false }.as_str(), "run");
    /// assert_eq!(Verdict::Refused(RefusalCode::Rejected).as_str(), Verdict::REFUSED);
    /// ```
    pub fn as_str(&self) -> &'static str {
        match self {
            Verdict::Run { .. } => Verdict::RUN,
            Verdict::Ask { .. } => Verdict::ASK,
            Verdict::Refused(_) => Verdict::REFUSED,
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a call ended, as audit records, spans and the inbox's stored results spell it
/// (`outcome`): one spelling for every writer. [`ToolResponse::outcome`](crate::ToolResponse::outcome)
/// gives a response's.
///
/// ```
/// use toolgate_core::CallOutcome;
/// assert_eq!(CallOutcome::Completed.as_str(), "completed");
/// assert_eq!(CallOutcome::Error.to_string(), "error");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CallOutcome {
    /// The tool ran and succeeded: `completed`.
    Completed,
    /// The tool ran and reported a failure: `failed`.
    Failed,
    /// The call was refused and never sent: `refused`.
    Refused,
    /// The call is held for a person's answer: `held`.
    Held,
    /// The tool's service returned an error instead of a response: `error`.
    Error,
}

impl CallOutcome {
    /// The outcome's spelling: `completed`, `failed`, `refused`, `held` or `error`.
    pub fn as_str(self) -> &'static str {
        match self {
            CallOutcome::Completed => "completed",
            CallOutcome::Failed => "failed",
            CallOutcome::Refused => "refused",
            CallOutcome::Held => "held",
            CallOutcome::Error => "error",
        }
    }
}

impl fmt::Display for CallOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A tenant rule that matched a call.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MatchedRule {
    /// The rule's index in the policy's `rules`.
    pub index: usize,
    /// The rule's effect.
    pub effect: Effect,
    /// The rule's reason, if it has one.
    pub reason: Option<String>,
}

/// The grant that answered a call's ask (R45): the call runs as approved by `granted_by`
/// under grant `id`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Granted {
    /// The grant's id.
    pub id: String,
    /// Who gave the grant.
    pub granted_by: String,
}

/// A decision about one call: the verdict, which check decided, and why.
///
/// INVARIANT: `verdict` is `Refused(code)` exactly when `refusal()` is `Some` with that code.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Decision {
    /// What happens.
    pub verdict: Verdict,
    /// The check that decided.
    pub decided_by: Check,
    /// Every reason: of the refusal, or of every ask (R17).
    pub reasons: Vec<String>,
    /// Every ask gathered for the call, with its source.
    pub asks: Vec<Ask>,
    /// The tenant rules that matched, in policy order.
    pub matched_rules: Vec<MatchedRule>,
    /// The grant that answered the ask, when the call runs under one (R45).
    pub granted: Option<Granted>,
    /// For a `rate_limited` refusal (R44): whole seconds until every covering quota has
    /// room.
    pub retry_after_secs: Option<u64>,
    /// How many distinct people must approve the call before it is sent (R51): the largest
    /// `approvals` of the matching `ask` rules; 1 for every other call.
    pub approvals: u8,
    /// The labels the decision read (R49), when a rule or a quota selects by labels: for the
    /// audit record, the span and `explain`.
    pub labels: Option<LabelsRead>,
}

/// The labels a decision read (R49): the called tool's, and its session's before the call
/// (`None` when no rule or quota reads them, or without a history).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct LabelsRead {
    /// The labels the called tool carries (shared with the snapshot, not copied).
    pub tool: crate::LabelSet,
    /// The session's labels before this call (shared with the counter, not copied).
    pub session: Option<crate::LabelSet>,
}

impl Ask {
    /// One ask: who asked, and why.
    ///
    /// ```
    /// use toolgate_core::{Ask, AskSource};
    /// let ask = Ask::new(AskSource::Posture, "writes files");
    /// assert_eq!(ask.reason, "writes files");
    /// ```
    pub fn new(source: AskSource, reason: impl Into<String>) -> Self {
        Self {
            source,
            reason: reason.into(),
        }
    }
}

impl MatchedRule {
    /// Rule `index` of the policy matched, with its effect and reason.
    ///
    /// ```
    /// use toolgate_core::{Effect, MatchedRule};
    /// assert_eq!(MatchedRule::new(3, Effect::Ask, None).index, 3);
    /// ```
    pub fn new(index: usize, effect: Effect, reason: Option<String>) -> Self {
        Self {
            index,
            effect,
            reason,
        }
    }
}

impl Granted {
    /// Grant `id`, given by `granted_by`, answered the call's ask (R45).
    ///
    /// ```
    /// use toolgate_core::Granted;
    /// assert_eq!(Granted::new("g1", "alice").granted_by, "alice");
    /// ```
    pub fn new(id: impl Into<String>, granted_by: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            granted_by: granted_by.into(),
        }
    }
}

impl LabelsRead {
    /// The called tool's labels, and its session's before the call (R49).
    ///
    /// ```
    /// use toolgate_core::{LabelSet, LabelsRead};
    /// let read = LabelsRead::new(LabelSet::of(["egress"]), None);
    /// assert!(read.tool.contains("egress") && read.session.is_none());
    /// ```
    pub fn new(tool: crate::LabelSet, session: Option<crate::LabelSet>) -> Self {
        Self { tool, session }
    }
}

impl Decision {
    /// A decision with this verdict, deciding check and reasons; no asks, matched rules,
    /// grant, retry time or labels, and one approval needed. For a refusal use
    /// [`Decision::refused`], which keeps the verdict and the refusal one.
    ///
    /// ```
    /// use toolgate_core::{Check, Decision, Verdict};
    /// let d = Decision::new(Verdict::Run { auto_approved: false }, Check::Passed, Vec::new());
    /// assert!(d.runs() && d.approvals == 1);
    /// ```
    pub fn new(verdict: Verdict, decided_by: Check, reasons: Vec<String>) -> Self {
        Self {
            verdict,
            decided_by,
            reasons,
            asks: Vec::new(),
            matched_rules: Vec::new(),
            granted: None,
            retry_after_secs: None,
            approvals: 1,
            labels: None,
        }
    }

    /// A refusal decision.
    pub fn refused(refusal: Refusal) -> Self {
        Self {
            verdict: Verdict::Refused(refusal.code),
            decided_by: refusal.decided_by,
            reasons: refusal.reasons,
            asks: Vec::new(),
            matched_rules: Vec::new(),
            granted: None,
            retry_after_secs: refusal.retry_after_secs,
            approvals: 1,
            labels: None,
        }
    }

    /// The refusal, when the verdict is `Refused`.
    pub fn refusal(&self) -> Option<Refusal> {
        match self.verdict {
            Verdict::Refused(code) => Some(Refusal {
                code,
                decided_by: self.decided_by,
                reasons: self.reasons.clone(),
                retry_after_secs: self.retry_after_secs,
            }),
            _ => None,
        }
    }

    /// Whether the call runs.
    pub fn runs(&self) -> bool {
        matches!(self.verdict, Verdict::Run { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r44_r47_the_round_three_spellings() {
        assert!(RefusalCode::ALL.contains(&RefusalCode::RateLimited));
        assert_eq!(RefusalCode::RateLimited.as_str(), "rate_limited");
        assert_eq!(
            ChannelKind::parse("elicitation"),
            Some(ChannelKind::Elicitation)
        );
        assert_eq!(ChannelKind::Elicitation.as_str(), "elicitation");
        assert!(ChannelKind::Interactive.waits() && !ChannelKind::None.waits());
        let mut r = Refusal::new(RefusalCode::RateLimited, Check::Quota, "full");
        r.retry_after_secs = Some(3);
        let d = Decision::refused(r.clone());
        assert_eq!(d.retry_after_secs, Some(3));
        assert_eq!(
            d.refusal(),
            Some(r),
            "the refusal round-trips its retry-after"
        );
    }
}
