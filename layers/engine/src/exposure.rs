//! What one agent is shown (R6–R13): the exposed tools, the omitted ones with the refusal a
//! call would get, and tool search over the exposed set. [`crate::Governance::expose`] makes
//! it, with invocation's own checks, so the two never disagree.

use toolgate_core::Refusal;

/// One tool the model is shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExposedTool {
    /// The qualified (wire) name.
    pub name: String,
    /// Wrapped for approval (R10, R12) rather than raw.
    pub wrapped: bool,
    /// The description, for the model and tool search.
    pub description: Option<String>,
}

/// One tool kept from the model, with the refusal a call to it would get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OmittedTool {
    /// The qualified name.
    pub name: String,
    /// Why it is omitted (the same code as at invocation, R16).
    pub refusal: Refusal,
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
    /// let names: Vec<_> = gov.expose("a").unwrap().search("refund").map(|t| t.name.clone()).collect();
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
