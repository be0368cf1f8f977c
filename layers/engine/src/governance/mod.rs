//! The governance snapshot: host settings, servers, the catalog with its behaviour
//! records, agent profiles and the tenant policy, validated and resolved once.

mod builder;
mod posture;
mod profile;
mod target;
mod warnings;

use std::collections::HashMap;

use toolgate_core::names::lower_key;
use toolgate_core::{ApprovalMode, ChannelKind, ToolDeclaration};

pub use builder::GovernanceBuilder;
pub use posture::{Exemption, ServerSettings};
pub use profile::{AgentProfile, ResolvedAgent};
pub use target::PolicyTarget;

/// Where asks are routed: one entry of [`Governance::routed_channels`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoutedChannel<'a> {
    /// The channel kind asks go to.
    pub kind: ChannelKind,
    /// The configuration path that routes them (`approval.channel`,
    /// `agents[i].approval.channel`).
    pub path: String,
    /// The agent whose own channel it is; `None` for the host's.
    pub agent: Option<&'a str>,
}

use crate::catalog::{Catalog, Entry};
use crate::error::ConfigErrors;
use crate::exposure::Exposure;
use crate::policy::{Limits, Policy};
use crate::recording::{AuditSettings, RedactionSettings};

/// Why a non-empty shadow policy is refused with the governor disarmed (R15, R46).
pub(crate) const SHADOW_DISARMED: &str = "a non-empty shadow policy is set but `enforce_tool_invocation` is false, so it would never be decided";

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

    /// The state of a tenant policy document `text` (R22), the one reading the CLI's
    /// `--policy` file and every inbox's stored policy share: readable (stamped with
    /// `updated_at` when the policy was stored with one), or, when `text` is not a valid
    /// policy, [`PolicyState::Unreadable`] with every error joined by `; ` — after `the
    /// stored policy (updated …) cannot be read: ` for a stored one.
    ///
    /// ```
    /// use toolgate_engine::PolicyState;
    /// use toolgate_engine::policy::Limits;
    /// let ok = PolicyState::from_json_str(r#"{"default": "allow", "rules": []}"#, &Limits::default(), None);
    /// assert!(matches!(ok, PolicyState::Readable(_)));
    /// let bad = PolicyState::from_json_str("[]", &Limits::default(), Some("2030-01-01T00:00:00.000000Z"));
    /// let PolicyState::Unreadable(why) = bad else { panic!() };
    /// assert!(why.starts_with("the stored policy (updated 2030-01-01T00:00:00.000000Z) cannot be read: "));
    /// ```
    pub fn from_json_str(text: &str, limits: &Limits, updated_at: Option<&str>) -> Self {
        match (Policy::from_json_str(text, limits), updated_at) {
            (Ok(p), None) => PolicyState::readable(p),
            (Ok(p), Some(at)) => PolicyState::readable(p.with_updated_at(at)),
            (Err(errs), at) => {
                let why = errs
                    .errors
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ");
                PolicyState::Unreadable(match at {
                    None => why,
                    Some(at) => format!("the stored policy (updated {at}) cannot be read: {why}"),
                })
            }
        }
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
    pub(crate) agent_index: HashMap<String, usize, foldhash::fast::RandomState>,
    /// The profiles as given (for `to_builder` and `check`'s warnings).
    pub(crate) profiles: Vec<AgentProfile>,
    pub(crate) policy: PolicyState,
    /// The shadow tenant policy (R46): decided beside `policy`, never enforced.
    pub(crate) shadow: Option<std::sync::Arc<Policy>>,
    pub(crate) declarations: Vec<ToolDeclaration>,
    /// Tools as their MCP servers listed them (R52), registered after `declarations`.
    pub(crate) listings: Vec<ToolDeclaration>,
    pub(crate) audit: AuditSettings,
    /// The `inbox` section as written.
    pub(crate) inbox: Option<serde_json::Value>,
    pub(crate) approvers: Option<crate::approvers::ApproverSettings>,
    pub(crate) redaction: RedactionSettings,
    /// Each agent's exposure, computed on first use (see [`Governance::exposure`]).
    pub(crate) exposures: ExposureCache,
    /// Which quotas cover each (profile, tool) pair, worked out on first use
    /// (`quota_cover.rs`): rebuilt whenever a policy is replaced.
    pub(crate) quota_covers: crate::quota_cover::CoverCache<crate::quota_cover::Cover>,
    /// Which rules could match each (profile, tool) pair's calls, worked out on first use:
    /// rebuilt whenever a policy is replaced.
    pub(crate) rule_covers: crate::quota_cover::CoverCache<crate::policy::RuleCover>,
    /// Each catalog entry's labels (R49), by catalog index, worked out on first use: they
    /// depend on the declarations and the servers' settings only, which a snapshot made by
    /// replacing a policy shares (so it shares these).
    pub(crate) labels_by_entry: std::sync::Arc<std::sync::OnceLock<Box<[crate::labels::LabelSet]>>>,
}

/// Where a tool its server listed is reported (R52): `servers.<server>.tools.<name as listed>`.
pub(crate) fn listed_path(decl: &ToolDeclaration) -> String {
    format!(
        "{}.tools.{}",
        crate::error::field("servers", decl.identity.source()),
        decl.sent_name()
    )
}

/// Exposures computed once per agent per snapshot: a repeated `exposure` is one index and
/// one `Arc` clone. Lock-free after the first computation (`OnceLock`).
///
/// INVARIANT: an exposure reads the catalog, the agents and the host settings, never the
/// tenant policy, so a snapshot that differs from another only in its policy
/// ([`Governance::with_policy`]) shares the cache; any other change builds a new snapshot
/// and with it a new cache.
#[derive(Clone, Default)]
pub(crate) struct ExposureCache(std::sync::Arc<[std::sync::OnceLock<std::sync::Arc<Exposure>>]>);

impl ExposureCache {
    pub(crate) fn new(agents: usize) -> Self {
        Self((0..agents).map(|_| std::sync::OnceLock::new()).collect())
    }

    pub(crate) fn get_or_init(
        &self,
        agent: usize,
        compute: impl FnOnce() -> Exposure,
    ) -> Option<std::sync::Arc<Exposure>> {
        self.0
            .get(agent)
            .map(|slot| std::sync::Arc::clone(slot.get_or_init(|| std::sync::Arc::new(compute()))))
    }
}

impl std::fmt::Debug for ExposureCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let computed = self.0.iter().filter(|s| s.get().is_some()).count();
        write!(f, "ExposureCache({computed} of {} computed)", self.0.len())
    }
}

/// Why a subagent id is not admitted under an agent profile
/// ([`Governance::admit_subagent`]). `Display` shows the id escaped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SubagentError {
    /// The agent profile is not configured.
    #[error("agent profile `{0}` is not configured")]
    UnknownProfile(String),
    /// The id is blank or holds white space or control characters.
    #[error("subagent id `{}` holds white space or control characters: it is never a subagent id", .0.escape_debug())]
    NotAnId(String),
    /// The id names a configured agent profile (compared case-insensitively).
    #[error("subagent id `{}` names the agent profile `{profile}`: a subagent id never shadows a profile", .id.escape_debug())]
    ShadowsProfile {
        /// The subagent id.
        id: String,
        /// The profile it names, as configured.
        profile: String,
    },
    /// The profile declares no subagents.
    #[error("agent profile `{profile}` declares no subagents (`agents[].subagents`): subagent id `{}` is not admitted", .id.escape_debug())]
    NoneDeclared {
        /// The agent profile.
        profile: String,
        /// The subagent id.
        id: String,
    },
    /// The profile's subagents do not cover the id.
    #[error("subagent id `{}` is not one agent profile `{profile}` declares (`agents[].subagents`)", .id.escape_debug())]
    NotDeclared {
        /// The agent profile.
        profile: String,
        /// The subagent id.
        id: String,
    },
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
            listed: self.listings.clone(),
            agents: self.profiles.clone(),
            policy: self.policy.clone(),
            shadow: self.shadow.clone(),
            audit: self.audit.clone(),
            inbox: self.inbox.clone(),
            approvers: self.approvers.clone(),
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
        next.renew_quota_covers();
        Ok(next)
    }

    /// A new snapshot with the shadow tenant policy (R46) replaced (`None`: no shadow);
    /// everything else, the enforced policy included, is kept. The shadow is decided beside
    /// the enforced policy ([`Governance::decide_shadow_at`]) and never changes what happens
    /// to a call.
    ///
    /// ```
    /// use toolgate_engine::Governance;
    /// use toolgate_engine::policy::{Limits, Policy};
    /// let gov = Governance::builder().build().unwrap();
    /// let deny = Policy::from_json_str(r#"{"rules": [{"effect": "deny"}]}"#, &Limits::default()).unwrap();
    /// let shadowed = gov.with_shadow_policy(Some(deny)).unwrap();
    /// assert!(shadowed.shadow_policy().is_some());
    /// assert!(shadowed.with_shadow_policy(None).unwrap().shadow_policy().is_none());
    /// ```
    ///
    /// With the governor disarmed (`enforce_tool_invocation: false`) a non-empty shadow is
    /// refused, as a non-empty enforced policy is (R15): it would be decided about nothing.
    pub fn with_shadow_policy(&self, shadow: Option<Policy>) -> Result<Governance, ConfigErrors> {
        if !self.settings.enforce_tool_invocation
            && let Some(p) = &shadow
            && !p.is_empty()
        {
            return Err(ConfigErrors::one("policy_shadow", SHADOW_DISARMED));
        }
        let mut next = self.clone();
        next.shadow = shadow.map(std::sync::Arc::new);
        next.renew_quota_covers();
        Ok(next)
    }

    /// A new quota cover cache for this snapshot's policies (see `quota_cover.rs`).
    pub(crate) fn renew_quota_covers(&mut self) {
        let (agents, entries) = (self.agents.len(), self.catalog.entries().len());
        let shadow = self.shadow.as_ref();
        self.quota_covers = crate::quota_cover::CoverCache::new(
            &self.policy,
            shadow,
            agents,
            entries,
            crate::quota_cover::has_quotas,
        );
        self.rule_covers = crate::quota_cover::CoverCache::new(
            &self.policy,
            shadow,
            agents,
            entries,
            crate::quota_cover::has_rules,
        );
    }

    /// The shadow tenant policy (R46), when one is set.
    pub fn shadow_policy(&self) -> Option<&std::sync::Arc<Policy>> {
        self.shadow.as_ref()
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

    /// The labels a tool carries (R49): its records' declared labels, its server's
    /// (`servers.NAME.labels`, for an MCP record) and `egress` when its effective network
    /// scope is `egress` (R8, R24).
    ///
    /// ```
    /// use toolgate_engine::config::{load_str, Format};
    /// let g = load_str(r#"{"servers": {"mail": {"labels": ["private"]}},
    ///     "tools": [{"server": "mail", "name": "read", "labels": ["inbox"]},
    ///               {"kind": "http", "name": "post", "network": "egress"}]}"#, Format::Json).unwrap();
    /// assert_eq!(g.tool_labels("mail__read").unwrap().to_vec(), ["egress", "inbox", "private"]);
    /// assert_eq!(g.tool_labels("post").unwrap().to_vec(), ["egress"]);
    /// ```
    pub fn tool_labels(&self, name: &str) -> Option<crate::labels::LabelSet> {
        self.catalog.get(name).map(|e| self.entry_labels(e))
    }

    pub(crate) fn entry_labels(&self, entry: &crate::catalog::Entry) -> crate::labels::LabelSet {
        let cached = self.catalog.index_of(entry).and_then(|i| {
            self.labels_by_entry
                .get_or_init(|| {
                    self.catalog
                        .entries()
                        .iter()
                        .map(|e| self.labels_of_records(e))
                        .collect()
                })
                .get(i)
                .cloned()
        });
        cached.unwrap_or_else(|| self.labels_of_records(entry))
    }

    /// [`Governance::entry_labels`], worked out from the entry's records.
    fn labels_of_records(&self, entry: &crate::catalog::Entry) -> crate::labels::LabelSet {
        let mut set = crate::labels::LabelSet::new();
        for r in &entry.records {
            for l in &r.decl.labels {
                set.insert(l);
            }
            if let Some(server) = r.identity().server()
                && let Some(s) = self.server_settings(server)
            {
                for l in &s.labels {
                    set.insert(l);
                }
            }
        }
        if entry.network == toolgate_core::NetworkScope::Egress {
            set.insert(crate::labels::EGRESS);
        }
        set
    }

    /// Every declaration in arrival order with the path it is reported at: the
    /// configuration's (`tools[i]`), then the tools their servers listed (R52,
    /// `servers.<server>.tools.<name>`). The builder registers them in this order.
    pub(crate) fn declared(&self) -> impl Iterator<Item = (String, &ToolDeclaration)> {
        let configured = self
            .declarations
            .iter()
            .enumerate()
            .map(|(i, d)| (crate::error::index("tools", i), d));
        let listed = self.listings.iter().map(|d| (listed_path(d), d));
        configured.chain(listed)
    }

    /// The catalog.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// The `inbox` section as written, when the configuration has one (never `null`: a
    /// `null` section does not load). The engine decides nothing with it; the inbox reads
    /// it (`toolgate_inbox::InboxSettings::read`).
    pub fn inbox_section(&self) -> Option<&serde_json::Value> {
        self.inbox.as_ref()
    }

    /// Who may answer held calls on the approval page (the `approvers` section), when the
    /// configuration has one.
    pub fn approver_settings(&self) -> Option<&crate::approvers::ApproverSettings> {
        self.approvers.as_ref()
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

    /// Whether a subagent id taken from a caller's credential (a token's subagent claim) may
    /// act under `profile`: only an id one of the profile's declared `subagents` patterns
    /// matches (R19), holding no white space or control character, and naming no profile —
    /// not even one that differs from it only by case or white space (SPEC §8: a subagent id
    /// never shadows a profile). A profile that declares none admits none. The refusal says
    /// why, for the caller.
    ///
    /// ```
    /// use toolgate_engine::config::{self, Format};
    ///
    /// let g = config::load_str(r#"{"agents": [
    ///     {"name": "support", "subagents": ["triage-*"]},
    ///     {"name": "reader"},
    ///     {"name": "batch"}]}"#, Format::Json).unwrap();
    /// assert!(g.admit_subagent("support", "triage-7").is_ok());
    /// assert!(g.admit_subagent("support", "act-as-anyone").is_err());
    /// assert!(g.admit_subagent("support", " reader").is_err());
    /// assert!(g.admit_subagent("support", "Reader").is_err());
    /// assert!(g.admit_subagent("batch", "triage-7").is_err()); // declares none
    /// ```
    ///
    /// # Errors
    ///
    /// Why the id is not admitted; its `Display` is a sentence naming the profile and the id.
    pub fn admit_subagent(&self, profile: &str, id: &str) -> Result<(), SubagentError> {
        let Some(agent) = self.agent(profile) else {
            return Err(SubagentError::UnknownProfile(profile.to_owned()));
        };
        if id.trim().is_empty() || id.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(SubagentError::NotAnId(id.to_owned()));
        }
        let folded = id.to_lowercase();
        if let Some(p) = self
            .agents
            .iter()
            .find(|a| a.name.trim().to_lowercase() == folded)
        {
            return Err(SubagentError::ShadowsProfile {
                id: id.to_owned(),
                profile: p.name.clone(),
            });
        }
        if agent.subagents.is_empty() {
            return Err(SubagentError::NoneDeclared {
                profile: agent.name.clone(),
                id: id.to_owned(),
            });
        }
        if !agent.subagents.iter().any(|g| g.matches(id)) {
            return Err(SubagentError::NotDeclared {
                profile: agent.name.clone(),
                id: id.to_owned(),
            });
        }
        Ok(())
    }

    /// Every approval channel asks can be routed to, with where the configuration routes
    /// them: the host's `approval.channel` first, then each agent's own
    /// (`agents[i].approval.channel`), in configuration order. A kind may appear more than
    /// once; `none` appears when the configuration names it. The one answer to "which
    /// channels must a stack or server have" (R26, R47).
    ///
    /// ```
    /// use toolgate_core::ChannelKind;
    /// use toolgate_engine::config::{self, Format};
    ///
    /// let g = config::load_str(r#"{
    ///     "approval": {"channel": "inbox"},
    ///     "agents": [{"name": "a", "approval": {"channel": "elicitation"}}],
    ///     "tools": []
    /// }"#, Format::Json)?;
    /// let routed: Vec<_> = g.routed_channels().map(|r| (r.kind, r.path)).collect();
    /// assert_eq!(routed, [
    ///     (ChannelKind::Inbox, String::from("approval.channel")),
    ///     (ChannelKind::Elicitation, String::from("agents[0].approval.channel")),
    /// ]);
    /// # Ok::<(), toolgate_engine::ConfigErrors>(())
    /// ```
    pub fn routed_channels(&self) -> impl Iterator<Item = RoutedChannel<'_>> {
        let host = RoutedChannel {
            kind: self.settings.channel,
            path: String::from("approval.channel"),
            agent: None,
        };
        let agents = self.agents.iter().enumerate().filter_map(|(i, a)| {
            a.approval_channel.map(|kind| RoutedChannel {
                kind,
                path: format!("agents[{i}].approval.channel"),
                agent: Some(a.name.as_str()),
            })
        });
        std::iter::once(host).chain(agents)
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

    #[test]
    fn issue34_subagent_ids_are_declared_patterns_never_a_profiles_spelling() {
        let g = load_str(
            r#"{"agents": [{"name": "support", "subagents": ["triage-*", "reader-1"]},
                           {"name": "reader"}, {"name": "batch"}],
                "policy": {"rules": [
                    {"effect": "deny", "server": "bank", "tool": "transfer", "agent": "support"},
                    {"effect": "deny", "server": "bank", "tool": "transfer", "agent": "triage-*"},
                    {"effect": "ask", "agent": "*"}]}}"#,
            Format::Json,
        )
        .unwrap();
        for ok in ["triage-7", "TRIAGE-x", "reader-1"] {
            assert_eq!(g.admit_subagent("support", ok), Ok(()), "{ok}");
        }
        for (id, why) in [
            ("act_as", "is not one agent profile `support` declares"),
            (" reader", "white space"),
            ("reader\u{200b}", "is not one"),
            ("Reader", "names the agent profile `reader`"),
            ("SUPPORT", "names the agent profile `support`"),
            ("batch", "names the agent profile `batch`"),
            ("", "white space"),
        ] {
            let e = g.admit_subagent("support", id).unwrap_err().to_string();
            assert!(e.contains(why), "{id:?}: {e}");
        }
        assert!(
            g.admit_subagent("batch", "triage-1")
                .unwrap_err()
                .to_string()
                .contains("declares no subagents")
        );
        assert!(g.admit_subagent("nobody", "triage-1").is_err());
        // `check`: the first rule names `support` and leaves `reader-1` out; the second
        // covers `triage-*`; `*` covers every one.
        let warned: Vec<String> = g
            .warnings()
            .into_iter()
            .filter(|w| w.message.contains("subagents it declares"))
            .map(|w| format!("{}: {}", w.path, w.message))
            .collect();
        assert_eq!(warned.len(), 1, "{warned:#?}");
        assert!(warned[0].starts_with("policy.rules[0].agent"), "{warned:?}");
        assert!(warned[0].contains("`triage-*`, `reader-1`"), "{warned:?}");
        // Bad declarations are errors naming the entry.
        let e = load_str(
            r#"{"agents": [{"name": "a", "subagents": ["ok", " ", "tab\tbed", 7]}]}"#,
            Format::Json,
        )
        .unwrap_err();
        let paths: Vec<&str> = e.errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "agents[0].subagents[1]",
                "agents[0].subagents[2]",
                "agents[0].subagents[3]"
            ]
        );
    }
}
