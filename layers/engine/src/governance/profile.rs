//! Agent profiles as configured and as resolved against their ancestors (R6–R11, R39).

use std::collections::{HashMap, HashSet};

use toolgate_core::ApprovalMode;
use toolgate_core::names::name_key;

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
    pub(super) allowed: HashSet<String>,
    /// Confidential, itself or through an ancestor.
    pub confidential: bool,
    /// Runs as a tool, itself or through an ancestor.
    pub as_tool: bool,
    pub(super) overrides: HashMap<String, ApprovalMode>,
    pub(super) parent: Option<usize>,
}

impl ResolvedAgent {
    /// Whether a qualified name is allowed (R6, intersected with every ancestor's, R39).
    pub fn allows(&self, key: &str) -> bool {
        self.allowed.contains(key)
    }
}

pub(super) fn resolve_agents(
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
