//! Bulk answers (approval-page.md): approve or deny a selection of held calls in one form.
//! Each selected card sends its id with the input and definition hashes it showed; the
//! whole selection is checked before anything is answered — a call the person may not
//! answer, a call not in the inbox, or (approving) one that is not the call shown (R35)
//! refuses the selection whole, naming it — and then each call is answered with its own
//! idempotency key (the form's key and the call's id), as one answer each on the store.

use axum::Form;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use toolgate_inbox::{HeldRecord, MAX_REASON_CHARS};

use crate::auth::{check_csrf, unauthorized};
use crate::html::{self, Shown, Tab};
use crate::state::App;

/// The most calls one bulk answer takes.
pub(crate) const MAX_BULK: usize = 500;

fn refused(status: StatusCode, why: &str) -> Response {
    html::refusal(status, "The selection was refused", why)
}

pub(crate) async fn bulk(
    State(app): State<App>,
    identity: crate::auth::Identity,
    Form(fields): Form<Vec<(String, String)>>,
) -> Response {
    let Some(who) = identity.who() else {
        return unauthorized();
    };
    let field = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    if let Err(r) = check_csrf(&who, field("csrf")) {
        return r;
    }
    let approve = match field("decision") {
        Some("approve") => true,
        Some("deny") => false,
        _ => {
            return refused(
                StatusCode::BAD_REQUEST,
                "the form says neither approve nor deny; nothing was answered",
            );
        }
    };
    let Some(key) = field("idempotency_key").filter(|k| !k.trim().is_empty()) else {
        return refused(
            StatusCode::BAD_REQUEST,
            "the form has no idempotency key; reload the page and answer again",
        );
    };
    let reason = field("reason")
        .map(str::trim)
        .filter(|r| !r.is_empty() && !approve)
        .map(str::to_owned);
    if let Some(n) = reason
        .as_deref()
        .map(|r| r.chars().count())
        .filter(|&n| n > MAX_REASON_CHARS)
    {
        return refused(
            StatusCode::BAD_REQUEST,
            &format!(
                "`reason` is {n} characters long; at most {MAX_REASON_CHARS} are kept; nothing was answered"
            ),
        );
    }
    let items = match selected(&fields) {
        Ok(items) => items,
        Err(r) => return r,
    };
    // Every call is checked before any is answered: the selection is refused whole.
    let mut records: Vec<HeldRecord> = Vec::with_capacity(items.len());
    for (id, input_hash, definition_hash) in &items {
        // One answer path: rights in force and R35, for every call of the selection before
        // any is answered.
        let shown = crate::answer::Shown {
            input_hash: Some(&**input_hash),
            definition_hash: Some(&**definition_hash),
            edited: false,
            fields: crate::answer::FORM_FIELDS,
        };
        let record = match crate::answer::answerable(&app, &who.approver, id, approve, shown).await
        {
            Ok(r) => r,
            Err(refusal) => {
                tracing::info!(
                    approver = %toolgate_core::display::visible(&who.approver.name),
                    interaction = %toolgate_core::display::visible(id),
                    "a bulk answer on the approval page was refused whole"
                );
                return refused(
                    refusal.status(),
                    &format!(
                        "`{id}`: {}; nothing in the selection was answered",
                        refusal.message()
                    ),
                );
            }
        };
        records.push(record);
    }
    let mut done = Vec::new();
    let mut failed = Vec::new();
    for record in &records {
        let id = record.id();
        // R47: each answer of a selection keeps the approver's verified identity.
        let answer = who.answer(approve, format!("{key}:{id}"), reason.clone());
        match crate::answer::store(&app, record, answer, "page bulk").await {
            Ok(receipt) => done.push((record, receipt)),
            Err(refusal) => failed.push((record, refusal.message())),
        }
    }
    let body = result_body(approve, &done, &failed, records.len());
    let status = if failed.is_empty() {
        StatusCode::OK
    } else {
        StatusCode::CONFLICT
    };
    (
        status,
        html::page("Bulk answer", Some((&who, Tab::Pending)), body),
    )
        .into_response()
}

/// The held calls selected (`item` fields: an id and the two hashes shown, R35), each once:
/// at least one, at most [`MAX_BULK`]; a malformed one refuses the selection whole.
fn selected(fields: &[(String, String)]) -> Result<Vec<(&str, &str, &str)>, Response> {
    let mut items: Vec<(&str, &str, &str)> = Vec::new();
    for (i, (_, v)) in fields.iter().filter(|(k, _)| k == "item").enumerate() {
        let mut parts = v.split(' ');
        match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some(id), Some(ih), Some(dh), None) if !id.is_empty() => {
                if !items.iter().any(|(seen, _, _)| *seen == id) {
                    items.push((id, ih, dh));
                }
            }
            _ => {
                return Err(refused(
                    StatusCode::BAD_REQUEST,
                    &format!(
                        "`item[{i}]` is `{v}`, not a held call's id and hashes; nothing was answered"
                    ),
                ));
            }
        }
    }
    if items.is_empty() {
        return Err(refused(
            StatusCode::BAD_REQUEST,
            "no held call was selected; nothing was answered",
        ));
    }
    if items.len() > MAX_BULK {
        return Err(refused(
            StatusCode::BAD_REQUEST,
            &format!(
                "{} held calls were selected; one bulk answer takes at most {MAX_BULK}; nothing was answered",
                items.len()
            ),
        ));
    }
    Ok(items)
}

/// The page that says what a bulk answer did: the calls answered (with a four-eyes call's
/// progress, R51) and those that were not, with why.
fn result_body(
    approve: bool,
    done: &[(&HeldRecord, toolgate_inbox::AnswerReceipt)],
    failed: &[(&HeldRecord, String)],
    selected: usize,
) -> Markup {
    let verb = if approve { "Approved" } else { "Denied" };
    html! {
        section id="bulk-result" class="bulk-result" {
            h1 { (verb) " " (done.len()) " of " (selected) " selected held call" @if selected != 1 { "s" } }
            p class="banner ok" role="status" id="bulk-done" { (verb) " " (done.len()) "." }
            ul class="answered" {
                @for (r, receipt) in done {
                    li id={ "done-" (r.id()) } {
                        a href={ "/calls/" (r.id()) } { (Shown(&r.interaction().prompt)) }
                        // R51: an approval that is not the last one a call needs says so.
                        @if let Some(p) = receipt.progress() {
                            " " span class="approvals" { (Shown(&p)) }
                        }
                    }
                }
            }
            @if !failed.is_empty() {
                h2 { "Not answered" }
                ul class="failed" {
                    @for (r, why) in failed {
                        li id={ "failed-" (r.id()) } {
                            a href={ "/calls/" (r.id()) } { (Shown(&r.interaction().prompt)) }
                            ": " span class="error" { (Shown(why)) }
                        }
                    }
                }
            }
            p { a href="/" id="back-pending" { "Back to pending approvals" } }
        }
    }
}
