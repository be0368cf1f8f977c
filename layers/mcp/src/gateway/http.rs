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
use serde_json::Value;
use toolgate_engine::ConfigErrors;

use super::error::GatewayError;
use crate::oauth::{ClientAuth, OAuthClientCredentials};
use crate::secret::{Secret, SecretSource};

/// The headers rmcp sets itself: a configured one would conflict.
pub(crate) const RESERVED_HEADERS: &[&str] = &[
    "accept",
    "content-type",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
];

/// A header name as configured, checked: a valid HTTP header name rmcp does not set itself.
pub(crate) fn header_name(name: &str) -> Result<HeaderName, String> {
    let parsed = HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| format!("`{name}` is not a valid HTTP header name"))?;
    if RESERVED_HEADERS.contains(&parsed.as_str()) {
        return Err(format!(
            "`{name}` is set by the MCP transport itself and cannot be configured"
        ));
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
                errors.push(path, e);
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
            Err(e) => errors.push(path, e),
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

/// The largest answer of a token endpoint read.
const MAX_TOKEN_ANSWER_BYTES: usize = 64 * 1024;

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

/// `application/x-www-form-urlencoded` (RFC 6749 appendix B).
fn form_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                out.push(char::from(b));
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// At most `n` characters of `s`, for a server's own words in an error.
fn bounded(s: &str, n: usize) -> String {
    let mut out: String = s.chars().take(n).collect();
    if s.chars().count() > n {
        out.push('…');
    }
    out
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
                errors: ConfigErrors::one(format!("servers.{id}.oauth.client_secret"), e),
            })?;
        // Issue 22: `https://` over TLS (toolgate-idp's `tls` feature), the system's roots or
        // the configured `ca_file`; plain `http://` to loopback only. Checked now, named.
        let field = |name: &str, e: String| GatewayError::Secret {
            server: id.to_owned(),
            errors: ConfigErrors::one(format!("servers.{id}.oauth.{name}"), e),
        };
        toolgate_idp::check_fetch_url(&creds.token_url).map_err(|e| field("token_url", e))?;
        let http = toolgate_idp::FetchClient::new(creds.ca_file.as_deref())
            .map_err(|e| field("ca_file", e))?;
        Ok(Self {
            server: id.to_owned(),
            http,
            creds,
            timeout,
            cache: tokio::sync::Mutex::new(None),
        })
    }

    /// Asks the token endpoint for a new token.
    async fn fetch(&self) -> Result<Cached, String> {
        let url = &self.creds.token_url;
        // Issue 22: the client secret is read again for each token asked for, so a rotated
        // secret (its file rewritten) is taken at the next fetch — a token's expiry, or the
        // server refusing it — without a restart or a reconnect. One that can no longer be
        // read fails the fetch (the call is refused); the old one is never used instead.
        let secret = self.creds.client_secret.read_again().map_err(|e| {
            format!(
                "`servers.{}.oauth.client_secret` cannot be read: {e}",
                self.server
            )
        })?;
        let mut body = String::from("grant_type=client_credentials");
        let mut headers = vec![
            (
                reqwest::header::CONTENT_TYPE,
                HeaderValue::from_static("application/x-www-form-urlencoded"),
            ),
            (
                reqwest::header::ACCEPT,
                HeaderValue::from_static("application/json"),
            ),
        ];
        match self.creds.client_auth {
            ClientAuth::Basic => {
                use base64::Engine as _;
                let pair = format!(
                    "{}:{}",
                    form_encode(&self.creds.client_id),
                    form_encode(secret.expose())
                );
                let mut v = HeaderValue::from_str(&format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(pair)
                ))
                .map_err(|_| String::from("the client credentials make no valid header"))?;
                v.set_sensitive(true);
                headers.push((reqwest::header::AUTHORIZATION, v));
            }
            ClientAuth::Post => {
                body.push_str("&client_id=");
                body.push_str(&form_encode(&self.creds.client_id));
                body.push_str("&client_secret=");
                body.push_str(&form_encode(secret.expose()));
            }
        }
        if let Some(scope) = &self.creds.scope {
            body.push_str("&scope=");
            body.push_str(&form_encode(scope));
        }
        if let Some(resource) = &self.creds.resource {
            body.push_str("&resource=");
            body.push_str(&form_encode(resource));
        }
        let asked = Instant::now();
        // A TLS failure (an unknown CA, a name the certificate is not for, an expired one)
        // fails the fetch with why: no token, so the call is refused (fail closed).
        let response = self
            .http
            .post(url, &headers, body, MAX_TOKEN_ANSWER_BYTES, self.timeout)
            .await
            .map_err(|e| format!("cannot reach the token endpoint `{url}`: {e}"))?;
        let status = reqwest::StatusCode::from_u16(response.status).map_err(|_| {
            format!("the token endpoint `{url}` answered a status that is no HTTP status")
        })?;
        let bytes = response.body;
        let json: Option<Value> = serde_json::from_slice(&bytes).ok();
        if !status.is_success() {
            let said = json
                .as_ref()
                .and_then(|j| j.get("error").and_then(Value::as_str))
                .map(|e| {
                    let description = json
                        .as_ref()
                        .and_then(|j| j.get("error_description").and_then(Value::as_str))
                        .map(|d| format!(" ({})", bounded(d, 200)))
                        .unwrap_or_default();
                    format!(": `{}`{description}", bounded(e, 100))
                })
                .unwrap_or_default();
            return Err(format!(
                "the token endpoint `{url}` refused the client credentials of `{}` with HTTP {status}{said}",
                self.creds.client_id
            ));
        }
        let Some(json) = json else {
            return Err(format!(
                "the token endpoint `{url}` answered HTTP {status} with no JSON"
            ));
        };
        let token = match json.get("access_token").and_then(Value::as_str) {
            Some(t) if !t.trim().is_empty() => Secret::new(t),
            _ => {
                return Err(format!(
                    "the token endpoint `{url}` answered without an `access_token`"
                ));
            }
        };
        if reqwest::header::HeaderValue::from_str(&format!("Bearer {}", token.expose())).is_err() {
            return Err(format!(
                "the token endpoint `{url}` answered an access token that is no valid header value"
            ));
        }
        match json.get("token_type") {
            None => {}
            Some(Value::String(t)) if t.eq_ignore_ascii_case("bearer") => {}
            Some(other) => {
                return Err(format!(
                    "the token endpoint `{url}` answered a token of type {}, not a bearer token",
                    bounded(&other.to_string(), 40)
                ));
            }
        }
        let expires_in = match json.get("expires_in") {
            None | Some(Value::Null) => None,
            Some(v) => match v
                .as_u64()
                .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
            {
                Some(secs) => Some(Duration::from_secs(secs)),
                None => {
                    return Err(format!(
                        "the token endpoint `{url}` answered an `expires_in` that is not a whole number of seconds"
                    ));
                }
            },
        };
        // Fetched again a tenth of its life (at most a minute) before it expires.
        let refresh_at = expires_in.map(|life| {
            let margin = (life / 10).min(Duration::from_secs(60));
            asked + life.saturating_sub(margin)
        });
        tracing::debug!(
            target: "toolgate_mcp::oauth",
            server = self.server.as_str(),
            expires_in_secs = expires_in.map(|d| d.as_secs()),
            "fetched an access token for MCP server `{}`",
            self.server
        );
        Ok(Cached { token, refresh_at })
    }

    /// The token to send: the one kept, unless it is (about to be) expired.
    pub(crate) async fn current(&self) -> Result<Secret, String> {
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
    async fn replace(&self, rejected: &Secret) -> Result<Secret, String> {
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

/// rmcp's reqwest client with the bearer token of OAuth 2.0 client credentials on every
/// request: a request the server answers 401 is sent once more with a new token.
#[derive(Clone, Debug)]
pub(crate) struct OAuthHttpClient {
    pub(crate) http: reqwest::Client,
    pub(crate) tokens: Arc<Tokens>,
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

fn token_error(server: &str, message: String) -> HttpError {
    StreamableHttpError::UnexpectedServerResponse(Cow::Owned(format!(
        "no access token for MCP server `{server}`: {message}"
    )))
}

impl OAuthHttpClient {
    /// Runs `call` with the current token; on a 401, once more with a new one.
    async fn authorized<T, F, Fut>(&self, call: F) -> Result<T, HttpError>
    where
        F: Fn(Option<String>) -> Fut,
        Fut: Future<Output = Result<T, HttpError>>,
    {
        let server = &self.tokens.server;
        let token = self
            .tokens
            .current()
            .await
            .map_err(|m| token_error(server, m))?;
        match call(Some(token.expose().to_owned())).await {
            Err(e) if unauthorized(&e) => {
                let fresh = self
                    .tokens
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

impl StreamableHttpClient for OAuthHttpClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        self.authorized(|token| {
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
        _auth: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        self.authorized(|token| {
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
        _auth: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        self.authorized(|token| {
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
        _auth: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), HttpError> {
        self.authorized(|token| {
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
        _auth: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<SseStream, HttpError> {
        self.authorized(|token| {
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
        _auth: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<SseStream, HttpError> {
        self.authorized(|token| {
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
