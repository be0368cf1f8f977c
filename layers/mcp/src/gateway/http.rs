//! Streamable HTTP upstreams: their secret headers, and the access tokens of OAuth 2.0
//! client credentials.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_core::stream::BoxStream;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use toolgate_engine::ConfigErrors;

use super::error::GatewayError;
use crate::exchange::OnBehalf;
use crate::oauth::OAuthClientCredentials;
use crate::secret::{Secret, SecretSource};
use crate::token_endpoint::{TokenError, ask_token_endpoint, push_param};

/// The headers rmcp sets itself: a configured one would conflict.
pub(crate) const RESERVED_HEADERS: &[&str] = &[
    "accept",
    "content-type",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
];

/// Why a configured header name cannot be sent.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HeaderNameError {
    /// Not a valid HTTP header name.
    #[error("`{0}` is not a valid HTTP header name")]
    Invalid(String),
    /// One of [`RESERVED_HEADERS`].
    #[error("`{0}` is set by the MCP transport itself and cannot be configured")]
    Reserved(String),
}

/// A header name as configured, checked: a valid HTTP header name rmcp does not set itself.
pub(crate) fn header_name(name: &str) -> Result<HeaderName, HeaderNameError> {
    let parsed = HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| HeaderNameError::Invalid(name.to_owned()))?;
    if RESERVED_HEADERS.contains(&parsed.as_str()) {
        return Err(HeaderNameError::Reserved(name.to_owned()));
    }
    Ok(parsed)
}

/// Reads every secret header of server `id`: each one that cannot be read, or is no
/// valid header value, is an error naming `servers.<id>.headers.<Name>`. The values are
/// marked sensitive (never shown by the HTTP stack).
pub(crate) fn secret_headers(
    id: &str,
    headers: &[(String, SecretSource)],
) -> Result<HashMap<HeaderName, HeaderValue>, GatewayError> {
    let mut errors = ConfigErrors::default();
    let mut out = HashMap::new();
    for (name, source) in headers {
        let path = format!("servers.{id}.headers.{name}");
        let parsed = match header_name(name) {
            Ok(n) => n,
            Err(e) => {
                errors.push(path, e.to_string());
                continue;
            }
        };
        if out.contains_key(&parsed) {
            errors.push(path, format!("the header `{name}` is configured twice"));
            continue;
        }
        match source.read() {
            Ok(secret) => match HeaderValue::from_str(secret.expose()) {
                Ok(mut v) => {
                    v.set_sensitive(true);
                    out.insert(parsed, v);
                }
                Err(_) => errors.push(
                    path,
                    "the secret is not a valid HTTP header value (it has a line break or another control character)",
                ),
            },
            Err(e) => errors.push(path, e.to_string()),
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(GatewayError::Secret {
            server: id.to_owned(),
            errors,
        })
    }
}

/// An access token and when to fetch the next one.
struct Cached {
    token: Secret,
    refresh_at: Option<Instant>,
}

/// The access tokens of one server's OAuth 2.0 client credentials: fetched from the token
/// endpoint, kept until shortly before they expire, fetched again on expiry or when the
/// server refuses the one sent.
pub(crate) struct Tokens {
    server: String,
    http: toolgate_idp::FetchClient,
    creds: OAuthClientCredentials,
    timeout: Duration,
    cache: tokio::sync::Mutex<Option<Cached>>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens")
            .field("server", &self.server)
            .field("token_url", &self.creds.token_url)
            .finish_non_exhaustive()
    }
}

impl Tokens {
    /// The token source of server `id`; its client secret is read now (a secret that cannot
    /// be read is a start-up error naming the field), and again for each token asked for.
    pub(crate) fn new(
        id: &str,
        creds: OAuthClientCredentials,
        timeout: Duration,
    ) -> Result<Self, GatewayError> {
        creds
            .client_secret
            .read()
            .map_err(|e| GatewayError::Secret {
                server: id.to_owned(),
                errors: ConfigErrors::one(
                    format!("servers.{id}.oauth.client_secret"),
                    e.to_string(),
                ),
            })?;
        // `https://` over TLS (toolgate-idp's `tls` feature), the system's roots or the
        // configured `ca_file`; plain `http://` to loopback only. Checked now, named.
        let field = |name: &str, e: String| GatewayError::Secret {
            server: id.to_owned(),
            errors: ConfigErrors::one(format!("servers.{id}.oauth.{name}"), e),
        };
        toolgate_idp::check_fetch_url(&creds.token_url)
            .map_err(|e| field("token_url", e.to_string()))?;
        let http = toolgate_idp::FetchClient::new(creds.ca_file.as_deref())
            .map_err(|e| field("ca_file", e.to_string()))?;
        Ok(Self {
            server: id.to_owned(),
            http,
            creds,
            timeout,
            cache: tokio::sync::Mutex::new(None),
        })
    }

    /// Asks the token endpoint for a new token.
    async fn fetch(&self) -> Result<Cached, TokenError> {
        let mut body = String::from("grant_type=client_credentials");
        if let Some(scope) = &self.creds.scope {
            push_param(&mut body, "scope", scope);
        }
        if let Some(resource) = &self.creds.resource {
            push_param(&mut body, "resource", resource);
        }
        let asked = Instant::now();
        let answer = ask_token_endpoint(
            &self.http,
            &self.creds,
            &self.server,
            "oauth",
            body,
            self.timeout,
        )
        .await?;
        tracing::debug!(
            target: "toolgate_mcp::oauth",
            server = self.server.as_str(),
            expires_in_secs = answer.expires_in.map(|d| d.as_secs()),
            "fetched an access token for MCP server `{}`",
            self.server
        );
        Ok(Cached {
            refresh_at: answer.refresh_at(asked),
            token: answer.token,
        })
    }

    /// The token to send: the one kept, unless it is (about to be) expired.
    pub(crate) async fn current(&self) -> Result<Secret, TokenError> {
        let mut cache = self.cache.lock().await;
        if let Some(c) = &*cache
            && c.refresh_at.is_none_or(|at| Instant::now() < at)
        {
            return Ok(c.token.clone());
        }
        let fresh = self.fetch().await?;
        let token = fresh.token.clone();
        *cache = Some(fresh);
        Ok(token)
    }

    /// A new token after the server refused `rejected` (one already replaced by another
    /// request is not fetched again).
    async fn replace(&self, rejected: &Secret) -> Result<Secret, TokenError> {
        let mut cache = self.cache.lock().await;
        if let Some(c) = &*cache
            && c.token != *rejected
        {
            return Ok(c.token.clone());
        }
        let fresh = self.fetch().await?;
        let token = fresh.token.clone();
        *cache = Some(fresh);
        Ok(token)
    }
}

/// rmcp's reqwest client, with the bearer token each request is owed: a request made on
/// behalf of a caller (RFC 8693, its exchanged token in the request's extensions) carries
/// that token and no other; any other request carries the token of the server's OAuth 2.0
/// client credentials, when it has them. A request the server answers 401 is sent once
/// more with a new token.
#[derive(Clone, Debug)]
pub(crate) struct UpstreamHttpClient {
    pub(crate) http: reqwest::Client,
    pub(crate) tokens: Option<Arc<Tokens>>,
}

/// The exchanged token `message` is to be sent with, when it is a request made on behalf
/// of a caller.
fn on_behalf(message: &ClientJsonRpcMessage) -> Option<OnBehalf> {
    use rmcp::model::GetExtensions as _;
    match message {
        rmcp::model::JsonRpcMessage::Request(r) => {
            r.request.extensions().get::<OnBehalf>().cloned()
        }
        _ => None,
    }
}

type HttpError = StreamableHttpError<reqwest::Error>;

/// Whether the server refused the token (401, with or without a challenge).
fn unauthorized(e: &HttpError) -> bool {
    match e {
        StreamableHttpError::AuthRequired(_) => true,
        StreamableHttpError::Client(e) => e.status() == Some(reqwest::StatusCode::UNAUTHORIZED),
        StreamableHttpError::UnexpectedServerResponse(m) => m.starts_with("HTTP 401"),
        _ => false,
    }
}

fn token_error(server: &str, message: TokenError) -> HttpError {
    StreamableHttpError::UnexpectedServerResponse(Cow::Owned(format!(
        "no access token for MCP server `{server}`: {message}"
    )))
}

impl UpstreamHttpClient {
    /// Runs `call` with the token the request is owed (`on_behalf`'s, else the client
    /// credentials', else `auth` as rmcp gave it); on a 401, once more with a new one.
    async fn authorized<T, F, Fut>(
        &self,
        on_behalf: Option<OnBehalf>,
        auth: Option<String>,
        call: F,
    ) -> Result<T, HttpError>
    where
        F: Fn(Option<String>) -> Fut,
        Fut: Future<Output = Result<T, HttpError>>,
    {
        if let Some(b) = on_behalf {
            return match call(Some(b.token.expose().to_owned())).await {
                Err(e) if unauthorized(&e) => {
                    let fresh = b
                        .exchanger
                        .replace(&b.subject, &b.token)
                        .await
                        .map_err(|m| token_error(b.exchanger.server(), m))?;
                    if fresh.token == b.token {
                        return Err(e);
                    }
                    call(Some(fresh.token.expose().to_owned())).await
                }
                other => other,
            };
        }
        let Some(tokens) = &self.tokens else {
            return call(auth).await;
        };
        let server = &tokens.server;
        let token = tokens.current().await.map_err(|m| token_error(server, m))?;
        match call(Some(token.expose().to_owned())).await {
            Err(e) if unauthorized(&e) => {
                let fresh = tokens
                    .replace(&token)
                    .await
                    .map_err(|m| token_error(server, m))?;
                if fresh == token {
                    return Err(e);
                }
                tracing::debug!(
                    target: "toolgate_mcp::oauth",
                    server = server.as_str(),
                    "MCP server `{server}` refused its access token: sending again with a new one"
                );
                call(Some(fresh.expose().to_owned())).await
            }
            other => other,
        }
    }
}

type SseStream = BoxStream<'static, Result<sse_stream::Sse, SseError>>;

impl StreamableHttpClient for UpstreamHttpClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        self.authorized(on_behalf(&message), auth, |token| {
            self.http.post_message(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                token,
                custom_headers.clone(),
            )
        })
        .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        self.authorized(on_behalf(&message), auth, |token| {
            self.http.post_message_with_max_sse_event_size(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                token,
                custom_headers.clone(),
                max_sse_event_size,
            )
        })
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        self.authorized(on_behalf(&message), auth, |token| {
            self.http.post_message_with_response_limits(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                token,
                custom_headers.clone(),
                limits,
            )
        })
        .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), HttpError> {
        self.authorized(None, auth, |token| {
            self.http.delete_session(
                uri.clone(),
                session_id.clone(),
                token,
                custom_headers.clone(),
            )
        })
        .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<SseStream, HttpError> {
        self.authorized(None, auth, |token| {
            self.http.get_stream(
                uri.clone(),
                session_id.clone(),
                last_event_id.clone(),
                token,
                custom_headers.clone(),
            )
        })
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<SseStream, HttpError> {
        self.authorized(None, auth, |token| {
            self.http.get_stream_with_max_sse_event_size(
                uri.clone(),
                session_id.clone(),
                last_event_id.clone(),
                token,
                custom_headers.clone(),
                max_sse_event_size,
            )
        })
        .await
    }
}
