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
    /// host only (`toolgate_engine::jwt::fetch_url_problem`): a client secret is never sent
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
        if let Some(message) = toolgate_engine::jwt::fetch_url_problem(&token_url) {
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
