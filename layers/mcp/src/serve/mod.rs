//! toolgate as an MCP server: any MCP client connects to it, and it governs the tools of
//! the configured upstream servers (`toolgate mcp serve`; serve.md).
//!
//! One thing because it is one MCP server: the downstream session handler, its transports and
//! the upstream projection share the per-request agent and the governed service.
//!
//! - **Downstream** over stdio ([`GovernedServer::serve_stdio`], one agent named by the
//!   operator) or streamable HTTP ([`GovernedServer::serve_http`], loopback only): each
//!   request names its agent by a bearer token whose SHA-256 the configuration maps to an
//!   agent profile, or (`mcp.jwt`) by an identity-provider JWT verified with `toolgate_idp`
//!   whose agent claim the configuration maps to a profile; a missing, unknown or
//!   unverified token, or a claim naming no profile, is HTTP 401 (with `WWW-Authenticate:
//!   Bearer resource_metadata=…` pointing to the RFC 9728 document this server serves), a
//!   missing scope 403, and nothing is listed.
//! - **Upstream** the configured servers are connected with the [`McpGateway`]: discovery,
//!   the trust rule, drift detection (R29, R35), gateway prefixes (R41).
//! - **`tools/list`** is exactly the agent's exposure (R6–R13): qualified names,
//!   descriptions, input schemas and annotations as recorded; omitted tools are absent; a
//!   tool wrapped for approval says so in its description. Each agent's list is projected
//!   once per governance snapshot and served from memory until the next one. When drift or
//!   a new snapshot changes what an agent sees, its sessions get
//!   `notifications/tools/list_changed`.
//! - **`tools/call`** passes the composite governed stack ([`toolgate::ToolgateLayer`]:
//!   audit, schema validation, exposure, confidentiality, air gap, approval gate, scrub),
//!   then the upstream, within the configured call timeout. An ask is answered by **MCP
//!   elicitation** when the client declared the capability (the person sees the prompt,
//!   every reason and the input; decline or cancel → `rejected` saying which; no answer in
//!   the agent's timeout → `rejected`, expired), else by the configured channel: with the
//!   durable inbox the call is **held** and the result says so with the interaction id and
//!   the reasons; the same call (same agent, tool and input) made again after a person
//!   approved it is sent **once** through the same stack (redeemed, R26, R38). With no
//!   channel: `no_approval_channel`. Refusals and held calls are tool results with
//!   `isError: true` (the model reads the code and reasons), never protocol errors.
//! - **Wire names** (`mcp.wire_names`): qualified by default; with `"own"` (one server only)
//!   the list shows own names and a call by own name is mapped to the qualified name before
//!   the stack, which governs by qualified names as always (`wire`).
//! - **Relays**: while the upstream serves a call the stack let through, its progress
//!   notifications, log messages and sampling/elicitation requests go to the client that made
//!   the call (`crate::relay`, `relayed`); `logging/setLevel` sets that session's floor.
//! - **Resources, prompts, completion** (`content`): offered when an upstream has them,
//!   named like tools, under each agent's `allowed_resources` / `allowed_prompts`, the
//!   confidentiality filter and the air gap; every read and get audited and traced.
//!   `initialize` declares `tools` (with `listChanged`), `logging` (relayed messages) and
//!   what the upstreams offer of resources, prompts and completions.
//! - **Deferred tools** (`mcp.deferred_tools`, `deferred`): `tool_search` over the agent's
//!   exposure and `tool_call`, unwrapped into the inner call before the governed stack.
//! - **The lock and the scanner** (`mcp.locked`, `mcp.scan`): a tool whose definition is not
//!   the locked one, or that the description scanner flags under `"withhold"`, is withheld.
//! - **Upstream faults**: when a server's connection closes (it exited, its transport
//!   failed) its tools are refused (`rejected`, with the reason) while toolgate connects it
//!   again with exponential backoff; a call that gets no answer ends at the call timeout as a
//!   failed tool result; the downstream session goes on.
//!
//! Calls carry the session (one per downstream connection) and a turn per call (R43), so
//! `toolgate inbox list --session` shows what a client's session holds.
//!
//! The rooms: this file holds the server (start, reload, the governed run of a call);
//! `session` the handler of one downstream session; `http` the streamable HTTP transport;
//! `auth` who a request speaks for; `list` the projected, cached lists; `result` how a
//! response reads to the client; `upstream` the innermost service, supervision and the
//! change watcher; `elicit` the elicitation channel; `relayed` what the upstream sends
//! during a call; `wire` own wire names; `written` the numbers as written (R20); `config`
//! the `mcp` section.

mod auth;
mod config;
mod content;
mod deferred;
mod elicit;
mod http;
mod list;
mod notify;
mod ops;
mod options;
mod relayed;
mod result;
mod revoke;
mod sendable;
mod servers;
mod session;
mod tasks;
mod upstream;
mod wire;
pub(crate) mod written;

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use toolgate::approval::ApprovalChannel;
use toolgate::{GovernanceHandle, ToolgateBuilder, ToolgateLayer};
use toolgate_core::number::NumberLiterals;
use toolgate_core::{AgentRef, ChannelKind, HeldCall, ToolCall, ToolOutput, ToolResponse};
use toolgate_engine::{Governance, RoutedChannel, UnknownAgent};
use toolgate_inbox::{Inbox, State};
use tower::ServiceExt as _;
use tower::util::BoxCloneService;
use tower_layer::Layer;
use tower_service::Service;

pub use auth::token_hash;
pub use config::{DEFAULT_CALL_TIMEOUT, McpJwt, ServeConfig, WireNames};
pub use deferred::{MAX_SEARCH_RESULTS, TOOL_CALL, TOOL_SEARCH, ToolIndex};
pub use elicit::APPROVAL_INPUT_KEY;
pub use list::list_for;
pub use ops::{GovernedStack, MetricsText, Observe, UpstreamObserver};
pub use options::GatewayOptions;
pub use result::{approval_page_link, call_result, call_result_with_page};
pub use session::GovernedSession;
pub use upstream::MAX_RECONNECT_BACKOFF;

use auth::{Authenticated, Caller, Tokens};
use list::{ListCache, Watched};
use result::refused;
use session::Tap;
use upstream::{Down, Timed, spawn_watcher, supervise};

use crate::relay::CallRelay;
use crate::{
    GatewayError, McpCallError, McpGateway, McpServerConfig, McpToolService, SchemaValidationLayer,
};

/// Appended to the description of a tool wrapped for approval (R10, R12).
pub const APPROVAL_NOTE: &str = "[toolgate: each call to this tool waits for a person's approval]";

type Stack = BoxCloneService<ToolCall, ToolResponse, McpCallError>;

/// Why the server could not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum ServeError {
    /// The configuration does not fit (an error per path).
    Config(toolgate_engine::ConfigErrors),
    /// An upstream server could not be connected.
    Gateway(GatewayError),
}

impl fmt::Display for ServeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServeError::Config(e) => write!(f, "{e}"),
            ServeError::Gateway(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ServeError {}

struct Shared {
    gateway: McpGateway,
    lists: Mutex<ListCache>,
    stack: Mutex<Stack>,
    inbox: Option<Inbox>,
    tokens: std::sync::RwLock<Arc<Tokens>>,
    /// Approval questions a 2026-07-28 client took to its user, open for its retry: in the
    /// durable inbox when there is one (any replica answers the retry), else in memory.
    questions: elicit::QuestionBook,
    watched: Mutex<Vec<Watched>>,
    sessions: AtomicU64,
    /// When the server started (Unix seconds): part of every session id, so ids of one run
    /// are not those of another (R43).
    started: u64,
    /// The approval channels the stack was built with: a reload may not route asks elsewhere.
    channels: Vec<ChannelKind>,
    /// How the downstream wire names the tools (`mcp.wire_names`).
    wire: wire::Wire,
    /// Held for writing while a reload swaps the snapshot and registers the upstream tools
    /// in it again; listing and notifying wait for it, so no session sees the moment between.
    reload: tokio::sync::RwLock<()>,
    /// The HTTP sessions rmcp holds, once `serve_http` runs (who opened each is remembered
    /// while it is open).
    http: Mutex<Option<Arc<http::HttpSessions>>>,
    /// Servers whose connection closed (their tools refused while they reconnect).
    down: Down,
    /// The upstream servers in force, each with its supervisor (changed on reload).
    servers: servers::Servers,
    /// What the host records: metrics, the wait observer.
    observe: Observe,
    /// Resources, prompts and completion.
    content: content::Content,
    /// `mcp.deferred_tools`: `tool_search` and `tool_call` instead of the list.
    deferred: bool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    fn tokens(&self) -> Arc<Tokens> {
        Arc::clone(
            &self
                .tokens
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    fn stack(&self) -> Stack {
        lock(&self.stack).clone()
    }

    /// A held call of this agent for this tool and input: approved (to redeem) or still
    /// pending (to report again rather than hold twice). One indexed look-up by the input's
    /// hash, the one the gate bound the held call to (R35), of every open candidate; the
    /// first (approved first, then newest) whose stored input equals this call's exactly is
    /// it, so an input that only canonicalises alike (`1.0` and `1`, a number past 2^53
    /// rounded through a double) never redeems another's approval, nor hides its own
    /// behind another's: with none its own, the call is held anew. A call a person approved
    /// with an edited input is found by the input the agent sent, and redeeming it sends the
    /// edited input, once.
    async fn held_for(
        &self,
        inbox: &Inbox,
        call: &ToolCall,
    ) -> Result<Option<(String, State, Vec<String>)>, String> {
        // An input with no canonical form was never held: the gate refuses it.
        let Some(input_hash) = toolgate_engine::canon::input_hash(&call.input) else {
            return Ok(None);
        };
        let found = inbox
            .store()
            .find_open_all(&call.agent, &call.tool.display_name(), &input_hash)
            .await
            .map_err(|e| format!("the durable inbox could not be read: {e}"))?;
        Ok(found
            .into_iter()
            .find(|r| r.repeated_by(&call.input, NumberLiterals::of(call)))
            .map(|r| {
                let reasons = r.call.reasons.iter().map(|a| a.reason.clone()).collect();
                (r.id().to_owned(), r.state, reasons)
            }))
    }

    async fn run(&self, call: ToolCall) -> ToolResponse {
        if let Some(inbox) = &self.inbox {
            match self.held_for(inbox, &call).await {
                Ok(None) => {}
                Ok(Some((id, State::Approved, _))) => {
                    // R38: the approved call is sent once, through the same stack.
                    return match inbox.resume(&id, self.stack()).await {
                        Ok(resumed) => resumed.response,
                        Err(e) => refused(format!(
                            "the approved held call `{id}` could not be sent: {e}"
                        )),
                    };
                }
                Ok(Some((id, _, reasons))) => {
                    return ToolResponse::Held(HeldCall {
                        interaction_id: id,
                        reasons,
                    });
                }
                Err(e) => return refused(e),
            }
        }
        match self.stack().oneshot(call).await {
            Ok(r) => r,
            Err(e) => ToolResponse::Failed(ToolOutput::new(Value::String(e.to_string()))),
        }
    }
}

/// R45: asks are answered by the inbox's grants, when it keeps any.
fn use_inbox_grants(handle: &GovernanceHandle, inbox: Option<&Inbox>) {
    if let Some(inbox) = inbox {
        // R45: asks are answered by the inbox's grants, read on every asked call, so a
        // grant added (or revoked) by `toolgate grant` or the page takes effect without
        // a restart. A store that keeps no grants leaves every ask asked.
        match inbox.store().grant_store() {
            Ok(grants) => handle.set_grants(grants),
            Err(e) => tracing::warn!(error = %e, "the inbox's grants are not used"),
        }
    }
}

/// R32: the stack's builder with the configuration's decision services, when it has any.
fn with_hooks(
    mut builder: ToolgateBuilder,
    config: &ServeConfig,
    governance: &Governance,
) -> Result<ToolgateBuilder, ServeError> {
    // R32: the configuration's decision services, asked before each call is sent and
    // after its result, with the input redacted as the audit record redacts it.
    if !config.hooks.is_empty() {
        let redactor =
            toolgate::redact::RedactorBuilder::from_settings(governance.redaction_settings())
                .build()
                .map_err(ServeError::Config)?;
        let services = crate::hooks::DecisionServices::new(config.hooks.clone(), redactor)
            .map_err(|why| {
                ServeError::Config(toolgate_engine::ConfigErrors::one("hooks", why.to_string()))
            })?;
        builder = builder.hooks(services);
    }
    Ok(builder)
}

/// R47: the stack's builder with one channel for each kind asks are routed to, and those
/// kinds; a kind `mcp serve` cannot answer (`interactive`, or `inbox` without one) is an
/// error at the path that routes to it.
fn with_channels(
    mut builder: ToolgateBuilder,
    routed: &[RoutedChannel<'_>],
    inbox: Option<&Inbox>,
) -> Result<(ToolgateBuilder, Vec<ChannelKind>), ServeError> {
    let mut channels = Vec::new();
    // R47: each kind asks are routed to is answered by its own channel, and only by it:
    // the calling client (elicitation) never stands in for the inbox or a terminal.
    for kind in [
        ChannelKind::Inbox,
        ChannelKind::Elicitation,
        ChannelKind::Interactive,
    ] {
        // Where the configuration first routes asks to this kind, for its error.
        let Some(first) = routed.iter().find(|r| r.kind == kind) else {
            continue;
        };
        let channel: Arc<dyn ApprovalChannel> = match kind {
            ChannelKind::Inbox => match inbox {
                Some(i) => Arc::new(i.channel()),
                None => {
                    return Err(ServeError::Config(toolgate_engine::ConfigErrors::one(
                        "inbox",
                        "asks are routed to the `inbox` channel but no durable inbox was given (add an `inbox` section)",
                    )));
                }
            },
            ChannelKind::Elicitation => Arc::new(elicit::ElicitationChannel),
            _ => {
                return Err(ServeError::Config(toolgate_engine::ConfigErrors::one(
                    first.path.clone(),
                    "asks are routed to the `interactive` channel, a person at this process's terminal, which `toolgate mcp serve` does not have (its standard input and output are the MCP transport): route them to `inbox` (held for the approvers) or, where the agent's own client may answer, `elicitation`",
                )));
            }
        };
        channels.push(kind);
        builder = builder.shared_channel(channel);
    }
    Ok((builder, channels))
}

/// The gateway to the upstream servers, built (not yet connected): requests relayed to the
/// calling client, the description scanner, the lock, and the stack's audit sink.
fn upstream_gateway(
    handle: &GovernanceHandle,
    config: &ServeConfig,
    audit: Option<Arc<dyn toolgate::audit::AuditSink>>,
) -> Result<McpGateway, ServeError> {
    let mut gateway = McpGateway::builder(handle.clone())
        .relay_requests()
        .scan(config.gateway.scan);
    // `mcp.locked` withholds every tool that is not the locked one.
    if let Some(lock) = config.gateway.load_lock().map_err(ServeError::Config)? {
        gateway = gateway.locked(lock);
    }
    if let Some(sink) = audit {
        gateway = gateway.audit(sink);
    }
    Ok(gateway.build())
}

/// toolgate as an MCP server in front of the configured upstream servers. Cheap to clone.
#[derive(Clone)]
pub struct GovernedServer {
    shared: Arc<Shared>,
}

impl fmt::Debug for GovernedServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GovernedServer")
            .field("gateway", &self.shared.gateway)
            .field("inbox", &self.shared.inbox.is_some())
            .finish()
    }
}

impl GovernedServer {
    /// Connects every upstream server of `config` (listing and registering their tools in
    /// `handle`'s snapshots) and assembles the governed stack. `inbox` is the durable inbox
    /// asks go to when the client cannot be asked by elicitation (required when the
    /// configuration routes asks to `inbox`).
    ///
    /// # Errors
    ///
    /// A configuration that does not fit (each error with its path: `mcp.tokens`,
    /// `approval.channel`, `audit.file`, …), or an upstream server that cannot be connected.
    pub async fn start(
        handle: GovernanceHandle,
        config: &ServeConfig,
        inbox: Option<Inbox>,
    ) -> Result<Self, ServeError> {
        Self::start_observed(handle, config, inbox, Observe::default()).await
    }

    /// [`GovernedServer::start`], with what the host records about the server: a layer
    /// wrapping the governed stack outermost, a wait observer, an upstream-latency
    /// observer, and the text `GET /metrics` answers.
    ///
    /// # Errors
    ///
    /// As [`GovernedServer::start`].
    pub async fn start_observed(
        handle: GovernanceHandle,
        config: &ServeConfig,
        inbox: Option<Inbox>,
        observe: Observe,
    ) -> Result<Self, ServeError> {
        let governance = handle.load();
        config.check(&governance).map_err(ServeError::Config)?;
        use_inbox_grants(&handle, inbox.as_ref());
        let routed: Vec<_> = governance.routed_channels().collect();
        let mut builder = ToolgateLayer::builder(handle.clone());
        if let Some(waits) = &observe.waits {
            builder = builder.wait_observer(ops::SharedWaits(Arc::clone(waits)));
        }
        builder = with_hooks(builder, config, &governance)?;
        let (builder, channels) = with_channels(builder, &routed, inbox.as_ref())?;
        // What no connected server lists is refused `unknown_tool` before the schema, the
        // filters and any ask (audited like every refusal).
        let down = Down::default();
        let sendable = sendable::SendableLayer {
            gateway: Arc::default(),
            down: Arc::clone(&down),
        };
        let layer = builder
            .build()
            .map_err(ServeError::Config)?
            .validate_input(sendable.clone())
            .validate_input(SchemaValidationLayer::new(handle.clone()));
        // The servers' sampling and elicitation requests during a call go to its client.
        let gateway = upstream_gateway(&handle, config, layer.audit_sink())?;
        let _ = sendable.gateway.set(gateway.clone());
        let content = content::Content::new(layer.audit_sink(), layer.redactor().clone());
        for server in &config.servers {
            gateway
                .connect(server.clone())
                .await
                .map_err(ServeError::Gateway)?;
        }
        let timed = Timed {
            inner: gateway.service(),
            timeout: config.call_timeout,
            down: Arc::clone(&down),
            upstream: observe.upstream.clone(),
        };
        // R49: with a shared store's counter, each call's session labels are read before the
        // stack decides it (a policy without `session_labels` reads nothing).
        let mut stack: Stack = BoxCloneService::new(
            toolgate::SessionLabelsLayer::new(handle.clone()).layer(layer.layer(timed)),
        );
        if let Some(wrap) = &observe.wrap {
            stack = wrap(stack);
        }
        let questions = match &inbox {
            Some(inbox) => elicit::QuestionBook::Store(Arc::clone(inbox.store())),
            None => elicit::QuestionBook::Memory(Mutex::default()),
        };
        let shared = Arc::new(Shared {
            gateway,
            lists: Mutex::default(),
            stack: Mutex::new(stack),
            inbox,
            tokens: std::sync::RwLock::new(Arc::new(Tokens::load(config).await?)),
            questions,
            watched: Mutex::new(Vec::new()),
            sessions: AtomicU64::new(0),
            started: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            channels,
            wire: wire::Wire::new(config.wire_names, &config.servers),
            reload: tokio::sync::RwLock::new(()),
            http: Mutex::new(None),
            down,
            servers: servers::Servers::default(),
            observe,
            content,
            deferred: config.gateway.deferred_tools,
        });
        content::spawn_content_watcher(Arc::downgrade(&shared), &shared.gateway);
        spawn_watcher(Arc::downgrade(&shared), handle);
        for server in &config.servers {
            shared.supervise(server.clone());
        }
        Ok(Self { shared })
    }

    /// Replaces the governance snapshot with `governance` (a configuration or policy reload,
    /// `toolgate mcp serve` on SIGHUP): checked against `config` (every token's agent is a
    /// profile of it) and against the approval channels the server was started with, the
    /// connected servers' tools registered in it again before any session lists by it, then
    /// each session whose list changed gets `notifications/tools/list_changed`. The `mcp`
    /// section's bearer tokens (`mcp.tokens`) are replaced by `config`'s: a token no longer
    /// listed is refused from the next request on, and so are the sessions opened with it.
    /// The servers of `config` replace those in force: a removed server is closed, an added
    /// one connected, a changed one connected again with its new entry, the others left
    /// open — no downstream session is closed (see `servers`). The call timeout and wire
    /// names are the ones the server started with.
    ///
    /// # Errors
    ///
    /// Any problem keeps the snapshot in force (fail closed): a token naming an agent the new
    /// configuration lacks, asks routed to a channel this server has no way to answer, or
    /// the upstream tools not fitting the new configuration.
    pub async fn reload(
        &self,
        governance: Governance,
        config: &ServeConfig,
    ) -> Result<(), ServeError> {
        config.check(&governance).map_err(ServeError::Config)?;
        // The identity provider's keys read or fetched again (SIGHUP): a key removed from
        // the JWKS stops verifying at once. Keys that cannot be had keep the ones in force.
        let tokens = Tokens::load(config).await?;
        for r in governance.routed_channels() {
            if r.kind != ChannelKind::None && !self.shared.channels.contains(&r.kind) {
                let whose = match r.agent {
                    None => String::from("asks are"),
                    Some(name) => format!("agent `{name}`'s asks are"),
                };
                return Err(ServeError::Config(toolgate_engine::ConfigErrors::one(
                    r.path,
                    format!(
                        "{whose} routed to the `{}` channel, which this server was not started with: restart `toolgate mcp serve` to change the approval channels",
                        r.kind.as_str()
                    ),
                )));
            }
        }
        let change = self.shared.server_change(&config.servers);
        if !change.is_empty() && matches!(self.shared.wire, wire::Wire::Own { .. }) {
            return Err(ServeError::Config(toolgate_engine::ConfigErrors::one(
                "mcp.servers",
                "the servers changed, and with `mcp.wire_names: \"own\"` the tools' own names are those of the one server the server started with: restart `toolgate mcp serve` to change them",
            )));
        }
        let guard = self.shared.reload.write().await;
        let handle = self.shared.gateway.handle();
        let old = handle.load();
        // Removed and changed servers first: their tools leave the snapshot below.
        self.shared.close_servers(&change.close).await;
        handle.store(governance);
        if let Err(e) = self.shared.gateway.reapply().await {
            handle.store((*old).clone());
            return Err(ServeError::Gateway(e));
        }
        self.shared.open_servers(change.open).await;
        *self
            .shared
            .tokens
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(tokens);
        drop(guard);
        self.shared.notify_changes().await;
        Ok(())
    }

    /// Whether the server is ready (`/readyz`): every upstream server connected and the
    /// inbox's store reachable; with the JSON body saying so, and naming what is not ready
    /// (`not_ready`).
    pub async fn readiness(&self) -> (bool, Value) {
        ops::readiness(&self.shared).await
    }

    /// The gateway connecting the upstream servers.
    pub fn gateway(&self) -> &McpGateway {
        &self.shared.gateway
    }

    /// The tools `agent` is shown now.
    pub fn tools_for(&self, agent: &str) -> Result<Vec<Tool>, UnknownAgent> {
        self.shared.tools_for(agent)
    }

    /// A handler for one downstream session speaking for `agent` (stdio, or any transport
    /// you bring); `None` takes the agent from each request's bearer token (HTTP).
    pub fn session(&self, agent: Option<&str>) -> GovernedSession {
        let n = self.shared.sessions.fetch_add(1, Ordering::Relaxed);
        GovernedSession {
            shared: Arc::clone(&self.shared),
            agent: agent.map(str::to_owned),
            session: format!("mcp-{}-{}-{n}", self.shared.started, std::process::id()),
            turns: AtomicU64::new(0),
            log_level: Arc::new(Mutex::new(None)),
            opened_by: std::sync::OnceLock::new(),
            tap: Tap::None,
        }
    }

    /// [`GovernedServer::session`] whose transport's reads are tapped (R20): the stdio and
    /// byte-stream transports.
    fn tapped_session(&self, agent: &str, written: Arc<written::Written>) -> GovernedSession {
        let mut session = self.session(Some(agent));
        session.tap = Tap::Stream(written);
        session
    }

    fn check_agent(&self, agent: &str) -> Result<(), std::io::Error> {
        self.shared
            .listed(agent)
            .map(|_| ())
            .map_err(|e| std::io::Error::other(e.to_string()))
    }

    /// Serves one client speaking for `agent` over any byte stream until it goes away.
    ///
    /// # Errors
    ///
    /// An unknown agent, or a transport failure.
    pub async fn serve_io<IO>(&self, agent: &str, io: IO) -> Result<(), std::io::Error>
    where
        IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
    {
        self.check_agent(agent)?;
        let written = Arc::new(written::Written::default());
        let (read, write) = tokio::io::split(io);
        serve_until_closed!(
            self.tapped_session(agent, Arc::clone(&written)),
            crate::lines::LineTransport::<RoleServer, _, _>::tapped(read, write, Some(written))
        )
    }

    /// Serves the client that started this process, on standard input and output,
    /// speaking for `agent`, until it goes away.
    ///
    /// # Errors
    ///
    /// An unknown agent, or a transport failure.
    pub async fn serve_stdio(&self, agent: &str) -> Result<(), std::io::Error> {
        self.check_agent(agent)?;
        let written = Arc::new(written::Written::default());
        #[cfg(unix)]
        let _flags = StdioFlags::read();
        let (read, write) = stdio();
        serve_until_closed!(
            self.tapped_session(agent, Arc::clone(&written)),
            crate::lines::LineTransport::<RoleServer, _, _>::tapped(read, write, Some(written))
        )
    }
}

/// Standard input and output for the stdio transport. Where they are pipes (Unix; the
/// usual case: the Python SDK's and most clients' `pipe()`), they are read and written
/// non-blocking by the runtime itself: `tokio::io::stdin` and `stdout` hand every read and
/// write to a blocking thread, a thread hop and ≈ 8 k instructions per call. Anything else
/// (a terminal, a file, the socket pairs of Node's `child_process`) keeps tokio's
/// blocking-thread `stdin` and `stdout`. Each stream decides on its own.
fn stdio() -> (
    Box<dyn tokio::io::AsyncRead + Send + Unpin>,
    Box<dyn tokio::io::AsyncWrite + Send + Unpin>,
) {
    #[cfg(unix)]
    {
        use std::os::fd::AsFd;
        use tokio::net::unix::pipe;
        // Copies of the descriptors (fd 0 and 1 stay open): the pipe types own theirs.
        // They are set non-blocking only once known to be pipes open the right way.
        let read = std::io::stdin()
            .as_fd()
            .try_clone_to_owned()
            .and_then(pipe::Receiver::from_owned_fd);
        let write = std::io::stdout()
            .as_fd()
            .try_clone_to_owned()
            .and_then(pipe::Sender::from_owned_fd);
        let read: Box<dyn tokio::io::AsyncRead + Send + Unpin> = match read {
            Ok(r) => Box::new(r),
            Err(_) => Box::new(tokio::io::stdin()),
        };
        let write: Box<dyn tokio::io::AsyncWrite + Send + Unpin> = match write {
            Ok(w) => Box::new(w),
            Err(_) => Box::new(tokio::io::stdout()),
        };
        (read, write)
    }
    #[cfg(not(unix))]
    {
        (Box::new(tokio::io::stdin()), Box::new(tokio::io::stdout()))
    }
}

/// The file status flags of standard input and output as they were before [`stdio`] made
/// them non-blocking, put back when the session ends: the open pipe is shared with whoever
/// else holds it (a wrapper script writing after this process), who expects it blocking.
#[cfg(unix)]
struct StdioFlags {
    stdin: Option<nix::fcntl::OFlag>,
    stdout: Option<nix::fcntl::OFlag>,
}

#[cfg(unix)]
impl StdioFlags {
    fn read() -> Self {
        use nix::fcntl::{FcntlArg, OFlag, fcntl};
        use std::os::fd::AsFd;
        let get = |fd: std::os::fd::BorrowedFd<'_>| {
            fcntl(fd, FcntlArg::F_GETFL)
                .ok()
                .map(OFlag::from_bits_truncate)
        };
        Self {
            stdin: get(std::io::stdin().as_fd()),
            stdout: get(std::io::stdout().as_fd()),
        }
    }
}

#[cfg(unix)]
impl Drop for StdioFlags {
    fn drop(&mut self) {
        use nix::fcntl::{FcntlArg, fcntl};
        use std::os::fd::AsFd;
        if let Some(flags) = self.stdin {
            let _ = fcntl(std::io::stdin().as_fd(), FcntlArg::F_SETFL(flags));
        }
        if let Some(flags) = self.stdout {
            let _ = fcntl(std::io::stdout().as_fd(), FcntlArg::F_SETFL(flags));
        }
    }
}
