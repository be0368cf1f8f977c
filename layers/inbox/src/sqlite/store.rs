//! [`InboxStore`] for [`SqliteInbox`]: each operation run on the connection (inline, or on
//! Tokio's blocking pool) with the SQL of `ops`.

use super::*;
use crate::{HeldCalls, Nonces, OpenQuestions, StoredGrants, StoredPolicies};

impl HeldCalls for SqliteInbox {
    fn hold(&self, call: NewHeldCall) -> BoxFuture<'_, Result<(), InboxError>> {
        self.run(move |inner, conn| hold_op(inner, conn, &call))
    }

    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<HeldRecord>, InboxError>> {
        let id = id.to_owned();
        self.run(move |inner, conn| get_op(inner, conn, &id))
    }

    fn list(&self, state: Option<State>) -> BoxFuture<'_, Result<Vec<HeldRecord>, InboxError>> {
        self.run(move |inner, conn| list_op(inner, conn, state))
    }

    fn query_held<'a>(
        &'a self,
        q: &'a crate::HeldQuery,
    ) -> BoxFuture<'a, Result<crate::HeldPage, InboxError>> {
        let q = q.clone();
        self.run(move |inner, conn| query::query_op(inner, conn, &q))
    }

    fn count_held<'a>(&'a self, q: &'a crate::HeldQuery) -> BoxFuture<'a, Result<u64, InboxError>> {
        let q = q.clone();
        self.run(move |inner, conn| query::count_op(inner, conn, &q))
    }

    fn changed_since(
        &self,
        since: Timestamp,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<HeldRecord>, InboxError>> {
        self.run(move |inner, conn| query::changed_since_op(inner, conn, since, limit))
    }

    fn session_calls<'a>(
        &'a self,
        session: &'a str,
        turn: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<HeldRecord>, InboxError>> {
        let session = session.to_owned();
        let turn = turn.map(str::to_owned);
        self.run(move |inner, conn| session_calls_op(inner, conn, &session, turn.as_deref()))
    }

    fn hold_unless_repeated(
        &self,
        call: NewHeldCall,
    ) -> BoxFuture<'_, Result<Holding, InboxError>> {
        self.run(move |inner, conn| hold_unless_repeated_op(inner, conn, &call, Timestamp::now()))
    }

    fn find_open<'a>(
        &'a self,
        agent: &'a AgentRef,
        tool: &'a str,
        input_hash: &'a str,
    ) -> BoxFuture<'a, Result<Option<HeldRecord>, InboxError>> {
        let agent = agent.clone();
        let tool = tool.to_owned();
        let input_hash = input_hash.to_owned();
        self.run(move |inner, conn| find_open_op(inner, conn, &agent, &tool, &input_hash))
    }

    fn find_open_all<'a>(
        &'a self,
        agent: &'a AgentRef,
        tool: &'a str,
        input_hash: &'a str,
    ) -> BoxFuture<'a, Result<Vec<HeldRecord>, InboxError>> {
        let agent = agent.clone();
        let tool = tool.to_owned();
        let input_hash = input_hash.to_owned();
        self.run(move |inner, conn| find_open_all_op(inner, conn, &agent, &tool, &input_hash))
    }

    fn cancel_turn<'a>(
        &'a self,
        session: &'a str,
        turn: &'a str,
    ) -> BoxFuture<'a, Result<Vec<String>, InboxError>> {
        let session = session.to_owned();
        let turn = turn.to_owned();
        self.run(move |inner, conn| cancel_turn_op(inner, conn, &session, &turn, Timestamp::now()))
    }

    fn answer<'a>(
        &'a self,
        id: &'a str,
        answer: Answer,
    ) -> BoxFuture<'a, Result<AnswerReceipt, AnswerError>> {
        let id = id.to_owned();
        self.run(move |inner, conn| answer_op(inner, conn, &id, &answer, Timestamp::now()))
    }

    fn answer_edited<'a>(
        &'a self,
        id: &'a str,
        answer: Answer,
        edit: crate::edit::EditedInput,
    ) -> BoxFuture<'a, Result<AnswerReceipt, AnswerError>> {
        let id = id.to_owned();
        self.run(move |inner, conn| {
            edit::answer_edited_op(inner, conn, &id, &answer, &edit, Timestamp::now())
        })
    }

    fn edit_of<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<crate::edit::StoredEdit>, InboxError>> {
        let id = id.to_owned();
        self.run(move |inner, conn| edit::edit_of_op(inner, conn, &id))
    }

    fn cancel<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), AnswerError>> {
        let id = id.to_owned();
        self.run(move |inner, conn| cancel_op(inner, conn, &id, Timestamp::now()))
    }

    fn expire_due(&self, now: Timestamp) -> BoxFuture<'_, Result<Vec<String>, InboxError>> {
        self.run(move |inner, conn| {
            move_all(
                inner,
                conn,
                "state = 'pending' AND expires_at <= ?1",
                &now.as_millis(),
                State::Expired,
                now,
            )
        })
    }

    fn claim<'a>(
        &'a self,
        id: &'a str,
        claim: Claim,
    ) -> BoxFuture<'a, Result<Claimed, ClaimError>> {
        let id = id.to_owned();
        self.run(move |inner, conn| claim_op(inner, conn, &id, &claim, Timestamp::now()))
    }

    fn complete<'a>(
        &'a self,
        id: &'a str,
        completion: Completion,
    ) -> BoxFuture<'a, Result<State, CompleteError>> {
        let id = id.to_owned();
        self.run(move |inner, conn| complete_op(inner, conn, &id, &completion, Timestamp::now()))
    }

    fn recover(&self) -> BoxFuture<'_, Result<Vec<String>, InboxError>> {
        self.run(move |inner, conn| {
            let instance = inner.options.instance.clone();
            move_all(
                inner,
                conn,
                "state = 'claimed' AND claimed_by = ?1",
                &instance,
                State::Unknown,
                Timestamp::now(),
            )
        })
    }

    fn recover_instance<'a>(
        &'a self,
        instance: &'a str,
    ) -> BoxFuture<'a, Result<Vec<String>, InboxError>> {
        let instance = instance.to_owned();
        self.run(move |inner, conn| {
            move_all(
                inner,
                conn,
                "state = 'claimed' AND claimed_by = ?1",
                &instance,
                State::Unknown,
                Timestamp::now(),
            )
        })
    }
}

impl OpenQuestions for SqliteInbox {
    fn open_question<'a>(
        &'a self,
        question: crate::question::OpenQuestion,
        at_most: u32,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, InboxError>> {
        self.run(move |inner, conn| question::open_op(inner, conn, &question, at_most, now))
    }

    fn take_question<'a>(
        &'a self,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<crate::question::OpenQuestion>, InboxError>> {
        let key = key.to_owned();
        self.run(move |inner, conn| question::take_op(inner, conn, &key))
    }
}

impl Nonces for SqliteInbox {
    fn take_nonce<'a>(
        &'a self,
        nonce: &'a str,
        until: Timestamp,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, InboxError>> {
        let nonce = nonce.to_owned();
        self.run(move |inner, conn| nonce::take_op(inner, conn, &nonce, until, now))
    }
}

impl StoredPolicies for SqliteInbox {
    fn get_policy(&self) -> BoxFuture<'_, Result<Option<StoredPolicy>, InboxError>> {
        self.run(move |inner, conn| {
            read_policy_row(
                conn,
                "SELECT body, updated_at FROM stored_policy WHERE id = 1",
            )
            .map_err(|e| inner.err(e))
        })
    }

    fn put_policy<'a>(
        &'a self,
        policy: &'a Policy,
    ) -> BoxFuture<'a, Result<StoredPolicy, InboxError>> {
        let body = codec::policy_body(policy);
        self.run(move |inner, conn| {
            // Without an expected `updatedAt` there is nothing to conflict with.
            put_policy_op(inner, conn, &body, None).map_err(|e| match e {
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
        self.run(move |inner, conn| put_policy_op(inner, conn, &body, Some(expected.as_deref())))
    }

    fn get_shadow_policy(&self) -> BoxFuture<'_, Result<Option<StoredPolicy>, InboxError>> {
        self.run(move |inner, conn| {
            read_policy_row(
                conn,
                "SELECT body, updated_at FROM stored_shadow_policy WHERE id = 1",
            )
            .map_err(|e| inner.err(e))
        })
    }

    fn put_shadow_policy<'a>(
        &'a self,
        policy: &'a Policy,
    ) -> BoxFuture<'a, Result<StoredPolicy, InboxError>> {
        let body = codec::policy_body(policy);
        self.run(move |inner, conn| put_shadow_op(inner, conn, &body))
    }

    fn clear_shadow_policy(&self) -> BoxFuture<'_, Result<bool, InboxError>> {
        self.run(move |inner, conn| {
            conn.execute("DELETE FROM stored_shadow_policy WHERE id = 1", [])
                .map(|n| n > 0)
                .map_err(|e| inner.err(e))
        })
    }
}

impl StoredGrants for SqliteInbox {
    fn add_grant_as<'a>(
        &'a self,
        grant: &'a Grant,
        principal: Option<&'a toolgate_core::Principal>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<StoredGrant, InboxError>> {
        let grant = grant.clone();
        let principal = principal.cloned();
        self.run(move |inner, conn| {
            let inserted = conn
                .prepare_cached(
                    "INSERT INTO grants (id, body, expires_at, max_calls, created_at, \
                     giver_subject, giver_issuer) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )
                .and_then(|mut s| {
                    s.execute(params![
                        grant.id(),
                        grant.source_text(),
                        grants::expires_at(&grant).as_millis(),
                        grant
                            .max_calls()
                            .map(|m| i64::try_from(m).unwrap_or(i64::MAX)),
                        now.as_millis(),
                        principal.as_ref().map(|p| p.subject.as_str()),
                        principal.as_ref().map(|p| p.issuer.as_str()),
                    ])
                });
            match inserted {
                Ok(_) => Ok(StoredGrant {
                    grant: grant.clone(),
                    created_at: now,
                    uses: 0,
                    last_used_at: None,
                    revoked: None,
                    principal: principal.clone(),
                }),
                Err(e) if e.sqlite_error_code() == Some(ErrorCode::ConstraintViolation) => {
                    Err(InboxError::new(
                        Kind::Duplicate,
                        format!("a grant with the id `{}` exists already", grant.id()),
                    ))
                }
                Err(e) => Err(inner.err(e)),
            }
        })
    }

    fn grants(&self) -> BoxFuture<'_, Result<Vec<StoredGrant>, InboxError>> {
        self.run(move |inner, conn| {
            read_grants(
                inner,
                conn,
                &format!("SELECT {GRANT_COLUMNS} FROM grants ORDER BY seq"),
                &[],
            )
        })
    }

    fn live_grants(&self, now: Timestamp) -> BoxFuture<'_, Result<Vec<StoredGrant>, InboxError>> {
        self.run(move |inner, conn| {
            read_grants(
                inner,
                conn,
                &format!("SELECT {GRANT_COLUMNS} FROM grants WHERE {GRANT_LIVE} ORDER BY seq"),
                &[&now.as_millis()],
            )
        })
    }

    fn use_grant<'a>(
        &'a self,
        id: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, InboxError>> {
        let id = id.to_owned();
        self.run(move |inner, conn| {
            // One statement: the check that it is live and the count, atomically (SQLite's
            // one writer), so racing uses never pass `max_calls`.
            conn.prepare_cached(&format!(
                "UPDATE grants SET uses = uses + 1, last_used_at = ?1 WHERE id = ?2 AND {GRANT_LIVE}"
            ))
            .and_then(|mut s| s.execute(params![now.as_millis(), id]))
            .map(|n| n == 1)
            .map_err(|e| inner.err(e))
        })
    }

    fn grant_store(&self) -> Result<Arc<dyn toolgate_engine::grant::GrantStore>, InboxError> {
        Ok(Arc::new(crate::grant_store::InboxGrants::start(Arc::new(
            self.clone(),
        ))?))
    }

    fn revoke_grant<'a>(
        &'a self,
        id: &'a str,
        by: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<StoredGrant, RevokeError>> {
        let (id, by) = (id.to_owned(), by.to_owned());
        self.run(move |inner, conn| {
            let changed = conn
                .prepare_cached(&format!(
                    "UPDATE grants SET revoked_by = ?2, revoked_at = ?1 WHERE id = ?3 AND {GRANT_LIVE}"
                ))
                .and_then(|mut s| s.execute(params![now.as_millis(), by, id]))
                .map_err(|e| inner.err(e))?;
            let found = read_grants(
                inner,
                conn,
                &format!("SELECT {GRANT_COLUMNS} FROM grants WHERE id = ?1"),
                &[&id],
            )?
            .pop();
            match found {
                None => Err(RevokeError::UnknownId(id.clone())),
                Some(g) if changed == 1 => Ok(g),
                Some(g) => Err(RevokeError::Ended {
                    id: id.clone(),
                    state: g.state(now),
                }),
            }
        })
    }
}
