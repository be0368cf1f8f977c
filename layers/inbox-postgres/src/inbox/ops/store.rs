//! [`InboxStore`] for [`PostgresInbox`], and a held call's row read back.

use super::*;
use toolgate_inbox::{HeldCalls, Nonces, OpenQuestions, StoredGrants, StoredPolicies};

/// The answering person's verified principal, when both halves are stored (R47).
pub(crate) fn principal(
    subject: Option<String>,
    issuer: Option<String>,
) -> Option<toolgate_core::Principal> {
    match (subject, issuer) {
        (Some(subject), Some(issuer)) => Some(toolgate_core::Principal { subject, issuer }),
        _ => None,
    }
}

/// Why a held call's row cannot be read back ([`read_row`]).
#[derive(Debug, thiserror::Error)]
pub(crate) enum RowError {
    /// A column that does not read as its type.
    #[error("{}", error::describe(.0))]
    Column(tokio_postgres::Error),
    /// A stored value that does not read back.
    #[error(transparent)]
    Record(#[from] toolgate_inbox::RecordError),
}

/// Reads one row selected with [`COLUMNS`].
pub(crate) fn read_row(row: &Row) -> Result<HeldRecord, RowError> {
    fn col<'a, T: tokio_postgres::types::FromSql<'a>>(
        row: &'a Row,
        i: usize,
    ) -> Result<T, RowError> {
        row.try_get(i).map_err(RowError::Column)
    }
    let ts = |i: usize| -> Result<Option<Timestamp>, RowError> {
        Ok(col::<Option<i64>>(row, i)?.map(Timestamp::from_millis))
    };
    let state: String = col(row, 15)?;
    let state = State::parse(&state).ok_or(toolgate_inbox::RecordError::State { state })?;
    let result = match col::<Option<String>>(row, 22)? {
        Some(t) => Some(codec::parse_json(&t)?),
        None => None,
    };
    Ok(HeldRecord {
        call: NewHeldCall {
            interaction_id: col(row, 0)?,
            call_id: col(row, 1)?,
            tool: col(row, 2)?,
            identities: codec::identities_from_json(&col::<String>(row, 3)?)?,
            definition_hash: col(row, 4)?,
            agent: AgentRef {
                profile: col(row, 5)?,
                subagent: col(row, 6)?,
            },
            input_json: col(row, 7)?,
            input_canonical: col(row, 8)?,
            input_hash: col(row, 9)?,
            reasons: codec::reasons_from_json(&col::<String>(row, 10)?)?,
            run: RunContext {
                mode: codec::run_mode_from(&col::<String>(row, 11)?)?,
                background: col(row, 12)?,
            },
            turn: match (
                col::<Option<String>>(row, 25)?,
                col::<Option<String>>(row, 26)?,
            ) {
                (Some(session), Some(turn)) => Some(Turn { session, turn }),
                _ => None,
            },
            created_at: Timestamp::from_millis(col(row, 13)?),
            expires_at: Timestamp::from_millis(col(row, 14)?),
            target: col::<Option<String>>(row, 29)?
                .as_deref()
                .and_then(codec::target_from_json),
            approvals: codec::approvals_needed_from(i64::from(col::<i32>(row, 30)?))?,
            labels: col::<Option<String>>(row, 32)?
                .as_deref()
                .and_then(codec::labels_from_json),
        },
        state,
        approver: col(row, 16)?,
        approver_principal: principal(col(row, 27)?, col(row, 28)?),
        approvals: GivenApproval::list_from_text(col::<Option<String>>(row, 31)?.as_deref())?,
        answer_key: col(row, 17)?,
        answer_reason: col(row, 18)?,
        answered_at: ts(19)?,
        claimed_by: col(row, 20)?,
        claimed_at: ts(21)?,
        result,
        finished_at: ts(23)?,
        updated_at: Timestamp::from_millis(col(row, 24)?),
        edited_from: col(row, 33)?,
    })
}

impl HeldCalls for PostgresInbox {
    fn hold(&self, call: NewHeldCall) -> BoxFuture<'_, Result<(), InboxError>> {
        Box::pin(self.hold_op(call))
    }

    fn hold_unless_repeated(
        &self,
        call: NewHeldCall,
    ) -> BoxFuture<'_, Result<Holding, InboxError>> {
        Box::pin(self.hold_unless_repeated_op(call))
    }

    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<HeldRecord>, InboxError>> {
        Box::pin(self.get_op(id))
    }

    fn list(&self, state: Option<State>) -> BoxFuture<'_, Result<Vec<HeldRecord>, InboxError>> {
        Box::pin(self.list_op(state))
    }

    fn query_held<'a>(
        &'a self,
        q: &'a toolgate_inbox::HeldQuery,
    ) -> BoxFuture<'a, Result<toolgate_inbox::HeldPage, InboxError>> {
        Box::pin(self.query_held_op(q))
    }

    fn count_held<'a>(
        &'a self,
        q: &'a toolgate_inbox::HeldQuery,
    ) -> BoxFuture<'a, Result<u64, InboxError>> {
        Box::pin(self.count_held_op(q))
    }

    fn changed_since(
        &self,
        since: Timestamp,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<HeldRecord>, InboxError>> {
        Box::pin(self.changed_since_op(since, limit))
    }

    fn session_calls<'a>(
        &'a self,
        session: &'a str,
        turn: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<HeldRecord>, InboxError>> {
        Box::pin(self.session_calls_op(session, turn))
    }

    fn find_open<'a>(
        &'a self,
        agent: &'a AgentRef,
        tool: &'a str,
        input_hash: &'a str,
    ) -> BoxFuture<'a, Result<Option<HeldRecord>, InboxError>> {
        Box::pin(self.find_open_op(agent, tool, input_hash))
    }

    fn find_open_all<'a>(
        &'a self,
        agent: &'a AgentRef,
        tool: &'a str,
        input_hash: &'a str,
    ) -> BoxFuture<'a, Result<Vec<HeldRecord>, InboxError>> {
        Box::pin(self.find_open_all_op(agent, tool, input_hash))
    }

    fn cancel_turn<'a>(
        &'a self,
        session: &'a str,
        turn: &'a str,
    ) -> BoxFuture<'a, Result<Vec<String>, InboxError>> {
        Box::pin(self.cancel_turn_op(session, turn))
    }

    fn answer<'a>(
        &'a self,
        id: &'a str,
        answer: Answer,
    ) -> BoxFuture<'a, Result<AnswerReceipt, AnswerError>> {
        Box::pin(self.answer_op(id, answer))
    }

    fn answer_edited<'a>(
        &'a self,
        id: &'a str,
        answer: Answer,
        edit: toolgate_inbox::EditedInput,
    ) -> BoxFuture<'a, Result<AnswerReceipt, AnswerError>> {
        Box::pin(self.answer_edited_op(id, answer, edit))
    }

    fn edit_of<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<toolgate_inbox::StoredEdit>, InboxError>> {
        Box::pin(self.edit_of_op(id))
    }

    fn cancel<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), AnswerError>> {
        Box::pin(self.cancel_op(id))
    }

    fn expire_due(&self, now: Timestamp) -> BoxFuture<'_, Result<Vec<String>, InboxError>> {
        Box::pin(async move {
            self.move_all(
                "UPDATE held_calls SET state = 'expired', updated_at = $1 \
                 WHERE state = 'pending' AND expires_at <= $1 \
                 RETURNING interaction_id, created_at",
                &[&now.as_millis()],
            )
            .await
        })
    }

    fn claim<'a>(
        &'a self,
        id: &'a str,
        claim: Claim,
    ) -> BoxFuture<'a, Result<Claimed, ClaimError>> {
        Box::pin(self.claim_op(id, claim))
    }

    fn complete<'a>(
        &'a self,
        id: &'a str,
        completion: Completion,
    ) -> BoxFuture<'a, Result<State, CompleteError>> {
        Box::pin(self.complete_op(id, completion))
    }

    fn recover(&self) -> BoxFuture<'_, Result<Vec<String>, InboxError>> {
        Box::pin(async move {
            // INVARIANT: only this instance's claims; another live instance's claims are its
            // own to record (or to recover when it restarts).
            self.move_all(
                "UPDATE held_calls SET state = 'unknown', updated_at = $2 \
                 WHERE state = 'claimed' AND claimed_by = $1 \
                 RETURNING interaction_id, created_at",
                &[&self.inner.options.instance, &Timestamp::now().as_millis()],
            )
            .await
        })
    }

    fn recover_instance<'a>(
        &'a self,
        instance: &'a str,
    ) -> BoxFuture<'a, Result<Vec<String>, InboxError>> {
        Box::pin(async move {
            self.move_all(
                "UPDATE held_calls SET state = 'unknown', updated_at = $2 \
                 WHERE state = 'claimed' AND claimed_by = $1 \
                 RETURNING interaction_id, created_at",
                &[&instance, &Timestamp::now().as_millis()],
            )
            .await
        })
    }
}

impl OpenQuestions for PostgresInbox {
    fn open_question<'a>(
        &'a self,
        question: OpenQuestion,
        at_most: u32,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, InboxError>> {
        Box::pin(async move { self.open_question_op(&question, at_most, now).await })
    }

    fn take_question<'a>(
        &'a self,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<OpenQuestion>, InboxError>> {
        Box::pin(self.take_question_op(key))
    }
}

impl Nonces for PostgresInbox {
    fn take_nonce<'a>(
        &'a self,
        nonce: &'a str,
        until: Timestamp,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, InboxError>> {
        Box::pin(self.take_nonce_op(nonce, until, now))
    }
}

impl StoredPolicies for PostgresInbox {
    fn get_policy(&self) -> BoxFuture<'_, Result<Option<StoredPolicy>, InboxError>> {
        Box::pin(self.get_policy_op())
    }

    fn put_policy<'a>(
        &'a self,
        policy: &'a Policy,
    ) -> BoxFuture<'a, Result<StoredPolicy, InboxError>> {
        let body = codec::policy_body(policy);
        Box::pin(async move {
            // Without an expected `updatedAt` there is nothing to conflict with.
            self.put_policy_op(body, None).await.map_err(|e| match e {
                PolicySaveError::Store(e) => e,
                other => InboxError::new(Kind::Backend, other.to_string()),
            })
        })
    }

    fn put_policy_if_unchanged<'a>(
        &'a self,
        expected_updated_at: Option<&'a str>,
        policy: &'a Policy,
    ) -> BoxFuture<'a, Result<StoredPolicy, PolicySaveError>> {
        let body = codec::policy_body(policy);
        let expected = expected_updated_at.map(str::to_owned);
        Box::pin(self.put_policy_op(body, Some(expected)))
    }

    fn get_shadow_policy(&self) -> BoxFuture<'_, Result<Option<StoredPolicy>, InboxError>> {
        Box::pin(self.get_shadow_op())
    }

    fn put_shadow_policy<'a>(
        &'a self,
        policy: &'a Policy,
    ) -> BoxFuture<'a, Result<StoredPolicy, InboxError>> {
        let body = codec::policy_body(policy);
        Box::pin(self.put_shadow_op(body))
    }

    fn clear_shadow_policy(&self) -> BoxFuture<'_, Result<bool, InboxError>> {
        Box::pin(self.clear_shadow_op())
    }
}

impl StoredGrants for PostgresInbox {
    fn add_grant_as<'a>(
        &'a self,
        grant: &'a Grant,
        principal: Option<&'a toolgate_core::Principal>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<StoredGrant, InboxError>> {
        Box::pin(self.add_grant_op(grant, principal, now))
    }

    fn grants(&self) -> BoxFuture<'_, Result<Vec<StoredGrant>, InboxError>> {
        Box::pin(self.grants_op())
    }

    fn live_grants(&self, now: Timestamp) -> BoxFuture<'_, Result<Vec<StoredGrant>, InboxError>> {
        Box::pin(self.live_grants_op(now))
    }

    fn use_grant<'a>(
        &'a self,
        id: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, InboxError>> {
        Box::pin(self.use_grant_op(id, now))
    }

    fn revoke_grant<'a>(
        &'a self,
        id: &'a str,
        by: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<StoredGrant, RevokeError>> {
        Box::pin(self.revoke_grant_op(id, by, now))
    }

    fn grant_store(&self) -> Result<std::sync::Arc<dyn GrantStore>, InboxError> {
        self.grant_store_op()
    }
}

/// A held call's values for `INSERT_HELD`, in its parameter order: one list for `hold` and
/// `hold_unless_repeated`.
pub(crate) struct HeldRow<'a> {
    pub(crate) c: &'a NewHeldCall,
    pub(crate) identities: String,
    pub(crate) reasons: String,
    pub(crate) mode: &'static str,
    pub(crate) created_at: i64,
    pub(crate) expires_at: i64,
    pub(crate) session: Option<&'a str>,
    pub(crate) turn: Option<&'a str>,
    pub(crate) target: Option<String>,
    pub(crate) approvals: i32,
    pub(crate) labels: Option<String>,
}

impl<'a> HeldRow<'a> {
    pub(crate) fn of(c: &'a NewHeldCall) -> Self {
        Self {
            c,
            identities: codec::identities_json(&c.identities),
            reasons: codec::reasons_json(&c.reasons),
            mode: c.run.mode.as_str(),
            created_at: c.created_at.as_millis(),
            expires_at: c.expires_at.as_millis(),
            session: c.turn.as_ref().map(|t| t.session.as_str()),
            turn: c.turn.as_ref().map(|t| t.turn.as_str()),
            target: codec::target_json(c.target.as_ref()),
            approvals: i32::from(c.approvals.max(1)),
            labels: c.labels.as_ref().map(codec::labels_json),
        }
    }

    pub(crate) fn params(&self) -> [&(dyn ToSql + Sync); 20] {
        let c = self.c;
        [
            &c.interaction_id,
            &c.call_id,
            &c.tool,
            &self.identities,
            &c.definition_hash,
            &c.agent.profile,
            &c.agent.subagent,
            &c.input_json,
            &c.input_canonical,
            &c.input_hash,
            &self.reasons,
            &self.mode,
            &c.run.background,
            &self.created_at,
            &self.expires_at,
            &self.session,
            &self.turn,
            &self.target,
            &self.approvals,
            &self.labels,
        ]
    }
}
