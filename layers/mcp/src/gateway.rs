//! The gateway: connections to MCP servers, discovery into the governance snapshot, and
//! drift.

use std::collections::HashMap;
use std::fmt;
use std::process::Stdio;
use std::sync::{Arc, Mutex, Weak};

use arc_swap::ArcSwap;
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation, PaginatedRequestParams, Tool};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::{IntoTransport, TokioChildProcess};
use rmcp::{ClientCacheConfig, ClientHandler, Peer, RoleClient, ServiceExt};
use serde_json::Value;
use tokio::sync::{Notify, broadcast, watch};
use toolgate::GovernanceHandle;
use toolgate::audit::AuditSink;
use toolgate_core::{ApprovalMode, ToolDeclaration};
use toolgate_engine::{ConfigErrors, Governance, GovernanceBuilder, ServerSettings, UnknownAgent};

use crate::config::{DEFAULT_INHERITED_ENV, McpServerConfig, Transport};
use crate::declare::{self, Listing};
use crate::drift::{DriftEvent, DriftOutcome, DriftTrigger, ToolChange};
use crate::service::McpToolService;

/// Why connecting to, listing or registering a server failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum GatewayError {
    /// The server configuration cannot be used (a blank or duplicate id, a transport this
    /// call cannot start).
    Config(String),
    /// The server could not be started or reached, or did not complete the handshake.
    Connect {
        /// The server id.
        server: String,
        /// What went wrong.
        message: String,
    },
    /// The server's tool list could not be read.
    Listing {
        /// The server id.
        server: String,
        /// What went wrong.
        message: String,
    },
    /// The governance snapshot would not take the server (its trust setting conflicts with
    /// the configuration's, for one).
    Governance {
        /// The server id.
        server: String,
        /// The engine's errors.
        errors: ConfigErrors,
    },
    /// No server with this id is connected.
    UnknownServer(String),
}

impl fmt::Display for GatewayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GatewayError::Config(m) => f.write_str(m),
            GatewayError::Connect { server, message } => {
                write!(f, "cannot connect to MCP server `{server}`: {message}")
            }
            GatewayError::Listing { server, message } => {
                write!(
                    f,
                    "cannot list the tools of MCP server `{server}`: {message}"
                )
            }
            GatewayError::Governance { server, errors } => {
                write!(
                    f,
                    "the governance configuration refuses MCP server `{server}`: {errors}"
                )
            }
            GatewayError::UnknownServer(s) => write!(f, "no MCP server `{s}` is connected"),
        }
    }
}

impl std::error::Error for GatewayError {}

/// The client side of one connection: turns `notifications/tools/list_changed` into a
/// re-list (done by the server's watcher, never inside the connection's own loop).
struct GatewayClient {
    relist: Arc<Notify>,
}

impl ClientHandler for GatewayClient {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.relist.notify_one();
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("toolgate-mcp", env!("CARGO_PKG_VERSION")),
        )
    }
}

/// One connected server.
struct ServerConn {
    config: McpServerConfig,
    key: String,
    /// The gateway tool prefix the listings are built with (R41), settled when the server
    /// was connected: this config's, or the governance configuration's.
    prefix: Option<String>,
    peer: Peer<RoleClient>,
    running: Mutex<Option<RunningService<RoleClient, GatewayClient>>>,
    relist: Arc<Notify>,
    /// Serialises listings of this server.
    listing_lock: tokio::sync::Mutex<()>,
    listing: ArcSwap<Listing>,
    /// Why calls are refused, when the last listing failed.
    stale: Mutex<Option<String>>,
    /// What the server calls itself (recorded, never used as the source).
    reported_name: Option<String>,
}

impl fmt::Debug for ServerConn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerConn")
            .field("id", &self.config.id())
            .field("tools", &self.listing.load().tools.len())
            .finish()
    }
}

/// What the call path reads, swapped whole whenever a listing or a server changes.
#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) servers: HashMap<String, ServerView>,
    /// Lower-cased qualified name → (server key, raw tool name), every tool that has it.
    pub(crate) by_qualified: HashMap<String, Vec<(String, String)>>,
}

/// One server, as the call path sees it.
#[derive(Debug)]
pub(crate) struct ServerView {
    pub(crate) id: String,
    pub(crate) peer: Peer<RoleClient>,
    pub(crate) stale: Option<String>,
    pub(crate) listing: Arc<Listing>,
}

pub(crate) struct Inner {
    pub(crate) handle: GovernanceHandle,
    pub(crate) state: ArcSwap<State>,
    conns: Mutex<HashMap<String, Arc<ServerConn>>>,
    /// Serialises registrations into the governance snapshot.
    register: tokio::sync::Mutex<()>,
    events: broadcast::Sender<DriftEvent>,
    audit: Option<Arc<dyn AuditSink>>,
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
}

impl McpGatewayBuilder {
    /// Writes every [`DriftEvent`] to an audit sink too (its
    /// [`audit_record`](DriftEvent::audit_record)).
    pub fn audit(mut self, sink: Arc<dyn AuditSink>) -> Self {
        self.audit = Some(sink);
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
        let (tx, rx) = watch::channel(());
        McpGateway {
            inner: Arc::new(Inner {
                handle: self.handle,
                state: ArcSwap::from_pointee(State::default()),
                conns: Mutex::new(HashMap::new()),
                register: tokio::sync::Mutex::new(()),
                events,
                audit: self.audit,
                _alive: tx,
                alive: rx,
            }),
        }
    }
}

/// One tool as the model is shown it: the qualified name, the description and the input
/// schema, and whether calls to it wait for approval.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelTool {
    /// The qualified (wire) name the model calls (`server__tool`).
    pub name: String,
    /// The description.
    pub description: Option<String>,
    /// The input schema, as the server advertised it.
    pub input_schema: Option<Value>,
    /// Wrapped for approval (R10, R12).
    pub wrapped: bool,
}

/// The tools one agent's model is shown (R6–R13), with their schemas: the same exposed
/// set as [`Governance::expose`], so nothing omitted there can be shown here.
pub fn model_tools(governance: &Governance, agent: &str) -> Result<Vec<ModelTool>, UnknownAgent> {
    let exposure = governance.expose(agent)?;
    Ok(exposure
        .tools
        .into_iter()
        .map(|t| {
            let input_schema = governance
                .catalog()
                .get(&t.name)
                .and_then(|e| e.records.iter().find_map(|r| r.decl.input_schema.clone()));
            ModelTool {
                name: t.name,
                description: t.description,
                input_schema,
                wrapped: t.wrapped,
            }
        })
        .collect())
}

/// Connections to MCP servers whose tools are governed by one [`GovernanceHandle`].
///
/// Connecting lists every tool (following `nextCursor`), declares each with the
/// configured server id as its source and its annotations as advertised, and registers
/// them in the handle's snapshot, so exposure, the posture's trust rule (R28–R31) and the
/// air gap (R8) apply to them. Each server is then watched: on
/// `notifications/tools/list_changed`, and every
/// [`relist_every`](McpServerConfig::relist_every), its tools are listed again; every
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

    /// The service sending governed calls to the servers' tools.
    pub fn service(&self) -> McpToolService {
        McpToolService::new(Arc::clone(&self.inner))
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

    /// The tools `agent`'s model is shown, by the current snapshot.
    pub fn model_tools(&self, agent: &str) -> Result<Vec<ModelTool>, UnknownAgent> {
        model_tools(&self.inner.handle.load(), agent)
    }

    /// The server settings in force for `config` by the current snapshot; a conflict
    /// between the two is an error naming both.
    fn settle(&self, config: &McpServerConfig) -> Result<Option<ServerSettings>, GatewayError> {
        let governance = self.inner.handle.load();
        config
            .settle(governance.server_settings(config.id()), None)
            .map_err(|errors| GatewayError::Governance {
                server: config.id().to_owned(),
                errors,
            })
    }

    fn conn(&self, server: &str) -> Option<Arc<ServerConn>> {
        let key = server_key(server);
        lock(&self.inner.conns).get(&key).cloned()
    }

    /// Starts (stdio) or reaches (streamable HTTP) a server, lists its tools and registers
    /// them. Returns the discovery as a drift event (every tool `Added`, plus any
    /// rejected).
    pub async fn connect(&self, config: McpServerConfig) -> Result<DriftEvent, GatewayError> {
        let id = config.id().to_owned();
        let connect_err = |message: String| GatewayError::Connect {
            server: id.clone(),
            message,
        };
        // Before anything is started (`connect_with` checks again, under the lock).
        if lock(&self.inner.conns).contains_key(&config.key()) {
            return Err(duplicate(&id));
        }
        self.settle(&config)?;
        match config.transport.clone() {
            Transport::Stdio {
                program,
                args,
                env,
                inherit_all_env,
                cwd,
            } => {
                let mut cmd = tokio::process::Command::new(&program);
                cmd.args(&args);
                if !inherit_all_env {
                    cmd.env_clear();
                    for key in DEFAULT_INHERITED_ENV {
                        if let Some(v) = std::env::var_os(key) {
                            cmd.env(key, v);
                        }
                    }
                }
                for (k, v) in &env {
                    cmd.env(k, v);
                }
                if let Some(dir) = &cwd {
                    cmd.current_dir(dir);
                }
                cmd.kill_on_drop(true);
                let (child, stderr) = TokioChildProcess::builder(cmd)
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|e| {
                        connect_err(format!("cannot start `{}`: {e}", program.display()))
                    })?;
                if let Some(stderr) = stderr {
                    forward_stderr(id.clone(), stderr);
                }
                self.connect_with(config, child).await
            }
            #[cfg(feature = "http")]
            Transport::StreamableHttp { url } => {
                let transport =
                    rmcp::transport::StreamableHttpClientTransport::from_uri(url.as_str());
                self.connect_with(config, transport).await
            }
            #[cfg(not(feature = "http"))]
            Transport::StreamableHttp { .. } => Err(GatewayError::Config(format!(
                "MCP server `{id}` is reached over streamable HTTP, which needs the `http` feature of toolgate-mcp"
            ))),
            Transport::Custom => Err(GatewayError::Config(format!(
                "MCP server `{id}` has a custom transport: connect it with `connect_with`"
            ))),
        }
    }

    /// As [`connect`](Self::connect), over a transport you made (any rmcp client
    /// transport: an in-process pipe, a socket, …).
    pub async fn connect_with<T, E, A>(
        &self,
        config: McpServerConfig,
        transport: T,
    ) -> Result<DriftEvent, GatewayError>
    where
        T: IntoTransport<RoleClient, E, A> + Send + 'static,
        E: std::error::Error + Send + Sync + 'static,
    {
        let id = config.id().to_owned();
        let key = config.key();
        if lock(&self.inner.conns).contains_key(&key) {
            return Err(duplicate(&id));
        }
        // Trust and prefix are set once (R41, seed 002): before the server is reached, the
        // gateway's word and the configuration's must agree. Registering checks again.
        let prefix = self.settle(&config)?.and_then(|s| s.tool_prefix);
        let relist = Arc::new(Notify::new());
        let client = GatewayClient {
            relist: Arc::clone(&relist),
        };
        let running =
            match tokio::time::timeout(config.request_timeout, client.serve(transport)).await {
                Ok(Ok(r)) => r,
                Ok(Err(e)) => {
                    return Err(GatewayError::Connect {
                        server: id,
                        message: e.to_string(),
                    });
                }
                Err(_) => {
                    return Err(GatewayError::Connect {
                        server: id,
                        message: format!(
                            "the handshake took longer than {:?}",
                            config.request_timeout
                        ),
                    });
                }
            };
        let peer = running.peer().clone();
        // Every listing must be the server's word now: no cached, no stale list (a cached
        // list would hide a rug pull until it expired).
        peer.set_response_cache_config(ClientCacheConfig::disabled())
            .await;
        let reported_name = peer
            .peer_info()
            .and_then(|info| info.server_info.as_ref().map(|s| s.name.clone()));
        tracing::info!(
            target: "toolgate_mcp::drift",
            server = id.as_str(),
            reported_name = reported_name.as_deref().unwrap_or(""),
            "connected to MCP server `{id}`"
        );
        let tools = match list_all(&peer, &config).await {
            Ok(t) => t,
            Err(message) => {
                return Err(GatewayError::Listing {
                    server: id,
                    message,
                });
            }
        };
        let conn = Arc::new(ServerConn {
            key: key.clone(),
            prefix,
            peer,
            running: Mutex::new(Some(running)),
            relist,
            listing_lock: tokio::sync::Mutex::new(()),
            listing: ArcSwap::from_pointee(Listing::default()),
            stale: Mutex::new(None),
            reported_name,
            config,
        });
        let _listing = conn.listing_lock.lock().await;
        let event = {
            let _reg = self.inner.register.lock().await;
            {
                let mut conns = lock(&self.inner.conns);
                if conns.contains_key(&key) {
                    return Err(duplicate(&id));
                }
                conns.insert(key.clone(), Arc::clone(&conn));
            }
            match self
                .inner
                .apply(&conn, &tools, DriftTrigger::Discovery, true)
            {
                Ok(event) => event,
                Err(errors) => {
                    lock(&self.inner.conns).remove(&key);
                    self.inner.publish_state();
                    return Err(GatewayError::Governance { server: id, errors });
                }
            }
        };
        drop(_listing);
        self.inner.emit(&event);
        let weak = Arc::downgrade(&self.inner);
        let alive = self.inner.alive.clone();
        tokio::spawn(watch_server(weak, conn, alive));
        Ok(event)
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

async fn close(conn: &ServerConn) {
    let running = lock(&conn.running).take();
    if let Some(mut running) = running {
        let _ = running.close().await;
    }
}

fn duplicate(id: &str) -> GatewayError {
    GatewayError::Config(format!(
        "an MCP server whose id normalises like `{id}` is already connected (ids compare after normalisation, case-insensitively)"
    ))
}

fn server_key(server: &str) -> String {
    toolgate_core::names::normalize_segment(server)
        .map(|s| s.to_ascii_lowercase())
        .unwrap_or_else(|_| server.to_ascii_lowercase())
}

/// Locks a mutex, recovering the data if a panic poisoned it (the data are plain maps
/// replaced whole, never left half-written).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Every tool, following `nextCursor`, within the configured bounds and time.
async fn list_all(peer: &Peer<RoleClient>, config: &McpServerConfig) -> Result<Vec<Tool>, String> {
    let pages = async {
        let mut all = Vec::new();
        let mut cursor: Option<String> = None;
        let mut seen_cursors = std::collections::HashSet::new();
        for page_no in 1.. {
            if page_no > config.max_pages {
                return Err(format!(
                    "the server's tool list is longer than {} pages",
                    config.max_pages
                ));
            }
            let params = cursor
                .clone()
                .map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
            let page = peer.list_tools(params).await.map_err(|e| e.to_string())?;
            all.extend(page.tools);
            if all.len() > config.max_tools {
                return Err(format!(
                    "the server lists more than {} tools",
                    config.max_tools
                ));
            }
            match page.next_cursor {
                None => break,
                Some(next) => {
                    if !seen_cursors.insert(next.clone()) {
                        return Err(format!(
                            "the server's tool list repeats the cursor `{next}`"
                        ));
                    }
                    cursor = Some(next);
                }
            }
        }
        Ok(all)
    };
    match tokio::time::timeout(config.request_timeout, pages).await {
        Ok(r) => r,
        Err(_) => Err(format!(
            "listing took longer than {:?}",
            config.request_timeout
        )),
    }
}

/// Forwards a child's standard error to `tracing`, in bounded chunks.
fn forward_stderr(server: String, mut stderr: tokio::process::ChildStderr) {
    tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
        let mut buf = vec![0u8; 4096];
        loop {
            match stderr.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let text = String::from_utf8_lossy(buf.get(..n).unwrap_or_default());
                    tracing::debug!(
                        target: "toolgate_mcp::stderr",
                        server = server.as_str(),
                        "{}",
                        text.trim_end()
                    );
                }
            }
        }
    });
}

/// Waits for `list_changed` (or the period) and re-lists, until the gateway is gone.
async fn watch_server(weak: Weak<Inner>, conn: Arc<ServerConn>, mut alive: watch::Receiver<()>) {
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

/// A removed tool stays in the snapshot (the builder cannot drop a declaration), revised
/// so that it is denied: no agent is shown it, every call is refused; the service refuses
/// it too, since the server no longer lists it.
fn retire(builder: GovernanceBuilder, decl: &ToolDeclaration) -> GovernanceBuilder {
    builder.tool(
        decl.clone().approval(ApprovalMode::Deny).description(
            "removed by its server: calls are refused until the server lists it again",
        ),
    )
}

impl Inner {
    fn emit(&self, event: &DriftEvent) {
        event.trace();
        if let Some(sink) = &self.audit
            && let Err(e) = sink.write(event.audit_record())
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

    /// Rebuilds what the call path reads from every connection.
    fn publish_state(&self) {
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
                    stale: lock(&conn.stale).clone(),
                    listing,
                },
            );
        }
        self.state.store(Arc::new(state));
    }

    async fn relist(
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
    fn apply(
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
        let register: Vec<ToolDeclaration> = changes
            .iter()
            .filter_map(|c| match c {
                ToolChange::Added { identity, .. } | ToolChange::Changed { identity, .. } => {
                    new.get_own(identity.name()).map(|t| t.decl.clone())
                }
                _ => None,
            })
            .collect();
        let retired: Vec<ToolDeclaration> = changes
            .iter()
            .filter_map(|c| match c {
                ToolChange::Removed { identity, .. } => {
                    old.get_own(identity.name()).map(|t| t.decl.clone())
                }
                _ => None,
            })
            .collect();
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
                    .filter(|r| Some(&r.decl) == listed)
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
    fn register(
        &self,
        conn: &ServerConn,
        decls: &[ToolDeclaration],
        retired: &[ToolDeclaration],
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
            for d in retired {
                builder = retire(builder, d);
            }
            let mut all = builder.clone();
            for d in decls {
                all = all.tool(d.clone());
            }
            match all.build() {
                Ok(g) => Ok((g, Vec::new())),
                Err(_) => {
                    // Find which declarations the snapshot refuses, one at a time.
                    builder.clone().build()?;
                    let mut kept = builder;
                    let mut rejected = Vec::new();
                    for d in decls {
                        let attempt = kept.clone().tool(d.clone());
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
