//! Applying drift: re-listing a server, diffing the listing, registering the change in the
//! governance snapshot, publishing what the call path reads and emitting the event.

use std::sync::{Arc, Weak};

use rmcp::model::Tool;
use tokio::sync::watch;
use toolgate_core::{ApprovalMode, ToolDeclaration};
use toolgate_engine::{ConfigErrors, Governance, GovernanceBuilder, ServerSettings};

use super::Inner;
use super::conn::{ServerConn, list_all, lock, server_key};
use super::error::GatewayError;
use crate::declare;
use crate::drift::{DriftEvent, DriftOutcome, DriftTrigger, ToolChange};
use crate::routes::{ServerView, State};
use crate::scan::{ScanMode, scan_tool};

/// Waits for `list_changed` (or the period) and re-lists, until the gateway is gone.
pub(super) async fn watch_server(
    weak: Weak<Inner>,
    conn: Arc<ServerConn>,
    mut alive: watch::Receiver<()>,
) {
    let mut tick = conn.config.relist_every.map(|every| {
        let mut i = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        i
    });
    loop {
        let trigger = tokio::select! {
            () = conn.relist.notified() => DriftTrigger::ListChanged,
            _ = async {
                match tick.as_mut() {
                    Some(t) => t.tick().await,
                    None => std::future::pending().await,
                }
            } => DriftTrigger::Periodic,
            _ = alive.changed() => break,
        };
        let Some(inner) = weak.upgrade() else { break };
        if !lock(&inner.conns).contains_key(&conn.key) {
            break; // disconnected
        }
        // Errors are reported as events; the watcher keeps watching.
        let _ = inner.relist(&conn, trigger).await;
    }
}

/// Declarations the snapshot refused: (the tool's listed name, why).
type Rejections = Vec<(String, String)>;

/// Why a tool its server no longer lists is denied: the description it is retired with.
const REMOVED: &str = "removed by its server: calls are refused until the server lists it again";

/// A removed or withheld tool stays in the snapshot (the builder cannot drop a
/// declaration), revised so that it is denied: no agent is shown it, every call is refused;
/// the service refuses it too. Its description becomes `why` (what happened to it), which
/// is what spans, `explain` and the catalog show for it from now on.
fn retire(builder: GovernanceBuilder, decl: &ToolDeclaration, why: &str) -> GovernanceBuilder {
    builder.listed(decl.clone().approval(ApprovalMode::Deny).description(why))
}

impl Inner {
    /// The lock (`mcp.locked`) and the description scanner (`mcp.scan`) on each tool
    /// `changes` adds or changes. Findings become [`ToolChange::Flagged`]; a tool to
    /// withhold becomes [`ToolChange::Withheld`] (replacing its `Added`, after its
    /// `Changed`). Returns the own names withheld, each with the reason its calls are
    /// refused with.
    fn screen(
        &self,
        conn: &ServerConn,
        tools: &[Tool],
        new: &crate::declare::Listing,
        changes: &mut Vec<ToolChange>,
    ) -> Vec<(String, String)> {
        if self.lock.is_none() && self.scan == ScanMode::Off {
            return Vec::new();
        }
        let server = conn.config.id();
        let mut withheld = Vec::new();
        let mut out = Vec::with_capacity(changes.len());
        for change in changes.drain(..) {
            let (ToolChange::Added { tool, identity, .. }
            | ToolChange::Changed { tool, identity, .. }) = &change
            else {
                out.push(change);
                continue;
            };
            let Some(listed) = new.get_own(identity.name()) else {
                out.push(change);
                continue;
            };
            let Some(raw) = tools.iter().find(|t| t.name.as_ref() == listed.raw) else {
                out.push(change);
                continue;
            };
            let (tool, identity) = (tool.clone(), identity.clone());
            let mut reasons = Vec::new();
            if let Some(why) = self.lock.as_ref().and_then(|l| l.verdict(server, raw)) {
                reasons.push(format!("the lock (`mcp.locked`): {why}"));
            }
            let findings: Vec<String> = if self.scan == ScanMode::Off {
                Vec::new()
            } else {
                scan_tool(raw).iter().map(ToString::to_string).collect()
            };
            if self.scan == ScanMode::Withhold && !findings.is_empty() {
                reasons.push(format!(
                    "the description scan (`mcp.scan: \"withhold\"`) flagged it: {}",
                    findings.join("; ")
                ));
            }
            let added = matches!(change, ToolChange::Added { .. });
            if !added || reasons.is_empty() {
                out.push(change);
            }
            if !findings.is_empty() {
                out.push(ToolChange::Flagged {
                    tool: tool.clone(),
                    identity: identity.clone(),
                    findings,
                });
            }
            if !reasons.is_empty() {
                withheld.push((
                    identity.name().to_owned(),
                    format!("the MCP tool `{tool}` is withheld: {}", reasons.join("; ")),
                ));
                out.push(ToolChange::Withheld {
                    tool,
                    identity,
                    hash: listed.hash.clone(),
                    reasons,
                });
            }
        }
        *changes = out;
        withheld
    }

    pub(super) fn emit(&self, event: &DriftEvent) {
        event.trace();
        if let Some(sink) = &self.audit
            && let Err(e) = sink.write(self.with_definitions(event))
        {
            tracing::error!(
                target: "toolgate_mcp::drift",
                server = event.server.as_str(),
                "the drift record could not be written to the audit sink: {e}"
            );
        }
        // No subscriber is fine.
        let _ = self.events.send(event.clone());
    }

    /// The event's audit record, each added or changed tool with its `definition` as the
    /// server's listing now holds it (R46, R52: what a replay of the log registers again,
    /// [`toolgate_engine::canon::listed_record`]).
    fn with_definitions(&self, event: &DriftEvent) -> serde_json::Map<String, serde_json::Value> {
        let mut record = event.audit_record();
        let listing = lock(&self.conns)
            .get(&server_key(&event.server))
            .map(|c| c.listing.load_full());
        if let (Some(listing), Some(serde_json::Value::Array(changes))) =
            (listing, record.get_mut("changes"))
        {
            for c in changes.iter_mut() {
                let kind = c.get("change").and_then(serde_json::Value::as_str);
                if !matches!(kind, Some("added" | "changed")) {
                    continue;
                }
                let Some(t) = c
                    .get("name")
                    .and_then(serde_json::Value::as_str)
                    .and_then(|n| listing.get_own(n))
                else {
                    continue;
                };
                if let serde_json::Value::Object(o) = c {
                    o.insert(
                        "definition".into(),
                        toolgate_engine::canon::listed_record(&t.decl),
                    );
                }
            }
        }
        record
    }

    /// Rebuilds what the call path reads from every connection.
    pub(super) fn publish_state(&self) {
        let conns = lock(&self.conns);
        let mut state = State::default();
        for (key, conn) in conns.iter() {
            let listing = conn.listing.load_full();
            for t in &listing.tools {
                state
                    .by_qualified
                    .entry(t.qualified.to_ascii_lowercase())
                    .or_default()
                    .push((key.clone(), t.raw.clone()));
            }
            state.servers.insert(
                key.clone(),
                ServerView {
                    id: conn.config.id().to_owned(),
                    peer: conn.peer.clone(),
                    inflight: Arc::clone(&conn.inflight),
                    stale: lock(&conn.stale).clone(),
                    listing,
                    exchange: conn.exchange.clone(),
                },
            );
        }
        self.state.store(Arc::new(state));
    }

    pub(super) async fn relist(
        &self,
        conn: &Arc<ServerConn>,
        trigger: DriftTrigger,
    ) -> Result<Option<DriftEvent>, GatewayError> {
        let _listing = conn.listing_lock.lock().await;
        let id = conn.config.id().to_owned();
        let tools = match list_all(&conn.peer, &conn.config).await {
            Ok(t) => t,
            Err(message) => {
                // Fail closed: the list may have changed in ways nobody has seen.
                *lock(&conn.stale) = Some(format!(
                    "the tool list of MCP server `{id}` could not be read ({message}); its tools are refused until it can"
                ));
                self.publish_state();
                let event = DriftEvent {
                    server: id.clone(),
                    trigger,
                    outcome: DriftOutcome::ListingFailed(message.clone()),
                };
                self.emit(&event);
                return Err(GatewayError::Listing {
                    server: id,
                    message,
                });
            }
        };
        let event = {
            let _reg = self.register.lock().await;
            self.apply(conn, &tools, trigger, false)
                .map_err(|errors| GatewayError::Governance {
                    server: id.clone(),
                    errors,
                })?
        };
        if event.changes().is_empty() {
            return Ok(None);
        }
        self.emit(&event);
        Ok(Some(event))
    }

    /// Registers a new listing of `conn` (the caller holds the register lock) and swaps it
    /// in. The event is not emitted yet.
    pub(super) fn apply(
        &self,
        conn: &ServerConn,
        tools: &[Tool],
        trigger: DriftTrigger,
        first: bool,
    ) -> Result<DriftEvent, ConfigErrors> {
        let old = conn.listing.load_full();
        let settings = conn.prefix.as_ref().map(|p| ServerSettings {
            trust_tool_annotations: false,
            tool_prefix: Some(p.clone()),
            labels: Vec::new(),
        });
        let mut new = declare::listing(&conn.config, settings.as_ref(), tools);
        let mut changes = declare::diff(&old, &new);
        // Tools that were unregistered stay so until they change.
        for t in &mut new.tools {
            if let Some(o) = old.get(&t.raw)
                && o.hash == t.hash
                && o.unregistered.is_some()
            {
                Arc::make_mut(t).unregistered.clone_from(&o.unregistered);
            }
        }
        // The lock and the description scanner, on every tool added or changed.
        let withheld = self.screen(conn, tools, &new, &mut changes);
        let register: Vec<ToolDeclaration> = changes
            .iter()
            .filter_map(|c| match c {
                ToolChange::Added { identity, .. } | ToolChange::Changed { identity, .. } => {
                    new.get_own(identity.name()).map(|t| t.decl.clone())
                }
                _ => None,
            })
            .filter(|d| !withheld.iter().any(|(own, _)| own == d.identity.name()))
            .collect();
        let mut retired: Vec<(ToolDeclaration, String)> = changes
            .iter()
            .filter_map(|c| match c {
                ToolChange::Removed { identity, .. } => old
                    .get_own(identity.name())
                    .map(|t| (t.decl.clone(), String::from(REMOVED))),
                _ => None,
            })
            .collect();
        // A withheld tool that was registered before is denied from now on, described as
        // withheld (the lock's or the scanner's word), not as removed: its server still
        // lists it.
        for (own, why) in &withheld {
            if let Some(t) = old.get_own(own)
                && t.unregistered.is_none()
            {
                retired.push((t.decl.clone(), why.clone()));
            }
        }
        for (own, reason) in &withheld {
            if let Some(t) = new.by_own.get(own).and_then(|&i| new.tools.get_mut(i)) {
                Arc::make_mut(t).unregistered = Some(reason.clone());
            }
        }
        let (governance, rejected) = if register.is_empty() && retired.is_empty() && !first {
            (self.handle.load(), Vec::new())
        } else {
            self.register(conn, &register, &retired)?
        };
        for (name, reason) in &rejected {
            if let Some(t) = new.by_name.get(name).and_then(|&i| new.tools.get_mut(i)) {
                Arc::make_mut(t).unregistered = Some(reason.clone());
            }
            changes.push(ToolChange::Rejected {
                name: name.clone(),
                reason: reason.clone(),
            });
        }
        // The posture's verdict on each registered tool, from the snapshot now in force.
        for c in &mut changes {
            if let ToolChange::Added {
                identity, posture, ..
            }
            | ToolChange::Changed {
                identity, posture, ..
            } = c
            {
                let listed = new.get_own(identity.name()).map(|t| &t.decl);
                *posture = governance
                    .catalog()
                    .get_identity(identity)
                    .and_then(|e| e.records.iter().find(|r| r.identity() == identity))
                    .filter(|r| listed.is_some_and(|l| r.decl.same_definition(l)))
                    .map(|r| r.posture.clone());
            }
        }
        conn.listing.store(Arc::new(new));
        *lock(&conn.stale) = None;
        self.publish_state();
        Ok(DriftEvent {
            server: conn.config.id().to_owned(),
            trigger,
            outcome: DriftOutcome::Changes(changes),
        })
    }

    /// Adds `decls` (and retires `retired`) in the current snapshot and stores it, with the
    /// server's settings when the snapshot has none. A declaration the snapshot refuses is
    /// left out and returned with its listed name and the reason.
    pub(super) fn register(
        &self,
        conn: &ServerConn,
        decls: &[ToolDeclaration],
        retired: &[(ToolDeclaration, String)],
    ) -> Result<(Arc<Governance>, Rejections), ConfigErrors> {
        // Read-copy-update: another writer (a policy replacement, a configuration reload)
        // that stores first makes this run again on its snapshot, and nothing is lost.
        self.handle.update_with(|base| {
            let mut builder = base.to_builder();
            // Set once (R41): the snapshot's settings must agree with the gateway's word
            // and with the prefix the listing was built with; a snapshot without them (a
            // configuration reload) gets them again.
            let configured = base.server_settings(conn.config.id());
            if let Some(settings) = conn
                .config
                .settle(configured, Some(conn.prefix.as_deref()))?
                && configured.is_none()
            {
                builder = builder.server(conn.config.id(), settings);
            }
            for (d, why) in retired {
                builder = retire(builder, d, why);
            }
            let mut all = builder.clone();
            for d in decls {
                all = all.listed(d.clone());
            }
            match all.build() {
                Ok(g) => Ok((g, Vec::new())),
                Err(_) => {
                    // Find which declarations the snapshot refuses, one at a time.
                    builder.clone().build()?;
                    let mut kept = builder;
                    let mut rejected = Vec::new();
                    for d in decls {
                        let attempt = kept.clone().listed(d.clone());
                        match attempt.clone().build() {
                            Ok(_) => kept = attempt,
                            Err(e) => rejected.push((d.sent_name().to_owned(), e.to_string())),
                        }
                    }
                    kept.build().map(|g| (g, rejected))
                }
            }
        })
    }
}
