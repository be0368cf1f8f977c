//! Held calls over the API (seed 002): `GET /v1/sessions/{id}/pending` (a session's open
//! interactions), `POST /v1/interactions/{id}/answer` (`session.approve(interactionId,
//! approved, {idempotencyKey})`) and `GET /v1/calls/{id}` (one call's state and result).
//! Every one needs the `approvals` scope, and shows or answers only what the caller's
//! approver may answer (their `tools` selectors), as the page does.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{Map, Value, json};
use toolgate_core::ToolKind;
use toolgate_engine::approvers::Approver;
use toolgate_inbox::{Answer, HeldRecord, MAX_REASON_CHARS, State as CallState};

use super::{body_object, caller, refuse, reply};
use crate::api::edit::EditRefusal;
use crate::state::App;

/// Whether `approver` is shown `r`: the calls they may answer, and those they answered
/// (an approval among the several a call needs included, R51).
fn may_see(approver: &Approver, r: &HeldRecord) -> bool {
    approver.may_answer(&r.call.identities, r.call.agent.rule_name())
        || r.approver.as_deref() == Some(approver.name.as_str())
        || r.approvals.iter().any(|a| a.approver == approver.name)
}

/// R51: how many distinct people must approve the call, and the approvals it has (each
/// approver's name, verified principal when they had one, and time), counted toward it.
pub(crate) fn approvals_json(r: &HeldRecord) -> Value {
    let given: Vec<Value> = r
        .counted_approvals()
        .iter()
        .map(|a| {
            json!({
                "approver": a.approver,
                "principal": a.principal.as_ref().map(|p| json!({"subject": p.subject, "issuer": p.issuer})),
                "at": a.at.to_string(),
            })
        })
        .collect();
    json!({
        "needed": r.approvals_needed(),
        "given": given,
        "missing": r.approvals_missing(),
        "summary": r.approvals_line(),
    })
}

/// One held call as the API shows it: the interaction (seed 002's fields: `id`,
/// `prompt`, `reason`, `server`, `tool`, `input`) and what an answer is bound to.
pub(crate) fn interaction_json(r: &HeldRecord) -> Value {
    let shown = r.interaction();
    let mut o = Map::new();
    o.insert("id".into(), r.id().into());
    o.insert("prompt".into(), shown.prompt.clone().into());
    o.insert(
        "reason".into(),
        r.call
            .reasons
            .iter()
            .map(|a| a.reason.as_str())
            .collect::<Vec<_>>()
            .join("; ")
            .into(),
    );
    o.insert(
        "reasons".into(),
        r.call
            .reasons
            .iter()
            .map(|a| json!({"source": a.source.describe(), "reason": a.reason}))
            .collect(),
    );
    o.insert(
        "server".into(),
        if shown.identity.kind() == ToolKind::Mcp {
            Value::from(shown.identity.source())
        } else {
            Value::Null
        },
    );
    o.insert("tool".into(), shown.identity.name().into());
    o.insert("toolName".into(), r.call.tool.clone().into());
    o.insert("agent".into(), r.call.agent.rule_name().into());
    o.insert("input".into(), shown.input.clone());
    // R49: the labels the decision read (the tool's, the session's when asked).
    if let Some(labels) = shown.to_json().get("labels") {
        o.insert("labels".into(), labels.clone());
    }
    o.insert("inputHash".into(), r.call.input_hash.clone().into());
    o.insert(
        "definitionHash".into(),
        r.call.definition_hash.clone().into(),
    );
    o.insert(
        "session".into(),
        r.call
            .turn
            .as_ref()
            .map_or(Value::Null, |t| t.session.clone().into()),
    );
    o.insert(
        "turn".into(),
        r.call
            .turn
            .as_ref()
            .map_or(Value::Null, |t| t.turn.clone().into()),
    );
    o.insert(
        "target".into(),
        r.call
            .target
            .as_ref()
            .map_or(Value::Null, toolgate_core::ExecutionTarget::to_json),
    );
    o.insert("createdAt".into(), r.call.created_at.to_string().into());
    o.insert("expiresAt".into(), r.call.expires_at.to_string().into());
    // R51: four eyes — how many approvals the call needs and from whom it has them.
    o.insert("approvals".into(), approvals_json(r));
    Value::Object(o)
}

/// `GET /v1/sessions/{id}/pending`: the session's open interactions the caller may answer,
/// oldest first (R43; a subagent's held call is listed on its parent's session).
pub(crate) async fn pending(
    State(app): State<App>,
    headers: HeaderMap,
    identity: crate::auth::Identity,
    Path(session): Path<String>,
) -> Response {
    let who = match caller(&app, &headers, &identity) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let approver = match who.approver() {
        Ok(a) => a,
        Err(r) => return r,
    };
    let calls = match app.0.store.pending(&session).await {
        Ok(c) => c,
        Err(e) => return unavailable(e),
    };
    let list: Vec<Value> = calls
        .iter()
        .filter(|r| approver.may_answer(&r.call.identities, r.call.agent.rule_name()))
        .map(interaction_json)
        .collect();
    reply(
        StatusCode::OK,
        &json!({"session": session, "interactions": list}),
    )
}

fn unavailable(e: impl std::fmt::Display) -> Response {
    refuse(
        StatusCode::SERVICE_UNAVAILABLE,
        "unavailable",
        format!("the inbox cannot be read: {e}"),
    )
}

fn invalid(message: impl Into<String>) -> Response {
    refuse(StatusCode::BAD_REQUEST, "invalid_request", message)
}

/// The fields an answer may carry.
const ANSWER_FIELDS: &[&str] = &[
    "approved",
    "reason",
    "idempotencyKey",
    "inputHash",
    "definitionHash",
    "input",
];

/// An answer's body, read: every field checked, unknown ones refused by name.
#[derive(Debug)]
pub(crate) struct AnswerBody {
    pub(crate) approved: bool,
    pub(crate) reason: Option<String>,
    pub(crate) key: Option<String>,
    pub(crate) input_hash: Option<String>,
    pub(crate) definition_hash: Option<String>,
    /// `input`: the edited input an approval sends instead (`may_edit`).
    pub(crate) input: Option<Value>,
}

/// Why an answer's body is not one ([`read_answer`]), naming the field.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AnswerBodyError {
    #[error(
        "unknown field `{0}`; expected `approved`, `reason`, `idempotencyKey`, `inputHash`, `definitionHash` or `input`"
    )]
    UnknownField(String),
    #[error("`approved` must be true or false")]
    ApprovedNotBool,
    #[error("`approved` is required (true or false)")]
    NoApproved,
    #[error("`{0}` must be a string")]
    NotString(&'static str),
    #[error("`reason` is {0} characters long; at most {MAX_REASON_CHARS} are kept")]
    ReasonTooLong(usize),
    #[error("`idempotencyKey`, when given, must not be blank")]
    BlankKey,
    #[error("`input` applies only to an approval (`approved: true`)")]
    InputOfDenial,
    #[error("`input` must be a JSON object")]
    InputNotObject,
}

pub(crate) fn read_answer(body: &Map<String, Value>) -> Result<AnswerBody, AnswerBodyError> {
    if let Some(k) = body.keys().find(|k| !ANSWER_FIELDS.contains(&k.as_str())) {
        return Err(AnswerBodyError::UnknownField(k.clone()));
    }
    let approved = match body.get("approved") {
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(AnswerBodyError::ApprovedNotBool),
        None => return Err(AnswerBodyError::NoApproved),
    };
    let text = |key: &'static str| -> Result<Option<String>, AnswerBodyError> {
        match body.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(AnswerBodyError::NotString(key)),
        }
    };
    let reason = text("reason")?
        .map(|r| r.trim().to_owned())
        .filter(|r| !r.is_empty());
    if let Some(n) = reason
        .as_deref()
        .map(|r| r.chars().count())
        .filter(|&n| n > MAX_REASON_CHARS)
    {
        return Err(AnswerBodyError::ReasonTooLong(n));
    }
    let key = text("idempotencyKey")?;
    if key.as_deref().is_some_and(|k| k.trim().is_empty()) {
        return Err(AnswerBodyError::BlankKey);
    }
    let input = match body.get("input") {
        None => None,
        Some(v @ Value::Object(_)) if approved => Some(v.clone()),
        Some(Value::Object(_)) => return Err(AnswerBodyError::InputOfDenial),
        Some(_) => return Err(AnswerBodyError::InputNotObject),
    };
    Ok(AnswerBody {
        approved,
        reason,
        key,
        input_hash: text("inputHash")?,
        definition_hash: text("definitionHash")?,
        input,
    })
}

/// `POST /v1/interactions/{id}/answer`: `{approved, reason?, idempotencyKey?, inputHash,
/// definitionHash, input?}`. An approval carries the hashes the caller was shown
/// (`GET /v1/sessions/{id}/pending`), and one of a call that differs is refused (R35).
/// The same `idempotencyKey` makes a retry the same answer (`replayed: true`); without one,
/// each request is its own answer.
pub(crate) async fn answer(
    State(app): State<App>,
    headers: HeaderMap,
    identity: crate::auth::Identity,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let who = match caller(&app, &headers, &identity) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let approver = match who.approver() {
        Ok(a) => a.clone(),
        Err(r) => return r,
    };
    let body = match body_object(&body) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let a = match read_answer(&body) {
        Ok(a) => a,
        Err(why) => return invalid(format!("{why}; nothing was changed")),
    };
    // One answer path: rights in force, R35 (a retry of an edited approval carries the
    // original input's hash), the store.
    let shown = crate::answer::Shown {
        input_hash: a.input_hash.as_deref(),
        definition_hash: a.definition_hash.as_deref(),
        edited: a.input.is_some(),
        fields: crate::answer::API_FIELDS,
    };
    let record = match crate::answer::answerable(&app, &approver, &id, a.approved, shown).await {
        Ok(r) => r,
        Err(refusal) => return refusal.json(),
    };
    let key = a
        .key
        .clone()
        .unwrap_or_else(|| format!("api-{}", crate::token::random_hex(16)));
    let answer = Answer {
        approve: a.approved,
        idempotency_key: Some(key),
        approver: approver.name.clone(),
        reason: a.reason.clone().filter(|_| !a.approved),
        principal: who.principal.clone(),
        binding: None,
    };
    let result = match a.input.clone() {
        Some(edited) => {
            match crate::api::edit::approve_edited(&app, &approver, &record, answer, edited).await {
                Ok(r) => Ok(r),
                Err(EditRefusal::Response(r)) => return r,
                Err(EditRefusal::Answer(e)) => Err(crate::answer::AnswerRefusal::Store(e)),
            }
        }
        None => crate::answer::store(&app, &record, answer, &format!("api, {}", who.label)).await,
    };
    match result {
        Ok(receipt) => reply(
            StatusCode::OK,
            &json!({
                "id": receipt.interaction_id,
                "approved": receipt.approved,
                "approver": receipt.approver,
                "reason": receipt.reason,
                "answeredAt": receipt.answered_at.to_string(),
                "replayed": receipt.replayed,
                // R51: an approval that is not the last one needed says so.
                "approvals": receipt.approvals,
                "approvalsNeeded": receipt.approvals_needed,
                "waitingFor": receipt.waiting_for(),
                "alreadyApproved": receipt.already_approved,
                "message": receipt.progress(),
            }),
        ),
        Err(refusal) => refusal.json(),
    }
}

/// `GET /v1/calls/{id}`: one held call, its state, who answered, and (once sent) the
/// recorded response. A call the caller may not see is answered as one that does not
/// exist.
pub(crate) async fn call(
    State(app): State<App>,
    headers: HeaderMap,
    identity: crate::auth::Identity,
    Path(id): Path<String>,
) -> Response {
    let who = match caller(&app, &headers, &identity) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let approver = match who.approver() {
        Ok(a) => a,
        Err(r) => return r,
    };
    let r = match app.0.store.get(&id).await {
        Ok(Some(r)) if may_see(approver, &r) => r,
        Ok(_) => {
            return refuse(
                StatusCode::NOT_FOUND,
                "not_found",
                format!("no held call `{id}` that you may answer in this inbox"),
            );
        }
        Err(e) => return unavailable(e),
    };
    let mut o = match interaction_json(&r) {
        Value::Object(o) => o,
        _ => Map::new(),
    };
    o.insert("state".into(), r.state.as_str().into());
    o.insert(
        "approver".into(),
        r.approver.clone().map_or(Value::Null, Value::from),
    );
    o.insert(
        "answerReason".into(),
        r.answer_reason.clone().map_or(Value::Null, Value::from),
    );
    o.insert(
        "answeredAt".into(),
        r.answered_at.map_or(Value::Null, |t| t.to_string().into()),
    );
    o.insert("result".into(), r.result.clone().unwrap_or(Value::Null));
    o.insert(
        "finishedAt".into(),
        r.finished_at.map_or(Value::Null, |t| t.to_string().into()),
    );
    crate::api::edit::describe_edit(&app, &r, &mut o).await;
    o.insert(
        "open".into(),
        matches!(r.state, CallState::Pending | CallState::Approved).into(),
    );
    reply(StatusCode::OK, &Value::Object(o))
}
