//! A small MCP gateway of our own that puts a prefix before every tool name it lists, the
//! way LiteLLM lists a GitHub server's `create_issue` as `github-create_issue` (seed 002,
//! SPEC R41): for tests and demos of `toolgate_mcp::McpServerConfig::tool_prefix`.
//! Built with rmcp's client and server sides.
//!
//! It starts one upstream MCP server as a child process (stdio), and serves one client:
//!
//! - `tools/list` lists every upstream tool as `prefix + name` (all pages, read fresh each
//!   time), except the names given to [`PrefixGateway::keep`], listed as they are;
//! - `tools/call` forwards `prefix + name` to the upstream as `name` (the prefix compared
//!   exactly), a kept name as it is, and answers anything else with an `invalid_params`
//!   error without forwarding it;
//! - the upstream's `notifications/tools/list_changed` is passed on to the client.
//!
//! Run it with the `toolgate-mcp-prefix-gateway` binary:
//!
//! ```text
//! toolgate-mcp-prefix-gateway --prefix mem- [--keep NAME]... -- node server-memory/dist/index.js
//! ```

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::{NotificationContext, RequestContext, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{
    ClientCacheConfig, ClientHandler, ErrorData, Peer, RoleClient, RoleServer, ServerHandler,
    ServiceError, ServiceExt,
};

type Peers = Arc<Mutex<Vec<Peer<RoleServer>>>>;

fn peers_of(peers: &Peers) -> Vec<Peer<RoleServer>> {
    peers
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

/// The gateway's client side: passes the upstream's `list_changed` on.
struct Upstream {
    downstream: Peers,
}

impl ClientHandler for Upstream {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        for peer in peers_of(&self.downstream) {
            let _ = peer.notify_tool_list_changed().await;
        }
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("toolgate-mcp-prefix-gateway", env!("CARGO_PKG_VERSION")),
        )
    }
}

/// A prefixing MCP gateway in front of one upstream server (see the module docs).
#[derive(Clone)]
pub struct PrefixGateway {
    prefix: String,
    keep: HashSet<String>,
    upstream: Peer<RoleClient>,
    downstream: Peers,
    /// Keeps the upstream connection (and its child process) alive.
    _running: Arc<RunningService<RoleClient, Upstream>>,
}

impl std::fmt::Debug for PrefixGateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrefixGateway")
            .field("prefix", &self.prefix)
            .field("keep", &self.keep)
            .finish_non_exhaustive()
    }
}

impl PrefixGateway {
    /// Starts `upstream` (a command speaking MCP on standard I/O), completes the handshake
    /// and returns the gateway listing its tools under `prefix`.
    pub async fn start(
        prefix: impl Into<String>,
        upstream: tokio::process::Command,
    ) -> Result<Self, std::io::Error> {
        let prefix = prefix.into();
        if prefix.is_empty() {
            return Err(std::io::Error::other("the prefix must not be empty"));
        }
        let child = TokioChildProcess::new(upstream)?;
        let downstream: Peers = Arc::new(Mutex::new(Vec::new()));
        let running = Upstream {
            downstream: Arc::clone(&downstream),
        }
        .serve(child)
        .await
        .map_err(|e| std::io::Error::other(format!("the upstream server: {e}")))?;
        let peer = running.peer().clone();
        // Every listing is the upstream's word now, so its changes show through.
        peer.set_response_cache_config(ClientCacheConfig::disabled())
            .await;
        Ok(Self {
            prefix,
            keep: HashSet::new(),
            upstream: peer,
            downstream,
            _running: Arc::new(running),
        })
    }

    /// Lists the upstream tool `name` as it is, without the prefix (a gateway that does
    /// not prefix every tool; toolgate keeps such a name as the tool's own name).
    #[must_use]
    pub fn keep(mut self, name: impl Into<String>) -> Self {
        self.keep.insert(name.into());
        self
    }

    /// The name a tool listed by the gateway has upstream, if the gateway lists it.
    fn upstream_name<'a>(&self, listed: &'a str) -> Option<&'a str> {
        if self.keep.contains(listed) {
            return Some(listed);
        }
        listed
            .strip_prefix(self.prefix.as_str())
            .filter(|rest| !rest.is_empty() && !self.keep.contains(*rest))
    }

    /// Serves one client over any byte stream (an in-process pipe, standard I/O).
    pub async fn serve_io<IO>(self, io: IO) -> Result<(), std::io::Error>
    where
        IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
    {
        serve_until_closed!(self, io)
    }

    /// Serves one client on standard input and output.
    pub async fn serve_stdio(self) -> Result<(), std::io::Error> {
        serve_until_closed!(self, rmcp::transport::stdio())
    }
}

fn upstream_error(e: ServiceError) -> ErrorData {
    match e {
        ServiceError::McpError(data) => data,
        other => ErrorData::internal_error(format!("the upstream server: {other}"), None),
    }
}

impl ServerHandler for PrefixGateway {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new(
            "toolgate-mcp-prefix-gateway",
            env!("CARGO_PKG_VERSION"),
        ))
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.downstream
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(context.peer);
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut tools = self
            .upstream
            .list_all_tools()
            .await
            .map_err(upstream_error)?;
        for tool in &mut tools {
            if !self.keep.contains(tool.name.as_ref()) {
                tool.name = format!("{}{}", self.prefix, tool.name).into();
            }
        }
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(name) = self.upstream_name(&request.name) else {
            return Err(ErrorData::invalid_params(
                format!("this gateway lists no tool `{}`", request.name),
                None,
            ));
        };
        let mut params = CallToolRequestParams::new(name.to_owned());
        if let Some(args) = request.arguments.clone() {
            params = params.with_arguments(args);
        }
        self.upstream
            .call_tool(params)
            .await
            .map(Into::into)
            .map_err(upstream_error)
    }
}
