//! The governed MCP client service: `tools/call` for calls that got this far.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use rmcp::ServiceError;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotificationParam,
    ClientRequest, RequestId, ServerResult,
};
use rmcp::service::PeerRequestOptions;
use rmcp::{Peer, RoleClient};
use serde_json::Value;
use toolgate::{GovernanceHandle, Permit, Pinned};
use toolgate_core::names::lower_key;
use toolgate_core::{
    Check, Refusal, RefusalCode, ToolCall, ToolKind, ToolOutput, ToolRef, ToolResponse,
};
use tower_service::Service;

use crate::declare::Listed;
use crate::relay::{CallRelay, Registration};
use crate::routes::{Routes, ServerView, State};

/// A call the server could not answer with a tool result: the transport failed, or the
/// server answered `tools/call` with a protocol error. (A tool that ran and failed is
/// [`ToolResponse::Failed`], not an error.)
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum McpCallError {
    /// The server answered with a JSON-RPC error.
    Protocol {
        /// The server id.
        server: String,
        /// The tool's own name.
        tool: String,
        /// The JSON-RPC error code.
        code: i32,
        /// The server's message.
        message: String,
    },
    /// The connection failed, closed, or returned something that is not a tool result.
    Transport {
        /// The server id.
        server: String,
        /// The tool's own name.
        tool: String,
        /// What went wrong.
        message: String,
    },
    /// The call was not sent: the server takes calls only on behalf of their caller (RFC
    /// 8693 token exchange), and no token could be had for this one — the caller has no
    /// verified token, or the token endpoint refused or could not be reached.
    Credentials {
        /// The server id.
        server: String,
        /// The tool's own name.
        tool: String,
        /// Why there is no token.
        message: String,
    },
}

impl fmt::Display for McpCallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            McpCallError::Protocol {
                server,
                tool,
                code,
                message,
            } => write!(
                f,
                "MCP server `{server}` answered the call to `{tool}` with error {code}: {message}"
            ),
            McpCallError::Transport {
                server,
                tool,
                message,
            } => write!(
                f,
                "the call to `{tool}` on MCP server `{server}` failed: {message}"
            ),
            McpCallError::Credentials {
                server,
                tool,
                message,
            } => write!(
                f,
                "the call to `{tool}` on MCP server `{server}` was not sent: it is made on behalf of its caller, and {message}"
            ),
        }
    }
}

impl std::error::Error for McpCallError {}

fn error(server: &str, tool: &str, e: ServiceError) -> McpCallError {
    match e {
        ServiceError::McpError(data) => McpCallError::Protocol {
            server: server.to_owned(),
            tool: tool.to_owned(),
            code: data.code.0,
            message: data.message.to_string(),
        },
        other => McpCallError::Transport {
            server: server.to_owned(),
            tool: tool.to_owned(),
            message: other.to_string(),
        },
    }
}

/// Maps a `tools/call` result: `content` (as JSON) → [`ToolOutput::content`],
/// `structuredContent` → [`ToolOutput::structured`], `isError: true` →
/// [`ToolResponse::Failed`].
pub(crate) fn response(result: CallToolResult) -> ToolResponse {
    let content = match serde_json::to_value(&result.content) {
        Ok(v) => v,
        Err(e) => {
            return ToolResponse::Failed(ToolOutput::new(Value::String(format!(
                "the tool's content could not be read: {e}"
            ))));
        }
    };
    let out = ToolOutput {
        content,
        structured: result.structured_content,
    };
    if result.is_error == Some(true) {
        ToolResponse::Failed(out)
    } else {
        ToolResponse::Completed(out)
    }
}

fn unknown(reason: String) -> Refusal {
    Refusal::new(RefusalCode::UnknownTool, Check::UnknownTool, reason)
}

use toolgate_core::names::server_key;

/// Resolves a call's tool to a server and one of its listed tools. A name the server
/// never listed resolves to nothing.
pub(crate) fn resolve<'s>(
    state: &'s State,
    tool: &ToolRef,
) -> Result<(&'s ServerView, &'s Arc<Listed>), Refusal> {
    let by_identity = |id: &toolgate_core::ToolIdentity| {
        if id.kind() != ToolKind::Mcp {
            return Err(unknown(format!("{id} is not a tool of an MCP server")));
        }
        let server = state
            .servers
            .get(&server_key(id.source()))
            .ok_or_else(|| unknown(format!("no MCP server `{}` is connected", id.source())))?;
        // By the own name (R41: a call naming the tool by identity gives its own name).
        let listed = server.listing.get_own(id.name()).ok_or_else(|| {
            unknown(format!(
                "MCP server `{}` does not list a tool named `{}`",
                server.id,
                id.name()
            ))
        })?;
        Ok((server, listed))
    };
    let by_name = |name: &str| {
        let routes = state
            .by_qualified
            .get(lower_key(name).as_ref())
            .ok_or_else(|| {
                unknown(format!(
                    "no connected MCP server lists a tool named `{name}`"
                ))
            })?;
        let [(server, raw)] = routes.as_slice() else {
            return Err(unknown(format!(
                "`{name}` names {} MCP tools; call it by identity",
                routes.len()
            )));
        };
        let server = state
            .servers
            .get(server)
            .ok_or_else(|| unknown(format!("the server of `{name}` is not connected")))?;
        let listed = server
            .listing
            .get(raw)
            .ok_or_else(|| unknown(format!("no connected MCP server lists `{name}`")))?;
        Ok((server, listed))
    };
    match tool {
        ToolRef::Identity(id) => by_identity(id),
        ToolRef::Name(name) => by_name(name),
        ToolRef::Both { name, identity } => {
            let a = by_name(name)?;
            let b = by_identity(identity)?;
            if Arc::ptr_eq(a.1, b.1) {
                Ok(a)
            } else {
                Err(unknown(format!(
                    "the call names `{name}` and {identity}, which are different tools"
                )))
            }
        }
    }
}

/// Why a resolved call must not be sent, if it must not.
fn check(
    server: &ServerView,
    listed: &Listed,
    call: &ToolCall,
    handle: &GovernanceHandle,
    require_permit: bool,
) -> Result<(), Refusal> {
    let rejected = |reason: String| Refusal::new(RefusalCode::Rejected, Check::Routing, reason);
    if let Some(why) = &server.stale {
        return Err(rejected(why.clone()));
    }
    if let Some(why) = &listed.unregistered {
        return Err(rejected(format!(
            "`{}` is not registered in the governance snapshot: {why}",
            listed.qualified
        )));
    }
    // INVARIANT (R38): a call is sent only with the permit of the approval gate of this
    // gateway's stack (its handle), minted for this call, its agent, this input and the
    // definition the gate decided it for; a call that did not pass that gate (a stack
    // assembled without one, or another stack's gate) is never sent. The snapshot is the
    // one this handle pinned for this very call ([`GovernanceHandle::pinned`]).
    let permit = match require_permit {
        true => Some(Permit::verify_call(call, handle)?),
        false => None,
    };
    let Some(governance) = handle.pinned(call).map(Pinned::governance) else {
        if !require_permit {
            return Ok(());
        }
        return Err(Refusal::new(
            RefusalCode::Rejected,
            Check::Permit,
            format!(
                "the call to `{}` carries no decision of this stack's governance snapshot about it (its pin was removed or changed after the gate), so it is not sent (R38: the tool side refuses what the gate did not pass)",
                listed.qualified
            ),
        ));
    };
    // INVARIANT: a call is sent only under the definition it was decided by: the pinned
    // snapshot's record of this tool must be the definition the server lists now; a
    // re-listed tool (a rug pull) is decided again first (R35).
    let id = &listed.decl.identity;
    let Some(entry) = governance.catalog().get_identity(id) else {
        return Err(unknown(format!(
            "the governance snapshot this call was decided by has no record of `{}`",
            listed.qualified
        )));
    };
    match entry.records.iter().find(|r| r.identity() == id) {
        None => {
            return Err(unknown(format!(
                "the governance snapshot this call was decided by has no record of `{}`",
                listed.qualified
            )));
        }
        // R52: the record is the listing with the operator's settings in force, so what is
        // compared is what the server states, and the name it is sent under.
        Some(r)
            if !r.decl.same_definition(&listed.decl)
                || r.decl.listed_name != listed.decl.listed_name =>
        {
            return Err(Refusal::new(
                RefusalCode::Rejected,
                Check::DefinitionChanged,
                format!(
                    "the definition of `{}` changed after the call was decided (its server listed it again); it will be decided again",
                    listed.qualified
                ),
            ));
        }
        Some(_) => {}
    }
    if let Some(permit) = permit {
        permit.verify_definition(call, entry)?;
    }
    Ok(())
}

/// Sends `tools/call` as [`Peer::call_tool`] does (a `notifications/cancelled` when the
/// call is abandoned), noting the progress token of the request in the call's relay
/// registration, so the server's progress notifications for it find their way back.
async fn send_call(
    peer: &Peer<RoleClient>,
    request: CallToolRequest,
    registration: Option<Registration>,
) -> Result<CallToolResult, ServiceError> {
    let sent = send_cancel_on_drop(peer, ClientRequest::CallToolRequest(request), |handle| {
        if let Some(r) = &registration {
            r.set_token(handle.progress_token.clone());
        }
    })
    .await;
    if let Some(r) = &registration {
        r.settled().await;
    }
    drop(registration);
    match sent? {
        ServerResult::CallToolResult(r) => Ok(r),
        _ => Err(ServiceError::UnexpectedResponse),
    }
}

/// Sends `request` and awaits its answer; a request abandoned before it is answered (its
/// future dropped) is cancelled at the server (`notifications/cancelled`). `sent` sees the
/// request's handle once it is on its way.
pub(crate) async fn send_cancel_on_drop(
    peer: &Peer<RoleClient>,
    request: ClientRequest,
    sent: impl FnOnce(&rmcp::service::RequestHandle<RoleClient>),
) -> Result<ServerResult, ServiceError> {
    /// Tells the server the request was abandoned, unless it was answered.
    struct CancelOnDrop(Option<(Peer<RoleClient>, RequestId)>);
    impl Drop for CancelOnDrop {
        fn drop(&mut self) {
            if let Some((peer, id)) = self.0.take()
                && let Ok(rt) = tokio::runtime::Handle::try_current()
            {
                rt.spawn(async move {
                    let _ = peer
                        .notify_cancelled(CancelledNotificationParam::new(
                            Some(id),
                            Some(String::from("the governed call was abandoned")),
                        ))
                        .await;
                });
            }
        }
    }
    let handle = peer
        .send_request_with_option(request, PeerRequestOptions::no_options())
        .await?;
    sent(&handle);
    let mut guard = CancelOnDrop(Some((peer.clone(), handle.id.clone())));
    let result = handle.await_response().await;
    guard.0 = None;
    result
}

/// Why a call made on behalf of its caller (RFC 8693) has no token: the token exchange's
/// error; without `http` no server has a token exchange, so there is never one.
#[cfg(feature = "http")]
pub(crate) type NoToken = crate::token_endpoint::TokenError;
/// Why a call made on behalf of its caller (RFC 8693) has no token: the token exchange's
/// error; without `http` no server has a token exchange, so there is never one.
#[cfg(not(feature = "http"))]
pub(crate) type NoToken = std::convert::Infallible;

/// What a call needs to be sent on behalf of its caller (RFC 8693), taken from the call
/// before it is sent: the server's token exchange, the caller's token, and where the call's
/// records are gathered.
struct OnBehalfOf {
    #[cfg(feature = "http")]
    exchange: Option<(
        Arc<crate::exchange::Exchanger>,
        Option<crate::SubjectToken>,
        Option<toolgate_core::DecisionSink>,
    )>,
}

impl OnBehalfOf {
    #[cfg_attr(
        not(feature = "http"),
        allow(
            unused_variables,
            reason = "without `http` no server has a token exchange"
        )
    )]
    fn of(server: &ServerView, extensions: &toolgate_core::Extensions) -> Self {
        Self {
            #[cfg(feature = "http")]
            exchange: server.exchange.clone().map(|x| {
                (
                    x,
                    extensions.get::<crate::SubjectToken>().cloned(),
                    extensions.get::<toolgate_core::DecisionSink>().cloned(),
                )
            }),
        }
    }

    /// Puts the caller's exchanged token in `request`'s extensions (the HTTP client sends
    /// the request with it) and records whom it speaks for; nothing for a server without an
    /// exchange. Why there is no token, else.
    #[cfg_attr(
        not(feature = "http"),
        allow(
            unused_variables,
            clippy::unused_async,
            reason = "without `http` no server has a token exchange"
        )
    )]
    async fn authorize(self, request: &mut CallToolRequest) -> Result<(), NoToken> {
        #[cfg(feature = "http")]
        if let Some((exchanger, subject, sink)) = self.exchange {
            let delegation =
                crate::exchange::authorize(exchanger, subject.as_ref(), &mut request.extensions)
                    .await?;
            if let Some(sink) = sink {
                sink.record_delegation(delegation);
            }
        }
        Ok(())
    }
}

/// The `tower::Service` that sends a call to its MCP server as `tools/call`.
///
/// It routes a call by the tool's qualified name or identity (its own name, R41) to the
/// configured server and the name the server listed the tool under, and refuses — before any message is sent — a tool the server
/// does not list (`unknown_tool`), a server whose last listing failed, a tool the
/// governance snapshot would not take, a call without a valid [`Permit`] from the approval
/// gate (`rejected`, R38: a stack assembled without the gate sends nothing), and a call
/// decided by a snapshot holding another definition of the tool than the server lists now
/// (`rejected`, R35). A tool result with
/// `isError: true` is [`ToolResponse::Failed`]; only transport and protocol failures are
/// errors.
///
/// Always ready: one MCP connection carries any number of calls. Put it inside the
/// toolgate layers (and [`SchemaValidationLayer`](crate::SchemaValidationLayer)); see the
/// crate docs for the order.
#[derive(Clone)]
pub struct McpToolService {
    inner: Arc<dyn Routes>,
    require_permit: bool,
}

impl fmt::Debug for McpToolService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpToolService")
            .field("gateway", &self.inner)
            .field("require_permit", &self.require_permit)
            .finish()
    }
}

impl McpToolService {
    pub(crate) fn new(inner: Arc<dyn Routes>) -> Self {
        Self {
            inner,
            require_permit: true,
        }
    }

    /// Sends calls that carry no [`Permit`] from an approval gate (every other check
    /// stays). Anything that reaches this service is then sent ungoverned: use only for
    /// operator tooling, tests and measurements, never behind an agent.
    pub fn with_insecure_no_permit(mut self) -> Self {
        self.require_permit = false;
        self
    }
}

type BoxCall = Pin<Box<dyn Future<Output = Result<ToolResponse, McpCallError>> + Send>>;

pin_project! {
    /// Response future of [`McpToolService`]: a refusal (no allocation) or the call.
    pub struct McpFuture {
        #[pin]
        kind: Kind,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind {
        Refused { response: toolgate::future::OnceResponse },
        Call { future: BoxCall },
    }
}

impl fmt::Debug for McpFuture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("McpFuture")
    }
}

impl McpFuture {
    fn refused(refusal: Refusal) -> Self {
        Self {
            kind: Kind::Refused {
                response: toolgate::future::OnceResponse::new(ToolResponse::Refused(refusal)),
            },
        }
    }
}

impl Future for McpFuture {
    type Output = Result<ToolResponse, McpCallError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Refused { response } => Poll::Ready(Ok(response.take())),
            KindProj::Call { future } => future.as_mut().poll(cx),
        }
    }
}

impl Service<ToolCall> for McpToolService {
    type Response = ToolResponse;
    type Error = McpCallError;
    type Future = McpFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, call: ToolCall) -> Self::Future {
        let state = self.inner.routes();
        let (server, listed) = match resolve(&state, &call.tool) {
            Ok(found) => found,
            Err(r) => return McpFuture::refused(r),
        };
        if let Err(r) = check(
            server,
            listed,
            &call,
            self.inner.handle(),
            self.require_permit,
        ) {
            return McpFuture::refused(r);
        }
        // R20, R26: the server is sent the value; an integer it holds only rounded would
        // reach the server as another number than the one decided. (The schema layer
        // refuses it before anyone is asked; this holds for stacks without that layer.)
        if let Some(written) =
            toolgate_core::number::NumberLiterals::of(&call).first_inexact_integer(&call.input)
        {
            return McpFuture::refused(crate::schema::unsendable(written));
        }
        let Value::Object(arguments) = call.input else {
            return McpFuture::refused(Refusal::new(
                RefusalCode::InvalidInput,
                Check::InputBounds,
                "the input must be a JSON object",
            ));
        };
        let peer = server.peer.clone();
        let server_id = server.id.clone();
        // Registered only now, after every check and the permit: nothing is relayed for a
        // call that is not sent (see `crate::relay`).
        let registered = call
            .extensions
            .get::<CallRelay>()
            .cloned()
            .map(|r| server.inflight.register(r));
        // Sent under the name the server listed (R41: behind a prefixing gateway, the
        // listed name, not the own name the call was governed by).
        let sent = listed.raw.clone();
        let own = listed.decl.identity.name().to_owned();
        let behalf = OnBehalfOf::of(server, &call.extensions);
        McpFuture {
            kind: Kind::Call {
                future: Box::pin(async move {
                    let params = CallToolRequestParams::new(sent).with_arguments(arguments);
                    let mut request = CallToolRequest::new(params);
                    behalf.authorize(&mut request).await.map_err(|why| {
                        McpCallError::Credentials {
                            server: server_id.clone(),
                            tool: own.clone(),
                            message: why.to_string(),
                        }
                    })?;
                    let result = send_call(&peer, request, registered).await;
                    match result {
                        Ok(result) => Ok(response(result)),
                        Err(e) => Err(error(&server_id, &own, e)),
                    }
                }),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ContentBlock;
    use serde_json::json;

    #[test]
    fn is_error_is_a_failed_tool_result_not_an_error() {
        let ok = response(CallToolResult::success(vec![ContentBlock::text("hi")]));
        let ToolResponse::Completed(out) = ok else {
            panic!("{ok:?}")
        };
        assert_eq!(out.content, json!([{"type": "text", "text": "hi"}]));
        assert_eq!(out.structured, None);

        let failed = response(CallToolResult::error(vec![ContentBlock::text("no")]));
        assert!(matches!(failed, ToolResponse::Failed(_)));

        let structured = response(CallToolResult::structured(json!({"n": 1})));
        let ToolResponse::Completed(out) = structured else {
            panic!()
        };
        assert_eq!(out.structured, Some(json!({"n": 1})));
    }
}
