//! Agent profiles as configured and as resolved against their ancestors (R6–R11, R39).

use std::collections::{HashMap, HashSet};

use toolgate_core::names::name_key;
use toolgate_core::{ApprovalMode, ChannelKind};

use crate::policy::Glob;

/// One agent's profile (SPEC §1, R6–R11, R39).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AgentProfile {
    /// The profile's name.
    pub name: String,
    /// The qualified names the agent may use; an entry holding `*` is a pattern over
    /// qualified names (R48).
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
    /// The qualified names (`server__name`) of the MCP resources and resource templates the
    /// agent may list and read through `toolgate mcp serve` (serve.md, "Resources, prompts
    /// and completion, governed"); patterns as R48.
    pub allowed_resources: Vec<String>,
    /// The qualified names of the MCP prompts the agent may list and get; patterns as R48.
    pub allowed_prompts: Vec<String>,
    /// The subagent ids a token may name for this profile (`agents[i].subagents`, R19
    /// patterns): `toolgate mcp serve` accepts a subagent id from a token's
    /// subagent claim only when one of these matches it ([`Governance::admit_subagent`](crate::Governance::admit_subagent)).
    pub subagents: Vec<String>,
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

    /// Allows these MCP resources (qualified names or R48 patterns).
    #[must_use]
    pub fn allow_resources<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.allowed_resources
            .extend(names.into_iter().map(Into::into));
        self
    }

    /// Allows these MCP prompts (qualified names or R48 patterns).
    #[must_use]
    pub fn allow_prompts<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.allowed_prompts
            .extend(names.into_iter().map(Into::into));
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

    /// Declares the subagent ids (R19 patterns) a token may name for this profile.
    #[must_use]
    pub fn subagents<I, S>(mut self, ids: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.subagents.extend(ids.into_iter().map(Into::into));
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

/// What one profile's `allowed_tools` entries allow (R6, R48): exact qualified names,
/// hashed, and the few entries holding `*`, patterns over qualified names (R19's semantics,
/// ASCII case-insensitive), tried in turn.
#[derive(Debug, Clone, Default)]
pub(crate) struct AllowList {
    exact: HashSet<String, foldhash::fast::RandomState>,
    patterns: Vec<Glob>,
}

impl AllowList {
    /// Whether an entry allows the (lower-cased) qualified name `key`.
    pub(crate) fn allows(&self, key: &str) -> bool {
        self.exact.contains(key) || self.patterns.iter().any(|g| g.matches_lower(key))
    }
}

/// Whether an `allowed_tools` entry is a pattern (R48): it holds `*`.
pub(crate) fn is_pattern(entry: &str) -> bool {
    entry.contains('*')
}

/// An agent profile resolved against its ancestors (R39).
#[derive(Debug, Clone)]
pub struct ResolvedAgent {
    /// The profile's name.
    pub name: String,
    /// Its own entries; exact names already intersected with its ancestors' (R39).
    pub(super) allowed: AllowList,
    /// Its ancestors' lists, each of which must allow too (R39, R48): set only when the
    /// profile's own entries hold a pattern, which cannot be intersected in advance.
    pub(super) within: Vec<AllowList>,
    /// Confidential, itself or through an ancestor.
    pub confidential: bool,
    /// Runs as a tool, itself or through an ancestor.
    pub as_tool: bool,
    pub(super) overrides: HashMap<String, ApprovalMode, foldhash::fast::RandomState>,
    pub(super) parent: Option<usize>,
    /// Where its asks go, itself or through an ancestor (`None`: the host's channel).
    pub approval_channel: Option<ChannelKind>,
    /// The shortest approval timeout of itself and its ancestors.
    pub approval_timeout: Option<std::time::Duration>,
    /// Audit input/output: its own setting, else its parent's; `true` from an ancestor
    /// cannot be turned off (R39: never looser).
    pub audit_content: (Option<bool>, Option<bool>),
    /// Its own `allowed_resources`, then each ancestor's: every one must allow (R39).
    pub(super) resources: Vec<AllowList>,
    /// Its own `allowed_prompts`, then each ancestor's.
    pub(super) prompts: Vec<AllowList>,
    /// The subagent ids it declares (`agents[i].subagents`), its own only.
    pub(super) subagents: Vec<Glob>,
}

impl ResolvedAgent {
    /// Whether a qualified name (lower-cased) is allowed (R6, R48), intersected with every
    /// ancestor's (R39). An exact entry is one hash look-up; patterns are a short list.
    pub fn allows(&self, key: &str) -> bool {
        self.allowed.allows(key) && self.within.iter().all(|l| l.allows(key))
    }

    /// Whether the MCP resource or resource template of this qualified name (`server__name`,
    /// any case) is allowed by the agent's `allowed_resources` and every ancestor's (R39,
    /// R48 patterns).
    pub fn allows_resource(&self, qualified: &str) -> bool {
        let key = name_key(qualified);
        !self.resources.is_empty() && self.resources.iter().all(|l| l.allows(&key))
    }

    /// Whether the MCP prompt of this qualified name is allowed by `allowed_prompts` and
    /// every ancestor's.
    pub fn allows_prompt(&self, qualified: &str) -> bool {
        let key = name_key(qualified);
        !self.prompts.is_empty() && self.prompts.iter().all(|l| l.allows(&key))
    }
}

fn allow_list(entries: &[String]) -> AllowList {
    let mut list = AllowList::default();
    for n in entries.iter().filter(|n| !n.trim().is_empty()) {
        if is_pattern(n) {
            list.patterns.push(Glob::new(n));
        } else {
            list.exact.insert(name_key(n));
        }
    }
    list
}

fn chained(own: &[String], parent: Option<&Vec<AllowList>>) -> Vec<AllowList> {
    let mut out = vec![allow_list(own)];
    if let Some(p) = parent {
        out.extend(p.iter().cloned());
    }
    out
}

/// A subagent's audit flag: its own, else its parent's; an ancestor's `true` stays.
fn inherit_flag(own: Option<bool>, parent: Option<bool>) -> Option<bool> {
    match (own, parent) {
        (_, Some(true)) => Some(true),
        (Some(v), _) => Some(v),
        (None, p) => p,
    }
}

pub(super) fn resolve_agents(
    profiles: &[AgentProfile],
    by_name: &HashMap<String, usize, foldhash::fast::RandomState>,
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
            let mut allowed = AllowList::default();
            for n in profile
                .allowed_tools
                .iter()
                .filter(|n| !n.trim().is_empty())
            {
                if is_pattern(n) {
                    allowed.patterns.push(Glob::new(n));
                } else {
                    allowed.exact.insert(name_key(n));
                }
            }
            let mut within = Vec::new();
            if let Some(pr) = parent_resolved {
                allowed.exact.retain(|n| pr.allows(n));
                if !allowed.patterns.is_empty() {
                    // R39 with R48: a pattern allows only what the parent allows too.
                    within.push(pr.allowed.clone());
                    within.extend(pr.within.iter().cloned());
                }
            }
            let mut overrides = HashMap::default();
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
                within,
                confidential: profile.confidential
                    || parent_resolved.is_some_and(|p| p.confidential),
                as_tool: profile.as_tool || parent_resolved.is_some_and(|p| p.as_tool),
                overrides,
                parent,
                resources: chained(
                    &profile.allowed_resources,
                    parent_resolved.map(|p| &p.resources),
                ),
                prompts: chained(
                    &profile.allowed_prompts,
                    parent_resolved.map(|p| &p.prompts),
                ),
                subagents: profile.subagents.iter().map(|s| Glob::new(s)).collect(),
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
