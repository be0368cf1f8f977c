//! `mcp serve --http`: streamable HTTP on loopback as an axum [`Router`](axum::Router),
//! outermost first:
//!
//! 1. the endpoints answered without a token: `/healthz`, `/readyz`, `/metrics` and, with
//!    `mcp.jwt`, the protected-resource metadata (RFC 9728);
//! 2. authentication, a layer that puts the caller ([`Authenticated`]) in the request's
//!    extensions, or answers 401/403 before anything else is read; it also holds each
//!    session to the principal that opened it: a request, stream, answer or `DELETE` naming
//!    another principal's session is answered as for an unknown session;
//! 3. tower-http's body limit ([`written::MAX_MESSAGE`]);
//! 4. the R20 tap: the body is read before rmcp parses it, so each `tools/call`'s numbers
//!    are kept as written;
//! 5. rmcp's streamable HTTP service.

use std::collections::HashMap;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

use super::*;

/// What the layers of one `serve_http` share.
#[derive(Clone)]
struct HttpState {
    shared: Arc<Shared>,
    open_as: Option<String>,
    open_sessions: Arc<revoke::OpenSessions>,
    owners: Arc<SessionOwners>,
}

/// The principal each session was opened by: its static token's hash, its JWT's issuer,
/// subject, client and subagent, or, for an `open_as` server, its one agent.
#[derive(Default)]
struct SessionOwners(Mutex<HashMap<String, String>>);

/// At most this many sessions are remembered before the ended ones are forgotten.
const OWNERS_PRUNE_AT: usize = 10_000;

impl SessionOwners {
    fn owner(&self, id: &str) -> Option<String> {
        lock(&self.0).get(id).cloned()
    }

    fn bind(&self, id: &str, owner: &str) -> usize {
        let mut map = lock(&self.0);
        map.entry(id.to_owned()).or_insert_with(|| owner.to_owned());
        map.len()
    }

    fn forget(&self, id: &str) {
        lock(&self.0).remove(id);
    }

    fn retain(&self, open: &std::collections::HashSet<String>) {
        lock(&self.0).retain(|id, _| open.contains(id));
    }
}

/// The key a session is held to.
fn owner_key(auth: &Authenticated) -> String {
    match &auth.token {
        Some(t) => t.clone(),
        None => format!("agent {}", auth.agent),
    }
}

fn session_of(h: &axum::http::HeaderMap) -> Option<String> {
    h.get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

fn text(status: axum::http::StatusCode, content_type: &'static str, body: String) -> Response {
    (
        status,
        [(axum::http::header::CONTENT_TYPE, content_type)],
        body,
    )
        .into_response()
}

/// Layer 1: what is answered without a token.
async fn public(State(st): State<HttpState>, req: Request, next: Next) -> Response {
    if let Some((status, content_type, body)) =
        ops::answer(&st.shared, req.method(), req.uri().path()).await
    {
        return text(status, content_type, body);
    }
    if req.method() == axum::http::Method::GET
        && let Some(doc) = st.shared.tokens().metadata(req.uri().path())
    {
        return text(
            axum::http::StatusCode::OK,
            "application/json",
            doc.to_string(),
        );
    }
    next.run(req).await
}

/// A subagent id a token names is admitted only when its profile declares it
/// (`agents[].subagents`), judged on the governance snapshot in force; anything else is
/// refused as an invalid token, never run as the profile or as an undeclared subagent.
fn admitted(
    st: &HttpState,
    tokens: &Tokens,
    auth: Authenticated,
) -> Result<Authenticated, super::auth::AuthRefusal> {
    if let Some(id) = auth.jwt.as_ref().and_then(|j| j.subagent.as_deref())
        && let Err(why) = st
            .shared
            .gateway
            .handle()
            .load()
            .admit_subagent(&auth.agent, id)
    {
        tracing::info!(target: "toolgate_mcp::serve", agent = auth.agent.as_str(), "a bearer token was refused: {why}");
        return Err(tokens.refusal(
            hyper::StatusCode::UNAUTHORIZED,
            &toolgate_idp::Rejection::Invalid(format!("{why}: the token's subagent claim")),
        ));
    }
    Ok(auth)
}

/// Layer 2: who the request speaks for, into its extensions; and the session held to it.
async fn authenticate(State(st): State<HttpState>, mut req: Request, next: Next) -> Response {
    // The tokens in force now: a token revoked by a reload is refused.
    let tokens = st.shared.tokens();
    let auth = match &st.open_as {
        Some(agent) => Ok(Authenticated {
            agent: agent.clone(),
            token: None,
            jwt: None,
        }),
        None => tokens.authenticate(req.headers()).await,
    };
    let auth = auth.and_then(|a| admitted(&st, &tokens, a));
    let auth = match auth {
        Ok(a) => a,
        Err((status, challenge, body)) => {
            let mut resp = text(status, "text/plain; charset=utf-8", body);
            if let Ok(c) = axum::http::HeaderValue::from_str(&challenge) {
                resp.headers_mut()
                    .insert(axum::http::header::WWW_AUTHENTICATE, c);
            }
            // The request's body is left unread, so the connection is not reused: said so,
            // a client following the challenge to the metadata opens a new one rather than
            // meet a connection closed under it.
            resp.headers_mut().insert(
                axum::http::header::CONNECTION,
                axum::http::HeaderValue::from_static("close"),
            );
            return resp;
        }
    };
    let owner = owner_key(&auth);
    let asked_in = session_of(req.headers());
    // A session answers only to the principal that opened it; anyone else is told what an
    // unknown session is told (rmcp's own answer), whatever they send.
    if let Some(id) = &asked_in
        && st.owners.owner(id).is_some_and(|o| o != owner)
    {
        tracing::warn!(target: "toolgate_mcp::serve", agent = auth.agent.as_str(), "a request named a session another principal opened; answered as an unknown session");
        return text(
            axum::http::StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            String::from("Not Found: Session not found"),
        );
    }
    // The token this request came with, kept for its session (only with a token: an
    // `open_as` server has none to revoke).
    let bearer = auth.token.as_ref().and_then(|_| {
        req.headers()
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(toolgate_idp::bearer_token)
            .map(|t| t.trim().to_owned())
    });
    let speaks_for = auth.agent.clone();
    let deleting = req.method() == axum::http::Method::DELETE;
    req.extensions_mut().insert(auth);
    let resp = next.run(req).await;
    if resp.status().is_success() {
        let opened = session_of(resp.headers()).filter(|_| asked_in.is_none());
        if let Some(id) = opened {
            // A new session: held to whoever opened it.
            let open = st.owners.bind(&id, &owner);
            if open > OWNERS_PRUNE_AT
                && let Some(sessions) = st.shared.http_sessions()
            {
                let owners = Arc::clone(&st.owners);
                tokio::spawn(async move { owners.retain(&sessions.ids().await) });
            }
        } else if deleting && let Some(id) = &asked_in {
            st.owners.forget(id);
        }
        if let Some(bearer) = &bearer
            && let Some(id) = session_of(resp.headers()).or(asked_in)
        {
            st.open_sessions.seen(&id, bearer, &speaks_for);
        }
    }
    resp
}

/// Layer 4 (R20): the body is read here, before rmcp parses it, so each `tools/call`'s
/// numbers are kept as written.
async fn tap(req: Request, next: Next) -> Response {
    let (mut parts, body) = req.into_parts();
    let body = match axum::body::to_bytes(body, written::MAX_MESSAGE).await {
        Ok(b) => b,
        Err(e) => {
            let too_large = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>())
                || e.to_string().contains("length limit");
            let (status, why) = if too_large {
                (
                    axum::http::StatusCode::PAYLOAD_TOO_LARGE,
                    format!(
                        "the request body is larger than {} bytes\n",
                        written::MAX_MESSAGE
                    ),
                )
            } else {
                (
                    axum::http::StatusCode::BAD_REQUEST,
                    format!("the request body could not be read: {e}\n"),
                )
            };
            return text(status, "text/plain; charset=utf-8", why);
        }
    };
    let written = Arc::new(written::Written::default());
    written.tap(&body);
    parts.extensions.insert(written);
    next.run(Request::from_parts(parts, axum::body::Body::from(body)))
        .await
}

/// The ids of the sessions an rmcp session manager holds open.
pub(super) struct HttpSessions(Arc<LocalSessionManager>);

impl HttpSessions {
    async fn ids(&self) -> std::collections::HashSet<String> {
        self.0
            .sessions
            .read()
            .await
            .keys()
            .map(|k| k.to_string())
            .collect()
    }
}

impl GovernedServer {
    /// Serves streamable HTTP on a loopback address until the process ends. Each request
    /// authenticates with `Authorization: Bearer <token>`, the token's SHA-256 listed in
    /// `mcp.tokens` with the agent it speaks for, or a JWT `mcp.jwt` verifies and maps to an
    /// agent; without one the answer is HTTP 401 (403 for a missing scope) and nothing is
    /// served. With `mcp.jwt`, `GET /.well-known/oauth-protected-resource` (and the path
    /// for the resource URI) is the protected-resource metadata (RFC 9728), no token
    /// needed. With `open_as` every request speaks for that agent with no token (a
    /// single-agent server on loopback: anyone on this host can use it). A session answers
    /// only to the principal that opened it. `ready` gets the bound address.
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
        let manager = Arc::new(LocalSessionManager::default());
        let service = StreamableHttpService::new(
            move || {
                let mut session = server.session(None);
                session.tap = Tap::Http;
                Ok(session)
            },
            Arc::clone(&manager),
            config,
        );
        // The sessions opened with a token that a reload or a change of keys revoked are
        // closed (`revoke`).
        let open_sessions = Arc::new(revoke::OpenSessions::default());
        let _sweeper = revoke::start(
            Arc::downgrade(&self.shared),
            Arc::clone(&open_sessions),
            Arc::clone(&manager),
        );
        *lock(&self.shared.http) = Some(Arc::new(HttpSessions(manager)));
        let state = HttpState {
            shared: Arc::clone(&self.shared),
            open_as: open_as.map(str::to_owned),
            open_sessions,
            owners: Arc::default(),
        };
        let router = axum::Router::new()
            .fallback_service(service)
            .layer(axum::middleware::from_fn(tap))
            .layer(tower_http::limit::RequestBodyLimitLayer::new(
                written::MAX_MESSAGE,
            ))
            .layer(axum::middleware::from_fn_with_state(
                state.clone(),
                authenticate,
            ))
            .layer(axum::middleware::from_fn_with_state(state, public));
        axum::serve(listener, router).await
    }
}

impl Shared {
    /// The open HTTP sessions, when this server serves HTTP.
    fn http_sessions(&self) -> Option<Arc<HttpSessions>> {
        lock(&self.http).clone()
    }
}
