//! `toolgate inbox …` and `toolgate policy …`: held calls, their sessions and turns, and the
//! stored tenant policy in an inbox database (SPEC R22, R26, R43).
//!
//! Every command finds its inbox with `--db PATH` (SQLite), `--pg-url URL` (PostgreSQL), the
//! `inbox` section of `--config FILE`, or else `TOOLGATE_PG_URL`, names itself in its claims
//! with this process's instance and, on opening it, marks `unknown` the calls left `claimed`
//! by a toolgate process that stopped (`crate::recover`; `inbox recover` does only that).
//!
//! Exit codes: 0 success; 1 a refused answer (an id the inbox did not issue, a call already
//! decided or expired, an idempotency key that answered the other way), a refused policy
//! (the stored one is unchanged: invalid, or, with `policy put --if-updated-at`, saved by
//! someone else since), or a stored policy `policy get` cannot read (R22, seed 002: `put` a
//! corrected one); 2 a usage error, a held call `show` cannot find, or a
//! database that cannot be opened or read.

use std::fmt::Write as _;
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use std::sync::Arc;

use crate::approver::{Acting, CredentialArgs, acting};
use crate::config_file::load_config;
use clap::{Args, Subcommand};
use serde_json::{Value, json};
use toolgate_engine::policy::{Limits, Policy};
use toolgate_inbox::{
    Answer, AnswerError, AnswerReceipt, HeldRecord, InboxStore, MAX_REASON_CHARS, PutPolicyError,
    SqliteInbox, SqliteOptions, State, Synchronous, Timestamp, put_policy_text,
    put_policy_text_if_unchanged,
};
use toolgate_inbox::{InboxSettings, InboxStoreSetting, InboxSynchronous};
use toolgate_inbox_postgres::{PostgresInbox, PostgresOptions};

mod policy;
mod show;

pub(crate) use policy::{PolicyCommand, run_policy};
use show::{age, agent_text, receipt_json, record_json, show_text, summary_json};

/// Where the inbox is: `--db PATH` (SQLite), `--pg-url URL` (PostgreSQL), or the `inbox`
/// section of `--config FILE`; with none of them, the URL in `TOOLGATE_PG_URL`.
#[derive(Debug, Clone, Args)]
pub(crate) struct StoreArgs {
    /// The inbox database file (SQLite).
    #[arg(long, value_name = "PATH")]
    db: Option<PathBuf>,
    /// A PostgreSQL inbox (default: `TOOLGATE_PG_URL` when neither `--db` nor `--config`
    /// names a store).
    #[arg(long = "pg-url", value_name = "URL")]
    pg_url: Option<String>,
    /// A configuration whose `inbox` section names the store (and whose `limits` a policy
    /// is validated under).
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum InboxCommand {
    /// List held calls, oldest first.
    List {
        #[command(flatten)]
        store: StoreArgs,
        /// Only calls in this state (pending, approved, denied, expired, cancelled, claimed,
        /// done, failed, unknown).
        #[arg(long)]
        state: Option<String>,
        /// Only calls held in this session (R43), a subagent's included.
        #[arg(long, value_name = "SESSION")]
        session: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show one held call: the approval interaction (prompt, tool, every reason, the full
    /// input), its session and turn, its age and state.
    Show {
        /// The interaction id.
        id: String,
        #[command(flatten)]
        store: StoreArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Approve one held call. Without an idempotency key the answer is its own; the same
    /// key twice is one approval.
    Approve {
        /// The interaction id.
        id: String,
        #[command(flatten)]
        store: StoreArgs,
        /// Makes the answer idempotent: repeating it with the same key is one answer.
        #[arg(long = "idempotency-key", value_name = "KEY")]
        idempotency_key: Option<String>,
        /// Who approves. With `--config` naming an `approvers` section, the approver whose
        /// credential is given (`--credential-file`), with rights over the call's tool; `--as`
        /// then only confirms the name.
        #[arg(long = "as", value_name = "NAME")]
        approver: Option<String>,
        #[command(flatten)]
        credential: CredentialArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Deny one held call.
    Deny {
        /// The interaction id.
        id: String,
        #[command(flatten)]
        store: StoreArgs,
        /// Who denies. With `--config` naming an `approvers` section, the approver whose
        /// credential is given (`--credential-file`), with rights over the call's tool.
        #[arg(long = "as", value_name = "NAME")]
        approver: Option<String>,
        #[command(flatten)]
        credential: CredentialArgs,
        /// Why (shown to the agent).
        #[arg(long)]
        reason: Option<String>,
        /// Makes the answer idempotent: repeating it with the same key is one answer.
        #[arg(long = "idempotency-key", value_name = "KEY")]
        idempotency_key: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Cancel a turn: each of its held calls not yet sent (pending, or approved and not
    /// yet claimed) ends `cancelled` (R43, R47).
    CancelTurn {
        /// The session.
        session: String,
        /// The turn.
        turn: String,
        #[command(flatten)]
        store: StoreArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Mark `unknown` the calls left `claimed` by a toolgate process of this machine that
    /// stopped before recording their result (every inbox command, `serve` and `mcp serve`
    /// do it at start, too). An `unknown` call is never sent again automatically; a repeat
    /// of it is told so (R26).
    Recover {
        #[command(flatten)]
        store: StoreArgs,
        /// Also the calls claimed by this instance name (a library host's, or a process on
        /// another machine): only once it is known to have stopped.
        #[arg(long, value_name = "NAME")]
        instance: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

type Outcome = Result<ExitCode, String>;

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start: {e}"))
}

impl StoreArgs {
    /// The limits a policy is validated under: the configuration's, or the defaults.
    fn limits(&self) -> Result<Limits, String> {
        match &self.config {
            Some(path) => Ok(load_config(path)?.settings().limits),
            None => Ok(Limits::default()),
        }
    }

    /// Opens the store: `--db`, `--pg-url`, `--config`'s `inbox`, then `TOOLGATE_PG_URL`.
    /// `create`: a missing SQLite file is created (for `policy put`).
    pub(crate) async fn open(&self, create: bool) -> Result<Arc<dyn InboxStore>, String> {
        Ok(self.open_shared(create).await?.0)
    }

    /// As [`StoreArgs::open`], and for a PostgreSQL inbox also the inbox itself (for its
    /// change feed, `PostgresInbox::subscribe`).
    pub(crate) async fn open_shared(
        &self,
        create: bool,
    ) -> Result<(Arc<dyn InboxStore>, Option<PostgresInbox>), String> {
        let opened = self.open_without_recovery(create).await?;
        // Claims left by a process that stopped become `unknown` (R26).
        crate::recover::recover_at_start(&*opened.0).await;
        Ok(opened)
    }

    /// As [`StoreArgs::open_shared`], without recovering stopped processes' claims first.
    /// The store's instance is this process's ([`crate::recover::process_instance`]).
    pub(crate) async fn open_without_recovery(
        &self,
        create: bool,
    ) -> Result<(Arc<dyn InboxStore>, Option<PostgresInbox>), String> {
        if self.db.is_some() && self.pg_url.is_some() {
            return Err(String::from("give `--db` or `--pg-url`, not both"));
        }
        let mut synchronous = None;
        let target = if let Some(db) = &self.db {
            Target::Sqlite(db.clone())
        } else if let Some(url) = &self.pg_url {
            Target::Postgres(url.clone())
        } else if let Some(path) = &self.config {
            let gov = load_config(path)?;
            // The inbox's own section, read by the inbox: one that does not read is refused.
            let settings = InboxSettings::read(&gov).map_err(|e| {
                format!("the configuration `{}` does not load:\n{e}", path.display())
            })?;
            let Some(inbox) = settings else {
                return Err(format!(
                    "the configuration `{}` has no `inbox` section; give `--db PATH` or `--pg-url URL`",
                    path.display()
                ));
            };
            synchronous = inbox.synchronous;
            match &inbox.store {
                InboxStoreSetting::Sqlite(p) => Target::Sqlite(PathBuf::from(p)),
                InboxStoreSetting::Postgres(u) => Target::Postgres(u.clone()),
            }
        } else if let Some(url) = std::env::var("TOOLGATE_PG_URL")
            .ok()
            .filter(|u| !u.trim().is_empty())
        {
            Target::Postgres(url)
        } else {
            return Err(String::from(
                "no inbox given: `--db PATH`, `--pg-url URL`, `--config FILE` with an `inbox` section, or `TOOLGATE_PG_URL`",
            ));
        };
        match target {
            Target::Sqlite(path) => {
                let mut options = SqliteOptions::default()
                    .create(create)
                    .instance(crate::recover::process_instance());
                if synchronous == Some(InboxSynchronous::Full) {
                    options = options.synchronous(Synchronous::Full);
                }
                let store = SqliteInbox::open(&path, options).map_err(|e| e.to_string())?;
                Ok((Arc::new(store), None))
            }
            Target::Postgres(url) => {
                let options = PostgresOptions::default()
                    .instance(crate::recover::process_instance())
                    .plaintext_hosts_from_env();
                let store = PostgresInbox::connect(&url, options)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok((Arc::new(store.clone()), Some(store)))
            }
        }
    }
}

enum Target {
    Sqlite(PathBuf),
    Postgres(String),
}

pub(crate) fn print_json(v: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
    );
}

pub(crate) fn run_inbox(command: InboxCommand) -> Outcome {
    let rt = runtime()?;
    rt.block_on(async move {
        match command {
            InboxCommand::List {
                store,
                state,
                session,
                json,
            } => list(&*store.open(false).await?, state, session, json).await,
            InboxCommand::Show { id, store, json } => {
                show(&*store.open(false).await?, &id, json).await
            }
            InboxCommand::Approve {
                id,
                store,
                idempotency_key,
                approver,
                credential,
                json,
            } => {
                let acting = match acting_for(&store, approver.as_deref(), &credential).await? {
                    Ok(a) => a,
                    Err(why) => {
                        eprintln!("toolgate: {why}");
                        return Ok(ExitCode::from(1));
                    }
                };
                let opened = store.open(false).await?;
                if let Err(why) = may_answer(&acting, &*opened, &id).await? {
                    eprintln!("toolgate: {why}");
                    return Ok(ExitCode::from(1));
                }
                let mut answer = Answer::approved_by(acting.name);
                answer.principal = acting.principal;
                answer.idempotency_key = idempotency_key;
                answer_cmd(&*opened, &id, answer, json).await
            }
            InboxCommand::Deny {
                id,
                store,
                approver,
                credential,
                reason,
                idempotency_key,
                json,
            } => {
                // Checked before the inbox is opened: a usage error naming the option.
                if let Some(n) = reason
                    .as_deref()
                    .map(|r| r.chars().count())
                    .filter(|&n| n > MAX_REASON_CHARS)
                {
                    return Err(format!(
                        "`--reason` is {n} characters long; at most {MAX_REASON_CHARS} are kept"
                    ));
                }
                let acting = match acting_for(&store, approver.as_deref(), &credential).await? {
                    Ok(a) => a,
                    Err(why) => {
                        eprintln!("toolgate: {why}");
                        return Ok(ExitCode::from(1));
                    }
                };
                let opened = store.open(false).await?;
                if let Err(why) = may_answer(&acting, &*opened, &id).await? {
                    eprintln!("toolgate: {why}");
                    return Ok(ExitCode::from(1));
                }
                let mut answer = Answer::denied_by(acting.name, reason);
                answer.principal = acting.principal;
                answer.idempotency_key = idempotency_key;
                answer_cmd(&*opened, &id, answer, json).await
            }
            InboxCommand::CancelTurn {
                session,
                turn,
                store,
                json,
            } => {
                let store = store.open(false).await?;
                let ids = store
                    .cancel_turn(&session, &turn)
                    .await
                    .map_err(|e| e.to_string())?;
                if json {
                    print_json(&json!({"session": session, "turn": turn, "cancelled": ids}));
                } else if ids.is_empty() {
                    println!(
                        "turn `{turn}` of session `{session}` has no held call not yet sent; nothing changed"
                    );
                } else {
                    for id in &ids {
                        println!("{id} cancelled");
                    }
                }
                Ok(ExitCode::SUCCESS)
            }
            InboxCommand::Recover {
                store,
                instance,
                json,
            } => {
                let store = store.open_without_recovery(false).await?.0;
                let ids = crate::recover::recover_stopped(&*store, instance.as_deref()).await?;
                if json {
                    print_json(&json!({"unknown": ids}));
                } else if ids.is_empty() {
                    println!("no held call was left claimed by a process that stopped; nothing changed");
                } else {
                    for id in &ids {
                        println!("{id} unknown");
                    }
                }
                Ok(ExitCode::SUCCESS)
            }
        }
    })
}

async fn list(
    store: &dyn InboxStore,
    state: Option<String>,
    session: Option<String>,
    json: bool,
) -> Outcome {
    let state = match state {
        Some(s) => Some(State::parse(&s).ok_or_else(|| {
            format!(
                "unknown state `{s}` (one of: {})",
                State::ALL.map(State::as_str).join(", ")
            )
        })?),
        None => None,
    };
    let records = match &session {
        Some(session) => {
            let mut all = store
                .session_calls(session, None)
                .await
                .map_err(|e| e.to_string())?;
            all.retain(|r| state.is_none_or(|s| r.state == s));
            all
        }
        None => store.list(state).await.map_err(|e| e.to_string())?,
    };
    let now = Timestamp::now();
    if json {
        print_json(&Value::Array(
            records.iter().map(|r| summary_json(r, now)).collect(),
        ));
        return Ok(ExitCode::SUCCESS);
    }
    let width = records
        .iter()
        .map(|r| r.call.tool.len())
        .max()
        .unwrap_or(4)
        .max(4);
    println!(
        "{:35}  {:9}  {:width$}  {:16}  AGE",
        "INTERACTION", "STATE", "TOOL", "AGENT"
    );
    for r in &records {
        println!(
            "{:35}  {:9}  {:width$}  {:16}  {}",
            r.id(),
            r.state.as_str(),
            toolgate_core::display::visible(&r.call.tool),
            toolgate_core::display::visible(&agent_text(r)),
            age(r.call.created_at.age(now))
        );
    }
    Ok(ExitCode::SUCCESS)
}

async fn show(store: &dyn InboxStore, id: &str, json: bool) -> Outcome {
    let Some(r) = store.get(id).await.map_err(|e| e.to_string())? else {
        return Err(format!("no held call `{id}` in this inbox"));
    };
    let now = Timestamp::now();
    if json {
        print_json(&record_json(&r, now));
    } else {
        print!("{}", show_text(&r, now));
    }
    Ok(ExitCode::SUCCESS)
}

/// Whom an answer is given as (`crate::approver`): `Ok(Err(why))` is a refused credential
/// or name (exit 1), `Err` a usage error or a configuration that cannot be read (exit 2).
pub(crate) async fn acting_for(
    args: &StoreArgs,
    named: Option<&str>,
    credential: &CredentialArgs,
) -> Result<Result<Acting, String>, String> {
    let gov = args.config.as_deref().map(load_config).transpose()?;
    acting(gov.as_ref(), named, credential).await
}

/// Whether `acting` may answer held call `id` (R24, R47): with approvers configured, only
/// with rights over the call's tool, as on the approval page (`Approver::may_answer`);
/// without, the name is recorded as given. `Ok(Err(why))` refuses the answer; an unknown id
/// is left to the store's answer, which says so.
async fn may_answer(
    acting: &Acting,
    store: &dyn InboxStore,
    id: &str,
) -> Result<Result<(), String>, String> {
    let Some(person) = &acting.approver else {
        return Ok(Ok(()));
    };
    let Some(record) = store.get(id).await.map_err(|e| e.to_string())? else {
        return Ok(Ok(()));
    };
    if person.may_answer(&record.call.identities, record.call.agent.rule_name()) {
        return Ok(Ok(()));
    }
    Ok(Err(format!(
        "`{}` may not answer calls to `{}`: the configuration's `approvers` section gives them no rights over that tool",
        toolgate_core::display::visible(&acting.name),
        toolgate_core::display::visible(&record.call.tool)
    )))
}

async fn answer_cmd(store: &dyn InboxStore, id: &str, answer: Answer, json: bool) -> Outcome {
    match store.answer(id, answer).await {
        Ok(r) => {
            if json {
                print_json(&receipt_json(&r));
            } else {
                let verb = if r.approved { "approved" } else { "denied" };
                let approver = toolgate_core::display::visible(&r.approver);
                if r.replayed {
                    println!(
                        "{id} was already {verb} by {approver} with this idempotency key; nothing changed"
                    );
                } else if r.already_approved {
                    // R51: one person's approvals count once.
                    println!(
                        "{id}: {}; nothing changed",
                        toolgate_core::display::visible(&r.progress().unwrap_or_default())
                    );
                } else if r.waiting_for() > 0 {
                    // R51: an approval that is not the last one needed says so.
                    println!(
                        "{id}: approval by {approver} {}",
                        toolgate_core::display::visible(&r.progress().unwrap_or_default())
                    );
                } else {
                    println!("{id} {verb} by {approver}");
                }
                if !r.already_approved
                    && r.waiting_for() == 0
                    && let Some(p) = r.progress()
                {
                    println!("{}", toolgate_core::display::visible(&p));
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(AnswerError::Store(e)) => Err(e.to_string()),
        Err(AnswerError::Invalid(why)) => Err(why),
        Err(e) => {
            eprintln!("toolgate: {e}");
            Ok(ExitCode::from(1))
        }
    }
}
