//! `toolgate policy simulate` (R46): the calls an audit log recorded, decided again under
//! the policy in force and under a proposed one, and what would change. The replay itself
//! is the engine's ([`toolgate_engine::replay`]); this module reads the files and prints
//! the report.

use std::path::Path;
use std::process::ExitCode;

use serde_json::Value;
use toolgate_engine::Governance;

/// The report of replaying `audit` under `current` and `proposed` (the engine's
/// [`toolgate_engine::replay`], shared with the approval page's policy tab).
pub(crate) fn report(
    current: &Governance,
    proposed: &Governance,
    audit: &str,
) -> Result<Value, String> {
    toolgate_engine::replay::replay(current, proposed, audit, None).map(|r| r.to_json())
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
    let limits = crate::config_file::load_config(config)?.settings().limits;
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
    print_text(&report);
    Ok(ExitCode::SUCCESS)
}

/// The report as text: what was replayed and read, what could not be judged (R52), and each
/// call decided differently, with the totals.
fn print_text(report: &Value) {
    let changed = at(report, "changed")
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    println!(
        "{} recorded calls replayed ({} skipped: no input recorded){}",
        at(report, "replayed"),
        at(report, "skipped"),
        match at(report, "redacted_inputs").as_u64() {
            Some(0) | None => String::new(),
            Some(n) => format!("; {n} inputs were recorded redacted"),
        }
    );
    // R52: what the replay read besides calls, and what it could not judge — never reported
    // as unchanged.
    let count = |k: &str| at(report, k).as_u64().unwrap_or_default();
    if count("paired") > 0 {
        println!(
            "{} sends of held calls were folded into the held call they answered",
            count("paired")
        );
    }
    if count("other_records") > 0 {
        println!(
            "{} records are no call (listings, content requests): read, not replayed",
            count("other_records")
        );
    }
    if at(report, "unchained").as_bool() == Some(true) {
        println!("note: the log carries no hash chain, so its records could not be checked");
    }
    let unjudged = at(report, "unjudged")
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    for u in unjudged {
        println!(
            "not judged: line {}: `{}` is known to neither policy's catalog (no definition of it in the log)",
            u["line"].as_u64().unwrap_or_default(),
            u["tool"].as_str().unwrap_or("")
        );
    }
    if changed.is_empty() && unjudged.is_empty() {
        println!("no call would be decided differently");
        return;
    }
    if changed.is_empty() {
        println!(
            "no call judged would be decided differently; {} could not be judged",
            unjudged.len()
        );
        return;
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
    let t = at(report, "totals");
    println!(
        "this change over the last {} recorded calls: {} would now be refused, {} asked, {} run{}",
        at(report, "replayed"),
        t["now_refused"],
        t["now_asked"],
        t["now_run"],
        match unjudged.len() {
            0 => String::new(),
            n => format!("; {n} could not be judged"),
        }
    );
}

/// The field `k` of `v`, or `null` (a report's reading never panics).
fn at<'a>(v: &'a Value, k: &str) -> &'a Value {
    static NULL: Value = Value::Null;
    v.get(k).unwrap_or(&NULL)
}
