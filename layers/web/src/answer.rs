//! Answering a held call, once for every surface (approval-page.md): the page's form, a
//! bulk selection, "approve, and allow matching calls", the HTTP API and Slack each parse
//! their request and render the outcome; the checks and the store are here.
//!
//! An answer is taken only when, under the approvers in force (the surface resolves the
//! approver for this very request, [`crate::ApproversInForce`]), the approver may answer a
//! call of that tool by that agent (R24, R47), and, for an approval, the call is the one
//! that was shown: its input and its tool's definition hash as the surface showed them
//! (R35). A refusal is one type, [`AnswerRefusal`], with one status and one message;
//! HTML, JSON and Slack each render it, none maps statuses by hand.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use toolgate_engine::approvers::Approver;
use toolgate_inbox::{Answer, AnswerError, AnswerReceipt, HeldRecord, State as CallState};

use crate::state::App;

/// What the surface showed of the call an approval answers (R35).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shown<'a> {
    /// The input's hash as shown.
    pub(crate) input_hash: Option<&'a str>,
    /// The tool's definition hash as shown.
    pub(crate) definition_hash: Option<&'a str>,
    /// A retry of an approval with an edited input: the hash shown is the original input's,
    /// kept beside the edit once it was taken.
    pub(crate) edited: bool,
    /// How the surface names the two hashes, for a refusal that names a missing one.
    pub(crate) fields: [&'static str; 2],
}

/// The hashes' names in the page's forms and Slack's button values.
pub(crate) const FORM_FIELDS: [&str; 2] = ["`input_hash`", "`definition_hash`"];
/// The hashes' names in the HTTP API.
pub(crate) const API_FIELDS: [&str; 2] = ["`inputHash`", "`definitionHash`"];

/// Why an answer was not taken; nothing was changed.
#[derive(Debug)]
pub(crate) enum AnswerRefusal {
    /// No held call of that id in the inbox.
    NotFound(String),
    /// The approver may not answer calls of this tool (by this agent).
    Forbidden {
        /// Who.
        approver: String,
        /// The call's tool.
        tool: String,
    },
    /// An approval without the hashes of what was shown (R35).
    MissingHashes(Vec<&'static str>),
    /// The call differs from what was shown (R35).
    NotAsShown(Vec<&'static str>),
    /// The inbox cannot be read.
    Unavailable(String),
    /// The store refused the answer (already answered, expired, invalid).
    Store(AnswerError),
}

impl AnswerRefusal {
    /// The HTTP status every surface answers with.
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            AnswerRefusal::NotFound(_) => StatusCode::NOT_FOUND,
            AnswerRefusal::Forbidden { .. } => StatusCode::FORBIDDEN,
            AnswerRefusal::MissingHashes(_) => StatusCode::BAD_REQUEST,
            AnswerRefusal::NotAsShown(_) => StatusCode::CONFLICT,
            AnswerRefusal::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            AnswerRefusal::Store(e) => match e {
                AnswerError::UnknownId(_) => StatusCode::NOT_FOUND,
                AnswerError::Invalid(_) => StatusCode::BAD_REQUEST,
                AnswerError::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
                _ => StatusCode::CONFLICT,
            },
        }
    }

    /// The API's error code.
    pub(crate) fn code(&self) -> &'static str {
        match self {
            AnswerRefusal::NotFound(_) => "not_found",
            AnswerRefusal::Forbidden { .. } => "forbidden",
            AnswerRefusal::MissingHashes(_) => "invalid_request",
            AnswerRefusal::NotAsShown(_) => "not_as_shown",
            AnswerRefusal::Unavailable(_) => "unavailable",
            AnswerRefusal::Store(e) => match e {
                AnswerError::UnknownId(_) => "not_found",
                AnswerError::Invalid(_) => "invalid_request",
                AnswerError::Store(_) => "unavailable",
                AnswerError::Expired(_) => "expired",
                AnswerError::NotAsShown { .. } => "not_as_shown",
                _ => "already_answered",
            },
        }
    }

    /// What a person reads.
    pub(crate) fn message(&self) -> String {
        match self {
            AnswerRefusal::NotFound(id) => {
                format!("no held call `{id}` in this inbox; nothing was changed")
            }
            AnswerRefusal::Forbidden { approver, tool } => format!(
                "approver `{approver}` may not answer calls to `{tool}`; nothing was changed"
            ),
            AnswerRefusal::MissingHashes(missing) => format!(
                "an approval carries the {} it was shown (R35: it answers exactly that call); nothing was changed",
                missing.join(" and ")
            ),
            AnswerRefusal::NotAsShown(changed) => format!(
                "{} {} from what was shown (R35); look at the call again; nothing was approved",
                changed.join(" and "),
                if changed.len() == 1 {
                    "differs"
                } else {
                    "differ"
                }
            ),
            AnswerRefusal::Unavailable(e) => format!("the inbox cannot be read: {e}"),
            AnswerRefusal::Store(e) => e.to_string(),
        }
    }

    /// The title of the page's refusal.
    fn title(&self) -> &'static str {
        match self {
            AnswerRefusal::NotFound(_) => "No such held call",
            AnswerRefusal::NotAsShown(_) => "Refused: the call is not the one shown",
            AnswerRefusal::Unavailable(_) => "The inbox cannot be read",
            AnswerRefusal::Store(_) => "The answer was refused",
            _ => "Refused",
        }
    }

    /// As the HTTP API answers it (`{code, message}`).
    pub(crate) fn json(&self) -> Response {
        crate::api::refuse(self.status(), self.code(), self.message())
    }
}

/// The page's rendering.
impl IntoResponse for AnswerRefusal {
    fn into_response(self) -> Response {
        crate::html::refusal(self.status(), self.title(), &self.message())
    }
}

/// The held call `id` if `approver` — with the rights in force for this request — may
/// answer it, and, for an approval, it is the call that was shown (R24, R35, R47).
pub(crate) async fn answerable(
    app: &App,
    approver: &Approver,
    id: &str,
    approve: bool,
    shown: Shown<'_>,
) -> Result<HeldRecord, AnswerRefusal> {
    let record = match app.0.store.get(id).await {
        Ok(Some(r)) => r,
        Ok(None) => return Err(AnswerRefusal::NotFound(id.to_owned())),
        Err(e) => return Err(AnswerRefusal::Unavailable(e.to_string())),
    };
    if !approver.may_answer(&record.call.identities, record.call.agent.rule_name()) {
        return Err(AnswerRefusal::Forbidden {
            approver: approver.name.clone(),
            tool: record.call.tool.clone(),
        });
    }
    if approve {
        let mut missing = Vec::new();
        if shown.input_hash.is_none() {
            missing.push(shown.fields[0]);
        }
        if shown.definition_hash.is_none() {
            missing.push(shown.fields[1]);
        }
        if !missing.is_empty() {
            return Err(AnswerRefusal::MissingHashes(missing));
        }
        // A retry of an edited approval carries the hash of the input it was shown, which
        // the edit replaced: compared with the one kept beside the edit.
        let mut input_hash = record.call.input_hash.clone();
        if shown.edited && record.state != CallState::Pending {
            match app.0.store.edit_of(id).await {
                Ok(Some(e)) => input_hash = e.original_input_hash,
                Ok(None) => {}
                Err(e) => return Err(AnswerRefusal::Unavailable(e.to_string())),
            }
        }
        let mut changed = Vec::new();
        if shown.input_hash != Some(input_hash.as_str()) {
            changed.push("its input");
        }
        if shown.definition_hash != Some(record.call.definition_hash.as_str()) {
            changed.push("the tool's definition");
        }
        if !changed.is_empty() {
            return Err(AnswerRefusal::NotAsShown(changed));
        }
    }
    Ok(record)
}

/// Stores `answer` to `record` (checked by [`answerable`]), logged as given on `surface`.
/// An approval is bound to the input and definition `record` holds — the ones
/// [`answerable`] found equal to what was shown — so the store refuses it, in the
/// transaction that would record it, should the call have changed since (R35; for a call
/// that needs several approvals, every one is of the same input and definition, R51).
pub(crate) async fn store(
    app: &App,
    record: &HeldRecord,
    mut answer: Answer,
    surface: &str,
) -> Result<AnswerReceipt, AnswerRefusal> {
    if answer.approve && answer.binding.is_none() {
        answer.binding = Some(toolgate_inbox::AnswerBinding::of(record));
    }
    let principal = answer
        .principal
        .as_ref()
        .map_or_else(String::new, ToString::to_string);
    match app.0.store.answer(record.id(), answer).await {
        Ok(receipt) => {
            tracing::info!(
                interaction = %toolgate_core::display::visible(record.id()),
                tool = %toolgate_core::display::visible(&record.call.tool),
                approver = %toolgate_core::display::visible(&receipt.approver),
                // R47: the verified identity behind an identity-provider token.
                principal = %toolgate_core::display::visible(&principal),
                approved = receipt.approved,
                replayed = receipt.replayed,
                // R51: how many of the approvals it needs the call has now.
                approvals = receipt.approvals,
                approvals_needed = receipt.approvals_needed,
                already_approved = receipt.already_approved,
                surface,
                "a held call was answered"
            );
            Ok(receipt)
        }
        Err(e) => {
            tracing::info!(
                interaction = %toolgate_core::display::visible(record.id()),
                refused = %toolgate_core::display::visible(&e.to_string()),
                surface,
                "an answer was refused"
            );
            Err(AnswerRefusal::Store(e))
        }
    }
}

/// A call that needs several approvals (R51) cannot be answered by something that is one
/// person's answer for more than one call (a grant) or that only one of them saw (an edited
/// input): refused, nothing changed.
pub(crate) fn one_approval_only(record: &HeldRecord, what: &str) -> Result<(), Response> {
    if record.approvals_needed() <= 1 {
        return Ok(());
    }
    Err(crate::html::refusal(
        StatusCode::CONFLICT,
        "Refused",
        &format!(
            "held call `{}` needs {} approvals from distinct people (R51); {what}; approve it with the card's Approve, and it is sent once {} people have; nothing was changed",
            record.id(),
            record.approvals_needed(),
            record.approvals_needed()
        ),
    ))
}

/// [`answerable`], then [`store`]: one answer to one held call, as every surface but the
/// edited approval gives it.
pub(crate) async fn answer_held(
    app: &App,
    approver: &Approver,
    id: &str,
    shown: Shown<'_>,
    answer: Answer,
    surface: &str,
) -> Result<(HeldRecord, AnswerReceipt), AnswerRefusal> {
    let record = answerable(app, approver, id, answer.approve, shown).await?;
    let receipt = store(app, &record, answer, surface).await?;
    Ok((record, receipt))
}
