//! `check`'s findings: what does not stop a configuration from loading but deserves a look
//! (R6, R9, R24, R26, R28, R40, R41, R42).

use toolgate_core::names::name_key;
use toolgate_core::{ApprovalMode, ChannelKind, ToolKind};

use super::posture::trusted;
use super::profile::is_pattern;
use super::{Governance, PolicyState};
use crate::error::{Warning, index};
use crate::policy::{Effect, Glob};

impl Governance {
    /// Findings that do not stop a configuration from loading (R24, R28, R40).
    pub fn warnings(&self) -> Vec<Warning> {
        self.warnings_discovering::<&str>(&[])
    }

    /// As [`Governance::warnings`], for a host that discovers the tools of `servers` at run
    /// time (an MCP gateway lists them when it connects): allowed names of those servers
    /// that name no registered tool are one warning per agent and server, with their count
    /// and the first few, instead of one per name (R6; a 1,000-tool server must not drown a
    /// real typo).
    ///
    /// ```
    /// use toolgate_engine::config::{load_str, Format};
    /// let gov = load_str(r#"{"tools": [{"kind": "http", "name": "refund"}],
    ///     "agents": [{"name": "a", "allowed_tools": ["fs__read", "fs__write", "fs__list", "refnud"]}]}"#,
    ///     Format::Json).unwrap();
    /// assert_eq!(gov.warnings().len(), 4);
    /// let grouped = gov.warnings_discovering(&["fs"]);
    /// assert_eq!(grouped.len(), 2); // `refnud` still on its own: a typo stays visible
    /// assert!(grouped.iter().any(|w| w.message.starts_with("3 allowed names of server `fs`")));
    /// ```
    pub fn warnings_discovering<S: AsRef<str>>(&self, servers: &[S]) -> Vec<Warning> {
        let discovered: std::collections::HashSet<String> =
            servers.iter().map(|s| name_key(s.as_ref())).collect();
        let mut out = Vec::new();
        self.catalog_warnings(&mut out);
        self.profile_warnings(&discovered, &mut out);
        self.routing_warnings(&mut out);
        self.policy_warnings(&mut out);
        out
    }
}

impl Governance {
    /// The catalog's: collisions (R24), declarations' claims, names of prefixed servers (R41)
    /// and every bypass of the approval decision (R42).
    fn catalog_warnings(&self, out: &mut Vec<Warning>) {
        for &i in &self.collisions {
            let Some((path, decl)) = self.declared().nth(i) else {
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
                    path,
                    message: format!(
                        "collision: `{}` is the qualified name of {}; each aspect takes its strictest value (R24)",
                        entry.name,
                        who.join(" and ")
                    ),
                });
            }
        }
        for (path, decl) in self.declared() {
            let id = &decl.identity;
            let claims_ro = decl
                .annotations
                .as_ref()
                .is_some_and(|a| a.read_only_hint == Some(true));
            if id.kind() == ToolKind::Mcp && claims_ro && !trusted(&self.servers, id.source()) {
                out.push(Warning {
                    path,
                    message: format!(
                        "server `{}` is not trusted: the read-only claim of `{}` is recorded but exempts nothing (R28)",
                        id.source(),
                        id.name()
                    ),
                });
            }
        }
        // R41: a listed name of a prefixed server that does not carry the prefix.
        for (path, decl) in self.declared() {
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
                    path: format!("{path}.name"),
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
                .declared()
                .find(|(_, d)| {
                    d.identity
                        .qualified_name()
                        .is_ok_and(|q| name_key(&q) == entry.key)
                })
                .map(|(path, _)| path)
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
    }

    /// Names in agent profiles that resolve to no registered tool (R6, R9, R48), those of
    /// servers discovered at run time grouped per agent and server.
    fn profile_warnings(
        &self,
        discovered: &std::collections::HashSet<String>,
        out: &mut Vec<Warning>,
    ) {
        // R6, R9, R48: names in agent profiles that resolve to no registered tool.
        let mut patterns_seen = std::collections::HashSet::new();
        // Per agent: the names of servers discovered at run time, grouped by server (sorted).
        let mut unseen: std::collections::BTreeMap<String, Vec<&str>> = Default::default();
        for (k, profile) in self.profiles.iter().enumerate() {
            let at = index("agents", k);
            for (j, name) in profile.allowed_tools.iter().enumerate() {
                if is_pattern(name) {
                    // R48: once per pattern that matches no registered tool.
                    let glob = crate::policy::Glob::new(name);
                    let key = name_key(name);
                    if !patterns_seen.contains(&key)
                        && !self
                            .catalog
                            .entries()
                            .iter()
                            .any(|e| glob.matches_lower(&e.key))
                    {
                        out.push(Warning {
                            path: index(&format!("{at}.allowed_tools"), j),
                            message: format!(
                                "the pattern `{name}` matches no registered tool, so it allows nothing until such a tool arrives (R48)"
                            ),
                        });
                    }
                    patterns_seen.insert(key);
                    continue;
                }
                if !name.trim().is_empty() && self.catalog.get(name).is_none() {
                    let server = name
                        .split_once("__")
                        .map(|(s, _)| name_key(s))
                        .filter(|s| discovered.contains(s));
                    match server {
                        Some(s) => unseen.entry(s).or_default().push(name.as_str()),
                        None => out.push(Warning {
                            path: index(&format!("{at}.allowed_tools"), j),
                            message: format!(
                                "`{name}` names no registered tool, so it exposes nothing until such a tool arrives (R6)"
                            ),
                        }),
                    }
                }
            }
            for (server, names) in std::mem::take(&mut unseen) {
                let shown: Vec<String> = names.iter().take(3).map(|n| format!("`{n}`")).collect();
                let more = if names.len() > shown.len() {
                    ", …"
                } else {
                    ""
                };
                out.push(Warning {
                    path: format!("{at}.allowed_tools"),
                    message: format!(
                        "{} allowed name{} of server `{server}` ({}{more}) name{} no tool registered here; its tools are discovered when it is connected, and a name it does not list exposes nothing (R6)",
                        names.len(),
                        if names.len() == 1 { "" } else { "s" },
                        shown.join(", "),
                        if names.len() == 1 { "s" } else { "" },
                    ),
                });
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
    }

    /// Asks that can never be answered (R26) and asks answered by the agent's own client
    /// (R47).
    fn routing_warnings(&self, out: &mut Vec<Warning>) {
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
        // R47: an agent routed to `elicitation` has its asks answered by whoever controls
        // its own MCP client.
        for (k, agent) in self.agents.iter().enumerate() {
            if self.ask_route(agent).channel != ChannelKind::Elicitation {
                continue;
            }
            let own = self
                .profiles
                .get(k)
                .and_then(|p| p.approval_channel)
                .is_some();
            out.push(Warning {
                path: if own {
                    format!("{}.approval.channel", index("agents", k))
                } else {
                    String::from("approval.channel")
                },
                message: format!(
                    "agent `{}` routes its asks to `elicitation`: its own MCP client asks its user, so whoever controls that client answers them (R47)",
                    agent.name
                ),
            });
        }
    }

    /// The posture's and the stored policy's: exemptions that do nothing, labels nothing
    /// carries (R49), approvals no route can gather (R51), quotas and rules that cannot
    /// match as written (R44, R40).
    fn policy_warnings(&self, out: &mut Vec<Warning>) {
        if !self.settings.require_approval_for_non_read_only && !self.exemptions.is_empty() {
            out.push(Warning {
                path: String::from("behavior_gating.exemptions"),
                message: String::from(
                    "exemptions are set but the behaviour posture is off, so they do nothing",
                ),
            });
        }
        if let PolicyState::Readable(policy) = &self.policy {
            self.label_warnings(policy, out);
            self.approvals_warnings(policy, out);
            self.quota_warnings(policy, out);
            self.rule_warnings(policy, out);
        }
    }

    /// R49: a label nothing carries never matches.
    fn label_warnings(&self, policy: &crate::policy::Policy, out: &mut Vec<Warning>) {
        let known = self.known_labels();
        let mut unknown_labels = |path: String, labels: Vec<&str>| {
            for l in labels {
                if !known.contains(l) {
                    out.push(Warning {
                        path: path.clone(),
                        message: format!(
                            "no tool declaration or server carries the label `{l}`: this selector can never match (R49)"
                        ),
                    });
                }
            }
        };
        for (i, rule) in policy.rules().iter().enumerate() {
            unknown_labels(
                format!("policy.rules[{i}]"),
                rule.labels().chain(rule.session_labels()).collect(),
            );
        }
        for (i, quota) in policy.quotas().iter().enumerate() {
            unknown_labels(
                format!("policy.quotas[{i}]"),
                quota.labels().chain(quota.session_labels()).collect(),
            );
        }
    }

    /// R51: several approvals need a durable inbox on every route a rule may take.
    fn approvals_warnings(&self, policy: &crate::policy::Policy, out: &mut Vec<Warning>) {
        let channels: Vec<ChannelKind> = self.routed_channels().map(|r| r.kind).collect();
        for (i, rule) in policy.rules().iter().enumerate() {
            if rule.approvals() > 1
                && let Some(other) = channels.iter().find(|c| **c != ChannelKind::Inbox)
            {
                out.push(Warning {
                    path: format!("policy.rules[{i}].approvals"),
                    message: format!(
                        "this rule needs {} approvals, which only a durable inbox can gather; asks routed to the `{}` channel are refused `no_approval_channel` (R51)",
                        rule.approvals(),
                        other.as_str()
                    ),
                });
            }
        }
    }

    /// R44 in R40's spirit: a quota whose selectors match no declared tool counts nothing
    /// until such a tool arrives.
    fn quota_warnings(&self, policy: &crate::policy::Policy, out: &mut Vec<Warning>) {
        for (i, quota) in policy.quotas().iter().enumerate() {
            let any = self.declared().any(|(_, d)| {
                quota.selects(d.identity.kind(), d.identity.name(), d.identity.server())
            });
            if !any {
                out.push(Warning {
                    path: format!("policy.quotas[{i}]"),
                    message: String::from(
                        "this quota's selectors match no declared tool; it counts only if a matching tool arrives at runtime (R44, R40)",
                    ),
                });
            }
        }
    }

    /// R40, R19: a `deny` or `ask` rule whose selector matches no declared tool, that misses
    /// the subagents of the profile it names, or whose `when` a call may dodge.
    fn rule_warnings(&self, policy: &crate::policy::Policy, out: &mut Vec<Warning>) {
        for (i, rule) in policy.rules().iter().enumerate() {
            if rule.effect() == Effect::Allow {
                continue;
            }
            let path = format!("policy.rules[{i}]");
            if rule.tool().is_some() || rule.server().is_some() {
                let any = self.declared().any(|(_, d)| {
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
            // A rule written for a profile does not reach its subagents (R19: `agent`
            // matches the subagent's id), so a subagent a token may name escapes a `deny`
            // or `ask` its pattern does not cover.
            if let Some(pattern) = rule.agent() {
                for agent in self.agents.iter().filter(|a| pattern.matches(&a.name)) {
                    let open: Vec<&str> = agent
                        .subagents
                        .iter()
                        .filter(|s| !pattern.covers(s))
                        .map(Glob::as_str)
                        .collect();
                    if !open.is_empty() {
                        out.push(Warning {
                            path: format!("{path}.agent"),
                            message: format!(
                                "this `{}` rule names agent profile `{}` but not the subagents it declares ({}): their calls are not under it (R19: `agent` matches a subagent's id); add a rule for them",
                                rule.effect(),
                                agent.name,
                                open.iter().map(|s| format!("`{s}`")).collect::<Vec<_>>().join(", ")
                            ),
                        });
                    }
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

    /// Every label a declaration or a server carries, and `egress` (R49).
    fn known_labels(&self) -> crate::labels::LabelSet {
        let mut known = crate::labels::LabelSet::of([crate::labels::EGRESS]);
        for (_, d) in self.declared() {
            for l in &d.labels {
                known.insert(l);
            }
        }
        for s in self.servers.values() {
            for l in &s.labels {
                known.insert(l);
            }
        }
        known
    }
}
