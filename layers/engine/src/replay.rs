//! Policy simulation over an audit log (R46, `toolgate policy simulate`, the policy tab's
//! preview): the calls an audit log recorded, decided again under the policy in force and
//! under a proposed one, and what would change.
//!
//! Each record whose input was recorded (`audit.include_input`, or the agent's own `audit`)
//! is replayed; the others are counted as skipped. The replay is a simulation in time order
//! on the engine's own code ([`Simulation`], the same as `toolgate simulate`): quotas see the
//! sends the replay has made so far, and a call that was asked is answered as its record
//! says (approved or denied; otherwise still held). Each policy gets its own history.
//!
//! Recorded inputs are redacted (R33): a rule or quota reading a redacted field sees the
//! redaction marker, not the value. The report says how many records carried one.
//!
//! What a replay sees is what ran (R46, R52):
//! - a chained log (records with `hash`) is verified first, and one whose chain is broken is
//!   not replayed (an error naming the break); a log with no chain is replayed, and the
//!   report says its records could not be checked ([`Report::unchained`]);
//! - every record kind is read: a gateway's `mcp_tools_changed` records carry the
//!   definitions of the tools its servers listed, registered from then on under both
//!   policies as the gateway registered them (the configuration's operator settings in
//!   force, R52); other events (content reads, failed listings) are counted
//!   ([`Report::other_records`]);
//! - a held call and its later send (the same `interaction_id`) are one call, answered as
//!   the send's record says ([`Report::paired`]);
//! - a call whose tool neither policy's catalog knows (`unknown_tool` under both) is never
//!   reported as unchanged: it is listed as not judged ([`Report::unjudged`]);
//! - each call is replayed in its recorded session (R43).
//!
//! Pure: the caller reads the audit file and passes its text. Each line is read as an
//! [`AuditEntry`] — the type the audit layer
//! writes, borrowing its strings from the text — and only what a replay keeps is copied.
//!
//! ```
//! use toolgate_engine::config::{load_str, Format};
//! use toolgate_engine::policy::{Limits, Policy};
//! use toolgate_engine::{replay, PolicyState};
//! let current = load_str(r#"{"tools": [{"kind": "http", "name": "refund"}],
//!     "agents": [{"name": "support", "allowed_tools": ["refund"]}]}"#, Format::Json).unwrap();
//! let deny = Policy::from_json_str(r#"{"rules": [{"effect": "deny", "tool": "refund"}]}"#, &Limits::default()).unwrap();
//! let proposed = current.with_policy(PolicyState::readable(deny)).unwrap();
//! let audit = r#"{"time": "2030-01-01T00:00:00Z", "tool": "refund", "agent": "support", "input": {"amount": 5}}
//! {"time": "2030-01-01T00:00:01Z", "tool": "refund", "agent": "support"}"#;
//! let report = replay::replay(&current, &proposed, audit, None).unwrap();
//! assert_eq!((report.replayed, report.skipped), (1, 1));
//! assert_eq!(report.totals.now_refused, 1);
//! assert_eq!(report.changed[0].proposed.refusal, Some("denied"));
//! assert_eq!(report.sentence(), "this change over the last 1 recorded calls: 1 would now be refused, 0 asked, 0 run");
//! ```

use serde_json::{Value, json};
use toolgate_core::audit_record::{AuditEntry, AuditEvent};
use toolgate_core::{AgentRef, Check, Decision, Effect, ToolCall, Verdict};

use crate::decide::CallView;
use crate::governance::Governance;
use crate::simulate::{Answer, Simulation, Step};

/// One recorded call, ready to be decided again.
#[derive(Debug)]
struct Replayed {
    line: usize,
    time: String,
    at: u64,
    call: ToolCall,
    session: Option<String>,
    answer: Option<Answer>,
}

/// What the catalog learnt at one instant from a gateway's listing (`mcp_tools_changed`).
#[derive(Debug)]
struct Listed {
    at: u64,
    /// Tools listed (added or changed), as the gateway registered them.
    listed: Vec<toolgate_core::ToolDeclaration>,
    /// Tools no longer listed or withheld: `(server, own name)`.
    gone: Vec<(String, String)>,
}

/// One thing of the log to replay, in time order.
#[derive(Debug)]
// Almost every item is a call: boxing each would add an allocation per record.
#[allow(
    clippy::large_enum_variant,
    reason = "one item per audit record read once and consumed: boxing would add an allocation per record"
)]
enum Item {
    Call(Replayed),
    Catalog(Listed),
}

impl Item {
    fn at(&self) -> u64 {
        match self {
            Item::Call(r) => r.at,
            Item::Catalog(l) => l.at,
        }
    }
}

/// A recorded call the replay could not judge: its tool is in neither policy's catalog (a
/// tool discovered at run time whose definition the log does not carry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unjudged {
    /// The record's line in the audit log (from 1).
    pub line: usize,
    /// The tool as the call named it.
    pub tool: String,
}

/// How one policy decided a replayed call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Side {
    /// `run`, `ask` or `refused`.
    pub outcome: &'static str,
    /// The refusal code of a refused call.
    pub refusal: Option<&'static str>,
    /// What decided it: `rules[3] (deny)`, `the policy's default`, `no rule`, or the check.
    pub decided_by: String,
    /// Whether the replay sent it.
    pub sent: bool,
}

/// A replayed call decided otherwise under the proposed policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The record's line in the audit log (from 1).
    pub line: usize,
    /// The record's `time`.
    pub time: String,
    /// The calling agent (or subagent), as rules name it.
    pub agent: String,
    /// The tool as the call named it.
    pub tool: String,
    /// Under the policy in force.
    pub current: Side,
    /// Under the proposed policy.
    pub proposed: Side,
}

/// How the changed calls come out under the proposed policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Totals {
    /// Changed calls the proposed policy refuses.
    pub now_refused: usize,
    /// Changed calls it asks about.
    pub now_asked: usize,
    /// Changed calls it runs.
    pub now_run: usize,
}

/// What a replay found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Report {
    /// Records replayed (their input was recorded).
    pub replayed: usize,
    /// Records skipped (no input recorded).
    pub skipped: usize,
    /// Replayed records whose input carried a redaction marker.
    pub redacted_inputs: usize,
    /// Every call decided otherwise, in time order.
    pub changed: Vec<Change>,
    /// How the changed calls come out under the proposed policy.
    pub totals: Totals,
    /// Calls that could not be judged (never counted as unchanged).
    pub unjudged: Vec<Unjudged>,
    /// Sends of held calls folded into the held call they answered.
    pub paired: usize,
    /// Records that are no call (listings, content requests): read, not replayed.
    pub other_records: usize,
    /// Whether the log carries no hash chain, so its records could not be checked.
    pub unchained: bool,
}

fn outcome(step: &Step) -> &'static str {
    step.decision.verdict.as_str()
}

/// What decided it: the rule (by index and effect), the quota, the default, or the check.
fn decided_by(d: &Decision) -> String {
    match d.decided_by {
        Check::TenantPolicy => match d.matched_rules.iter().find(|m| m.effect == Effect::Deny) {
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

fn side(step: &Step) -> Side {
    Side {
        outcome: outcome(step),
        refusal: step.decision.refusal().map(|r| r.code.as_str()),
        decided_by: decided_by(&step.decision),
        sent: step.sent,
    }
}

/// What [`read_audit`] found.
#[derive(Debug, Default)]
struct Read {
    items: Vec<Item>,
    skipped: usize,
    redacted: usize,
    paired: usize,
    other: usize,
}

/// Reads the audit log (its last `last` records when given): the replayable calls and the
/// catalog's changes in time order, and how many records were skipped, redacted, paired or
/// of another kind.
fn read_audit(text: &str, last: Option<usize>) -> Result<Read, String> {
    let mut lines: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| (i + 1, l))
        .collect();
    if let Some(n) = last {
        let from = lines.len().saturating_sub(n);
        lines.drain(..from);
    }
    let mut out = Read {
        items: Vec::with_capacity(lines.len()),
        ..Read::default()
    };
    // A held call's position among the items, by its interaction id: its later send is
    // folded into it.
    let mut held: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for (line_no, line) in lines {
        // Read as borrowed as it can be: the strings a replay keeps are copied, the rest of
        // the record is dropped with the line.
        let record = match AuditEntry::parse(line)
            .map_err(|e| format!("line {line_no}: not a JSON audit record: {e}"))?
        {
            AuditEntry::Call(record) => record,
            AuditEntry::Event(event) => {
                match listing(&event, line_no)? {
                    Some(listed) => out.items.push(Item::Catalog(listed)),
                    None => out.other += 1,
                }
                continue;
            }
            _ => {
                out.other += 1;
                continue;
            }
        };
        if record.tool.is_empty() || record.agent.is_empty() || record.time.is_empty() {
            return Err(format!(
                "line {line_no}: an audit record needs `tool`, `agent` and `time`"
            ));
        }
        let approval = record.approval;
        let wait = approval.as_ref().map(|a| a.wait.as_ref());
        let interaction = approval
            .as_ref()
            .and_then(|a| a.interaction_id.as_deref())
            .map(str::to_owned);
        let answer = match wait {
            Some("approved") => Some(Answer::Approve),
            Some("denied") => Some(Answer::Deny),
            _ => None,
        };
        // The send of a call held earlier in this log: the held call is answered by it.
        if let Some(first) = interaction.as_ref().and_then(|id| held.get(id))
            && wait != Some("held")
        {
            if let Some(Item::Call(r)) = out.items.get_mut(*first) {
                r.answer = answer;
            }
            out.paired += 1;
            continue;
        }
        // Present, `null` included: only a record without `input` is skipped.
        let Some(input) = record.input else {
            out.skipped += 1;
            continue;
        };
        if mentions_redaction(&input) {
            out.redacted += 1;
        }
        let who = match record.subagent {
            Some(sub) => AgentRef::subagent(record.agent.as_ref(), sub.as_ref()),
            None => AgentRef::profile(record.agent.as_ref()),
        };
        if let (Some(id), Some("held")) = (&interaction, wait) {
            held.insert(id.clone(), out.items.len());
        }
        out.items.push(Item::Call(Replayed {
            line: line_no,
            at: millis(&record.time, line_no)?,
            time: record.time.into_owned(),
            call: ToolCall::new(who, record.tool.into_owned(), input),
            session: record.session.map(|s| s.into_owned()),
            answer,
        }));
    }
    // Records are written in the order calls end; they are replayed in the order they came
    // (a stable sort: records of one instant keep the log's order).
    out.items.sort_by_key(Item::at);
    Ok(out)
}

/// A record's `time` as Unix milliseconds.
fn millis(time: &str, line_no: usize) -> Result<u64, String> {
    let at = humantime::parse_rfc3339(time)
        .map_err(|e| format!("line {line_no}: `time` is not an RFC 3339 time: {e}"))?
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| format!("line {line_no}: `time` is before 1970"))?
        .as_millis();
    u64::try_from(at).map_err(|_| format!("line {line_no}: `time` is too far"))
}

/// What a gateway's listing (`mcp_tools_changed`, R52) taught the catalog; `None` for
/// another event.
fn listing(event: &AuditEvent<'_>, line_no: usize) -> Result<Option<Listed>, String> {
    if event.event != AuditEvent::MCP_TOOLS_CHANGED {
        return Ok(None);
    }
    let time = event
        .time
        .as_deref()
        .ok_or_else(|| format!("line {line_no}: an `mcp_tools_changed` record needs `time`"))?;
    let changes = match event.fields.get("changes") {
        None | Some(Value::Null) => &[][..],
        Some(Value::Array(changes)) => changes.as_slice(),
        Some(_) => {
            return Err(format!(
                "line {line_no}: the `changes` of an `mcp_tools_changed` record are not a list"
            ));
        }
    };
    let server = event.str("server").unwrap_or_default();
    let mut listed = Listed {
        at: millis(time, line_no)?,
        listed: Vec::new(),
        gone: Vec::new(),
    };
    for c in changes {
        let name = c.get("name").and_then(Value::as_str).unwrap_or_default();
        match c.get("change").and_then(Value::as_str) {
            Some("added" | "changed") => match c
                .get("definition")
                .and_then(crate::canon::listed_from_record)
            {
                Some(decl) => listed.listed.push(decl),
                // No definition recorded (an older gateway): the tool stays unknown, and its
                // calls are reported as not judged.
                None => listed.gone.push((server.to_owned(), name.to_owned())),
            },
            Some("removed" | "withheld") => {
                listed.gone.push((server.to_owned(), name.to_owned()));
            }
            _ => {}
        }
    }
    Ok(Some(listed))
}

/// Whether a recorded input holds a redaction marker (R33) anywhere.
fn mentions_redaction(v: &Value) -> bool {
    match v {
        Value::String(s) => s.contains("[REDACTED"),
        Value::Array(a) => a.iter().any(mentions_redaction),
        Value::Object(m) => m
            .iter()
            .any(|(k, v)| k.contains("[REDACTED") || mentions_redaction(v)),
        _ => false,
    }
}

/// Replays the calls `audit` recorded (its last `last` records, when given) under `current`
/// and `proposed`: every call decided otherwise, and the totals. An error names the line of
/// a record that cannot be read, or the break of a chain that does not verify.
pub fn replay(
    current: &Governance,
    proposed: &Governance,
    audit: &str,
    last: Option<usize>,
) -> Result<Report, String> {
    // A chained log (its first record has a top-level `hash`) is checked first: a log that
    // may have been altered is not replayed.
    let unchained = audit
        .lines()
        .find(|l| !l.trim().is_empty())
        .and_then(|l| AuditEntry::parse(l).ok())
        .is_none_or(|first| first.hash().is_none());
    if !unchained {
        crate::chain::verify_chain(audit.as_bytes()).map_err(|b| {
            format!(
                "the audit log's hash chain is broken at {b}: a log that may have been altered is not replayed (`toolgate audit verify` names the break)"
            )
        })?;
    }
    let read = read_audit(audit, last)?;
    let mut now = Simulation::new(Vec::new());
    let mut then = Simulation::new(Vec::new());
    let mut report = Report {
        skipped: read.skipped,
        redacted_inputs: read.redacted,
        paired: read.paired,
        other_records: read.other,
        unchained,
        ..Report::default()
    };
    // The tools the gateway's servers listed so far (R52), registered under both policies.
    let mut listed: Vec<toolgate_core::ToolDeclaration> = Vec::new();
    let mut governed: Option<(Governance, Governance)> = None;
    for item in &read.items {
        let r = match item {
            Item::Catalog(l) => {
                listed.retain(|d| {
                    let id = &d.identity;
                    !l.listed.iter().any(|n| n.identity.same_identity(id))
                        && !l.gone.iter().any(|(server, name)| {
                            id.source().eq_ignore_ascii_case(server)
                                && id.name().eq_ignore_ascii_case(name)
                        })
                });
                listed.extend(l.listed.iter().cloned());
                let with = |g: &Governance| {
                    listed
                        .iter()
                        .fold(g.to_builder(), |b, d| b.listed(d.clone()))
                        .build()
                        .map_err(|e| {
                            format!("the tools the log's listings name do not register: {e}")
                        })
                };
                governed = Some((with(current)?, with(proposed)?));
                continue;
            }
            Item::Call(r) => r,
        };
        report.replayed += 1;
        let (cur, prop) = match &governed {
            Some((c, p)) => (c, p),
            None => (current, proposed),
        };
        let session = r
            .session
            .as_deref()
            .or_else(|| r.call.turn.as_ref().map(|t| t.session.as_str()));
        let a = now
            .step(cur, CallView::of(&r.call), session, r.at, r.answer)
            .map_err(|e| e.to_string())?;
        let b = then
            .step(prop, CallView::of(&r.call), session, r.at, r.answer)
            .map_err(|e| e.to_string())?;
        let unknown = |s: &Step| {
            s.decision.refusal().map(|x| x.code) == Some(toolgate_core::RefusalCode::UnknownTool)
        };
        if unknown(&a) && unknown(&b) {
            report.unjudged.push(Unjudged {
                line: r.line,
                tool: r.call.tool.display_name(),
            });
            continue;
        }
        if outcome(&a) == outcome(&b)
            && a.decision.refusal().map(|x| x.code) == b.decision.refusal().map(|x| x.code)
        {
            continue;
        }
        match b.decision.verdict {
            Verdict::Refused(_) => report.totals.now_refused += 1,
            Verdict::Ask { .. } => report.totals.now_asked += 1,
            Verdict::Run { .. } => report.totals.now_run += 1,
        }
        report.changed.push(Change {
            line: r.line,
            time: r.time.clone(),
            agent: r.call.agent.rule_name().to_owned(),
            tool: r.call.tool.display_name(),
            current: side(&a),
            proposed: side(&b),
        });
    }
    Ok(report)
}

impl Side {
    fn to_json(&self) -> Value {
        json!({
            "outcome": self.outcome,
            "refusal": self.refusal,
            "decided_by": self.decided_by,
            "sent": self.sent,
        })
    }
}

impl Report {
    /// The report as `toolgate policy simulate --json` prints it.
    pub fn to_json(&self) -> Value {
        json!({
            "replayed": self.replayed,
            "skipped": self.skipped,
            "redacted_inputs": self.redacted_inputs,
            "changed": self.changed.iter().map(|c| json!({
                "line": c.line,
                "time": c.time,
                "agent": c.agent,
                "tool": c.tool,
                "current": c.current.to_json(),
                "proposed": c.proposed.to_json(),
            })).collect::<Vec<_>>(),
            "totals": {
                "now_refused": self.totals.now_refused,
                "now_asked": self.totals.now_asked,
                "now_run": self.totals.now_run,
            },
            "unjudged": self.unjudged.iter().map(|u| json!({"line": u.line, "tool": u.tool})).collect::<Vec<_>>(),
            "paired": self.paired,
            "other_records": self.other_records,
            "unchained": self.unchained,
        })
    }

    /// "this change over the last N recorded calls: X would now be refused, Y asked, Z run",
    /// and, when there are any, the calls that could not be judged.
    pub fn sentence(&self) -> String {
        let mut out = format!(
            "this change over the last {} recorded calls: {} would now be refused, {} asked, {} run",
            self.replayed, self.totals.now_refused, self.totals.now_asked, self.totals.now_run
        );
        if !self.unjudged.is_empty() {
            out.push_str(&format!(
                "; {} could not be judged (their tools are known to neither policy's catalog)",
                self.unjudged.len()
            ));
        }
        out
    }
}
