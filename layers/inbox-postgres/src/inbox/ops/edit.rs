//! The PostgreSQL side of approve-with-edits (approval-page.md, "Approve with edits"): the
//! one transaction that approves a pending call with a new input and keeps the input the
//! agent sent in `held_edits` ([`crate::schema::EDIT_AND_TARGET`]), and the read of that
//! record. The same semantics as the SQLite backend's (`toolgate_inbox`'s
//! `sqlite/edit.rs`).

use super::*;
use toolgate_inbox::{EditedInput, StoredEdit};

impl PostgresInbox {
    /// [`HeldCalls::answer_edited`].
    pub(super) async fn answer_edited_op(
        &self,
        id: &str,
        answer: Answer,
        edit: EditedInput,
    ) -> Result<AnswerReceipt, AnswerError> {
        if !answer.approve {
            return Err(AnswerError::Invalid(String::from(
                "only an approval carries an edited input",
            )));
        }
        let (new_state, reason) = state::answer_update(&answer)?;
        let mut client = self.client().await?;
        let err = |e: tokio_postgres::Error| AnswerError::Store(self.err(&e));
        let now = Timestamp::now();
        let tx = client.transaction().await.map_err(err)?;
        // INVARIANT: the row is locked while it is read and changed, so of racing answers
        // (plain or edited) exactly one finds it pending; the input the agent sent is kept
        // beside the approval in the same transaction.
        let Some(row) = tx
            .query_opt(
                "SELECT state, input_json, input_canonical, input_hash, expires_at, \
                 approvals_needed FROM held_calls WHERE interaction_id = $1 FOR UPDATE",
                &[&id],
            )
            .await
            .map_err(err)?
        else {
            return Err(AnswerError::UnknownId(id.to_owned()));
        };
        let st: String = row.try_get(0).map_err(err)?;
        let json: String = row.try_get(1).map_err(err)?;
        let canonical: String = row.try_get(2).map_err(err)?;
        let hash: String = row.try_get(3).map_err(err)?;
        let expires_at: i64 = row.try_get(4).map_err(err)?;
        let needed: i32 = row.try_get(5).map_err(err)?;
        if st == State::Pending.as_str() && expires_at > now.as_millis() && needed > 1 {
            return Err(state::edit_needs_one_approval(id, i64::from(needed)));
        }
        if st == State::Pending.as_str() && expires_at > now.as_millis() {
            tx.execute(
                "UPDATE held_calls SET state = $2, approver = $3, answer_key = $4, \
                 answer_approve = TRUE, answer_reason = NULL, answered_at = $5, updated_at = $5, \
                 input_json = $6, input_canonical = $7, input_hash = $8, \
                 approver_subject = $9, approver_issuer = $10 \
                 WHERE interaction_id = $1 AND state = 'pending'",
                &[
                    &id,
                    &new_state.as_str(),
                    &answer.approver,
                    &answer.idempotency_key,
                    &now.as_millis(),
                    &edit.input_json,
                    &edit.input_canonical,
                    &edit.input_hash,
                    &answer.principal.as_ref().map(|p| p.subject.as_str()),
                    &answer.principal.as_ref().map(|p| p.issuer.as_str()),
                ],
            )
            .await
            .map_err(err)?;
            tx.execute(
                "INSERT INTO held_edits (interaction_id, original_input_json, \
                 original_input_canonical, original_input_hash, edited_by, edited_at, answer_key) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
                &[
                    &id,
                    &json,
                    &canonical,
                    &hash,
                    &answer.approver,
                    &now.as_millis(),
                    &answer.idempotency_key,
                ],
            )
            .await
            .map_err(err)?;
            tx.commit().await.map_err(err)?;
            return Ok(state::answer_won(id, &answer, reason, now));
        }
        tx.rollback().await.map_err(err)?;
        drop(client);
        // Not pending: what a plain answer would hear (expired, already decided, a replay of
        // the same key). A replay is only one of this same edit.
        let key = answer.idempotency_key.clone();
        let replay = self.answer_op(id, answer).await?;
        let same_edit = self
            .edit_of_op(id)
            .await?
            .is_some_and(|e| e.answer_key == key)
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

    /// [`HeldCalls::edit_of`].
    pub(super) async fn edit_of_op(&self, id: &str) -> Result<Option<StoredEdit>, InboxError> {
        let client = self.client().await?;
        let row = self
            .query_opt(
                &client,
                "SELECT original_input_json, original_input_hash, edited_by, edited_at, answer_key \
                 FROM held_edits WHERE interaction_id = $1",
                &[&id],
            )
            .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let read = |e: tokio_postgres::Error| self.err(&e);
        Ok(Some(StoredEdit {
            original_input_json: row.try_get(0).map_err(read)?,
            original_input_hash: row.try_get(1).map_err(read)?,
            edited_by: row.try_get(2).map_err(read)?,
            edited_at: Timestamp::from_millis(row.try_get(3).map_err(read)?),
            answer_key: row.try_get(4).map_err(read)?,
        }))
    }
}
