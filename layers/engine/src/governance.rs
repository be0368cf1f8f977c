//! The governance snapshot: host settings, servers, the catalog with its behaviour
//! records, agent profiles and the tenant policy, validated and resolved once.

use std::collections::{HashMap, HashSet};

use toolgate_core::names::{lower_key, name_key};
use toolgate_core::{ApprovalMode, ChannelKind, ToolDeclaration, ToolKind};

use crate::catalog::{Catalog, Entry, PostureStatus, Record, Registered};
use crate::error::{ConfigErrors, Warning, index};
use crate::observe::{AuditSettings, RedactionSettings};
use crate::policy::{Effect, Limits, Policy};

/// What the operator says about one MCP server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ServerSettings {
    /// Believe the server's read-only annotations for the posture (R28).
    pub trust_tool_annotations: bool,
}

impl ServerSettings {
    /// A server whose read-only claims are believed.
    pub fn trusted() -> Self {
        Self {
            trust_tool_annotations: true,
        }
    }

    /// A server whose read-only claims exempt nothing (the default).
    pub fn untrusted() -> Self {
        Self::default()
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
    /// Where this agent's asks go instead of the host's `approval.channel`
    /// (`agents[i].approval.channel`); a subagent inherits its parent's.
    pub approval_channel: Option<ChannelKind>,
    /// How long this agent's asks wait for a person before they expire
    /// (`agents[i].approval.timeout_secs`); a subagent's is at most its parent's.
    pub approval_timeout: Option<std::time::Duration>,
    /// Whether audit records of this agent's calls carry the redacted input / output
    /// (`agents[i].audit`), instead of the `audit` section's; a subagent records at least
    /// what its parent records.
    pub audit_content: (Option<bool>, Option<bool>),
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

    /// Routes this agent's asks to `channel` instead of the host's.
    #[must_use]
    pub fn approval_channel(mut self, channel: ChannelKind) -> Self {
        self.approval_channel = Some(channel);
        self
    }

    /// Lets this agent's asks wait at most `timeout` for a person.
    #[must_use]
    pub fn approval_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.approval_timeout = Some(timeout);
        self
    }

    /// Whether audit records of this agent's calls carry the redacted input and output.
    #[must_use]
    pub fn audit_content(mut self, input: bool, output: bool) -> Self {
        self.audit_content = (Some(input), Some(output));
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
    /// Where its asks go, itself or through an ancestor (`None`: the host's channel).
    pub approval_channel: Option<ChannelKind>,
    /// The shortest approval timeout of itself and its ancestors.
    pub approval_timeout: Option<std::time::Duration>,
    /// Audit input/output: its own setting, else its parent's; `true` from an ancestor
    /// cannot be turned off (R39: never looser).
    pub audit_content: (Option<bool>, Option<bool>),
}

impl ResolvedAgent {
    /// Whether a qualified name is allowed (R6, intersected with every ancestor's, R39).
    pub fn allows(&self, key: &str) -> bool {
        self.allowed.contains(key)
    }
}

/// A subagent's audit flag: its own, else its parent's; an ancestor's `true` stays.
fn inherit_flag(own: Option<bool>, parent: Option<bool>) -> Option<bool> {
    match (own, parent) {
        (_, Some(true)) => Some(true),
        (Some(v), _) => Some(v),
        (None, p) => p,
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
            if servers.insert(name_key(name), *settings).is_some() {
                errs.push(
                    path,
                    format!(
                        "server `{name}` is configured twice (names compare case-insensitively)"
                    ),
                );
            }
        }

        let mut catalog = Catalog::new();
        let mut collisions = Vec::new();
        for (i, decl) in self.tools.iter().enumerate() {
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
                    let untrusted = self.tools.iter().find(|d| {
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
        // R39: a subagent is never looser. One whose parent routes asks to `none` (refused)
        // cannot route its own asks to a person.
        for (i, (profile, resolved)) in self.agents.iter().zip(&agents).enumerate() {
            let parent_channel = resolved
                .parent
                .and_then(|p| agents.get(p))
                .map(|p| p.approval_channel.unwrap_or(s.channel));
            if let (Some(own), Some(ChannelKind::None)) = (profile.approval_channel, parent_channel)
                && own != ChannelKind::None
            {
                errs.push(
                    format!("{}.approval.channel", index("agents", i)),
                    format!(
                        "agent `{}` cannot route asks to `{}`: its parent's asks are refused (`none`), and a subagent is never looser (R39)",
                        profile.name,
                        own.as_str()
                    ),
                );
            }
        }
        if !errs.is_empty() {
            return Err(errs);
        }
        Ok(Governance {
            settings: s,
            exemptions: self.exemptions,
            servers,
            catalog,
            collisions,
            agents,
            agent_index,
            policy: self.policy,
            declarations: self.tools,
            audit: self.audit,
            redaction: self.redaction,
        })
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
                approval_channel: profile
                    .approval_channel
                    .or(parent_resolved.and_then(|p| p.approval_channel)),
                approval_timeout: match (
                    profile.approval_timeout,
                    parent_resolved.and_then(|p| p.approval_timeout),
                ) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                },
                audit_content: (
                    inherit_flag(
                        profile.audit_content.0,
                        parent_resolved.and_then(|p| p.audit_content.0),
                    ),
                    inherit_flag(
                        profile.audit_content.1,
                        parent_resolved.and_then(|p| p.audit_content.1),
                    ),
                ),
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
        let mut servers: Vec<_> = self.servers.iter().map(|(k, v)| (k.clone(), *v)).collect();
        servers.sort_by(|a, b| a.0.cmp(&b.0));
        GovernanceBuilder {
            settings: self.settings,
            exemptions: self.exemptions.clone(),
            servers,
            tools: self.declarations.clone(),
            agents: self.profiles(),
            policy: self.policy.clone(),
            audit: self.audit.clone(),
            redaction: self.redaction.clone(),
        }
    }

    fn profiles(&self) -> Vec<AgentProfile> {
        self.agents
            .iter()
            .map(|a| AgentProfile {
                name: a.name.clone(),
                allowed_tools: a.allowed.iter().cloned().collect(),
                confidential: a.confidential,
                as_tool: a.as_tool,
                overrides: a.overrides.iter().map(|(k, v)| (k.clone(), *v)).collect(),
                parent: a
                    .parent
                    .and_then(|p| self.agents.get(p))
                    .map(|p| p.name.clone()),
                approval_channel: a.approval_channel,
                approval_timeout: a.approval_timeout,
                audit_content: a.audit_content,
            })
            .collect()
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

#[cfg(test)]
mod agent_layer_tests {
    use std::time::Duration;

    use serde_json::json;
    use toolgate_core::{AgentRef, ChannelKind, ToolCall, Verdict};

    use crate::CallView;
    use crate::config::{Format, load_str};

    const CONFIG: &str = r#"{
        "approval": {"channel": "interactive"},
        "tools": [{"kind": "http", "name": "refund", "approval": "require_approval"}],
        "agents": [
            {"name": "dev", "allowed_tools": ["refund"]},
            {"name": "worker", "allowed_tools": ["refund"],
             "approval": {"channel": "inbox", "timeout_secs": 600},
             "audit": {"include_input": true}},
            {"name": "sub", "parent": "worker", "allowed_tools": ["refund"],
             "approval": {"timeout_secs": 900}, "audit": {"include_input": false, "include_output": true}},
            {"name": "quiet", "allowed_tools": ["refund"], "approval": {"channel": "none"}}
        ]
    }"#;

    fn channel_of(gov: &crate::Governance, agent: &str) -> Option<ChannelKind> {
        let call = ToolCall::new(AgentRef::profile(agent), "refund", json!({}));
        match gov.decide(CallView::of(&call)).verdict {
            Verdict::Ask { channel } => Some(channel),
            _ => None,
        }
    }

    #[test]
    fn r26_each_agent_routes_its_asks_to_its_own_channel() {
        let gov = load_str(CONFIG, Format::Json).unwrap();
        assert_eq!(channel_of(&gov, "dev"), Some(ChannelKind::Interactive));
        assert_eq!(channel_of(&gov, "worker"), Some(ChannelKind::Inbox));
        assert_eq!(
            channel_of(&gov, "sub"),
            Some(ChannelKind::Inbox),
            "inherited"
        );
        assert_eq!(channel_of(&gov, "quiet"), None, "refused: no channel");
    }

    #[test]
    fn r39_a_subagent_inherits_its_parents_layer_settings_never_looser() {
        let gov = load_str(CONFIG, Format::Json).unwrap();
        let worker = gov.agent("worker").unwrap();
        assert_eq!(worker.approval_timeout, Some(Duration::from_secs(600)));
        let sub = gov.agent("sub").unwrap();
        assert_eq!(sub.approval_channel, Some(ChannelKind::Inbox));
        // Its own 900 s is longer than its parent's: the parent's 600 s stays.
        assert_eq!(sub.approval_timeout, Some(Duration::from_secs(600)));
        // It cannot stop recording what its parent records; it may record more.
        assert_eq!(sub.audit_content, (Some(true), Some(true)));
        assert_eq!(gov.agent("dev").unwrap().audit_content, (None, None));
        // The settings survive a round trip through the builder (used on every reload).
        let again = gov.to_builder().build().unwrap();
        assert_eq!(
            again.agent("sub").unwrap().approval_timeout,
            Some(Duration::from_secs(600))
        );
    }

    #[test]
    fn r39_a_subagent_of_an_agent_without_a_channel_cannot_route_asks() {
        let e = load_str(
            r#"{"approval": {"channel": "interactive"},
                "agents": [{"name": "quiet", "approval": {"channel": "none"}},
                           {"name": "sub", "parent": "quiet", "approval": {"channel": "inbox"}}]}"#,
            Format::Json,
        )
        .unwrap_err();
        assert_eq!(e.errors.len(), 1, "{e}");
        assert_eq!(e.errors[0].path, "agents[1].approval.channel");
        let e = load_str(
            r#"{"agents": [{"name": "a", "approval": {"channel": "pigeon", "timeout_secs": 0},
                            "audit": {"include_input": "yes"}}]}"#,
            Format::Json,
        )
        .unwrap_err();
        let paths: Vec<&str> = e.errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "agents[0].approval.channel",
                "agents[0].approval.timeout_secs",
                "agents[0].audit.include_input"
            ]
        );
    }
}
