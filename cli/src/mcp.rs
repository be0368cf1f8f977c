//! `toolgate mcp serve`: toolgate as an MCP server in front of the MCP servers named in the
//! configuration's `mcp` section (serve.md). Every `tools/call` passes the composite
//! governed stack; see `toolgate_mcp::serve` for what is offered.
//!
//! On SIGHUP (Unix) the configuration file is read again and its governance (agents,
//! policy, posture, …) replaces the one in force; sessions whose list changed get
//! `notifications/tools/list_changed`. A configuration that does not load keeps the one in
//! force and says so on standard error. The `mcp` section's bearer tokens are re-read too
//! (a token removed from the list is refused from the next request on, and so are the
//! sessions opened with it), and so is `mcp.jwt`: its JWKS is read or fetched again, so a
//! key the identity provider removed stops verifying at once; its servers, call timeout and wire names, and the inbox, are
//! those the server started with: changing them needs a restart.
//!
//! Exit codes: 0 when the client went away (stdio); 2 a usage error, a configuration that
//! does not load (every error with its path), an upstream server that cannot be connected,
//! or a transport failure.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Subcommand;
use toolgate::GovernanceHandle;
use toolgate_engine::config::{self, Format};
use toolgate_inbox::Inbox;
use toolgate_inbox::InboxStoreSetting;
use toolgate_mcp::serve::{GovernedServer, ServeConfig};

#[derive(Debug, Subcommand)]
pub(crate) enum McpCommand {
    /// Serve MCP to a client: over stdio (the client starts `toolgate mcp serve --agent NAME`
    /// as its server), or over streamable HTTP on a loopback address with `--http`, each
    /// request authenticated by a bearer token of the configuration's `mcp.tokens`.
    Serve {
        /// The configuration (its `mcp` section names the upstream servers).
        #[arg(long)]
        config: PathBuf,
        /// The agent profile the client speaks for (stdio: required; HTTP: every request
        /// speaks for it with no token — anyone on this host can connect).
        #[arg(long)]
        agent: Option<String>,
        /// Serve streamable HTTP on this loopback address (e.g. 127.0.0.1:8931) instead of
        /// stdio.
        #[arg(long, value_name = "ADDR")]
        http: Option<SocketAddr>,
    },
    /// Write the definition lock (`toolgate.lock`, or `mcp.lock_file`): every upstream
    /// tool's definition hash, description hash and annotations, as the servers list them
    /// now. Findings of the description scanner are printed as warnings (none with
    /// `mcp.scan: "off"`).
    Lock {
        /// The configuration (its `mcp` section names the upstream servers).
        #[arg(long)]
        config: PathBuf,
        /// Compare instead of writing: exit 1 on any difference between the lock file and
        /// what the servers list now (for CI).
        #[arg(long)]
        check: bool,
    },
}

/// The top-level section `key` of a configuration text, when it parses and has one
/// (`toolgate check` and `toolgate config print` read `mcp` with [`ServeConfig`], `check`
/// reads `hooks` with [`toolgate_mcp::hooks::read_hooks`]).
pub(crate) fn section(text: &str, format: Format, key: &str) -> Option<serde_json::Value> {
    match config::parse_text(text, format).ok()? {
        serde_json::Value::Object(mut top) => top.remove(key),
        _ => None,
    }
}

pub(crate) fn run(command: McpCommand) -> Result<ExitCode, String> {
    let (path, agent, http) = match command {
        McpCommand::Serve {
            config,
            agent,
            http,
        } => (config, agent, http),
        McpCommand::Lock { config, check } => return crate::mcp_lock::run(&config, check),
    };
    let Loaded {
        governance,
        inbox_settings,
        serve,
        started,
    } = load(&path)?;
    if http.is_none() && agent.is_none() {
        return Err(String::from(
            "name the agent profile the client speaks for: `--agent NAME` (or serve HTTP with `--http ADDR`)",
        ));
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start: {e}"))?;
    rt.block_on(async move {
        let (inbox, shared_db) = open_inbox(inbox_settings.as_ref()).await?;
        if let Some(inbox) = &inbox {
            // Claims left by a process that stopped become `unknown` (R26).
            crate::recover::recover_at_start(&**inbox.store()).await;
        }
        // R44: the quotas' sends are counted in the inbox's store, so every `toolgate mcp
        // serve` process on it (one per client, replicas) shares one count: a SQLite inbox's
        // file, or a PostgreSQL inbox's database (each send's reservation awaited, atomic in
        // the database, an unreachable database refusing the call). With no inbox they are
        // counted in this process.
        let quota_file = match inbox_settings.as_ref().map(|s| &s.store) {
            Some(InboxStoreSetting::Sqlite(path)) => Some(path.clone()),
            _ => None,
        };
        // The inbox's stored policy (`toolgate policy put`) replaces the configuration's,
        // now and whenever it is put again (`crate::follow`).
        let store = inbox.as_ref().map(|i| Arc::clone(i.store()));
        let (governance, stamps) = match &store {
            Some(store) => {
                let (g, seen, shadow) = crate::follow::onto(&**store, governance).await?;
                (g, Some((seen, shadow)))
            }
            None => (governance, None),
        };
        let handle = GovernanceHandle::new(governance);
        if let Some(path) = quota_file {
            let counter = toolgate_inbox::SqliteQuotaCounter::open(&path)
                .map_err(|e| format!("inbox: {e}"))?;
            handle.set_quota_counter(Arc::new(counter));
        }
        if let Some(db) = &shared_db {
            let counter = toolgate_inbox_postgres::PostgresQuotaCounter::for_inbox(db)
                .await
                .map_err(|e| format!("inbox: {e}"))?;
            handle.set_async_quota_counter(Arc::new(counter));
        }
        let follower = match (&store, stamps) {
            (Some(store), Some((seen, shadow))) => Some(
                crate::follow::Follower::start(
                    handle.clone(),
                    Arc::clone(store),
                    shared_db.as_ref(),
                    seen,
                    shadow,
                )
                .await,
            ),
            _ => None,
        };
        // Decisions, waits, upstream latency and held calls on `/metrics`.
        let metrics = toolgate_otel::PrometheusMetrics::new().map_err(|e| e.to_string())?;
        let observe = crate::ops::mcp_observe(&metrics, store.clone());
        let server = GovernedServer::start_observed(handle, &serve, inbox, observe)
            .await
            .map_err(|e| format!("cannot serve MCP:\n{e}"))?;
        #[cfg(unix)]
        reload_on_hangup(
            path.clone(),
            &server,
            (started, serve.clone()),
            store,
            follower,
        )?;
        match http {
            Some(addr) => server
                .serve_http(addr, agent.as_deref(), |bound| {
                    eprintln!("toolgate: serving MCP (streamable HTTP) on http://{bound}/mcp");
                })
                .await
                .map_err(|e| e.to_string())?,
            None => server
                .serve_stdio(agent.as_deref().unwrap_or_default())
                .await
                .map_err(|e| e.to_string())?,
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// The configuration at `path` for `toolgate mcp serve`: the snapshot, the inbox's own
/// section read by the inbox, and the `mcp` section with its secrets read; any of them that
/// does not read stops here.
fn load(path: &std::path::Path) -> Result<Loaded, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
    let format = Format::from_path(path);
    // Relative paths are the configuration's folder's, whatever the working directory.
    let dir = config::config_dir(path);
    let refused = |e: &dyn std::fmt::Display| {
        format!("the configuration `{}` does not load:\n{e}", path.display())
    };
    let governance = config::load_str_in(&text, format, &dir).map_err(|e| refused(&e))?;
    // The sections other crates own (the page's, the inbox's): one that does not read stops
    // here.
    crate::config_file::owned_sections(&governance).map_err(|e| refused(&e))?;
    let inbox_settings =
        toolgate_inbox::InboxSettings::read(&governance).map_err(|e| refused(&e))?;
    let document = config::parse_text(&text, format).map_err(|e| refused(&e))?;
    let (_, serve) = ServeConfig::split(document).map_err(|e| refused(&e))?;
    // The upstream servers' secrets are read once, now: one that cannot be read stops here.
    let serve = serve
        .relative_to(&dir)
        .load_secrets()
        .map_err(|e| refused(&e))?;
    // R44: quotas count in one place (the inbox's store), unless the operator says otherwise.
    serve
        .check_quota_store(&governance)
        .map_err(|e| refused(&e))?;
    Ok(Loaded {
        started: section(&text, format, "mcp"),
        governance,
        inbox_settings,
        serve,
    })
}

/// What [`load`] read.
struct Loaded {
    governance: toolgate_engine::Governance,
    inbox_settings: Option<toolgate_inbox::InboxSettings>,
    serve: ServeConfig,
    /// The `mcp` section as written (a reload compares the new one with it).
    started: Option<serde_json::Value>,
}

/// The inbox the configuration names, opened, and its PostgreSQL store when it is one (its
/// database counts the quotas' sends too).
async fn open_inbox(
    settings: Option<&toolgate_inbox::InboxSettings>,
) -> Result<
    (
        Option<Inbox>,
        Option<toolgate_inbox_postgres::PostgresInbox>,
    ),
    String,
> {
    let mut shared_db = None;
    let inbox = match settings {
        None => None,
        Some(settings) => Some(match &settings.store {
            InboxStoreSetting::Sqlite(path) => {
                // Claims name this process, so a later start can tell it stopped.
                let mut options = toolgate_inbox::SqliteOptions::default()
                    .instance(crate::recover::process_instance());
                if settings.synchronous == Some(toolgate_inbox::InboxSynchronous::Full) {
                    options = options.synchronous(toolgate_inbox::Synchronous::Full);
                }
                let store = toolgate_inbox::SqliteInbox::open(path, options)
                    .map_err(|e| format!("inbox: {e}"))?;
                Inbox::new(store).with_ttl(settings.ttl.unwrap_or(toolgate_inbox::DEFAULT_TTL))
            }
            InboxStoreSetting::Postgres(url) => {
                let store = toolgate_inbox_postgres::PostgresInbox::connect(
                    url,
                    toolgate_inbox_postgres::PostgresOptions::default()
                        .instance(crate::recover::process_instance())
                        .plaintext_hosts_from_env(),
                )
                .await
                .map_err(|e| format!("inbox: {e}"))?;
                shared_db = Some(store.clone());
                let mut inbox = Inbox::shared(Arc::new(store));
                if let Some(ttl) = settings.ttl {
                    inbox = inbox.with_ttl(ttl);
                }
                inbox
            }
        }),
    };
    Ok((inbox, shared_db))
}
/// On SIGHUP, reads the configuration at `path` again and makes it the one in force; a failed
/// reload changes nothing and says why.
#[cfg(unix)]
fn reload_on_hangup(
    path: std::path::PathBuf,
    server: &GovernedServer,
    started: (Option<serde_json::Value>, ServeConfig),
    store: Option<Arc<dyn toolgate_inbox::InboxStore>>,
    follower: Option<crate::follow::Follower>,
) -> Result<(), String> {
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .map_err(|e| format!("cannot listen for SIGHUP: {e}"))?;
    let server = server.clone();
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            match reload(
                &path,
                &server,
                &started,
                store.as_deref(),
                follower.as_ref(),
            )
            .await
            {
                Ok(()) => {
                    eprintln!("toolgate: reloaded `{}`", path.display());
                    // An added or changed server that is not connected yet says so.
                    let (ready, body) = server.readiness().await;
                    if !ready {
                        eprintln!(
                            "toolgate: warning: not ready: {}",
                            body.get("not_ready").unwrap_or(&serde_json::Value::Null)
                        );
                    }
                }
                Err(e) => eprintln!(
                    "toolgate: RELOAD FAILED: `{}` was not applied; the configuration in force is unchanged:\n{e}",
                    path.display()
                ),
            }
        }
    });
    Ok(())
}

/// Reads the configuration at `path` again and makes its governance the one in force
/// (SIGHUP). `started` is the `mcp` section the server started with: a changed one is
/// reported, not applied.
#[cfg(unix)]
async fn reload(
    path: &std::path::Path,
    server: &GovernedServer,
    started: &(Option<serde_json::Value>, ServeConfig),
    store: Option<&dyn toolgate_inbox::InboxStore>,
    follower: Option<&crate::follow::Follower>,
) -> Result<(), String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
    let format = Format::from_path(path);
    let governance =
        config::load_str_in(&text, format, &config::config_dir(path)).map_err(|e| e.to_string())?;
    // The sections other crates own must read too (the inbox in force stays the one started
    // with).
    crate::config_file::owned_sections(&governance).map_err(|e| e.to_string())?;
    let document = config::parse_text(&text, format).map_err(|e| e.to_string())?;
    let now = section(&text, format, "mcp");
    // The new section must read (a broken file is never half applied). Its tokens replace the
    // ones in force (revocation without a restart), and so do its servers (added, removed
    // and changed ones; the others stay connected); the call timeout and wire names are the
    // ones the server started with.
    let (_, fresh) = ServeConfig::split(document).map_err(|e| e.to_string())?;
    let fresh = fresh
        .relative_to(&config::config_dir(path))
        .load_secrets()
        .map_err(|e| e.to_string())?;
    fresh
        .check_quota_store(&governance)
        .map_err(|e| e.to_string())?;
    let mut serve = started.1.clone();
    serve.tokens = fresh.tokens;
    serve.token_names = fresh.token_names;
    serve.servers = fresh.servers;
    // `mcp.jwt` too: its keys are read or fetched again, its claim mapping replaced.
    serve.jwt = fresh.jwt;
    let mut rest_now = now.clone();
    let mut rest_then = started.0.clone();
    for section in [&mut rest_now, &mut rest_then].into_iter().flatten() {
        if let Some(o) = section.as_object_mut() {
            o.remove("tokens");
            o.remove("jwt");
            o.remove("servers");
        }
    }
    if rest_now != rest_then {
        eprintln!(
            "toolgate: warning: the `mcp` section of `{}` changed; call_timeout_secs and wire_names take effect on restart (the ones in force are kept; servers, tokens and `jwt` were re-read)",
            path.display()
        );
    }
    // The inbox's stored policy stays in force over the configuration's.
    let governance = match store {
        Some(store) => crate::follow::onto(store, governance).await?.0,
        None => governance,
    };
    server
        .reload(governance, &serve)
        .await
        .map_err(|e| e.to_string())?;
    // A put made while the reload ran is looked at again.
    if let Some(f) = follower {
        f.again();
    }
    Ok(())
}
