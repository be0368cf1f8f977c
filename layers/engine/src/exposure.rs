//! What one agent is shown (R6–R13): the exposed tools, the omitted ones with the refusal a
//! call would get, and tool search over the exposed set. [`crate::Governance::expose`] makes
//! it, with invocation's own checks, so the two never disagree.
//!
//! Names and descriptions are `Arc<str>` shared with the catalog, and an omitted tool's reason
//! is written when it is read ([`Omission`]), so building an exposure copies no string and
//! allocates nothing per tool.

use std::fmt;
use std::sync::Arc;

use toolgate_core::{Check, Refusal, RefusalCode};

/// One tool the model is shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExposedTool {
    /// The qualified (wire) name, shared with the catalog.
    pub name: Arc<str>,
    /// Wrapped for approval (R10, R12) rather than raw.
    pub wrapped: bool,
    /// The description, for the model and tool search, shared with the catalog.
    pub description: Option<Arc<str>>,
}

/// One tool kept from the model, with the refusal a call to it would get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OmittedTool {
    /// The qualified name, shared with the catalog.
    pub name: Arc<str>,
    /// Why it is omitted (the same code, check and reason as at invocation, R16).
    pub refusal: Omission,
}

/// Which of the exposure's checks keeps a tool from an agent (R6–R11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OmissionKind {
    /// Not among the agent's allowed tools (R6, R39).
    NotAllowed,
    /// Withheld from the agent's confidential work (R7).
    Confidential,
    /// Egress on an air-gapped host (R8).
    AirGapped,
    /// The effective mode is `deny` (R10).
    Denied,
    /// Needs approval, and the agent runs as a tool of another (R11).
    NoApprovalChannel,
}

impl OmissionKind {
    pub(crate) fn code(self) -> RefusalCode {
        match self {
            OmissionKind::NotAllowed => RefusalCode::NotAllowed,
            OmissionKind::Confidential => RefusalCode::Confidential,
            OmissionKind::AirGapped => RefusalCode::AirGapped,
            OmissionKind::Denied => RefusalCode::Denied,
            OmissionKind::NoApprovalChannel => RefusalCode::NoApprovalChannel,
        }
    }
}

/// The reason text of one omission, written when displayed: the one text both the exposure
/// and invocation's refusal use, so they never differ (R16).
pub(crate) struct Reason<'a> {
    pub(crate) kind: OmissionKind,
    pub(crate) tool: &'a str,
    pub(crate) agent: &'a str,
}

impl fmt::Display for Reason<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (tool, agent) = (self.tool, self.agent);
        match self.kind {
            OmissionKind::NotAllowed => {
                write!(
                    f,
                    "`{tool}` is not among the allowed tools of agent `{agent}`"
                )
            }
            OmissionKind::Confidential => write!(
                f,
                "agent `{agent}` does confidential work and `{tool}` is withheld from confidential work"
            ),
            OmissionKind::AirGapped => write!(
                f,
                "the host is air-gapped and `{tool}` has effective network scope `egress`"
            ),
            OmissionKind::Denied => write!(
                f,
                "the effective approval mode of `{tool}` for agent `{agent}` is `deny`"
            ),
            OmissionKind::NoApprovalChannel => write!(
                f,
                "`{tool}` needs approval and agent `{agent}` runs as a tool of another agent, with no approval channel"
            ),
        }
    }
}

impl Reason<'_> {
    /// The refusal a call gets for this reason, from `check`.
    pub(crate) fn refusal(&self, check: Check) -> Refusal {
        Refusal::new(self.kind.code(), check, self.to_string())
    }
}

/// Why one tool is omitted: the refusal a call to it would get (R16), kept as its code, its
/// check and the names it speaks of; the reason's text is written when it is read
/// ([`fmt::Display`], [`Omission::reason`], [`Omission::to_refusal`]).
///
/// ```
/// use toolgate_core::{RefusalCode, ToolDeclaration, ToolIdentity};
/// use toolgate_engine::{AgentProfile, Governance};
/// let gov = Governance::builder()
///     .tool(ToolDeclaration::new(ToolIdentity::http("refund_order")))
///     .agent(AgentProfile::new("support"))
///     .build().unwrap();
/// let seen = gov.expose("support").unwrap();
/// let why = &seen.omitted[0].refusal;
/// assert_eq!(why.code, RefusalCode::NotAllowed);
/// assert_eq!(why.to_string(), "`refund_order` is not among the allowed tools of agent `support`");
/// assert_eq!(why.to_refusal().reasons, [why.reason()]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Omission {
    /// The refusal code (the same as at invocation, R16).
    pub code: RefusalCode,
    /// The check that omits the tool.
    pub decided_by: Check,
    kind: OmissionKind,
    tool: Arc<str>,
    agent: Arc<str>,
}

impl Omission {
    pub(crate) fn new(kind: OmissionKind, check: Check, tool: Arc<str>, agent: Arc<str>) -> Self {
        Self {
            code: kind.code(),
            decided_by: check,
            kind,
            tool,
            agent,
        }
    }

    fn text(&self) -> Reason<'_> {
        Reason {
            kind: self.kind,
            tool: &self.tool,
            agent: &self.agent,
        }
    }

    /// The reason, written now (the one reason of [`Omission::to_refusal`]).
    pub fn reason(&self) -> String {
        self.text().to_string()
    }

    /// The refusal a call to the tool gets (R16): code, check and this one reason.
    pub fn to_refusal(&self) -> Refusal {
        self.text().refusal(self.decided_by)
    }
}

impl fmt::Display for Omission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.text().fmt(f)
    }
}

/// What one agent sees (R6–R13). Every registered tool is in exactly one of the two
/// lists; both are sorted by the ASCII-lower-cased name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exposure {
    /// The agent's profile name.
    pub agent: String,
    /// Exposed tools.
    pub tools: Vec<ExposedTool>,
    /// Omitted tools.
    pub omitted: Vec<OmittedTool>,
}

impl Exposure {
    /// Tool search (R13): draws only from the exposed set, matching every whitespace-separated
    /// term case-insensitively in the name or description. An omitted tool is never found.
    ///
    /// ```
    /// use toolgate_core::{ApprovalMode, ToolDeclaration, ToolIdentity};
    /// use toolgate_engine::{AgentProfile, Governance};
    /// let gov = Governance::builder()
    ///     .tool(ToolDeclaration::new(ToolIdentity::http("refund_order")).description("Refund an order"))
    ///     .tool(ToolDeclaration::new(ToolIdentity::http("refund_all")).approval(ApprovalMode::Deny))
    ///     .agent(AgentProfile::new("a").allow(["refund_order", "refund_all"]))
    ///     .build().unwrap();
    /// let names: Vec<_> = gov.expose("a").unwrap().search("refund").map(|t| t.name.to_string()).collect();
    /// assert_eq!(names, ["refund_order"]);
    /// ```
    pub fn search<'a>(&'a self, query: &str) -> impl Iterator<Item = &'a ExposedTool> + 'a {
        let terms: Vec<String> = query.split_whitespace().map(str::to_lowercase).collect();
        self.tools.iter().filter(move |t| {
            let hay = format!(
                "{} {}",
                t.name.to_lowercase(),
                t.description.as_deref().unwrap_or("").to_lowercase()
            );
            terms.iter().all(|term| hay.contains(term.as_str()))
        })
    }

    /// Loads one tool by name through search's eligibility (R13): only an exposed tool.
    pub fn load(&self, name: &str) -> Option<&ExposedTool> {
        self.tools
            .iter()
            .find(|t| t.name.eq_ignore_ascii_case(name))
    }
}

/// An unknown agent profile passed to [`crate::Governance::expose`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownAgent(pub String);

impl std::fmt::Display for UnknownAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "no agent profile is named `{}`", self.0)
    }
}

impl std::error::Error for UnknownAgent {}
