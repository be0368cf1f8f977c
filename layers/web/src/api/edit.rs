//! Approve with edits (issue 24): an approver with `may_edit` approves a held call with a
//! changed input.

use axum::http::StatusCode;
use serde_json::{Map, Value};
use toolgate::engine::approvers::Approver;
use toolgate_inbox::{Answer, AnswerReceipt, HeldRecord};

use super::calls::EditRefusal;
use super::refuse;
use crate::app::App;

/// Records an approval of `record` with `edited` as its input.
pub(crate) async fn approve_edited(
    _app: &App,
    _approver: &Approver,
    _record: &HeldRecord,
    _answer: Answer,
    _edited: Value,
) -> Result<AnswerReceipt, EditRefusal> {
    Err(EditRefusal::Response(refuse(
        StatusCode::FORBIDDEN,
        "forbidden",
        "editing an input is not available",
    )))
}

/// Adds what an edit changed to a call's JSON.
pub(crate) async fn describe_edit(_app: &App, _r: &HeldRecord, _o: &mut Map<String, Value>) {}
