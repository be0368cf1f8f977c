//! Building a snapshot: every setting validated, every error with its path (R1, R15,
//! R22, R24, R27–R31, R36, R39, R41, R42).

use std::collections::HashMap;

use toolgate_core::names::name_key;
use toolgate_core::{ApprovalMode, ChannelKind, ToolDeclaration, ToolIdentity, ToolKind};

use super::posture::{posture_of, trusted};
use super::profile::resolve_agents;
use super::{
    AgentProfile, Exemption, ExposureCache, Governance, HostSettings, PolicyState, ServerSettings,
};
use crate::catalog::{Catalog, Registered};
use crate::error::{ConfigErrors, index};
use crate::policy::{Limits, Policy};
use crate::recording::{AuditSettings, RedactionSettings};

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
/// assert_eq!(&*seen.tools[0].name, "refund_order");
/// assert!(seen.tools[0].wrapped);
/// ```
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct GovernanceBuilder {
    pub(super) settings: HostSettings,
    pub(super) exemptions: Vec<Exemption>,
    pub(super) servers: Vec<(String, ServerSettings)>,
    pub(super) tools: Vec<ToolDeclaration>,
    /// Tools as their MCP servers list them at run time (R52), after every configured one.
    pub(super) listed: Vec<ToolDeclaration>,
    pub(super) agents: Vec<AgentProfile>,
    pub(super) policy: PolicyState,
    /// The shadow tenant policy (R46), decided beside `policy` and never enforced.
    pub(super) shadow: Option<std::sync::Arc<Policy>>,
    pub(super) audit: AuditSettings,
    /// The `inbox` section as written (read by `toolgate_inbox`).
    pub(super) inbox: Option<serde_json::Value>,
    pub(super) approvers: Option<crate::approvers::ApproverSettings>,
    pub(super) redaction: RedactionSettings,
    /// Errors found while building up (a change naming something absent), reported by
    /// `build`.
    pub(super) pending: Vec<(String, String)>,
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

    /// Registers a tool as its MCP server lists it now (R29, R52): it revises what the
    /// server states (description, input schema, annotations); the operator's settings of
    /// a configured declaration of the same identity (approval, confidentiality, network,
    /// execution target) stay in force over it, whenever the server lists it. Listings
    /// are registered after every configured declaration, in the order given.
    ///
    /// ```
    /// use toolgate_core::{ApprovalMode, ToolDeclaration, ToolIdentity};
    /// use toolgate_engine::{AgentProfile, Governance};
    /// let gov = Governance::builder()
    ///     .tool(ToolDeclaration::new(ToolIdentity::mcp("bank", "wipe")).approval(ApprovalMode::Deny))
    ///     .listed(ToolDeclaration::new(ToolIdentity::mcp("bank", "wipe")).description("Wipes it"))
    ///     .agent(AgentProfile::new("a").allow(["*"]))
    ///     .build()
    ///     .unwrap();
    /// let entry = gov.catalog().get("bank__wipe").unwrap();
    /// assert_eq!(entry.declared_mode, ApprovalMode::Deny);
    /// assert_eq!(entry.description(), Some("Wipes it"));
    /// ```
    pub fn listed(mut self, decl: ToolDeclaration) -> Self {
        self.listed.push(decl);
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
        let keep = |d: &ToolDeclaration| {
            let listed = d
                .listed_name
                .as_deref()
                .unwrap_or_else(|| d.identity.name());
            let named = d.identity.same_identity(identity)
                || (d.identity.kind() == identity.kind()
                    && d.identity.source().eq_ignore_ascii_case(identity.source())
                    && listed == identity.name());
            !named
        };
        self.tools.retain(keep);
        self.listed.retain(keep);
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
    /// assert_eq!(&*gov.expose("support").unwrap().omitted[0].name, "refund_order");
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

    /// Sets (or, with `None`, removes) the shadow tenant policy (R46): decided beside the
    /// enforced one on every governed call and recorded, never enforced.
    pub fn shadow_policy(mut self, shadow: Option<Policy>) -> Self {
        self.shadow = shadow.map(std::sync::Arc::new);
        self
    }

    /// Sets the `inbox` section as written: the engine keeps it for
    /// [`Governance::inbox_section`] and decides nothing with it (`toolgate_inbox` reads it).
    pub fn inbox(mut self, inbox: serde_json::Value) -> Self {
        self.inbox = Some(inbox);
        self
    }

    /// Sets who may answer held calls on the approval page (the `approvers` section).
    pub fn approvers(mut self, approvers: crate::approvers::ApproverSettings) -> Self {
        self.approvers = Some(approvers);
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
        check_settings(&s, &self.policy, self.shadow.as_deref(), &mut errs);
        let servers = index_servers(&self.servers, &mut errs);

        // R41: behind a prefixing gateway the own name is the listed name less the prefix;
        // every later step (identity, qualified name, rules, exemptions, posture) uses it.
        let decls: Vec<ToolDeclaration> =
            self.tools.iter().map(|d| own_named(d, &servers)).collect();
        let listings: Vec<ToolDeclaration> =
            self.listed.iter().map(|d| own_named(d, &servers)).collect();
        let configured = decls.len();
        // A listed tool's path names its server and its name as listed (R52).
        let path_of = |i: usize| match i.checked_sub(configured).and_then(|j| listings.get(j)) {
            Some(d) => super::listed_path(d),
            None => index("tools", i),
        };
        let all: Vec<&ToolDeclaration> = decls.iter().chain(&listings).collect();
        check_prefixed_names(&all, &path_of, &servers, &mut errs);
        check_ungoverned_records(&all, &path_of, &mut errs);
        let (mut catalog, collisions) = register_tools(&all, configured, &path_of, &mut errs);
        check_exemptions(&self.exemptions, &all, &servers, &mut errs);
        let agent_index = index_agents(&self.agents, &mut errs);
        check_overrides(&self.agents, &catalog, &mut errs);
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
        check_subagent_channels(&self.agents, &agents, s.channel, &mut errs);
        if !errs.is_empty() {
            return Err(errs);
        }
        catalog.seal();
        let exposures = ExposureCache::new(agents.len());
        let mut gov = Governance {
            settings: s,
            exemptions: self.exemptions,
            servers,
            catalog,
            collisions,
            agents,
            agent_index,
            profiles: self.agents,
            policy: self.policy,
            shadow: self.shadow,
            declarations: decls,
            listings,
            audit: self.audit,
            inbox: self.inbox,
            approvers: self.approvers,
            redaction: self.redaction,
            exposures,
            quota_covers: crate::quota_cover::CoverCache::default(),
            rule_covers: crate::quota_cover::CoverCache::default(),
            labels_by_entry: std::sync::Arc::default(),
        };
        gov.renew_quota_covers();
        Ok(gov)
    }
}

/// R15, R27: an inert setting never passes silently; limits past what this project accepts
/// are refused.
fn check_settings(
    s: &HostSettings,
    policy: &PolicyState,
    shadow: Option<&Policy>,
    errs: &mut ConfigErrors,
) {
    let policy_path = "policy";
    // R15, R27: an inert setting never passes silently.
    if !s.enforce_tool_invocation {
        if s.require_approval_for_non_read_only {
            errs.push(
                "behavior_gating.require_approval_for_non_read_only",
                "the behaviour posture is on but `enforce_tool_invocation` is false, so it would never apply",
            );
        }
        if let PolicyState::Readable(p) = policy
            && !p.is_empty()
        {
            errs.push(
                policy_path,
                "a non-empty tenant policy is set but `enforce_tool_invocation` is false, so it would never apply",
            );
        }
        if shadow.is_some_and(|p| !p.is_empty()) {
            errs.push("policy_shadow", super::SHADOW_DISARMED);
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
}

/// The servers' settings by their name's key, each name checked: not blank, a prefix not
/// blank (R41), no two names that normalise alike (R1, R2) or compare alike.
fn index_servers(
    configured: &[(String, ServerSettings)],
    errs: &mut ConfigErrors,
) -> HashMap<String, ServerSettings> {
    let mut servers: HashMap<String, ServerSettings> = HashMap::new();
    let mut by_normalised: HashMap<String, &str> = HashMap::new();
    for (name, settings) in configured {
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
        // Two names that normalise alike name one server's tools (R1, R2); the same name
        // twice is reported below.
        let normalised = toolgate_core::names::server_key(name);
        if let Some(first) = by_normalised
            .get(&normalised)
            .filter(|first| name_key(first) != name_key(name))
        {
            errs.push(
                path,
                format!(
                    "server `{name}` and server `{first}` normalise to the same name (R1, R2: their tools' names would be the same); rename one"
                ),
            );
            continue;
        }
        by_normalised.entry(normalised).or_insert(name.as_str());
        if servers.insert(name_key(name), settings.clone()).is_some() {
            errs.push(
                path,
                format!("server `{name}` is configured twice (names compare case-insensitively)"),
            );
        }
    }
    servers
}

/// The catalog of every declared and listed tool (R1), with the indexes of the collisions.
fn register_tools(
    all: &[&ToolDeclaration],
    configured: usize,
    path_of: &dyn Fn(usize) -> String,
    errs: &mut ConfigErrors,
) -> (Catalog, Vec<usize>) {
    let mut catalog = Catalog::new();
    let mut collisions = Vec::new();
    for (i, decl) in all.iter().enumerate() {
        let path = path_of(i);
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
        let registered = match i < configured {
            true => catalog.register((*decl).clone()),
            false => catalog.register_listed((*decl).clone()),
        };
        match registered {
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
    (catalog, collisions)
}

/// R31: each exemption names a tool and a reason; one without a server may not cover a tool
/// of an untrusted server.
fn check_exemptions(
    exemptions: &[Exemption],
    all: &[&ToolDeclaration],
    servers: &HashMap<String, ServerSettings>,
    errs: &mut ConfigErrors,
) {
    // R31: exemptions.
    for (i, ex) in exemptions.iter().enumerate() {
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
                let untrusted = all.iter().find(|d| {
                    d.identity.kind() == ToolKind::Mcp
                        && d.identity.name().eq_ignore_ascii_case(&ex.tool)
                        && !trusted(servers, d.identity.source())
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
}

/// The agent profiles by their name's key, each name checked, and each `parent` named,
/// known and not a cycle (R39).
fn index_agents(
    profiles: &[AgentProfile],
    errs: &mut ConfigErrors,
) -> HashMap<String, usize, foldhash::fast::RandomState> {
    // Agents: names, parents, cycles (R39).
    let mut agent_index: HashMap<String, usize, foldhash::fast::RandomState> = HashMap::default();
    for (i, a) in profiles.iter().enumerate() {
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
    for (i, a) in profiles.iter().enumerate() {
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
            if steps > profiles.len() {
                errs.push(
                    path.clone(),
                    format!("the `parent` chain of `{}` is a cycle (R39)", a.name),
                );
                break;
            }
            at = profiles
                .get(k)
                .and_then(|p| p.parent.as_ref())
                .and_then(|p| agent_index.get(&name_key(p)).copied());
        }
    }
    agent_index
}

/// R42: an override `require_approval` naming an ungoverned tool would never ask.
fn check_overrides(profiles: &[AgentProfile], catalog: &Catalog, errs: &mut ConfigErrors) {
    // R42: an override `require_approval` naming an ungoverned tool would never ask.
    for (k, a) in profiles.iter().enumerate() {
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
}

/// R39: a subagent is never looser. One whose parent routes asks to `none` (refused) cannot
/// route its own asks to a person.
fn check_subagent_channels(
    profiles: &[AgentProfile],
    agents: &[super::profile::ResolvedAgent],
    host: ChannelKind,
    errs: &mut ConfigErrors,
) {
    for (i, (profile, resolved)) in profiles.iter().zip(agents).enumerate() {
        let parent_channel = resolved
            .parent
            .and_then(|p| agents.get(p))
            .map(|p| p.approval_channel.unwrap_or(host));
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
    decls: &[&ToolDeclaration],
    path_of: &dyn Fn(usize) -> String,
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
                format!("{}.name", path_of(i)),
                format!(
                    "`{listed}` and `{first_listed}` ({}) of server `{}` are both the tool `{}` once the gateway prefix `{prefix}` is taken off (R41)",
                    path_of(first),
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
fn check_ungoverned_records(
    decls: &[&ToolDeclaration],
    path_of: &dyn Fn(usize) -> String,
    errs: &mut ConfigErrors,
) {
    for (i, d) in decls.iter().enumerate() {
        let path = path_of(i);
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
