//! OAuth 2.0 client credentials (RFC 6749 §4.4) for streamable HTTP upstreams: what the
//! operator configures.

use std::path::{Path, PathBuf};

use crate::config_error::ConfigError;
use crate::secret::SecretSource;

/// How the client authenticates to the token endpoint (RFC 6749 §2.3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ClientAuth {
    /// HTTP Basic with the form-encoded id and secret (`client_secret_basic`): the method
    /// every authorization server must support. The default.
    #[default]
    Basic,
    /// `client_id` and `client_secret` in the request body (`client_secret_post`).
    Post,
}

impl ClientAuth {
    /// As written in the configuration (`"basic"`, `"post"`).
    pub fn as_str(self) -> &'static str {
        match self {
            ClientAuth::Basic => "basic",
            ClientAuth::Post => "post",
        }
    }
}

/// OAuth 2.0 client credentials for a streamable HTTP upstream: toolgate asks `token_url`
/// for an access token (`grant_type=client_credentials`) when it connects, sends it as
/// `Authorization: Bearer …`, keeps it until shortly before its `expires_in`, and fetches a
/// new one when it expires and, once, when the server answers 401. A token endpoint that
/// refuses fails connecting with an error naming the server.
///
/// ```
/// use toolgate_mcp::{McpServerConfig, OAuthClientCredentials, SecretSource};
///
/// let creds = OAuthClientCredentials::new(
///     "http://127.0.0.1:8080/realms/tools/protocol/openid-connect/token",
///     "toolgate",
///     SecretSource::file("secrets/client-secret"),
/// )
/// .unwrap()
/// .scope("mcp:tools");
/// let remote = McpServerConfig::streamable_http("remote", "http://127.0.0.1:8931/mcp")
///     .unwrap()
///     .oauth(creds);
/// assert_eq!(remote.id(), "remote");
/// assert!(OAuthClientCredentials::new("ftp://x", "id", SecretSource::env("S")).is_err());
/// // Plain `http://` only to this machine: a secret is never sent in the clear.
/// assert!(OAuthClientCredentials::new("http://idp.internal/token", "id", SecretSource::env("S")).is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct OAuthClientCredentials {
    pub(crate) token_url: String,
    pub(crate) client_id: String,
    pub(crate) client_secret: SecretSource,
    pub(crate) scope: Option<String>,
    pub(crate) resource: Option<String>,
    pub(crate) client_auth: ClientAuth,
    pub(crate) ca_file: Option<PathBuf>,
}

impl OAuthClientCredentials {
    /// Credentials of client `client_id` at the token endpoint `token_url`, its secret from
    /// `client_secret`. The endpoint is `https://` (fetched over TLS when `toolgate-idp`'s
    /// `tls` feature is on, as in the `toolgate` command), or plain `http://` to a loopback
    /// host only (`toolgate_core::outbound::fetch_url_problem`): a client secret is never sent
    /// in the clear over a network.
    ///
    /// # Errors
    ///
    /// `oauth.token_url` that is not an `https://` URL or a loopback `http://` one;
    /// `oauth.client_id` that is blank.
    pub fn new(
        token_url: impl Into<String>,
        client_id: impl Into<String>,
        client_secret: SecretSource,
    ) -> Result<Self, ConfigError> {
        let token_url = token_url.into();
        let client_id = client_id.into();
        if let Some(message) = toolgate_core::outbound::fetch_url_problem(&token_url) {
            return Err(ConfigError {
                path: String::from("oauth.token_url"),
                message,
            });
        }
        if client_id.trim().is_empty() {
            return Err(ConfigError {
                path: String::from("oauth.client_id"),
                message: String::from("the client id must not be blank"),
            });
        }
        Ok(Self {
            token_url,
            client_id,
            client_secret,
            scope: None,
            resource: None,
            client_auth: ClientAuth::Basic,
            ca_file: None,
        })
    }

    /// The CA certificates (a PEM file) trusted for an `https://` token endpoint instead of
    /// the system's roots (a private authorization server's CA; `oauth.ca_file`). Read when
    /// the gateway starts: one that cannot be read, or holds no certificate, is a start-up
    /// error naming the field.
    ///
    /// ```
    /// use toolgate_mcp::{OAuthClientCredentials, SecretSource};
    /// let creds = OAuthClientCredentials::new("https://idp.example.com/token", "toolgate", SecretSource::env("S"))
    ///     .unwrap()
    ///     .ca_file("/etc/toolgate/idp-ca.pem");
    /// # let _ = creds;
    /// ```
    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_file = Some(path.into());
        self
    }

    /// The scope to ask for (space-separated scopes).
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.scope = Some(scope.into());
        self
    }

    /// The resource indicator to send (RFC 8707 `resource`: the MCP server's URI, which the
    /// MCP authorization spec asks clients to send).
    pub fn resource(mut self, resource: impl Into<String>) -> Self {
        self.resource = Some(resource.into());
        self
    }

    /// How the client authenticates to the token endpoint (default [`ClientAuth::Basic`]).
    pub fn client_auth(mut self, auth: ClientAuth) -> Self {
        self.client_auth = auth;
        self
    }

    pub(crate) fn relative_to(mut self, dir: &Path) -> Self {
        self.client_secret = self.client_secret.relative_to(dir);
        if let Some(ca) = &self.ca_file
            && ca.is_relative()
        {
            self.ca_file = Some(dir.join(ca));
        }
        self
    }
}

/// How the caller's token is typed in a token exchange (RFC 8693 §3 `subject_token_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SubjectTokenType {
    /// `urn:ietf:params:oauth:token-type:access_token`: the caller's access token. The
    /// default.
    #[default]
    AccessToken,
    /// `urn:ietf:params:oauth:token-type:jwt`: the caller's token as a JWT.
    Jwt,
}

impl SubjectTokenType {
    /// As written in the configuration (`"access_token"`, `"jwt"`).
    pub fn as_str(self) -> &'static str {
        match self {
            SubjectTokenType::AccessToken => "access_token",
            SubjectTokenType::Jwt => "jwt",
        }
    }

    /// The token type URI RFC 8693 §3 names.
    pub fn uri(self) -> &'static str {
        match self {
            SubjectTokenType::AccessToken => "urn:ietf:params:oauth:token-type:access_token",
            SubjectTokenType::Jwt => "urn:ietf:params:oauth:token-type:jwt",
        }
    }
}

/// OAuth 2.0 Token Exchange (RFC 8693) for a streamable HTTP upstream: each `tools/call` is
/// sent with a token toolgate asks `token_url` for **on behalf of the caller** — the
/// caller's verified identity-provider token as the `subject_token`, toolgate
/// authenticating as `client_id` — scoped to the server (`resource`, default: the server's
/// URL; `audience` when set). The issued token's `act` claim names the calling agent as the
/// actor (RFC 8693 §4.1; it is the client the caller's token was issued to), and audit
/// records and spans show the chain. A token is kept per caller token until shortly before
/// its `expires_in` (one without an expiry is used once), and asked for again, once, when the
/// server answers 401.
///
/// Fail closed: a call whose caller has no verified token (a static bearer token, stdio),
/// a token endpoint that refuses or cannot be reached, or an answer that is no bearer
/// token refuses the call with why; it is never sent with the connection's own credentials
/// instead. The connection's own requests (`initialize`, listings, notifications) carry the
/// server's `oauth` or `headers` credentials, as without an exchange.
///
/// ```
/// use toolgate_mcp::{McpServerConfig, OAuthClientCredentials, SecretSource, TokenExchange};
///
/// let client = OAuthClientCredentials::new("https://idp.example.com/token", "toolgate", SecretSource::env("S"))
///     .unwrap()
///     .scope("crm:read");
/// let crm = McpServerConfig::streamable_http("crm", "https://crm.example.com/mcp")
///     .unwrap()
///     .token_exchange(TokenExchange::new(client).audience("crm"));
/// assert_eq!(crm.id(), "crm");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct TokenExchange {
    pub(crate) client: OAuthClientCredentials,
    pub(crate) audience: Option<String>,
    pub(crate) subject_token_type: SubjectTokenType,
}

impl TokenExchange {
    /// Exchanges at `client`'s token endpoint, authenticating as its client, asking for its
    /// `scope` and `resource` (the server's URL when it names none).
    pub fn new(client: OAuthClientCredentials) -> Self {
        Self {
            client,
            audience: None,
            subject_token_type: SubjectTokenType::AccessToken,
        }
    }

    /// The `audience` to ask for (RFC 8693 §2.1: the logical name of the upstream service).
    pub fn audience(mut self, audience: impl Into<String>) -> Self {
        self.audience = Some(audience.into());
        self
    }

    /// How the caller's token is typed (default [`SubjectTokenType::AccessToken`]).
    pub fn subject_token_type(mut self, kind: SubjectTokenType) -> Self {
        self.subject_token_type = kind;
        self
    }

    /// The token endpoint.
    pub fn token_url(&self) -> &str {
        &self.client.token_url
    }

    pub(crate) fn relative_to(mut self, dir: &Path) -> Self {
        self.client = self.client.relative_to(dir);
        self
    }
}

/// The caller's verified identity-provider token, as it came, and the subject it names: put
/// it in a [`ToolCall`](toolgate_core::ToolCall)'s extensions to have a server with a
/// [`TokenExchange`] called on the caller's behalf (`toolgate mcp serve --http` puts it
/// there for every caller whose JWT it verified). A call without it is refused by such a
/// server. Never shown: `Debug` hides the token.
///
/// ```
/// use toolgate_mcp::SubjectToken;
/// let t = SubjectToken::new("eyJ…", "alice");
/// assert_eq!(t.subject(), "alice");
/// assert!(!format!("{t:?}").contains("eyJ"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubjectToken {
    token: crate::Secret,
    subject: String,
}

impl SubjectToken {
    /// The caller's token (already verified by the host) and its `sub`.
    pub fn new(token: impl Into<String>, subject: impl Into<String>) -> Self {
        Self {
            token: crate::Secret::new(token),
            subject: subject.into(),
        }
    }

    /// The subject the token names (its `sub`).
    pub fn subject(&self) -> &str {
        &self.subject
    }

    #[cfg_attr(
        not(feature = "http"),
        expect(dead_code, reason = "exchanged only over streamable HTTP")
    )]
    pub(crate) fn token(&self) -> &crate::Secret {
        &self.token
    }
}
