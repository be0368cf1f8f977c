//! `toolgate inbox …` and `toolgate policy …`: held calls and the stored tenant policy in an
//! inbox database (SPEC R22, R26).
//!
//! Exit codes: 0 success; 1 a refused answer (an id the inbox did not issue, a call already
//! decided or expired, an idempotency key that answered the other way) or a refused policy
//! (the stored one is unchanged); 2 a usage error, a held call `show` cannot find, or a
//! database that cannot be opened or read.

use std::fmt::Write as _;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Subcommand;
use serde_json::{Value, json};
use toolgate_engine::config::{self, Format};
use toolgate_engine::policy::Limits;
use toolgate_inbox::{
    Answer, AnswerError, AnswerReceipt, HeldRecord, InboxStore, PutPolicyError, SqliteInbox,
    SqliteOptions, State, Timestamp, ask_source_text, put_policy_text,
};

#[derive(Debug, Subcommand)]
pub(crate) enum InboxCommand {
    /// List held calls, oldest first.
    List {
        /// The inbox database file.
        #[arg(long)]
        db: PathBuf,
        /// Only calls in this state (pending, approved, denied, expired, cancelled, claimed,
        /// done, failed, unknown).
        #[arg(long)]
        state: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show one held call: the tool, the full input, every reason, its age and state.
    Show {
        /// The interaction id.
        id: String,
        /// The inbox database file.
        #[arg(long)]
        db: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Approve one held call. The same idempotency key twice is one approval.
    Approve {
        /// The interaction id.
        id: String,
        /// The inbox database file.
        #[arg(long)]
        db: PathBuf,
        /// Makes the answer idempotent: repeating it with the same key is one answer.
        #[arg(long = "idempotency-key", value_name = "KEY")]
        idempotency_key: String,
        /// Who approves.
        #[arg(long = "as", value_name = "NAME")]
        approver: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Deny one held call.
    Deny {
        /// The interaction id.
        id: String,
        /// The inbox database file.
        #[arg(long)]
        db: PathBuf,
        /// Who denies.
        #[arg(long = "as", value_name = "NAME")]
        approver: String,
        /// Why (shown to the agent).
        #[arg(long)]
        reason: Option<String>,
        /// Makes the answer idempotent (a fresh key when not given).
        #[arg(long = "idempotency-key", value_name = "KEY")]
        idempotency_key: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum PolicyCommand {
    /// Print the stored tenant policy with its `updatedAt` (what `put` takes back).
    Get {
        /// The inbox database file.
        #[arg(long)]
        db: PathBuf,
    },
    /// Validate a policy and replace the stored one whole; a refused policy changes nothing.
    Put {
        /// The inbox database file (created when missing).
        #[arg(long)]
        db: PathBuf,
        /// The policy file (`-` or nothing for standard input).
        file: Option<String>,
        /// A configuration whose `limits` the policy is validated under (default limits
        /// otherwise).
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

type Outcome = Result<ExitCode, String>;

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|e| format!("cannot start: {e}"))
}

fn open(db: &Path, create: bool) -> Result<SqliteInbox, String> {
    SqliteInbox::open(db, SqliteOptions::default().create(create)).map_err(|e| e.to_string())
}

fn print_json(v: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
    );
}

/// Prints a stored policy's document: pretty, or compact when a number must keep its
/// literal (an integer past 64 bits, R20), so that `put` takes back what `get` prints.
fn print_policy(stored: &toolgate_inbox::StoredPolicy) -> Result<(), String> {
    match stored.document_literals()? {
        Some(text) => println!("{text}"),
        None => print_json(&stored.document()?),
    }
    Ok(())
}

/// An age in whole seconds, like `3m 12s`.
fn age(d: Duration) -> String {
    humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
}

pub(crate) fn run_inbox(command: InboxCommand) -> Outcome {
    let rt = runtime()?;
    rt.block_on(async move {
        match command {
            InboxCommand::List { db, state, json } => list(&open(&db, false)?, state, json).await,
            InboxCommand::Show { id, db, json } => show(&open(&db, false)?, &id, json).await,
            InboxCommand::Approve {
                id,
                db,
                idempotency_key,
                approver,
                json,
            } => {
                let answer = Answer::approve(idempotency_key, approver);
                answer_cmd(&open(&db, false)?, &id, answer, json).await
            }
            InboxCommand::Deny {
                id,
                db,
                approver,
                reason,
                idempotency_key,
                json,
            } => {
                let key = match idempotency_key {
                    Some(k) => k,
                    None => fresh_key()?,
                };
                let answer = Answer::deny(key, approver, reason);
                answer_cmd(&open(&db, false)?, &id, answer, json).await
            }
        }
    })
}

fn fresh_key() -> Result<String, String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| format!("cannot make an idempotency key: {e}"))?;
    let mut s = String::from("deny-");
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    Ok(s)
}

fn summary_json(r: &HeldRecord, now: Timestamp) -> Value {
    json!({
        "interaction_id": r.id(),
        "state": r.state.as_str(),
        "tool": r.call.tool,
        "agent": r.call.agent.profile,
        "subagent": r.call.agent.subagent,
        "created_at": r.call.created_at.to_string(),
        "expires_at": r.call.expires_at.to_string(),
        "age_seconds": r.call.created_at.age(now).as_secs(),
        "reasons": r.call.reasons.iter().map(|a| a.reason.clone()).collect::<Vec<_>>(),
    })
}

async fn list(store: &SqliteInbox, state: Option<String>, json: bool) -> Outcome {
    let state = match state {
        Some(s) => Some(State::parse(&s).ok_or_else(|| {
            format!(
                "unknown state `{s}` (one of: {})",
                State::ALL.map(State::as_str).join(", ")
            )
        })?),
        None => None,
    };
    let records = store.list(state).await.map_err(|e| e.to_string())?;
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
            r.call.tool,
            agent_text(r),
            age(r.call.created_at.age(now))
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn agent_text(r: &HeldRecord) -> String {
    match &r.call.agent.subagent {
        Some(sub) => format!("{}/{sub}", r.call.agent.profile),
        None => r.call.agent.profile.clone(),
    }
}

fn record_json(r: &HeldRecord, now: Timestamp) -> Value {
    let mut v = summary_json(r, now);
    if let Some(map) = v.as_object_mut() {
        map.insert("call_id".into(), json!(r.call.call_id));
        map.insert(
            "identities".into(),
            Value::Array(
                r.call
                    .identities
                    .iter()
                    .map(|i| json!({"kind": i.kind().as_str(), "source": i.source(), "name": i.name()}))
                    .collect(),
            ),
        );
        map.insert(
            "input".into(),
            r.input().unwrap_or_else(|e| json!({"unreadable": e})),
        );
        map.insert("input_hash".into(), json!(r.call.input_hash));
        map.insert("definition_hash".into(), json!(r.call.definition_hash));
        map.insert(
            "reasons".into(),
            Value::Array(
                r.call
                    .reasons
                    .iter()
                    .map(|a| json!({"source": ask_source_text(&a.source), "reason": a.reason}))
                    .collect(),
            ),
        );
        map.insert(
            "run".into(),
            json!({"mode": r.call.run.mode.as_str(), "background": r.call.run.background}),
        );
        map.insert("approver".into(), json!(r.approver));
        map.insert("answer_reason".into(), json!(r.answer_reason));
        map.insert(
            "answered_at".into(),
            json!(r.answered_at.map(|t| t.to_string())),
        );
        map.insert(
            "claimed_at".into(),
            json!(r.claimed_at.map(|t| t.to_string())),
        );
        map.insert("result".into(), r.result.clone().unwrap_or(Value::Null));
        map.insert(
            "finished_at".into(),
            json!(r.finished_at.map(|t| t.to_string())),
        );
    }
    v
}

fn show_text(r: &HeldRecord, now: Timestamp) -> String {
    let mut s = String::new();
    let c = &r.call;
    let _ = writeln!(s, "interaction:  {}", r.id());
    let _ = writeln!(s, "state:        {}", r.state);
    let ids = c
        .identities
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let _ = writeln!(s, "tool:         {} ({ids})", c.tool);
    match &c.agent.subagent {
        Some(sub) => {
            let _ = writeln!(s, "agent:        {} (subagent `{sub}`)", c.agent.profile);
        }
        None => {
            let _ = writeln!(s, "agent:        {}", c.agent.profile);
        }
    }
    let _ = writeln!(s, "call id:      {}", c.call_id);
    let _ = writeln!(
        s,
        "age:          {} (held {})",
        age(c.created_at.age(now)),
        c.created_at
    );
    if r.state == State::Pending {
        let left = if now < c.expires_at {
            format!("in {}", age(now.age(c.expires_at)))
        } else {
            String::from("past; an answer will be refused")
        };
        let _ = writeln!(s, "expires:      {} ({left})", c.expires_at);
    }
    let _ = writeln!(
        s,
        "run:          {}{}",
        c.run.mode.as_str(),
        if c.run.background { ", background" } else { "" }
    );
    let _ = writeln!(s, "input:");
    let input = match r.input() {
        Ok(v) => serde_json::to_string_pretty(&v).unwrap_or_else(|_| c.input_json.clone()),
        Err(e) => format!("(unreadable: {e})"),
    };
    for line in input.lines() {
        let _ = writeln!(s, "    {line}");
    }
    let _ = writeln!(s, "because:");
    for a in &c.reasons {
        let _ = writeln!(s, "  - {}: {}", ask_source_text(&a.source), a.reason);
    }
    let _ = writeln!(s, "input hash:   {}", c.input_hash);
    let _ = writeln!(s, "definition:   {}", c.definition_hash);
    if let Some(who) = &r.approver {
        let label = if r.state == State::Denied {
            "denied by:"
        } else {
            "approved by:"
        };
        let when = r.answered_at.map(|t| t.to_string()).unwrap_or_default();
        let _ = writeln!(s, "{label:<14}{who} ({when})");
    }
    if let Some(why) = &r.answer_reason {
        let _ = writeln!(s, "reason:       {why}");
    }
    if let Some(result) = &r.result {
        let _ = writeln!(s, "result:       {result}");
    }
    s
}

async fn show(store: &SqliteInbox, id: &str, json: bool) -> Outcome {
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

fn receipt_json(r: &AnswerReceipt) -> Value {
    json!({
        "interaction_id": r.interaction_id,
        "state": if r.approved { "approved" } else { "denied" },
        "approver": r.approver,
        "reason": r.reason,
        "answered_at": r.answered_at.to_string(),
        "replayed": r.replayed,
    })
}

async fn answer_cmd(store: &SqliteInbox, id: &str, answer: Answer, json: bool) -> Outcome {
    match store.answer(id, answer).await {
        Ok(r) => {
            if json {
                print_json(&receipt_json(&r));
            } else {
                let verb = if r.approved { "approved" } else { "denied" };
                if r.replayed {
                    println!(
                        "{id} was already {verb} by {} with this idempotency key; nothing changed",
                        r.approver
                    );
                } else {
                    println!("{id} {verb} by {}", r.approver);
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

pub(crate) fn run_policy(command: PolicyCommand) -> Outcome {
    let rt = runtime()?;
    rt.block_on(async move {
        match command {
            PolicyCommand::Get { db } => {
                let store = open(&db, false)?;
                match store.get_policy().await.map_err(|e| e.to_string())? {
                    None => {
                        eprintln!("toolgate: no policy is stored; this is the empty policy");
                        print_json(&json!({"default": "allow", "rules": []}));
                    }
                    Some(stored) => print_policy(&stored)
                        .map_err(|e| format!("the stored policy cannot be read: {e}"))?,
                }
                Ok(ExitCode::SUCCESS)
            }
            PolicyCommand::Put { db, file, config } => {
                let text = match file.as_deref() {
                    None | Some("-") => {
                        let mut s = String::new();
                        std::io::stdin().read_to_string(&mut s).map_err(|e| {
                            format!("cannot read the policy from standard input: {e}")
                        })?;
                        s
                    }
                    Some(path) => std::fs::read_to_string(path)
                        .map_err(|e| format!("cannot read `{path}`: {e}"))?,
                };
                let limits = match config {
                    Some(path) => {
                        let cfg = std::fs::read_to_string(&path)
                            .map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
                        config::builder_from_str(&cfg, Format::from_path(&path))
                            .map_err(|e| format!("the configuration does not load:\n{e}"))?
                            .current_limits()
                    }
                    None => Limits::default(),
                };
                let store = open(&db, true)?;
                match put_policy_text(&store, &text, &limits).await {
                    Ok(stored) => {
                        print_policy(&stored)?;
                        Ok(ExitCode::SUCCESS)
                    }
                    Err(PutPolicyError::Invalid(errs)) => {
                        eprintln!(
                            "toolgate: the policy is refused; the stored policy is unchanged"
                        );
                        for e in &errs.errors {
                            eprintln!("error: {e}");
                        }
                        Ok(ExitCode::from(1))
                    }
                    Err(PutPolicyError::Store(e)) => Err(e.to_string()),
                }
            }
        }
    })
}
