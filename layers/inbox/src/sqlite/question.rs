//! The SQLite side of open approval questions (R47, [`OpenQuestions::open_question`]): the
//! `open_questions` table, created when first needed, one conditional insert to open a
//! question and one delete to take it.
//!
//! [`OpenQuestions::open_question`]: crate::OpenQuestions::open_question

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::Inner;
use crate::error::InboxError;
use crate::model::Timestamp;
use crate::question::OpenQuestion;

/// The questions open for their clients' retries, each until its expiry. Like `seen_nonces`,
/// not a schema version of its own: created when the first question is opened; a program
/// that does not know it ignores it.
pub(crate) const QUESTIONS_TABLE: &str = "
CREATE TABLE IF NOT EXISTS open_questions (
    key        TEXT PRIMARY KEY NOT NULL,
    body       TEXT NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS open_questions_by_expiry ON open_questions (expires_at);
";

pub(super) fn open_op(
    inner: &Inner,
    conn: &mut Connection,
    q: &OpenQuestion,
    at_most: u32,
    now: Timestamp,
) -> Result<bool, InboxError> {
    conn.execute_batch(QUESTIONS_TABLE)
        .map_err(|e| inner.err(e))?;
    // INVARIANT: the count and the insert under one write lock, so racing opens never keep
    // more than `at_most`.
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| inner.err(e))?;
    tx.execute(
        "DELETE FROM open_questions WHERE expires_at < ?1",
        [now.as_millis()],
    )
    .map_err(|e| inner.err(e))?;
    let kept = tx
        .execute(
            "INSERT INTO open_questions (key, body, expires_at) SELECT ?1, ?2, ?3 \
             WHERE (SELECT count(*) FROM open_questions) < ?4",
            params![q.key, q.body, q.expires_at.as_millis(), i64::from(at_most)],
        )
        .map_err(|e| inner.err(e))?;
    tx.commit().map_err(|e| inner.err(e))?;
    Ok(kept == 1)
}

pub(super) fn take_op(
    inner: &Inner,
    conn: &mut Connection,
    key: &str,
) -> Result<Option<OpenQuestion>, InboxError> {
    conn.execute_batch(QUESTIONS_TABLE)
        .map_err(|e| inner.err(e))?;
    // INVARIANT: one statement; of racing takes exactly one deletes the row.
    conn.query_row(
        "DELETE FROM open_questions WHERE key = ?1 RETURNING body, expires_at",
        [key],
        |r| {
            Ok(OpenQuestion {
                key: key.to_owned(),
                body: r.get(0)?,
                expires_at: Timestamp::from_millis(r.get(1)?),
            })
        },
    )
    .optional()
    .map_err(|e| inner.err(e))
}
