//! Connecting: starting or reaching a server, the handshake, the first listing and its
//! registration, then the watcher.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use rmcp::transport::IntoTransport;
use rmcp::{ClientCacheConfig, RoleClient, ServiceExt};
use tokio::sync::Notify;
use toolgate_engine::ServerSettings;

use super::McpGateway;
use super::conn::{
    GatewayClient, ServerConn, StderrTail, duplicate, forward_stderr, list_all, lock,
};
use super::drift::watch_server;
use super::error::GatewayError;
use crate::config::{DEFAULT_INHERITED_ENV, McpServerConfig, Transport};
use crate::declare::Listing;
use crate::drift::{DriftEvent, DriftTrigger};
use crate::relay::InFlight;
use crate::routes::Exchange;
use crate::secret::{Secret, SecretSource};

impl McpGateway {
    /// The server settings in force for `config` by the current snapshot; a conflict
    /// between the two is an error naming both.
    fn settle(&self, config: &McpServerConfig) -> Result<Option<ServerSettings>, GatewayError> {
        let governance = self.inner.handle.load();
        config
            .settle(governance.server_settings(config.id()), None)
            .map_err(|errors| GatewayError::Governance {
                server: config.id().to_owned(),
                errors,
            })
    }

    /// Starts (stdio) or reaches (streamable HTTP) a server, lists its tools and registers
    /// them. Returns the discovery as a drift event (every tool `Added`, plus any
    /// rejected). A stdio server that cannot be started, or that fails its handshake, is
    /// reported with the command line tried and the end of what it wrote to standard error.
    pub async fn connect(&self, config: McpServerConfig) -> Result<DriftEvent, GatewayError> {
        let id = config.id().to_owned();
        // Before anything is started (`connect_with` checks again, under the lock).
        if lock(&self.inner.conns).contains_key(&config.key()) {
            return Err(duplicate(&id));
        }
        self.settle(&config)?;
        match config.transport.clone() {
            Transport::Stdio {
                program,
                args,
                env,
                inherit_all_env,
                cwd,
                env_secrets,
            } => {
                let secret_env = read_env_secrets(&id, &env_secrets)?;
                let mut cmd = stdio_command(
                    &program,
                    &args,
                    (&env, inherit_all_env),
                    &secret_env,
                    cwd.as_deref(),
                );
                // The command line tried, for a report; the environment's values are never
                // shown.
                let line = command_line(&program, &args);
                // Our own stdio transport: the hot messages decoded by method or request id
                // (`crate::lines`).
                let (child, stderr) =
                    crate::lines::ChildTransport::spawn(&mut cmd).map_err(|e| {
                        GatewayError::Connect {
                            server: id.clone(),
                            message: format!("cannot start `{line}`: {e}"),
                        }
                    })?;
                let tail = stderr.map(|stderr| forward_stderr(id.clone(), stderr));
                let connected = self.connect_with(config, child).await;
                with_stderr_tail(connected, tail.as_ref(), &line).await
            }
            #[cfg(feature = "http")]
            Transport::StreamableHttp {
                url,
                headers,
                oauth,
                token_exchange,
                ca_file,
                client_identity,
                ..
            } => {
                // The project's one outbound client, with this server's TLS.
                let tls = toolgate_idp::OutboundTls {
                    ca_file,
                    client_identity,
                };
                self.connect_http(config, url, &headers, oauth, token_exchange, &tls)
                    .await
            }
            #[cfg(not(feature = "http"))]
            Transport::StreamableHttp { .. } => Err(GatewayError::Config(format!(
                "MCP server `{id}` is reached over streamable HTTP, which needs the `http` feature of toolgate-mcp"
            ))),
            Transport::Custom => Err(GatewayError::Config(format!(
                "MCP server `{id}` has a custom transport: connect it with `connect_with`"
            ))),
        }
    }

    /// Reaches a streamable HTTP server through the project's outbound client with `tls`:
    /// its secret headers, or its OAuth 2.0 access tokens, and its token exchange (RFC 8693)
    /// read and checked first.
    #[cfg(feature = "http")]
    async fn connect_http(
        &self,
        config: McpServerConfig,
        url: String,
        headers: &[(String, SecretSource)],
        oauth: Option<crate::oauth::OAuthClientCredentials>,
        token_exchange: Option<Box<crate::oauth::TokenExchange>>,
        tls: &toolgate_idp::OutboundTls,
    ) -> Result<DriftEvent, GatewayError> {
        use rmcp::transport::StreamableHttpClientTransport;
        use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
        let id = config.id();
        // `https://`, or plain `http://` to loopback or where the operator opted
        // this server in; checked again here for a config made in code.
        if let Some(why) = config.url_problem() {
            return Err(GatewayError::Config(format!("servers.{id}.url: {why}")));
        }
        let client = toolgate_idp::FetchClient::with_tls(tls)
            .map_err(|e| GatewayError::Config(format!("servers.{id}: {e}")))?;
        let custom = super::http::secret_headers(id, headers)?;
        let transport_config =
            StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(custom);
        let tokens = oauth_tokens(id, oauth, headers, config.request_timeout).await?;
        // RFC 8693: each call on behalf of its caller, with a token exchanged for the
        // caller's (checked now: the secret, the endpoint, its trust).
        let exchange = match token_exchange {
            None => None,
            Some(x) => Some(Arc::new(
                crate::exchange::Exchanger::new(id, &url, *x, config.request_timeout)
                    .map_err(GatewayError::Config)?,
            )),
        };
        let upstream = super::http::UpstreamHttpClient {
            http: client.reqwest().clone(),
            tokens,
        };
        let transport = StreamableHttpClientTransport::with_client(upstream, transport_config);
        let connected = self.connect_inner(config, transport, exchange).await;
        with_tls_reason(connected, &client, &url).await
    }

    /// As [`connect`](Self::connect), over a transport you made (any rmcp client
    /// transport: an in-process pipe, a socket, …). A server with a
    /// [`TokenExchange`](crate::TokenExchange) is refused: only toolgate's own HTTP client
    /// sends a call with the token exchanged for its caller.
    pub async fn connect_with<T, E, A>(
        &self,
        config: McpServerConfig,
        transport: T,
    ) -> Result<DriftEvent, GatewayError>
    where
        T: IntoTransport<RoleClient, E, A> + Send + 'static,
        E: std::error::Error + Send + Sync + 'static,
    {
        if config.exchange().is_some() {
            return Err(GatewayError::Config(format!(
                "servers.{}.token_exchange: a transport you made would not send the token exchanged for each caller: connect the server with `connect`",
                config.id()
            )));
        }
        self.connect_inner(config, transport, Exchange::default())
            .await
    }

    /// Connects over `transport`, calls to the server made on behalf of their callers
    /// through `exchange` when it has one.
    async fn connect_inner<T, E, A>(
        &self,
        config: McpServerConfig,
        transport: T,
        exchange: Exchange,
    ) -> Result<DriftEvent, GatewayError>
    where
        T: IntoTransport<RoleClient, E, A> + Send + 'static,
        E: std::error::Error + Send + Sync + 'static,
    {
        let id = config.id().to_owned();
        let key = config.key();
        if lock(&self.inner.conns).contains_key(&key) {
            return Err(duplicate(&id));
        }
        // Trust and prefix are set once (R41, seed 002): before the server is reached, the
        // gateway's word and the configuration's must agree. Registering checks again.
        let prefix = self.settle(&config)?.and_then(|s| s.tool_prefix);
        let relist = Arc::new(Notify::new());
        let inflight = Arc::new(InFlight::default());
        let client = GatewayClient {
            relist: Arc::clone(&relist),
            inflight: Arc::clone(&inflight),
            relay_requests: self.inner.relay_requests,
            server: Arc::from(id.as_str()),
            content: self.inner.content.clone(),
        };
        // Counted: a call's result waits for the notifications read before it (see
        // `crate::arrivals`).
        let transport = crate::arrivals::Counted::new(
            transport.into_transport(),
            Arc::clone(&inflight.arrivals),
        );
        let running =
            match tokio::time::timeout(config.request_timeout, client.serve(transport)).await {
                Ok(Ok(r)) => r,
                Ok(Err(e)) => {
                    return Err(GatewayError::Connect {
                        server: id,
                        message: error_chain(&e),
                    });
                }
                Err(_) => {
                    return Err(GatewayError::Connect {
                        server: id,
                        message: format!(
                            "the handshake took longer than {:?}",
                            config.request_timeout
                        ),
                    });
                }
            };
        let peer = running.peer().clone();
        // Every listing must be the server's word now: no cached, no stale list (a cached
        // list would hide a rug pull until it expired).
        peer.set_response_cache_config(ClientCacheConfig::disabled())
            .await;
        let reported_name = peer
            .peer_info()
            .and_then(|info| info.server_info.as_ref().map(|s| s.name.clone()));
        tracing::info!(
            target: "toolgate_mcp::drift",
            server = id.as_str(),
            reported_name = reported_name.as_deref().unwrap_or(""),
            "connected to MCP server `{id}`"
        );
        let tools = match list_all(&peer, &config).await {
            Ok(t) => t,
            Err(message) => {
                return Err(GatewayError::Listing {
                    server: id,
                    message,
                });
            }
        };
        let conn = Arc::new(ServerConn {
            key: key.clone(),
            prefix,
            peer,
            inflight,
            running: Mutex::new(Some(running)),
            relist,
            listing_lock: tokio::sync::Mutex::new(()),
            listing: ArcSwap::from_pointee(Listing::default()),
            stale: Mutex::new(None),
            reported_name,
            exchange,
            config,
        });
        let _listing = conn.listing_lock.lock().await;
        let event = {
            let _reg = self.inner.register.lock().await;
            {
                let mut conns = lock(&self.inner.conns);
                if conns.contains_key(&key) {
                    return Err(duplicate(&id));
                }
                conns.insert(key.clone(), Arc::clone(&conn));
            }
            match self
                .inner
                .apply(&conn, &tools, DriftTrigger::Discovery, true)
            {
                Ok(event) => event,
                Err(errors) => {
                    lock(&self.inner.conns).remove(&key);
                    self.inner.publish_state();
                    return Err(GatewayError::Governance { server: id, errors });
                }
            }
        };
        drop(_listing);
        self.inner.emit(&event);
        let weak = Arc::downgrade(&self.inner);
        let alive = self.inner.alive.clone();
        tokio::spawn(watch_server(weak, conn, alive));
        Ok(event)
    }
}

/// `program` and `args` as a person would type them (an argument with a space or a quote
/// in single quotes).
fn command_line(program: &std::path::Path, args: &[String]) -> String {
    let word = |w: &str| {
        if !w.is_empty()
            && w.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@+%".contains(c))
        {
            w.to_owned()
        } else {
            format!("'{}'", w.replace('\'', "'\\''"))
        }
    };
    std::iter::once(word(&program.to_string_lossy()))
        .chain(args.iter().map(|a| word(a)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The values of a stdio server's `env_secrets`, read now; every one that cannot be read is
/// an error naming its field (never a value).
fn read_env_secrets<'a>(
    id: &str,
    env_secrets: &'a [(String, SecretSource)],
) -> Result<Vec<(&'a String, Secret)>, GatewayError> {
    let mut errors = toolgate_engine::ConfigErrors::default();
    let mut secret_env = Vec::new();
    for (k, source) in env_secrets {
        match source.read() {
            Ok(v) => secret_env.push((k, v)),
            Err(e) => {
                errors.push(format!("servers.{id}.env_secrets.{k}"), e.to_string());
            }
        }
    }
    if !errors.is_empty() {
        return Err(GatewayError::Secret {
            server: id.to_owned(),
            errors,
        });
    }
    Ok(secret_env)
}

/// The command that starts a stdio server: its arguments, its environment (only the
/// default inherited variables unless it inherits all, then `env` and the secrets), its
/// folder; killed when dropped.
fn stdio_command(
    program: &std::path::Path,
    args: &[String],
    (env, inherit_all_env): (&[(String, String)], bool),
    secret_env: &[(&String, Secret)],
    cwd: Option<&std::path::Path>,
) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args);
    if !inherit_all_env {
        cmd.env_clear();
        for key in DEFAULT_INHERITED_ENV {
            if let Some(v) = std::env::var_os(key) {
                cmd.env(key, v);
            }
        }
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    for (k, v) in secret_env {
        cmd.env(k, v.expose());
    }
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    cmd.kill_on_drop(true);
    cmd
}

/// A stdio server's failed connection, with the command line tried and the end of what it
/// wrote to standard error.
async fn with_stderr_tail(
    connected: Result<DriftEvent, GatewayError>,
    tail: Option<&StderrTail>,
    line: &str,
) -> Result<DriftEvent, GatewayError> {
    match connected {
        Err(GatewayError::Connect { server, message }) => {
            let said = match tail {
                Some(t) => t.read(Duration::from_millis(500)).await,
                None => String::new(),
            };
            let said = if said.is_empty() {
                String::from("; it wrote nothing to standard error")
            } else {
                format!("; its standard error ended with:\n{said}")
            };
            Err(GatewayError::Connect {
                server,
                message: format!("{message} (the command was `{line}`){said}"),
            })
        }
        other => other,
    }
}

/// The access tokens of a server that authenticates with OAuth 2.0 client credentials
/// (never beside an `Authorization` header), the first one fetched now.
#[cfg(feature = "http")]
async fn oauth_tokens(
    id: &str,
    oauth: Option<crate::oauth::OAuthClientCredentials>,
    headers: &[(String, SecretSource)],
    request_timeout: Duration,
) -> Result<Option<Arc<super::http::Tokens>>, GatewayError> {
    let Some(oauth) = oauth else {
        return Ok(None);
    };
    if headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("authorization"))
    {
        return Err(GatewayError::Config(format!(
            "servers.{id}.headers.Authorization: the server authenticates with `oauth`, which sends the `Authorization` header: give one of them"
        )));
    }
    let tokens = super::http::Tokens::new(id, oauth, request_timeout)?;
    // The first token now: a token endpoint that refuses fails connecting.
    tokens.current().await.map_err(|e| GatewayError::Connect {
        server: id.to_owned(),
        message: e.to_string(),
    })?;
    Ok(Some(Arc::new(tokens)))
}

/// An error and each of its sources, once each: a TLS failure's reason (an unknown CA, a
/// name the certificate is not for) is several levels below the transport's own message.
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = Some(e);
    while let Some(err) = next {
        let said = err.to_string();
        if !parts.iter().any(|p| p.contains(&said)) {
            parts.push(said);
        }
        next = err.source();
    }
    parts.join(": ")
}

/// A failed connection to an `https://` server, with the TLS reason when there is one: the
/// transport keeps only its own message, so one plain request through the same client says
/// why (an unknown CA, a name the certificate is not for, no client certificate).
#[cfg(feature = "http")]
async fn with_tls_reason(
    connected: Result<DriftEvent, GatewayError>,
    client: &toolgate_idp::FetchClient,
    url: &str,
) -> Result<DriftEvent, GatewayError> {
    let Err(GatewayError::Connect { server, message }) = connected else {
        return connected;
    };
    let https = url
        .get(..8)
        .is_some_and(|s| s.eq_ignore_ascii_case("https://"));
    let reason = if https {
        client
            .get(url, &[], 1024, Duration::from_secs(5))
            .await
            .err()
            .map(|why| why.to_string())
            .filter(|why| {
                why.contains("certificate") || why.contains("handshake") || why.contains("tls")
            })
    } else {
        None
    };
    Err(GatewayError::Connect {
        server,
        message: match reason {
            Some(why) => format!("{message} (TLS: {why})"),
            None => message,
        },
    })
}
