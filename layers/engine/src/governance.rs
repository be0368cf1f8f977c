//! The governance snapshot: host settings, servers, the catalog with its behaviour
//! records, agent profiles and the tenant policy, validated and resolved once.

use std::collections::{HashMap, HashSet};

use toolgate_core::names::{lower_key, name_key};
use toolgate_core::{ApprovalMode, ChannelKind, ToolDeclaration, ToolIdentity, ToolKind};

use crate::catalog::{Catalog, Entry, PostureStatus, Record, Registered};
use crate::error::{ConfigErrors, Warning, index};
use crate::observe::{AuditSettings, RedactionSettings};
use crate::policy::{Effect, Limits, Policy};

/// What the operator says about one MCP server.
///
/// ```
/// use toolgate_engine::ServerSettings;
/// let s = ServerSettings::trusted().tool_prefix("github-");
/// assert_eq!(s.own_name("github-create_issue"), Some("create_issue"));
/// assert_eq!(s.own_name("GitHub-create_issue"), Some("create_issue"), "ASCII case-insensitively");
/// assert_eq!(s.own_name("github-"), None, "only the prefix: kept as listed");
/// assert_eq!(s.own_name("create_issue"), None, "no prefix: kept as listed");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServerSettings {
    /// Believe the server's read-only annotations for the posture (R28).
    pub trust_tool_annotations: bool,
    /// The server is reached through a gateway that lists each tool as this prefix followed
    /// by the tool's own name (R41). Used as written, never trimmed; must not be blank.
    pub tool_prefix: Option<String>,
}

impl ServerSettings {
    /// A server whose read-only claims are believed.
    pub fn trusted() -> Self {
        Self {
            trust_tool_annotations: true,
            tool_prefix: None,
        }
    }

    /// A server whose read-only claims exempt nothing (the default).
    pub fn untrusted() -> Self {
        Self::default()
    }

    /// Sets the gateway tool prefix (R41).
    #[must_use]
    pub fn tool_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.tool_prefix = Some(prefix.into());
        self
    }

    /// A listed name's own name behind this server's gateway prefix (R41): the listed name
    /// without the prefix when it starts with it (ASCII case-insensitively) and is longer;
    /// `None` when the name keeps its listed spelling.
    pub fn own_name<'a>(&self, listed: &'a str) -> Option<&'a str> {
        let prefix = self.tool_prefix.as_deref()?;
        if listed.len() <= prefix.len() {
            return None;
        }
        let head = listed.as_bytes().get(..prefix.len())?;
        if !head.eq_ignore_ascii_case(prefix.as_bytes()) {
            return None;
        }
        // Equal bytes up to ASCII case: the split point is a character boundary.
        listed.get(prefix.len()..)
    }
}

/// An exemption from the behaviour posture (R31).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exemption {
    /// The tool's own name, compared case-insensitively.
    pub tool: String,
    /// The MCP server it covers; without one, local and HTTP tools and tools of trusted
    /// servers.
    pub server: Option<String>,
    /// Why; required, not blank.
    pub reason: String,
}

impl Exemption {
    /// An exemption for `tool` with a reason.
    pub fn new(tool: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            tool: tool.into(),
            server: None,
            reason: reason.into(),
        }
    }

    /// Limits the exemption to one MCP server.
    #[must_use]
    pub fn server(mut self, server: impl Into<String>) -> Self {
        self.server = Some(server.into());
        self
    }

    /// Whether the entry covers this record's actual source (R31).
    fn covers(&self, record: &Record, servers: &HashMap<String, ServerSettings>) -> bool {
        let id = record.identity();
        if !self.tool.eq_ignore_ascii_case(id.name()) {
            return false;
        }
        match (&self.server, id.kind()) {
            (Some(server), ToolKind::Mcp) => server.eq_ignore_ascii_case(id.source()),
            (Some(_), _) => false,
            (None, ToolKind::Mcp) => trusted(servers, id.source()),
            (None, _) => true,
        }
    }
}

fn trusted(servers: &HashMap<String, ServerSettings>, server: &str) -> bool {
    servers
        .get(&name_key(server))
        .is_some_and(|s| s.trust_tool_annotations)
}

/// One agent's profile (SPEC §1, R6–R11, R39).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AgentProfile {
    /// The profile's name.
    pub name: String,
    /// The qualified names the agent may use.
    pub allowed_tools: Vec<String>,
    /// Confidential work: tools withheld from it are omitted (R7).
    pub confidential: bool,
    /// Runs as a tool of another agent, with no approval channel (R11).
    pub as_tool: bool,
    /// Sparse approval overrides by qualified name, in order (R9).
    pub overrides: Vec<(String, ApprovalMode)>,
    /// The parent profile (R39).
    pub parent: Option<String>,
}

impl AgentProfile {
    /// A profile with nothing allowed.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ..Self::default()
        }
    }

    /// Allows these qualified names.
    #[must_use]
    pub fn allow<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.allowed_tools.extend(names.into_iter().map(Into::into));
        self
    }

    /// Marks the agent confidential.
    #[must_use]
    pub fn confidential(mut self, yes: bool) -> Self {
        self.confidential = yes;
        self
    }

    /// Marks the agent as running as a tool of another agent.
    #[must_use]
    pub fn as_tool(mut self, yes: bool) -> Self {
        self.as_tool = yes;
        self
    }

    /// Adds an approval override for a qualified name (the last for a name wins).
    #[must_use]
    pub fn override_mode(mut self, tool: impl Into<String>, mode: ApprovalMode) -> Self {
        self.overrides.push((tool.into(), mode));
        self
    }

    /// Names a parent profile.
    #[must_use]
    pub fn parent(mut self, parent: impl Into<String>) -> Self {
        self.parent = Some(parent.into());
        self
    }
}

/// An agent profile resolved against its ancestors (R39).
#[derive(Debug, Clone)]
pub struct ResolvedAgent {
    /// The profile's name.
    pub name: String,
    allowed: HashSet<String>,
    /// Confidential, itself or through an ancestor.
    pub confidential: bool,
    /// Runs as a tool, itself or through an ancestor.
    pub as_tool: bool,
    overrides: HashMap<String, ApprovalMode>,
    parent: Option<usize>,
}

impl ResolvedAgent {
    /// Whether a qualified name is allowed (R6, intersected with every ancestor's, R39).
    pub fn allows(&self, key: &str) -> bool {
        self.allowed.contains(key)
    }
}

/// The tenant policy as the snapshot holds it.
#[derive(Debug, Clone)]
pub enum PolicyState {
    /// A valid policy (shared: snapshots that differ elsewhere share it).
    Readable(std::sync::Arc<Policy>),
    /// A stored policy that cannot be read (R22): every mcp/http call is refused
    /// `policy_unreadable` with this reason.
    Unreadable(String),
}

impl Default for PolicyState {
    fn default() -> Self {
        PolicyState::readable(Policy::empty())
    }
}

impl PolicyState {
    /// A valid policy's state.
    pub fn readable(policy: Policy) -> Self {
        PolicyState::Readable(std::sync::Arc::new(policy))
    }
}

/// Host settings (SPEC §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostSettings {
    /// The governor: tenant policy and posture apply only when armed (R15).
    pub enforce_tool_invocation: bool,
    /// Local-only: egress tools are omitted and refused (R8).
    pub air_gapped: bool,
    /// Where asks go (R26).
    pub channel: ChannelKind,
    /// The behaviour posture (R27).
    pub require_approval_for_non_read_only: bool,
    /// Policy and input limits.
    pub limits: Limits,
}

impl Default for HostSettings {
    fn default() -> Self {
        Self {
            enforce_tool_invocation: true,
            air_gapped: false,
            channel: ChannelKind::None,
            require_approval_for_non_read_only: false,
            limits: Limits::default(),
        }
    }
}

/// Builds a [`Governance`] in code; everything a configuration file can say.
///
/// ```
/// use toolgate_core::{ApprovalMode, ChannelKind, ToolDeclaration, ToolIdentity};
/// use toolgate_engine::{AgentProfile, Governance};
///
/// let gov = Governance::builder()
///     .channel(ChannelKind::Interactive)
///     .tool(ToolDeclaration::new(ToolIdentity::http("refund_order")).approval(ApprovalMode::RequireApproval))
///     .agent(AgentProfile::new("support").allow(["refund_order"]))
///     .build()
///     .unwrap();
/// let seen = gov.expose("support").unwrap();
/// assert_eq!(seen.tools[0].name, "refund_order");
/// assert!(seen.tools[0].wrapped);
/// ```
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct GovernanceBuilder {
    settings: HostSettings,
    exemptions: Vec<Exemption>,
    servers: Vec<(String, ServerSettings)>,
    tools: Vec<ToolDeclaration>,
    agents: Vec<AgentProfile>,
    policy: PolicyState,
    audit: AuditSettings,
    redaction: RedactionSettings,
    /// Errors found while building up (a change naming something absent), reported by
    /// `build`.
    pending: Vec<(String, String)>,
}

impl GovernanceBuilder {
    /// Arms or disarms the governor (default armed).
    pub fn enforce_tool_invocation(mut self, yes: bool) -> Self {
        self.settings.enforce_tool_invocation = yes;
        self
    }

    /// Marks the host air-gapped.
    pub fn air_gapped(mut self, yes: bool) -> Self {
        self.settings.air_gapped = yes;
        self
    }

    /// Sets the approval channel.
    pub fn channel(mut self, channel: ChannelKind) -> Self {
        self.settings.channel = channel;
        self
    }

    /// Turns the behaviour posture on or off (R27).
    pub fn require_approval_for_non_read_only(mut self, yes: bool) -> Self {
        self.settings.require_approval_for_non_read_only = yes;
        self
    }

    /// Adds a posture exemption (R31).
    pub fn exemption(mut self, exemption: Exemption) -> Self {
        self.exemptions.push(exemption);
        self
    }

    /// Configures an MCP server.
    pub fn server(mut self, name: impl Into<String>, settings: ServerSettings) -> Self {
        self.servers.push((name.into(), settings));
        self
    }

    /// Declares a tool (arrival order matters, R29).
    pub fn tool(mut self, decl: ToolDeclaration) -> Self {
        self.tools.push(decl);
        self
    }

    /// Removes every declaration of this identity (a tool its server stopped listing). The
    /// identity may name the tool by its own name or, behind a prefixing gateway, as listed
    /// (R41). Removing a tool that is not declared changes nothing.
    ///
    /// ```
    /// use toolgate_core::{ToolDeclaration, ToolIdentity};
    /// use toolgate_engine::Governance;
    /// let gov = Governance::builder()
    ///     .tool(ToolDeclaration::new(ToolIdentity::mcp("kb", "page")))
    ///     .remove_tool(&ToolIdentity::mcp("KB", "page"))
    ///     .build()
    ///     .unwrap();
    /// assert!(gov.catalog().is_empty());
    /// ```
    pub fn remove_tool(mut self, identity: &toolgate_core::ToolIdentity) -> Self {
        self.tools.retain(|d| {
            let listed = d
                .listed_name
                .as_deref()
                .unwrap_or_else(|| d.identity.name());
            let named = d.identity.same_identity(identity)
                || (d.identity.kind() == identity.kind()
                    && d.identity.source().eq_ignore_ascii_case(identity.source())
                    && listed == identity.name());
            !named
        });
        self
    }

    /// Sets one agent's approval override for a qualified name at run time (seed 000):
    /// every earlier entry for that name is replaced, and `default` removes the override
    /// (R9), so a configuration written back keeps only overrides in force. An agent that
    /// does not exist is an error when the snapshot is built.
    ///
    /// ```
    /// use toolgate_core::{ApprovalMode, ToolDeclaration, ToolIdentity};
    /// use toolgate_engine::{AgentProfile, Governance};
    /// let gov = Governance::builder()
    ///     .tool(ToolDeclaration::new(ToolIdentity::http("refund_order")))
    ///     .agent(AgentProfile::new("support").allow(["refund_order"]))
    ///     .set_override("support", "refund_order", ApprovalMode::Deny)
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(gov.expose("support").unwrap().omitted[0].name, "refund_order");
    /// ```
    pub fn set_override(mut self, agent: &str, tool: &str, mode: ApprovalMode) -> Self {
        let key = name_key(tool);
        match self
            .agents
            .iter_mut()
            .find(|a| a.name.eq_ignore_ascii_case(agent))
        {
            Some(profile) => {
                profile.overrides.retain(|(t, _)| name_key(t) != key);
                if mode != ApprovalMode::Default {
                    profile.overrides.push((tool.to_owned(), mode));
                }
            }
            None => self.pending.push((
                String::from("agents"),
                format!("no agent profile is named `{agent}`, so its override for `{tool}` cannot be set"),
            )),
        }
        self
    }

    /// Adds an agent profile.
    pub fn agent(mut self, profile: AgentProfile) -> Self {
        self.agents.push(profile);
        self
    }

    /// Sets the tenant policy.
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = PolicyState::readable(policy);
        self
    }

    /// Sets the tenant policy's state, an unreadable stored policy included (R22).
    pub fn policy_state(mut self, state: PolicyState) -> Self {
        self.policy = state;
        self
    }

    /// Sets the audit settings (R33).
    pub fn audit(mut self, audit: AuditSettings) -> Self {
        self.audit = audit;
        self
    }

    /// Sets the redaction settings (R33).
    pub fn redaction(mut self, redaction: RedactionSettings) -> Self {
        self.redaction = redaction;
        self
    }

    /// Sets the limits.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.settings.limits = limits;
        self
    }

    /// The limits set so far.
    pub fn current_limits(&self) -> Limits {
        self.settings.limits
    }

    /// Validates everything and resolves the snapshot. Any error refuses the whole
    /// configuration; every error is reported with its path.
    pub fn build(self) -> Result<Governance, ConfigErrors> {
        let mut errs = ConfigErrors::default();
        for (path, message) in &self.pending {
            errs.push(path.clone(), message.clone());
        }
        let s = self.settings;
        let policy_path = "policy";

        // R15, R27: an inert setting never passes silently.
        if !s.enforce_tool_invocation {
            if s.require_approval_for_non_read_only {
                errs.push(
                    "behavior_gating.require_approval_for_non_read_only",
                    "the behaviour posture is on but `enforce_tool_invocation` is false, so it would never apply",
                );
            }
            if let PolicyState::Readable(p) = &self.policy
                && !p.is_empty()
            {
                errs.push(
                    policy_path,
                    "a non-empty tenant policy is set but `enforce_tool_invocation` is false, so it would never apply",
                );
            }
        }
        if s.limits.max_input_depth > crate::policy::MAX_INPUT_DEPTH_CEILING {
            errs.push(
                "limits.max_input_depth",
                format!(
                    "`{}` is more than the most this project accepts ({})",
                    s.limits.max_input_depth,
                    crate::policy::MAX_INPUT_DEPTH_CEILING
                ),
            );
        }
        if s.limits.regex_size_limit > crate::policy::DEFAULT_REGEX_SIZE_LIMIT {
            errs.push(
                "limits.regex_size_limit",
                format!(
                    "`{}` is more than the regular-expression engine's default limit ({}); only a smaller one may be set",
                    s.limits.regex_size_limit,
                    crate::policy::DEFAULT_REGEX_SIZE_LIMIT
                ),
            );
        }

        let mut servers: HashMap<String, ServerSettings> = HashMap::new();
        for (name, settings) in &self.servers {
            let path = crate::error::field("servers", name);
            if name.trim().is_empty() {
                errs.push(path, "a server name must not be blank");
                continue;
            }
            if let Some(prefix) = &settings.tool_prefix
                && prefix.trim().is_empty()
            {
                errs.push(
                    format!("{path}.tool_prefix"),
                    "`tool_prefix` must not be blank (R41)",
                );
            }
            if servers.insert(name_key(name), settings.clone()).is_some() {
                errs.push(
                    path,
                    format!(
                        "server `{name}` is configured twice (names compare case-insensitively)"
                    ),
                );
            }
        }

        // R41: behind a prefixing gateway the own name is the listed name less the prefix;
        // every later step (identity, qualified name, rules, exemptions, posture) uses it.
        let decls: Vec<ToolDeclaration> =
            self.tools.iter().map(|d| own_named(d, &servers)).collect();
        check_prefixed_names(&decls, &servers, &mut errs);
        check_ungoverned_records(&decls, &mut errs);

        let mut catalog = Catalog::new();
        let mut collisions = Vec::new();
        for (i, decl) in decls.iter().enumerate() {
            let path = index("tools", i);
            let id = &decl.identity;
            if id.kind() != ToolKind::Http && id.source().trim().is_empty() {
                let key = if id.kind() == ToolKind::Mcp {
                    "server"
                } else {
                    "toolset"
                };
                errs.push(
                    format!("{path}.{key}"),
                    format!("`{key}` must not be blank"),
                );
                continue;
            }
            match catalog.register(decl.clone()) {
                Ok(Registered::Collision) => collisions.push(i),
                Ok(_) => {}
                Err(e) => {
                    let source_ok = match id.kind() {
                        ToolKind::Http => true,
                        _ => toolgate_core::names::normalize_segment(id.source()).is_ok(),
                    };
                    let key = match id.kind() {
                        _ if source_ok => "name",
                        ToolKind::Mcp => "server",
                        _ => "toolset",
                    };
                    errs.push(format!("{path}.{key}"), format!("{e} (R1)"));
                }
            }
        }

        // R31: exemptions.
        for (i, ex) in self.exemptions.iter().enumerate() {
            let path = index("behavior_gating.exemptions", i);
            if ex.tool.trim().is_empty() {
                errs.push(format!("{path}.tool"), "`tool` must not be blank");
            }
            if ex.reason.trim().is_empty() {
                errs.push(
                    format!("{path}.reason"),
                    "an exemption needs a reason that is not blank (R31)",
                );
            }
            match &ex.server {
                Some(server) if server.trim().is_empty() => {
                    errs.push(format!("{path}.server"), "`server` must not be blank");
                }
                Some(_) => {}
                None => {
                    let untrusted = decls.iter().find(|d| {
                        d.identity.kind() == ToolKind::Mcp
                            && d.identity.name().eq_ignore_ascii_case(&ex.tool)
                            && !trusted(&servers, d.identity.source())
                    });
                    if let Some(d) = untrusted {
                        errs.push(
                            format!("{path}.server"),
                            format!(
                                "`{}` is declared by MCP server `{}`, which is not trusted: name the server the exemption covers (R31)",
                                ex.tool,
                                d.identity.source()
                            ),
                        );
                    }
                }
            }
        }

        // Agents: names, parents, cycles (R39).
        let mut agent_index: HashMap<String, usize> = HashMap::new();
        for (i, a) in self.agents.iter().enumerate() {
            let path = index("agents", i);
            if a.name.trim().is_empty() {
                errs.push(format!("{path}.name"), "an agent name must not be blank");
                continue;
            }
            if agent_index.insert(name_key(&a.name), i).is_some() {
                errs.push(
                    format!("{path}.name"),
                    format!(
                        "agent `{}` is defined twice (names compare case-insensitively)",
                        a.name
                    ),
                );
            }
        }
        for (i, a) in self.agents.iter().enumerate() {
            let Some(parent) = &a.parent else { continue };
            let path = format!("{}.parent", index("agents", i));
            if parent.trim().is_empty() {
                errs.push(path, "`parent` must not be blank");
                continue;
            }
            if !agent_index.contains_key(&name_key(parent)) {
                errs.push(path, format!("no agent profile is named `{parent}`"));
                continue;
            }
            // Walk up; a walk longer than the number of profiles is a cycle.
            let mut at = Some(i);
            let mut steps = 0usize;
            while let Some(k) = at {
                steps += 1;
                if steps > self.agents.len() {
                    errs.push(
                        path.clone(),
                        format!("the `parent` chain of `{}` is a cycle (R39)", a.name),
                    );
                    break;
                }
                at = self
                    .agents
                    .get(k)
                    .and_then(|p| p.parent.as_ref())
                    .and_then(|p| agent_index.get(&name_key(p)).copied());
            }
        }

        // R42: an override `require_approval` naming an ungoverned tool would never ask.
        for (k, a) in self.agents.iter().enumerate() {
            for (j, (tool, mode)) in a.overrides.iter().enumerate() {
                if *mode != ApprovalMode::RequireApproval || tool.trim().is_empty() {
                    continue;
                }
                if catalog.get(tool).is_some_and(|e| e.ungoverned) {
                    let path = index(&format!("{}.overrides", index("agents", k)), j);
                    errs.push(
                        format!("{path}.approval"),
                        format!(
                            "`{tool}` is declared `governed: false`, so an override `require_approval` would never ask (R42)"
                        ),
                    );
                }
            }
        }

        if !errs.is_empty() {
            return Err(errs);
        }

        // Posture records (R27–R31).
        for entry in catalog.entries_mut() {
            for record in &mut entry.records {
                record.posture = posture_of(record, &servers, &self.exemptions);
            }
        }

        let agents = resolve_agents(&self.agents, &agent_index);
        Ok(Governance {
            settings: s,
            exemptions: self.exemptions,
            servers,
            catalog,
            collisions,
            agents,
            agent_index,
            profiles: self.agents,
            policy: self.policy,
            declarations: decls,
            audit: self.audit,
            redaction: self.redaction,
        })
    }
}

/// A declaration as the catalog holds it: behind a prefixing gateway, named by its own
/// name with the listed name kept for sending (R41). Idempotent: a declaration that already
/// carries its listed name is recomputed from it.
fn own_named(decl: &ToolDeclaration, servers: &HashMap<String, ServerSettings>) -> ToolDeclaration {
    let mut out = decl.clone();
    let id = &decl.identity;
    if id.kind() != ToolKind::Mcp {
        return out;
    }
    let listed = decl.listed_name.as_deref().unwrap_or_else(|| id.name());
    let own = servers
        .get(&name_key(id.source()))
        .and_then(|s| s.own_name(listed));
    match own {
        Some(own) => {
            out.identity = ToolIdentity::mcp(id.source(), own);
            out.listed_name = Some(listed.to_owned());
        }
        None => {
            out.identity = ToolIdentity::mcp(id.source(), listed);
            out.listed_name = None;
        }
    }
    out
}

/// R41: two different listed names of one prefixed server that come to one own name are a
/// load error (the same listed name again is a revision).
fn check_prefixed_names(
    decls: &[ToolDeclaration],
    servers: &HashMap<String, ServerSettings>,
    errs: &mut ConfigErrors,
) {
    let mut seen: HashMap<(String, &str), (usize, &str)> = HashMap::new();
    for (i, d) in decls.iter().enumerate() {
        let id = &d.identity;
        if id.kind() != ToolKind::Mcp {
            continue;
        }
        let Some(prefix) = servers
            .get(&name_key(id.source()))
            .and_then(|s| s.tool_prefix.as_deref())
        else {
            continue;
        };
        let listed = d.sent_name();
        match seen.get(&(name_key(id.source()), id.name())) {
            Some(&(first, first_listed)) if first_listed != listed => errs.push(
                format!("{}.name", index("tools", i)),
                format!(
                    "`{listed}` and `{first_listed}` (tools[{first}]) of server `{}` are both the tool `{}` once the gateway prefix `{prefix}` is taken off (R41)",
                    id.source(),
                    id.name()
                ),
            ),
            Some(_) => {}
            None => {
                seen.insert((name_key(id.source()), id.name()), (i, listed));
            }
        }
    }
}

/// R42: only a `toolset` tool may be ungoverned, with a reason, and never declared
/// `require_approval`. Checked per record, collisions included.
fn check_ungoverned_records(decls: &[ToolDeclaration], errs: &mut ConfigErrors) {
    for (i, d) in decls.iter().enumerate() {
        let path = index("tools", i);
        let local = d.identity.kind() == ToolKind::Local;
        if !local {
            if !d.governed {
                errs.push(
                    format!("{path}.governed"),
                    "`governed` is for `toolset` tools only: an MCP or HTTP tool is always governed (R42)",
                );
            }
            if d.ungoverned_reason.is_some() {
                errs.push(
                    format!("{path}.ungoverned_reason"),
                    "`ungoverned_reason` is for `toolset` tools only (R42)",
                );
            }
            continue;
        }
        match (&d.ungoverned_reason, d.governed) {
            (Some(_), true) => errs.push(
                format!("{path}.ungoverned_reason"),
                "`ungoverned_reason` is given without `governed: false` (R42)",
            ),
            (None, false) => errs.push(
                format!("{path}.ungoverned_reason"),
                "a tool with `governed: false` needs an `ungoverned_reason` (R42)",
            ),
            (Some(r), false) if r.trim().is_empty() => errs.push(
                format!("{path}.ungoverned_reason"),
                "`ungoverned_reason` must not be blank (R42)",
            ),
            _ => {}
        }
        if !d.governed && d.approval == ApprovalMode::RequireApproval {
            errs.push(
                format!("{path}.approval"),
                "a tool with `governed: false` is never asked, so `require_approval` would never apply (R42)",
            );
        }
    }
}

/// The posture's verdict on one record (R28–R31).
fn posture_of(
    record: &Record,
    servers: &HashMap<String, ServerSettings>,
    exemptions: &[Exemption],
) -> PostureStatus {
    if let Some(ex) = exemptions.iter().find(|e| e.covers(record, servers)) {
        return PostureStatus::Exempt(format!("exempted: {}", ex.reason.trim()));
    }
    let id = record.identity();
    match id.kind() {
        ToolKind::Mcp => {
            let ann = record.decl.annotations.clone().unwrap_or_default();
            let trusted = trusted(servers, id.source());
            if ann.destructive_hint == Some(true) {
                // R29/R30: a destructive claim outranks a read-only one and is always believed.
                PostureStatus::Gated(format!(
                    "server `{}` declares `{}` destructive",
                    id.source(),
                    id.name()
                ))
            } else if ann.read_only_hint == Some(true) && trusted {
                PostureStatus::Exempt(format!(
                    "trusted server `{}` declares `{}` read-only",
                    id.source(),
                    id.name()
                ))
            } else if ann.read_only_hint == Some(true) {
                PostureStatus::Gated(format!(
                    "server `{}` is not trusted, so its read-only claim for `{}` exempts nothing",
                    id.source(),
                    id.name()
                ))
            } else {
                PostureStatus::Gated(format!(
                    "server `{}` does not declare `{}` read-only",
                    id.source(),
                    id.name()
                ))
            }
        }
        _ if record.decl.read_only => {
            PostureStatus::Exempt(format!("the host declares `{}` read-only", id.name()))
        }
        _ => PostureStatus::Gated(format!(
            "the host does not declare `{}` read-only",
            id.name()
        )),
    }
}

fn resolve_agents(
    profiles: &[AgentProfile],
    by_name: &HashMap<String, usize>,
) -> Vec<ResolvedAgent> {
    let mut out: Vec<Option<ResolvedAgent>> = vec![None; profiles.len()];
    // Resolve parents first; chains are acyclic (checked above), so this ends.
    for i in 0..profiles.len() {
        let mut chain = vec![i];
        let mut at = i;
        while let Some(p) = profiles
            .get(at)
            .and_then(|a| a.parent.as_ref())
            .and_then(|p| by_name.get(&name_key(p)).copied())
        {
            if chain.contains(&p) || chain.len() > profiles.len() {
                break;
            }
            chain.push(p);
            at = p;
        }
        for &k in chain.iter().rev() {
            if out.get(k).is_some_and(Option::is_some) {
                continue;
            }
            let Some(profile) = profiles.get(k) else {
                continue;
            };
            let parent = profile
                .parent
                .as_ref()
                .and_then(|p| by_name.get(&name_key(p)).copied());
            let parent_resolved = parent.and_then(|p| out.get(p).and_then(Option::as_ref));
            let mut allowed: HashSet<String> = profile
                .allowed_tools
                .iter()
                .filter(|n| !n.trim().is_empty())
                .map(|n| name_key(n))
                .collect();
            if let Some(pr) = parent_resolved {
                allowed.retain(|n| pr.allowed.contains(n));
            }
            let mut overrides = HashMap::new();
            for (tool, mode) in &profile.overrides {
                if tool.trim().is_empty() {
                    continue; // R9: blank names are ignored
                }
                if *mode == ApprovalMode::Default {
                    // R9: the last entry wins even when it is `default`, which removes it.
                    overrides.remove(&name_key(tool));
                } else {
                    overrides.insert(name_key(tool), *mode);
                }
            }
            let resolved = ResolvedAgent {
                name: profile.name.clone(),
                allowed,
                confidential: profile.confidential
                    || parent_resolved.is_some_and(|p| p.confidential),
                as_tool: profile.as_tool || parent_resolved.is_some_and(|p| p.as_tool),
                overrides,
                parent,
            };
            if let Some(slot) = out.get_mut(k) {
                *slot = Some(resolved);
            }
        }
    }
    out.into_iter().flatten().collect()
}

/// One immutable, validated governance snapshot: everything a decision reads. Replace it
/// whole (see `toolgate::GovernanceHandle`) so each call is decided by one snapshot.
#[derive(Debug, Clone)]
pub struct Governance {
    pub(crate) settings: HostSettings,
    pub(crate) exemptions: Vec<Exemption>,
    pub(crate) servers: HashMap<String, ServerSettings>,
    pub(crate) catalog: Catalog,
    pub(crate) collisions: Vec<usize>,
    pub(crate) agents: Vec<ResolvedAgent>,
    pub(crate) agent_index: HashMap<String, usize>,
    /// The profiles as given (for `to_builder` and `check`'s warnings).
    pub(crate) profiles: Vec<AgentProfile>,
    pub(crate) policy: PolicyState,
    pub(crate) declarations: Vec<ToolDeclaration>,
    pub(crate) audit: AuditSettings,
    pub(crate) redaction: RedactionSettings,
}

impl Governance {
    /// A builder with every setting at its default.
    pub fn builder() -> GovernanceBuilder {
        GovernanceBuilder::default()
    }

    /// A builder holding this snapshot's configuration, to change and build again.
    pub fn to_builder(&self) -> GovernanceBuilder {
        let mut servers: Vec<_> = self
            .servers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        servers.sort_by(|a, b| a.0.cmp(&b.0));
        GovernanceBuilder {
            settings: self.settings,
            exemptions: self.exemptions.clone(),
            servers,
            tools: self.declarations.clone(),
            agents: self.profiles.clone(),
            policy: self.policy.clone(),
            audit: self.audit.clone(),
            redaction: self.redaction.clone(),
            pending: Vec::new(),
        }
    }

    /// A new snapshot with the tenant policy replaced; everything else is kept. A refused
    /// replacement leaves `self` untouched (R22).
    pub fn with_policy(&self, state: PolicyState) -> Result<Governance, ConfigErrors> {
        if !self.settings.enforce_tool_invocation
            && let PolicyState::Readable(p) = &state
            && !p.is_empty()
        {
            return Err(ConfigErrors::one(
                "policy",
                "a non-empty tenant policy is set but `enforce_tool_invocation` is false, so it would never apply",
            ));
        }
        let mut next = self.clone();
        next.policy = state;
        Ok(next)
    }

    /// The host settings.
    pub fn settings(&self) -> &HostSettings {
        &self.settings
    }

    /// What the operator set for one MCP server (trust, gateway prefix), looked up
    /// case-insensitively: set once, in the configuration or on a gateway server.
    pub fn server_settings(&self, server: &str) -> Option<&ServerSettings> {
        self.servers.get(lower_key(server).as_ref())
    }

    /// The catalog.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// The audit settings.
    pub fn audit_settings(&self) -> &AuditSettings {
        &self.audit
    }

    /// The redaction settings.
    pub fn redaction_settings(&self) -> &RedactionSettings {
        &self.redaction
    }

    /// The tenant policy's state.
    pub fn policy(&self) -> &PolicyState {
        &self.policy
    }

    /// An agent profile, looked up case-insensitively.
    pub fn agent(&self, name: &str) -> Option<&ResolvedAgent> {
        self.agent_index
            .get(lower_key(name).as_ref())
            .and_then(|&i| self.agents.get(i))
    }

    /// The names of every agent profile, in configuration order.
    pub fn agent_names(&self) -> impl Iterator<Item = &str> {
        self.agents.iter().map(|a| a.name.as_str())
    }

    /// The agent's effective approval mode for a tool (R9, R39): its own non-default
    /// override, else the declared mode; then the stricter of that and its parent's.
    pub fn effective_mode(&self, agent: &ResolvedAgent, entry: &Entry) -> ApprovalMode {
        let mut mode = agent
            .overrides
            .get(&entry.key)
            .copied()
            .unwrap_or(entry.declared_mode);
        let mut parent = agent.parent;
        let mut guard = 0usize;
        while let Some(p) = parent.and_then(|p| self.agents.get(p)) {
            guard += 1;
            if guard > self.agents.len() {
                // Unreachable for a validated snapshot (cycles are load errors); fail strict.
                return ApprovalMode::Deny;
            }
            let own = p
                .overrides
                .get(&entry.key)
                .copied()
                .unwrap_or(entry.declared_mode);
            mode = mode.stricter(own);
            parent = p.parent;
        }
        mode
    }

    /// Findings that do not stop a configuration from loading (R24, R28, R40).
    pub fn warnings(&self) -> Vec<Warning> {
        let mut out = Vec::new();
        for &i in &self.collisions {
            let Some(decl) = self.declarations.get(i) else {
                continue;
            };
            let Ok(name) = decl.identity.qualified_name() else {
                continue;
            };
            if let Some(entry) = self.catalog.get(&name) {
                let who: Vec<String> = entry
                    .records
                    .iter()
                    .map(|r| r.identity().to_string())
                    .collect();
                out.push(Warning {
                    path: index("tools", i),
                    message: format!(
                        "collision: `{}` is the qualified name of {}; each aspect takes its strictest value (R24)",
                        entry.name,
                        who.join(" and ")
                    ),
                });
            }
        }
        for (i, decl) in self.declarations.iter().enumerate() {
            let id = &decl.identity;
            let claims_ro = decl
                .annotations
                .as_ref()
                .is_some_and(|a| a.read_only_hint == Some(true));
            if id.kind() == ToolKind::Mcp && claims_ro && !trusted(&self.servers, id.source()) {
                out.push(Warning {
                    path: index("tools", i),
                    message: format!(
                        "server `{}` is not trusted: the read-only claim of `{}` is recorded but exempts nothing (R28)",
                        id.source(),
                        id.name()
                    ),
                });
            }
        }
        // R41: a listed name of a prefixed server that does not carry the prefix.
        for (i, decl) in self.declarations.iter().enumerate() {
            let id = &decl.identity;
            if id.kind() != ToolKind::Mcp || decl.listed_name.is_some() {
                continue;
            }
            if let Some(prefix) = self
                .servers
                .get(&name_key(id.source()))
                .and_then(|s| s.tool_prefix.as_deref())
            {
                out.push(Warning {
                    path: format!("{}.name", index("tools", i)),
                    message: format!(
                        "`{}` of server `{}` does not start with the gateway prefix `{prefix}` (or is only the prefix), so it keeps its listed name as its own name (R41)",
                        id.name(),
                        id.source()
                    ),
                });
            }
        }
        // R42: every bypass of the approval decision, once per qualified name.
        for entry in self.catalog.entries().iter().filter(|e| e.ungoverned) {
            let reasons: Vec<String> = entry
                .records
                .iter()
                .map(|r| {
                    format!(
                        "{}: {}",
                        r.identity(),
                        r.decl.ungoverned_reason.as_deref().unwrap_or("").trim()
                    )
                })
                .collect();
            let at = self
                .declarations
                .iter()
                .position(|d| {
                    d.identity
                        .qualified_name()
                        .is_ok_and(|q| name_key(&q) == entry.key)
                })
                .map(|i| index("tools", i))
                .unwrap_or_else(|| String::from("tools"));
            out.push(Warning {
                path: at,
                message: format!(
                    "`{}` is not governed: no agent-level ask, tenant rule, posture or hook applies to it (R42); {}",
                    entry.name,
                    reasons.join("; ")
                ),
            });
        }
        // R6, R9: names in agent profiles that resolve to no registered tool.
        for (k, profile) in self.profiles.iter().enumerate() {
            let at = index("agents", k);
            for (j, name) in profile.allowed_tools.iter().enumerate() {
                if !name.trim().is_empty() && self.catalog.get(name).is_none() {
                    out.push(Warning {
                        path: index(&format!("{at}.allowed_tools"), j),
                        message: format!(
                            "`{name}` names no registered tool, so it exposes nothing until such a tool arrives (R6)"
                        ),
                    });
                }
            }
            for (j, (tool, mode)) in profile.overrides.iter().enumerate() {
                if !tool.trim().is_empty() && self.catalog.get(tool).is_none() {
                    out.push(Warning {
                        path: format!("{}.tool", index(&format!("{at}.overrides"), j)),
                        message: format!(
                            "the `{mode}` override names `{tool}`, which is no registered tool's qualified name, so it does nothing (R9)"
                        ),
                    });
                }
            }
        }
        // R26: asks that can never be answered.
        if self.settings.channel == ChannelKind::None {
            let posture = self.settings.require_approval_for_non_read_only
                && self.settings.enforce_tool_invocation;
            let wrapped = self.catalog.entries().iter().find(|e| {
                !e.ungoverned
                    && self
                        .agents
                        .iter()
                        .any(|a| self.effective_mode(a, e) == ApprovalMode::RequireApproval)
            });
            if posture {
                out.push(Warning {
                    path: String::from("approval.channel"),
                    message: String::from(
                        "the behaviour posture is on but `approval.channel` is `none`: every call it asks about will be refused `no_approval_channel` (R26)",
                    ),
                });
            } else if let Some(e) = wrapped {
                out.push(Warning {
                    path: String::from("approval.channel"),
                    message: format!(
                        "`{}` requires approval but `approval.channel` is `none`: such calls will be refused `no_approval_channel` (R26)",
                        e.name
                    ),
                });
            }
        }
        if !self.settings.require_approval_for_non_read_only && !self.exemptions.is_empty() {
            out.push(Warning {
                path: String::from("behavior_gating.exemptions"),
                message: String::from(
                    "exemptions are set but the behaviour posture is off, so they do nothing",
                ),
            });
        }
        if let PolicyState::Readable(policy) = &self.policy {
            for (i, rule) in policy.rules().iter().enumerate() {
                if rule.effect() == Effect::Allow {
                    continue;
                }
                let path = format!("policy.rules[{i}]");
                if rule.tool().is_some() || rule.server().is_some() {
                    let any = self.declarations.iter().any(|d| {
                        rule.selects(d.identity.kind(), d.identity.name(), d.identity.server())
                    });
                    if !any {
                        out.push(Warning {
                            path: path.clone(),
                            message: format!(
                                "this `{}` rule's selector matches no declared tool; it matters only if a matching tool arrives at runtime (R40)",
                                rule.effect()
                            ),
                        });
                    }
                }
                if rule.has_when() {
                    out.push(Warning {
                        path,
                        message: format!(
                            "this `{}` rule has `when`: a call whose input lacks those fields does not match it and runs (R40)",
                            rule.effect()
                        ),
                    });
                }
            }
        }
        out
    }
}
