//! The state machine's decisions, written once for every backend (R26, R35, R43).
//!
//! A backend moves a held call with one conditional update (`… WHERE state = <from>`). When
//! the update wins, [`answer_update`] and [`answer_won`] say what it wrote and what the
//! person gets back; when it changes nothing, the backend reads the row and these functions
//! say why — a replayed answer ([`replay`]), a call that is no longer pending
//! ([`pending_lost`]), a claim refused ([`claim_lost`]), a result refused ([`complete_lost`]).
//! They are pure: no store, no clock. The backends differ only in how they read and write a
//! row (SQLite in `toolgate_inbox`, PostgreSQL in `toolgate-inbox-postgres`), so an answer,
//! a claim or a result is decided the same whichever store keeps the call.
//!
//! ```
//! use toolgate_inbox::{Answer, AnswerError, State, Timestamp};
//! use toolgate_inbox::state::{self, PendingLost, RecordedAnswer};
//!
//! let now = Timestamp::from_millis(2_000);
//! let answer = Answer::approve("k", "alice");
//! // The same key again is one answer (replayed) …
//! let recorded = RecordedAnswer {
//!     key: Some("k".into()),
//!     approve: Some(true),
//!     approver: Some("alice".into()),
//!     reason: None,
//!     answered_at: Some(Timestamp::from_millis(1_000)),
//! };
//! assert!(state::replay("ia_1", &answer, recorded).unwrap().unwrap().replayed);
//! // … and an answer to a call past its expiry is refused, the call marked `expired`.
//! let lost = state::pending_lost("ia_1", State::Pending, Timestamp::from_millis(1_500), now);
//! assert_eq!(lost, PendingLost::Expire(AnswerError::Expired("ia_1".into())));
//! ```

use crate::error::{AnswerError, ClaimError, CompleteError, InboxError, InboxErrorKind};
use crate::model::{Answer, AnswerReceipt, Claim, GivenApproval, Outcome, State, Timestamp};

/// What a winning answer writes: the state it moves the call to and the reason it keeps
/// (a denial's reason; an approval keeps none). Fails when the answer is invalid
/// ([`Answer::validate`]): the store must not be touched.
pub fn answer_update(answer: &Answer) -> Result<(State, Option<String>), AnswerError> {
    answer
        .validate()
        .map_err(|e| AnswerError::Invalid(e.to_string()))?;
    if answer.approve {
        Ok((State::Approved, None))
    } else {
        Ok((State::Denied, answer.reason.clone()))
    }
}

/// The receipt of an answer whose conditional update won at `now`, keeping `reason` (from
/// [`answer_update`]).
pub fn answer_won(
    id: &str,
    answer: &Answer,
    reason: Option<String>,
    now: Timestamp,
) -> AnswerReceipt {
    AnswerReceipt {
        interaction_id: id.to_owned(),
        approved: answer.approve,
        approver: answer.approver.clone(),
        reason,
        answered_at: now,
        replayed: false,
        approvals: u8::from(answer.approve),
        approvals_needed: 1,
        already_approved: false,
    }
}

/// `receipt` of an answer to a call that needs `needed` approvals and has `counted` of
/// them (R51).
pub fn with_approvals(mut receipt: AnswerReceipt, counted: usize, needed: u8) -> AnswerReceipt {
    let needed = needed.max(1);
    if needed > 1 {
        receipt.approvals = u8::try_from(counted).unwrap_or(u8::MAX);
        receipt.approvals_needed = needed;
    }
    receipt
}

/// How many of `approvals` are of the input and definition with these hashes (R35, R51).
pub fn counted(approvals: &[GivenApproval], input_hash: &str, definition_hash: &str) -> usize {
    approvals
        .iter()
        .filter(|a| a.input_hash == input_hash && a.definition_hash == definition_hash)
        .count()
}

/// The answer a held call records, as read back after an answer's update changed nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedAnswer {
    /// The idempotency key it was answered with.
    pub key: Option<String>,
    /// Whether it was approved (`None`: not answered).
    pub approve: Option<bool>,
    /// Who answered.
    pub approver: Option<String>,
    /// The denial's reason.
    pub reason: Option<String>,
    /// When it was answered.
    pub answered_at: Option<Timestamp>,
}

/// Whether `answer` repeats the answer already recorded with its key: `Some(Ok(receipt))`
/// for the same answer again (the recorded receipt, `replayed`), `Some(Err(Conflict))` for
/// the same key with the other answer, `None` when it is not a repeat (no key, or another
/// one): then [`pending_lost`] says why it lost.
///
/// Without a key an answer is its own: it never replays one already recorded (R43). A key
/// is its approver's: another person giving the same key repeats nothing, and is told the
/// call was already answered — never handed the first person's receipt.
pub fn replay(
    id: &str,
    answer: &Answer,
    recorded: RecordedAnswer,
) -> Option<Result<AnswerReceipt, AnswerError>> {
    let given = answer.idempotency_key.as_deref()?;
    if recorded.key.as_deref() != Some(given)
        || recorded.approver.as_deref() != Some(answer.approver.as_str())
    {
        return None;
    }
    let recorded_approve = recorded.approve == Some(true);
    if recorded_approve != answer.approve {
        return Some(Err(AnswerError::Conflict {
            id: id.to_owned(),
            key: given.to_owned(),
            recorded_approve,
        }));
    }
    Some(Ok(AnswerReceipt {
        interaction_id: id.to_owned(),
        approved: recorded_approve,
        approver: recorded.approver.unwrap_or_default(),
        reason: recorded.reason,
        answered_at: recorded.answered_at.unwrap_or(Timestamp::from_millis(0)),
        replayed: true,
        approvals: u8::from(recorded_approve),
        approvals_needed: 1,
        already_approved: false,
    }))
}

/// A held call's row as an answer that its backend's conditional update did not take reads
/// it, inside a transaction that holds the row (R26, R51).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnswerRow {
    /// Its state.
    pub state: State,
    /// When an unanswered call expires.
    pub expires_at: Timestamp,
    /// The answer it records (of a decided call).
    pub recorded: RecordedAnswer,
    /// How many distinct people must approve it (R51).
    pub approvals_needed: u8,
    /// The approvals given so far (R51), in the order given.
    pub approvals: Vec<GivenApproval>,
    /// The input hash it holds (R35).
    pub input_hash: String,
    /// The definition hash it holds (R35).
    pub definition_hash: String,
}

/// One more approval of a call that needs several (R51): what to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gathered {
    /// Every approval given, the new one last: written in place of the stored list.
    pub approvals: Vec<GivenApproval>,
    /// Whether this approval is the last one needed: the call moves `pending → approved` in
    /// the same update, with the answer's approver, key and principal.
    pub complete: bool,
    /// What the approver is told once it is written.
    pub receipt: AnswerReceipt,
}

/// What an answer does that its backend's conditional update did not take (the fast path
/// takes only a denial, or an approval of a call that needs one), given the row it read
/// while holding it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnswerStep {
    /// Answer with this; nothing to write: a replay of the same key, one person's second
    /// approval (a no-op that says so), or a refusal.
    Answer(Result<AnswerReceipt, AnswerError>),
    /// Write this approval (R51), conditionally on the call still being `pending`.
    Gather(Gathered),
    /// Write this denial (`pending → denied`, with the answer's approver, key, reason and
    /// principal), conditionally on the call still being `pending`, and answer with the
    /// receipt: a denial with a key of a call that has gathered approvals, which the
    /// conditional update leaves here so that a key that approved cannot deny (R26).
    Deny(AnswerReceipt),
    /// The call is not pending, or is due: as [`pending_lost`] says.
    Lost(PendingLost),
}

/// [`AnswerStep`] for `answer` to call `id` whose row reads `row`, at `now` (R26, R35, R51).
///
/// INVARIANT: a call that needs N approvals moves to `approved` only with the approval of
/// the N-th distinct person ([`GivenApproval::is_person`]), all of them for the input and
/// definition it holds; a person approving again changes nothing; the first denial ends it
/// (a denial is the conditional update's, never gathered); an answer to a call no longer
/// pending is refused as before.
pub fn answer_step(id: &str, answer: &Answer, row: AnswerRow, now: Timestamp) -> AnswerStep {
    let needed = row.approvals_needed.max(1);
    let count = counted(&row.approvals, &row.input_hash, &row.definition_hash);
    if let Some(replayed) = replay(id, answer, row.recorded.clone()) {
        return AnswerStep::Answer(replayed.map(|r| with_approvals(r, count, needed)));
    }
    // The same key retried by the person whose approval it gave, before (or after) the call
    // was approved: one answer.
    if let Some(key) = answer.idempotency_key.as_deref()
        && let Some(given) = row
            .approvals
            .iter()
            .find(|a| a.key.as_deref() == Some(key) && a.approver == answer.approver)
    {
        if !answer.approve {
            return AnswerStep::Answer(Err(AnswerError::Conflict {
                id: id.to_owned(),
                key: key.to_owned(),
                recorded_approve: true,
            }));
        }
        let receipt = AnswerReceipt {
            interaction_id: id.to_owned(),
            approved: true,
            approver: given.approver.clone(),
            reason: None,
            answered_at: given.at,
            replayed: true,
            approvals: 0,
            approvals_needed: 1,
            already_approved: false,
        };
        return AnswerStep::Answer(Ok(with_approvals(receipt, count, needed)));
    }
    if row.state != State::Pending || now >= row.expires_at {
        return AnswerStep::Lost(pending_lost(id, row.state, row.expires_at, now));
    }
    if answer.approve
        && let Some(binding) = &answer.binding
        && !binding.matches(&row.input_hash, &row.definition_hash)
    {
        return AnswerStep::Answer(Err(AnswerError::NotAsShown {
            id: id.to_owned(),
            input: binding.input_hash != row.input_hash,
            definition: binding.definition_hash != row.definition_hash,
        }));
    }
    if !answer.approve {
        // R51: the first denial ends it, whatever was gathered.
        let receipt = answer_won(id, answer, answer.reason.clone(), now);
        return AnswerStep::Deny(with_approvals(receipt, count, needed));
    }
    if needed <= 1 {
        // The conditional update takes these; one that did not is unexplained.
        return AnswerStep::Lost(PendingLost::StillPending);
    }
    if let Err(e) = answer.validate() {
        return AnswerStep::Answer(Err(AnswerError::Invalid(e.to_string())));
    }
    let mine = |a: &&GivenApproval| {
        a.input_hash == row.input_hash
            && a.definition_hash == row.definition_hash
            && a.is_person(&answer.approver, answer.principal.as_ref())
    };
    if let Some(earlier) = row.approvals.iter().find(mine) {
        let receipt = AnswerReceipt {
            interaction_id: id.to_owned(),
            approved: true,
            approver: earlier.approver.clone(),
            reason: None,
            answered_at: earlier.at,
            replayed: false,
            approvals: 0,
            approvals_needed: 1,
            already_approved: true,
        };
        return AnswerStep::Answer(Ok(with_approvals(receipt, count, needed)));
    }
    let mut approvals = row.approvals;
    approvals.push(GivenApproval {
        approver: answer.approver.clone(),
        principal: answer.principal.clone(),
        at: now,
        key: answer.idempotency_key.clone(),
        input_hash: row.input_hash.clone(),
        definition_hash: row.definition_hash.clone(),
    });
    let count = count + 1;
    let receipt = with_approvals(answer_won(id, answer, None, now), count, needed);
    AnswerStep::Gather(Gathered {
        approvals,
        complete: count >= usize::from(needed),
        receipt,
    })
}

/// Why a conditional `pending → …` update (an answer, a cancellation) changed nothing, or
/// what to do next, given the call's state and expiry as read afterwards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PendingLost {
    /// The call is still pending and not yet due: nothing explains the lost update (a row
    /// held in between, or a clock that stepped back). Try again, or refuse as a store error
    /// ([`changed_while`]) — never guess.
    StillPending,
    /// The call is pending past its expiry: mark it `expired` (conditionally, from
    /// `pending`), then answer with this error.
    Expire(AnswerError),
    /// Answer with this error; nothing to write.
    Refuse(AnswerError),
}

/// [`PendingLost`] for call `id` in `state`, expiring at `expires_at`, at `now`.
///
/// INVARIANT: an unanswered call is refused once `now` reaches its expiry (R26), and a
/// decided call is never overwritten.
pub fn pending_lost(id: &str, state: State, expires_at: Timestamp, now: Timestamp) -> PendingLost {
    match state {
        State::Pending if now >= expires_at => {
            PendingLost::Expire(AnswerError::Expired(id.to_owned()))
        }
        State::Pending => PendingLost::StillPending,
        State::Expired => PendingLost::Refuse(AnswerError::Expired(id.to_owned())),
        other => PendingLost::Refuse(AnswerError::AlreadyDecided {
            id: id.to_owned(),
            state: other,
        }),
    }
}

/// The store error for a call that kept changing while it was being `doing` ("answered",
/// "cancelled"): the update lost and nothing read afterwards explains why.
pub fn changed_while(id: &str, doing: &str) -> InboxError {
    InboxError::new(
        InboxErrorKind::Backend,
        format!("held call `{id}` changed while it was being {doing}"),
    )
}

/// Why the conditional `approved → claimed` update changed nothing, given the call's
/// `state` and the hashes it was approved with, as read afterwards (R26, R35): not approved,
/// another input, another definition — in that order.
pub fn claim_lost(
    id: &str,
    claim: &Claim,
    state: State,
    input_hash: &str,
    definition_hash: &str,
) -> ClaimError {
    if state != State::Approved {
        return ClaimError::NotApproved {
            id: id.to_owned(),
            state,
        };
    }
    if input_hash != claim.input_hash {
        return ClaimError::InputChanged(id.to_owned());
    }
    if definition_hash != claim.definition_hash {
        return ClaimError::DefinitionChanged(id.to_owned());
    }
    ClaimError::Store(InboxError::new(
        InboxErrorKind::Backend,
        format!("held call `{id}` could not be claimed"),
    ))
}

/// Why an approval with an edited input of a call that needs `needed` approvals (R51) is
/// refused: each approver must approve the same input (R35), and an edit would be one
/// person's alone. Nothing is recorded.
pub fn edit_needs_one_approval(id: &str, needed: i64) -> AnswerError {
    AnswerError::Invalid(format!(
        "held call `{id}` needs {needed} approvals from distinct people (R51), and every one approves the same input: it cannot be approved with an edited input; approve it as held, or deny it and let the agent call again"
    ))
}

/// The state a claimed call's result moves it to.
pub fn completed_state(outcome: Outcome) -> State {
    match outcome {
        Outcome::Done => State::Done,
        Outcome::Failed => State::Failed,
    }
}

/// Why the conditional `claimed → done/failed` update changed nothing, given the call's
/// state read afterwards (`None`: no such call): only the claim's own token records, once.
pub fn complete_lost(id: &str, state: Option<State>) -> CompleteError {
    match state {
        None => CompleteError::UnknownId(id.to_owned()),
        Some(state) => CompleteError::NotClaimed {
            id: id.to_owned(),
            state,
        },
    }
}

/// What a repeat of a held call gets, by the newest held call it repeats
/// ([`HeldCalls::hold_unless_repeated`](crate::HeldCalls::hold_unless_repeated), R26).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repeat {
    /// It is still asked (`pending`, not due), may be redeemed (`approved`) or is being sent
    /// (`claimed`): report it; hold nothing.
    Open,
    /// It is `pending` past its expiry: mark it `expired` (and told) and tell that.
    Expire,
    /// It ended (denied, expired, cancelled, sent, `unknown`) and nobody was told yet: mark
    /// it told and tell its ending.
    Tell,
    /// Its ending was told already, or it was refused when resumed and never sent: hold
    /// the repeat anew, a fresh ask.
    Hold,
}

fn was_refused(record: &crate::model::HeldRecord) -> bool {
    record
        .result
        .as_ref()
        .and_then(|r| r.get("outcome"))
        .and_then(serde_json::Value::as_str)
        == Some("refused")
}

/// [`Repeat`] for the newest held call `record` a call repeats, `told` whether its ending
/// was told to a repeat already, at `now`.
pub fn repeat_of(record: &crate::model::HeldRecord, told: bool, now: Timestamp) -> Repeat {
    match record.state {
        State::Pending if record.is_past_expiry(now) => Repeat::Expire,
        State::Pending | State::Approved | State::Claimed => Repeat::Open,
        // Refused when it was resumed, before it was claimed: never sent, and the refusal
        // went to the resume; the call asks anew (R35 re-gates a changed definition).
        State::Failed if was_refused(record) => Repeat::Hold,
        _ if told => Repeat::Hold,
        _ => Repeat::Tell,
    }
}

/// Whether a call with the input `input_json` (a held call's stored text) repeats `record`
/// ([`HeldRecord::repeated_by`](crate::model::HeldRecord::repeated_by)): the same JSON value
/// with every number as written, so two inputs that only share a canonical hash (a number
/// past 2^53 rounded through a double) are two calls (R20, R35); for a call approved with an
/// edited input, the input the agent sent.
pub fn same_input(record: &crate::model::HeldRecord, input_json: &str) -> bool {
    match crate::codec::parse_json(input_json) {
        Ok(b) => record.repeated_by(&b, &toolgate_core::number::NumberLiterals::scan(input_json)),
        Err(_) => {
            record.call.input_json == input_json
                || record.edited_from.as_deref() == Some(input_json)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded(key: &str, approve: bool) -> RecordedAnswer {
        RecordedAnswer {
            key: Some(key.into()),
            approve: Some(approve),
            approver: Some("alice".into()),
            reason: None,
            answered_at: Some(Timestamp::from_millis(7)),
        }
    }

    #[test]
    fn r26_an_answer_writes_its_state_and_only_a_denial_keeps_a_reason() {
        let mut approve = Answer::approve("k", "alice");
        approve.reason = Some("ignored".into());
        assert_eq!(answer_update(&approve), Ok((State::Approved, None)));
        let deny = Answer::deny("k", "bob", Some("no".into()));
        assert_eq!(answer_update(&deny), Ok((State::Denied, Some("no".into()))));
        let r = answer_won("ia", &deny, Some("no".into()), Timestamp::from_millis(5));
        assert!(!r.approved && !r.replayed);
        assert_eq!(r.answered_at, Timestamp::from_millis(5));
    }

    #[test]
    fn r26_an_answer_with_a_nul_character_is_invalid() {
        for a in [
            Answer::approve("k\0", "alice"),
            Answer::approve("k", "al\0ice"),
            Answer::deny("k", "bob", Some("\0".into())),
        ] {
            assert!(
                matches!(answer_update(&a), Err(AnswerError::Invalid(ref m)) if m.contains("NUL")),
                "{a:?}"
            );
        }
    }

    #[test]
    fn r43_the_same_key_replays_and_the_other_answer_conflicts() {
        let approve = Answer::approve("k", "alice");
        let receipt = replay("ia", &approve, recorded("k", true))
            .unwrap()
            .unwrap();
        assert!(receipt.replayed && receipt.approved);
        assert_eq!(receipt.approver, "alice", "the first answer's approver");
        // A key is its approver's; another person's same key repeats nothing.
        assert_eq!(
            replay("ia", &Answer::approve("k", "carol"), recorded("k", true)),
            None
        );
        let deny = Answer::deny("k", "alice", None);
        assert!(matches!(
            replay("ia", &deny, recorded("k", true)),
            Some(Err(AnswerError::Conflict {
                recorded_approve: true,
                ..
            }))
        ));
        assert_eq!(replay("ia", &approve, recorded("other", true)), None);
        assert_eq!(
            replay("ia", &Answer::approved_by("alice"), recorded("k", true)),
            None,
            "without a key an answer is its own"
        );
    }

    #[test]
    fn r26_a_lost_pending_update_is_explained_by_state_and_expiry() {
        let (due, now) = (Timestamp::from_millis(10), Timestamp::from_millis(10));
        assert_eq!(
            pending_lost("ia", State::Pending, due, now),
            PendingLost::Expire(AnswerError::Expired("ia".into()))
        );
        assert_eq!(
            pending_lost("ia", State::Pending, Timestamp::from_millis(11), now),
            PendingLost::StillPending
        );
        assert_eq!(
            pending_lost("ia", State::Expired, due, now),
            PendingLost::Refuse(AnswerError::Expired("ia".into()))
        );
        assert_eq!(
            pending_lost("ia", State::Approved, Timestamp::from_millis(99), now),
            PendingLost::Refuse(AnswerError::AlreadyDecided {
                id: "ia".into(),
                state: State::Approved
            })
        );
    }

    #[test]
    fn r35_a_lost_claim_names_the_first_thing_that_differs() {
        let claim = Claim {
            input_hash: "i".into(),
            definition_hash: "d".into(),
            token: "t".into(),
        };
        assert!(matches!(
            claim_lost("ia", &claim, State::Pending, "i", "d"),
            ClaimError::NotApproved {
                state: State::Pending,
                ..
            }
        ));
        assert_eq!(
            claim_lost("ia", &claim, State::Approved, "x", "x"),
            ClaimError::InputChanged("ia".into())
        );
        assert_eq!(
            claim_lost("ia", &claim, State::Approved, "i", "x"),
            ClaimError::DefinitionChanged("ia".into())
        );
        assert!(matches!(
            claim_lost("ia", &claim, State::Approved, "i", "d"),
            ClaimError::Store(_)
        ));
    }

    #[test]
    fn r26_a_result_is_recorded_only_for_a_claimed_call() {
        assert_eq!(completed_state(Outcome::Done), State::Done);
        assert_eq!(completed_state(Outcome::Failed), State::Failed);
        assert_eq!(
            complete_lost("ia", None),
            CompleteError::UnknownId("ia".into())
        );
        assert!(matches!(
            complete_lost("ia", Some(State::Done)),
            CompleteError::NotClaimed {
                state: State::Done,
                ..
            }
        ));
    }
}
