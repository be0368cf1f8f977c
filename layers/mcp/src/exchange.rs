//! OAuth 2.0 Token Exchange (RFC 8693) for calls sent on behalf of the caller: the caller's
//! verified token is exchanged at the configured token endpoint for one scoped to the
//! upstream server, kept per caller token until shortly before it expires, and carried by
//! the call's own request (the connection is shared by every caller, so the token rides in
//! the request's extensions, read by the HTTP client as it sends that request).
//!
//! Fail closed: no token, no call. Nothing here falls back to the connection's credentials.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use sha2::{Digest, Sha256};
use toolgate_core::Delegation;

use crate::oauth::{SubjectToken, TokenExchange};
use crate::secret::Secret;
use crate::token_endpoint::{TokenError, ask_token_endpoint, push_param};

/// RFC 8693 §2.1's grant type.
const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
/// The token type asked for, and the ones taken back (RFC 8693 §3).
const ACCESS_TOKEN: &str = "urn:ietf:params:oauth:token-type:access_token";
const JWT: &str = "urn:ietf:params:oauth:token-type:jwt";
/// At most this many exchanged tokens are kept; past it, expired ones go, then all.
const MAX_KEPT: usize = 4096;
/// The deepest `act` chain read.
const MAX_ACTORS: usize = 16;

/// A token issued for one caller token, and whom it speaks for.
#[derive(Debug, Clone)]
pub(crate) struct Issued {
    pub(crate) token: Secret,
    refresh_at: Option<Instant>,
    pub(crate) delegation: Delegation,
}

/// The token exchange of one server.
pub(crate) struct Exchanger {
    server: String,
    http: toolgate_idp::FetchClient,
    exchange: TokenExchange,
    /// The RFC 8707 `resource` asked for: the configured one, else the server's URL.
    resource: String,
    timeout: Duration,
    kept: Mutex<HashMap<[u8; 32], Issued>>,
}

impl fmt::Debug for Exchanger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Exchanger")
            .field("server", &self.server)
            .field("token_url", &self.exchange.client.token_url)
            .field("resource", &self.resource)
            .finish_non_exhaustive()
    }
}

/// In a request's extensions: the exchanged token to send it with instead of the
/// connection's, and how to ask for another when the server refuses it.
#[derive(Debug, Clone)]
pub(crate) struct OnBehalf {
    pub(crate) exchanger: Arc<Exchanger>,
    pub(crate) subject: SubjectToken,
    pub(crate) token: Secret,
}

/// Why a request to a server with a token exchange cannot be sent for a caller without a
/// verified token.
pub(crate) const NO_SUBJECT: &str = "the caller has no verified identity-provider token to exchange (only a caller authenticated by `mcp.jwt` has one)";

/// Makes a request to the server of `exchanger` one sent on behalf of `subject`: its
/// exchanged token goes into the request's `extensions` (the HTTP client sends the request
/// with it). Whom it speaks for; why there is no token, else — the request must not be sent.
pub(crate) async fn authorize(
    exchanger: Arc<Exchanger>,
    subject: Option<&SubjectToken>,
    extensions: &mut rmcp::model::Extensions,
) -> Result<Delegation, TokenError> {
    let Some(subject) = subject else {
        return Err(TokenError::NoSubject);
    };
    let issued = exchanger.current(subject).await?;
    extensions.insert(OnBehalf {
        exchanger,
        subject: subject.clone(),
        token: issued.token,
    });
    Ok(issued.delegation)
}

fn key(subject: &SubjectToken) -> [u8; 32] {
    Sha256::digest(subject.token().expose().as_bytes()).into()
}

impl Exchanger {
    /// The exchange of server `id` at `url`; its client secret is read now (one that cannot
    /// be read is a start-up error naming the field), and again for each exchange.
    pub(crate) fn new(
        id: &str,
        url: &str,
        exchange: TokenExchange,
        timeout: Duration,
    ) -> Result<Self, String> {
        let field = |name: &str, e: String| format!("servers.{id}.token_exchange.{name}: {e}");
        exchange
            .client
            .client_secret
            .read()
            .map_err(|e| field("client_secret", e.to_string()))?;
        toolgate_idp::check_fetch_url(&exchange.client.token_url)
            .map_err(|e| field("token_url", e.to_string()))?;
        let http = toolgate_idp::FetchClient::new(exchange.client.ca_file.as_deref())
            .map_err(|e| field("ca_file", e.to_string()))?;
        Ok(Self {
            server: id.to_owned(),
            http,
            resource: exchange
                .client
                .resource
                .clone()
                .unwrap_or_else(|| url.to_owned()),
            exchange,
            timeout,
            kept: Mutex::new(HashMap::new()),
        })
    }

    /// The server's id.
    pub(crate) fn server(&self) -> &str {
        &self.server
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Issued>> {
        self.kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The token to send for `subject`: the one kept, unless it is (about to be) expired.
    pub(crate) async fn current(&self, subject: &SubjectToken) -> Result<Issued, TokenError> {
        let key = key(subject);
        if let Some(issued) = self.kept().get(&key)
            && issued.refresh_at.is_some_and(|at| Instant::now() < at)
        {
            return Ok(issued.clone());
        }
        self.fetch(subject, key).await
    }

    /// A new token for `subject` after the server refused `rejected` (one already replaced
    /// by another request is not asked for again).
    pub(crate) async fn replace(
        &self,
        subject: &SubjectToken,
        rejected: &Secret,
    ) -> Result<Issued, TokenError> {
        let key = key(subject);
        {
            let mut kept = self.kept();
            match kept.get(&key) {
                Some(issued) if issued.token != *rejected => return Ok(issued.clone()),
                Some(_) => {
                    kept.remove(&key);
                }
                None => {}
            }
        }
        self.fetch(subject, key).await
    }

    /// Asks the token endpoint to exchange `subject`'s token.
    async fn fetch(&self, subject: &SubjectToken, key: [u8; 32]) -> Result<Issued, TokenError> {
        let mut body = String::new();
        push_param(&mut body, "grant_type", GRANT_TYPE);
        push_param(&mut body, "subject_token", subject.token().expose());
        push_param(
            &mut body,
            "subject_token_type",
            self.exchange.subject_token_type.uri(),
        );
        push_param(&mut body, "requested_token_type", ACCESS_TOKEN);
        push_param(&mut body, "resource", &self.resource);
        if let Some(audience) = &self.exchange.audience {
            push_param(&mut body, "audience", audience);
        }
        if let Some(scope) = &self.exchange.client.scope {
            push_param(&mut body, "scope", scope);
        }
        let asked = Instant::now();
        let answer = ask_token_endpoint(
            &self.http,
            &self.exchange.client,
            &self.server,
            "token_exchange",
            body,
            self.timeout,
        )
        .await?;
        let url = &self.exchange.client.token_url;
        // RFC 8693 §2.2.1: `issued_token_type` is required; only an access token (or a JWT
        // one) is sent as a bearer token.
        match answer.json.get("issued_token_type").and_then(Value::as_str) {
            Some(ACCESS_TOKEN | JWT) => {}
            Some(other) => {
                return Err(TokenError::IssuedType {
                    url: url.clone(),
                    issued: other.chars().take(80).collect(),
                });
            }
            None => return Err(TokenError::NoIssuedType { url: url.clone() }),
        }
        let delegation = delegation(&self.server, url, subject, answer.token.expose());
        let issued = Issued {
            refresh_at: answer.refresh_at(asked),
            token: answer.token,
            delegation,
        };
        tracing::debug!(
            target: "toolgate_mcp::oauth",
            server = self.server.as_str(),
            subject = subject.subject(),
            expires_in_secs = answer.expires_in.map(|d| d.as_secs()),
            "exchanged the caller's token for MCP server `{}`",
            self.server
        );
        // A token without an expiry is used once, never kept (it might outlive its grant).
        if issued.refresh_at.is_some() {
            let mut kept = self.kept();
            if kept.len() >= MAX_KEPT {
                let now = Instant::now();
                kept.retain(|_, i| i.refresh_at.is_some_and(|at| now < at));
                if kept.len() >= MAX_KEPT {
                    kept.clear();
                }
            }
            kept.insert(key, issued.clone());
        }
        Ok(issued)
    }
}

/// Whom `token` speaks for, as it says when it is a JWT (its `sub` and `act` chain; read,
/// not verified: it came from the token endpoint over the configured channel, and only the
/// records read it), else the caller's subject with no actors.
fn delegation(server: &str, token_url: &str, subject: &SubjectToken, token: &str) -> Delegation {
    let claims = jwt_claims(token);
    let sub = claims
        .as_ref()
        .and_then(|c| c.get("sub"))
        .and_then(Value::as_str)
        .unwrap_or(subject.subject());
    let mut actors = Vec::new();
    let mut act = claims.as_ref().and_then(|c| c.get("act"));
    while let Some(a) = act {
        if actors.len() == MAX_ACTORS {
            break;
        }
        match a.get("sub").and_then(Value::as_str) {
            Some(s) => actors.push(s.chars().take(256).collect()),
            None => break,
        }
        act = a.get("act");
    }
    Delegation::new(
        server,
        sub.chars().take(256).collect::<String>(),
        actors,
        token_url,
    )
}

/// The claims of a compact JWS, unverified; `None` for anything else.
fn jwt_claims(token: &str) -> Option<serde_json::Map<String, Value>> {
    use base64::Engine as _;
    let mut parts = token.split('.');
    let (_, claims, _, none) = (parts.next()?, parts.next()?, parts.next()?, parts.next());
    if none.is_some() {
        return None;
    }
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(claims)
        .ok()?;
    match serde_json::from_slice(&bytes).ok()? {
        Value::Object(o) => Some(o),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;

    fn jws(claims: &Value) -> String {
        let e = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        format!(
            "{}.{}.sig",
            e.encode(br#"{"alg":"RS256"}"#),
            e.encode(claims.to_string())
        )
    }

    #[test]
    fn the_act_chain_of_an_issued_jwt_is_read_current_actor_first() {
        let subject = SubjectToken::new("t", "caller");
        let token = jws(&serde_json::json!({
            "sub": "alice", "act": {"sub": "support-bot", "act": {"sub": "planner"}}
        }));
        let d = delegation("crm", "https://idp/token", &subject, &token);
        assert_eq!(d.subject, "alice");
        assert_eq!(d.actors, ["support-bot", "planner"]);
        assert_eq!(
            d.act_chain(),
            serde_json::json!({"sub": "support-bot", "act": {"sub": "planner"}})
        );
        // An opaque token: the caller's subject, no actors claimed.
        let d = delegation("crm", "https://idp/token", &subject, "opaque-token");
        assert_eq!((d.subject.as_str(), d.actors.len()), ("caller", 0));
        assert_eq!(d.act_chain(), Value::Null);
    }
}
