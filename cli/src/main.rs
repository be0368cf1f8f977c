//! The `toolgate` command: check a configuration and policy, list what an agent sees, and
//! decide or explain one call (SPEC §7).
//!
//! Exit codes: 0 success; 1 `check` found the configuration invalid; 2 a usage error, a
//! file that cannot be opened, a configuration that fails to load (`expose`, `decide`,
//! `explain`), an unknown `--agent`, or a malformed call. `inbox`, `grant` and `policy` work
//! on an inbox database (see `inbox.rs` and `grant.rs` for their exit codes).
#![forbid(unsafe_code)]

mod call;
mod config_file;
#[cfg(feature = "mcp")]
mod follow;
mod grant;
mod inbox;
#[cfg(feature = "mcp")]
mod mcp;
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
    builder
        .build()
        .map_err(|e| format!("the configuration does not load:\n{e}"))
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
        } => {
            let gov = build(load_builder(&config)?)?;
            let exposure = gov.expose(&agent).map_err(|e| e.to_string())?;
            if json {
                print_json(&json!({
                    "agent": exposure.agent,
                    "tools": exposure.tools.iter().map(|t| json!({
                        "name": t.name,
                        "approval": if t.wrapped { "wrapped" } else { "raw" },
                    })).collect::<Vec<_>>(),
                    "omitted": exposure.omitted.iter().map(|t| json!({
                        "name": t.name,
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
                        t.refusal.reasons.join("; ")
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Decide {
            config,
            policy,
            call,
            grants,
            json,
        } => {
            let d = decide(&config, policy.as_deref(), &call, grants.as_deref())?;
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
        Command::Simulate {
            config,
            policy,
            grants,
            calls,
            json,
        } => simulate(&config, policy.as_deref(), grants.as_deref(), &calls, json),
        Command::Audit {
            action: AuditCommand::Verify { file, json },
        } => {
            let f = std::fs::File::open(&file)
                .map_err(|e| format!("cannot read `{}`: {e}", file.display()))?;
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
        Command::Explain {
            config,
            policy,
            call,
            grants,
            json,
        } => {
            let Decided {
                decision,
                name,
                facts,
                route,
                quotas,
            } = decide(&config, policy.as_deref(), &call, grants.as_deref())?;
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
        Command::Config {
            action: ConfigCommand::Print { config, policy },
        } => {
            let mut builder = load_builder(&config)?;
            if let Some(path) = policy {
                let text = read_file(&path)?;
                let p = Policy::from_json_str(&text, &builder.current_limits())
                    .map_err(|e| format!("the policy does not load:\n{}", e.prefixed("policy")))?;
                builder = builder.policy(p);
            }
            #[allow(unused_mut)]
            let mut effective = config::effective(&build(builder)?);
            // The `mcp` section (`toolgate mcp serve`), read and checked, defaults spelled.
            #[cfg(feature = "mcp")]
            if let Some(section) = mcp::section(&read_file(&config)?, Format::from_path(&config)) {
                let section = toolgate_mcp::serve::ServeConfig::effective(&section)
                    .map_err(|e| format!("the configuration does not load:\n{e}"))?;
                if let Value::Object(top) = &mut effective {
                    top.insert("mcp".into(), section);
                }
            }
            print_json(&effective);
            Ok(ExitCode::SUCCESS)
        }
        Command::Inbox { action } => inbox::run_inbox(action),
        Command::Grant { action } => grant::run_grant(action),
        Command::Policy { action } => inbox::run_policy(action),
        #[cfg(feature = "serve")]
        Command::Serve(args) => serve::run(args),
        #[cfg(feature = "mcp")]
        Command::Mcp { action } => mcp::run(action),
    }
}

fn check(config_path: &Path, policy: Option<&Path>, json: bool) -> Result<ExitCode, String> {
    let text = read_file(config_path)?;
    let policy_text = match policy {
        Some(p) => Some(read_file(p)?),
        None => None,
    };
    let mut errs = ConfigErrors::default();
    let builder = match config::builder_from_str_in(
        &text,
        Format::from_path(config_path),
        &config::config_dir(config_path),
    ) {
        Ok(b) => Some(b),
        Err(e) => {
            errs.errors.extend(e.errors);
            None
        }
    };
    let limits = builder
        .as_ref()
        .map(GovernanceBuilder::current_limits)
        .unwrap_or_default();
    let stored = match policy_text {
        Some(t) => match Policy::from_json_str(&t, &limits) {
            Ok(p) => Some(p),
            Err(e) => {
                errs.errors.extend(e.prefixed("policy").errors);
                None
            }
        },
        None => None,
    };
    let mut warnings = Vec::new();
    let mut built: Option<Governance> = None;
    if let Some(mut b) = builder
        && errs.is_empty()
    {
        if let Some(p) = stored {
            b = b.policy(p);
        }
        match b.build() {
            Ok(gov) => {
                warnings = gov.warnings();
                built = Some(gov);
            }
            Err(e) => errs.errors.extend(e.errors),
        }
    }
    // The `mcp` section (`toolgate mcp serve`): each error named by its path, and every
    // token's agent a profile of the configuration.
    #[cfg(feature = "mcp")]
    if let Some(section) = mcp::section(&text, Format::from_path(config_path)) {
        match toolgate_mcp::serve::ServeConfig::read(&section) {
            Ok(serve) => {
                if let Some(gov) = &built {
                    if let Err(e) = serve.check(gov) {
                        errs.errors.extend(e.errors);
                    }
                    // The upstream servers' tools are listed when they are connected: their
                    // unseen names are one warning per agent and server (issue 23).
                    let ids: Vec<&str> = serve.servers.iter().map(|s| s.id()).collect();
                    warnings = gov.warnings_discovering(&ids);
                }
            }
            Err(e) => errs.errors.extend(e.errors),
        }
    }
    #[cfg(not(feature = "mcp"))]
    let _ = &built;
    let valid = errs.is_empty();
    if json {
        if valid {
            print_json(&json!({
                "valid": true,
                "warnings": warnings.iter().map(|w| json!({"path": w.path, "message": w.message})).collect::<Vec<_>>(),
            }));
        } else {
            print_json(&json!({"valid": false, "errors": errors_json(&errs)}));
        }
    } else if valid {
        println!("valid");
        for w in &warnings {
            println!("warning: {}: {}", w.path, w.message);
        }
    } else {
        println!("invalid");
        for e in &errs.errors {
            println!("error: {e}");
        }
    }
    Ok(if valid {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// What `decide` and `explain` print from.
struct Decided {
    decision: Decision,
    name: String,
    facts: Option<Value>,
    route: Option<AskRoute>,
    /// The quotas covering the call (R44), as `explain` shows them.
    quotas: Vec<Value>,
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

/// A GRANTS file (R45, SPEC §7): one that does not fit exits 2 with every error.
fn read_grants(path: &Path) -> Result<Vec<Grant>, String> {
    let text = read_file(path)?;
    parse_grants(&text).map_err(|e| format!("the grants do not load:\n{e}"))
}

/// A file's text, `-` for standard input.
fn read_arg(arg: &str, what: &str) -> Result<String, String> {
    if arg == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|e| format!("cannot read {what} from standard input: {e}"))?;
        Ok(s)
    } else {
        read_file(Path::new(arg))
    }
}

fn decide(
    config_path: &Path,
    policy: Option<&Path>,
    call_arg: &str,
    grants: Option<&Path>,
) -> Result<Decided, String> {
    let gov = governance(config_path, policy)?;
    let grants = match grants {
        Some(p) => read_grants(p)?,
        None => Vec::new(),
    };
    let text = read_arg(call_arg, "the call")?;
    let call = call::parse(&text).map_err(|e| format!("malformed call: {e}"))?;
    let view = CallView {
        tool: &call.tool,
        agent: &call.agent,
        input: CallInput::Text(&call.input),
        run: call.run,
    };
    let name = call.tool.display_name();
    let facts = gov.lookup(&call.tool).ok().map(tool_facts);
    // SPEC §7: `decide` sees no history of sends (no quota is ever full for it); grants
    // are judged at the call's `at`, by default now.
    let store = MemoryGrants::new(grants);
    let now = call.at.unwrap_or_else(|| SystemClock.now_ms());
    let history = History::new(now, &NoSends, &store).in_session(call.session.as_deref());
    let decided = gov.decide_call_at(view, Vec::new(), &history);
    let quotas = covering_quotas(&gov, &decided);
    let decision = decided.decision;
    // For an ask: the channel kind and the timeout that will answer it (the engine's
    // routing, the one the approval gate applies).
    let route = match decision.verdict {
        Verdict::Ask { .. } => gov.agent(&call.agent.profile).map(|a| gov.ask_route(a)),
        _ => None,
    };
    Ok(Decided {
        decision,
        name,
        facts,
        route,
        quotas,
    })
}

/// The quotas covering a decided call, as `explain` shows them.
fn covering_quotas(gov: &Governance, decided: &toolgate_engine::Decided) -> Vec<Value> {
    let PolicyState::Readable(policy) = gov.policy() else {
        return Vec::new();
    };
    decided
        .quota_groups()
        .iter()
        .filter_map(|g| {
            let q = policy.quotas().get(g.quota)?;
            Some(json!({
                "quota": g.quota,
                "max": q.max(),
                "window_secs": q.window_secs(),
                "per": q.per().iter().map(|k| k.as_str()).collect::<Vec<_>>(),
                "reason": q.describe(g.quota),
            }))
        })
        .collect()
}

fn quotas_text(quotas: &[Value]) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    if quotas.is_empty() {
        return s;
    }
    let _ = writeln!(s, "quotas:");
    for q in quotas {
        let _ = writeln!(
            s,
            "  - quotas[{}]: at most {} sent in {} s{}: {}",
            q["quota"],
            q["max"],
            q["window_secs"],
            match q["per"].as_array() {
                Some(per) if !per.is_empty() => format!(
                    " per {}",
                    per.iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                _ => String::new(),
            },
            q["reason"].as_str().unwrap_or("")
        );
    }
    s
}

/// `simulate` (SPEC §7, R44–R46): every call decided in order on the engine's own code,
/// over the in-memory counter and grant store.
fn simulate(
    config_path: &Path,
    policy: Option<&Path>,
    grants: Option<&Path>,
    calls_arg: &str,
    json: bool,
) -> Result<ExitCode, String> {
    let gov = governance(config_path, policy)?;
    let grants = match grants {
        Some(p) => read_grants(p)?,
        None => Vec::new(),
    };
    let text = read_arg(calls_arg, "the calls")?;
    let raw = call::split_list(&text)?;
    let mut calls = Vec::with_capacity(raw.len());
    let mut previous = None;
    for (i, item) in raw.iter().enumerate() {
        let c = call::parse_simulated(item.get()).map_err(|e| format!("calls[{i}]: {e}"))?;
        let at = c.at.unwrap_or(0);
        if previous.is_some_and(|p| at < p) {
            return Err(format!(
                "calls[{i}]: `at` {at} is earlier than the call before it: calls come in non-decreasing `at` order"
            ));
        }
        previous = Some(at);
        calls.push(c);
    }
    let mut sim = Simulation::new(grants);
    let mut steps = Vec::with_capacity(calls.len());
    for (i, c) in calls.iter().enumerate() {
        let view = CallView {
            tool: &c.tool,
            agent: &c.agent,
            input: CallInput::Text(&c.input),
            run: c.run,
        };
        let step = sim
            .step(
                &gov,
                view,
                c.session.as_deref(),
                c.at.unwrap_or(0),
                c.answer,
            )
            .map_err(|e| format!("calls[{i}]: {e}"))?;
        steps.push(step);
    }
    let summary = Summary::of(&steps);
    if json {
        print_json(&json!({
            "results": steps.iter().map(|s| json!({
                "outcome": s.decision.verdict.as_str(),
                "refusal": s.decision.refusal().map(|r| r.code.as_str()),
                "auto_approved": matches!(s.decision.verdict, Verdict::Run { auto_approved: true }),
                "granted": s.decision.granted.as_ref().map(|g| g.id.as_str()),
                "sent": s.sent,
                "retry_after_secs": s.decision.retry_after_secs,
                "reasons": s.decision.reasons,
            })).collect::<Vec<_>>(),
            "summary": {"sent": summary.sent, "asked": summary.asked, "refused": summary.refused},
        }));
    } else {
        for (i, (c, s)) in calls.iter().zip(&steps).enumerate() {
            let d = &s.decision;
            let mut line = format!(
                "[{i}] at {} {} {}: {}",
                c.at.unwrap_or(0),
                c.agent.rule_name(),
                c.tool.display_name(),
                d.verdict
            );
            if let Some(r) = d.refusal() {
                line.push_str(&format!(" ({})", r.code));
            }
            if let Some(g) = &d.granted {
                line.push_str(&format!(", granted by `{}` ({})", g.id, g.granted_by));
            }
            if let Some(secs) = d.retry_after_secs {
                line.push_str(&format!(", retry after {secs} s"));
            }
            line.push_str(if s.sent { ", sent" } else { ", not sent" });
            println!("{line}");
            for r in &d.reasons {
                println!("      - {r}");
            }
        }
        println!(
            "\n{} sent, {} asked, {} refused",
            summary.sent, summary.asked, summary.refused
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// What `explain` says about the tool a call resolved to: each record's identity, its
/// declared and effective network scope (seed 000: an operator's override keeps the
/// declared value for audit), the name it is sent under (R41) and whether it is governed
/// (R42).
fn tool_facts(entry: &toolgate_engine::catalog::Entry) -> Value {
    json!({
        "name": entry.name,
        "governed": !entry.ungoverned,
        "effective_network": entry.network.as_str(),
        "records": entry.records.iter().map(|r| json!({
            "identity": r.identity().to_string(),
            "sent_as": r.decl.sent_name(),
            "declared_network": r.decl.network.as_str(),
            "network_override": r.decl.network_override.map(|n| n.as_str()),
            "effective_network": r.decl.effective_network().as_str(),
            "governed": r.decl.governed,
        })).collect::<Vec<_>>(),
    })
}

fn explain_json(d: &Decision) -> Value {
    json!({
        "outcome": d.verdict.as_str(),
        "refusal": d.refusal().map(|r| r.code.as_str()),
        "auto_approved": matches!(d.verdict, Verdict::Run { auto_approved: true }),
        "channel": match d.verdict { Verdict::Ask { channel } => Some(channel.as_str()), _ => None },
        "decided_by": d.decided_by.as_str(),
        "reasons": d.reasons,
        "asks": d.asks.iter().map(|a| json!({"source": a.source.describe(), "reason": a.reason})).collect::<Vec<_>>(),
        "matched_rules": d.matched_rules.iter().map(|m| json!({"rule": m.index, "effect": m.effect.as_str(), "reason": m.reason})).collect::<Vec<_>>(),
    })
}

/// Where an ask goes: the channel kind, whose setting it is, and the timeout.
fn route_json(r: &AskRoute) -> Value {
    json!({
        "channel": r.channel.as_str(),
        "channel_from": if r.agent_channel { "agent" } else { "host" },
        "timeout_secs": r.timeout.map(|t| t.as_secs()),
    })
}

fn route_text(r: &AskRoute) -> String {
    let whose = if r.agent_channel {
        "the agent's own setting"
    } else {
        "the host's `approval.channel`"
    };
    let wait = match r.timeout {
        Some(t) => format!("expires after {} s unanswered", t.as_secs()),
        None => String::from("waits as long as the channel takes"),
    };
    format!(
        "answered by: the `{}` channel ({whose}); {wait}\n",
        r.channel.as_str()
    )
}

fn facts_text(f: &Value) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    if f["governed"] == Value::Bool(false) {
        let _ = writeln!(
            s,
            "governed:    no (R42: the approval decision never applies)"
        );
    }
    let _ = writeln!(s, "records:");
    for r in f["records"].as_array().into_iter().flatten() {
        let s_ = |k: &str| r[k].as_str().unwrap_or("-").to_owned();
        let _ = writeln!(
            s,
            "  - {} (sent as `{}`): network declared `{}`, override `{}`, effective `{}`",
            s_("identity"),
            s_("sent_as"),
            s_("declared_network"),
            s_("network_override"),
            s_("effective_network"),
        );
    }
    s
}

fn explain_text(d: &Decision, name: Option<&str>) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    if let Some(n) = name {
        let _ = writeln!(s, "tool:        {n}");
    }
    let verdict = match d.verdict {
        Verdict::Run {
            auto_approved: true,
        } => format!("{} (auto-approved by the run mode)", d.verdict),
        Verdict::Run { .. } => d.verdict.to_string(),
        Verdict::Ask { channel } => format!(
            "{} (waits for a person on the `{}` channel)",
            d.verdict,
            channel.as_str()
        ),
        Verdict::Refused(code) => format!("{} ({code})", d.verdict),
    };
    let _ = writeln!(s, "outcome:     {verdict}");
    let _ = writeln!(s, "decided by:  {}", d.decided_by);
    if let Some(g) = &d.granted {
        let _ = writeln!(
            s,
            "granted:     grant `{}` given by `{}` answered the ask (R45)",
            g.id, g.granted_by
        );
    }
    if let Some(secs) = d.retry_after_secs {
        let _ = writeln!(s, "retry after: {secs} s (R44)");
    }
    if !d.reasons.is_empty() {
        let _ = writeln!(s, "reasons:");
        for r in &d.reasons {
            let _ = writeln!(s, "  - {r}");
        }
    }
    if !d.asks.is_empty() {
        let _ = writeln!(s, "asked by:");
        for a in &d.asks {
            let _ = writeln!(s, "  - {}: {}", a.source.describe(), a.reason);
        }
    }
    if !d.matched_rules.is_empty() {
        let _ = writeln!(s, "matched tenant rules:");
        for m in &d.matched_rules {
            let _ = writeln!(
                s,
                "  - rules[{}] ({}){}",
                m.index,
                m.effect,
                m.reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            );
        }
    }
    s
}
