//! Who may see and answer a held call, and the refusals every answering handler shares
//! (R24, R35).

use axum::http::StatusCode;
use axum::response::Response;
use toolgate_inbox::HeldRecord;

use crate::html;
use crate::state::App;
use crate::state::Who;

pub(crate) fn store_failed(e: impl std::fmt::Display) -> Response {
    html::refusal(
        StatusCode::SERVICE_UNAVAILABLE,
        "The inbox cannot be read",
        &e.to_string(),
    )
}

/// Whether `who` is shown `r` (issue 20): an approver sees only the held calls they may
/// answer ([`toolgate_engine::approvers::Approver::may_answer`]), and the ones they
/// answered themselves; a call to any other tool, its input included, stays out of every
/// list, card and history row they are sent.
pub(crate) fn may_see(who: &Who, r: &HeldRecord) -> bool {
    who.approver
        .may_answer(&r.call.identities, r.call.agent.rule_name())
        || r.approver.as_deref() == Some(who.approver.name.as_str())
}

/// The held call `id` if `who` may answer it, else the refusal (404 for an id the inbox
/// did not issue, 403 for a call to a tool beyond their selectors).
pub(crate) async fn answerable(app: &App, who: &Who, id: &str) -> Result<HeldRecord, Response> {
    let record = match app.0.store.get(id).await {
        Ok(Some(r)) => r,
        Ok(None) => {
            return Err(html::refusal(
                StatusCode::NOT_FOUND,
                "No such held call",
                &format!("no held call `{id}` in this inbox; nothing was changed"),
            ));
        }
        Err(e) => return Err(store_failed(e)),
    };
    if !who
        .approver
        .may_answer(&record.call.identities, record.call.agent.rule_name())
    {
        return Err(html::refusal(
            StatusCode::FORBIDDEN,
            "Refused",
            &format!(
                "approver `{}` may not answer calls to `{}`; nothing was changed",
                who.approver.name, record.call.tool
            ),
        ));
    }
    Ok(record)
}

/// R35: the refusal of an approval whose form's hashes are not the held call's (its input
/// or its tool's definition differs from what the page showed), `None` when they are.
pub(crate) fn not_as_shown(
    input_hash: Option<&str>,
    definition_hash: Option<&str>,
    record: &HeldRecord,
) -> Option<Response> {
    let mut changed = Vec::new();
    if input_hash != Some(record.call.input_hash.as_str()) {
        changed.push("its input");
    }
    if definition_hash != Some(record.call.definition_hash.as_str()) {
        changed.push("the tool's definition");
    }
    if changed.is_empty() {
        return None;
    }
    Some(html::refusal(
        StatusCode::CONFLICT,
        "Refused: the call is not the one shown",
        &format!(
            "{} {} from what the page showed (R35); reload and look again; nothing was approved",
            changed.join(" and "),
            if changed.len() == 1 {
                "differs"
            } else {
                "differ"
            }
        ),
    ))
}
