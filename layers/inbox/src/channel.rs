//! The inbox approval channel: asked calls are held, and tickets are redeemed.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use toolgate_core::approval::{
    ApprovalChannel, ApprovalOutcome, ApprovalRequest, BoxFuture, ResumeTicket, VerifiedOutcome,
    new_question,
};
use toolgate_core::{ChannelKind, Principal};
use toolgate_engine::canon;

use crate::error::ClaimError;
use crate::model::{Claim, Claimed, HeldRecord, Holding, NewHeldCall, State, Timestamp};
use crate::store::InboxStore;

/// Who the gate names as the one who refused a ticket that the inbox could not redeem (the
/// call was not approved for exactly this input and definition). It is not a person.
pub const INBOX_APPROVER: &str = "inbox";

/// How long a held call waits for an answer by default: one week.
pub const DEFAULT_TTL: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// A resume ticket carrying a claim token (see [`crate::Inbox::resume`]).
pub(crate) fn ticket(id: &str, token: &str) -> ResumeTicket {
    ResumeTicket {
        interaction_id: id.to_owned(),
        claim: Some(token.to_owned()),
    }
}

fn split_ticket(ticket: &ResumeTicket) -> (&str, Option<&str>) {
    (ticket.interaction_id.as_str(), ticket.claim.as_deref())
}

/// The durable inbox channel (`approval.channel = "inbox"`, R26).
///
/// - A request **without** a ticket is stored as `pending` and answered
///   [`ApprovalOutcome::Held`] at once: nothing holds a process while a person decides.
///   A repeat of a call already held ([`HeldCalls::hold_unless_repeated`](crate::HeldCalls::hold_unless_repeated)) holds nothing
///   new: still open, it is the same card; being sent, it is refused as such; ended, it is
///   told its ending once — the person's denial and reason, the expiry, the cancellation, or
///   that it was sent — and the repeat after that asks anew (R26).
/// - A request **with** a ticket (a resumed call, [`toolgate_core::approval::ResumeTicket`]) is
///   the execution of a held call: it is approved only when that call is `approved`, for the
///   same tool and agent, with exactly the same input and the same tool definition (R35),
///   when the fresh decision asks for no reason the person was not asked about (R38), and
///   only for the one sender whose conditional claim wins (R26). The gate redeems a ticket
///   whatever its fresh decision, also when nothing asks any more, so the claim is never
///   skipped. Anything else is
///   refused with a reason that says what changed or what state the call is in.
/// - When the store cannot be used, the request is [`ApprovalOutcome::Unroutable`]: the gate
///   refuses the call (fail closed), and nothing already held is touched.
#[derive(Clone)]
pub struct InboxChannel {
    store: Arc<dyn InboxStore>,
    ttl: Duration,
}

impl fmt::Debug for InboxChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InboxChannel")
            .field("store", &self.store)
            .field("ttl", &self.ttl)
            .finish()
    }
}

impl InboxChannel {
    /// A channel holding calls in `store` for `ttl` before they expire.
    pub fn new(store: Arc<dyn InboxStore>, ttl: Duration) -> Self {
        Self { store, ttl }
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn InboxStore> {
        &self.store
    }
}

impl ApprovalChannel for InboxChannel {
    fn kind(&self) -> ChannelKind {
        ChannelKind::Inbox
    }

    /// R51: a held call records how many people must approve it, and is `approved` only
    /// when that many distinct people did ([`crate::MAX_APPROVALS`] at most).
    fn approvals_gathered(&self) -> u8 {
        crate::model::MAX_APPROVALS
    }

    fn request(&self, request: ApprovalRequest) -> BoxFuture<ApprovalOutcome> {
        let verified = self.request_verified(request);
        Box::pin(async move { verified.await.outcome })
    }

    /// R47: an approval or a denial read from the store comes with the verified principal
    /// the person answered with, when they had one.
    fn request_verified(&self, request: ApprovalRequest) -> BoxFuture<VerifiedOutcome> {
        let store = Arc::clone(&self.store);
        let ttl = self.ttl;
        Box::pin(async move {
            let mut answered_by = None;
            let outcome = match request.ticket.clone() {
                None => hold(&*store, &request, ttl, &mut answered_by).await,
                Some(ticket) => redeem(&*store, &request, &ticket, &mut answered_by).await,
            };
            VerifiedOutcome {
                outcome,
                answered_by,
            }
        })
    }
}

async fn hold(
    store: &dyn InboxStore,
    request: &ApprovalRequest,
    ttl: Duration,
    answered_by: &mut Option<Principal>,
) -> ApprovalOutcome {
    let call = match NewHeldCall::from_request(request, Timestamp::now(), ttl) {
        Ok(c) => c,
        Err(why) => return ApprovalOutcome::Unroutable(format!("the call cannot be held: {why}")),
    };
    match store.hold_unless_repeated(call).await {
        Ok(Holding::Held) => ApprovalOutcome::Held {
            interaction_id: request.interaction_id.clone(),
        },
        Ok(Holding::Open(record)) => match record.state {
            State::Claimed => refused(format!(
                "held call `{}` with this input is being sent (state `claimed`); an approved call is sent exactly once, and nothing new was held",
                record.id()
            )),
            // Still asked, or approved and about to be redeemed: the same card, not a second.
            _ => ApprovalOutcome::Held {
                interaction_id: record.id().to_owned(),
            },
        },
        Ok(Holding::Ended(record)) => {
            if record.state == State::Denied {
                answered_by.clone_from(&record.approver_principal);
            }
            ended(record)
        }
        Err(e) => ApprovalOutcome::Unroutable(format!("the call cannot be held: {e}")),
    }
}

/// What a repeat of a held call that ended is told, once (R26): the person's denial and
/// reason, the expiry, the cancellation, or that it was sent already.
fn ended(record: HeldRecord) -> ApprovalOutcome {
    let id = record.id().to_owned();
    match record.state {
        State::Denied => ApprovalOutcome::Denied {
            approver: record.approver.unwrap_or_else(|| INBOX_APPROVER.to_owned()),
            reason: record.answer_reason,
        },
        State::Expired => ApprovalOutcome::Expired,
        State::Cancelled => ApprovalOutcome::Cancelled,
        State::Unknown => refused(format!(
            "held call `{id}` with this input was claimed for sending, but the process sending it stopped before its result was recorded (state `unknown`): it may or may not have run, and it is never sent again automatically; nothing new was held, and calling again asks anew"
        )),
        state => refused(format!(
            "held call `{id}` with this input was already sent (state `{state}`); an approved call is sent exactly once, nothing new was held, and calling again asks anew"
        )),
    }
}

fn refused(reason: String) -> ApprovalOutcome {
    ApprovalOutcome::Refused { reason }
}

async fn redeem(
    store: &dyn InboxStore,
    request: &ApprovalRequest,
    ticket: &ResumeTicket,
    answered_by: &mut Option<Principal>,
) -> ApprovalOutcome {
    let (id, token) = split_ticket(ticket);
    let record = match store.get(id).await {
        Ok(Some(r)) => r,
        Ok(None) => return refused(format!("held call `{id}` was not issued by this inbox")),
        Err(e) => {
            return ApprovalOutcome::Unroutable(format!("held call `{id}` cannot be read: {e}"));
        }
    };
    let record = match approved(store, id, record, answered_by).await {
        Ok(record) => record,
        Err(outcome) => return outcome,
    };
    // R51: the names of everyone whose approval counted.
    let approver = record.approved_by();
    if let Some(refusal) = unlike_request(&record, request, id, &approver) {
        return refusal;
    }
    let token = match token {
        Some(t) if !t.is_empty() => t.to_owned(),
        _ => match toolgate_core::id::random_id("claim_") {
            Some(t) => t,
            None => {
                return ApprovalOutcome::Unroutable(String::from("no claim token could be made"));
            }
        },
    };
    let claim = Claim {
        input_hash: request.input_hash.clone(),
        definition_hash: request.definition_hash.clone(),
        token,
    };
    let claimed = store.claim(id, claim).await;
    claim_outcome(claimed, &record, approver, id, answered_by)
}

/// The held call's record when it is `approved`; otherwise what its redemption is told: a
/// pending call past its expiry is marked `expired` (best effort), one not yet answered is
/// refused, a denial comes with who denied, and a call already claimed is never sent again.
async fn approved(
    store: &dyn InboxStore,
    id: &str,
    record: HeldRecord,
    answered_by: &mut Option<Principal>,
) -> Result<HeldRecord, ApprovalOutcome> {
    match record.state {
        State::Approved => Ok(record),
        State::Pending => {
            let now = Timestamp::now();
            if record.is_past_expiry(now) {
                // Best effort: the record says `expired` from now on.
                let _ = store.expire_due(now).await;
                return Err(ApprovalOutcome::Expired);
            }
            Err(refused(format!(
                "held call `{id}` has not been answered yet (state `pending`)"
            )))
        }
        State::Denied => {
            answered_by.clone_from(&record.approver_principal);
            Err(ApprovalOutcome::Denied {
                approver: record.approver.unwrap_or_else(|| INBOX_APPROVER.to_owned()),
                reason: record.answer_reason,
            })
        }
        State::Expired => Err(ApprovalOutcome::Expired),
        State::Cancelled => Err(ApprovalOutcome::Cancelled),
        State::Claimed | State::Done | State::Failed | State::Unknown => Err(refused(format!(
            "held call `{id}` was already claimed for sending (state `{}`); an approved call is sent exactly once",
            record.state
        ))),
    }
}

/// Why the approved held call does not answer `request` (R35, R38, R51): too few
/// approvals, another tool, agent, input or definition, or a question the person was never
/// asked; `None` when it answers it.
fn unlike_request(
    record: &HeldRecord,
    request: &ApprovalRequest,
    id: &str,
    approver: &str,
) -> Option<ApprovalOutcome> {
    let held = &record.call;
    // R51: sent only when as many distinct people approved as the call needs: a call marked
    // `approved` with fewer (by a program that does not gather approvals) is never sent.
    if !record.has_every_approval() {
        return Some(refused(format!(
            "held call `{id}` needs {} approvals from distinct people and has {}; it is not sent",
            record.approvals_needed(),
            record.counted_approvals().len()
        )));
    }
    // R38, R51: the approval answers only the question it was asked; a fresh decision that
    // needs more people than approved it is a new question.
    if request.approvals > record.approvals_needed() {
        return Some(refused(format!(
            "approved by {approver}, but the call now needs {} approvals from distinct people (R51) and held call `{id}` was approved as a call that needs {}; the call will be asked about again",
            request.approvals,
            record.approvals_needed()
        )));
    }
    if !held.tool.eq_ignore_ascii_case(&request.tool) {
        return Some(refused(format!(
            "held call `{id}` approved `{}`, not `{}`",
            held.tool, request.tool
        )));
    }
    if held.agent != request.agent {
        return Some(refused(format!(
            "held call `{id}` was approved for agent `{}`, not `{}`",
            held.agent.rule_name(),
            request.agent.rule_name()
        )));
    }
    // R35: the exact input (not only its canonical hash: RFC 8785 rounds large numbers
    // through doubles, so two different inputs can share a hash).
    let same_input = record.holds_input(&request.input, &request.literals);
    if !same_input
        || held.input_hash != request.input_hash
        || canon::input_hash(&request.input).as_deref() != Some(held.input_hash.as_str())
    {
        return Some(refused(format!(
            "approved by {approver}, but the input differs from what was approved for held call `{id}`"
        )));
    }
    if held.definition_hash != request.definition_hash {
        return Some(refused(definition_changed(approver, &held.tool, id)));
    }
    // R38: the approval answers only the question it was asked. A fresh decision that asks
    // for a reason the person never saw is refused (it may ask for fewer).
    if let Some(new) = new_question(&held.reasons, &request.asks) {
        return Some(refused(format!(
            "approved by {approver}, but the decision changed while held call `{id}` waited: it now also asks \"{}\", which the approval did not answer; the call will be asked about again",
            new.reason
        )));
    }
    None
}

/// What the redemption is told once the store's claim of the held call answered: approved
/// (with who approved) when this sender claimed it, else why it is not sent.
fn claim_outcome(
    claimed: Result<Claimed, ClaimError>,
    record: &HeldRecord,
    approver: String,
    id: &str,
    answered_by: &mut Option<Principal>,
) -> ApprovalOutcome {
    match claimed {
        Ok(c) => {
            *answered_by = c.approver_principal;
            ApprovalOutcome::Approved {
                // R51: everyone whose approval counted, by name.
                approver: if record.approvals_needed() > 1 {
                    approver
                } else {
                    c.approver
                },
            }
        }
        Err(ClaimError::UnknownId(_)) => {
            refused(format!("held call `{id}` was not issued by this inbox"))
        }
        Err(ClaimError::NotApproved { state, .. }) => refused(format!(
            "held call `{id}` was claimed by another sender first (state `{state}`); an approved call is sent exactly once"
        )),
        Err(ClaimError::InputChanged(_)) => refused(format!(
            "approved by {approver}, but the input differs from what was approved for held call `{id}`"
        )),
        Err(ClaimError::DefinitionChanged(_)) => {
            refused(definition_changed(&approver, &record.call.tool, id))
        }
        Err(ClaimError::Store(e)) => {
            ApprovalOutcome::Unroutable(format!("held call `{id}` cannot be claimed: {e}"))
        }
    }
}

fn definition_changed(approver: &str, tool: &str, id: &str) -> String {
    format!(
        "approved by {approver}, but the definition of `{tool}` changed since held call `{id}` was approved; it will be asked about again"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tickets_split() {
        assert_eq!(
            split_ticket(&ticket("ia_1", "claim_x")),
            ("ia_1", Some("claim_x"))
        );
        let a = toolgate_core::id::random_id("claim_").unwrap();
        assert_eq!(a.len(), 6 + 32);
        assert_ne!(a, toolgate_core::id::random_id("claim_").unwrap());
    }
}
