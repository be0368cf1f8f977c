//! Who may see a held call (R24); answering one is [`crate::answer`]'s.

use axum::http::StatusCode;
use axum::response::Response;
use toolgate_inbox::HeldRecord;

use crate::html;
use crate::state::Who;

pub(crate) fn store_failed(e: impl std::fmt::Display) -> Response {
    html::refusal(
        StatusCode::SERVICE_UNAVAILABLE,
        "The inbox cannot be read",
        &e.to_string(),
    )
}

/// Whether `who` is shown `r` (approval-page.md): an approver sees only the held calls they
/// may answer ([`toolgate_engine::approvers::Approver::may_answer`]), and the ones they
/// answered themselves; a call to any other tool, its input included, stays out of every
/// list, card and history row they are sent.
pub(crate) fn may_see(who: &Who, r: &HeldRecord) -> bool {
    who.approver
        .may_answer(&r.call.identities, r.call.agent.rule_name())
        || r.approver.as_deref() == Some(who.approver.name.as_str())
}
