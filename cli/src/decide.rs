//! `toolgate check`, `decide`, `explain` and `simulate`: a configuration's warnings, and one
//! call decided and explained as the conformance interface prints it (SPEC §7).

use super::*;

pub(super) fn check(
    config_path: &Path,
    policy: Option<&Path>,
    json: bool,
) -> Result<ExitCode, String> {
    let mut found = check_config(config_path, policy)?;
    #[cfg(feature = "mcp")]
    found.check_mcp(config_path);
    found.check_page();
    if let Some(inbox) = found.check_inbox() {
        found.warnings.extend(writable_inbox(&inbox));
        found.notes.extend(inbox_transport(&inbox, &mut found.errs));
    }
    Ok(found.print(json))
}

/// What `check` found: the snapshot when it builds, every error (with its path), the
/// warnings and the notes.
struct Findings {
    /// The configuration's text (the `mcp` and `hooks` sections are read from it).
    #[cfg_attr(
        not(feature = "mcp"),
        expect(dead_code, reason = "only the `mcp` sections read it")
    )]
    text: String,
    built: Option<Governance>,
    errs: ConfigErrors,
    warnings: Vec<toolgate_engine::Warning>,
    notes: Vec<String>,
}

/// The configuration (and the stored policy, when given) read and built: every error of
/// both, the snapshot's warnings when it builds.
fn check_config(config_path: &Path, policy: Option<&Path>) -> Result<Findings, String> {
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
    Ok(Findings {
        text,
        built,
        errs,
        warnings,
        notes: Vec::new(),
    })
}

impl Findings {
    /// The inbox's own section (`inbox`), read by the inbox's reader: every error with its
    /// path, beside the engine's; the settings when they read.
    fn check_inbox(&mut self) -> Option<toolgate_inbox::InboxSettings> {
        match toolgate_inbox::InboxSettings::read(self.built.as_ref()?) {
            Ok(inbox) => inbox,
            Err(e) => {
                self.errs.errors.extend(e.errors);
                None
            }
        }
    }

    /// The approval page's own fields of `approvers` (`api_keys`, `slack`, the verification
    /// settings of `jwt`), read by the page's reader: every error with its path, beside the
    /// engine's.
    #[cfg(feature = "serve")]
    fn check_page(&mut self) {
        if let Some(approvers) = self.built.as_ref().and_then(Governance::approver_settings)
            && let Err(e) = toolgate_web::access::PageAccess::read(approvers)
        {
            self.errs.errors.extend(e.errors);
        }
    }

    /// Without the approval page's crate its fields cannot be read: said, since `serve`
    /// is not in this build either.
    #[cfg(not(feature = "serve"))]
    fn check_page(&mut self) {
        let Some(approvers) = self.built.as_ref().and_then(Governance::approver_settings) else {
            return;
        };
        for field in toolgate_engine::approvers::ApproverSettings::PAGE_FIELDS {
            if approvers.page_field(field).is_some() {
                self.notes.push(format!(
                    "`approvers.{field}` was not checked: this toolgate was built without the approval page (feature `serve`)"
                ));
            }
        }
        if let toolgate_engine::approvers::ApproverAuth::Jwt(_) = &approvers.auth {
            self.notes.push(String::from(
                "the verification settings of `approvers.jwt` were not checked: this toolgate was built without the approval page (feature `serve`)",
            ));
        }
    }

    /// The `mcp` and `hooks` sections (`toolgate mcp serve`), read and checked against the
    /// snapshot.
    #[cfg(feature = "mcp")]
    fn check_mcp(&mut self, config_path: &Path) {
        let (text, built, errs, warnings, notes) = (
            &self.text,
            &self.built,
            &mut self.errs,
            &mut self.warnings,
            &mut self.notes,
        );
        // The `mcp` section (`toolgate mcp serve`): each error named by its path, and every
        // token's agent a profile of the configuration.
        if let Some(section) = mcp::section(text, Format::from_path(config_path), "mcp") {
            match toolgate_mcp::serve::ServeConfig::read(&section) {
                Ok(serve) => {
                    // Which trust roots each `https://` upstream is reached with (its files as
                    // `mcp serve` reads them: relative to the configuration).
                    let resolved = serve
                        .clone()
                        .relative_to(&toolgate_engine::config::config_dir(config_path));
                    for s in &resolved.servers {
                        if let Some(trust) = s.trust() {
                            notes.push(format!("mcp.servers.{}: {trust}", s.id()));
                        }
                        if let Some(how) = s.on_behalf() {
                            notes.push(format!("mcp.servers.{}.token_exchange: {how}", s.id()));
                        }
                    }
                    if let Some(gov) = built {
                        if let Err(e) = serve.check(gov) {
                            errs.errors.extend(e.errors);
                        }
                        if let Err(e) = serve.check_quota_store(gov) {
                            errs.errors.extend(e.errors);
                        }
                        // The upstream servers' tools are listed when they are connected: their
                        // unseen names are one warning per agent and server (R6).
                        let ids: Vec<&str> = serve.servers.iter().map(|s| s.id()).collect();
                        *warnings = gov.warnings_discovering(&ids);
                    }
                }
                Err(e) => errs.errors.extend(e.errors),
            }
        }
        // R32: the decision services of `hooks`, each problem named by its path, and which
        // service is asked when.
        if let Some(section) = mcp::section(text, Format::from_path(config_path), "hooks") {
            match toolgate_mcp::hooks::read_hooks(&section) {
                Ok(hooks) => notes.extend(hooks.iter().enumerate().map(|(i, h)| {
                    format!(
                        "hooks[{i}]: the decision service `{}` is asked {} (within {} ms; no answer refuses the call)",
                        h.url,
                        match h.phase {
                            toolgate_mcp::hooks::HookPhase::BeforeCall => "before each call is sent",
                            _ => "after each call's result",
                        },
                        h.timeout.as_millis()
                    )
                })),
                Err(e) => errs.errors.extend(e.errors),
            }
        }
    }

    /// Prints the findings as text or JSON; the exit code.
    fn print(&self, json: bool) -> ExitCode {
        let (errs, warnings, notes) = (&self.errs, &self.warnings, &self.notes);
        let valid = errs.is_empty();
        if json {
            if valid {
                let mut out = serde_json::Map::new();
                out.insert("valid".into(), json!(true));
                out.insert(
                    "warnings".into(),
                    warnings
                        .iter()
                        .map(|w| json!({"path": w.path, "message": w.message}))
                        .collect(),
                );
                if !notes.is_empty() {
                    out.insert("notes".into(), json!(notes));
                }
                let out = serde_json::Value::Object(out);
                print_json(&out);
            } else {
                print_json(&json!({"valid": false, "errors": errors_json(errs)}));
            }
        } else if valid {
            println!("valid");
            for w in warnings {
                println!("warning: {}: {}", w.path, w.message);
            }
            for n in notes {
                println!("note: {n}");
            }
        } else {
            println!("invalid");
            for e in &errs.errors {
                println!("error: {e}");
            }
        }
        if valid {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        }
    }
}

/// What `decide` and `explain` print from.
pub(super) struct Decided {
    pub(super) decision: Decision,
    pub(super) name: String,
    pub(super) facts: Option<Value>,
    pub(super) route: Option<AskRoute>,
    /// The quotas covering the call (R44), as `explain` shows them.
    pub(super) quotas: Vec<Value>,
}

/// A GRANTS file (R45, SPEC §7): one that does not fit exits 2 with every error.
pub(super) fn read_grants(path: &Path) -> Result<Vec<Grant>, String> {
    let text = read_file(path)?;
    parse_grants(&text).map_err(|e| format!("the grants do not load:\n{e}"))
}

/// A file's text, `-` for standard input.
pub(super) fn read_arg(arg: &str, what: &str) -> Result<String, String> {
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

pub(super) fn decide(
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
pub(super) fn covering_quotas(gov: &Governance, decided: &toolgate_engine::Decided) -> Vec<Value> {
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

pub(super) fn quotas_text(quotas: &[Value]) -> String {
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
pub(super) fn simulate(
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
pub(super) fn tool_facts(entry: &toolgate_engine::catalog::Entry) -> Value {
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

pub(super) fn explain_json(d: &Decision) -> Value {
    json!({
        "outcome": d.verdict.as_str(),
        "refusal": d.refusal().map(|r| r.code.as_str()),
        "auto_approved": matches!(d.verdict, Verdict::Run { auto_approved: true }),
        "channel": match d.verdict { Verdict::Ask { channel } => Some(channel.as_str()), _ => None },
        "decided_by": d.decided_by.as_str(),
        "reasons": d.reasons,
        "asks": d.asks.iter().map(|a| json!({"source": a.source.describe(), "reason": a.reason})).collect::<Vec<_>>(),
        "matched_rules": d.matched_rules.iter().map(|m| json!({"rule": m.index, "effect": m.effect.as_str(), "reason": m.reason})).collect::<Vec<_>>(),
        "approvals": d.approvals,
        "labels": d.labels.as_ref().map(|l| json!({"tool": l.tool, "session": l.session})),
    })
}

/// Where an ask goes: the channel kind, whose setting it is, and the timeout.
pub(super) fn route_json(r: &AskRoute) -> Value {
    json!({
        "channel": r.channel.as_str(),
        "channel_from": if r.agent_channel { "agent" } else { "host" },
        "timeout_secs": r.timeout.map(|t| t.as_secs()),
    })
}

pub(super) fn route_text(r: &AskRoute) -> String {
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

pub(super) fn facts_text(f: &Value) -> String {
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

pub(super) fn explain_text(d: &Decision, name: Option<&str>) -> String {
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
    if d.approvals > 1 {
        let _ = writeln!(
            s,
            "approvals:   {} distinct people must approve it (R51)",
            d.approvals
        );
    }
    if let Some(l) = &d.labels {
        let list = |v: &toolgate_engine::labels::LabelSet| {
            if v.is_empty() {
                String::from("none")
            } else {
                v.join(", ")
            }
        };
        let session = l
            .session
            .as_ref()
            .map_or_else(|| String::from("not read (no history)"), list);
        let _ = writeln!(
            s,
            "labels:      the tool carries: {}; the session has: {session} (R49)",
            list(&l.tool)
        );
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

/// How a PostgreSQL inbox will be reached (held-calls.md, "PostgreSQL over TLS") — plain
/// text or TLS, and which certificates it trusts — as `inbox.postgres: …`; a URL that
/// cannot connect as written (an unknown `sslmode`, plain text to another host, an
/// unreadable `sslrootcert`) is an error.
fn inbox_transport(
    inbox: &toolgate_inbox::InboxSettings,
    errs: &mut ConfigErrors,
) -> Option<String> {
    let toolgate_inbox::InboxStoreSetting::Postgres(url) = &inbox.store else {
        return None;
    };
    let options = toolgate_inbox_postgres::PostgresOptions::default().plaintext_hosts_from_env();
    match toolgate_inbox_postgres::transport(url, &options) {
        Ok(t) => Some(format!("inbox.postgres: {t}")),
        Err(e) => {
            errs.push("inbox.postgres", e.message());
            None
        }
    }
}

/// The inbox store must not be writable by the agents' account (held-calls.md). A SQLite
/// inbox file that its group or anyone may write is a warning: an agent running as another
/// account of that group could answer its own held calls by writing the file.
fn writable_inbox(inbox: &toolgate_inbox::InboxSettings) -> Option<toolgate_engine::Warning> {
    let toolgate_inbox::InboxStoreSetting::Sqlite(path) = &inbox.store else {
        return None;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path).ok()?.permissions().mode();
        (mode & 0o022 != 0).then(|| toolgate_engine::Warning {
            path: String::from("inbox.sqlite"),
            message: format!(
                "the inbox file `{}` is writable by {} (mode {:o}): whoever can write it can answer held calls, so make it writable by toolgate's account only (`chmod 600`) and never run agents as that account",
                path,
                if mode & 0o002 != 0 { "anyone" } else { "its group" },
                mode & 0o777
            ),
        })
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}
