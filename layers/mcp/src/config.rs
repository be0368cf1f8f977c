//! What the operator configures about one MCP server.

use std::path::PathBuf;
use std::time::Duration;

use toolgate_core::names;
use toolgate_core::{ApprovalMode, NetworkScope};
use toolgate_engine::{ConfigErrors, ServerSettings};

pub use crate::config_error::ConfigError;
use crate::oauth::{OAuthClientCredentials, TokenExchange};
use crate::secret::SecretSource;

/// The environment variables a stdio server inherits from the host by default: enough to
/// start a program, none of the host's secrets (the MCP TypeScript SDK's default set).
pub const DEFAULT_INHERITED_ENV: &[&str] = if cfg!(windows) {
    &[
        "APPDATA",
        "HOMEDRIVE",
        "HOMEPATH",
        "LOCALAPPDATA",
        "PATH",
        "PROCESSOR_ARCHITECTURE",
        "SYSTEMDRIVE",
        "SYSTEMROOT",
        "TEMP",
        "USERNAME",
        "USERPROFILE",
        "PROGRAMFILES",
    ]
} else {
    &["HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"]
};

/// The most `tools/list` pages read in one listing, by default.
pub const DEFAULT_MAX_PAGES: usize = 100;
/// The most tools accepted from one server, by default.
pub const DEFAULT_MAX_TOOLS: usize = 10_000;
/// How long connecting, initialising and one listing may take, by default.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How to reach a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Transport {
    /// A child process speaking MCP on standard input and output.
    Stdio {
        program: PathBuf,
        args: Vec<String>,
        env: Vec<(String, String)>,
        inherit_all_env: bool,
        cwd: Option<PathBuf>,
        /// Environment variables whose values are secrets, read when connecting.
        env_secrets: Vec<(String, SecretSource)>,
    },
    /// Streamable HTTP.
    StreamableHttp {
        url: String,
        /// HTTP headers sent with every request, their values secrets read when connecting.
        headers: Vec<(String, SecretSource)>,
        /// OAuth 2.0 client credentials: an access token fetched when connecting.
        oauth: Option<OAuthClientCredentials>,
        /// RFC 8693: each `tools/call` sent with a token exchanged for the caller's.
        token_exchange: Option<Box<TokenExchange>>,
        /// Trust only the CA certificates of this PEM file (else the system's roots).
        ca_file: Option<PathBuf>,
        /// Mutual TLS: a client certificate chain and its key (PEM files).
        client_identity: Option<(PathBuf, PathBuf)>,
        /// Plain `http://` to a host that is not loopback, opted into for this server.
        plain_http: bool,
    },
    /// A transport handed to [`McpGateway::connect_with`](crate::McpGateway::connect_with).
    Custom,
}

/// Which of a server's tools are withheld from confidential work (R7).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
enum Withheld {
    #[default]
    None,
    All,
    Tools(Vec<String>),
}

/// One MCP server as the operator configures it: its id (the tools' source, never the
/// name the server reports about itself), how to reach it, whether its read-only claims
/// are believed (R28), and what the host says about its tools that MCP cannot (withheld
/// from confidential work, network scope, approval mode).
///
/// ```
/// use std::time::Duration;
/// use toolgate_mcp::McpServerConfig;
///
/// let fs = McpServerConfig::stdio("fs", "node")
///     .unwrap()
///     .args(["server-filesystem/dist/index.js", "/srv/docs"])
///     .trust_tool_annotations(true)
///     .relist_every(Duration::from_secs(300));
/// assert_eq!(fs.id(), "fs");
/// assert!(McpServerConfig::stdio("  ", "node").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct McpServerConfig {
    id: String,
    pub(crate) transport: Transport,
    trust: Option<bool>,
    tool_prefix: Option<String>,
    withheld: Withheld,
    network_override: Option<NetworkScope>,
    approvals: Vec<(String, ApprovalMode)>,
    pub(crate) relist_every: Option<Duration>,
    pub(crate) max_pages: usize,
    pub(crate) max_tools: usize,
    pub(crate) request_timeout: Duration,
}

fn check_id(id: &str) -> Result<(), ConfigError> {
    if id.trim().is_empty() {
        return Err(ConfigError {
            path: String::from("servers"),
            message: String::from("a server id must not be blank"),
        });
    }
    names::normalize_segment(id).map_err(|e| ConfigError {
        path: format!("servers.{id}"),
        message: e.to_string(),
    })?;
    Ok(())
}

impl McpServerConfig {
    fn new(id: impl Into<String>, transport: Transport) -> Result<Self, ConfigError> {
        let id = id.into();
        check_id(&id)?;
        Ok(Self {
            id,
            transport,
            trust: None,
            tool_prefix: None,
            withheld: Withheld::None,
            network_override: None,
            approvals: Vec::new(),
            relist_every: None,
            max_pages: DEFAULT_MAX_PAGES,
            max_tools: DEFAULT_MAX_TOOLS,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        })
    }

    /// A server started as a child process that speaks MCP on its standard input and
    /// output. It inherits only [`DEFAULT_INHERITED_ENV`] from the host, plus what
    /// [`env`](Self::env) sets.
    pub fn stdio(id: impl Into<String>, program: impl Into<PathBuf>) -> Result<Self, ConfigError> {
        Self::new(
            id,
            Transport::Stdio {
                program: program.into(),
                args: Vec::new(),
                env: Vec::new(),
                inherit_all_env: false,
                cwd: None,
                env_secrets: Vec::new(),
            },
        )
    }

    /// A server reached over streamable HTTP at `url`: `https://` (rustls, with the `tls`
    /// feature: the system's roots, or only a [`ca_file`](Self::ca_file)'s, optionally a
    /// [client certificate](Self::client_identity)), or plain `http://` to a loopback host —
    /// to any other host only when [`plain_http`](Self::plain_http) opts this server in
    /// (checked when connecting and by [`url_problem`](Self::url_problem)).
    ///
    /// ```
    /// use toolgate_mcp::McpServerConfig;
    /// let remote = McpServerConfig::streamable_http("docs", "https://mcp.example.com/mcp").unwrap();
    /// assert_eq!(remote.url_problem(), None);
    /// let plain = McpServerConfig::streamable_http("lan", "http://10.0.0.7/mcp").unwrap();
    /// assert!(plain.url_problem().unwrap().contains("plain_http"));
    /// assert_eq!(plain.plain_http(true).url_problem(), None);
    /// assert!(McpServerConfig::streamable_http("x", "ftp://x").is_err());
    /// ```
    pub fn streamable_http(
        id: impl Into<String>,
        url: impl Into<String>,
    ) -> Result<Self, ConfigError> {
        let id = id.into();
        let url = url.into();
        let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
        if !matches!(scheme.as_deref(), Some("http" | "https")) {
            return Err(ConfigError {
                path: format!("servers.{id}.url"),
                message: format!("`{url}` is not an `https://` or `http://` URL"),
            });
        }
        Self::new(
            id,
            Transport::StreamableHttp {
                url,
                headers: Vec::new(),
                oauth: None,
                token_exchange: None,
                ca_file: None,
                client_identity: None,
                plain_http: false,
            },
        )
    }

    /// Trusts only the CA certificates of this PEM file for the server's `https://` URL.
    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        if let Transport::StreamableHttp { ca_file, .. } = &mut self.transport {
            *ca_file = Some(path.into());
        }
        self
    }

    /// Presents this client certificate chain and key (PEM files) to the server: mutual TLS.
    pub fn client_identity(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        if let Transport::StreamableHttp {
            client_identity, ..
        } = &mut self.transport
        {
            *client_identity = Some((cert.into(), key.into()));
        }
        self
    }

    /// Opts this server into plain `http://` to a host that is not loopback: its calls and
    /// their results cross the network unencrypted.
    pub fn plain_http(mut self, allowed: bool) -> Self {
        if let Transport::StreamableHttp { plain_http, .. } = &mut self.transport {
            *plain_http = allowed;
        }
        self
    }

    /// Why the server's URL is not one toolgate connects to as configured: an `http://` URL
    /// to a host that is not loopback without [`plain_http`](Self::plain_http), credentials
    /// in the address, no host. `None` for a stdio or custom server.
    pub fn url_problem(&self) -> Option<String> {
        let Transport::StreamableHttp {
            url, plain_http, ..
        } = &self.transport
        else {
            return None;
        };
        let why = toolgate_core::outbound::fetch_url_problem(url)?;
        let http = url
            .get(..7)
            .is_some_and(|s| s.eq_ignore_ascii_case("http://"));
        // Only the plain-HTTP refusal is the operator's to lift; a bad address is not.
        let address = why.contains("in its address") || why.contains("names no host");
        if address || !http {
            return Some(why);
        }
        if *plain_http {
            return None;
        }
        Some(format!(
            "`{url}` is plain `http://` to a host that is not loopback: the server's calls and results would cross the network unencrypted; use `https://`, or set `plain_http: true` on this server to opt it in"
        ))
    }

    /// The trust of the server's `https://` URL, in words (for `check`); `None` for a stdio
    /// or plain-`http://` server.
    pub fn trust(&self) -> Option<String> {
        let Transport::StreamableHttp {
            url,
            ca_file,
            client_identity,
            ..
        } = &self.transport
        else {
            return None;
        };
        if !url
            .get(..8)
            .is_some_and(|s| s.eq_ignore_ascii_case("https://"))
        {
            return None;
        }
        let roots = match ca_file {
            Some(p) => format!("the CA certificates of `{}` only", p.display()),
            None => String::from("the system's root certificates"),
        };
        Some(match client_identity {
            Some((cert, _)) => format!(
                "TLS trusting {roots}, presenting the client certificate `{}`",
                cert.display()
            ),
            None => format!("TLS trusting {roots}"),
        })
    }

    /// How the server's calls are authorized on behalf of their callers, in words (for
    /// `check`); `None` without a [`TokenExchange`].
    pub fn on_behalf(&self) -> Option<String> {
        let Transport::StreamableHttp {
            url,
            token_exchange: Some(x),
            ..
        } = &self.transport
        else {
            return None;
        };
        let resource = x.client.resource.as_deref().unwrap_or(url);
        Some(format!(
            "each call is sent with a token exchanged at `{}` for the caller's (RFC 8693: the caller's subject, the calling agent as actor), for the resource `{resource}`{}; a call without a verified caller token is refused",
            x.client.token_url,
            x.audience
                .as_deref()
                .map(|a| format!(" and the audience `{a}`"))
                .unwrap_or_default()
        ))
    }

    /// A server whose transport is handed to
    /// [`McpGateway::connect_with`](crate::McpGateway::connect_with) (an in-process
    /// pipe, a socket, …).
    pub fn custom(id: impl Into<String>) -> Result<Self, ConfigError> {
        Self::new(id, Transport::Custom)
    }

    /// The server id: the source of its tools, and the first segment of their qualified
    /// names (`id__tool`).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Adds one argument to a stdio server's command line.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        if let Transport::Stdio { args, .. } = &mut self.transport {
            args.push(arg.into());
        }
        self
    }

    /// Adds arguments to a stdio server's command line.
    pub fn args<I, S>(mut self, more: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        if let Transport::Stdio { args, .. } = &mut self.transport {
            args.extend(more.into_iter().map(Into::into));
        }
        self
    }

    /// Sets an environment variable for a stdio server.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        if let Transport::Stdio { env, .. } = &mut self.transport {
            env.push((key.into(), value.into()));
        }
        self
    }

    /// Sets an environment variable of a stdio server to a secret: read from a file or the
    /// host's environment when the server is started (never written in the configuration,
    /// never shown). One that cannot be read fails connecting with an error naming
    /// `servers.<id>.env_secrets.<KEY>`.
    ///
    /// ```
    /// use toolgate_mcp::{McpServerConfig, SecretSource};
    /// let gh = McpServerConfig::stdio("gh", "github-mcp-server")
    ///     .unwrap()
    ///     .env_secret("GITHUB_TOKEN", SecretSource::file("secrets/gh-token"));
    /// assert!(format!("{gh:?}").contains("secrets/gh-token"));
    /// ```
    pub fn env_secret(mut self, key: impl Into<String>, source: SecretSource) -> Self {
        if let Transport::Stdio { env_secrets, .. } = &mut self.transport {
            env_secrets.push((key.into(), source));
        }
        self
    }

    /// Sends an HTTP header with every request to a streamable HTTP server, its value a
    /// secret read from a file or the host's environment when connecting (never written in
    /// the configuration, never shown). One that cannot be read, or is no valid header
    /// value, fails connecting with an error naming `servers.<id>.headers.<Name>`.
    ///
    /// ```
    /// use toolgate_mcp::{McpServerConfig, SecretSource};
    /// let remote = McpServerConfig::streamable_http("remote", "http://127.0.0.1:8931/mcp")
    ///     .unwrap()
    ///     .header("Authorization", SecretSource::file("secrets/token").prefix("Bearer "))
    ///     .header("X-Team", SecretSource::env("TEAM"));
    /// assert_eq!(remote.id(), "remote");
    /// ```
    pub fn header(mut self, name: impl Into<String>, source: SecretSource) -> Self {
        if let Transport::StreamableHttp { headers, .. } = &mut self.transport {
            headers.push((name.into(), source));
        }
        self
    }

    /// Authenticates to a streamable HTTP server with an access token from OAuth 2.0 client
    /// credentials (see [`OAuthClientCredentials`]), sent as `Authorization: Bearer …`; an
    /// `Authorization` [`header`](Self::header) besides fails connecting.
    pub fn oauth(mut self, credentials: OAuthClientCredentials) -> Self {
        if let Transport::StreamableHttp { oauth, .. } = &mut self.transport {
            *oauth = Some(credentials);
        }
        self
    }

    /// Sends each `tools/call` to this streamable HTTP server with a token exchanged for the
    /// caller's (RFC 8693, see [`TokenExchange`]): on behalf of the caller's verified subject,
    /// the calling agent as actor. A call with no verified caller token is refused.
    pub fn token_exchange(mut self, exchange: TokenExchange) -> Self {
        if let Transport::StreamableHttp { token_exchange, .. } = &mut self.transport {
            *token_exchange = Some(Box::new(exchange));
        }
        self
    }

    /// The token exchange of this server, when its calls are sent on behalf of the caller.
    pub(crate) fn exchange(&self) -> Option<&TokenExchange> {
        match &self.transport {
            Transport::StreamableHttp { token_exchange, .. } => token_exchange.as_deref(),
            _ => None,
        }
    }

    /// Reads every secret of this server now (environment secrets, headers, the OAuth
    /// client secret), so a secret
    /// that cannot be read is an error at start rather than when connecting. Already read
    /// ones are kept.
    ///
    /// # Errors
    ///
    /// One error per secret that cannot be read, named by its field
    /// (`servers.<id>.headers.Authorization`) with the problem, never the value.
    ///
    /// ```
    /// use toolgate_mcp::{McpServerConfig, SecretSource};
    /// let err = McpServerConfig::stdio("gh", "github-mcp-server")
    ///     .unwrap()
    ///     .env_secret("GITHUB_TOKEN", SecretSource::env("TOOLGATE_DOC_UNSET"))
    ///     .load_secrets()
    ///     .unwrap_err();
    /// assert_eq!(err.errors[0].path, "servers.gh.env_secrets.GITHUB_TOKEN");
    /// ```
    pub fn load_secrets(mut self) -> Result<Self, ConfigErrors> {
        let mut errs = ConfigErrors::default();
        let path = format!("servers.{}", self.id);
        let load =
            |field: &str, list: &mut Vec<(String, SecretSource)>, errs: &mut ConfigErrors| {
                for (name, source) in list.iter_mut() {
                    match source.loaded() {
                        Ok(s) => *source = s,
                        Err(e) => errs.push(format!("{path}.{field}.{name}"), e.to_string()),
                    }
                }
            };
        match &mut self.transport {
            Transport::Stdio { env_secrets, .. } => load("env_secrets", env_secrets, &mut errs),
            Transport::StreamableHttp {
                headers,
                oauth,
                token_exchange,
                ..
            } => {
                load("headers", headers, &mut errs);
                if let Some(o) = oauth {
                    match o.client_secret.loaded() {
                        Ok(s) => o.client_secret = s,
                        Err(e) => errs.push(format!("{path}.oauth.client_secret"), e.to_string()),
                    }
                }
                if let Some(x) = token_exchange {
                    match x.client.client_secret.loaded() {
                        Ok(s) => x.client.client_secret = s,
                        Err(e) => {
                            errs.push(
                                format!("{path}.token_exchange.client_secret"),
                                e.to_string(),
                            );
                        }
                    }
                }
            }
            Transport::Custom => {}
        }
        if errs.is_empty() { Ok(self) } else { Err(errs) }
    }

    /// Hands a stdio server the host's whole environment, secrets included, instead of
    /// [`DEFAULT_INHERITED_ENV`].
    pub fn with_insecure_inherited_environment(mut self) -> Self {
        if let Transport::Stdio {
            inherit_all_env, ..
        } = &mut self.transport
        {
            *inherit_all_env = true;
        }
        self
    }

    /// Resolves a stdio server's relative paths against `dir` (the configuration file's
    /// folder): a relative `cwd`, a `command` given as a relative path (one with a `/`; a bare
    /// name is still looked up in `PATH`), and no `cwd` at all becomes `dir`, so relative
    /// `args` read from the configuration's folder too. The files of secrets (environment
    /// secrets, headers) given as relative paths are resolved against `dir` too.
    ///
    /// ```
    /// use std::path::Path;
    /// use toolgate_mcp::McpServerConfig;
    ///
    /// let dir = Path::new("/etc/tg");
    /// let c = McpServerConfig::stdio("fs", "bin/server").unwrap().relative_to(dir);
    /// let d = McpServerConfig::stdio("fs", "/etc/tg/bin/server").unwrap().current_dir(dir);
    /// assert_eq!(c, d);
    /// let node = McpServerConfig::stdio("fs", "node").unwrap().relative_to(dir);
    /// assert_eq!(node, McpServerConfig::stdio("fs", "node").unwrap().current_dir(dir), "`PATH`");
    /// ```
    pub fn relative_to(mut self, dir: &std::path::Path) -> Self {
        let resolve = |list: &mut Vec<(String, SecretSource)>| {
            for (_, source) in list.iter_mut() {
                *source = source.clone().relative_to(dir);
            }
        };
        match &mut self.transport {
            Transport::Stdio { env_secrets, .. } => resolve(env_secrets),
            Transport::StreamableHttp {
                headers,
                oauth,
                token_exchange,
                ca_file,
                client_identity,
                ..
            } => {
                resolve(headers);
                *oauth = oauth.take().map(|o| o.relative_to(dir));
                *token_exchange = token_exchange.take().map(|x| Box::new(x.relative_to(dir)));
                let at = |p: &mut PathBuf| {
                    if p.is_relative() {
                        *p = dir.join(&*p);
                    }
                };
                if let Some(p) = ca_file {
                    at(p);
                }
                if let Some((cert, key)) = client_identity {
                    at(cert);
                    at(key);
                }
            }
            Transport::Custom => {}
        }
        if let Transport::Stdio { program, cwd, .. } = &mut self.transport {
            let is_path = program.components().count() > 1;
            if is_path && program.is_relative() {
                *program = dir.join(&*program);
            }
            *cwd = Some(match cwd.take() {
                Some(c) if c.is_relative() => dir.join(c),
                Some(c) => c,
                None => dir.to_path_buf(),
            });
        }
        self
    }

    /// Sets a stdio server's working directory.
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        if let Transport::Stdio { cwd, .. } = &mut self.transport {
            *cwd = Some(dir.into());
        }
        self
    }

    /// Believes (or explicitly does not believe) the server's read-only annotations for
    /// the behaviour posture (R28). Unset, the governance configuration decides (a server
    /// it does not name is untrusted). Set here and in the configuration's `servers` entry
    /// too, both must say the same: different values fail connecting with an error naming
    /// both.
    pub fn trust_tool_annotations(mut self, yes: bool) -> Self {
        self.trust = Some(yes);
        self
    }

    /// The server is reached through an MCP gateway that lists each tool as `prefix`
    /// followed by the tool's own name, such as LiteLLM's `github-create_issue` (R41, seed
    /// 002). A tool listed as `github-create_issue` is then governed as `create_issue`: its
    /// identity, qualified name (`github__create_issue`), tenant rules, exemptions and
    /// posture all use the own name, and `tools/call` is still sent under the listed name.
    /// A listed name that does not start with the prefix (ASCII case-insensitively), or is
    /// only the prefix, keeps its listed name.
    ///
    /// Used as written, never trimmed; a blank prefix fails connecting. Unset, the
    /// configuration's `servers.<id>.tool_prefix` applies; set in both, they must be equal.
    ///
    /// ```
    /// use toolgate_mcp::McpServerConfig;
    /// let mem = McpServerConfig::stdio("mem", "litellm-proxy").unwrap().tool_prefix("mem-");
    /// assert_eq!(mem.prefix(), Some("mem-"));
    /// ```
    pub fn tool_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.tool_prefix = Some(prefix.into());
        self
    }

    /// The gateway tool prefix set on this config (R41), if any.
    pub fn prefix(&self) -> Option<&str> {
        self.tool_prefix.as_deref()
    }

    /// Withholds every tool of this server from confidential work (R7).
    pub fn confidential(mut self, yes: bool) -> Self {
        self.withheld = if yes { Withheld::All } else { Withheld::None };
        self
    }

    /// Withholds one tool (its own name, compared case-insensitively) from confidential
    /// work (R7).
    pub fn confidential_tool(mut self, tool: impl Into<String>) -> Self {
        match &mut self.withheld {
            Withheld::All => {}
            Withheld::Tools(tools) => tools.push(tool.into()),
            w @ Withheld::None => *w = Withheld::Tools(vec![tool.into()]),
        }
        self
    }

    /// The operator's word on the network scope of every tool of this server (R4, R8): it
    /// decides the effective scope outright, `openWorldHint` notwithstanding.
    pub fn network_override(mut self, scope: NetworkScope) -> Self {
        self.network_override = Some(scope);
        self
    }

    /// Declares the approval mode of one tool (its own name, case-insensitively; R4).
    pub fn approval(mut self, tool: impl Into<String>, mode: ApprovalMode) -> Self {
        self.approvals.push((tool.into(), mode));
        self
    }

    /// Re-lists the server's tools this often, besides on `notifications/tools/list_changed`,
    /// for servers that change without saying so.
    pub fn relist_every(mut self, every: Duration) -> Self {
        self.relist_every = Some(every);
        self
    }

    /// Bounds one listing: at most `pages` `tools/list` pages and `tools` tools. A server
    /// past either bound fails its listing (its tools are then refused until one succeeds).
    pub fn listing_bounds(mut self, pages: usize, tools: usize) -> Self {
        self.max_pages = pages.max(1);
        self.max_tools = tools;
        self
    }

    /// How long connecting, initialising and one listing may take.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// The server settings in force for this server, given what the governance snapshot
    /// already holds for it (`configured`): the snapshot's, where this config sets nothing
    /// else; this config's, where the snapshot has none. A trust or prefix set in both with
    /// different values is an error naming both ("configured twice").
    ///
    /// `prefix` is the prefix the gateway's listing of the server was built with, once
    /// connected: a snapshot that later says otherwise is a conflict too.
    pub(crate) fn settle(
        &self,
        configured: Option<&ServerSettings>,
        prefix: Option<Option<&str>>,
    ) -> Result<Option<ServerSettings>, ConfigErrors> {
        let path = format!("servers.{}", self.id);
        if let Some(p) = &self.tool_prefix
            && p.trim().is_empty()
        {
            return Err(ConfigErrors::one(
                format!("{path}.tool_prefix"),
                "`tool_prefix` must not be blank (R41)",
            ));
        }
        // The prefix the listing uses: the one connected with, else this config's, else the
        // snapshot's.
        let prefix: Option<String> = match prefix {
            Some(p) => p.map(str::to_owned),
            None => self
                .tool_prefix
                .clone()
                .or_else(|| configured.and_then(|c| c.tool_prefix.clone())),
        };
        let Some(configured) = configured else {
            return Ok(
                (self.trust.is_some() || prefix.is_some()).then(|| ServerSettings {
                    trust_tool_annotations: self.trust.unwrap_or(false),
                    tool_prefix: prefix,
                    labels: Vec::new(),
                }),
            );
        };
        let mut errs = ConfigErrors::default();
        if let Some(trust) = self.trust
            && trust != configured.trust_tool_annotations
        {
            errs.push(
                format!("{path}.trust_tool_annotations"),
                format!(
                    "server `{}` is configured twice with different trust: `trust_tool_annotations: {trust}` on the gateway's server config and `{}` in the governance configuration",
                    self.id, configured.trust_tool_annotations
                ),
            );
        }
        if prefix != configured.tool_prefix {
            let show = |p: &Option<String>| {
                p.as_ref()
                    .map_or_else(|| String::from("none"), |p| format!("`{p}`"))
            };
            errs.push(
                format!("{path}.tool_prefix"),
                format!(
                    "server `{}` is configured twice with different gateway prefixes (R41): {} on the gateway's server config and {} in the governance configuration",
                    self.id,
                    show(&prefix),
                    show(&configured.tool_prefix)
                ),
            );
        }
        if errs.is_empty() {
            Ok(Some(configured.clone()))
        } else {
            Err(errs)
        }
    }

    pub(crate) fn withholds(&self, tool: &str) -> bool {
        match &self.withheld {
            Withheld::None => false,
            Withheld::All => true,
            Withheld::Tools(tools) => tools.iter().any(|t| t.eq_ignore_ascii_case(tool)),
        }
    }

    pub(crate) fn network(&self) -> Option<NetworkScope> {
        self.network_override
    }

    pub(crate) fn approval_for(&self, tool: &str) -> ApprovalMode {
        self.approvals
            .iter()
            .rev()
            .find(|(t, _)| t.eq_ignore_ascii_case(tool))
            .map_or(ApprovalMode::Default, |(_, m)| *m)
    }

    /// The look-up key of the server id: normalised (R1) and lower-cased (R2), so ids that
    /// would give colliding qualified names are caught.
    pub(crate) fn key(&self) -> String {
        names::server_key(&self.id)
    }
}

#[cfg(test)]
mod tests;
