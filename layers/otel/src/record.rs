//! What goes on a span: the attributes at its start and at its end.
//!
//! INVARIANT: no secret reaches a span (R33). The input and output reach one only with
//! content capture on, and then only through [`Redactor::redact_value`]; every free text —
//! reasons, a tool's description, the name of a tool no catalog vouches for — goes through
//! [`Redactor::redact_text`]; all of it is truncated. Identifiers (the call id, the agent's
//! profile, a registered tool's name) are recorded as they are, the call id bounded in
//! length. Tested by
//! `r33_r34_with_content_on_secrets_reach_no_span_attribute` and
//! `r33_an_unknown_tool_name_is_redacted_before_it_names_a_span`.

use std::sync::Arc;

use opentelemetry::{Array, KeyValue, StringValue, Value};
use toolgate::core::{
    Check, DecisionNote, ToolCall, ToolKind, ToolOutput, ToolRef, ToolResponse, Verdict, WaitEnd,
};
use toolgate::engine::Governance;
use toolgate::redact::Redactor;
use toolgate::{GovernanceHandle, Pinned};

use crate::attributes::{self as attr, values};
use crate::shared::Shared;

/// The longest tool name (when no catalog vouches for it) or call id put on a span.
const MAX_NAME_CHARS: usize = 256;

/// The span's name and its attributes at start.
pub(crate) struct Started {
    /// `execute_tool {gen_ai.tool.name}`.
    pub(crate) span_name: String,
    /// Set when the span starts (samplers see them).
    pub(crate) attributes: Vec<KeyValue>,
    /// The name the redactor is told, for per-tool rules.
    pub(crate) tool: String,
}

/// The `gen_ai.tool.type` of a set of identity kinds: `function` when every record behind
/// the name is a first-party toolset tool, `extension` when any comes from outside.
fn tool_type(mut kinds: impl Iterator<Item = ToolKind>) -> &'static str {
    if kinds.all(|k| k == ToolKind::Local) {
        values::FUNCTION
    } else {
        values::EXTENSION
    }
}

/// A text cut to at most `max` characters.
fn bounded(text: String, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => {
            let mut cut = text;
            cut.truncate(at);
            cut.push('…');
            cut
        }
        None => text,
    }
}

/// A value, redacted, as truncated JSON text. A value that cannot be serialised is left
/// out whole.
pub(crate) fn content_text(redactor: &Redactor, tool: &str, value: &serde_json::Value) -> String {
    let redacted = redactor.redact_value(tool, value);
    match serde_json::to_string(&redacted) {
        Ok(text) => redactor.truncate(&text),
        Err(_) => String::from("\"[REDACTED]\""),
    }
}

/// A reason, redacted and truncated.
fn reason_text(redactor: &Redactor, reason: &str) -> StringValue {
    StringValue::from(redactor.redact_and_truncate(reason))
}

/// The snapshot to look the tool up in: the call's pinned one, else the handle's current.
fn snapshot(handle: Option<&GovernanceHandle>, call: &ToolCall) -> Option<Arc<Governance>> {
    match handle {
        Some(h) => Some(
            h.pinned(call)
                .map(|p| Arc::clone(p.governance()))
                .unwrap_or_else(|| h.load()),
        ),
        // A pin made for another call (kept and put on this one) is not this call's.
        None => call
            .extensions
            .get::<Pinned>()
            .filter(|p| *p.call_id() == call.id)
            .map(|p| Arc::clone(p.governance())),
    }
}

/// The attributes known when the call arrives.
pub(crate) fn start(shared: &Shared, call: &ToolCall) -> Started {
    let redactor = &shared.redactor;
    let called = call.tool.display_name();
    let governance = snapshot(shared.governance.as_ref(), call);
    let entry = governance
        .as_deref()
        .and_then(|g| g.lookup(&call.tool).ok());
    let mut attributes = Vec::with_capacity(12);
    attributes.push(KeyValue::new(
        attr::GEN_AI_OPERATION_NAME,
        values::EXECUTE_TOOL,
    ));
    let (name, tool) = match entry {
        Some(entry) => {
            attributes.push(KeyValue::new(
                attr::GEN_AI_TOOL_TYPE,
                tool_type(entry.records.iter().map(|r| r.identity().kind())),
            ));
            if let Some(description) = entry.description() {
                attributes.push(KeyValue::new(
                    attr::GEN_AI_TOOL_DESCRIPTION,
                    redactor.redact_and_truncate(description),
                ));
            }
            let declared: Vec<&str> = entry
                .records
                .iter()
                .map(|r| r.decl.network.as_str())
                .collect();
            attributes.push(KeyValue::new(
                attr::TOOLGATE_TOOL_NETWORK_DECLARED,
                declared.join(","),
            ));
            attributes.push(KeyValue::new(
                attr::TOOLGATE_TOOL_NETWORK_EFFECTIVE,
                entry.network.as_str(),
            ));
            // The name as called: it equals a registered name but for ASCII case (R2).
            (called, entry.name.clone())
        }
        None => {
            // Not vouched for by a catalog: whatever the model wrote, redacted and bounded.
            if governance.is_none()
                && let ToolRef::Identity(id) | ToolRef::Both { identity: id, .. } = &call.tool
            {
                attributes.push(KeyValue::new(
                    attr::GEN_AI_TOOL_TYPE,
                    tool_type(std::iter::once(id.kind())),
                ));
            }
            let name = bounded(redactor.redact_text(&called), MAX_NAME_CHARS);
            (name.clone(), name)
        }
    };
    attributes.push(KeyValue::new(attr::GEN_AI_TOOL_NAME, name.clone()));
    attributes.push(KeyValue::new(
        attr::GEN_AI_TOOL_CALL_ID,
        bounded(call.id.as_str().to_owned(), MAX_NAME_CHARS),
    ));
    attributes.push(KeyValue::new(
        attr::TOOLGATE_AGENT_PROFILE,
        call.agent.profile.clone(),
    ));
    if let Some(sub) = &call.agent.subagent {
        attributes.push(KeyValue::new(attr::TOOLGATE_AGENT_SUBAGENT, sub.clone()));
    }
    // The verified principal of the caller's identity-provider token.
    if let Some(p) = call.extensions.get::<toolgate::core::Principal>() {
        attributes.push(KeyValue::new(
            attr::TOOLGATE_PRINCIPAL_SUBJECT,
            bounded(p.subject.clone(), MAX_NAME_CHARS),
        ));
        attributes.push(KeyValue::new(
            attr::TOOLGATE_PRINCIPAL_ISSUER,
            bounded(p.issuer.clone(), MAX_NAME_CHARS),
        ));
    }
    attributes.push(KeyValue::new(
        attr::TOOLGATE_RUN_MODE,
        call.run.mode.as_str(),
    ));
    attributes.push(KeyValue::new(
        attr::TOOLGATE_RUN_BACKGROUND,
        call.run.background,
    ));
    if shared.content {
        attributes.push(KeyValue::new(
            attr::GEN_AI_TOOL_CALL_ARGUMENTS,
            content_text(redactor, &tool, &call.input),
        ));
    }
    Started {
        span_name: format!("{} {name}", values::EXECUTE_TOOL),
        attributes,
        tool,
    }
}

fn index(i: usize) -> i64 {
    i64::try_from(i).unwrap_or(i64::MAX)
}

/// The shadow policy's attributes (R46): its outcome, refusal code and deciding rule, and
/// whether it disagrees with `enforced` (returned).
pub(crate) fn shadow(
    shadow: &toolgate::core::ShadowNote,
    enforced: &toolgate::core::Decision,
    attributes: &mut Vec<KeyValue>,
) -> bool {
    let d = &shadow.decision;
    attributes.push(KeyValue::new(
        attr::TOOLGATE_SHADOW_OUTCOME,
        d.verdict.as_str(),
    ));
    if let Some(r) = d.refusal() {
        attributes.push(KeyValue::new(
            attr::TOOLGATE_SHADOW_REFUSAL_CODE,
            r.code.as_str(),
        ));
    }
    if let Some(rule) = shadow.rule() {
        attributes.push(KeyValue::new(attr::TOOLGATE_SHADOW_RULE, index(rule)));
    }
    let disagrees = shadow.disagrees_with(enforced);
    attributes.push(KeyValue::new(attr::TOOLGATE_SHADOW_DISAGREES, disagrees));
    disagrees
}

/// Whom the call was sent upstream for (RFC 8693 token exchange): the subject and the
/// `act` chain, current actor first.
pub(crate) fn delegation(d: &toolgate::core::Delegation, attributes: &mut Vec<KeyValue>) {
    attributes.push(KeyValue::new(
        attr::TOOLGATE_DELEGATION_SUBJECT,
        bounded(d.subject.clone(), MAX_NAME_CHARS),
    ));
    if !d.actors.is_empty() {
        attributes.push(KeyValue::new(
            attr::TOOLGATE_DELEGATION_ACTORS,
            bounded(d.actors.join(","), MAX_NAME_CHARS),
        ));
    }
}

/// The decision's attributes: from the response's refusal, and from the gate's note when
/// there is one. `response` is `None` when the call never completed (a transport error, or
/// the future was dropped): then the note alone tells what was decided.
pub(crate) fn decision(
    redactor: &Redactor,
    note: Option<&DecisionNote>,
    answered_by: Option<&toolgate::core::Principal>,
    response: Option<&ToolResponse>,
    attributes: &mut Vec<KeyValue>,
) {
    let refusal = response.and_then(ToolResponse::refusal);
    if note.is_none() && refusal.is_none() {
        // No gate recorded a decision (there is none, or a layer took the note from the
        // sink) and nothing refused: whether anyone was asked is unknown, so nothing is
        // claimed.
        return;
    }
    outcome(note, response, refusal, attributes);
    reasons(redactor, note, response, refusal, attributes);
    let Some(note) = note else {
        return;
    };
    rules_labels_and_asks(&note.decision, attributes);
    approval(note, answered_by, attributes);
}

/// The outcome (refused, asked or run) as toolgate and as a guardrail name it, the refusal's
/// code and retry-after, and the check that decided.
fn outcome(
    note: Option<&DecisionNote>,
    response: Option<&ToolResponse>,
    refusal: Option<&toolgate::core::Refusal>,
    attributes: &mut Vec<KeyValue>,
) {
    let asked = matches!(response, Some(ToolResponse::Held(_)))
        || note.is_some_and(|n| matches!(n.decision.verdict, Verdict::Ask { .. }));
    let refused = refusal.is_some()
        || (response.is_none()
            && note.is_some_and(|n| matches!(n.decision.verdict, Verdict::Refused(_))));
    let (outcome, guardrail) = if refused {
        (Verdict::REFUSED, values::DENY)
    } else if asked {
        (Verdict::ASK, values::ASK)
    } else {
        (Verdict::RUN, values::ALLOW)
    };
    attributes.push(KeyValue::new(attr::TOOLGATE_DECISION_OUTCOME, outcome));
    attributes.push(KeyValue::new(
        attr::GEN_AI_GUARDRAIL_NAME,
        values::GUARDRAIL,
    ));
    attributes.push(KeyValue::new(attr::GEN_AI_GUARDRAIL_DECISION, guardrail));
    if let Some(r) = refusal {
        attributes.push(KeyValue::new(attr::TOOLGATE_REFUSAL_CODE, r.code.as_str()));
        if let Some(secs) = r.retry_after_secs {
            attributes.push(KeyValue::new(
                attr::TOOLGATE_REFUSAL_RETRY_AFTER,
                i64::try_from(secs).unwrap_or(i64::MAX),
            ));
        }
    }
    let check = refusal
        .map(|r| r.decided_by)
        .or_else(|| note.map(|n| n.decision.decided_by));
    if let Some(check) = check {
        attributes.push(KeyValue::new(attr::TOOLGATE_DECISION_CHECK, check.as_str()));
    }
}

/// The decision's reasons, redacted: the refusal's, a held call's, or else the note's.
fn reasons(
    redactor: &Redactor,
    note: Option<&DecisionNote>,
    response: Option<&ToolResponse>,
    refusal: Option<&toolgate::core::Refusal>,
    attributes: &mut Vec<KeyValue>,
) {
    let reasons: Vec<StringValue> = match (refusal, response, note) {
        (Some(r), _, _) => r.reasons.iter().map(|s| reason_text(redactor, s)).collect(),
        (None, Some(ToolResponse::Held(h)), _) => {
            h.reasons.iter().map(|s| reason_text(redactor, s)).collect()
        }
        (None, _, Some(n)) => n
            .decision
            .reasons
            .iter()
            .map(|s| reason_text(redactor, s))
            .collect(),
        _ => Vec::new(),
    };
    if !reasons.is_empty() {
        attributes.push(KeyValue::new(
            attr::TOOLGATE_DECISION_REASONS,
            Value::Array(Array::String(reasons)),
        ));
    }
}

/// What the gate's decision read: the deny rule that refused it, every matched rule, the
/// labels and where each ask came from.
fn rules_labels_and_asks(d: &toolgate::core::Decision, attributes: &mut Vec<KeyValue>) {
    if d.decided_by == Check::TenantPolicy
        && matches!(d.verdict, Verdict::Refused(_))
        && let Some(rule) = d
            .matched_rules
            .iter()
            .find(|m| m.effect == toolgate::core::Effect::Deny)
    {
        attributes.push(KeyValue::new(
            attr::TOOLGATE_DECISION_RULE,
            index(rule.index),
        ));
    }
    if !d.matched_rules.is_empty() {
        attributes.push(KeyValue::new(
            attr::TOOLGATE_DECISION_MATCHED_RULES,
            Value::Array(Array::I64(
                d.matched_rules.iter().map(|m| index(m.index)).collect(),
            )),
        ));
    }
    if let Some(l) = &d.labels {
        let strings = |v: &toolgate::core::LabelSet| {
            Value::Array(Array::String(
                v.iter().map(|s| StringValue::from(s.to_owned())).collect(),
            ))
        };
        attributes.push(KeyValue::new(attr::TOOLGATE_LABELS_TOOL, strings(&l.tool)));
        if let Some(session) = &l.session {
            attributes.push(KeyValue::new(
                attr::TOOLGATE_LABELS_SESSION,
                strings(session),
            ));
        }
    }
    if !d.asks.is_empty() {
        attributes.push(KeyValue::new(
            attr::TOOLGATE_DECISION_ASK_SOURCES,
            Value::Array(Array::String(
                d.asks
                    .iter()
                    .map(|a| StringValue::from(a.source.to_string()))
                    .collect(),
            )),
        ));
    }
}

/// How the wait for a person ended, who answered, and (R47) their verified principal.
fn approval(
    note: &DecisionNote,
    answered_by: Option<&toolgate::core::Principal>,
    attributes: &mut Vec<KeyValue>,
) {
    attributes.push(KeyValue::new(
        attr::TOOLGATE_APPROVAL_SOURCE,
        note.wait.as_str(),
    ));
    if let WaitEnd::Approved { approver } | WaitEnd::Denied { approver } = &note.wait {
        attributes.push(KeyValue::new(
            attr::TOOLGATE_APPROVAL_APPROVER,
            approver.clone(),
        ));
        // R47: the answering person's verified principal, only when their answer came with
        // a verified identity-provider token (never for a static-token, header or
        // command-line approver).
        if let Some(p) = answered_by {
            attributes.push(KeyValue::new(
                attr::TOOLGATE_APPROVAL_PRINCIPAL_SUBJECT,
                bounded(p.subject.clone(), MAX_NAME_CHARS),
            ));
            attributes.push(KeyValue::new(
                attr::TOOLGATE_APPROVAL_PRINCIPAL_ISSUER,
                bounded(p.issuer.clone(), MAX_NAME_CHARS),
            ));
        }
    }
}

/// The result as the model would read it, redacted: the content, with the structured
/// content beside it when the tool returned some.
pub(crate) fn result_text(redactor: &Redactor, tool: &str, output: &ToolOutput) -> String {
    match &output.structured {
        None => content_text(redactor, tool, &output.content),
        Some(structured) => content_text(
            redactor,
            tool,
            &serde_json::json!({"content": output.content, "structured": structured}),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_bounded_on_a_char_boundary() {
        assert_eq!(bounded("abc".into(), 3), "abc");
        assert_eq!(bounded("abcd".into(), 3), "abc…");
        assert_eq!(bounded("ééé".into(), 2), "éé…");
    }

    #[test]
    fn tool_types_follow_the_genai_conventions() {
        assert_eq!(tool_type([ToolKind::Local].into_iter()), "function");
        assert_eq!(tool_type([ToolKind::Mcp].into_iter()), "extension");
        assert_eq!(tool_type([ToolKind::Http].into_iter()), "extension");
        // A collision with any outside source is an extension.
        assert_eq!(
            tool_type([ToolKind::Local, ToolKind::Mcp].into_iter()),
            "extension"
        );
    }
}
