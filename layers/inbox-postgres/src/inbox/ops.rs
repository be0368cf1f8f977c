//! The store's operations: each state change one conditional `UPDATE … RETURNING`, and why
//! one changed nothing read back and explained by `toolgate_inbox::state`.
//!
//! One thing because each operation is one SQL statement with its row mapping, and the
//! `InboxStore` implementation only forwards to them; the state rules they explain are in
//! `toolgate_inbox::state`, not here.

use std::fmt;
use std::time::SystemTime;

use deadpool_postgres::Object;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;
use toolgate_core::{AgentRef, RunContext, Turn};
use toolgate_engine::grant::{Grant, GrantStore};
use toolgate_engine::policy::Policy;
use toolgate_inbox::{
    Answer, AnswerError, AnswerReceipt, BoxFuture, Claim, ClaimError, Claimed, CompleteError,
    Completion, GivenApproval, HeldRecord, Holding, InboxError, InboxErrorKind as Kind, InboxStore,
    NewHeldCall, OpenQuestion, PolicySaveError, State, StoredPolicy, Timestamp, codec,
    state::{self, PendingLost, Repeat},
};
use toolgate_inbox::{RevokeError, StoredGrant};

use super::PostgresInbox;
use crate::error;

mod edit;
mod nonce;
mod question;
mod store;

pub(crate) use store::read_row;
use store::{HeldRow, principal};

pub(super) const COLUMNS: &str = "interaction_id, call_id, tool, identities, definition_hash, agent_profile, \
    agent_subagent, input_json, input_canonical, input_hash, reasons, run_mode, run_background, \
    created_at, expires_at, state, approver, answer_key, answer_reason, answered_at, claimed_by, \
    claimed_at, result_json, finished_at, updated_at, session_id, turn_id, approver_subject, \
    approver_issuer, target_json, approvals_needed, approvals_json, labels_json, \
    (SELECT original_input_json FROM held_edits WHERE held_edits.interaction_id = held_calls.interaction_id)";

/// The held calls a call with input hash `$3` repeats (R26), selecting `select` where `filter`
/// holds, in `order`: those held with that input, and those a person approved with an edited
/// input in place of an input with that hash (the agent repeats what it sent, not what the
/// person sent in its place). Two branches, not one `OR`, so that the planner reads each by
/// its index (`held_calls_open` or `held_calls_by_input`, and `held_edits_original`).
fn by_input(select: &str, filter: &str, order: &str) -> String {
    format!(
        "SELECT * FROM (SELECT {select} FROM held_calls WHERE {filter} AND input_hash = $3 \
         UNION ALL SELECT {select} FROM held_calls WHERE {filter} AND input_hash <> $3 \
         AND interaction_id IN (SELECT interaction_id FROM held_edits \
         WHERE original_input_hash = $3)) AS held_calls ORDER BY {order}"
    )
}

/// A new held call, `pending` (`$1` … `$20`).
const INSERT_HELD: &str = "INSERT INTO held_calls (interaction_id, call_id, tool, identities, \
    definition_hash, agent_profile, agent_subagent, input_json, input_canonical, input_hash, \
    reasons, run_mode, run_background, created_at, expires_at, state, updated_at, session_id, \
    turn_id, target_json, approvals_needed, labels_json) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, \
    $9, $10, $11, $12, $13, $14, $15, 'pending', $14, $16, $17, $18, $19, $20)";

/// The advisory lock every [`InboxStore::hold_unless_repeated`] of call `c` takes: the first
/// 63 bits of the SHA-256 of its agent, tool (ASCII lower-case) and input hash.
fn repeat_lock_key(c: &NewHeldCall) -> i64 {
    let text = format!(
        "repeat\0{}\0{}\0{}\0{}",
        c.agent.profile,
        c.agent.subagent.as_deref().unwrap_or("\u{1}"),
        c.tool.to_ascii_lowercase(),
        c.input_hash
    );
    let hex = toolgate_engine::canon::sha256_hex(text.as_bytes());
    let digits = hex.rsplit(':').next().unwrap_or(&hex);
    let prefix = digits.get(..16).unwrap_or(digits);
    (u64::from_str_radix(prefix, 16).unwrap_or(0) >> 1) as i64
}

/// How many times an operation that found its row in an impossible in-between state (a call
/// held between the conditional update and the read that explains its failure) tries again.
const ATTEMPTS: usize = 3;

impl PostgresInbox {
    // ----- plumbing -----

    pub(super) fn err(&self, e: &tokio_postgres::Error) -> InboxError {
        error::db(&self.inner.server, e)
    }

    pub(super) fn record_err(&self, id: &str, why: impl fmt::Display) -> InboxError {
        InboxError::new(
            Kind::Record,
            format!(
                "held call `{id}` in `{}` cannot be read: {why}",
                self.inner.server
            ),
        )
    }

    pub(super) async fn client(&self) -> Result<Object, InboxError> {
        self.inner
            .pool
            .get()
            .await
            .map_err(|e| error::pool(&self.inner.server, self.inner.options.wait_timeout, &e))
    }

    async fn query_opt(
        &self,
        client: &Object,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, InboxError> {
        let stmt = client.prepare_cached(sql).await.map_err(|e| self.err(&e))?;
        client
            .query_opt(&stmt, params)
            .await
            .map_err(|e| self.err(&e))
    }

    pub(super) async fn query(
        &self,
        client: &Object,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, InboxError> {
        let stmt = client.prepare_cached(sql).await.map_err(|e| self.err(&e))?;
        client.query(&stmt, params).await.map_err(|e| self.err(&e))
    }

    async fn state_of(&self, client: &Object, id: &str) -> Result<Option<State>, InboxError> {
        let row = self
            .query_opt(
                client,
                "SELECT state FROM held_calls WHERE interaction_id = $1",
                &[&id],
            )
            .await?;
        match row {
            None => Ok(None),
            Some(row) => {
                let s: String = row.try_get(0).map_err(|e| self.err(&e))?;
                State::parse(&s)
                    .map(Some)
                    .ok_or_else(|| self.record_err(id, format!("unknown state `{s}`")))
            }
        }
    }

    fn parse_state(&self, id: &str, s: &str) -> Result<State, InboxError> {
        State::parse(s).ok_or_else(|| self.record_err(id, format!("unknown state `{s}`")))
    }

    /// Marks `id` expired if it is still pending and due at `now`.
    async fn expire_one(
        &self,
        client: &Object,
        id: &str,
        now: Timestamp,
    ) -> Result<(), InboxError> {
        self.query_opt(
            client,
            "UPDATE held_calls SET state = 'expired', updated_at = $2 \
             WHERE interaction_id = $1 AND state = 'pending' AND expires_at <= $2 \
             RETURNING interaction_id",
            &[&id, &now.as_millis()],
        )
        .await
        .map(|_| ())
    }

    /// Moves every row the conditional `update` (returning `interaction_id, created_at`)
    /// changed, oldest first.
    async fn move_all(
        &self,
        update: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<String>, InboxError> {
        let client = self.client().await?;
        let rows = self.query(&client, update, params).await?;
        let mut moved = Vec::with_capacity(rows.len());
        for row in rows {
            let id: String = row.try_get(0).map_err(|e| self.err(&e))?;
            let created: i64 = row.try_get(1).map_err(|e| self.err(&e))?;
            moved.push((created, id));
        }
        moved.sort();
        Ok(moved.into_iter().map(|(_, id)| id).collect())
    }

    // ----- operations -----

    async fn hold_op(&self, c: NewHeldCall) -> Result<(), InboxError> {
        let client = self.client().await?;
        let row = HeldRow::of(&c);
        let inserted = self
            .query_opt(
                &client,
                &format!("{INSERT_HELD} RETURNING interaction_id"),
                &row.params(),
            )
            .await;
        match inserted {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == Kind::Duplicate => Err(InboxError::new(
                Kind::Duplicate,
                format!("a held call `{}` already exists", c.interaction_id),
            )),
            Err(e) => Err(e),
        }
    }

    async fn get_op(&self, id: &str) -> Result<Option<HeldRecord>, InboxError> {
        let client = self.client().await?;
        let row = self
            .query_opt(
                &client,
                &format!("SELECT {COLUMNS} FROM held_calls WHERE interaction_id = $1"),
                &[&id],
            )
            .await?;
        match row {
            None => Ok(None),
            Some(row) => read_row(&row)
                .map(Some)
                .map_err(|why| self.record_err(id, why)),
        }
    }

    async fn list_op(&self, state: Option<State>) -> Result<Vec<HeldRecord>, InboxError> {
        let client = self.client().await?;
        let rows = match state {
            Some(s) => {
                self.query(
                    &client,
                    &format!(
                        "SELECT {COLUMNS} FROM held_calls WHERE state = $1 \
                         ORDER BY created_at, interaction_id"
                    ),
                    &[&s.as_str()],
                )
                .await?
            }
            None => {
                self.query(
                    &client,
                    &format!(
                        "SELECT {COLUMNS} FROM held_calls ORDER BY created_at, interaction_id"
                    ),
                    &[],
                )
                .await?
            }
        };
        rows.iter()
            .map(|row| {
                read_row(row).map_err(|why| {
                    let id: String = row.try_get(0).unwrap_or_else(|_| String::from("?"));
                    self.record_err(&id, why)
                })
            })
            .collect()
    }

    /// [`InboxStore::find_open`]: the first of [`find_open_all_op`](Self::find_open_all_op)'s
    /// candidates (an approved one first, then the newest), one statement for both.
    async fn find_open_op(
        &self,
        agent: &AgentRef,
        tool: &str,
        input_hash: &str,
    ) -> Result<Option<HeldRecord>, InboxError> {
        Ok(self
            .find_open_all_op(agent, tool, input_hash)
            .await?
            .into_iter()
            .next())
    }

    /// [`InboxStore::find_open_all`]: every open call of one agent, tool and input hash.
    /// `lower` under the "C" collation folds ASCII letters only, as `eq_ignore_ascii_case`;
    /// the `state` term is the index's own, so the planner can read `held_calls_open`; ids
    /// tie-break bytewise, as in SQLite.
    async fn find_open_all_op(
        &self,
        agent: &AgentRef,
        tool: &str,
        input_hash: &str,
    ) -> Result<Vec<HeldRecord>, InboxError> {
        let client = self.client().await?;
        let rows = self
            .query(
                &client,
                &by_input(
                    COLUMNS,
                    "agent_profile = $1 AND agent_subagent IS NOT DISTINCT FROM $2::text \
                     AND lower(tool COLLATE \"C\") = lower($4::text COLLATE \"C\") \
                     AND state IN ('pending', 'approved')",
                    "state = 'approved' DESC, created_at DESC, interaction_id COLLATE \"C\" DESC",
                ),
                &[&agent.profile, &agent.subagent, &input_hash, &tool],
            )
            .await?;
        rows.iter()
            .map(|row| {
                read_row(row).map_err(|why| {
                    let id: String = row.try_get(0).unwrap_or_else(|_| String::from("?"));
                    self.record_err(&id, why)
                })
            })
            .collect()
    }

    async fn hold_unless_repeated_op(&self, c: NewHeldCall) -> Result<Holding, InboxError> {
        let mut client = self.client().await?;
        let now = Timestamp::now();
        let err = |e: tokio_postgres::Error| self.err(&e);
        let tx = client.transaction().await.map_err(err)?;
        // INVARIANT: every hold of this call (agent, tool up to ASCII case, input hash) takes
        // this transaction-scoped lock first, so of two repeats the second sees what the
        // first held (R26). The key is the call's own SHA-256, the same in every instance.
        let key = repeat_lock_key(&c);
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&key])
            .await
            .map_err(err)?;
        let rows = tx
            .query(
                &by_input(
                    &format!("{COLUMNS}, repeat_told_at"),
                    "agent_profile = $1 AND agent_subagent IS NOT DISTINCT FROM $2::text \
                     AND lower(tool COLLATE \"C\") = lower($4::text COLLATE \"C\")",
                    "created_at DESC, (state IN ('pending', 'approved', 'claimed')) DESC, \
                     (repeat_told_at IS NULL) DESC, interaction_id COLLATE \"C\" DESC",
                ),
                &[&c.agent.profile, &c.agent.subagent, &c.input_hash, &c.tool],
            )
            .await
            .map_err(err)?;
        let mut newest = None;
        for row in &rows {
            let record = read_row(row).map_err(|why| {
                let id: String = row.try_get(0).unwrap_or_else(|_| String::from("?"));
                self.record_err(&id, why)
            })?;
            if state::same_input(&record, &c.input_json) {
                // After every [`COLUMNS`] one (`edited_from` is the last, 33).
                let told: Option<i64> = row.try_get(34).map_err(err)?;
                newest = Some((record, told.is_some()));
                break;
            }
        }
        let outcome = match newest {
            Some((mut record, told)) => match state::repeat_of(&record, told, now) {
                Repeat::Open => Some(Holding::Open(record)),
                Repeat::Expire => {
                    tx.execute(
                        "UPDATE held_calls SET state = 'expired', repeat_told_at = $2, \
                         updated_at = $2 WHERE interaction_id = $1 AND state = 'pending'",
                        &[&record.id(), &now.as_millis()],
                    )
                    .await
                    .map_err(err)?;
                    record.state = State::Expired;
                    Some(Holding::Ended(record))
                }
                Repeat::Tell => {
                    tx.execute(
                        "UPDATE held_calls SET repeat_told_at = $2 WHERE interaction_id = $1",
                        &[&record.id(), &now.as_millis()],
                    )
                    .await
                    .map_err(err)?;
                    Some(Holding::Ended(record))
                }
                Repeat::Hold => None,
            },
            None => None,
        };
        let outcome = match outcome {
            Some(o) => o,
            None => {
                let row = HeldRow::of(&c);
                let inserted = tx.execute(INSERT_HELD, &row.params()).await.map_err(err);
                match inserted {
                    Ok(_) => Holding::Held,
                    Err(e) if e.kind() == Kind::Duplicate => {
                        return Err(InboxError::new(
                            Kind::Duplicate,
                            format!("a held call `{}` already exists", c.interaction_id),
                        ));
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        tx.commit().await.map_err(err)?;
        Ok(outcome)
    }

    async fn session_calls_op(
        &self,
        session: &str,
        turn: Option<&str>,
    ) -> Result<Vec<HeldRecord>, InboxError> {
        let client = self.client().await?;
        let rows = self
            .query(
                &client,
                &format!(
                    "SELECT {COLUMNS} FROM held_calls WHERE session_id = $1 \
                     AND ($2::text IS NULL OR turn_id = $2) ORDER BY created_at, interaction_id"
                ),
                &[&session, &turn],
            )
            .await?;
        rows.iter()
            .map(|row| {
                read_row(row).map_err(|why| {
                    let id: String = row.try_get(0).unwrap_or_else(|_| String::from("?"));
                    self.record_err(&id, why)
                })
            })
            .collect()
    }

    async fn cancel_turn_op(&self, session: &str, turn: &str) -> Result<Vec<String>, InboxError> {
        let client = self.client().await?;
        let now = Timestamp::now();
        // INVARIANT: one statement: every unsent call of the turn ends at once, `cancelled`,
        // or `expired` when nobody answered in time (R26, R43, R47).
        // R47: an approved call not yet claimed is not yet sent: it ends `cancelled` too.
        let rows = self
            .query(
                &client,
                "UPDATE held_calls SET state = CASE WHEN state = 'pending' AND expires_at <= $3 \
                 THEN 'expired' ELSE 'cancelled' END, updated_at = $3 \
                 WHERE session_id = $1 AND turn_id = $2 AND state IN ('pending', 'approved') \
                 RETURNING interaction_id, created_at, state",
                &[&session, &turn, &now.as_millis()],
            )
            .await?;
        let mut cancelled = Vec::new();
        for row in rows {
            let id: String = row.try_get(0).map_err(|e| self.err(&e))?;
            let created: i64 = row.try_get(1).map_err(|e| self.err(&e))?;
            let state: String = row.try_get(2).map_err(|e| self.err(&e))?;
            if state == "cancelled" {
                cancelled.push((created, id));
            }
        }
        cancelled.sort();
        Ok(cancelled.into_iter().map(|(_, id)| id).collect())
    }

    async fn answer_op(&self, id: &str, answer: Answer) -> Result<AnswerReceipt, AnswerError> {
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
    async fn answer_holding_row(
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
        let st: String = row.try_get(0).map_err(err)?;
        let needed: i32 = row.try_get(7).map_err(err)?;
        let given: Option<String> = row.try_get(8).map_err(err)?;
        let parsed = (|| {
            Ok::<_, String>((
                codec::approvals_needed_from(i64::from(needed))?,
                GivenApproval::list_from_text(given.as_deref())?,
            ))
        })();
        let (needed, approvals) =
            parsed.map_err(|why| AnswerError::Store(self.record_err(id, why)))?;
        let read = state::AnswerRow {
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
        };
        match state::answer_step(id, answer, read, now) {
            state::AnswerStep::Answer(result) => Ok(Some(result)),
            state::AnswerStep::Gather(g) => {
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
                // Fail closed: an approval the store cannot commit is not recorded.
                tx.commit().await.map_err(err)?;
                Ok(Some(Ok(g.receipt)))
            }
            state::AnswerStep::Deny(receipt) => {
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
                tx.commit().await.map_err(err)?;
                Ok(Some(Ok(receipt)))
            }
            state::AnswerStep::Lost(PendingLost::Expire(e)) => {
                tx.execute(
                    "UPDATE held_calls SET state = 'expired', updated_at = $2 \
                     WHERE interaction_id = $1 AND state = 'pending'",
                    &[&id, &now.as_millis()],
                )
                .await
                .map_err(err)?;
                tx.commit().await.map_err(err)?;
                Ok(Some(Err(e)))
            }
            state::AnswerStep::Lost(PendingLost::StillPending) => Ok(None),
            state::AnswerStep::Lost(PendingLost::Refuse(e)) => Ok(Some(Err(e))),
        }
    }

    /// Acts on [`state::pending_lost`]: `Ok(())` when the call is still pending and not yet
    /// due (the caller tries again), otherwise the error to answer with (a call past its
    /// expiry is marked `expired` first).
    async fn lost_pending(
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

    async fn cancel_op(&self, id: &str) -> Result<(), AnswerError> {
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

    async fn claim_op(&self, id: &str, claim: Claim) -> Result<Claimed, ClaimError> {
        let client = self.client().await?;
        let now = Timestamp::now();
        // INVARIANT: `approved → claimed` is one conditional update that also checks both R35
        // hashes, committed (autocommit) before this returns, so before the tool is invoked.
        // Of racing senders, on any instances, exactly one changes the row.
        let won = self
            .query_opt(
                &client,
                "UPDATE held_calls SET state = 'claimed', claim_token = $2, claimed_by = $3, \
                 claimed_at = $4, updated_at = $4 \
                 WHERE interaction_id = $1 AND state = 'approved' AND input_hash = $5 \
                 AND definition_hash = $6 AND (approvals_needed <= 1 \
                 OR json_array_length(approvals_json::json) >= approvals_needed) \
                 RETURNING approver, approver_subject, approver_issuer",
                &[
                    &id,
                    &claim.token,
                    &self.inner.options.instance,
                    &now.as_millis(),
                    &claim.input_hash,
                    &claim.definition_hash,
                ],
            )
            .await?;
        if let Some(row) = won {
            let approver: Option<String> = row.try_get(0).map_err(|e| self.err(&e))?;
            let subject: Option<String> = row.try_get(1).map_err(|e| self.err(&e))?;
            let issuer: Option<String> = row.try_get(2).map_err(|e| self.err(&e))?;
            return Ok(Claimed {
                approver: approver.unwrap_or_default(),
                approver_principal: principal(subject, issuer),
            });
        }
        let Some(row) = self
            .query_opt(
                &client,
                "SELECT state, input_hash, definition_hash FROM held_calls WHERE interaction_id = $1",
                &[&id],
            )
            .await?
        else {
            return Err(ClaimError::UnknownId(id.to_owned()));
        };
        let read = |e: tokio_postgres::Error| ClaimError::Store(self.err(&e));
        let state: String = row.try_get(0).map_err(read)?;
        let input_hash: String = row.try_get(1).map_err(read)?;
        let definition_hash: String = row.try_get(2).map_err(read)?;
        let state = self.parse_state(id, &state)?;
        Err(state::claim_lost(
            id,
            &claim,
            state,
            &input_hash,
            &definition_hash,
        ))
    }

    async fn complete_op(&self, id: &str, completion: Completion) -> Result<State, CompleteError> {
        let client = self.client().await?;
        let to = state::completed_state(completion.outcome);
        let now = Timestamp::now();
        // Only the claim's own token records, once.
        let recorded = self
            .query_opt(
                &client,
                "UPDATE held_calls SET state = $3, result_json = $4, finished_at = $5, updated_at = $5 \
                 WHERE interaction_id = $1 AND state = 'claimed' AND claim_token = $2 \
                 RETURNING interaction_id",
                &[
                    &id,
                    &completion.token,
                    &to.as_str(),
                    &completion.result.to_string(),
                    &now.as_millis(),
                ],
            )
            .await?;
        if recorded.is_some() {
            return Ok(to);
        }
        Err(state::complete_lost(id, self.state_of(&client, id).await?))
    }

    async fn get_policy_op(&self) -> Result<Option<StoredPolicy>, InboxError> {
        self.read_policy_row("SELECT body, updated_at FROM stored_policy WHERE id = 1")
            .await
    }

    /// The one-row policy `select` reads (the enforced policy's table or the shadow's).
    async fn read_policy_row(&self, select: &str) -> Result<Option<StoredPolicy>, InboxError> {
        let client = self.client().await?;
        let row = self.query_opt(&client, select, &[]).await?;
        match row {
            None => Ok(None),
            Some(row) => Ok(Some(StoredPolicy {
                body: row.try_get(0).map_err(|e| self.err(&e))?,
                updated_at: row.try_get(1).map_err(|e| self.err(&e))?,
            })),
        }
    }

    /// Replaces the stored policy. With `expected` (`Some(None)`: no policy stored), only if
    /// the stored `updatedAt` is that one.
    async fn put_policy_op(
        &self,
        body: String,
        expected: Option<Option<String>>,
    ) -> Result<StoredPolicy, PolicySaveError> {
        let mut client = self.client().await?;
        let server = self.inner.server.clone();
        let err = |e: tokio_postgres::Error| error::db(&server, &e);
        let tx = client.transaction().await.map_err(err)?;
        // INVARIANT: puts are serialised (readers are not blocked), so each `updatedAt` is
        // computed after the previous one committed and is strictly later than it (R23), and
        // the comparison with `expected` below sees every put committed before it: nothing can
        // be saved between the comparison and this transaction's own save.
        tx.batch_execute("LOCK TABLE stored_policy IN EXCLUSIVE MODE")
            .await
            .map_err(err)?;
        let previous: Option<String> = tx
            .query_opt("SELECT updated_at FROM stored_policy WHERE id = 1", &[])
            .await
            .map_err(err)?
            .map(|r| r.try_get(0))
            .transpose()
            .map_err(err)?;
        if let Some(expected) = expected
            && expected != previous
        {
            return Err(PolicySaveError::Conflict {
                expected,
                stored: previous,
            });
        }
        let updated_at = codec::next_updated_at(previous.as_deref(), SystemTime::now());
        // INVARIANT: the whole policy is one row, replaced in one transaction (R23).
        tx.execute(
            "INSERT INTO stored_policy (id, body, updated_at) VALUES (1, $1, $2) \
             ON CONFLICT (id) DO UPDATE SET body = excluded.body, updated_at = excluded.updated_at",
            &[&body, &updated_at],
        )
        .await
        .map_err(err)?;
        tx.commit().await.map_err(err)?;
        Ok(StoredPolicy { body, updated_at })
    }
}

impl PostgresInbox {
    async fn get_shadow_op(&self) -> Result<Option<StoredPolicy>, InboxError> {
        self.read_policy_row("SELECT body, updated_at FROM stored_shadow_policy WHERE id = 1")
            .await
    }

    /// Replaces the stored shadow policy (R46), stamped after the previous shadow's stamp
    /// (puts serialised, as the enforced policy's are).
    async fn put_shadow_op(&self, body: String) -> Result<StoredPolicy, InboxError> {
        let mut client = self.client().await?;
        let server = self.inner.server.clone();
        let err = |e: tokio_postgres::Error| error::db(&server, &e);
        let tx = client.transaction().await.map_err(err)?;
        tx.batch_execute("LOCK TABLE stored_shadow_policy IN EXCLUSIVE MODE")
            .await
            .map_err(err)?;
        let previous: Option<String> = tx
            .query_opt(
                "SELECT updated_at FROM stored_shadow_policy WHERE id = 1",
                &[],
            )
            .await
            .map_err(err)?
            .map(|r| r.try_get(0))
            .transpose()
            .map_err(err)?;
        let updated_at = codec::next_updated_at(previous.as_deref(), SystemTime::now());
        tx.execute(
            "INSERT INTO stored_shadow_policy (id, body, updated_at) VALUES (1, $1, $2) \
             ON CONFLICT (id) DO UPDATE SET body = excluded.body, updated_at = excluded.updated_at",
            &[&body, &updated_at],
        )
        .await
        .map_err(err)?;
        tx.commit().await.map_err(err)?;
        Ok(StoredPolicy { body, updated_at })
    }

    async fn clear_shadow_op(&self) -> Result<bool, InboxError> {
        let client = self.client().await?;
        let server = self.inner.server.clone();
        let n = client
            .execute("DELETE FROM stored_shadow_policy WHERE id = 1", &[])
            .await
            .map_err(|e| error::db(&server, &e))?;
        Ok(n > 0)
    }
}
