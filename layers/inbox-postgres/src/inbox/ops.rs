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
    Completion, GivenApproval, HeldRecord, Holding, InboxError, InboxErrorKind as Kind,
    NewHeldCall, OpenQuestion, PolicySaveError, State, StoredPolicy, Timestamp, codec,
    state::{self, PendingLost, Repeat},
};
use toolgate_inbox::{RevokeError, StoredGrant};

use super::PostgresInbox;
use crate::error;

mod answer;
mod edit;
mod nonce;
mod policy;
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

/// The advisory lock every [`HeldCalls::hold_unless_repeated`] of call `c` takes: the first
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

    /// [`HeldCalls::find_open`]: the first of [`find_open_all_op`](Self::find_open_all_op)'s
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

    /// [`HeldCalls::find_open_all`]: every open call of one agent, tool and input hash.
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
}
