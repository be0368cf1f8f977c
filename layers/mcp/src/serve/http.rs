//! `mcp serve --http`: streamable HTTP on loopback, each request authenticated before rmcp
//! reads it, and its body tapped for the numbers as written (R20).

use super::*;

impl GovernedServer {
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
                        let shared = Arc::clone(&shared);
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
                            // Issue 23: health, readiness and metrics, no token needed.
                            if let Some((status, content_type, body)) =
                                ops::answer(&shared, req.method(), req.uri().path()).await
                            {
                                return Ok(reply(status, content_type, None, body));
                            }
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
