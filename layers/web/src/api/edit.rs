//! Approve with edits (approval-page.md, "Approve with edits"): an approver with `may_edit`
//! (off by default) approves a held call with an input they changed — on the card (a JSON
//! editor, `POST /calls/{id}/approve-edited`) or over the API (`{approved: true, input}`).
//!
//! The edit is checked before anything is written: the approver's rights and `may_edit`,
//! the hashes the card or the caller was shown (R35: the edit is of the call they saw), a
//! JSON object within the input bounds (R36), the tool's input schema when the
//! configuration knows it. The store then approves the call with the edited input in one
//! transaction, keeping the input the agent sent and who edited. When the call is sent it
//! is decided again in full on the edited input (R38) — a refusal, or a question the person
//! never answered, still wins — and its claim is bound to the edited input's hash. The
//! audit record keeps both inputs and who edited.

use axum::Form;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use toolgate_engine::approvers::Approver;
use toolgate_inbox::{Answer, AnswerError, AnswerReceipt, EditedInput, HeldRecord};

use super::refuse;
use crate::auth::{check_csrf, unauthorized};
use crate::html;
use crate::state::App;
use crate::state::Who;

/// The input schema the configuration declares for the held call's tool, if any.
fn schema_of(app: &App, record: &HeldRecord) -> Option<Value> {
    let gov = app.0.settings.in_force.governance()?;
    let first = record.call.identities.first()?;
    let entry = gov.catalog().get_identity(first)?;
    entry
        .records
        .iter()
        .find(|r| r.identity() == first)
        .and_then(|r| r.decl.input_schema.clone())
}

fn type_ok(want: &str, v: &Value) -> bool {
    match want {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        "number" => v.is_number(),
        "integer" => v.as_i64().is_some() || v.as_u64().is_some(),
        _ => true,
    }
}

/// Every way `input` fails the top level of `schema` (`type`, `required`, the `type` and
/// `enum` of each property, `additionalProperties: false`), each naming its field
/// (`input.amount`). A full check runs again when the call is sent (R36).
pub(crate) fn schema_errors(schema: &Value, input: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let Some(obj) = input.as_object() else {
        return vec![String::from("`input` must be a JSON object")];
    };
    if let Some(req) = schema.get("required").and_then(Value::as_array) {
        for k in req.iter().filter_map(Value::as_str) {
            if !obj.contains_key(k) {
                out.push(format!("`input.{k}` is required by the tool's schema"));
            }
        }
    }
    let props = schema.get("properties").and_then(Value::as_object);
    for (k, v) in obj {
        match props.and_then(|p| p.get(k)) {
            Some(p) => {
                let types: Vec<&str> = match p.get("type") {
                    Some(Value::String(t)) => vec![t.as_str()],
                    Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
                    _ => Vec::new(),
                };
                if !types.is_empty() && !types.iter().any(|t| type_ok(t, v)) {
                    out.push(format!(
                        "`input.{k}` must be {} by the tool's schema",
                        types.join(" or ")
                    ));
                }
                if let Some(choices) = p.get("enum").and_then(Value::as_array)
                    && !choices.contains(v)
                {
                    out.push(format!(
                        "`input.{k}` is not one of the schema's `enum` values"
                    ));
                }
            }
            None if schema.get("additionalProperties") == Some(&Value::Bool(false)) => {
                out.push(format!(
                    "`input.{k}` is not a property the tool's schema allows"
                ));
            }
            None => {}
        }
    }
    out
}

/// Checks an edit of `record` by `approver` and records the approval with it.
pub(crate) async fn approve_edited(
    app: &App,
    approver: &Approver,
    record: &HeldRecord,
    answer: Answer,
    edited: Value,
) -> Result<AnswerReceipt, EditRefusal> {
    let refused = |status: StatusCode, code: &str, message: String| {
        EditRefusal::Response(refuse(status, code, message))
    };
    if !approver.may_edit {
        return Err(refused(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!(
                "approver `{}` may not edit a call's input (`approvers.people[].may_edit`); nothing was changed",
                approver.name
            ),
        ));
    }
    let limits = &app.0.settings.limits;
    let size = serde_json::to_string(&edited).map_or(usize::MAX, |t| t.len());
    if size > limits.max_input_bytes {
        return Err(refused(
            StatusCode::BAD_REQUEST,
            "invalid_input",
            format!(
                "the edited input is {size} bytes, larger than `max_input_bytes` ({}); nothing was changed",
                limits.max_input_bytes
            ),
        ));
    }
    if let Some(schema) = schema_of(app, record) {
        let errs = schema_errors(&schema, &edited);
        if !errs.is_empty() {
            return Err(EditRefusal::Response(super::reply(
                StatusCode::BAD_REQUEST,
                &json!({
                    "code": "invalid_input",
                    "message": format!("the edited input fails the tool's schema: {}; nothing was changed", errs.join("; ")),
                    "errors": errs.iter().map(|m| json!({"path": "input", "message": m})).collect::<Vec<_>>(),
                }),
            )));
        }
    }
    let edit = EditedInput::new(&edited).map_err(|why| {
        refused(
            StatusCode::BAD_REQUEST,
            "invalid_input",
            format!("{why}; nothing was changed"),
        )
    })?;
    match app.0.store.answer_edited(record.id(), answer, edit).await {
        Ok(receipt) => {
            tracing::info!(
                interaction = %toolgate_core::display::visible(record.id()),
                approver = %toolgate_core::display::visible(&approver.name),
                original_input_hash = %record.call.input_hash,
                "a held call was approved with an edited input"
            );
            Ok(receipt)
        }
        Err(e) => Err(EditRefusal::Answer(e)),
    }
}

/// Adds what an edit changed to a call's JSON (`GET /v1/calls/{id}`): `edit` with the
/// original input, its hash, who edited and when; `null` when the input was not edited.
pub(crate) async fn describe_edit(app: &App, r: &HeldRecord, o: &mut Map<String, Value>) {
    let edit = match app.0.store.edit_of(r.id()).await {
        Ok(Some(e)) => json!({
            "originalInput": e.original_input().unwrap_or(Value::Null),
            "originalInputHash": e.original_input_hash,
            "editedBy": e.edited_by,
            "editedAt": e.edited_at.to_string(),
        }),
        _ => Value::Null,
    };
    o.insert("edit".into(), edit);
}

/// The card's "Edit, then approve" form, for an approver with `may_edit`: the input as a
/// JSON textarea, bound to the card's hashes like Approve.
pub(crate) fn edit_form(r: &HeldRecord, who: &Who) -> Markup {
    if !who.approver.may_edit {
        return html! {};
    }
    let id = r.id();
    // The input as it is edited: its own characters, hidden ones too (the text area is what
    // is sent back).
    let input = r
        .input_pretty()
        .unwrap_or_else(|_| r.call.input_json.clone());
    html! {
        details class="edit" id={ "edit-panel-" (id) } {
            summary id={ "edit-open-" (id) } { "Edit the input, then approve …" }
            form method="post" action={ "/calls/" (id) "/approve-edited" } class="edit" {
                (crate::pages::answer_binding(r, who))
                p class="note" {
                    "The edited call is decided again in full before it is sent, and the record keeps both inputs and your name."
                }
                label class="field" {
                    "Input (JSON)"
                    textarea name="input" id={ "edit-input-" (id) } rows="8" spellcheck="false"
                        aria-describedby={ "edit-error-" (id) } { (input) }
                }
                p class="error edit-error" id={ "edit-error-" (id) } role="alert" hidden {}
                button type="submit" class="approve" id={ "edit-approve-" (id) } { "Approve with this input" }
            }
        }
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct EditForm {
    csrf: Option<String>,
    input_hash: Option<String>,
    definition_hash: Option<String>,
    idempotency_key: Option<String>,
    input: Option<String>,
}

/// `POST /calls/{id}/approve-edited`: the card's edit form.
pub(crate) async fn approve_edited_form(
    State(app): State<App>,
    identity: crate::auth::Identity,
    Path(id): Path<String>,
    Form(form): Form<EditForm>,
) -> Response {
    let Some(who) = identity.who() else {
        return unauthorized();
    };
    if let Err(r) = check_csrf(&who, form.csrf.as_deref()) {
        return r;
    }
    let bad = |m: &str| html::refusal(StatusCode::BAD_REQUEST, "Refused", m);
    let Some(key) = form.idempotency_key.filter(|k| !k.trim().is_empty()) else {
        return bad("the form has no idempotency key; reload the page and answer again");
    };
    // One answer path: rights in force and R35 before the edit.
    let shown = crate::answer::Shown {
        input_hash: form.input_hash.as_deref(),
        definition_hash: form.definition_hash.as_deref(),
        edited: false,
        fields: crate::answer::FORM_FIELDS,
    };
    let record = match crate::answer::answerable(&app, &who.approver, &id, true, shown).await {
        Ok(r) => r,
        Err(refusal) => return refusal.into_response(),
    };
    let text = form.input.unwrap_or_default();
    let edited = match toolgate_inbox::codec::parse_json(&text) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => return bad("the edited input must be a JSON object; nothing was changed"),
        Err(e) => {
            return bad(&format!(
                "the edited input is not JSON ({e}); nothing was changed"
            ));
        }
    };
    let answer = who.answer(true, key, None);
    match approve_edited(&app, &who.approver, &record, answer, edited).await {
        Ok(_) => Redirect::to(&format!("/calls/{id}")).into_response(),
        Err(EditRefusal::Response(r)) => {
            // The API's JSON refusal, shown as the page shows refusals.
            let status = r.status();
            let body = axum::body::to_bytes(r.into_body(), crate::MAX_BODY_BYTES)
                .await
                .unwrap_or_default();
            let message = serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|v| v.get("message").and_then(Value::as_str).map(str::to_owned))
                .unwrap_or_default();
            html::refusal(status, "The edit was refused", &message)
        }
        Err(EditRefusal::Answer(e)) => crate::answer::AnswerRefusal::Store(e).into_response(),
    }
}

/// Why an edited approval was not recorded: a refusal already made, or the store's.
pub(crate) enum EditRefusal {
    Response(Response),
    Answer(AnswerError),
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn issue24_an_edit_is_checked_against_the_tools_schema_naming_each_field() {
        let schema = json!({"type": "object", "required": ["order"], "additionalProperties": false,
            "properties": {"order": {"type": "integer"}, "mode": {"enum": ["full", "partial"]}}});
        assert!(super::schema_errors(&schema, &json!({"order": 3})).is_empty());
        let errs = super::schema_errors(&schema, &json!({"order": "3", "mode": "all", "x": 1}));
        assert_eq!(errs.len(), 3, "{errs:?}");
        assert!(
            errs[0].contains("`input.mode`") || errs.iter().any(|e| e.contains("`input.mode`"))
        );
        assert!(
            errs.iter()
                .any(|e| e.contains("`input.order` must be integer"))
        );
        assert!(errs.iter().any(|e| e.contains("`input.x`")));
        let errs = super::schema_errors(&schema, &json!({}));
        assert_eq!(errs, ["`input.order` is required by the tool's schema"]);
    }
}
