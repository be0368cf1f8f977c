//! `toolgate grant …`: grants kept in an inbox (SPEC R45) — a person's answer given in
//! advance for matching calls, until it expires, is spent or is revoked.
//!
//! The inbox is found as for `toolgate inbox` (`--db`, `--pg-url`, `--config`'s `inbox`,
//! `TOOLGATE_PG_URL`). With `--config`, the grant is checked against the configuration: a
//! configuration with an `approvers` section takes grants only from its approvers (`--as`),
//! each for what their `tools` selectors cover, and revocations likewise.
//!
//! Exit codes: 0 success; 1 a refused revocation (no grant has the id, or it ended already:
//! expired, spent or revoked); 2 a usage error (every problem named by its option), a grant
//! the approver has no rights to give or revoke, or an inbox that cannot be opened or read.

use std::process::ExitCode;
use std::time::Duration;

use clap::Subcommand;
use serde_json::Value;
use toolgate_engine::ConfigErrors;
use toolgate_inbox::{GrantRequest, RevokeError, StoredGrant, Timestamp, grant_summary_line};

use crate::approver::CredentialArgs;
use crate::config_file::load_config;
use crate::inbox::{StoreArgs, acting_for, print_json, runtime};

#[derive(Debug, Subcommand)]
pub(crate) enum GrantCommand {
    /// Give a grant: matching calls that would be asked run without asking, until it
    /// expires (`--for`), is spent (`--max-calls`) or is revoked. A grant never turns a
    /// refusal into a run and never changes what an agent is shown.
    Add {
        #[command(flatten)]
        store: StoreArgs,
        /// The calling agent's profile (or a subagent's id); `*` patterns.
        #[arg(long)]
        agent: String,
        /// The tool's own name; `*` patterns.
        #[arg(long)]
        tool: String,
        /// Only the tool of this MCP server (`*` patterns).
        #[arg(long)]
        server: Option<String>,
        /// Only tools of this kind (`mcp`, `http`, `local`).
        #[arg(long)]
        kind: Option<String>,
        /// Only calls whose input passes these tests (a tenant rule's `when`, JSON).
        #[arg(long, value_name = "JSON")]
        when: Option<String>,
        /// Only calls of this session.
        #[arg(long, value_name = "SESSION")]
        session: Option<String>,
        /// How long it answers calls (`30m`, `2h`, `1d`).
        #[arg(long = "for", value_name = "DURATION")]
        lasts: String,
        /// How many sends it answers at most.
        #[arg(long = "max-calls", value_name = "N")]
        max_calls: Option<u64>,
        /// Who gives it. With `--config` naming approvers, the approver whose credential is
        /// given (`--credential-file`); `--as` then only confirms the name.
        #[arg(long = "as", value_name = "NAME")]
        granted_by: Option<String>,
        #[command(flatten)]
        credential: CredentialArgs,
        /// Why (recorded with every call it answers).
        #[arg(long)]
        reason: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// List the grants, in the order given, each with its state (live, expired, spent,
    /// revoked) and uses.
    List {
        #[command(flatten)]
        store: StoreArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a live grant: it answers no call from now on.
    Revoke {
        /// The grant's id.
        id: String,
        #[command(flatten)]
        store: StoreArgs,
        /// Who revokes it. With `--config` naming approvers, the approver whose credential
        /// is given (`--credential-file`), with rights over it.
        #[arg(long = "as", value_name = "NAME")]
        by: Option<String>,
        #[command(flatten)]
        credential: CredentialArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

type Outcome = Result<ExitCode, String>;

/// The option a field of a grant is given with.
fn option_of(field: &str) -> String {
    let (head, rest) = match field.split_once('.') {
        Some((h, r)) => (h, Some(r)),
        None => (field, None),
    };
    let flag = match head {
        "granted_by" => "--as",
        "lasts" | "expires_at" => "--for",
        "max_calls" => "--max-calls",
        "" => "the grant",
        other => {
            return format!(
                "`--{other}`{}",
                rest.map(|r| format!(" at `{r}`")).unwrap_or_default()
            );
        }
    };
    format!("`{flag}`")
}

fn named(errs: ConfigErrors) -> String {
    errs.errors
        .iter()
        .map(|e| format!("{}: {}", option_of(&e.path), e.message))
        .collect::<Vec<_>>()
        .join("\n")
}

pub(crate) fn run_grant(command: GrantCommand) -> Outcome {
    let rt = runtime()?;
    rt.block_on(async move {
        match command {
            GrantCommand::Add {
                store,
                agent,
                tool,
                server,
                kind,
                when,
                session,
                lasts,
                max_calls,
                granted_by,
                credential,
                reason,
                json,
            } => {
                let acting = acting_for(&store, granted_by.as_deref(), &credential).await??;
                let (granted_by, principal) = (acting.name, acting.principal);
                let lasts: Duration = humantime::parse_duration(&lasts)
                    .map_err(|e| format!("`--for`: `{lasts}` is not a duration: {e}"))?;
                let request = GrantRequest {
                    agent,
                    tool,
                    server,
                    kind,
                    when,
                    session,
                    lasts,
                    max_calls,
                    granted_by,
                    reason,
                };
                let gov = match &store.config {
                    Some(path) => load_config(path)?,
                    None => toolgate_engine::Governance::builder()
                        .build()
                        .map_err(|e| e.to_string())?,
                };
                let now = Timestamp::now();
                let grant = request.build(&gov, now).map_err(named)?;
                // A new SQLite inbox file is made for the first grant (as for `policy put`).
                let inbox = store.open(true).await?;
                let stored = inbox
                    .add_grant_as(&grant, principal.as_ref(), now)
                    .await
                    .map_err(|e| e.to_string())?;
                if json {
                    print_json(&stored.to_json(now));
                } else {
                    println!("{}", grant_summary_line(&stored, now));
                }
                Ok(ExitCode::SUCCESS)
            }
            GrantCommand::List { store, json } => {
                let grants = store
                    .open(false)
                    .await?
                    .grants()
                    .await
                    .map_err(|e| e.to_string())?;
                let now = Timestamp::now();
                if json {
                    print_json(&Value::Array(
                        grants.iter().map(|g| g.to_json(now)).collect(),
                    ));
                } else if grants.is_empty() {
                    println!("no grants");
                } else {
                    for g in &grants {
                        println!("{}", grant_summary_line(g, now));
                    }
                }
                Ok(ExitCode::SUCCESS)
            }
            GrantCommand::Revoke {
                id,
                store,
                by,
                credential,
                json,
            } => {
                let by = acting_for(&store, by.as_deref(), &credential).await??.name;
                let inbox = store.open(false).await?;
                if let Some(path) = &store.config {
                    let gov = load_config(path)?;
                    let grants = inbox.grants().await.map_err(|e| e.to_string())?;
                    if let Some(g) = grants.iter().find(|g| g.grant.id() == id) {
                        toolgate_inbox::may_revoke(&gov, &by, &g.grant)
                            .map_err(|e| format!("`--as`: {e}"))?;
                    }
                }
                let now = Timestamp::now();
                match inbox.revoke_grant(&id, &by, now).await {
                    Ok(g) => {
                        print_revoked(&g, now, json);
                        Ok(ExitCode::SUCCESS)
                    }
                    Err(RevokeError::Store(e)) => Err(e.to_string()),
                    Err(refused) => {
                        eprintln!("toolgate: {refused}");
                        Ok(ExitCode::from(1))
                    }
                }
            }
        }
    })
}

fn print_revoked(g: &StoredGrant, now: Timestamp, json: bool) {
    if json {
        print_json(&g.to_json(now));
    } else {
        println!("{}", grant_summary_line(g, now));
    }
}
