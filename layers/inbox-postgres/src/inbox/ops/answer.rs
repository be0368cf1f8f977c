//! The answers to held calls on PostgreSQL: one conditional `UPDATE … RETURNING` each
//! (R26, R51), the lost races told apart, and cancellation.

use super::*;

impl PostgresInbox {
    pub(super) async fn answer_op(
        &self,
        id: &str,
        answer: Answer,
    ) -> Result<AnswerReceipt, AnswerError> {
        let (new_state, reason) = state::answer_update(&answer)?;
        let mut client = self.client().await?;
        let binding = answer.binding.as_ref();
        for _ in 0..ATTEMPTS {
            let now = Timestamp::now();
            // INVARIANT: an answer is one conditional update from `pending`; of racing
            // answers exactly one changes the row (the others wait for its row lock, then see
            // it no longer pending). A call answered, expired or cancelled is not overwritten.
            // This takes a denial, and an approval of a call that needs one (R51) of the
            // input and definition shown (R35); anything else is decided below, holding the
            // row.
            let won = self
                .query_opt(
                    &client,
                    "UPDATE held_calls SET state = $2, approver = $3, answer_key = $4, \
                     answer_approve = $5, answer_reason = $6, answered_at = $7, updated_at = $7, \
                     approver_subject = $8, approver_issuer = $9 \
                     WHERE interaction_id = $1 AND state = 'pending' AND expires_at > $7 \
                     AND (NOT $5 OR approvals_needed <= 1) \
                     AND ($5 OR $4::text IS NULL OR approvals_json IS NULL) \
                     AND (NOT $5 OR $10::text IS NULL \
                     OR (input_hash = $10 AND definition_hash = $11)) \
                     RETURNING approvals_needed, approvals_json, input_hash, definition_hash",
                    &[
                        &id,
                        &new_state.as_str(),
                        &answer.approver,
                        &answer.idempotency_key,
                        &answer.approve,
                        &reason,
                        &now.as_millis(),
                        &answer.principal.as_ref().map(|p| p.subject.as_str()),
                        &answer.principal.as_ref().map(|p| p.issuer.as_str()),
                        &binding.map(|b| b.input_hash.as_str()),
                        &binding.map(|b| b.definition_hash.as_str()),
                    ],
                )
                .await?;
            if let Some(row) = won {
                let read = |e: tokio_postgres::Error| AnswerError::Store(self.err(&e));
                let needed: i32 = row.try_get(0).map_err(read)?;
                let given: Option<String> = row.try_get(1).map_err(read)?;
                let input_hash: String = row.try_get(2).map_err(read)?;
                let definition_hash: String = row.try_get(3).map_err(read)?;
                // A denial of a call that needs several approvals says how many it had (R51).
                let needed = codec::approvals_needed_from(i64::from(needed)).unwrap_or(1);
                let given = GivenApproval::list_from_text(given.as_deref()).unwrap_or_default();
                let count = state::counted(&given, &input_hash, &definition_hash);
                let receipt = state::answer_won(id, &answer, reason, now);
                return Ok(state::with_approvals(receipt, count, needed));
            }
            if let Some(done) = self
                .answer_holding_row(&mut client, id, &answer, now)
                .await?
            {
                return done;
            }
            // Held between the update and the read: try again.
        }
        Err(AnswerError::Store(state::changed_while(id, "answered")))
    }

    /// The rest of an answer the conditional update did not take, in one transaction that
    /// locks the row (`FOR UPDATE`): a replay, an approval gathered toward the several a
    /// call needs (R51) — of two approvals racing through two instances, the second waits
    /// for the first's lock and sees its approval — or why it is refused. `None`: the call
    /// is still pending and nothing explains the lost update (the caller tries again).
    pub(super) async fn answer_holding_row(
        &self,
        client: &mut Object,
        id: &str,
        answer: &Answer,
        now: Timestamp,
    ) -> Result<Option<Result<AnswerReceipt, AnswerError>>, AnswerError> {
        let err = |e: tokio_postgres::Error| AnswerError::Store(self.err(&e));
        let tx = client.transaction().await.map_err(err)?;
        let Some(row) = tx
            .query_opt(
                "SELECT state, answer_key, answer_approve, expires_at, approver, answer_reason, \
                 answered_at, approvals_needed, approvals_json, input_hash, definition_hash \
                 FROM held_calls WHERE interaction_id = $1 FOR UPDATE",
                &[&id],
            )
            .await
            .map_err(err)?
        else {
            return Ok(Some(Err(AnswerError::UnknownId(id.to_owned()))));
        };
        let read = self.answer_row(id, &row)?;
        let answered = match state::answer_step(id, answer, read, now) {
            state::AnswerStep::Answer(result) => return Ok(Some(result)),
            state::AnswerStep::Gather(g) => {
                self.record_gathered(&tx, id, answer, now, &g).await?;
                Ok(g.receipt)
            }
            state::AnswerStep::Deny(receipt) => {
                self.record_denied(&tx, id, answer, now, &receipt).await?;
                Ok(receipt)
            }
            state::AnswerStep::Lost(PendingLost::Expire(e)) => {
                tx.execute(
                    "UPDATE held_calls SET state = 'expired', updated_at = $2 \
                     WHERE interaction_id = $1 AND state = 'pending'",
                    &[&id, &now.as_millis()],
                )
                .await
                .map_err(err)?;
                Err(e)
            }
            state::AnswerStep::Lost(PendingLost::StillPending) => return Ok(None),
            state::AnswerStep::Lost(PendingLost::Refuse(e)) => return Ok(Some(Err(e))),
        };
        // Fail closed: an approval (or a denial, or an expiry) the store cannot commit is
        // not recorded.
        tx.commit().await.map_err(err)?;
        Ok(Some(answered))
    }

    /// The held call's row as the answer rules read it (the columns of
    /// [`Self::answer_holding_row`]'s `SELECT`).
    fn answer_row(&self, id: &str, row: &Row) -> Result<state::AnswerRow, AnswerError> {
        let err = |e: tokio_postgres::Error| AnswerError::Store(self.err(&e));
        let st: String = row.try_get(0).map_err(err)?;
        let needed: i32 = row.try_get(7).map_err(err)?;
        let given: Option<String> = row.try_get(8).map_err(err)?;
        let parsed = (|| {
            Ok::<_, toolgate_inbox::RecordError>((
                codec::approvals_needed_from(i64::from(needed))?,
                GivenApproval::list_from_text(given.as_deref())?,
            ))
        })();
        let (needed, approvals) =
            parsed.map_err(|why| AnswerError::Store(self.record_err(id, why)))?;
        Ok(state::AnswerRow {
            state: self.parse_state(id, &st)?,
            expires_at: Timestamp::from_millis(row.try_get(3).map_err(err)?),
            recorded: state::RecordedAnswer {
                key: row.try_get(1).map_err(err)?,
                approve: row.try_get(2).map_err(err)?,
                approver: row.try_get(4).map_err(err)?,
                reason: row.try_get(5).map_err(err)?,
                answered_at: row
                    .try_get::<_, Option<i64>>(6)
                    .map_err(err)?
                    .map(Timestamp::from_millis),
            },
            approvals_needed: needed,
            approvals,
            input_hash: row.try_get(9).map_err(err)?,
            definition_hash: row.try_get(10).map_err(err)?,
        })
    }

    /// Records an approval gathered toward the several a call needs (R51) in the row `tx`
    /// holds: the call approved when it was the last one needed, else one more approval.
    async fn record_gathered(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        id: &str,
        answer: &Answer,
        now: Timestamp,
        g: &state::Gathered,
    ) -> Result<(), AnswerError> {
        let err = |e: tokio_postgres::Error| AnswerError::Store(self.err(&e));
        let principal = answer.principal.as_ref();
        let text = GivenApproval::list_to_text(&g.approvals);
        let changed = if g.complete {
            tx.execute(
                "UPDATE held_calls SET state = 'approved', approver = $2, answer_key = $3, \
                 answer_approve = TRUE, answer_reason = NULL, answered_at = $4, \
                 updated_at = $4, approver_subject = $5, approver_issuer = $6, \
                 approvals_json = $7 WHERE interaction_id = $1 AND state = 'pending'",
                &[
                    &id,
                    &answer.approver,
                    &answer.idempotency_key,
                    &now.as_millis(),
                    &principal.map(|p| p.subject.as_str()),
                    &principal.map(|p| p.issuer.as_str()),
                    &text,
                ],
            )
            .await
        } else {
            tx.execute(
                "UPDATE held_calls SET approvals_json = $2, updated_at = $3 \
                 WHERE interaction_id = $1 AND state = 'pending'",
                &[&id, &text, &now.as_millis()],
            )
            .await
        }
        .map_err(err)?;
        if changed != 1 {
            return Err(AnswerError::Store(state::changed_while(id, "approved")));
        }
        Ok(())
    }

    /// Records a denial in the row `tx` holds.
    async fn record_denied(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        id: &str,
        answer: &Answer,
        now: Timestamp,
        receipt: &AnswerReceipt,
    ) -> Result<(), AnswerError> {
        let err = |e: tokio_postgres::Error| AnswerError::Store(self.err(&e));
        let changed = tx
            .execute(
                "UPDATE held_calls SET state = 'denied', approver = $2, answer_key = $3, \
                 answer_approve = FALSE, answer_reason = $4, answered_at = $5, \
                 updated_at = $5, approver_subject = $6, approver_issuer = $7 \
                 WHERE interaction_id = $1 AND state = 'pending'",
                &[
                    &id,
                    &answer.approver,
                    &answer.idempotency_key,
                    &receipt.reason,
                    &now.as_millis(),
                    &answer.principal.as_ref().map(|p| p.subject.as_str()),
                    &answer.principal.as_ref().map(|p| p.issuer.as_str()),
                ],
            )
            .await
            .map_err(err)?;
        if changed != 1 {
            return Err(AnswerError::Store(state::changed_while(id, "denied")));
        }
        Ok(())
    }

    /// Acts on [`state::pending_lost`]: `Ok(())` when the call is still pending and not yet
    /// due (the caller tries again), otherwise the error to answer with (a call past its
    /// expiry is marked `expired` first).
    pub(super) async fn lost_pending(
        &self,
        client: &Object,
        id: &str,
        st: State,
        expires_at: i64,
        now: Timestamp,
    ) -> Result<(), AnswerError> {
        match state::pending_lost(id, st, Timestamp::from_millis(expires_at), now) {
            PendingLost::StillPending => Ok(()),
            PendingLost::Expire(e) => {
                self.expire_one(client, id, now).await?;
                Err(e)
            }
            PendingLost::Refuse(e) => Err(e),
        }
    }

    pub(super) async fn cancel_op(&self, id: &str) -> Result<(), AnswerError> {
        let client = self.client().await?;
        for _ in 0..ATTEMPTS {
            let now = Timestamp::now();
            let cancelled = self
                .query_opt(
                    &client,
                    "UPDATE held_calls SET state = 'cancelled', updated_at = $2 \
                     WHERE interaction_id = $1 AND state = 'pending' AND expires_at > $2 \
                     RETURNING interaction_id",
                    &[&id, &now.as_millis()],
                )
                .await?;
            if cancelled.is_some() {
                return Ok(());
            }
            let Some(row) = self
                .query_opt(
                    &client,
                    "SELECT state, expires_at FROM held_calls WHERE interaction_id = $1",
                    &[&id],
                )
                .await?
            else {
                return Err(AnswerError::UnknownId(id.to_owned()));
            };
            let read = |e: tokio_postgres::Error| AnswerError::Store(self.err(&e));
            let state: String = row.try_get(0).map_err(read)?;
            let expires_at: i64 = row.try_get(1).map_err(read)?;
            let state = self.parse_state(id, &state)?;
            self.lost_pending(&client, id, state, expires_at, now)
                .await?;
        }
        Err(AnswerError::Store(state::changed_while(id, "cancelled")))
    }
}
