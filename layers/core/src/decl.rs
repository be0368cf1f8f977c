//! Tool identities and declarations, SPEC R2–R5.

use std::fmt;

use crate::names::{self, NameError};

/// Where a tool comes from (SPEC §1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ToolKind {
    /// A first-party toolset: code in the host.
    Local,
    /// A tool of an MCP server.
    Mcp,
    /// An operator-declared HTTP tool.
    Http,
}

impl ToolKind {
    /// The spelling used in configuration and policies.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolKind::Local => "local",
            ToolKind::Mcp => "mcp",
            ToolKind::Http => "http",
        }
    }
}

impl fmt::Display for ToolKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A tool's identity (R2): its kind, its source (toolset or server name; empty for HTTP
/// tools) and its own raw name, as the source spelled them.
///
/// ```
/// use toolgate_core::ToolIdentity;
/// let t = ToolIdentity::mcp("GitHub Enterprise", "list.issues");
/// assert_eq!(t.qualified_name().unwrap(), "GitHub_Enterprise__list_issues");
/// assert!(t.same_identity(&ToolIdentity::mcp("github enterprise", "list.issues")));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ToolIdentity {
    kind: ToolKind,
    source: String,
    name: String,
}

impl ToolIdentity {
    /// A method of a first-party toolset.
    pub fn toolset(toolset: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            kind: ToolKind::Local,
            source: toolset.into(),
            name: name.into(),
        }
    }

    /// A tool of an MCP server, named by the server id the operator configured.
    pub fn mcp(server: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            kind: ToolKind::Mcp,
            source: server.into(),
            name: name.into(),
        }
    }

    /// An operator-declared HTTP tool.
    pub fn http(name: impl Into<String>) -> Self {
        Self {
            kind: ToolKind::Http,
            source: String::new(),
            name: name.into(),
        }
    }

    /// The tool's kind.
    pub fn kind(&self) -> ToolKind {
        self.kind
    }

    /// The toolset or server name; empty for an HTTP tool.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The MCP server's name, for MCP tools only.
    pub fn server(&self) -> Option<&str> {
        (self.kind == ToolKind::Mcp).then_some(self.source.as_str())
    }

    /// The tool's own raw name on its source.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The prompt of an approval interaction about this tool (R43, seed 002):
    /// `Approve server / tool?` for an MCP tool, `Approve tool?` otherwise, naming the tool's
    /// **own** name (R41: never the name a gateway listed it under, never the wire name).
    /// Every channel shows this one text.
    ///
    /// ```
    /// use toolgate_core::ToolIdentity;
    /// assert_eq!(ToolIdentity::mcp("github", "create_issue").approval_prompt(), "Approve github / create_issue?");
    /// assert_eq!(ToolIdentity::http("refund").approval_prompt(), "Approve refund?");
    /// assert_eq!(ToolIdentity::toolset("coding", "write").approval_prompt(), "Approve write?");
    /// ```
    pub fn approval_prompt(&self) -> String {
        match self.kind {
            ToolKind::Mcp => format!("Approve {} / {}?", self.source, self.name),
            ToolKind::Local | ToolKind::Http => format!("Approve {}?", self.name),
        }
    }

    /// The qualified (wire) name (R1).
    pub fn qualified_name(&self) -> Result<String, NameError> {
        match self.kind {
            ToolKind::Local => names::toolset_name(&self.source, &self.name),
            ToolKind::Mcp => names::mcp_name(&self.source, &self.name),
            ToolKind::Http => names::http_name(&self.name),
        }
    }

    /// Whether two identities are the same tool: same kind, source compared
    /// case-insensitively, same raw name (R2).
    pub fn same_identity(&self, other: &ToolIdentity) -> bool {
        self.kind == other.kind
            && names::names_equal(&self.source, &other.source)
            && self.name == other.name
    }
}

impl fmt::Display for ToolIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            ToolKind::Local => write!(f, "toolset `{}` tool `{}`", self.source, self.name),
            ToolKind::Mcp => write!(f, "server `{}` tool `{}`", self.source, self.name),
            ToolKind::Http => write!(f, "http tool `{}`", self.name),
        }
    }
}

/// A declared or effective approval mode (R4, R9, R10).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum ApprovalMode {
    /// Use the declared default; exposed raw.
    #[default]
    Default,
    /// Exposed wrapped: every call asks a person.
    RequireApproval,
    /// Exposed raw, without a prompt.
    AutoApprove,
    /// Omitted and refused.
    Deny,
}

impl ApprovalMode {
    /// The spelling used in configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalMode::Default => "default",
            ApprovalMode::RequireApproval => "require_approval",
            ApprovalMode::AutoApprove => "auto_approve",
            ApprovalMode::Deny => "deny",
        }
    }

    /// Parses the configuration spelling; anything else is `None` (never a default, R5).
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "default" => ApprovalMode::Default,
            "require_approval" => ApprovalMode::RequireApproval,
            "auto_approve" => ApprovalMode::AutoApprove,
            "deny" => ApprovalMode::Deny,
            _ => return None,
        })
    }

    /// Strictness rank: deny, then require_approval, then default, then auto_approve.
    pub fn strictness(self) -> u8 {
        match self {
            ApprovalMode::Deny => 3,
            ApprovalMode::RequireApproval => 2,
            ApprovalMode::Default => 1,
            ApprovalMode::AutoApprove => 0,
        }
    }

    /// The stricter of two modes (R24, R39).
    ///
    /// ```
    /// use toolgate_core::ApprovalMode;
    /// assert_eq!(ApprovalMode::AutoApprove.stricter(ApprovalMode::RequireApproval), ApprovalMode::RequireApproval);
    /// assert_eq!(ApprovalMode::Deny.stricter(ApprovalMode::Default), ApprovalMode::Deny);
    /// ```
    #[must_use]
    pub fn stricter(self, other: ApprovalMode) -> ApprovalMode {
        if other.strictness() > self.strictness() {
            other
        } else {
            self
        }
    }
}

impl fmt::Display for ApprovalMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a tool uses the network (R4, R8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[non_exhaustive]
pub enum NetworkScope {
    /// The tool does not use the network.
    #[default]
    None,
    /// Local work that may reach the network as a side effect.
    Incidental,
    /// The tool's purpose is outbound network access.
    Egress,
}

impl NetworkScope {
    /// The spelling used in configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkScope::None => "none",
            NetworkScope::Incidental => "incidental",
            NetworkScope::Egress => "egress",
        }
    }

    /// Parses the configuration spelling; anything else is `None`.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "none" => NetworkScope::None,
            "incidental" => NetworkScope::Incidental,
            "egress" => NetworkScope::Egress,
            _ => return None,
        })
    }
}

impl fmt::Display for NetworkScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// MCP tool annotations as the server advertised them (R5). `None` means the server
/// did not say; the protocol's defaults then apply where a rule reads them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct McpAnnotations {
    /// A human-readable title.
    pub title: Option<String>,
    /// `readOnlyHint`.
    pub read_only_hint: Option<bool>,
    /// `destructiveHint`.
    pub destructive_hint: Option<bool>,
    /// `idempotentHint`.
    pub idempotent_hint: Option<bool>,
    /// `openWorldHint`; absent means `true` (the protocol's default).
    pub open_world_hint: Option<bool>,
}

/// What a source says about one tool (SPEC §1, R4–R5).
///
/// ```
/// use toolgate_core::{ApprovalMode, NetworkScope, ToolDeclaration, ToolIdentity};
/// let d = ToolDeclaration::new(ToolIdentity::http("refund_order"))
///     .approval(ApprovalMode::RequireApproval)
///     .network(NetworkScope::Egress);
/// assert_eq!(d.effective_network(), NetworkScope::Egress);
/// assert!(!d.read_only, "R5: first-party and HTTP tools are assumed to write");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolDeclaration {
    /// Who the tool is.
    pub identity: ToolIdentity,
    /// A description shown to the model and approvers.
    pub description: Option<String>,
    /// The declared approval mode.
    pub approval: ApprovalMode,
    /// The declared network scope (kept for audit).
    pub network: NetworkScope,
    /// The operator's override of the effective network scope (R4, R8).
    pub network_override: Option<NetworkScope>,
    /// Host-declared read-only (first-party and HTTP tools only, R5).
    pub read_only: bool,
    /// Withheld from confidential work (R7).
    pub confidential: bool,
    /// MCP annotations (MCP tools only).
    pub annotations: Option<McpAnnotations>,
    /// The tool's input schema, when its source advertised one (R36).
    pub input_schema: Option<serde_json::Value>,
    /// The name the source listed the tool under, when that differs from its own name: a
    /// gateway's prefix (R41). Calls are sent under it; everything else uses
    /// [`ToolIdentity::name`]. Set by the engine from the server's `tool_prefix`.
    pub listed_name: Option<String>,
    /// Whether the approval decision applies to the tool (R42). `false` only for the host's
    /// own tools (a `toolset` tool), with [`ToolDeclaration::ungoverned_reason`].
    pub governed: bool,
    /// Why a host tool is not governed (R42): required, not blank, when `governed` is false.
    pub ungoverned_reason: Option<String>,
    /// Which fields make up the call's execution target (seed 000): shown first
    /// wherever a person reads the call. Not part of the tool's definition (R35).
    pub target: Option<crate::target::TargetSpec>,
    /// The operator's labels for the tool (R49; `tools[].labels`): never read from a
    /// server's listing, not part of the tool's definition (R35).
    pub labels: Vec<String>,
}

impl ToolDeclaration {
    /// A declaration with every aspect at its default (R4, R5).
    pub fn new(identity: ToolIdentity) -> Self {
        Self {
            identity,
            description: None,
            approval: ApprovalMode::Default,
            network: NetworkScope::None,
            network_override: None,
            read_only: false,
            confidential: false,
            annotations: None,
            input_schema: None,
            listed_name: None,
            governed: true,
            ungoverned_reason: None,
            target: None,
            labels: Vec::new(),
        }
    }

    /// Sets the operator's labels (R49).
    #[must_use]
    pub fn labels<I, S>(mut self, labels: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.labels = labels.into_iter().map(Into::into).collect();
        self
    }

    /// Declares a host tool ungoverned (R42): it reads what the agent was already given, so
    /// the approval decision (agent-level ask, tenant rules, posture, hooks) never applies.
    /// Unknown tool, input bounds, allowed names, confidentiality, the air gap and an
    /// explicit `deny` still do. Only a `toolset` tool may be ungoverned, and the reason
    /// must not be blank: the engine refuses anything else when the snapshot is built.
    ///
    /// ```
    /// use toolgate_core::{ToolDeclaration, ToolIdentity};
    /// let d = ToolDeclaration::new(ToolIdentity::toolset("skills", "read_skill"))
    ///     .ungoverned("reads the skill instructions the agent was already given");
    /// assert!(!d.governed);
    /// ```
    #[must_use]
    pub fn ungoverned(mut self, reason: impl Into<String>) -> Self {
        self.governed = false;
        self.ungoverned_reason = Some(reason.into());
        self
    }

    /// The name a call to this tool is sent under: the listed name behind a prefixing
    /// gateway (R41), otherwise the tool's own name.
    pub fn sent_name(&self) -> &str {
        self.listed_name
            .as_deref()
            .unwrap_or_else(|| self.identity.name())
    }

    /// Sets the declared approval mode.
    #[must_use]
    pub fn approval(mut self, mode: ApprovalMode) -> Self {
        self.approval = mode;
        self
    }

    /// Sets the declared network scope.
    #[must_use]
    pub fn network(mut self, scope: NetworkScope) -> Self {
        self.network = scope;
        self
    }

    /// Sets the operator's network override.
    #[must_use]
    pub fn network_override(mut self, scope: NetworkScope) -> Self {
        self.network_override = Some(scope);
        self
    }

    /// Declares the tool read-only (first-party and HTTP tools).
    #[must_use]
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Withholds the tool from confidential work.
    #[must_use]
    pub fn confidential(mut self, confidential: bool) -> Self {
        self.confidential = confidential;
        self
    }

    /// Records MCP annotations.
    #[must_use]
    pub fn annotations(mut self, annotations: McpAnnotations) -> Self {
        self.annotations = Some(annotations);
        self
    }

    /// Sets the description.
    #[must_use]
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// Whether `other` defines the same tool (R35): the same identity, description, input
    /// schema and annotations. The host's settings (approval, confidentiality, network,
    /// target) are not part of a tool's definition.
    ///
    /// ```
    /// use toolgate_core::{ApprovalMode, ToolDeclaration, ToolIdentity};
    /// let listed = ToolDeclaration::new(ToolIdentity::mcp("bank", "wipe")).description("Wipes");
    /// assert!(listed.clone().approval(ApprovalMode::Deny).same_definition(&listed));
    /// assert!(!listed.clone().description("Wipes, and more").same_definition(&listed));
    /// ```
    pub fn same_definition(&self, other: &ToolDeclaration) -> bool {
        self.identity == other.identity
            && self.description == other.description
            && self.input_schema == other.input_schema
            && self.annotations == other.annotations
    }

    /// The effective network scope used for filtering (R8): the operator's override
    /// decides outright; otherwise an MCP tool whose `openWorldHint` is `true` or absent
    /// is `egress`; otherwise the declared scope.
    pub fn effective_network(&self) -> NetworkScope {
        if let Some(scope) = self.network_override {
            return scope;
        }
        if self.identity.kind() == ToolKind::Mcp {
            let open_world = self
                .annotations
                .as_ref()
                .and_then(|a| a.open_world_hint)
                .unwrap_or(true);
            if open_world {
                return NetworkScope::Egress;
            }
        }
        self.network
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r4_defaults() {
        let d = ToolDeclaration::new(ToolIdentity::http("x"));
        assert_eq!(d.approval, ApprovalMode::Default);
        assert_eq!(d.network, NetworkScope::None);
        assert_eq!(d.effective_network(), NetworkScope::None);
    }

    #[test]
    fn r8_open_world_tightens_only() {
        let mcp = |hint: Option<bool>| {
            ToolDeclaration::new(ToolIdentity::mcp("kb", "t")).annotations(McpAnnotations {
                open_world_hint: hint,
                ..Default::default()
            })
        };
        assert_eq!(mcp(None).effective_network(), NetworkScope::Egress);
        assert_eq!(mcp(Some(true)).effective_network(), NetworkScope::Egress);
        assert_eq!(mcp(Some(false)).effective_network(), NetworkScope::None);
        assert_eq!(
            mcp(Some(false))
                .network(NetworkScope::Egress)
                .effective_network(),
            NetworkScope::Egress,
            "openWorldHint false lowers nothing"
        );
        assert_eq!(
            ToolDeclaration::new(ToolIdentity::mcp("kb", "t")).effective_network(),
            NetworkScope::Egress,
            "no annotations at all: the protocol default is open-world"
        );
        assert_eq!(
            mcp(None)
                .network_override(NetworkScope::None)
                .effective_network(),
            NetworkScope::None,
            "the operator's override decides outright"
        );
    }

    #[test]
    fn r24_stricter_mode_order() {
        use ApprovalMode::*;
        let all = [Default, RequireApproval, AutoApprove, Deny];
        for a in all {
            for b in all {
                let s = a.stricter(b);
                assert_eq!(s, b.stricter(a).max_by_rank(s));
                assert!(s.strictness() >= a.strictness() && s.strictness() >= b.strictness());
            }
        }
    }

    impl ApprovalMode {
        fn max_by_rank(self, other: Self) -> Self {
            if self.strictness() >= other.strictness() {
                self
            } else {
                other
            }
        }
    }

    #[test]
    fn r2_identity_source_is_case_insensitive() {
        assert!(ToolIdentity::mcp("GitHub", "x").same_identity(&ToolIdentity::mcp("github", "x")));
        assert!(
            !ToolIdentity::mcp("github", "x").same_identity(&ToolIdentity::toolset("github", "x"))
        );
        assert!(!ToolIdentity::mcp("github", "x").same_identity(&ToolIdentity::mcp("github", "X")));
    }
}
