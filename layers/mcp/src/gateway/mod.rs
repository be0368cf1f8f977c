//! The gateway: connections to MCP servers, discovery into the governance snapshot, and
//! drift.
//!
//! One file per concern: [`error`] (why it failed), [`conn`] (one connection), [`connect`]
//! (connecting), [`drift`] (applying drift), [`model`] (the model-facing projection); this
//! file holds the gateway and its public methods. Imports run one way: `connect` and `drift`
//! use this file and `conn`; this file uses `conn`, `error`, `model` and `crate::service`;
//! `crate::service` uses only `crate::routes`, so the gateway and its service never import
//! each other.

mod conn;
mod connect;
mod drift;
mod error;
#[cfg(feature = "http")]
mod http;
#[cfg(all(feature = "http", feature = "serve"))]
pub(crate) use http::header_name;
mod model;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use tokio::sync::{broadcast, watch};
use toolgate::GovernanceHandle;
use toolgate::audit::AuditSink;
use toolgate_core::ToolDeclaration;
use toolgate_engine::UnknownAgent;

use self::conn::{ServerConn, close, lock, server_key};
pub use self::error::GatewayError;
pub use self::model::{ModelTool, model_tools};

/// A resource or prompt notification of an upstream server (serve.md, "Resources, prompts
/// and completion, governed"), attributed to its configured id: `toolgate mcp serve`
/// forwards it to its sessions.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ContentEvent {
    /// `notifications/resources/list_changed`.
    ResourcesChanged(String),
    /// `notifications/prompts/list_changed`.
    PromptsChanged(String),
    /// `notifications/resources/updated` for a subscribed URI.
    ResourceUpdated {
        /// The configured server id.
        server: String,
        /// The resource's URI, as the server sent it.
        uri: String,
    },
}
use crate::drift::{DriftEvent, DriftTrigger};
use crate::routes::{Routes, State};
use crate::service::McpToolService;

pub(crate) struct Inner {
    pub(crate) handle: GovernanceHandle,
    pub(crate) state: ArcSwap<State>,
    conns: Mutex<HashMap<String, Arc<ServerConn>>>,
    /// Serialises registrations into the governance snapshot.
    register: tokio::sync::Mutex<()>,
    events: broadcast::Sender<DriftEvent>,
    /// The servers' resource and prompt notifications.
    pub(crate) content: broadcast::Sender<ContentEvent>,
    audit: Option<Arc<dyn AuditSink>>,
    /// Declare sampling and elicitation to the servers: their requests during a call are
    /// relayed to the call's client (`crate::relay`).
    relay_requests: bool,
    /// `mcp.locked`: tools whose definition is not the locked one are withheld.
    pub(crate) lock: Option<Arc<crate::lock::Lockfile>>,
    /// `mcp.scan`: what the description scanner's findings do.
    pub(crate) scan: crate::scan::ScanMode,
    /// Dropped with the gateway: every watcher ends.
    _alive: watch::Sender<()>,
    alive: watch::Receiver<()>,
}

impl fmt::Debug for Inner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpGateway")
            .field(
                "servers",
                &self.state.load().servers.keys().collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// Builds an [`McpGateway`].
#[derive(Debug)]
#[must_use]
pub struct McpGatewayBuilder {
    handle: GovernanceHandle,
    audit: Option<Arc<dyn AuditSink>>,
    capacity: usize,
    relay_requests: bool,
    lock: Option<Arc<crate::lock::Lockfile>>,
    scan: crate::scan::ScanMode,
}

impl McpGatewayBuilder {
    /// Withholds every tool whose definition is not the one in `lock` (`mcp.locked: true`;
    /// serve.md, "The definition lock and the description scanner"): a changed tool, one
    /// the lock does not name, any tool of a server the lock does not name. Each is
    /// reported as a [`ToolChange::Withheld`](crate::ToolChange::Withheld) drift event
    /// (traced, audited); no agent is shown it and every call to it is refused.
    pub fn locked(mut self, lock: crate::lock::Lockfile) -> Self {
        self.lock = Some(Arc::new(lock));
        self
    }

    /// What the description scanner ([`crate::scan`]) does with a tool it flags: with
    /// [`ScanMode::Warn`](crate::scan::ScanMode::Warn) a
    /// [`ToolChange::Flagged`](crate::ToolChange::Flagged) drift event, with `Withhold` that
    /// and the tool withheld. Off unless set (`toolgate mcp serve`'s `mcp.scan` defaults to
    /// `"warn"`).
    pub fn scan(mut self, mode: crate::scan::ScanMode) -> Self {
        self.scan = mode;
        self
    }

    /// Writes every [`DriftEvent`] to an audit sink too (its
    /// [`audit_record`](DriftEvent::audit_record)).
    pub fn audit(mut self, sink: Arc<dyn AuditSink>) -> Self {
        self.audit = Some(sink);
        self
    }

    /// Declares the `sampling` and `elicitation` (form) capabilities to every server, so a
    /// server may ask them while it serves a call; each such request goes to the client of
    /// the one call in flight on that connection through the call's
    /// [`CallRelay`](crate::relay::CallRelay) (and is answered with an error when there is
    /// none, or the client cannot answer it). Off by default: a gateway with no relays
    /// declares no capabilities. `toolgate mcp serve` turns it on.
    pub fn relay_requests(mut self) -> Self {
        self.relay_requests = true;
        self
    }

    /// How many drift events a slow subscriber may fall behind before it misses some
    /// (default 256).
    pub fn event_capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity.max(1);
        self
    }

    /// The gateway.
    pub fn build(self) -> McpGateway {
        let (events, _) = broadcast::channel(self.capacity);
        let (content, _) = broadcast::channel(self.capacity);
        let (tx, rx) = watch::channel(());
        McpGateway {
            inner: Arc::new(Inner {
                handle: self.handle,
                state: ArcSwap::from_pointee(State::default()),
                conns: Mutex::new(HashMap::new()),
                register: tokio::sync::Mutex::new(()),
                events,
                content,
                audit: self.audit,
                relay_requests: self.relay_requests,
                lock: self.lock,
                scan: self.scan,
                _alive: tx,
                alive: rx,
            }),
        }
    }
}

/// Connections to MCP servers whose tools are governed by one [`GovernanceHandle`].
///
/// Connecting lists every tool (following `nextCursor`), declares each with the
/// configured server id as its source and its annotations as advertised, and registers
/// them in the handle's snapshot, so exposure, the posture's trust rule (R28–R31) and the
/// air gap (R8) apply to them. Each server is then watched: on
/// `notifications/tools/list_changed`, and every
/// [`relist_every`](crate::McpServerConfig::relist_every), its tools are listed again; every
/// change is registered (a revision by the tool's own source, R29), traced, sent to
/// [`subscribe`](Self::subscribe)rs and to the audit sink. [`service`](Self::service) is
/// the `tower::Service` that sends governed calls.
///
/// Cheap to clone. Dropping the last clone (and every [`McpToolService`]) closes the
/// connections and stops child processes; [`shutdown`](Self::shutdown) does it now.
#[derive(Debug, Clone)]
pub struct McpGateway {
    pub(crate) inner: Arc<Inner>,
}

impl McpGateway {
    /// A gateway registering tools in `handle`'s snapshots.
    pub fn new(handle: GovernanceHandle) -> Self {
        Self::builder(handle).build()
    }

    /// A builder, to add an audit sink.
    pub fn builder(handle: GovernanceHandle) -> McpGatewayBuilder {
        McpGatewayBuilder {
            handle,
            audit: None,
            capacity: 256,
            relay_requests: false,
            lock: None,
            // Off for code that builds a gateway itself; `toolgate mcp serve` warns by default.
            scan: crate::scan::ScanMode::Off,
        }
    }

    /// The governance handle.
    pub fn handle(&self) -> &GovernanceHandle {
        &self.inner.handle
    }

    /// Receives every drift event from now on: discoveries, changes and failed listings.
    pub fn subscribe(&self) -> broadcast::Receiver<DriftEvent> {
        self.inner.events.subscribe()
    }

    /// Receives the servers' resource and prompt notifications from now on
    /// (`notifications/resources/list_changed`, `…/prompts/list_changed`,
    /// `…/resources/updated`), each attributed to its configured server id.
    pub fn subscribe_content(&self) -> broadcast::Receiver<ContentEvent> {
        self.inner.content.subscribe()
    }

    /// The connection to one server, for what is not a tool call (its resources, prompts and
    /// completions), and what it declared in its handshake. `None`: no such server, or its
    /// connection closed.
    pub fn upstream(
        &self,
        server: &str,
    ) -> Option<(
        rmcp::Peer<rmcp::RoleClient>,
        Option<rmcp::model::ServerCapabilities>,
    )> {
        self.conn(server)
            .filter(|c| !c.peer.is_transport_closed())
            .map(|c| {
                let caps = c.peer.peer_info().map(|i| i.capabilities.clone());
                (c.peer.clone(), caps)
            })
    }

    /// Makes a request to `server` one sent on behalf of `subject` when the server has a
    /// token exchange (RFC 8693: the exchanged token into the request's `extensions`); for
    /// any other server, nothing. Why there is no token, else: the request must not be
    /// sent.
    #[cfg_attr(
        not(feature = "http"),
        allow(
            unused_variables,
            clippy::unused_async,
            reason = "without `http` no server has a token exchange: the subject is not read"
        )
    )]
    #[cfg(feature = "serve")]
    pub(crate) async fn on_behalf(
        &self,
        server: &str,
        subject: Option<&crate::SubjectToken>,
        extensions: &mut rmcp::model::Extensions,
    ) -> Result<Option<toolgate_core::Delegation>, crate::service::NoToken> {
        #[cfg(feature = "http")]
        if let Some(exchanger) = self.conn(server).and_then(|c| c.exchange.clone()) {
            return crate::exchange::authorize(exchanger, subject, extensions)
                .await
                .map(Some);
        }
        Ok(None)
    }

    /// A connected server's configuration (R7, R8: what it withholds from confidential
    /// work, its operator's network scope).
    #[cfg(feature = "serve")]
    pub(crate) fn server_config(&self, server: &str) -> Option<crate::McpServerConfig> {
        self.conn(server).map(|c| c.config.clone())
    }

    /// Whether a server is open-world (then its resources are egress): one of its tools as
    /// listed is open-world (`openWorldHint` true or absent, R8), or it lists none.
    #[cfg(feature = "serve")]
    pub(crate) fn open_world(&self, server: &str) -> bool {
        self.conn(server).is_none_or(|c| {
            let listing = c.listing.load();
            listing.tools.is_empty()
                || listing.tools.iter().any(|t| {
                    t.decl.annotations.as_ref().and_then(|a| a.open_world_hint) != Some(false)
                })
        })
    }

    /// The service sending governed calls to the servers' tools.
    pub fn service(&self) -> McpToolService {
        McpToolService::new(Arc::clone(&self.inner) as Arc<dyn Routes>)
    }

    /// The ids of the connected servers.
    pub fn servers(&self) -> Vec<String> {
        let state = self.inner.state.load();
        let mut ids: Vec<String> = state.servers.values().map(|s| s.id.clone()).collect();
        ids.sort();
        ids
    }

    /// Whether the connection to `server` is still open (`None`: no such server is
    /// connected). A stdio server that exited, or a transport that closed, is `Some(false)`.
    pub fn is_open(&self, server: &str) -> Option<bool> {
        self.conn(server).map(|c| !c.peer.is_transport_closed())
    }

    /// What a server calls itself in its handshake: recorded for people, never used as the
    /// tools' source.
    pub fn reported_name(&self, server: &str) -> Option<String> {
        self.conn(server).and_then(|c| c.reported_name.clone())
    }

    /// The declarations of a server's tools as last listed, in the server's order.
    pub fn declarations(&self, server: &str) -> Option<Vec<ToolDeclaration>> {
        self.conn(server).map(|c| {
            c.listing
                .load()
                .tools
                .iter()
                .map(|t| t.decl.clone())
                .collect()
        })
    }

    /// A server's tools exactly as it last listed them (withheld ones too), in its order.
    pub fn listed_tools(&self, server: &str) -> Option<Vec<rmcp::model::Tool>> {
        self.conn(server).map(|c| {
            c.listing
                .load()
                .tools
                .iter()
                .map(|t| t.listed.clone())
                .collect()
        })
    }

    /// A definition lock ([`crate::lock`]) of every connected server's tools as last listed
    /// (withheld ones too): what `toolgate mcp lock` writes.
    pub fn lockfile(&self) -> crate::lock::Lockfile {
        let mut lock = crate::lock::Lockfile::default();
        for conn in lock_conns(&self.inner).into_iter() {
            let listing = conn.listing.load_full();
            let tools: Vec<rmcp::model::Tool> =
                listing.tools.iter().map(|t| t.listed.clone()).collect();
            lock.set_server(conn.config.id(), &tools);
        }
        lock
    }

    /// The tools `agent`'s model is shown, by the current snapshot.
    pub fn model_tools(&self, agent: &str) -> Result<Vec<ModelTool>, UnknownAgent> {
        model_tools(&self.inner.handle.load(), agent)
    }

    /// A server's tools as last listed (shared, not copied): what `toolgate mcp serve` maps
    /// own names by.
    #[cfg(feature = "serve")]
    pub(crate) fn listing(&self, server: &str) -> Option<Arc<crate::declare::Listing>> {
        self.conn(server).map(|c| c.listing.load_full())
    }

    /// The MCP Apps part of a tool's `_meta` as its server listed it: the `ui` object (and
    /// the older flat `ui/resourceUri` key), nothing else of `_meta`; `None` when the tool
    /// has none or is not listed.
    #[cfg(feature = "serve")]
    pub(crate) fn app_meta(
        &self,
        tool: &toolgate_core::ToolRef,
    ) -> Option<serde_json::Map<String, serde_json::Value>> {
        let state = self.inner.state.load();
        let (_, listed) = crate::service::resolve(&state, tool).ok()?;
        let meta = listed.listed.meta.as_ref()?;
        let kept: serde_json::Map<String, serde_json::Value> = meta
            .iter()
            .filter(|(k, _)| *k == "ui" || *k == "ui/resourceUri")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        (!kept.is_empty()).then_some(kept)
    }

    /// Whether a call naming `tool` could be sent now: a connected server lists it and it
    /// is registered (the gateway lists and holds only what it can send). The refusal says
    /// why not (`unknown_tool`).
    #[cfg(feature = "serve")]
    pub(crate) fn sendable(
        &self,
        tool: &toolgate_core::ToolRef,
    ) -> Result<(), toolgate_core::Refusal> {
        let state = self.inner.state.load();
        let (_, listed) = crate::service::resolve(&state, tool)?;
        match &listed.unregistered {
            None => Ok(()),
            Some(why) => Err(toolgate_core::Refusal::new(
                toolgate_core::RefusalCode::UnknownTool,
                toolgate_core::Check::UnknownTool,
                format!("`{}` is not registered: {why}", listed.qualified),
            )),
        }
    }

    fn conn(&self, server: &str) -> Option<Arc<ServerConn>> {
        let key = server_key(server);
        lock(&self.inner.conns).get(&key).cloned()
    }
    /// Lists a server's tools now and registers any change. `None` when nothing changed.
    pub async fn relist(&self, server: &str) -> Result<Option<DriftEvent>, GatewayError> {
        let conn = self
            .conn(server)
            .ok_or_else(|| GatewayError::UnknownServer(server.to_owned()))?;
        self.inner.relist(&conn, DriftTrigger::Manual).await
    }

    /// Registers every connected server's current tools in the handle's current snapshot
    /// again: call it after replacing the snapshot with one built without them (a
    /// configuration reload).
    pub async fn reapply(&self) -> Result<(), GatewayError> {
        let _reg = self.inner.register.lock().await;
        let conns: Vec<Arc<ServerConn>> = lock(&self.inner.conns).values().cloned().collect();
        for conn in conns {
            let listing = conn.listing.load_full();
            let decls: Vec<ToolDeclaration> = listing
                .tools
                .iter()
                .filter(|t| t.unregistered.is_none())
                .map(|t| t.decl.clone())
                .collect();
            self.inner
                .register(&conn, &decls, &[])
                .map_err(|errors| GatewayError::Governance {
                    server: conn.config.id().to_owned(),
                    errors,
                })?;
        }
        Ok(())
    }

    /// Closes one server's connection (stopping its process). Its tools stay in the
    /// snapshot but every call to them is refused.
    pub async fn disconnect(&self, server: &str) -> Result<(), GatewayError> {
        let key = server_key(server);
        let conn = lock(&self.inner.conns)
            .remove(&key)
            .ok_or_else(|| GatewayError::UnknownServer(server.to_owned()))?;
        self.inner.publish_state();
        close(&conn).await;
        Ok(())
    }

    /// Closes every connection now.
    pub async fn shutdown(&self) {
        let conns: Vec<Arc<ServerConn>> = lock(&self.inner.conns).drain().map(|(_, c)| c).collect();
        self.inner.publish_state();
        for conn in conns {
            close(&conn).await;
        }
    }
}

fn lock_conns(inner: &Inner) -> Vec<Arc<ServerConn>> {
    lock(&inner.conns).values().cloned().collect()
}

impl Routes for Inner {
    fn routes(&self) -> arc_swap::Guard<Arc<State>> {
        self.state.load()
    }

    fn handle(&self) -> &GovernanceHandle {
        &self.handle
    }
}
