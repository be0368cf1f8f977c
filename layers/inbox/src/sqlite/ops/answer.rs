//! The SQL of an answer to a held call (R26, R51) and of a cancellation, each in one
//! transaction.

use super::*;

/// The columns an answer reads back when its conditional update changed nothing
/// ([`answer_row`]).
const ANSWER_ROW: &str = "state, answer_key, answer_approve, expires_at, approver, answer_reason, \
    answered_at, approvals_needed, approvals_json, input_hash, definition_hash";

/// Reads [`ANSWER_ROW`]; a value that does not parse is a [`RecordError`](crate::RecordError).
fn answer_row(r: &Row<'_>) -> rusqlite::Result<Result<state::AnswerRow, crate::RecordError>> {
    let st: String = r.get(0)?;
    let approve: Option<i64> = r.get(2)?;
    let answered_at: Option<i64> = r.get(6)?;
    let needed: i64 = r.get(7)?;
    let approvals: Option<String> = r.get(8)?;
    let recorded = state::RecordedAnswer {
        key: r.get(1)?,
        approve: approve.map(|a| a == 1),
        approver: r.get(4)?,
        reason: r.get(5)?,
        answered_at: answered_at.map(Timestamp::from_millis),
    };
    let expires_at = Timestamp::from_millis(r.get(3)?);
    let input_hash: String = r.get(9)?;
    let definition_hash: String = r.get(10)?;
    Ok((|| {
        Ok(state::AnswerRow {
            state: State::parse(&st)
                .ok_or_else(|| crate::RecordError::State { state: st.clone() })?,
            expires_at,
            recorded,
            approvals_needed: codec::approvals_needed_from(needed)?,
            approvals: crate::model::GivenApproval::list_from_text(approvals.as_deref())?,
            input_hash,
            definition_hash,
        })
    })())
}

pub(crate) fn answer_op(
    inner: &Inner,
    conn: &mut Connection,
    id: &str,
    answer: &Answer,
    now: Timestamp,
) -> Result<AnswerReceipt, AnswerError> {
    let (new_state, reason) = state::answer_update(answer)?;
    if let Some((needed, approvals, input_hash, definition_hash)) =
        answer_update_row(inner, conn, id, answer, now, (new_state, &reason))?
    {
        let receipt = state::answer_won(id, answer, reason, now);
        // A denial of a call that needs several approvals says how many it had (R51).
        let needed = codec::approvals_needed_from(needed).unwrap_or(1);
        let given =
            crate::model::GivenApproval::list_from_text(approvals.as_deref()).unwrap_or_default();
        let count = state::counted(&given, &input_hash, &definition_hash);
        return Ok(state::with_approvals(receipt, count, needed));
    }
    // INVARIANT: `BEGIN IMMEDIATE` takes the write lock before the read, so the row read is
    // the row written: of two approvals racing from two processes, the second sees the first
    // (R51).
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| inner.err(e))?;
    let row = tx
        .prepare_cached(&format!(
            "SELECT {ANSWER_ROW} FROM held_calls WHERE interaction_id = ?1"
        ))
        .and_then(|mut s| s.query_row([id], answer_row).optional())
        .map_err(|e| inner.err(e))?;
    let row = match row {
        None => return Err(AnswerError::UnknownId(id.to_owned())),
        Some(Ok(row)) => row,
        Some(Err(why)) => return Err(AnswerError::Store(inner.record_err(id, why))),
    };
    let answered = match state::answer_step(id, answer, row, now) {
        state::AnswerStep::Answer(result) => return result,
        state::AnswerStep::Gather(g) => {
            record_gathered(inner, &tx, id, answer, now, &g)?;
            Ok(g.receipt)
        }
        state::AnswerStep::Deny(receipt) => {
            record_denied(inner, &tx, id, answer, now, &receipt)?;
            Ok(receipt)
        }
        state::AnswerStep::Lost(PendingLost::Expire(e)) => {
            tx.execute(
                "UPDATE held_calls SET state = 'expired', updated_at = ?2 \
                 WHERE interaction_id = ?1 AND state = 'pending'",
                params![id, now.as_millis()],
            )
            .map_err(|e| inner.err(e))?;
            Err(e)
        }
        // Not reached: a pending call before its expiry took the update above. Should a
        // clock step back in between, the call is still refused rather than guessed at.
        state::AnswerStep::Lost(PendingLost::StillPending) => {
            return Err(AnswerError::Store(state::changed_while(id, "answered")));
        }
        state::AnswerStep::Lost(PendingLost::Refuse(e)) => return Err(e),
    };
    // Fail closed: an approval (or a denial, or an expiry) the store cannot commit is not
    // recorded.
    tx.commit().map_err(|e| inner.err(e))?;
    answered
}

/// What the conditional update returns when it changed the row: `approvals_needed`,
/// `approvals_json`, `input_hash`, `definition_hash`.
type Won = (i64, Option<String>, String, String);

/// The answer's one conditional update from `pending`, outside any transaction: the row's
/// approvals needed and given, input hash and definition hash when it changed the row.
fn answer_update_row(
    inner: &Inner,
    conn: &Connection,
    id: &str,
    answer: &Answer,
    now: Timestamp,
    (new_state, reason): (State, &Option<String>),
) -> Result<Option<Won>, AnswerError> {
    let binding = answer.binding.as_ref();
    // INVARIANT: an answer is one conditional update from `pending` (before the expiry); a
    // call answered, expired or cancelled in between is never overwritten. This is the whole
    // of the common case — a denial, or an approval of a call that needs one (R51) of the
    // input and definition shown (R35); anything else is decided below, in one transaction.
    let won = conn
        .prepare_cached(
            "UPDATE held_calls SET state = ?2, approver = ?3, answer_key = ?4, \
             answer_approve = ?5, answer_reason = ?6, answered_at = ?7, updated_at = ?7, \
             approver_subject = ?8, approver_issuer = ?9 \
             WHERE interaction_id = ?1 AND state = 'pending' AND expires_at > ?7 \
             AND (?5 = 0 OR approvals_needed <= 1) \
             AND (?5 = 1 OR ?4 IS NULL OR approvals_json IS NULL) \
             AND (?5 = 0 OR ?10 IS NULL OR (input_hash = ?10 AND definition_hash = ?11)) \
             RETURNING approvals_needed, approvals_json, input_hash, definition_hash",
        )
        .and_then(|mut s| {
            s.query_row(
                params![
                    id,
                    new_state.as_str(),
                    answer.approver,
                    answer.idempotency_key,
                    bool_int(answer.approve),
                    reason,
                    now.as_millis(),
                    answer.principal.as_ref().map(|p| p.subject.as_str()),
                    answer.principal.as_ref().map(|p| p.issuer.as_str()),
                    binding.map(|b| b.input_hash.as_str()),
                    binding.map(|b| b.definition_hash.as_str()),
                ],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .optional()
        })
        .map_err(|e| inner.err(e))?;
    Ok(won)
}

/// Records an approval gathered toward the several a call needs (R51) in the row `tx`
/// holds: the call approved when it was the last one needed, else one more approval.
fn record_gathered(
    inner: &Inner,
    tx: &rusqlite::Transaction<'_>,
    id: &str,
    answer: &Answer,
    now: Timestamp,
    g: &state::Gathered,
) -> Result<(), AnswerError> {
    let principal = answer.principal.as_ref();
    let changed = if g.complete {
        tx.execute(
            "UPDATE held_calls SET state = 'approved', approver = ?2, answer_key = ?3, \
             answer_approve = 1, answer_reason = NULL, answered_at = ?4, updated_at = ?4, \
             approver_subject = ?5, approver_issuer = ?6, approvals_json = ?7 \
             WHERE interaction_id = ?1 AND state = 'pending'",
            params![
                id,
                answer.approver,
                answer.idempotency_key,
                now.as_millis(),
                principal.map(|p| p.subject.as_str()),
                principal.map(|p| p.issuer.as_str()),
                crate::model::GivenApproval::list_to_text(&g.approvals),
            ],
        )
    } else {
        tx.execute(
            "UPDATE held_calls SET approvals_json = ?2, updated_at = ?3 \
             WHERE interaction_id = ?1 AND state = 'pending'",
            params![
                id,
                crate::model::GivenApproval::list_to_text(&g.approvals),
                now.as_millis()
            ],
        )
    }
    .map_err(|e| inner.err(e))?;
    if changed != 1 {
        return Err(AnswerError::Store(state::changed_while(id, "approved")));
    }
    Ok(())
}

/// Records a denial in the row `tx` holds.
fn record_denied(
    inner: &Inner,
    tx: &rusqlite::Transaction<'_>,
    id: &str,
    answer: &Answer,
    now: Timestamp,
    receipt: &AnswerReceipt,
) -> Result<(), AnswerError> {
    let changed = tx
        .execute(
            "UPDATE held_calls SET state = 'denied', approver = ?2, answer_key = ?3, \
             answer_approve = 0, answer_reason = ?4, answered_at = ?5, updated_at = ?5, \
             approver_subject = ?6, approver_issuer = ?7 \
             WHERE interaction_id = ?1 AND state = 'pending'",
            params![
                id,
                answer.approver,
                answer.idempotency_key,
                receipt.reason,
                now.as_millis(),
                answer.principal.as_ref().map(|p| p.subject.as_str()),
                answer.principal.as_ref().map(|p| p.issuer.as_str()),
            ],
        )
        .map_err(|e| inner.err(e))?;
    if changed != 1 {
        return Err(AnswerError::Store(state::changed_while(id, "denied")));
    }
    Ok(())
}

pub(crate) fn cancel_op(
    inner: &Inner,
    conn: &mut Connection,
    id: &str,
    now: Timestamp,
) -> Result<(), AnswerError> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| inner.err(e))?;
    let row: Option<(String, i64)> = tx
        .query_row(
            "SELECT state, expires_at FROM held_calls WHERE interaction_id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .map_err(|e| inner.err(e))?;
    let Some((st, expires_at)) = row else {
        return Err(AnswerError::UnknownId(id.to_owned()));
    };
    let st =
        State::parse(&st).ok_or_else(|| inner.record_err(id, format!("unknown state `{st}`")))?;
    // The transaction holds the row: a call still pending and not due is cancelled here.
    let (to, result) = match state::pending_lost(id, st, Timestamp::from_millis(expires_at), now) {
        PendingLost::StillPending => (State::Cancelled, Ok(())),
        PendingLost::Expire(e) => (State::Expired, Err(e)),
        PendingLost::Refuse(e) => return Err(e),
    };
    tx.execute(
        "UPDATE held_calls SET state = ?2, updated_at = ?3 \
         WHERE interaction_id = ?1 AND state = 'pending'",
        params![id, to.as_str(), now.as_millis()],
    )
    .map_err(|e| inner.err(e))?;
    tx.commit().map_err(|e| inner.err(e))?;
    result
}
