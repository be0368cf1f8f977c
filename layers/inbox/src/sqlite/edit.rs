//! The SQLite side of approve-with-edits (approval-page.md, "Approve with edits"): the
//! `held_edits` table, created when first needed, and the one transaction that approves a
//! pending call with a new input.

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::{Inner, answer_op, bool_int};
use crate::edit::{EditedInput, StoredEdit};
use crate::error::{AnswerError, InboxError};
use crate::model::{Answer, AnswerReceipt, State, Timestamp};
use crate::state;

/// Beside `held_calls`: the input each edited approval replaced, and who edited, with the
/// index a repeat of the agent's input finds an edited call by (R26). Like `OPEN_INDEX`, not
/// a schema version of its own: created, when missing, each time a file is opened (every
/// look-up of held calls reads it); a program that does not know it ignores it.
pub(crate) const EDITS_TABLE: &str = "
CREATE TABLE IF NOT EXISTS held_edits (
    interaction_id           TEXT PRIMARY KEY NOT NULL,
    original_input_json      TEXT NOT NULL,
    original_input_canonical TEXT NOT NULL,
    original_input_hash      TEXT NOT NULL,
    edited_by                TEXT NOT NULL,
    edited_at                INTEGER NOT NULL,
    answer_key               TEXT
);
CREATE INDEX IF NOT EXISTS held_edits_original ON held_edits (original_input_hash);
";

pub(super) fn answer_edited_op(
    inner: &Inner,
    conn: &mut Connection,
    id: &str,
    answer: &Answer,
    edit: &EditedInput,
    now: Timestamp,
) -> Result<AnswerReceipt, AnswerError> {
    if !answer.approve {
        return Err(AnswerError::Invalid(String::from(
            "only an approval carries an edited input",
        )));
    }
    let (new_state, reason) = state::answer_update(answer)?;
    conn.execute_batch(EDITS_TABLE).map_err(|e| inner.err(e))?;
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| inner.err(e))?;
    let row: Option<(String, String, String, String, i64, i64)> = tx
        .query_row(
            "SELECT state, input_json, input_canonical, input_hash, expires_at, approvals_needed \
             FROM held_calls WHERE interaction_id = ?1",
            [id],
            |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                ))
            },
        )
        .optional()
        .map_err(|e| inner.err(e))?;
    let Some((st, json, canonical, hash, expires_at, needed)) = row else {
        return Err(AnswerError::UnknownId(id.to_owned()));
    };
    if st == State::Pending.as_str() && expires_at > now.as_millis() && needed > 1 {
        return Err(state::edit_needs_one_approval(id, needed));
    }
    if st == State::Pending.as_str() && expires_at > now.as_millis() {
        // INVARIANT: the approval and the new input are one update from `pending`; the
        // input the agent sent is kept beside it in the same transaction.
        tx.execute(
            "UPDATE held_calls SET state = ?2, approver = ?3, answer_key = ?4, \
             answer_approve = ?5, answer_reason = NULL, answered_at = ?6, updated_at = ?6, \
             input_json = ?7, input_canonical = ?8, input_hash = ?9, \
             approver_subject = ?10, approver_issuer = ?11 \
             WHERE interaction_id = ?1 AND state = 'pending'",
            params![
                id,
                new_state.as_str(),
                answer.approver,
                answer.idempotency_key,
                bool_int(true),
                now.as_millis(),
                edit.input_json,
                edit.input_canonical,
                edit.input_hash,
                answer.principal.as_ref().map(|p| p.subject.as_str()),
                answer.principal.as_ref().map(|p| p.issuer.as_str()),
            ],
        )
        .map_err(|e| inner.err(e))?;
        tx.execute(
            "INSERT INTO held_edits (interaction_id, original_input_json, original_input_canonical, \
             original_input_hash, edited_by, edited_at, answer_key) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                id,
                json,
                canonical,
                hash,
                answer.approver,
                now.as_millis(),
                answer.idempotency_key
            ],
        )
        .map_err(|e| inner.err(e))?;
        tx.commit().map_err(|e| inner.err(e))?;
        return Ok(state::answer_won(id, answer, reason, now));
    }
    drop(tx);
    // Not pending: what a plain answer would hear (expired, already decided, a replay of
    // the same key). A replay is only one of this same edit.
    let replay = answer_op(inner, conn, id, answer, now)?;
    let same_edit = edit_of_op(inner, conn, id)?
        .is_some_and(|e| e.answer_key == answer.idempotency_key)
        && hash == edit.input_hash;
    if same_edit {
        Ok(replay)
    } else {
        Err(AnswerError::AlreadyDecided {
            id: id.to_owned(),
            state: State::parse(&st).unwrap_or(State::Unknown),
        })
    }
}

pub(super) fn edit_of_op(
    inner: &Inner,
    conn: &mut Connection,
    id: &str,
) -> Result<Option<StoredEdit>, InboxError> {
    let has: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'held_edits'",
            [],
            |r| r.get(0),
        )
        .map_err(|e| inner.err(e))?;
    if has == 0 {
        return Ok(None);
    }
    conn.query_row(
        "SELECT original_input_json, original_input_hash, edited_by, edited_at, answer_key \
         FROM held_edits WHERE interaction_id = ?1",
        [id],
        |r| {
            Ok(StoredEdit {
                original_input_json: r.get(0)?,
                original_input_hash: r.get(1)?,
                edited_by: r.get(2)?,
                edited_at: Timestamp::from_millis(r.get(3)?),
                answer_key: r.get(4)?,
            })
        },
    )
    .optional()
    .map_err(|e| inner.err(e))
}

/// The execution target each call was held with (seed 000), as JSON. Like `REPEAT_COLUMN`,
/// not a schema version of its own: added, when missing, each time a version-2 file is
/// opened; a program that does not know it ignores it.
pub(crate) const TARGET_COLUMN: &str = "ALTER TABLE held_calls ADD COLUMN target_json TEXT;";

pub(super) fn add_target_column(inner: &Inner, conn: &mut Connection) -> Result<(), InboxError> {
    let has = |c: &Connection| -> rusqlite::Result<bool> {
        c.query_row(
            "SELECT count(*) FROM pragma_table_info('held_calls') WHERE name = 'target_json'",
            [],
            |r| r.get::<_, i64>(0),
        )
        .map(|n| n > 0)
    };
    if has(conn).map_err(|e| inner.err(e))? {
        return Ok(());
    }
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| inner.err(e))?;
    // Another process may have added it while we waited for the lock.
    if !has(&tx).map_err(|e| inner.err(e))? {
        tx.execute_batch(TARGET_COLUMN).map_err(|e| inner.err(e))?;
    }
    tx.commit().map_err(|e| inner.err(e))
}

/// A stored target ([`crate::codec::target_from_json`]).
pub(super) fn target_from_json(text: &str) -> Option<toolgate_core::ExecutionTarget> {
    crate::codec::target_from_json(text)
}
