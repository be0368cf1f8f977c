//! toolgate as an MCP server: any MCP client connects to it, and it governs the tools of
//! the configured upstream servers (`toolgate mcp serve`, issue 15).
//!
//! One thing because it is one MCP server: the downstream session handler, its transports and
//! the upstream projection share the per-request agent and the governed service.
//!
//! - **Downstream** over stdio ([`GovernedServer::serve_stdio`], one agent named by the
//!   operator) or streamable HTTP ([`GovernedServer::serve_http`], loopback only): each
//!   request names its agent by a bearer token whose SHA-256 the configuration maps to an
//!   agent profile, or (`mcp.jwt`, issue 22) by an identity-provider JWT verified with
//!   `toolgate_idp` whose agent claim the configuration maps to a profile; a missing,
//!   unknown or unverified token, or a claim naming no profile, is HTTP 401 (with
//!   `WWW-Authenticate: Bearer resource_metadata=…` pointing to the RFC 9728 document this
//!   server serves), a missing scope 403, and nothing is listed.
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
//! - **Resources, prompts, tool search**: not offered. `initialize` declares `tools` (with
//!   `listChanged`) and `logging` (relayed messages); a client that asks for anything else
//!   gets the protocol's "method not found".
//! - **Upstream faults**: when a server's connection closes (it exited, its transport
//!   failed) its tools are refused (`rejected`, with the reason) while toolgate connects it
//!   again with exponential backoff; a call that gets no answer ends at the call timeout as a
//!   failed tool result; the downstream session goes on.
//!
//! Calls carry the session (one per downstream connection) and a turn per call (R43), so
//! `toolgate inbox list --session` shows what a client's session holds.

mod config;
mod elicit;
mod relayed;
mod wire;
mod written;

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
use toolgate::engine::{Governance, UnknownAgent};
use toolgate::{GovernanceHandle, ToolgateLayer};
use toolgate_core::{AgentRef, ChannelKind, HeldCall, ToolCall, ToolOutput, ToolResponse};
use toolgate_engine::number::NumberLiterals;
use toolgate_inbox::{Inbox, State};
use tower::ServiceExt as _;
use tower::util::BoxCloneService;
use tower_layer::Layer;
use tower_service::Service;

pub use config::{DEFAULT_CALL_TIMEOUT, McpJwt, ServeConfig, WireNames};
pub use elicit::APPROVAL_INPUT_KEY;

use crate::relay::CallRelay;
use crate::{
    GatewayError, McpCallError, McpGateway, McpServerConfig, McpToolService, SchemaValidationLayer,
};

/// Appended to the description of a tool wrapped for approval (R10, R12).
pub const APPROVAL_NOTE: &str = "[toolgate: each call to this tool waits for a person's approval]";

/// Where a channel kind is routed to first: the host's `approval.channel`, else the first
/// agent whose own channel it is.
fn routed_path(governance: &Governance, kind: ChannelKind) -> String {
    if governance.settings().channel == kind {
        return String::from("approval.channel");
    }
    governance
        .agent_names()
        .enumerate()
        .find(|(_, name)| governance.agent(name).and_then(|a| a.approval_channel) == Some(kind))
        .map_or_else(
            || String::from("approval.channel"),
            |(i, _)| format!("agents[{i}].approval.channel"),
        )
}

/// Servers whose connection closed, by server key, with why their tools are refused.
type Down = Arc<Mutex<HashMap<String, String>>>;

/// The innermost service: refuses the tools of a server that is reconnecting, and sends
/// the rest to the upstream within the call timeout.
#[derive(Clone)]
struct Timed {
    inner: McpToolService,
    timeout: Duration,
    down: Down,
}

fn server_key(qualified: &str) -> String {
    qualified
        .split("__")
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase()
}

type CallFuture = Pin<Box<dyn Future<Output = Result<ToolResponse, McpCallError>> + Send>>;

impl Service<ToolCall> for Timed {
    type Response = ToolResponse;
    type Error = McpCallError;
    type Future = CallFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, call: ToolCall) -> Self::Future {
        let tool = call.tool.display_name();
        if let Some(why) = lock(&self.down).get(&server_key(&tool)) {
            return Box::pin(std::future::ready(Ok(refused(why.clone()))));
        }
        let fut = self.inner.call(call);
        let timeout = self.timeout;
        Box::pin(async move {
            match tokio::time::timeout(timeout, fut).await {
                Ok(r) => r,
                Err(_) => Ok(ToolResponse::Failed(ToolOutput::new(Value::String(
                    format!(
                        "the MCP server did not answer the call to `{tool}` within {}; the call was abandoned (the server may still have run it)",
                        humantime::format_duration(timeout)
                    ),
                )))),
            }
        })
    }
}

type Stack = BoxCloneService<ToolCall, ToolResponse, McpCallError>;

/// Why the server could not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum ServeError {
    /// The configuration does not fit (an error per path).
    Config(toolgate::engine::ConfigErrors),
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

struct Watched {
    session: String,
    peer: Peer<RoleServer>,
    agent: String,
    seen: u64,
}

/// One agent's projected list and its fingerprint.
#[derive(Clone)]
struct Listed {
    tools: Arc<Vec<Tool>>,
    fingerprint: u64,
}

/// Each agent's projected list for one governance snapshot: a repeated `tools/list` on an
/// unchanged snapshot is a map look-up, not a projection. The projection reads the snapshot
/// only ([`list_for`]), and every change — a reload, a policy put, drift re-registering an
/// upstream's tools — stores a new snapshot, so a new snapshot is the whole invalidation.
/// Holding the snapshot keeps its address from being reused, so `Arc::ptr_eq` cannot take
/// a newer snapshot for it.
#[derive(Default)]
struct ListCache {
    snapshot: Option<Arc<Governance>>,
    agents: HashMap<String, Listed>,
}

struct Shared {
    gateway: McpGateway,
    lists: Mutex<ListCache>,
    stack: Mutex<Stack>,
    inbox: Option<Inbox>,
    tokens: std::sync::RwLock<Arc<Tokens>>,
    /// Approval questions a 2026-07-28 client took to its user, open for its retry.
    questions: elicit::OpenQuestions,
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
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The lower-case hex SHA-256 of a bearer token, as `mcp.tokens[i].sha256` stores it.
pub fn token_hash(token: &str) -> String {
    let digest = Sha256::digest(token.as_bytes());
    let mut s = String::with_capacity(64);
    for b in digest {
        s.push(char::from_digit(u32::from(b >> 4), 16).unwrap_or('0'));
        s.push(char::from_digit(u32::from(b & 0xf), 16).unwrap_or('0'));
    }
    s
}

/// The tools `agent` is shown, as MCP tools: the exposure of `governance` (R6–R13), each with
/// its description (and [`APPROVAL_NOTE`] when wrapped), input schema and annotations as
/// recorded at discovery.
pub fn list_for(governance: &Governance, agent: &str) -> Result<Vec<Tool>, UnknownAgent> {
    let exposure = governance.expose(agent)?;
    Ok(exposure
        .tools
        .into_iter()
        .map(|t| {
            let decl = governance
                .catalog()
                .get(&t.name)
                .and_then(|e| e.records.first())
                .map(|r| &r.decl);
            let schema = decl
                .and_then(|d| d.input_schema.clone())
                .and_then(|s| match s {
                    Value::Object(m) => Some(m),
                    _ => None,
                })
                .unwrap_or_else(|| {
                    let mut m = Map::new();
                    m.insert("type".into(), Value::String("object".into()));
                    m
                });
            let mut description = t.description.unwrap_or_default();
            if t.wrapped {
                if !description.is_empty() {
                    description.push(' ');
                }
                description.push_str(APPROVAL_NOTE);
            }
            let mut tool = Tool::new(t.name, description, Arc::new(schema));
            if let Some(a) = decl.and_then(|d| d.annotations.as_ref()) {
                tool = tool.with_annotations(ToolAnnotations::from_raw(
                    a.title.clone(),
                    a.read_only_hint,
                    a.destructive_hint,
                    a.idempotent_hint,
                    a.open_world_hint,
                ));
            }
            tool
        })
        .collect())
}

fn fingerprint(tools: &[Tool]) -> u64 {
    let mut h = DefaultHasher::new();
    serde_json::to_string(tools)
        .unwrap_or_default()
        .hash(&mut h);
    h.finish()
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

    fn tools_for(&self, agent: &str) -> Result<Vec<Tool>, UnknownAgent> {
        self.listed(agent).map(|l| l.tools.as_ref().clone())
    }

    /// The tools `agent` is shown by the current snapshot, from [`ListCache`] or projected
    /// (and cached) now.
    fn listed(&self, agent: &str) -> Result<Listed, UnknownAgent> {
        let governance = self.gateway.handle().load();
        let current = |c: &ListCache| {
            c.snapshot
                .as_ref()
                .is_some_and(|s| Arc::ptr_eq(s, &governance))
        };
        {
            let cache = lock(&self.lists);
            if current(&cache)
                && let Some(listed) = cache.agents.get(agent)
            {
                return Ok(listed.clone());
            }
        }
        // `mcp.wire_names`: what the client is shown, by own names in `"own"` mode.
        let tools = self.wire.list(&governance, list_for(&governance, agent)?);
        let listed = Listed {
            fingerprint: fingerprint(&tools),
            tools: Arc::new(tools),
        };
        let mut cache = lock(&self.lists);
        if !current(&cache) {
            // Only for the snapshot in force: one projected from a snapshot replaced in the
            // meantime is served to this request but not kept.
            if !Arc::ptr_eq(&self.gateway.handle().load(), &governance) {
                return Ok(listed);
            }
            cache.snapshot = Some(Arc::clone(&governance));
            cache.agents.clear();
        }
        cache.agents.insert(agent.to_owned(), listed.clone());
        Ok(listed)
    }

    fn watch(&self, session: &str, peer: &Peer<RoleServer>, agent: &str, seen: u64) {
        let mut w = lock(&self.watched);
        w.retain(|x| !x.peer.is_transport_closed());
        if let Some(x) = w
            .iter_mut()
            .find(|x| x.session == session && x.agent == agent)
        {
            x.seen = seen;
        } else {
            w.push(Watched {
                session: session.to_owned(),
                peer: peer.clone(),
                agent: agent.to_owned(),
                seen,
            });
        }
    }

    /// Sends `notifications/tools/list_changed` to each session whose agent's list changed
    /// since it last listed or was told.
    async fn notify_changes(&self) {
        let due: Vec<Peer<RoleServer>> = {
            let mut w = lock(&self.watched);
            w.retain(|x| !x.peer.is_transport_closed());
            let mut due = Vec::new();
            for x in w.iter_mut() {
                let now = self.listed(&x.agent).map_or(0, |l| l.fingerprint);
                if now != x.seen {
                    x.seen = now;
                    due.push(x.peer.clone());
                }
            }
            due
        };
        for peer in due {
            let _ = peer.notify_tool_list_changed().await;
        }
    }

    /// A held call of this agent for this tool and input: approved (to redeem) or still
    /// pending (to report again rather than hold twice). One indexed look-up by the input's
    /// hash, the one the gate bound the held call to (R35), of every open candidate; the
    /// first (approved first, then newest) whose stored input equals this call's exactly is
    /// it, so an input that only canonicalises alike (`1.0` and `1`, a number past 2^53
    /// rounded through a double) never redeems another's approval, nor hides its own
    /// behind another's: with none its own, the call is held anew.
    async fn held_for(
        &self,
        inbox: &Inbox,
        call: &ToolCall,
    ) -> Result<Option<(String, State, Vec<String>)>, String> {
        // An input with no canonical form was never held: the gate refuses it.
        let Some(input_hash) = toolgate::engine::canon::input_hash(&call.input) else {
            return Ok(None);
        };
        let found = inbox
            .store()
            .find_open_all(&call.agent, &call.tool.display_name(), &input_hash)
            .await
            .map_err(|e| format!("the durable inbox could not be read: {e}"))?;
        Ok(found
            .into_iter()
            .find(|r| r.holds_input(&call.input, NumberLiterals::of(call)))
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

fn refused(reason: String) -> ToolResponse {
    ToolResponse::Refused(toolgate_core::Refusal::new(
        toolgate_core::RefusalCode::Rejected,
        toolgate_core::Check::Routing,
        reason,
    ))
}

/// A tool result as the downstream client receives it. Refusals and held calls are
/// results with `isError: true`, their text the model-facing explanation and their
/// `structuredContent.toolgate` the outcome, code and reasons.
pub fn call_result(response: ToolResponse) -> CallToolResult {
    call_result_with_page(response, None)
}

/// The address of a held call's card on the approval page (`toolgate serve`, issue 15):
/// `approvers.public_url`, else `http://` + `approvers.listen`, then `/calls/<id>`; `None`
/// when the configuration has no `approvers` section (no page).
pub fn approval_page_link(governance: &Governance, interaction_id: &str) -> Option<String> {
    let a = governance.approver_settings()?;
    let base = match &a.public_url {
        Some(u) => u.trim_end_matches('/').to_owned(),
        None => format!("http://{}", a.listen),
    };
    Some(format!("{base}/calls/{interaction_id}"))
}

/// [`call_result`], with a held call's text and `structuredContent.toolgate.approval_url`
/// naming `page`, the address of its card on the approval page, when there is one.
pub fn call_result_with_page(response: ToolResponse, page: Option<&str>) -> CallToolResult {
    fn blocks(content: Value) -> Vec<ContentBlock> {
        match serde_json::from_value::<Vec<ContentBlock>>(content.clone()) {
            Ok(b) => b,
            Err(_) => vec![ContentBlock::text(match content {
                Value::String(s) => s,
                other => other.to_string(),
            })],
        }
    }
    match response {
        ToolResponse::Completed(o) => {
            let mut r = CallToolResult::success(blocks(o.content));
            r.structured_content = o.structured;
            r
        }
        ToolResponse::Failed(o) => {
            let mut r = CallToolResult::error(blocks(o.content));
            r.structured_content = o.structured;
            r
        }
        ToolResponse::Refused(ref refusal) => {
            let mut r = CallToolResult::error(vec![ContentBlock::text(response.model_text())]);
            let mut meta = Map::new();
            meta.insert("outcome".into(), json!("refused"));
            meta.insert("code".into(), json!(refusal.code.to_string()));
            meta.insert("reasons".into(), json!(refusal.reasons));
            // R44: when a full quota refused the call, when it could run again.
            if let Some(secs) = refusal.retry_after_secs {
                meta.insert("retry_after_secs".into(), json!(secs));
            }
            r.structured_content = Some(json!({ "toolgate": meta }));
            r
        }
        ToolResponse::Held(ref held) => {
            let at = match page {
                Some(url) => format!("approve it at {url} or with "),
                None => String::new(),
            };
            let text = format!(
                "{} Do not retry now: once a person has approved it ({at}toolgate inbox approve {}), call this tool again with exactly the same input and the approved call runs once.",
                response.model_text(),
                held.interaction_id
            );
            let mut r = CallToolResult::error(vec![ContentBlock::text(text)]);
            let mut meta = Map::new();
            meta.insert("outcome".into(), json!("held"));
            meta.insert("interaction_id".into(), json!(held.interaction_id));
            meta.insert("reasons".into(), json!(held.reasons));
            if let Some(url) = page {
                meta.insert("approval_url".into(), Value::String(url.to_owned()));
            }
            r.structured_content = Some(json!({ "toolgate": meta }));
            r
        }
    }
}

/// Who a streamable HTTP request authenticated as: its bearer token's profile, and the
/// token's hash (none for an `open_as` server); for a JWT, the binding key of its
/// principal and client instead of a hash, and the verified principal.
#[derive(Debug, Clone)]
struct Authenticated {
    agent: String,
    token: Option<String>,
    jwt: Option<JwtCaller>,
}

/// The caller a verified JWT names (`mcp.jwt`, issue 22).
#[derive(Debug, Clone)]
struct JwtCaller {
    principal: toolgate_idp::Principal,
    /// The value of the agent claim.
    client: String,
    /// The subagent id of the subagent claim, when the token has one.
    subagent: Option<String>,
}

/// `mcp.jwt` in force: its settings, the verifier with the provider's keys, and the paths
/// its protected-resource metadata is served at.
struct Jwt {
    config: McpJwt,
    verifier: toolgate_idp::Verifier,
    metadata_paths: Vec<String>,
    metadata_url: String,
}

/// The bearer tokens in force (`mcp.tokens`, `mcp.jwt`): replaced whole on a reload, so a
/// revoked token or key stops working for the next request.
#[derive(Default)]
struct Tokens {
    /// Token hash → agent profile.
    agents: HashMap<String, String>,
    /// Token hash → the name records give it.
    names: HashMap<String, String>,
    /// Identity-provider tokens, when configured.
    jwt: Option<Jwt>,
}

impl fmt::Debug for Tokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tokens")
            .field("static", &self.agents.len())
            .field("jwt", &self.jwt.as_ref().map(|j| &j.verifier))
            .finish()
    }
}

/// A refused HTTP request: status, `WWW-Authenticate` challenge, body.
type AuthRefusal = (hyper::StatusCode, String, String);

impl Tokens {
    /// The tokens of `config`, with the identity provider's keys read or fetched.
    async fn load(config: &ServeConfig) -> Result<Self, ServeError> {
        let jwt = match &config.jwt {
            None => None,
            Some(j) => {
                let verifier = toolgate_idp::Verifier::start(j.settings.clone(), "mcp.jwt")
                    .await
                    .map_err(ServeError::Config)?;
                Some(Jwt {
                    metadata_paths: toolgate_idp::metadata_paths(&j.settings.audience),
                    metadata_url: toolgate_idp::metadata_url(&j.settings.audience),
                    config: j.clone(),
                    verifier,
                })
            }
        };
        Ok(Self {
            agents: config.tokens.clone(),
            names: config.token_names.clone(),
            jwt,
        })
    }

    /// How records name the token with this hash: its configured name, else the first twelve
    /// hex digits of its hash (never the token).
    fn credential(&self, hash: &str) -> String {
        match self.names.get(hash) {
            Some(name) => format!("token `{name}`"),
            None => format!("token sha256:{}", hash.get(..12).unwrap_or(hash)),
        }
    }

    /// The protected-resource metadata (RFC 9728), when `path` is where it is served.
    fn metadata(&self, path: &str) -> Option<Value> {
        let j = self.jwt.as_ref()?;
        j.metadata_paths.iter().any(|p| p == path).then(|| {
            toolgate_idp::protected_resource_metadata(
                &j.config.settings.audience,
                &j.config.authorization_servers,
                &j.config.settings.required_scopes,
            )
        })
    }

    fn refusal(&self, status: hyper::StatusCode, why: &toolgate_idp::Rejection) -> AuthRefusal {
        let metadata = self.jwt.as_ref().map(|j| j.metadata_url.as_str());
        (status, why.challenge(metadata), format!("{why}\n"))
    }

    /// Who the request's bearer token speaks for: a listed static token (by its hash), else
    /// a JWT verified against the identity provider's keys whose agent claim names a
    /// profile. Anything else is refused: 401 (no token, an unknown one, one that does not
    /// verify, a claim naming no profile) or 403 (a missing scope).
    async fn authenticate(&self, headers: &hyper::HeaderMap) -> Result<Authenticated, AuthRefusal> {
        let metadata = self.jwt.as_ref().map(|j| j.metadata_url.as_str());
        let token = headers
            .get(hyper::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty());
        let Some(token) = token else {
            let challenge = match metadata {
                Some(m) => format!("Bearer resource_metadata=\"{m}\""),
                None => String::from("Bearer"),
            };
            let body = if self.jwt.is_some() {
                "a bearer token is required: a listed token, or an access token of the identity provider (see the protected-resource metadata)\n"
            } else {
                "a bearer token listed in the toolgate configuration is required\n"
            };
            return Err((hyper::StatusCode::UNAUTHORIZED, challenge, body.to_owned()));
        };
        let hash = token_hash(token);
        if let Some(agent) = self.agents.get(&hash) {
            return Ok(Authenticated {
                agent: agent.clone(),
                token: Some(hash),
                jwt: None,
            });
        }
        let unauthorized = hyper::StatusCode::UNAUTHORIZED;
        let Some(j) = &self.jwt else {
            return Err((
                unauthorized,
                String::from("Bearer error=\"invalid_token\""),
                String::from("a bearer token listed in the toolgate configuration is required\n"),
            ));
        };
        let verified = match j.verifier.verify(token).await {
            Ok(v) => v,
            Err(why) => {
                let status = if why.status() == 403 {
                    hyper::StatusCode::FORBIDDEN
                } else {
                    unauthorized
                };
                tracing::info!(target: "toolgate_mcp::serve", "a bearer token was refused: {why}");
                return Err(self.refusal(status, &why));
            }
        };
        let claim = &j.config.agent_claim;
        let invalid =
            |why: String| self.refusal(unauthorized, &toolgate_idp::Rejection::Invalid(why));
        let Some(client) = verified.claim_str(claim) else {
            return Err(invalid(format!(
                "the token has no `{claim}` claim naming its agent: no agent is assumed"
            )));
        };
        let Some(agent) = j.config.agents.get(client) else {
            return Err(invalid(format!(
                "the token's `{claim}` `{client}` names no agent profile (`mcp.jwt.agents`): no agent is assumed"
            )));
        };
        let subagent = match &j.config.subagent_claim {
            None => None,
            Some(c) => match verified.claims.get(c) {
                None => None,
                Some(_) => match verified.claim_str(c) {
                    Some(s) => Some(s.to_owned()),
                    None => {
                        return Err(invalid(format!(
                            "the token's `{c}` (the subagent claim) is not a non-blank string"
                        )));
                    }
                },
            },
        };
        let client = client.to_owned();
        let principal = verified.principal.clone();
        Ok(Authenticated {
            agent: agent.clone(),
            token: Some(format!(
                "jwt {}\0{}\0{client}\0{}",
                principal.issuer,
                principal.subject,
                subagent.as_deref().unwrap_or_default()
            )),
            jwt: Some(JwtCaller {
                principal,
                client,
                subagent,
            }),
        })
    }
}

/// The caller of one request: the agent it speaks for, how it authenticated (for records),
/// and the key a retry must come with (the token's hash; the session on stdio); for a JWT,
/// the subagent its claim names and the verified principal.
#[derive(Debug, Clone)]
struct Caller {
    agent: String,
    credential: String,
    key: String,
    subagent: Option<String>,
    principal: Option<toolgate_idp::Principal>,
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
        let governance = handle.load();
        config.check(&governance).map_err(ServeError::Config)?;
        if let Some(inbox) = &inbox {
            // R45: asks are answered by the inbox's grants, read on every asked call, so a
            // grant added (or revoked) by `toolgate grant` or the page takes effect without
            // a restart. A store that keeps no grants leaves every ask asked.
            match inbox.store().grant_store() {
                Ok(grants) => handle.set_grants(grants),
                Err(e) => tracing::warn!(error = %e, "the inbox's grants are not used"),
            }
        }
        let mut routed = vec![governance.settings().channel];
        for name in governance.agent_names() {
            if let Some(k) = governance.agent(name).and_then(|a| a.approval_channel) {
                routed.push(k);
            }
        }
        let mut builder = ToolgateLayer::builder(handle.clone());
        let mut channels = Vec::new();
        // R47: each kind asks are routed to is answered by its own channel, and only by it:
        // the calling client (elicitation) never stands in for the inbox or a terminal.
        for kind in [
            ChannelKind::Inbox,
            ChannelKind::Elicitation,
            ChannelKind::Interactive,
        ] {
            if !routed.contains(&kind) {
                continue;
            }
            let channel: Arc<dyn ApprovalChannel> = match kind {
                ChannelKind::Inbox => match &inbox {
                    Some(i) => Arc::new(i.channel()),
                    None => {
                        return Err(ServeError::Config(toolgate::engine::ConfigErrors::one(
                            "inbox",
                            "asks are routed to the `inbox` channel but no durable inbox was given (add an `inbox` section)",
                        )));
                    }
                },
                ChannelKind::Elicitation => Arc::new(elicit::ElicitationChannel),
                _ => {
                    return Err(ServeError::Config(toolgate::engine::ConfigErrors::one(
                        routed_path(&governance, kind),
                        "asks are routed to the `interactive` channel, a person at this process's terminal, which `toolgate mcp serve` does not have (its standard input and output are the MCP transport): route them to `inbox` (held for the approvers) or, where the agent's own client may answer, `elicitation`",
                    )));
                }
            };
            channels.push(kind);
            builder = builder.shared_channel(channel);
        }
        let layer = builder
            .build()
            .map_err(ServeError::Config)?
            .validate_input(SchemaValidationLayer::new(handle.clone()));
        // The servers' sampling and elicitation requests during a call go to its client.
        let gateway = McpGateway::builder(handle.clone()).relay_requests().build();
        for server in &config.servers {
            gateway
                .connect(server.clone())
                .await
                .map_err(ServeError::Gateway)?;
        }
        let down = Down::default();
        let timed = Timed {
            inner: gateway.service(),
            timeout: config.call_timeout,
            down: Arc::clone(&down),
        };
        let stack: Stack = BoxCloneService::new(layer.layer(timed));
        let shared = Arc::new(Shared {
            gateway,
            lists: Mutex::default(),
            stack: Mutex::new(stack),
            inbox,
            tokens: std::sync::RwLock::new(Arc::new(Tokens::load(config).await?)),
            questions: elicit::OpenQuestions::default(),
            watched: Mutex::new(Vec::new()),
            sessions: AtomicU64::new(0),
            started: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            channels,
            wire: wire::Wire::new(config.wire_names, &config.servers),
            reload: tokio::sync::RwLock::new(()),
        });
        spawn_watcher(Arc::downgrade(&shared), handle);
        for server in &config.servers {
            tokio::spawn(supervise(
                Arc::downgrade(&shared),
                server.clone(),
                Arc::clone(&down),
            ));
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
    /// The rest of the section (servers, call timeout, wire names) is the one the server
    /// started with.
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
        let mut routed = vec![(
            "approval.channel",
            String::from("asks are"),
            governance.settings().channel,
        )];
        for name in governance.agent_names() {
            if let Some(k) = governance.agent(name).and_then(|a| a.approval_channel) {
                routed.push(("agents", format!("agent `{name}`'s asks are"), k));
            }
        }
        for (path, whose, kind) in routed {
            if kind != ChannelKind::None && !self.shared.channels.contains(&kind) {
                return Err(ServeError::Config(toolgate::engine::ConfigErrors::one(
                    path,
                    format!(
                        "{whose} routed to the `{}` channel, which this server was not started with: restart `toolgate mcp serve` to change the approval channels",
                        kind.as_str()
                    ),
                )));
            }
        }
        let guard = self.shared.reload.write().await;
        let handle = self.shared.gateway.handle();
        let old = handle.load();
        handle.store(governance);
        if let Err(e) = self.shared.gateway.reapply().await {
            handle.store((*old).clone());
            return Err(ServeError::Gateway(e));
        }
        *self
            .shared
            .tokens
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(tokens);
        drop(guard);
        self.shared.notify_changes().await;
        Ok(())
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
        let io = written::TapRead::new(io, Arc::clone(&written));
        serve_until_closed!(self.tapped_session(agent, written), io)
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
        let stdin = written::TapRead::new(tokio::io::stdin(), Arc::clone(&written));
        serve_until_closed!(
            self.tapped_session(agent, written),
            (stdin, tokio::io::stdout())
        )
    }

    /// Serves streamable HTTP on a loopback address until the process ends. Each request
    /// authenticates with `Authorization: Bearer <token>`, the token's SHA-256 listed in
    /// `mcp.tokens` with the agent it speaks for, or a JWT `mcp.jwt` verifies and maps to an
    /// agent; without one the answer is HTTP 401 (403 for a missing scope) and nothing is
    /// served. With `mcp.jwt`, `GET /.well-known/oauth-protected-resource` (and the path
    /// for the resource URI) is the protected-resource metadata (RFC 9728), no token needed. With `open_as` every request speaks for that agent with
    /// no token (a single-agent server on loopback: anyone on this host can use it).
    /// `ready` gets the bound address.
    ///
    /// # Errors
    ///
    /// A non-loopback address, no tokens and no `open_as`, or the socket failing.
    pub async fn serve_http(
        &self,
        addr: SocketAddr,
        open_as: Option<&str>,
        ready: impl FnOnce(SocketAddr),
    ) -> Result<(), std::io::Error> {
        use bytes::Bytes;
        use http_body_util::{BodyExt, Full};
        use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
        use rmcp::transport::streamable_http_server::{
            StreamableHttpServerConfig, StreamableHttpService,
        };
        if !addr.ip().is_loopback() {
            return Err(std::io::Error::other(format!(
                "`{addr}` is not a loopback address: toolgate serves MCP over plain HTTP on loopback only"
            )));
        }
        if let Some(agent) = open_as {
            self.check_agent(agent)?;
        } else if self.shared.tokens().agents.is_empty() && self.shared.tokens().jwt.is_none() {
            return Err(std::io::Error::other(
                "no bearer tokens are configured (`mcp.tokens` or `mcp.jwt`): every request would be refused; add tokens or name one agent with `--agent`",
            ));
        }
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let bound = listener.local_addr()?;
        ready(bound);
        let server = self.clone();
        // `Host` is a loopback name (rmcp's default), and a browser's `Origin`, when sent, is
        // this server's own loopback origin: a page of another site (DNS rebinding) gets 403.
        let port = bound.port();
        let config = StreamableHttpServerConfig::default().with_allowed_origins([
            format!("http://127.0.0.1:{port}"),
            format!("http://localhost:{port}"),
            format!("http://[::1]:{port}"),
        ]);
        let service = StreamableHttpService::new(
            move || {
                let mut session = server.session(None);
                session.tap = Tap::Http;
                Ok(session)
            },
            Arc::new(LocalSessionManager::default()),
            config,
        );
        let open_as = open_as.map(str::to_owned);
        loop {
            let (stream, _) = listener.accept().await?;
            let service = service.clone();
            let shared = Arc::clone(&self.shared);
            let open_as = open_as.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let mut service = service.clone();
                        // The tokens in force now: a token revoked by a reload is refused.
                        let tokens = shared.tokens();
                        let open_as = open_as.clone();
                        async move {
                            let reply = |status: hyper::StatusCode,
                                         content_type: &'static str,
                                         challenge: Option<String>,
                                         body: String| {
                                let mut resp =
                                    hyper::Response::new(Full::new(Bytes::from(body)).boxed());
                                *resp.status_mut() = status;
                                resp.headers_mut().insert(
                                    hyper::header::CONTENT_TYPE,
                                    hyper::header::HeaderValue::from_static(content_type),
                                );
                                if let Some(c) = challenge
                                    .and_then(|c| hyper::header::HeaderValue::from_str(&c).ok())
                                {
                                    resp.headers_mut()
                                        .insert(hyper::header::WWW_AUTHENTICATE, c);
                                }
                                resp
                            };
                            // RFC 9728: where clients find the authorization server.
                            if req.method() == hyper::Method::GET
                                && let Some(doc) = tokens.metadata(req.uri().path())
                            {
                                return Ok(reply(
                                    hyper::StatusCode::OK,
                                    "application/json",
                                    None,
                                    doc.to_string(),
                                ));
                            }
                            let agent = match &open_as {
                                Some(agent) => Ok(Authenticated {
                                    agent: agent.clone(),
                                    token: None,
                                    jwt: None,
                                }),
                                None => tokens.authenticate(req.headers()).await,
                            };
                            let agent = match agent {
                                Ok(a) => a,
                                Err((status, challenge, body)) => {
                                    return Ok(reply(
                                        status,
                                        "text/plain; charset=utf-8",
                                        Some(challenge),
                                        body,
                                    ));
                                }
                            };
                            // R20: the body is read here, before rmcp parses it, so each
                            // `tools/call`'s numbers are kept as written.
                            let (mut parts, body) = req.into_parts();
                            let body =
                                match http_body_util::Limited::new(body, written::MAX_MESSAGE)
                                    .collect()
                                    .await
                                {
                                    Ok(b) => b.to_bytes(),
                                    Err(e) => {
                                        let too_large = e
                                            .downcast_ref::<http_body_util::LengthLimitError>()
                                            .is_some();
                                        let text = if too_large {
                                            format!(
                                                "the request body is larger than {} bytes\n",
                                                written::MAX_MESSAGE
                                            )
                                        } else {
                                            format!("the request body could not be read: {e}\n")
                                        };
                                        let mut resp = hyper::Response::new(
                                            Full::new(Bytes::from(text)).boxed(),
                                        );
                                        *resp.status_mut() = if too_large {
                                            hyper::StatusCode::PAYLOAD_TOO_LARGE
                                        } else {
                                            hyper::StatusCode::BAD_REQUEST
                                        };
                                        return Ok(resp);
                                    }
                                };
                            let written = Arc::new(written::Written::default());
                            written.tap(&body);
                            parts.extensions.insert(written);
                            parts.extensions.insert(agent);
                            let req = hyper::Request::from_parts(parts, Full::new(body));
                            service.call(req).await
                        }
                    },
                );
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, svc)
                    .await;
            });
        }
    }
}

/// The longest wait between two reconnection attempts.
pub const MAX_RECONNECT_BACKOFF: Duration = Duration::from_secs(30);

/// Watches one upstream server: when its connection closes (the process exited, the
/// transport failed), its tools are refused with the reason while it is connected again,
/// with exponential backoff (0.5 s doubling to [`MAX_RECONNECT_BACKOFF`]). Ends with the server.
async fn supervise(weak: Weak<Shared>, config: McpServerConfig, down: Down) {
    let id = config.id().to_owned();
    let key = toolgate_core::names::normalize_segment(&id)
        .map(|s| s.to_ascii_lowercase())
        .unwrap_or_else(|_| id.to_ascii_lowercase());
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let Some(shared) = weak.upgrade() else { return };
        if shared.gateway.is_open(&id) != Some(false) {
            continue;
        }
        let _ = shared.gateway.disconnect(&id).await;
        drop(shared);
        let mut delay = Duration::from_millis(500);
        let mut attempt = 1u32;
        let mut last = String::from("its connection closed");
        loop {
            lock(&down).insert(
                key.clone(),
                format!(
                    "MCP server `{id}` is not reachable ({last}); toolgate is reconnecting (attempt {attempt}), and its tools are refused until it answers again"
                ),
            );
            let Some(shared) = weak.upgrade() else { return };
            match shared.gateway.connect(config.clone()).await {
                Ok(_) => {
                    lock(&down).remove(&key);
                    tracing::info!(target: "toolgate_mcp::serve", server = id.as_str(), attempt, "reconnected");
                    break;
                }
                Err(e) => {
                    last = e.to_string();
                    tracing::warn!(target: "toolgate_mcp::serve", server = id.as_str(), attempt, "reconnecting failed: {last}");
                }
            }
            drop(shared);
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(MAX_RECONNECT_BACKOFF);
            attempt = attempt.saturating_add(1);
        }
    }
}

/// Re-checks every session's list on drift events and on a new governance snapshot (a
/// configuration or policy reload), until the server is gone.
fn spawn_watcher(weak: Weak<Shared>, handle: GovernanceHandle) {
    let Some(shared) = weak.upgrade() else { return };
    let mut events = shared.gateway.subscribe();
    drop(shared);
    tokio::spawn(async move {
        let mut last = Arc::as_ptr(&handle.load()) as usize;
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                e = events.recv() => {
                    if matches!(e, Err(tokio::sync::broadcast::error::RecvError::Closed)) {
                        break;
                    }
                }
                _ = tick.tick() => {
                    let now = Arc::as_ptr(&handle.load()) as usize;
                    if now == last {
                        continue;
                    }
                    last = now;
                }
            }
            let Some(shared) = weak.upgrade() else { break };
            let reloading = shared.reload.read().await;
            shared.notify_changes().await;
            drop(reloading);
        }
    });
}

/// The handler of one downstream MCP session.
pub struct GovernedSession {
    shared: Arc<Shared>,
    agent: Option<String>,
    session: String,
    turns: AtomicU64,
    /// The level the client set with `logging/setLevel`: relayed log messages below it are
    /// not sent.
    log_level: Arc<relayed::LogFloor>,
    /// The token hash of the first request of an HTTP session (`None` for an `open_as`
    /// server): the session is bound to it, and a request with another token is refused.
    opened_by: std::sync::OnceLock<Option<String>>,
    /// Where the `tools/call` arguments' numbers as written come from (R20).
    tap: Tap,
}

/// Where a session's transport keeps each `tools/call`'s numbers as written (R20).
enum Tap {
    /// A transport the host brought ([`GovernedServer::session`]): the arguments' values
    /// are all there is (an integer past 64 bits is the nearest double).
    None,
    /// The stdio or byte-stream reader's tap.
    Stream(Arc<written::Written>),
    /// The streamable HTTP route's tap, in each request's extensions.
    Http,
}

impl fmt::Debug for GovernedSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GovernedSession")
            .field("agent", &self.agent)
            .field("session", &self.session)
            .finish()
    }
}

impl GovernedSession {
    /// A call's response as the client receives it, a held call's with its page link.
    fn result(&self, response: ToolResponse) -> CallToolResponse {
        let page = match &response {
            ToolResponse::Held(h) => {
                approval_page_link(&self.shared.gateway.handle().load(), &h.interaction_id)
            }
            _ => None,
        };
        call_result_with_page(response, page.as_deref()).into()
    }

    /// The caller of this request: the operator's agent on stdio, else the request's bearer
    /// token's. An HTTP session is bound to the token that opened it.
    fn caller(&self, ctx: &RequestContext<RoleServer>) -> Result<Caller, ErrorData> {
        if let Some(a) = &self.agent {
            return Ok(Caller {
                agent: a.clone(),
                credential: String::from("the stdio client"),
                key: format!("session {}", self.session),
                subagent: None,
                principal: None,
            });
        }
        let auth = ctx
            .extensions
            .get::<hyper::http::request::Parts>()
            .and_then(|p| p.extensions.get::<Authenticated>())
            .ok_or_else(|| {
                ErrorData::invalid_request("the request names no agent (no bearer token)", None)
            })?;
        let opened_by = self.opened_by.get_or_init(|| auth.token.clone());
        if opened_by != &auth.token {
            return Err(ErrorData::invalid_request(
                "this MCP session was opened with another bearer token: a session answers to the token that opened it (open a new session)",
                None,
            ));
        }
        Ok(match (&auth.jwt, &auth.token) {
            (Some(j), Some(key)) => Caller {
                agent: auth.agent.clone(),
                credential: format!(
                    "`{}` of `{}` (client `{}`)",
                    j.principal.subject, j.principal.issuer, j.client
                ),
                key: key.clone(),
                subagent: j.subagent.clone(),
                principal: Some(j.principal.clone()),
            },
            (_, Some(hash)) => Caller {
                agent: auth.agent.clone(),
                credential: self.shared.tokens().credential(hash),
                key: format!("token {hash}"),
                subagent: None,
                principal: None,
            },
            (_, None) => Caller {
                agent: auth.agent.clone(),
                credential: String::from("an unauthenticated loopback client"),
                key: String::from("open"),
                subagent: None,
                principal: None,
            },
        })
    }

    /// The numbers as written of the `tools/call` `ctx` is (R20), taken from the tap; the
    /// reason to refuse the call when the tap lost them.
    fn written(&self, ctx: &RequestContext<RoleServer>) -> Result<NumberLiterals, &'static str> {
        match &self.tap {
            Tap::None => Ok(NumberLiterals::default()),
            Tap::Stream(w) => w.take(&ctx.id).literals(),
            Tap::Http => ctx
                .extensions
                .get::<hyper::http::request::Parts>()
                .and_then(|p| p.extensions.get::<Arc<written::Written>>())
                .map_or(written::Found::Missing, |w| w.take(&ctx.id))
                .literals(),
        }
    }

    fn agent(&self, ctx: &RequestContext<RoleServer>) -> Result<String, ErrorData> {
        self.caller(ctx).map(|c| c.agent)
    }
}

impl ServerHandler for GovernedSession {
    #[allow(deprecated)] // logging (SEP-2577): relayed from the upstream servers during a call
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_logging()
                .build(),
        )
        .with_server_info(Implementation::new("toolgate", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "Tools governed by toolgate: a refused or held call returns a tool result with isError and the reasons. Resources and prompts are not offered.",
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let agent = self.agent(&ctx)?;
        let reloading = self.shared.reload.read().await;
        let listed = self
            .shared
            .listed(&agent)
            .map_err(|e| ErrorData::invalid_request(e.to_string(), None))?;
        drop(reloading);
        self.shared
            .watch(&self.session, &ctx.peer, &agent, listed.fingerprint);
        Ok(ListToolsResult::with_all_items(Arc::unwrap_or_clone(
            listed.tools,
        )))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // R20: the arguments' numbers as written, taken (so cleaned up) before anything else.
        let literals = self.written(&ctx);
        let caller = self.caller(&ctx)?;
        let literals = match literals {
            Ok(l) => l,
            Err(why) => return Ok(self.result(refused(why.to_owned()))),
        };
        // A call made while a reload swaps the snapshot waits for the new one, whole.
        drop(self.shared.reload.read().await);
        // `mcp.wire_names: "own"`: the own name is mapped to the qualified one here, and
        // everything after decides by it.
        let name = match self
            .shared
            .wire
            .qualified(&self.shared.gateway, &request.name)
        {
            Ok(name) => name,
            Err(refusal) => return Ok(call_result(ToolResponse::Refused(refusal)).into()),
        };
        let input = Value::Object(request.arguments.unwrap_or_default());
        // A 2026-07-28 client's retry, carrying its user's answer to toolgate's question.
        if let Some(state) = &request.request_state {
            let retry = (
                caller.key.as_str(),
                caller.agent.as_str(),
                name.as_str(),
                &input,
            );
            let response = match self.shared.questions.answer(
                state,
                retry,
                request.input_responses.as_ref(),
            ) {
                Ok(done) => done.await.unwrap_or_else(|_| {
                    refused(String::from(
                        "the call ended before its result could be given (the server is stopping)",
                    ))
                }),
                Err(elicit::RetryRefused::Unknown) => refused(String::from(
                    "no approval question of toolgate's is open under this `requestState`: it was answered already, its wait ended, or it was never asked",
                )),
                Err(elicit::RetryRefused::Mismatch) => refused(String::from(
                    "this retry is not the call toolgate's approval question was about (another tool, input or caller): nothing was answered",
                )),
            };
            return Ok(self.result(response));
        }
        let turn = self.turns.fetch_add(1, Ordering::Relaxed);
        let agent_ref = match &caller.subagent {
            Some(id) => AgentRef::subagent(&caller.agent, id),
            None => AgentRef::profile(&caller.agent),
        };
        let mut call = ToolCall::new(agent_ref, name.clone(), input.clone())
            .in_turn(self.session.clone(), format!("call-{turn}"));
        if !literals.is_empty() {
            call.extensions.insert(literals);
        }
        // What the upstream server sends while it serves this call comes back to this client
        // (only once the stack has let the call through: `crate::relay`).
        // Issue 22: the verified principal behind a JWT, for the audit record and the span.
        if let Some(p) = &caller.principal {
            call.extensions.insert(p.clone());
        }
        let (relay, relayed) = tokio::sync::mpsc::unbounded_channel();
        let token = ctx.meta.get_progress_token();
        call.extensions
            .insert(CallRelay::new(relay, token.is_some()));
        let principal = elicit::Principal {
            credential: caller.credential.clone(),
            agent: caller.agent.clone(),
            session: self.session.clone(),
        };
        // R47: the client is asked only for asks routed to `elicitation`, and as its protocol
        // version says it can be: its own declaration, per request from 2026-07-28.
        let form = elicit::declares_form(ctx.client_capabilities().as_ref());
        let shared = Arc::clone(&self.shared);
        if !(form && elicit::input_required_era(&ctx)) {
            let way = if form {
                elicit::Way::Request(ctx.peer.clone())
            } else {
                elicit::Way::Cannot
            };
            let asker = Arc::new(elicit::Asker { way, principal });
            let run = elicit::ASKER.scope(asker, async move { shared.run(call).await });
            let response = relayed::drive(run, relayed, &ctx.peer, token, &self.log_level).await;
            return Ok(self.result(response));
        }
        // 2026-07-28 and later: no server-to-client request. The call runs on its own task; a
        // question comes back as this request's `InputRequiredResult`, and the client's retry
        // brings the answer to the gate still waiting for it.
        let (ask, asked) = tokio::sync::oneshot::channel();
        let asker = Arc::new(elicit::Asker {
            way: elicit::Way::InputRequired(Mutex::new(Some(ask))),
            principal,
        });
        let (done, mut ended) = tokio::sync::oneshot::channel();
        let peer = ctx.peer.clone();
        let floor = Arc::clone(&self.log_level);
        tokio::spawn(async move {
            let run = elicit::ASKER.scope(asker, async move { shared.run(call).await });
            let _ = done.send(relayed::drive(run, relayed, &peer, token, &floor).await);
        });
        enum First {
            Ended(Result<ToolResponse, tokio::sync::oneshot::error::RecvError>),
            Asked(Result<elicit::Question, tokio::sync::oneshot::error::RecvError>),
        }
        let first = tokio::select! {
            biased;
            r = &mut ended => First::Ended(r),
            q = asked => First::Asked(q),
        };
        let ended = match first {
            First::Ended(r) => r,
            // The call ended without asking.
            First::Asked(Err(_)) => ended.await,
            First::Asked(Ok(question)) => {
                let open = elicit::Open {
                    caller: caller.key,
                    agent: caller.agent,
                    tool: name,
                    input,
                    answer: question.answer,
                    done: ended,
                };
                match self.shared.questions.open(open) {
                    Ok(state) => {
                        let weak = Arc::downgrade(&self.shared);
                        let closing = state.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep(elicit::QUESTION_OPEN_AT_MOST).await;
                            if let Some(shared) = weak.upgrade() {
                                shared.questions.close(&closing);
                            }
                        });
                        return Ok(CallToolResponse::InputRequired(elicit::input_required(
                            question.params,
                            state,
                        )));
                    }
                    Err(open) => {
                        let _ = open.answer.send(elicit::Answer::Unreadable(String::from(
                            "too many approval questions are open for their clients' answers; try again later",
                        )));
                        open.done.await
                    }
                }
            }
        };
        let response = ended.unwrap_or_else(|_| {
            refused(String::from(
                "the call ended before its result could be given (the server is stopping)",
            ))
        });
        Ok(self.result(response))
    }

    /// `logging/setLevel`: the floor of the log messages relayed to this session from the
    /// upstream servers during its calls (the servers themselves are shared, never told).
    #[allow(deprecated)] // logging (SEP-2577): what the clients of today's versions send
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        relayed::set_floor(&self.log_level, request);
        Ok(())
    }
}
