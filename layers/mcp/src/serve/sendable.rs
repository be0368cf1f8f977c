//! `toolgate mcp serve` lists and holds only what it can send. A call to a tool no
//! connected server lists — the configuration's HTTP and toolset tools, an MCP tool its
//! server stopped listing or never listed — is refused `unknown_tool` inside the governed
//! stack, right after audit (so it is audited and counted like every refusal) and before
//! anyone could be asked about it.

use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use toolgate_core::{Check, Refusal, RefusalCode, ToolCall, ToolResponse};
use tower::{Layer, Service};

use crate::McpGateway;

/// The layer; the gateway is set once it is built (the stack is built first). A tool of a
/// server that is reconnecting ([`Down`](super::upstream::Down)) is refused with that reason
/// (`rejected`), as the innermost service would.
#[derive(Clone, Default)]
pub(super) struct SendableLayer {
    pub(super) gateway: Arc<OnceLock<McpGateway>>,
    pub(super) down: super::upstream::Down,
}

impl<S> Layer<S> for SendableLayer {
    type Service = Sendable<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Sendable {
            inner,
            gateway: Arc::clone(&self.gateway),
            down: Arc::clone(&self.down),
        }
    }
}

/// Refuses calls the gateway could not send; see [`SendableLayer`].
#[derive(Clone)]
pub(super) struct Sendable<S> {
    inner: S,
    gateway: Arc<OnceLock<McpGateway>>,
    down: super::upstream::Down,
}

impl<S> Service<ToolCall> for Sendable<S>
where
    S: Service<ToolCall, Response = ToolResponse>,
{
    type Response = ToolResponse;
    type Error = S::Error;
    type Future = toolgate::ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, call: ToolCall) -> Self::Future {
        let server = super::upstream::server_key(&call.tool.display_name());
        let down = super::lock(&self.down).get(&server).cloned();
        let verdict = match (down, self.gateway.get()) {
            (Some(why), _) => Err(Refusal::new(RefusalCode::Rejected, Check::Routing, why)),
            (None, Some(g)) => g.sendable(&call.tool),
            // Fail closed: a stack whose gateway is not set sends nothing.
            (None, None) => Err(Refusal::new(
                RefusalCode::UnknownTool,
                Check::UnknownTool,
                "the gateway is not connected yet",
            )),
        };
        match verdict {
            Ok(()) => toolgate::ResponseFuture::inner(self.inner.call(call)),
            Err(refusal) => toolgate::ResponseFuture::refused(ToolResponse::Refused(refusal)),
        }
    }
}
