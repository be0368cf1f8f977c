//! The upstream side of the server: the innermost service (a reconnecting server's tools
//! refused, every call within the call timeout), each server's supervisor, and the watcher
//! that tells sessions their list changed.

use super::*;

/// Servers whose connection closed, by server key, with why their tools are refused.
pub(super) type Down = Arc<Mutex<HashMap<String, String>>>;

/// The innermost service: refuses the tools of a server that is reconnecting, and sends
/// the rest to the upstream within the call timeout.
#[derive(Clone)]
pub(super) struct Timed {
    pub(super) inner: McpToolService,
    pub(super) timeout: Duration,
    pub(super) down: Down,
    /// Told how long each call sent upstream took (for the metrics).
    pub(super) upstream: Option<UpstreamObserver>,
}

pub(super) fn server_key(qualified: &str) -> String {
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
        let observer = self.upstream.clone();
        Box::pin(async move {
            let started = tokio::time::Instant::now();
            let answered = tokio::time::timeout(timeout, fut).await;
            if let Some(observe) = observer {
                let outcome = match &answered {
                    Ok(Ok(ToolResponse::Completed(_))) => "completed",
                    Ok(Ok(_)) => "failed",
                    Ok(Err(_)) => "error",
                    Err(_) => "timeout",
                };
                observe(&server_key(&tool), started.elapsed(), outcome);
            }
            match answered {
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

/// The longest wait between two reconnection attempts.
pub const MAX_RECONNECT_BACKOFF: Duration = Duration::from_secs(30);

/// Watches one upstream server: when its connection closes (the process exited, the
/// transport failed), its tools are refused with the reason while it is connected again,
/// with exponential backoff (0.5 s doubling to [`MAX_RECONNECT_BACKOFF`]). Ends with the server.
pub(super) async fn supervise(weak: Weak<Shared>, config: McpServerConfig, down: Down) {
    let id = config.id().to_owned();
    let key = toolgate_core::names::normalize_segment(&id)
        .map(|s| s.to_ascii_lowercase())
        .unwrap_or_else(|_| id.to_ascii_lowercase());
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let Some(shared) = weak.upgrade() else { return };
        // Open: nothing to do. Closed, or not connected at all (an added server whose first
        // connection failed on a reload): connect it.
        if shared.gateway.is_open(&id) == Some(true) {
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
pub(super) fn spawn_watcher(weak: Weak<Shared>, handle: GovernanceHandle) {
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
