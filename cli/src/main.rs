//! The `toolgate` command: check a configuration and policy, list what an agent sees, and
//! decide or explain one call (SPEC §7).
//!
//! Exit codes: 0 success; 1 `check` found the configuration invalid; 2 a usage error, a
//! file that cannot be opened, a configuration that fails to load (`expose`, `decide`,
//! `explain`), an unknown `--agent`, or a malformed call. `inbox`, `grant` and `policy` work
//! on an inbox database (see `inbox.rs` and `grant.rs` for their exit codes).
#![forbid(unsafe_code)]

mod approver;
mod call;
mod config_file;
#[cfg(feature = "mcp")]
mod follow;
mod grant;
mod inbox;
#[cfg(feature = "mcp")]
mod mcp;
#[cfg(feature = "mcp")]
mod mcp_lock;
#[cfg(any(feature = "mcp", feature = "serve"))]
mod ops;
mod policy_sim;
mod recover;
#[cfg(feature = "serve")]
mod serve;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use serde_json::{Value, json};
use toolgate_core::{Decision, Verdict};
use toolgate_engine::ask::AskRoute;
use toolgate_engine::config::{self, Format};
use toolgate_engine::grant::{Grant, MemoryGrants, parse_grants};
use toolgate_engine::policy::{Limits, Policy};
use toolgate_engine::quota::{Clock, NoSends, SystemClock};
use toolgate_engine::simulate::{Simulation, Summary};
use toolgate_engine::{
    CallInput, CallView, ConfigErrors, Governance, GovernanceBuilder, History, PolicyState,
};

mod decide;

use decide::{
    Decided, check, decide, explain_json, explain_text, facts_text, quotas_text, route_json,
    route_text, simulate,
};

/// Governs AI agents' tool calls: check a policy, list what an agent sees, decide a call.
#[derive(Debug, Parser)]
#[command(name = "toolgate", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate a configuration (and a stored policy): every error with its path, and warnings.
    Check {
        /// The configuration file (JSON, TOML or YAML by extension).
        config: PathBuf,
        /// A stored policy file that replaces the configuration's `policy`.
        #[arg(long)]
        policy: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// List the tools an agent's model is shown, and those omitted with the reason.
    Expose {
        /// The configuration file.
        config: PathBuf,
        /// The agent profile.
        #[arg(long)]
        agent: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Decide one call: run, ask, or refused.
    ///
    /// CALL is SPEC §7's JSON. A subagent's `agent` id must come from the host, never from
    /// the model; one naming another profile than `profile` is refused `not_allowed`.
    Decide {
        /// The configuration file.
        config: PathBuf,
        /// A stored policy file that replaces the configuration's `policy`.
        #[arg(long)]
        policy: Option<PathBuf>,
        /// The call, a JSON file (`-` for standard input).
        #[arg(long)]
        call: String,
        /// Grants (R45), a JSON list: a live matching grant answers an ask, judged at the
        /// call's `at` (default: now). The output gains `granted`.
        #[arg(long)]
        grants: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Decide a list of calls in time order, as a running host would: each against the
    /// sends before it (quotas, R44) and the grants' uses so far (R45).
    ///
    /// CALLS is a JSON list of CALLs, each with `at` (non-decreasing) and optionally
    /// `"answer": "approve"|"deny"`, the person's answer should it be asked.
    Simulate {
        /// The configuration file.
        config: PathBuf,
        /// A stored policy file that replaces the configuration's `policy`.
        #[arg(long)]
        policy: Option<PathBuf>,
        /// Grants (R45), a JSON list.
        #[arg(long)]
        grants: Option<PathBuf>,
        /// The calls, a JSON file (`-` for standard input).
        #[arg(long)]
        calls: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Work with audit files.
    Audit {
        #[command(subcommand)]
        action: AuditCommand,
    },
    /// Explain one call's decision: which check or rule decided, and every reason.
    Explain {
        /// The configuration file.
        config: PathBuf,
        /// A stored policy file that replaces the configuration's `policy`.
        #[arg(long)]
        policy: Option<PathBuf>,
        /// The call, a JSON file (`-` for standard input).
        #[arg(long)]
        call: String,
        /// Grants (R45), a JSON list, as for `decide`.
        #[arg(long)]
        grants: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Work with configuration files.
    Config {
        #[command(subcommand)]
        action: ConfigCommand,
    },
    /// Held calls in a durable inbox: list, show, approve, deny.
    Inbox {
        #[command(subcommand)]
        action: inbox::InboxCommand,
    },
    /// Grants kept in an inbox (R45): add, list, revoke.
    Grant {
        #[command(subcommand)]
        action: grant::GrantCommand,
    },
    /// The tenant policy stored in an inbox database: get, put.
    Policy {
        #[command(subcommand)]
        action: inbox::PolicyCommand,
    },
    /// The approval page: approvers answer held calls and edit the stored policy.
    #[cfg(feature = "serve")]
    Serve(serve::ServeArgs),
    /// Serve MCP: govern the configured MCP servers for any MCP client.
    #[cfg(feature = "mcp")]
    Mcp {
        #[command(subcommand)]
        action: mcp::McpCommand,
    },
}

#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Print the effective configuration as JSON: every setting in force, defaults spelled
    /// out for the host and limits, overrides set back to `default` left out. It loads back
    /// into the same configuration. Exit 2 when the configuration does not load.
    Print {
        /// The configuration file (JSON, TOML or YAML by extension).
        config: PathBuf,
        /// A stored policy file that replaces the configuration's `policy`.
        #[arg(long)]
        policy: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
enum AuditCommand {
    /// Check an audit file's hash chain; report the first record that breaks it (exit 1).
    Verify {
        /// The JSON Lines audit file.
        file: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("toolgate: {message}");
            ExitCode::from(2)
        }
    }
}

fn read_file(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("cannot read `{}`: {e}", path.display()))
}

fn print_json(v: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
    );
}

fn errors_json(errs: &ConfigErrors) -> Value {
    Value::Array(
        errs.errors
            .iter()
            .map(|e| json!({"path": e.path, "message": e.message}))
            .collect(),
    )
}

/// Loads a configuration for `expose`/`decide`: any error exits 2 with the errors on
/// standard error and nothing on standard output.
fn load_builder(path: &Path) -> Result<GovernanceBuilder, String> {
    let text = read_file(path)?;
    config::builder_from_str_in(&text, Format::from_path(path), &config::config_dir(path))
        .map_err(|e| format!("the configuration does not load:\n{e}"))
}

fn build(builder: GovernanceBuilder) -> Result<Governance, String> {
    let gov = builder
        .build()
        .map_err(|e| format!("the configuration does not load:\n{e}"))?;
    // The sections other crates own: a configuration with any error is refused whole.
    config_file::owned_sections(&gov)
        .map_err(|e| format!("the configuration does not load:\n{e}"))?;
    Ok(gov)
}

/// A `--policy` file for `decide`: one that cannot be opened or read is R22's unreadable
/// stored policy, never a reason to stop.
fn stored_policy(path: &Path, limits: &Limits) -> PolicyState {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            return PolicyState::Unreadable(format!("`{}` cannot be read: {e}", path.display()));
        }
    };
    PolicyState::from_json_str(&text, limits, None)
}

fn run(command: Command) -> Result<ExitCode, String> {
    match command {
        Command::Check {
            config,
            policy,
            json,
        } => check(&config, policy.as_deref(), json),
        Command::Expose {
            config,
            agent,
            json,
        } => expose(&config, &agent, json),
        Command::Decide {
            config,
            policy,
            call,
            grants,
            json,
        } => decide_command(&config, policy.as_deref(), &call, grants.as_deref(), json),
        Command::Simulate {
            config,
            policy,
            grants,
            calls,
            json,
        } => simulate(&config, policy.as_deref(), grants.as_deref(), &calls, json),
        Command::Audit {
            action: AuditCommand::Verify { file, json },
        } => audit_verify(&file, json),
        Command::Explain {
            config,
            policy,
            call,
            grants,
            json,
        } => explain(&config, policy.as_deref(), &call, grants.as_deref(), json),
        Command::Config {
            action: ConfigCommand::Print { config, policy },
        } => config_print(&config, policy.as_deref()),
        Command::Inbox { action } => inbox::run_inbox(action),
        Command::Grant { action } => grant::run_grant(action),
        Command::Policy { action } => inbox::run_policy(action),
        #[cfg(feature = "serve")]
        Command::Serve(args) => serve::run(args),
        #[cfg(feature = "mcp")]
        Command::Mcp { action } => mcp::run(action),
    }
}

/// `toolgate expose`: the tools an agent sees (R6–R13) and those it does not, with why.
fn expose(config: &Path, agent: &str, json: bool) -> Result<ExitCode, String> {
    let gov = build(load_builder(config)?)?;
    let exposure = gov.expose(agent).map_err(|e| e.to_string())?;
    if json {
        print_json(&json!({
            "agent": exposure.agent,
            "tools": exposure.tools.iter().map(|t| json!({
                "name": &*t.name,
                "approval": if t.wrapped { "wrapped" } else { "raw" },
            })).collect::<Vec<_>>(),
            "omitted": exposure.omitted.iter().map(|t| json!({
                "name": &*t.name,
                "refusal": t.refusal.code.as_str(),
            })).collect::<Vec<_>>(),
        }));
    } else {
        println!("agent {}", exposure.agent);
        let width = exposure
            .tools
            .iter()
            .map(|t| t.name.len())
            .chain(exposure.omitted.iter().map(|t| t.name.len()))
            .max()
            .unwrap_or(4)
            .max(8);
        println!("\n{:width$}  APPROVAL", "EXPOSED");
        for t in &exposure.tools {
            println!(
                "{:width$}  {}",
                t.name,
                if t.wrapped { "wrapped" } else { "raw" }
            );
        }
        println!("\n{:width$}  {:<19}  REASON", "OMITTED", "REFUSAL");
        for t in &exposure.omitted {
            println!(
                "{:width$}  {:<19}  {}",
                t.name,
                t.refusal.code.as_str(),
                t.refusal
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `toolgate decide`: one call's decision, as SPEC §7 prints it.
fn decide_command(
    config: &Path,
    policy: Option<&Path>,
    call: &str,
    grants: Option<&Path>,
    json: bool,
) -> Result<ExitCode, String> {
    let d = decide(config, policy, call, grants)?;
    let decision = &d.decision;
    // `granted` (R45) is always given: `null` without `--grants`.
    let out = json!({
        "outcome": decision.verdict.as_str(),
        "refusal": decision.refusal().map(|r| r.code.as_str()),
        "auto_approved": matches!(decision.verdict, Verdict::Run { auto_approved: true }),
        "granted": decision.granted.as_ref().map(|g| g.id.as_str()),
        "reasons": decision.reasons,
    });
    if json {
        print_json(&out);
    } else {
        print!("{}", explain_text(decision, None));
    }
    Ok(ExitCode::SUCCESS)
}

/// `toolgate audit verify`: whether an audit file's hash chain is intact, and where not.
fn audit_verify(file: &Path, json: bool) -> Result<ExitCode, String> {
    let f =
        std::fs::File::open(file).map_err(|e| format!("cannot read `{}`: {e}", file.display()))?;
    match toolgate_engine::chain::verify_chain(std::io::BufReader::new(f)) {
        Ok(n) => {
            if json {
                print_json(&json!({"valid": true, "records": n}));
            } else {
                println!("{n} records; the chain is intact");
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(b) => {
            if json {
                print_json(
                    &json!({"valid": false, "line": b.line, "seq": b.seq, "problem": b.problem}),
                );
            } else {
                println!("the chain is broken at {b}");
            }
            Ok(ExitCode::from(1))
        }
    }
}

/// `toolgate explain`: the decision with every rule, quota, grant and route behind it.
fn explain(
    config: &Path,
    policy: Option<&Path>,
    call: &str,
    grants: Option<&Path>,
    json: bool,
) -> Result<ExitCode, String> {
    let Decided {
        decision,
        name,
        facts,
        route,
        quotas,
    } = decide(config, policy, call, grants)?;
    if json {
        let mut v = explain_json(&decision);
        // Added: the quotas covering the call (R44) and the grant that answered it
        // (R45).
        if let Some(obj) = v.as_object_mut() {
            obj.insert("quotas".into(), Value::Array(quotas.clone()));
            obj.insert(
                "granted".into(),
                json!(
                    decision
                        .granted
                        .as_ref()
                        .map(|g| json!({"id": g.id, "granted_by": g.granted_by}))
                ),
            );
            obj.insert("retry_after_secs".into(), json!(decision.retry_after_secs));
        }
        if let (Some(obj), Some(f)) = (v.as_object_mut(), facts) {
            obj.insert(String::from("tool"), f);
        }
        // Added (SPEC §7's fields unchanged): who answers an ask, and how long
        // they have.
        if let (Some(obj), Some(r)) = (v.as_object_mut(), route) {
            obj.insert(String::from("approval"), route_json(&r));
        }
        print_json(&v);
    } else {
        print!("{}", explain_text(&decision, Some(&name)));
        print!("{}", quotas_text(&quotas));
        if let Some(r) = route {
            print!("{}", route_text(&r));
        }
        if let Some(f) = facts {
            print!("{}", facts_text(&f));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `toolgate config print`: the configuration in force, every default spelled.
fn config_print(config: &Path, policy: Option<&Path>) -> Result<ExitCode, String> {
    let mut builder = load_builder(config)?;
    if let Some(path) = policy {
        let text = read_file(path)?;
        let p = Policy::from_json_str(&text, &builder.current_limits())
            .map_err(|e| format!("the policy does not load:\n{}", e.prefixed("policy")))?;
        builder = builder.policy(p);
    }
    let gov = build(builder)?;
    let mut effective = config::effective(&gov);
    // The inbox's own section, read by the inbox and spelled as it reads it.
    if let Some(inbox) = toolgate_inbox::InboxSettings::read(&gov)
        .map_err(|e| format!("the configuration does not load:\n{e}"))?
        && let Value::Object(top) = &mut effective
    {
        top.insert("inbox".into(), Value::Object(inbox.to_json()));
    }
    // The page's own fields of `approvers`, read by the page: the verification settings of
    // `approvers.jwt` with their defaults spelled.
    #[cfg(feature = "serve")]
    if let Some(approvers) = gov.approver_settings() {
        let access = toolgate_web::access::PageAccess::read(approvers)
            .map_err(|e| format!("the configuration does not load:\n{e}"))?;
        if let (Some(jwt), Some(Value::Object(printed))) = (
            &access.jwt,
            effective
                .get_mut("approvers")
                .and_then(|a| a.get_mut("jwt")),
        ) {
            printed.extend(jwt.to_json());
        }
    }
    // The `mcp` section (`toolgate mcp serve`), read and checked, defaults spelled.
    #[cfg(feature = "mcp")]
    if let Some(section) = mcp::section(&read_file(config)?, Format::from_path(config), "mcp") {
        let section = toolgate_mcp::serve::ServeConfig::effective(&section)
            .map_err(|e| format!("the configuration does not load:\n{e}"))?;
        if let Value::Object(top) = &mut effective {
            top.insert("mcp".into(), section);
        }
    }
    print_json(&effective);
    Ok(ExitCode::SUCCESS)
}

/// The governance `decide`, `explain` and `simulate` decide with: the CONFIG, its `policy`
/// replaced by `--policy` (an unreadable one is R22's stored policy).
fn governance(config_path: &Path, policy: Option<&Path>) -> Result<Governance, String> {
    let mut builder = load_builder(config_path)?;
    if let Some(p) = policy {
        let state = stored_policy(p, &builder.current_limits());
        builder = builder.policy_state(state);
    }
    build(builder)
}
