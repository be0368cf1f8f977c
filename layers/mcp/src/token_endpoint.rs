//! Token endpoints (RFC 6749 §3.2): one request as a confidential client and its answer read
//! strictly, shared by OAuth 2.0 client credentials (`crate::gateway`) and token exchange
//! (`crate::exchange`).

use std::time::{Duration, Instant};

use reqwest::header::{HeaderName, HeaderValue};
use serde_json::Value;

use crate::oauth::{ClientAuth, OAuthClientCredentials};
use crate::secret::{Secret, SecretError};

/// The largest answer of a token endpoint read.
const MAX_TOKEN_ANSWER_BYTES: usize = 64 * 1024;

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

/// `name=value`, form-encoded, appended to a request body (after a `&` when it has one).
pub(crate) fn push_param(body: &mut String, name: &str, value: &str) {
    if !body.is_empty() {
        body.push('&');
    }
    body.push_str(name);
    body.push('=');
    body.push_str(&form_encode(value));
}

/// Why there is no token for a server: its client secret, its token endpoint, the answer,
/// or (for a call on behalf of its caller) the caller. A call without one is not sent.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TokenError {
    /// The client secret cannot be read (again).
    #[error("`servers.{server}.{field}.client_secret` cannot be read: {error}")]
    Secret {
        server: String,
        /// The configuration's field (`oauth`, `token_exchange`).
        field: &'static str,
        error: SecretError,
    },
    /// The client credentials make no `Authorization` header.
    #[error("the client credentials make no valid header")]
    BasicHeader,
    /// The token endpoint cannot be reached.
    #[error("cannot reach the token endpoint `{url}`: {error}")]
    Unreachable {
        url: String,
        error: toolgate_idp::FetchError,
    },
    /// The answer's status is no HTTP status.
    #[error("the token endpoint `{url}` answered a status that is no HTTP status")]
    Status { url: String },
    /// The endpoint refused, with its own `error` and `error_description` when it gave
    /// them (bounded).
    #[error(
        "the token endpoint `{url}` refused {asked} `{client_id}` with HTTP {status}{}",
        said(.error.as_deref(), .description.as_deref())
    )]
    Refused {
        url: String,
        /// Whose request (`the client credentials of`, `the token exchange of client`).
        asked: &'static str,
        client_id: String,
        status: reqwest::StatusCode,
        error: Option<String>,
        description: Option<String>,
    },
    /// A success without JSON.
    #[error("the token endpoint `{url}` answered HTTP {status} with no JSON")]
    NoJson {
        url: String,
        status: reqwest::StatusCode,
    },
    /// A success without an access token.
    #[error("the token endpoint `{url}` answered without an `access_token`")]
    NoAccessToken { url: String },
    /// An access token that cannot be sent in a header.
    #[error("the token endpoint `{url}` answered an access token that is no valid header value")]
    TokenNotHeader { url: String },
    /// A token that is not a bearer token (its `token_type`, bounded).
    #[error("the token endpoint `{url}` answered a token of type {token_type}, not a bearer token")]
    NotBearer { url: String, token_type: String },
    /// An `expires_in` that is not a whole number of seconds.
    #[error(
        "the token endpoint `{url}` answered an `expires_in` that is not a whole number of seconds"
    )]
    ExpiresIn { url: String },
    /// An exchange that issued something else than an access token (its type, bounded).
    #[error("the token endpoint `{url}` issued a token of type `{issued}`, not an access token")]
    IssuedType { url: String, issued: String },
    /// An exchange answered without `issued_token_type`.
    #[error(
        "the token endpoint `{url}` answered the exchange without `issued_token_type` (RFC 8693 §2.2.1)"
    )]
    NoIssuedType { url: String },
    /// A call on behalf of a caller without a verified token.
    #[error("{}", crate::exchange::NO_SUBJECT)]
    NoSubject,
}

/// The endpoint's own words in a refusal: `: `error`` and ` (description)`, or nothing.
fn said(error: Option<&str>, description: Option<&str>) -> String {
    match error {
        None => String::new(),
        Some(e) => {
            let description = description.map(|d| format!(" ({d})")).unwrap_or_default();
            format!(": `{e}`{description}")
        }
    }
}

/// What a token endpoint answered: the access token, its lifetime, and the whole answer.
pub(crate) struct TokenAnswer {
    pub(crate) token: Secret,
    pub(crate) expires_in: Option<Duration>,
    pub(crate) json: Value,
}

impl TokenAnswer {
    /// When to ask again: a tenth of the token's life (at most a minute) before it expires;
    /// never for a token without an expiry (`None`).
    pub(crate) fn refresh_at(&self, asked: Instant) -> Option<Instant> {
        self.expires_in.map(|life| {
            let margin = (life / 10).min(Duration::from_secs(60));
            asked + life.saturating_sub(margin)
        })
    }
}

/// Posts `body` (a form, the grant's own parameters) to `creds`' token endpoint as its
/// client — `client_secret_basic` or `client_secret_post`, the secret read again for each
/// request, so a rotated secret (its file rewritten) is taken at the next one — and reads
/// the answer: a bearer access token, or why there is none (the endpoint's own `error` and
/// `error_description`, bounded). `field` names the configuration (`oauth`,
/// `token_exchange`) in errors.
pub(crate) async fn ask_token_endpoint(
    http: &toolgate_idp::FetchClient,
    creds: &OAuthClientCredentials,
    server: &str,
    field: &'static str,
    mut body: String,
    timeout: Duration,
) -> Result<TokenAnswer, TokenError> {
    let url = &creds.token_url;
    let headers = client_authentication(creds, server, field, &mut body)?;
    // A TLS failure (an unknown CA, a name the certificate is not for, an expired one)
    // fails the request with why: no token, so the call is refused (fail closed).
    let response = http
        .post(url, &headers, body, MAX_TOKEN_ANSWER_BYTES, timeout)
        .await
        .map_err(|error| TokenError::Unreachable {
            url: url.clone(),
            error,
        })?;
    let status = reqwest::StatusCode::from_u16(response.status)
        .map_err(|_| TokenError::Status { url: url.clone() })?;
    let json: Option<Value> = serde_json::from_slice(&response.body).ok();
    if !status.is_success() {
        return Err(refused(creds, field, status, json.as_ref()));
    }
    read_token_answer(url, status, json)
}

/// The request's headers, with the client's authentication: an `Authorization: Basic`
/// header (`client_secret_basic`), or the client id and secret added to `body`
/// (`client_secret_post`); the secret read again now.
fn client_authentication(
    creds: &OAuthClientCredentials,
    server: &str,
    field: &'static str,
    body: &mut String,
) -> Result<Vec<(HeaderName, HeaderValue)>, TokenError> {
    // A client secret that can no longer be read fails the request (the call is refused);
    // the old one is never used instead.
    let secret = creds
        .client_secret
        .read_again()
        .map_err(|error| TokenError::Secret {
            server: server.to_owned(),
            field,
            error,
        })?;
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
    match creds.client_auth {
        ClientAuth::Basic => {
            use base64::Engine as _;
            let pair = format!(
                "{}:{}",
                form_encode(&creds.client_id),
                form_encode(secret.expose())
            );
            let mut v = HeaderValue::from_str(&format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(pair)
            ))
            .map_err(|_| TokenError::BasicHeader)?;
            v.set_sensitive(true);
            headers.push((reqwest::header::AUTHORIZATION, v));
        }
        ClientAuth::Post => {
            push_param(body, "client_id", &creds.client_id);
            push_param(body, "client_secret", secret.expose());
        }
    }
    Ok(headers)
}

/// A token endpoint's refusal (a status that is not success), with its own `error` and
/// `error_description`, bounded.
fn refused(
    creds: &OAuthClientCredentials,
    field: &'static str,
    status: reqwest::StatusCode,
    json: Option<&Value>,
) -> TokenError {
    let text = |key: &str| json.and_then(|j| j.get(key).and_then(Value::as_str));
    let error = text("error").map(|e| bounded(e, 100));
    let description = error
        .as_ref()
        .and(text("error_description"))
        .map(|d| bounded(d, 200));
    let asked = if field == "oauth" {
        "the client credentials of"
    } else {
        "the token exchange of client"
    };
    TokenError::Refused {
        url: creds.token_url.clone(),
        asked,
        client_id: creds.client_id.clone(),
        status,
        error,
        description,
    }
}

/// A successful answer read: a bearer access token that fits a header, and its expiry.
fn read_token_answer(
    url: &str,
    status: reqwest::StatusCode,
    json: Option<Value>,
) -> Result<TokenAnswer, TokenError> {
    let Some(json) = json else {
        return Err(TokenError::NoJson {
            url: url.to_owned(),
            status,
        });
    };
    let token = match json.get("access_token").and_then(Value::as_str) {
        Some(t) if !t.trim().is_empty() => Secret::new(t),
        _ => {
            return Err(TokenError::NoAccessToken {
                url: url.to_owned(),
            });
        }
    };
    if HeaderValue::from_str(&format!("Bearer {}", token.expose())).is_err() {
        return Err(TokenError::TokenNotHeader {
            url: url.to_owned(),
        });
    }
    match json.get("token_type") {
        None => {}
        Some(Value::String(t)) if t.eq_ignore_ascii_case("bearer") => {}
        Some(other) => {
            return Err(TokenError::NotBearer {
                url: url.to_owned(),
                token_type: bounded(&other.to_string(), 40),
            });
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
                return Err(TokenError::ExpiresIn {
                    url: url.to_owned(),
                });
            }
        },
    };
    Ok(TokenAnswer {
        token,
        expires_in,
        json,
    })
}
