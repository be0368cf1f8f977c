//! `toolgate serve`: the approval page over the configuration's inbox (see `toolgate-web`).
//!
//! `toolgate serve --config toolgate.json` finds the inbox as `toolgate inbox` does (the
//! configuration's `inbox` section, or `--db`/`--pg-url`/`TOOLGATE_PG_URL`), takes the
//! approvers from its `approvers` section, and listens on `approvers.listen` (default
//! `127.0.0.1:8788`). `toolgate serve hash-token` prints the `token_sha256` of a token.
//!
//! Each sign-in (and refused one, with the client's address), answer and policy save is
//! logged to standard error with the approver's name; never a token, session or CSRF token.
//!
//! Exit codes: 0 stopped by Ctrl-C; 2 a configuration without approvers, an inbox that
//! cannot be opened, or an address that cannot be bound.

use std::io::Read;
use std::net::SocketAddr;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use crate::config_file::load_config;
use crate::inbox::{StoreArgs, runtime};

/// `toolgate serve`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct ServeArgs {
    #[command(subcommand)]
    command: Option<ServeCommand>,
    #[command(flatten)]
    store: StoreArgs,
    /// Listen here instead of the configuration's `approvers.listen`.
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
}

#[derive(Debug, Subcommand)]
enum ServeCommand {
    /// Print the SHA-256 of a sign-in token, for an approver's `token_sha256`.
    HashToken {
        /// The token (read from standard input when left out, so it stays out of the
        /// shell's history).
        token: Option<String>,
    },
}

pub(crate) fn run(args: ServeArgs) -> Result<ExitCode, String> {
    if let Some(ServeCommand::HashToken { token }) = args.command {
        return hash_token(token);
    }
    let Some(path) = args.store.config.clone() else {
        return Err(String::from(
            "`toolgate serve` needs `--config FILE`: its `approvers` section says who may answer",
        ));
    };
    let gov = load_config(&path)?;
    let mut settings =
        toolgate_web::WebSettings::from_governance(&gov, &path).map_err(|e| e.to_string())?;
    // Each sign-in, answer and policy save is logged to standard error, with the approver's
    // name and never a token.
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(tracing_subscriber::filter::LevelFilter::INFO)
        .with_target(false)
        .try_init();
    if let Some(addr) = args.listen {
        settings.approvers.listen = addr;
    }
    let addr = settings.approvers.listen;
    let rt = runtime()?;
    rt.block_on(async move {
        // `approvers.auth: jwt`: the identity provider's keys, read or fetched now; on
        // SIGHUP a `jwks_file` is read again (a `jwks_url` is fetched again on its cache
        // lifetime and for an unknown key), so a removed key stops working at once.
        settings
            .connect_identity_provider()
            .await
            .map_err(|e| e.to_string())?;
        #[cfg(unix)]
        reload_on_hangup(&settings, &path)?;
        let (store, postgres) = args.store.open_shared(true).await?;
        // `/metrics` (the held calls pending, counted for each scrape).
        let metrics = toolgate_otel::PrometheusMetrics::new().map_err(|e| e.to_string())?;
        settings.metrics = Some(toolgate_web::WebMetrics::new(crate::ops::text(
            metrics,
            Some(std::sync::Arc::clone(&store)),
        )));
        let wake = inbox_wake(postgres, &mut settings).await?;
        let listener = listen(addr, &settings).await?;
        let stop = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        toolgate_web::serve_woken(listener, store, settings, wake, stop)
            .await
            .map_err(|e| format!("the approval page stopped: {e}"))?;
        Ok(ExitCode::SUCCESS)
    })
}

/// `toolgate serve hash-token`: the SHA-256 an `approvers.people[i].token_sha256` stores.
fn hash_token(token: Option<String>) -> Result<ExitCode, String> {
    let token = match token {
        Some(t) => t,
        None => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map_err(|e| format!("cannot read the token from standard input: {e}"))?;
            s.trim_end_matches(['\r', '\n']).to_owned()
        }
    };
    if token.trim().is_empty() {
        return Err(String::from("the token is empty"));
    }
    println!("{}", toolgate_web::hash_token(&token));
    Ok(ExitCode::SUCCESS)
}

/// On SIGHUP the configuration is read again too: its `approvers` (people, tokens, groups,
/// management keys, Slack users) and its tools replace the ones in force, so a revoked
/// token stops signing in and the sessions signed in with it end at their next request,
/// and a removed key, Slack user or narrowed right stops answering, granting and receiving
/// held calls. A file that does not read keeps the ones in force.
#[cfg(unix)]
fn reload_on_hangup(
    settings: &toolgate_web::WebSettings,
    path: &std::path::Path,
) -> Result<(), String> {
    let verifier = settings.verifier.clone();
    let in_force = settings.in_force.clone();
    let path = path.to_path_buf();
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .map_err(|e| format!("cannot listen for SIGHUP: {e}"))?;
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            // One snapshot, swapped whole: the people, groups, management keys and
            // Slack users, and the configuration grants and edits are checked
            // against, for every request, callback and stream.
            let people = load_config(&path).and_then(|gov| {
                toolgate_web::WebSettings::from_governance(&gov, &path)
                    .map_err(|e| e.to_string())?;
                in_force
                    .replace_configuration(std::sync::Arc::new(gov))
                    .map_err(|e| e.to_string())
            });
            match people {
                Ok(()) => eprintln!(
                    "toolgate: the approvers of `{}` were read again",
                    path.display()
                ),
                Err(e) => eprintln!(
                    "toolgate: RELOAD FAILED: the approvers of `{}` were not applied; the ones in force are unchanged: {e}",
                    path.display()
                ),
            }
            if let Some(verifier) = &verifier {
                match verifier.reload().await {
                    Ok(()) => eprintln!("toolgate: the identity provider's keys were read again"),
                    Err(e) => eprintln!(
                        "toolgate: RELOAD FAILED: the identity provider's keys could not be read, so no token is taken until they can: {e}"
                    ),
                }
            }
        }
    });
    Ok(())
}

/// A PostgreSQL inbox announces every change (LISTEN): pages update at once, and the poll
/// is only the fallback.
async fn inbox_wake(
    postgres: Option<toolgate_inbox_postgres::PostgresInbox>,
    settings: &mut toolgate_web::WebSettings,
) -> Result<Option<std::sync::Arc<tokio::sync::Notify>>, String> {
    Ok(match postgres {
        None => None,
        Some(pg) => {
            let mut feed = pg
                .subscribe()
                .await
                .map_err(|e| format!("cannot listen to the inbox's changes: {e}"))?;
            let wake = std::sync::Arc::new(tokio::sync::Notify::new());
            let notify = std::sync::Arc::clone(&wake);
            tokio::spawn(async move {
                while feed.next().await.is_some() {
                    notify.notify_one();
                }
            });
            settings.poll_interval = std::time::Duration::from_secs(10);
            Some(wake)
        }
    })
}

/// The page's listener on `addr`, announced (with a warning beyond loopback).
async fn listen(
    addr: std::net::SocketAddr,
    settings: &toolgate_web::WebSettings,
) -> Result<tokio::net::TcpListener, String> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    if !bound.ip().is_loopback() {
        eprintln!(
            "toolgate: warning: the approval page listens on {bound}, beyond this machine; put it behind TLS"
        );
    }
    let groups = match settings.approvers.groups.len() {
        0 => String::new(),
        1 => String::from(", 1 group"),
        n => format!(", {n} groups"),
    };
    eprintln!(
        "toolgate: the approval page is on http://{bound}/ ({} approver{}{groups}); Ctrl-C stops it",
        settings.approvers.people.len(),
        if settings.approvers.people.len() == 1 {
            ""
        } else {
            "s"
        }
    );
    Ok(listener)
}
