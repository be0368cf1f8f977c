//! The PostgreSQL side of open approval questions (R47): `open_questions`
//! ([`crate::schema::QUESTIONS_TABLE`]), one conditional insert under a transaction lock to
//! open a question, one delete to take it.

use super::*;

impl PostgresInbox {
    /// [`OpenQuestions::open_question`].
    pub(super) async fn open_question_op(
        &self,
        q: &OpenQuestion,
        at_most: u32,
        now: Timestamp,
    ) -> Result<bool, InboxError> {
        let mut client = self.client().await?;
        let err = |e: tokio_postgres::Error| self.err(&e);
        let tx = client.transaction().await.map_err(err)?;
        // INVARIANT: every open takes this transaction-scoped lock first, so the count and
        // the insert of racing opens never keep more than `at_most`.
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&QUESTIONS_LOCK])
            .await
            .map_err(err)?;
        tx.execute(
            "DELETE FROM open_questions WHERE expires_at < $1",
            &[&now.as_millis()],
        )
        .await
        .map_err(err)?;
        let kept = tx
            .execute(
                "INSERT INTO open_questions (key, body, expires_at) SELECT $1, $2, $3 \
                 WHERE (SELECT count(*) FROM open_questions) < $4",
                &[
                    &q.key,
                    &q.body,
                    &q.expires_at.as_millis(),
                    &i64::from(at_most),
                ],
            )
            .await
            .map_err(err)?;
        tx.commit().await.map_err(err)?;
        Ok(kept == 1)
    }

    /// [`OpenQuestions::take_question`].
    pub(super) async fn take_question_op(
        &self,
        key: &str,
    ) -> Result<Option<OpenQuestion>, InboxError> {
        let client = self.client().await?;
        // INVARIANT: one statement; of racing takes exactly one deletes the row.
        let row = self
            .query_opt(
                &client,
                "DELETE FROM open_questions WHERE key = $1 RETURNING body, expires_at",
                &[&key],
            )
            .await?;
        row.map(|r| {
            Ok(OpenQuestion {
                key: key.to_owned(),
                body: r.try_get(0).map_err(|e| self.err(&e))?,
                expires_at: Timestamp::from_millis(r.try_get(1).map_err(|e| self.err(&e))?),
            })
        })
        .transpose()
    }
}

/// The advisory lock every [`OpenQuestions::open_question`] takes (a constant no other lock of
/// the inbox uses: theirs are hashes of calls and groups, this one is `"questions"` in ASCII).
const QUESTIONS_LOCK: i64 = 0x7175_6573_7469_6f6e;
