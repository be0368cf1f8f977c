//! Drift: what changed in a server's tool list, as a value callers receive and a record
//! an audit sink keeps.

use serde_json::{Map, Value, json};
use toolgate_core::ToolIdentity;
use toolgate_core::audit_record::AuditEvent;
use toolgate_engine::catalog::PostureStatus;

/// What made the gateway list a server's tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DriftTrigger {
    /// The first listing, when the server was connected.
    Discovery,
    /// The server sent `notifications/tools/list_changed`.
    ListChanged,
    /// The periodic re-list ([`McpServerConfig::relist_every`](crate::McpServerConfig::relist_every)).
    Periodic,
    /// [`McpGateway::relist`](crate::McpGateway::relist).
    Manual,
}

impl DriftTrigger {
    /// The spelling used in records: `discovery`, `list_changed`, `periodic`, `manual`.
    pub fn as_str(self) -> &'static str {
        match self {
            DriftTrigger::Discovery => "discovery",
            DriftTrigger::ListChanged => "list_changed",
            DriftTrigger::Periodic => "periodic",
            DriftTrigger::Manual => "manual",
        }
    }
}

/// A part of a tool's definition (the parts R35 binds an approval to).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Aspect {
    /// The description shown to the model and approvers.
    Description,
    /// The advertised input schema.
    InputSchema,
    /// The annotations (the four hints and the title).
    Annotations,
    /// What the operator says about the tool (confidential, network scope, approval).
    HostSettings,
}

impl Aspect {
    /// The spelling used in records.
    pub fn as_str(self) -> &'static str {
        match self {
            Aspect::Description => "description",
            Aspect::InputSchema => "input_schema",
            Aspect::Annotations => "annotations",
            Aspect::HostSettings => "host_settings",
        }
    }
}

/// One change to one tool. Hashes are [`toolgate_engine::canon::definition_hash`] of the
/// tool's declaration (name, description, input schema, annotations).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChange {
    /// A tool the server did not list before (every tool, at discovery).
    Added {
        /// The qualified (wire) name.
        tool: String,
        /// The identity: the configured server id and the tool's own name.
        identity: ToolIdentity,
        /// The definition hash.
        hash: String,
        /// What the behaviour posture says about it (R27–R31), when it was registered.
        posture: Option<PostureStatus>,
    },
    /// A tool the server no longer lists: calls to it are refused.
    Removed {
        /// The qualified name.
        tool: String,
        /// The identity.
        identity: ToolIdentity,
        /// The hash of the last definition.
        old_hash: String,
    },
    /// A tool re-listed with a different definition: a revision by its own source,
    /// believed in both directions (R29). Approvals made under the old definition are
    /// refused when the call is about to be sent (R35), and the tool is decided afresh.
    Changed {
        /// The qualified name.
        tool: String,
        /// The identity.
        identity: ToolIdentity,
        /// The hash before.
        old_hash: String,
        /// The hash now.
        new_hash: String,
        /// Which parts changed.
        aspects: Vec<Aspect>,
        /// What the posture says about the new definition.
        posture: Option<PostureStatus>,
    },
    /// A tool the gateway withholds (serve.md, "The definition lock and the description
    /// scanner"): its definition is not the locked one (`mcp.locked`), or the description
    /// scanner flagged it under `mcp.scan: "withhold"`. No agent is shown it and every call
    /// to it is refused, until it is listed with a definition that passes.
    Withheld {
        /// The qualified name.
        tool: String,
        /// The identity.
        identity: ToolIdentity,
        /// The hash of the definition withheld.
        hash: String,
        /// Why, one reason each (the lock's, the scanner's).
        reasons: Vec<String>,
    },
    /// A tool the description scanner flagged ([`crate::scan`]): reported, and kept unless
    /// `mcp.scan` is `"withhold"` (then a [`ToolChange::Withheld`] follows).
    Flagged {
        /// The qualified name.
        tool: String,
        /// The identity.
        identity: ToolIdentity,
        /// What the scanner found, each as `kind in `field`: found`.
        findings: Vec<String>,
    },
    /// A tool the gateway would not register; calls to it are refused.
    Rejected {
        /// The tool's name as the server listed it (behind a prefixing gateway, with the
        /// prefix, R41).
        name: String,
        /// Why.
        reason: String,
    },
}

impl ToolChange {
    /// The qualified name, or the raw name of a rejected tool.
    pub fn tool(&self) -> &str {
        match self {
            ToolChange::Added { tool, .. }
            | ToolChange::Removed { tool, .. }
            | ToolChange::Changed { tool, .. }
            | ToolChange::Withheld { tool, .. }
            | ToolChange::Flagged { tool, .. } => tool,
            ToolChange::Rejected { name, .. } => name,
        }
    }

    /// `added`, `removed`, `changed`, `withheld`, `flagged` or `rejected`.
    pub fn kind(&self) -> &'static str {
        match self {
            ToolChange::Added { .. } => "added",
            ToolChange::Removed { .. } => "removed",
            ToolChange::Changed { .. } => "changed",
            ToolChange::Withheld { .. } => "withheld",
            ToolChange::Flagged { .. } => "flagged",
            ToolChange::Rejected { .. } => "rejected",
        }
    }

    fn record(&self) -> Value {
        let posture = |p: &Option<PostureStatus>| match p {
            Some(PostureStatus::Exempt(why)) => json!({"gated": false, "why": why}),
            Some(PostureStatus::Gated(why)) => json!({"gated": true, "why": why}),
            None => Value::Null,
        };
        match self {
            ToolChange::Added {
                tool,
                identity,
                hash,
                posture: p,
            } => json!({"change": "added", "tool": tool, "name": identity.name(),
                        "new_hash": hash, "posture": posture(p)}),
            ToolChange::Removed {
                tool,
                identity,
                old_hash,
            } => json!({"change": "removed", "tool": tool, "name": identity.name(),
                        "old_hash": old_hash}),
            ToolChange::Changed {
                tool,
                identity,
                old_hash,
                new_hash,
                aspects,
                posture: p,
            } => json!({"change": "changed", "tool": tool, "name": identity.name(),
                        "old_hash": old_hash, "new_hash": new_hash,
                        "aspects": aspects.iter().map(|a| a.as_str()).collect::<Vec<_>>(),
                        "posture": posture(p)}),
            ToolChange::Withheld {
                tool,
                identity,
                hash,
                reasons,
            } => json!({"change": "withheld", "tool": tool, "name": identity.name(),
                        "new_hash": hash, "reasons": reasons}),
            ToolChange::Flagged {
                tool,
                identity,
                findings,
            } => json!({"change": "flagged", "tool": tool, "name": identity.name(),
                        "findings": findings}),
            ToolChange::Rejected { name, reason } => {
                json!({"change": "rejected", "name": name, "reason": reason})
            }
        }
    }
}

/// How a listing ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DriftOutcome {
    /// The listing was read; these tools changed (never empty in an event).
    Changes(Vec<ToolChange>),
    /// The listing could not be read. Until one succeeds, calls to the server's tools are
    /// refused: the list may have changed in ways nobody has seen.
    ListingFailed(String),
}

/// Every change the gateway saw in one listing of one server.
///
/// ```
/// use toolgate_core::ToolIdentity;
/// use toolgate_mcp::{DriftEvent, DriftOutcome, DriftTrigger, ToolChange};
/// let event = DriftEvent {
///     server: "kb".into(),
///     trigger: DriftTrigger::ListChanged,
///     outcome: DriftOutcome::Changes(vec![ToolChange::Removed {
///         tool: "kb__page".into(),
///         identity: ToolIdentity::mcp("kb", "page"),
///         old_hash: "sha256:00".into(),
///     }]),
/// };
/// let record = event.audit_record();
/// assert_eq!(record["event"], "mcp_tools_changed");
/// assert_eq!(record["changes"][0]["change"], "removed");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriftEvent {
    /// The configured server id.
    pub server: String,
    /// What made the gateway list.
    pub trigger: DriftTrigger,
    /// The changes, or why the listing failed.
    pub outcome: DriftOutcome,
}

impl DriftEvent {
    /// The changes (empty when the listing failed).
    pub fn changes(&self) -> &[ToolChange] {
        match &self.outcome {
            DriftOutcome::Changes(c) => c,
            DriftOutcome::ListingFailed(_) => &[],
        }
    }

    /// The change to one tool (qualified name, case-insensitively), if any.
    pub fn change(&self, tool: &str) -> Option<&ToolChange> {
        self.changes()
            .iter()
            .find(|c| c.tool().eq_ignore_ascii_case(tool))
    }

    /// The event as an audit record (an [`AuditEvent`], as an
    /// [`AuditSink`](toolgate::audit::AuditSink) takes it): `event` is `mcp_tools_changed` or
    /// `mcp_listing_failed`.
    pub fn audit_record(&self) -> Map<String, Value> {
        let time = humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string();
        let event = match &self.outcome {
            DriftOutcome::Changes(changes) => AuditEvent::new(time, AuditEvent::MCP_TOOLS_CHANGED)
                .with("server", self.server.as_str())
                .with("trigger", self.trigger.as_str())
                .with(
                    "changes",
                    changes.iter().map(ToolChange::record).collect::<Vec<_>>(),
                ),
            DriftOutcome::ListingFailed(why) => {
                AuditEvent::new(time, AuditEvent::MCP_LISTING_FAILED)
                    .with("server", self.server.as_str())
                    .with("trigger", self.trigger.as_str())
                    .with("error", why.as_str())
            }
        };
        event.into_map()
    }

    /// Emits one `tracing` event per change (target `toolgate_mcp::drift`): `warn` for a
    /// changed or removed tool and a failed listing, `info` otherwise.
    pub(crate) fn trace(&self) {
        let server = self.server.as_str();
        let trigger = self.trigger.as_str();
        match &self.outcome {
            DriftOutcome::ListingFailed(error) => tracing::warn!(
                target: "toolgate_mcp::drift",
                server, trigger, error = error.as_str(),
                "the tool list of MCP server `{server}` could not be read; its tools are refused until it can"
            ),
            DriftOutcome::Changes(changes) => {
                for c in changes {
                    match c {
                        ToolChange::Added { tool, hash, .. } => tracing::info!(
                            target: "toolgate_mcp::drift",
                            server, trigger, change = "added", tool = tool.as_str(),
                            new_hash = hash.as_str(), "MCP tool `{tool}` added"
                        ),
                        ToolChange::Removed { tool, old_hash, .. } => tracing::warn!(
                            target: "toolgate_mcp::drift",
                            server, trigger, change = "removed", tool = tool.as_str(),
                            old_hash = old_hash.as_str(), "MCP tool `{tool}` removed"
                        ),
                        ToolChange::Changed {
                            tool,
                            old_hash,
                            new_hash,
                            aspects,
                            ..
                        } => {
                            let parts: Vec<&str> = aspects.iter().map(|a| a.as_str()).collect();
                            tracing::warn!(
                                target: "toolgate_mcp::drift",
                                server, trigger, change = "changed", tool = tool.as_str(),
                                old_hash = old_hash.as_str(), new_hash = new_hash.as_str(),
                                aspects = parts.join(",").as_str(),
                                "MCP tool `{tool}` changed its definition ({}); it is decided afresh and approvals made under the old definition are refused",
                                parts.join(", ")
                            );
                        }
                        ToolChange::Withheld {
                            tool,
                            hash,
                            reasons,
                            ..
                        } => tracing::warn!(
                            target: "toolgate_mcp::drift",
                            server, trigger, change = "withheld", tool = tool.as_str(),
                            new_hash = hash.as_str(), reasons = reasons.join(" | ").as_str(),
                            "MCP tool `{tool}` is withheld: {}", reasons.join("; ")
                        ),
                        ToolChange::Flagged { tool, findings, .. } => tracing::warn!(
                            target: "toolgate_mcp::drift",
                            server, trigger, change = "flagged", tool = tool.as_str(),
                            findings = findings.join(" | ").as_str(),
                            "MCP tool `{tool}` has text aimed at the model or hidden from people: {}", findings.join("; ")
                        ),
                        ToolChange::Rejected { name, reason } => tracing::warn!(
                            target: "toolgate_mcp::drift",
                            server, trigger, change = "rejected", tool = name.as_str(),
                            reason = reason.as_str(), "MCP tool `{name}` was not registered: {reason}"
                        ),
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::panic,
        reason = "a test: a failed step fails it"
    )]

    use super::*;
    use toolgate_core::audit_record::AuditEntry;

    #[test]
    fn r33_a_drift_record_is_an_audit_event_that_reads_back_as_written() {
        let events = [
            DriftOutcome::Changes(vec![ToolChange::Removed {
                tool: "kb__page".into(),
                identity: ToolIdentity::mcp("kb", "page"),
                old_hash: "sha256:00".into(),
            }]),
            DriftOutcome::ListingFailed("connection refused".into()),
        ];
        for outcome in events {
            let record = DriftEvent {
                server: "kb".into(),
                trigger: DriftTrigger::ListChanged,
                outcome,
            }
            .audit_record();
            let line = Value::Object(record.clone()).to_string();
            let AuditEntry::Event(event) = AuditEntry::parse(&line).unwrap() else {
                panic!("{line}")
            };
            assert!(event.time.is_some() && event.str("server") == Some("kb"));
            assert_eq!(event.into_map(), record, "{line}");
        }
    }
}
