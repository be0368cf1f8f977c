//! How `toolgate inbox list` and `show` print a held call, as text and JSON.

use super::*;

/// An age in whole seconds, like `3m 12s`.
pub(super) fn age(d: Duration) -> String {
    humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
}

pub(super) fn summary_json(r: &HeldRecord, now: Timestamp) -> Value {
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
        "session": r.call.turn.as_ref().map(|t| t.session.clone()),
        "turn": r.call.turn.as_ref().map(|t| t.turn.clone()),
        "prompt": r.interaction().prompt,
    })
}

pub(super) fn agent_text(r: &HeldRecord) -> String {
    match &r.call.agent.subagent {
        Some(sub) => format!("{}/{sub}", r.call.agent.profile),
        None => r.call.agent.profile.clone(),
    }
}

pub(super) fn record_json(r: &HeldRecord, now: Timestamp) -> Value {
    let mut v = summary_json(r, now);
    if let Some(map) = v.as_object_mut() {
        map.insert("call_id".into(), json!(r.call.call_id));
        map.insert("interaction".into(), r.interaction().to_json());
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
            r.input()
                .unwrap_or_else(|e| json!({"unreadable": e.to_string()})),
        );
        // R20: a number `input` cannot hold as written (an integer past 64 bits) is in the
        // compact text as held.
        if !r.literals().is_empty() {
            map.insert("input_as_written".into(), json!(r.call.input_json));
        }
        map.insert("input_hash".into(), json!(r.call.input_hash));
        map.insert("definition_hash".into(), json!(r.call.definition_hash));
        map.insert(
            "reasons".into(),
            Value::Array(
                r.call
                    .reasons
                    .iter()
                    .map(|a| json!({"source": a.source.describe(), "reason": a.reason}))
                    .collect(),
            ),
        );
        map.insert(
            "run".into(),
            json!({"mode": r.call.run.mode.as_str(), "background": r.call.run.background}),
        );
        map.insert("approver".into(), json!(r.approver));
        // R51: how many distinct people must approve the call and whose approvals it has.
        map.insert("approvals".into(), approvals_json(r));
        // R47: the verified principal the answer was given with (`null` for a static-token,
        // header or `--as` approver).
        map.insert(
            "approver_principal".into(),
            r.approver_principal.as_ref().map_or(
                Value::Null,
                |p| json!({"subject": p.subject, "issuer": p.issuer}),
            ),
        );
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

/// R51: `{"needed", "given": [{approver, principal, at}], "missing", "summary"}`.
pub(super) fn approvals_json(r: &HeldRecord) -> Value {
    json!({
        "needed": r.approvals_needed(),
        "given": r.counted_approvals().iter().map(|a| json!({
            "approver": a.approver,
            "principal": a.principal.as_ref().map(|p| json!({"subject": p.subject, "issuer": p.issuer})),
            "at": a.at.to_string(),
        })).collect::<Vec<_>>(),
        "missing": r.approvals_missing(),
        "summary": r.approvals_line(),
    })
}

/// The held call as text a person reads; every value with its hidden characters shown
/// marked (a right-to-left override never makes the reader see another value).
pub(super) fn show_text(r: &HeldRecord, now: Timestamp) -> String {
    let mut s = the_call(r, now);
    s.push_str(&the_question(r));
    s.push_str(&the_answers(r));
    let v = toolgate_core::display::visible;
    if let Some(why) = &r.answer_reason {
        let _ = writeln!(s, "reason:       {}", v(why));
    }
    if let Some(result) = &r.result {
        let _ = writeln!(s, "result:       {}", v(&result.to_string()));
    }
    s
}

/// Where and what the call is: target, prompt, state, tool, agent, age and run.
fn the_call(r: &HeldRecord, now: Timestamp) -> String {
    use toolgate_core::display::visible as v;
    let mut s = String::new();
    let c = &r.call;
    let shown = r.interaction();
    // The execution target first (seed 000): where the call would run.
    if let Some(t) = &c.target {
        let _ = writeln!(s, "runs on:      {}", t.describe());
    }
    let _ = writeln!(s, "{}", v(&shown.prompt));
    let _ = writeln!(s, "interaction:  {}", v(r.id()));
    let _ = writeln!(s, "state:        {}", r.state);
    let _ = writeln!(
        s,
        "as:           {} (the model's name)",
        v(&shown.model_name)
    );
    if let Some(t) = &c.turn {
        let _ = writeln!(s, "session:      {}", v(&t.session));
        let _ = writeln!(s, "turn:         {}", v(&t.turn));
    }
    let ids = c
        .identities
        .iter()
        .map(|i| v(&i.to_string()).into_owned())
        .collect::<Vec<_>>()
        .join(", ");
    let _ = writeln!(s, "tool:         {} ({ids})", v(&c.tool));
    match &c.agent.subagent {
        Some(sub) => {
            let _ = writeln!(
                s,
                "agent:        {} (subagent `{}`)",
                v(&c.agent.profile),
                v(sub)
            );
        }
        None => {
            let _ = writeln!(s, "agent:        {}", v(&c.agent.profile));
        }
    }
    let _ = writeln!(s, "call id:      {}", v(c.call_id.as_str()));
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
    s
}

/// What was asked: the input (every number as written, R20), the reasons and the hashes.
fn the_question(r: &HeldRecord) -> String {
    use toolgate_core::display::{visible as v, visible_layout};
    let mut s = String::new();
    let c = &r.call;
    let _ = writeln!(s, "input:");
    // R20: every number as written (an integer past 64 bits keeps its digits).
    let input = match r.input_pretty() {
        Ok(text) => visible_layout(text),
        Err(e) => format!("(unreadable: {e})"),
    };
    for line in input.lines() {
        let _ = writeln!(s, "    {line}");
    }
    let _ = writeln!(s, "because:");
    for a in &c.reasons {
        let _ = writeln!(s, "  - {}: {}", v(&a.source.describe()), v(&a.reason));
    }
    let _ = writeln!(s, "input hash:   {}", c.input_hash);
    let _ = writeln!(s, "definition:   {}", c.definition_hash);
    s
}

/// Who answered and how (R47, R51).
fn the_answers(r: &HeldRecord) -> String {
    use toolgate_core::display::visible as v;
    let mut s = String::new();
    if let Some(who) = &r.approver {
        let label = if r.state == State::Denied {
            "denied by:"
        } else {
            "approved by:"
        };
        // R51: a call several people approved names them all.
        let who = if r.state == State::Denied {
            who.clone()
        } else {
            r.approved_by()
        };
        let when = r.answered_at.map(|t| t.to_string()).unwrap_or_default();
        let _ = writeln!(s, "{label:<14}{} ({when})", v(&who));
        if let Some(p) = &r.approver_principal {
            let _ = writeln!(
                s,
                "principal:    {} (issuer {})",
                v(&p.subject),
                v(&p.issuer)
            );
        }
    }
    // R51: how many of the approvals the call needs it has, and from whom.
    if let Some(line) = r.approvals_line() {
        let waits = if r.state == State::Pending && r.approvals_missing() > 0 {
            format!("; {}", toolgate_inbox::waits_for(r.approvals_missing()))
        } else {
            String::new()
        };
        let _ = writeln!(s, "approvals:    {}{waits}", v(&line));
        for a in r.counted_approvals() {
            let principal = a
                .principal
                .as_ref()
                .map(|p| format!(", {} (issuer {})", v(&p.subject), v(&p.issuer)))
                .unwrap_or_default();
            let _ = writeln!(s, "  - {}{principal} ({})", v(&a.approver), a.at);
        }
    }
    s
}

pub(super) fn receipt_json(r: &AnswerReceipt) -> Value {
    json!({
        "interaction_id": r.interaction_id,
        "state": if !r.approved { "denied" } else if r.waiting_for() > 0 { "pending" } else { "approved" },
        "approver": r.approver,
        "reason": r.reason,
        "answered_at": r.answered_at.to_string(),
        "replayed": r.replayed,
        // R51: an approval that is not the last one needed leaves the call pending.
        "approvals": r.approvals,
        "approvals_needed": r.approvals_needed,
        "waiting_for": r.waiting_for(),
        "already_approved": r.already_approved,
        "message": r.progress(),
    })
}
