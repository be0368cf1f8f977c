//! One connection to an MCP server: the client side of the session, starting and listing,
//! and the small helpers every part of the gateway shares.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
// Sampling and logging are deprecated by SEP-2577 in rmcp; servers still send them (relayed).
#[allow(
    deprecated,
    reason = "sampling and logging are deprecated by SEP-2577; servers still send them, and they are relayed"
)]
use rmcp::model::{
    ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult,
    ElicitRequestParams, ElicitResult, ElicitationCapability, FormElicitationCapability,
    Implementation, LoggingMessageNotificationParam, PaginatedRequestParams,
    ProgressNotificationParam, SamplingCapability, Tool,
};
use rmcp::service::{NotificationContext, RequestContext, RunningService};
use rmcp::{ClientHandler, ErrorData, Peer, RoleClient};
use tokio::sync::Notify;

use super::error::GatewayError;
use crate::config::McpServerConfig;
use crate::declare::Listing;
use crate::relay::InFlight;

/// The client side of one connection: turns `notifications/tools/list_changed` into a
/// re-list (done by the server's watcher, never inside the connection's own loop).
pub(super) struct GatewayClient {
    pub(super) relist: Arc<Notify>,
    /// The governed calls in flight on this connection, with their relays: where the
    /// server's progress, log messages and requests during a call go (see `crate::relay`).
    pub(super) inflight: Arc<InFlight>,
    /// Declare sampling and elicitation (the gateway relays them).
    pub(super) relay_requests: bool,
    /// The server's configured id: a relayed elicitation names it (`crate::relay`).
    pub(super) server: Arc<str>,
    /// Where the server's resource and prompt notifications go.
    pub(super) content: tokio::sync::broadcast::Sender<crate::ContentEvent>,
}

#[allow(deprecated, reason = "sampling and logging (SEP-2577), relayed")]
impl ClientHandler for GatewayClient {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.relist.notify_one();
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.content.send(crate::ContentEvent::ResourcesChanged(
            self.server.to_string(),
        ));
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self
            .content
            .send(crate::ContentEvent::PromptsChanged(self.server.to_string()));
    }

    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.content.send(crate::ContentEvent::ResourceUpdated {
            server: self.server.to_string(),
            uri: params.uri,
        });
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.inflight.progress(params);
        self.inflight.arrivals.handled();
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.inflight.log(params);
        self.inflight.arrivals.handled();
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        self.inflight.sampling(params).await
    }

    async fn create_elicitation(
        &self,
        params: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let params = crate::relay::attribute(params, &self.server)?;
        self.inflight.elicitation(params).await
    }

    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        if self.relay_requests {
            capabilities.sampling = Some(SamplingCapability::default());
            let mut elicitation = ElicitationCapability::default();
            elicitation.form = Some(FormElicitationCapability::default());
            capabilities.elicitation = Some(elicitation);
        }
        ClientConfig::new(
            capabilities,
            Implementation::new("toolgate-mcp", env!("CARGO_PKG_VERSION")),
        )
    }
}

/// One connected server.
pub(super) struct ServerConn {
    pub(super) config: McpServerConfig,
    pub(super) key: String,
    /// The gateway tool prefix the listings are built with (R41), settled when the server
    /// was connected: this config's, or the governance configuration's.
    pub(super) prefix: Option<String>,
    pub(super) peer: Peer<RoleClient>,
    /// The governed calls in flight on this connection (shared with its client handler).
    pub(super) inflight: Arc<InFlight>,
    pub(super) running: Mutex<Option<RunningService<RoleClient, GatewayClient>>>,
    pub(super) relist: Arc<Notify>,
    /// Serialises listings of this server.
    pub(super) listing_lock: tokio::sync::Mutex<()>,
    pub(super) listing: ArcSwap<Listing>,
    /// Why calls are refused, when the last listing failed.
    pub(super) stale: Mutex<Option<String>>,
    /// What the server calls itself (recorded, never used as the source).
    pub(super) reported_name: Option<String>,
    /// RFC 8693: calls sent on behalf of their callers (streamable HTTP only).
    pub(super) exchange: crate::routes::Exchange,
}

impl fmt::Debug for ServerConn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerConn")
            .field("id", &self.config.id())
            .field("tools", &self.listing.load().tools.len())
            .finish()
    }
}

pub(super) async fn close(conn: &ServerConn) {
    let running = lock(&conn.running).take();
    if let Some(mut running) = running {
        let _ = running.close().await;
    }
}

pub(super) fn duplicate(id: &str) -> GatewayError {
    GatewayError::Config(format!(
        "an MCP server whose id normalises like `{id}` is already connected (ids compare after normalisation, case-insensitively)"
    ))
}

pub(super) use toolgate_core::names::server_key;

/// Locks a mutex, recovering the data if a panic poisoned it (the data are plain maps
/// replaced whole, never left half-written).
pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Every tool, following `nextCursor`, within the configured bounds and time.
pub(super) async fn list_all(
    peer: &Peer<RoleClient>,
    config: &McpServerConfig,
) -> Result<Vec<Tool>, String> {
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

/// How much of a child's standard error is kept for a failed start's report.
pub(super) const STDERR_TAIL_BYTES: usize = 2048;

/// The end of a child's standard error, kept while it is forwarded: what a server that
/// cannot start said about why.
#[derive(Debug, Clone)]
pub(super) struct StderrTail {
    text: Arc<Mutex<Vec<u8>>>,
    closed: tokio::sync::watch::Receiver<bool>,
}

impl StderrTail {
    /// The last [`STDERR_TAIL_BYTES`] the child wrote, waiting up to `wait` for it to close
    /// its standard error (a server that failed is usually exiting).
    pub(super) async fn read(&self, wait: Duration) -> String {
        let mut closed = self.closed.clone();
        let _ = tokio::time::timeout(wait, closed.wait_for(|c| *c)).await;
        let bytes = lock(&self.text).clone();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        text.trim().to_owned()
    }
}

/// Forwards a child's standard error to `tracing`, in bounded chunks, keeping its tail.
pub(super) fn forward_stderr(
    server: String,
    mut stderr: tokio::process::ChildStderr,
) -> StderrTail {
    let text = Arc::new(Mutex::new(Vec::new()));
    let (tx, closed) = tokio::sync::watch::channel(false);
    let tail = Arc::clone(&text);
    tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
        let mut buf = vec![0u8; 4096];
        loop {
            match stderr.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let chunk = buf.get(..n).unwrap_or_default();
                    {
                        let mut kept = lock(&tail);
                        kept.extend_from_slice(chunk);
                        let over = kept.len().saturating_sub(STDERR_TAIL_BYTES);
                        kept.drain(..over);
                    }
                    let text = String::from_utf8_lossy(chunk);
                    tracing::debug!(
                        target: "toolgate_mcp::stderr",
                        server = server.as_str(),
                        "{}",
                        text.trim_end()
                    );
                }
            }
        }
        let _ = tx.send(true);
    });
    StderrTail { text, closed }
}
