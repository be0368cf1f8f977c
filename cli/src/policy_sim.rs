//! `toolgate policy simulate` (R46, issue 21): the calls an audit log recorded, decided again
//! under the policy in force and under a proposed one, and what would change.
//!
//! Each record whose input was recorded (`audit.include_input`, or the agent's own `audit`)
//! is replayed; the others are counted as skipped. The replay is a simulation in time order
//! on the engine's own code ([`Simulation`], the same as `toolgate simulate`): quotas see the
//! sends the replay has made so far, and a call that was asked is answered as its record says
//! (approved or denied; otherwise still held). Each policy gets its own history.
//!
//! Recorded inputs are redacted (R33): a rule or quota reading a redacted field sees the
//! redaction marker, not the value. The report says how many records carried one.

use std::path::Path;
use std::process::ExitCode;

use serde_json::{Value, json};
use toolgate_core::{AgentRef, Check, Decision, ToolCall, Verdict};
use toolgate_engine::simulate::{Answer, Simulation, Step};
use toolgate_engine::{CallView, Governance};

/// One recorded call, ready to be decided again.
struct Replayed {
    line: usize,
    time: String,
    at: u64,
    call: ToolCall,
    answer: Option<Answer>,
}

/// How a decision came out, in the report's words.
fn outcome(step: &Step) -> &'static str {
    match step.decision.verdict {
        Verdict::Run { .. } => "run",
        Verdict::Ask { .. } => "ask",
        Verdict::Refused(_) => "refused",
    }
}

/// What decided it: the rule (by index and effect), the quota, the default, or the check.
fn decided_by(d: &Decision) -> String {
    match d.decided_by {
        Check::TenantPolicy => match d
            .matched_rules
            .iter()
            .find(|m| m.effect == toolgate_core::Effect::Deny)
        {
            Some(m) => format!("rules[{}] (deny)", m.index),
            None => String::from("the policy's default"),
        },
        Check::Routing | Check::Passed => {
            let rules: Vec<String> = d
                .matched_rules
                .iter()
                .map(|m| format!("rules[{}] ({})", m.index, m.effect.as_str()))
                .collect();
            if rules.is_empty() && d.decided_by == Check::Passed {
                String::from("no rule")
            } else if rules.is_empty() {
                d.decided_by.as_str().to_owned()
            } else {
                rules.join(", ")
            }
        }
        other => other.as_str().to_owned(),
    }
}

fn summary(step: &Step) -> Value {
    json!({
        "outcome": outcome(step),
        "refusal": step.decision.refusal().map(|r| r.code.as_str()),
        "decided_by": decided_by(&step.decision),
        "sent": step.sent,
    })
}

/// Reads the audit log: the replayable records in time order, and how many were skipped.
fn read_audit(text: &str) -> Result<(Vec<Replayed>, usize, usize), String> {
    let mut replayed = Vec::new();
    let (mut skipped, mut redacted) = (0, 0);
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let record: Value = serde_json::from_str(line)
            .map_err(|e| format!("line {line_no}: not a JSON audit record: {e}"))?;
        let field = |k: &str| record.get(k).and_then(Value::as_str);
        let (Some(tool), Some(agent), Some(time)) = (field("tool"), field("agent"), field("time"))
        else {
            return Err(format!(
                "line {line_no}: an audit record needs `tool`, `agent` and `time`"
            ));
        };
        let Some(input) = record.get("input").cloned() else {
            skipped += 1;
            continue;
        };
        if input.to_string().contains("[REDACTED") {
            redacted += 1;
        }
        let at = humantime::parse_rfc3339(time)
            .map_err(|e| format!("line {line_no}: `time` is not an RFC 3339 time: {e}"))?
            .duration_since(std::time::UNIX_EPOCH)
            .map_err(|_| format!("line {line_no}: `time` is before 1970"))?
            .as_millis();
        let at = u64::try_from(at).map_err(|_| format!("line {line_no}: `time` is too far"))?;
        let who = match field("subagent") {
            Some(sub) => AgentRef::subagent(agent, sub),
            None => AgentRef::profile(agent),
        };
        let answer = match record.pointer("/approval/wait").and_then(Value::as_str) {
            Some("approved") => Some(Answer::Approve),
            Some("denied") => Some(Answer::Deny),
            _ => None,
        };
        replayed.push(Replayed {
            line: line_no,
            time: time.to_owned(),
            at,
            call: ToolCall::new(who, tool, input),
            answer,
        });
    }
    // Records are written in the order calls end; they are replayed in the order they came.
    replayed.sort_by_key(|r| r.at);
    Ok((replayed, skipped, redacted))
}

/// The report of replaying `audit` under `current` and `proposed`.
pub(crate) fn report(
    current: &Governance,
    proposed: &Governance,
    audit: &str,
) -> Result<Value, String> {
    let (calls, skipped, redacted) = read_audit(audit)?;
    let mut now = Simulation::new(Vec::new());
    let mut then = Simulation::new(Vec::new());
    let mut changed = Vec::new();
    let (mut refused, mut asked, mut run) = (0, 0, 0);
    for r in &calls {
        let session = r.call.turn.as_ref().map(|t| t.session.as_str());
        let a = now
            .step(current, CallView::of(&r.call), session, r.at, r.answer)
            .map_err(|e| e.to_string())?;
        let b = then
            .step(proposed, CallView::of(&r.call), session, r.at, r.answer)
            .map_err(|e| e.to_string())?;
        if outcome(&a) == outcome(&b)
            && a.decision.refusal().map(|x| x.code) == b.decision.refusal().map(|x| x.code)
        {
            continue;
        }
        match outcome(&b) {
            "refused" => refused += 1,
            "ask" => asked += 1,
            _ => run += 1,
        }
        changed.push(json!({
            "line": r.line,
            "time": r.time,
            "agent": r.call.agent.rule_name(),
            "tool": r.call.tool.display_name(),
            "current": summary(&a),
            "proposed": summary(&b),
        }));
    }
    Ok(json!({
        "replayed": calls.len(),
        "skipped": skipped,
        "redacted_inputs": redacted,
        "changed": changed,
        "totals": {"now_refused": refused, "now_asked": asked, "now_run": run},
    }))
}

/// `toolgate policy simulate`: prints the report; exit 0, or 2 for a file that cannot be read.
pub(crate) fn run(
    config: &Path,
    current: Option<&Path>,
    proposed: &Path,
    audit: &Path,
    json: bool,
) -> Result<ExitCode, String> {
    let read = |p: &Path| {
        std::fs::read_to_string(p).map_err(|e| format!("cannot read `{}`: {e}", p.display()))
    };
    let limits = crate::inbox::load_config(config)?.settings().limits;
    // A proposed policy that does not load is an error here, never R22's unreadable policy
    // (which would refuse everything and report that as the change).
    let with_policy = |p: &Path| -> Result<Governance, String> {
        let text = read(p)?;
        toolgate_engine::policy::Policy::from_json_str(&text, &limits).map_err(|e| {
            format!(
                "the policy `{}` does not load:\n{}",
                p.display(),
                e.prefixed("policy")
            )
        })?;
        crate::governance(config, Some(p))
    };
    let current = match current {
        Some(p) => with_policy(p)?,
        None => crate::governance(config, None)?,
    };
    let proposed = with_policy(proposed)?;
    let report = report(&current, &proposed, &read(audit)?)
        .map_err(|e| format!("`{}`: {e}", audit.display()))?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let changed = report["changed"].as_array().map_or(&[][..], Vec::as_slice);
    println!(
        "{} recorded calls replayed ({} skipped: no input recorded){}",
        report["replayed"],
        report["skipped"],
        match report["redacted_inputs"].as_u64() {
            Some(0) | None => String::new(),
            Some(n) => format!("; {n} inputs were recorded redacted"),
        }
    );
    if changed.is_empty() {
        println!("no call would be decided differently");
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<6} {:<24} {:<12} {:<28} {:<32} proposed",
        "line", "time", "agent", "tool", "now"
    );
    for c in changed {
        let side = |s: &Value| {
            let code = s["refusal"]
                .as_str()
                .map(|r| format!(" {r}"))
                .unwrap_or_default();
            format!(
                "{}{} by {}",
                s["outcome"].as_str().unwrap_or(""),
                code,
                s["decided_by"].as_str().unwrap_or("")
            )
        };
        println!(
            "{:<6} {:<24} {:<12} {:<28} {:<32} {}",
            c["line"].as_u64().unwrap_or_default(),
            c["time"].as_str().unwrap_or(""),
            c["agent"].as_str().unwrap_or(""),
            c["tool"].as_str().unwrap_or(""),
            side(&c["current"]),
            side(&c["proposed"]),
        );
    }
    let t = &report["totals"];
    println!(
        "this change over the last {} recorded calls: {} would now be refused, {} asked, {} run",
        report["replayed"], t["now_refused"], t["now_asked"], t["now_run"]
    );
    Ok(ExitCode::SUCCESS)
}
