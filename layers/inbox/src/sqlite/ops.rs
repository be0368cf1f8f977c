//! The SQL of each held-call operation, on one connection inside its transaction: hold,
//! find, answer, cancel, claim, complete, and the stored policies. What an outcome means is
//! decided in `crate::state`.

use super::*;

mod answer;
mod policy;
pub(super) use answer::{answer_op, cancel_op};
pub(super) use policy::{put_policy_op, put_shadow_op};

pub(super) const COLUMNS: &str = "interaction_id, call_id, tool, identities, definition_hash, agent_profile, \
    agent_subagent, input_json, input_canonical, input_hash, reasons, run_mode, run_background, \
    created_at, expires_at, state, approver, answer_key, answer_reason, answered_at, claimed_by, \
    claimed_at, result_json, finished_at, updated_at, session_id, turn_id, approver_subject, \
    approver_issuer, target_json, approvals_needed, approvals_json, labels_json, \
    (SELECT original_input_json FROM held_edits WHERE held_edits.interaction_id = held_calls.interaction_id)";

pub(super) fn bool_int(b: bool) -> i64 {
    i64::from(b)
}

/// Reads one row selected with [`COLUMNS`]; a value that does not parse is a
/// [`RecordError`](crate::RecordError).
pub(super) fn read_row(row: &Row<'_>) -> rusqlite::Result<Result<HeldRecord, crate::RecordError>> {
    let state: String = row.get(15)?;
    let identities: String = row.get(3)?;
    let reasons: String = row.get(10)?;
    let run_mode: String = row.get(11)?;
    let result_json: Option<String> = row.get(22)?;
    let session: Option<String> = row.get(25)?;
    let turn: Option<String> = row.get(26)?;
    let approver_principal = match (row.get::<_, Option<String>>(27)?, row.get(28)?) {
        (Some(subject), Some(issuer)) => Some(toolgate_core::Principal { subject, issuer }),
        _ => None,
    };
    let target: Option<String> = row.get(29)?;
    let approvals_needed: i64 = row.get(30)?;
    let approvals_json: Option<String> = row.get(31)?;
    let labels_json: Option<String> = row.get(32)?;
    let parsed = (|| {
        let state = State::parse(&state).ok_or_else(|| crate::RecordError::State {
            state: state.clone(),
        })?;
        let result = match result_json {
            Some(t) => Some(codec::parse_json(&t)?),
            None => None,
        };
        Ok::<_, crate::RecordError>((
            state,
            codec::identities_from_json(&identities)?,
            codec::reasons_from_json(&reasons)?,
            codec::run_mode_from(&run_mode)?,
            result,
            codec::approvals_needed_from(approvals_needed)?,
            crate::model::GivenApproval::list_from_text(approvals_json.as_deref())?,
        ))
    })();
    let (state, identities, reasons, mode, result, needed, approvals) = match parsed {
        Ok(p) => p,
        Err(e) => return Ok(Err(e)),
    };
    let ts = |i: usize| -> rusqlite::Result<Option<Timestamp>> {
        Ok(row.get::<_, Option<i64>>(i)?.map(Timestamp::from_millis))
    };
    Ok(Ok(HeldRecord {
        call: NewHeldCall {
            interaction_id: row.get(0)?,
            call_id: row.get(1)?,
            tool: row.get(2)?,
            identities,
            definition_hash: row.get(4)?,
            agent: AgentRef {
                profile: row.get(5)?,
                subagent: row.get(6)?,
            },
            input_json: row.get(7)?,
            input_canonical: row.get(8)?,
            input_hash: row.get(9)?,
            reasons,
            run: RunContext {
                mode,
                background: row.get::<_, i64>(12)? != 0,
            },
            turn: match (session, turn) {
                (Some(session), Some(turn)) => Some(Turn { session, turn }),
                _ => None,
            },
            created_at: Timestamp::from_millis(row.get(13)?),
            expires_at: Timestamp::from_millis(row.get(14)?),
            target: target.as_deref().and_then(edit::target_from_json),
            approvals: needed,
            labels: labels_json.as_deref().and_then(codec::labels_from_json),
        },
        state,
        approver: row.get(16)?,
        approver_principal,
        approvals,
        answer_key: row.get(17)?,
        answer_reason: row.get(18)?,
        answered_at: ts(19)?,
        claimed_by: row.get(20)?,
        claimed_at: ts(21)?,
        result,
        finished_at: ts(23)?,
        updated_at: Timestamp::from_millis(row.get(24)?),
        edited_from: row.get(33)?,
    }))
}

pub(super) fn hold_op(inner: &Inner, conn: &Connection, c: &NewHeldCall) -> Result<(), InboxError> {
    let mut stmt = conn
        .prepare_cached(
            "INSERT INTO held_calls (interaction_id, call_id, tool, identities, definition_hash, \
             agent_profile, agent_subagent, input_json, input_canonical, input_hash, reasons, \
             run_mode, run_background, created_at, expires_at, state, updated_at, session_id, \
             turn_id, target_json, approvals_needed, labels_json) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, \
             ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, 'pending', ?14, ?16, ?17, ?18, ?19, ?20)",
        )
        .map_err(|e| inner.err(e))?;
    let inserted = stmt.execute(params![
        c.interaction_id,
        c.call_id,
        c.tool,
        codec::identities_json(&c.identities),
        c.definition_hash,
        c.agent.profile,
        c.agent.subagent,
        c.input_json,
        c.input_canonical,
        c.input_hash,
        codec::reasons_json(&c.reasons),
        c.run.mode.as_str(),
        bool_int(c.run.background),
        c.created_at.as_millis(),
        c.expires_at.as_millis(),
        c.turn.as_ref().map(|t| t.session.as_str()),
        c.turn.as_ref().map(|t| t.turn.as_str()),
        c.target.as_ref().map(|t| t.to_json().to_string()),
        i64::from(c.approvals.max(1)),
        c.labels.as_ref().map(codec::labels_json),
    ]);
    match inserted {
        Ok(_) => Ok(()),
        Err(e) => {
            let e = inner.err(e);
            if e.kind() == Kind::Duplicate {
                Err(InboxError::new(
                    Kind::Duplicate,
                    format!("a held call `{}` already exists", c.interaction_id),
                ))
            } else {
                Err(e)
            }
        }
    }
}

pub(super) fn get_op(
    inner: &Inner,
    conn: &mut Connection,
    id: &str,
) -> Result<Option<HeldRecord>, InboxError> {
    let row = conn
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM held_calls WHERE interaction_id = ?1"
        ))
        .and_then(|mut s| s.query_row([id], read_row).optional())
        .map_err(|e| inner.err(e))?;
    match row {
        None => Ok(None),
        Some(Ok(r)) => Ok(Some(r)),
        Some(Err(why)) => Err(inner.record_err(id, why)),
    }
}

pub(super) fn list_op(
    inner: &Inner,
    conn: &mut Connection,
    state: Option<State>,
) -> Result<Vec<HeldRecord>, InboxError> {
    let sql = match state {
        Some(_) => format!(
            "SELECT {COLUMNS} FROM held_calls WHERE state = ?1 ORDER BY created_at, interaction_id"
        ),
        None => format!("SELECT {COLUMNS} FROM held_calls ORDER BY created_at, interaction_id"),
    };
    let mut stmt = conn.prepare_cached(&sql).map_err(|e| inner.err(e))?;
    let rows = match state {
        Some(s) => stmt.query_map([s.as_str()], read_row),
        None => stmt.query_map([], read_row),
    }
    .map_err(|e| inner.err(e))?;
    let mut out = Vec::new();
    for row in rows {
        match row.map_err(|e| inner.err(e))? {
            Ok(r) => out.push(r),
            Err(why) => return Err(inner.record_err("?", why)),
        }
    }
    Ok(out)
}

/// The calls a call with input hash `?3` repeats (R26): those held with that input, and those
/// a person approved with an edited input in place of an input with that hash (the agent
/// repeats what it sent, not what the person sent in its place).
const BY_INPUT: &str = "(input_hash = ?3 OR interaction_id IN \
    (SELECT interaction_id FROM held_edits WHERE original_input_hash = ?3))";

/// The statement of [`HeldCalls::find_open`], selecting `columns`.
pub(super) fn find_open_sql(columns: &str) -> String {
    format!("{} LIMIT 1", find_open_all_sql(columns))
}

/// The statement of [`HeldCalls::find_open_all`] (every candidate, in `find_open`'s order),
/// selecting `columns`.
pub(super) fn find_open_all_sql(columns: &str) -> String {
    format!(
        "SELECT {columns} FROM held_calls WHERE agent_profile = ?1 AND agent_subagent IS ?2 \
         AND {BY_INPUT} AND tool = ?4 COLLATE NOCASE AND state IN ('pending', 'approved') \
         ORDER BY state = 'approved' DESC, created_at DESC, interaction_id DESC"
    )
}

pub(super) fn find_open_all_op(
    inner: &Inner,
    conn: &mut Connection,
    agent: &AgentRef,
    tool: &str,
    input_hash: &str,
) -> Result<Vec<HeldRecord>, InboxError> {
    let mut stmt = conn
        .prepare_cached(&find_open_all_sql(COLUMNS))
        .map_err(|e| inner.err(e))?;
    let rows = stmt
        .query_map(
            params![agent.profile, agent.subagent, input_hash, tool],
            read_row,
        )
        .map_err(|e| inner.err(e))?;
    let mut out = Vec::new();
    for row in rows {
        match row.map_err(|e| inner.err(e))? {
            Ok(r) => out.push(r),
            Err(why) => return Err(inner.record_err("?", why)),
        }
    }
    Ok(out)
}

pub(super) fn find_open_op(
    inner: &Inner,
    conn: &mut Connection,
    agent: &AgentRef,
    tool: &str,
    input_hash: &str,
) -> Result<Option<HeldRecord>, InboxError> {
    // `COLLATE NOCASE` folds ASCII letters only, as `eq_ignore_ascii_case`; the `state`
    // term is the index's own, so SQLite reads `held_calls_open`.
    let row = conn
        .prepare_cached(&find_open_sql(COLUMNS))
        .and_then(|mut s| {
            s.query_row(
                params![agent.profile, agent.subagent, input_hash, tool],
                read_row,
            )
            .optional()
        })
        .map_err(|e| inner.err(e))?;
    match row {
        None => Ok(None),
        Some(Ok(r)) => Ok(Some(r)),
        Some(Err(why)) => Err(inner.record_err("?", why)),
    }
}

/// The statement of [`HeldCalls::hold_unless_repeated`]'s look-up, selecting `columns`
/// and `repeat_told_at`: every held call of one agent, tool and input hash, newest first.
/// Calls held in the same millisecond are ordered as they were inserted (`rowid`), after an
/// open call before an ended one and an ending not yet told before one told (R26): never by
/// the random interaction id, which would make "the newest" a coin toss.
pub(super) fn repeats_sql(columns: &str) -> String {
    format!(
        "SELECT {columns}, repeat_told_at FROM held_calls WHERE agent_profile = ?1 \
         AND agent_subagent IS ?2 AND {BY_INPUT} AND tool = ?4 COLLATE NOCASE \
         ORDER BY created_at DESC, state IN ('pending', 'approved', 'claimed') DESC, \
         repeat_told_at IS NULL DESC, rowid DESC"
    )
}

pub(super) fn hold_unless_repeated_op(
    inner: &Inner,
    conn: &mut Connection,
    c: &NewHeldCall,
    now: Timestamp,
) -> Result<Holding, InboxError> {
    // INVARIANT: `BEGIN IMMEDIATE` takes the write lock before the look-up, so of two
    // repeats of one call, the second sees what the first held (R26).
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| inner.err(e))?;
    let newest = {
        let mut stmt = tx
            .prepare_cached(&repeats_sql(COLUMNS))
            .map_err(|e| inner.err(e))?;
        let mut rows = stmt
            .query(params![
                c.agent.profile,
                c.agent.subagent,
                c.input_hash,
                c.tool
            ])
            .map_err(|e| inner.err(e))?;
        let mut newest = None;
        while let Some(row) = rows.next().map_err(|e| inner.err(e))? {
            let record = read_row(row)
                .map_err(|e| inner.err(e))?
                .map_err(|why| inner.record_err("?", why))?;
            if same_input(&record, &c.input_json) {
                // After every [`COLUMNS`] one (`edited_from` is the last, 33).
                let told: Option<i64> = row.get(34).map_err(|e| inner.err(e))?;
                newest = Some((record, told.is_some()));
                break;
            }
        }
        newest
    };
    let outcome = match newest {
        Some((mut record, told)) => match state::repeat_of(&record, told, now) {
            Repeat::Open => Some(Holding::Open(record)),
            Repeat::Expire => {
                tx.execute(
                    "UPDATE held_calls SET state = 'expired', repeat_told_at = ?2, updated_at = ?2 \
                     WHERE interaction_id = ?1 AND state = 'pending'",
                    params![record.id(), now.as_millis()],
                )
                .map_err(|e| inner.err(e))?;
                record.state = State::Expired;
                Some(Holding::Ended(record))
            }
            Repeat::Tell => {
                tx.execute(
                    "UPDATE held_calls SET repeat_told_at = ?2 WHERE interaction_id = ?1",
                    params![record.id(), now.as_millis()],
                )
                .map_err(|e| inner.err(e))?;
                Some(Holding::Ended(record))
            }
            Repeat::Hold => None,
        },
        None => None,
    };
    let outcome = match outcome {
        Some(o) => o,
        None => {
            hold_op(inner, &tx, c)?;
            Holding::Held
        }
    };
    tx.commit().map_err(|e| inner.err(e))?;
    Ok(outcome)
}

pub(super) fn session_calls_op(
    inner: &Inner,
    conn: &mut Connection,
    session: &str,
    turn: Option<&str>,
) -> Result<Vec<HeldRecord>, InboxError> {
    let sql = format!(
        "SELECT {COLUMNS} FROM held_calls WHERE session_id = ?1 AND (?2 IS NULL OR turn_id = ?2) \
         ORDER BY created_at, interaction_id"
    );
    let mut stmt = conn.prepare_cached(&sql).map_err(|e| inner.err(e))?;
    let rows = stmt
        .query_map(params![session, turn], read_row)
        .map_err(|e| inner.err(e))?;
    let mut out = Vec::new();
    for row in rows {
        match row.map_err(|e| inner.err(e))? {
            Ok(r) => out.push(r),
            Err(why) => return Err(inner.record_err("?", why)),
        }
    }
    Ok(out)
}

pub(super) fn cancel_turn_op(
    inner: &Inner,
    conn: &mut Connection,
    session: &str,
    turn: &str,
    now: Timestamp,
) -> Result<Vec<String>, InboxError> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| inner.err(e))?;
    // A call past its expiry was not cancelled: nobody answered in time (R26).
    tx.execute(
        "UPDATE held_calls SET state = 'expired', updated_at = ?3 \
         WHERE session_id = ?1 AND turn_id = ?2 AND state = 'pending' AND expires_at <= ?3",
        params![session, turn, now.as_millis()],
    )
    .map_err(|e| inner.err(e))?;
    // R47: an approved call not yet claimed is not yet sent: it ends too.
    let ids = {
        let mut stmt = tx
            .prepare_cached(
                "UPDATE held_calls SET state = 'cancelled', updated_at = ?3 \
                 WHERE session_id = ?1 AND turn_id = ?2 AND state IN ('pending', 'approved') \
                 RETURNING interaction_id, created_at",
            )
            .map_err(|e| inner.err(e))?;
        let rows = stmt
            .query_map(params![session, turn, now.as_millis()], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
            })
            .map_err(|e| inner.err(e))?;
        let mut ids = rows
            .collect::<rusqlite::Result<Vec<(String, i64)>>>()
            .map_err(|e| inner.err(e))?;
        ids.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
        ids.into_iter().map(|(id, _)| id).collect::<Vec<_>>()
    };
    tx.commit().map_err(|e| inner.err(e))?;
    Ok(ids)
}

/// Moves every row matching `filter` (a `WHERE` clause over `?1`, `?2`) to `to`, returning
/// their ids, in one transaction.
pub(super) fn move_all(
    inner: &Inner,
    conn: &mut Connection,
    filter: &str,
    p1: &dyn rusqlite::ToSql,
    to: State,
    now: Timestamp,
) -> Result<Vec<String>, InboxError> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| inner.err(e))?;
    let ids = {
        let mut stmt = tx
            .prepare_cached(&format!(
                "SELECT interaction_id FROM held_calls WHERE {filter} ORDER BY created_at"
            ))
            .map_err(|e| inner.err(e))?;
        let rows = stmt
            .query_map(params![p1], |r| r.get::<_, String>(0))
            .map_err(|e| inner.err(e))?;
        rows.collect::<rusqlite::Result<Vec<String>>>()
            .map_err(|e| inner.err(e))?
    };
    tx.execute(
        &format!("UPDATE held_calls SET state = ?2, updated_at = ?3 WHERE {filter}"),
        params![p1, to.as_str(), now.as_millis()],
    )
    .map_err(|e| inner.err(e))?;
    tx.commit().map_err(|e| inner.err(e))?;
    Ok(ids)
}

/// `state, input_hash, definition_hash`.
pub(super) type ClaimRow = (String, String, String);

/// `approver, approver_subject, approver_issuer` of a won claim.
pub(super) type ClaimedRow = (Option<String>, Option<String>, Option<String>);

pub(super) fn claim_op(
    inner: &Inner,
    conn: &mut Connection,
    id: &str,
    claim: &Claim,
    now: Timestamp,
) -> Result<Claimed, ClaimError> {
    // INVARIANT: `approved → claimed` is one conditional update that also checks both R35
    // hashes; it is committed (autocommit) before this returns, so before the tool is
    // invoked. Two senders racing: exactly one row change.
    let won: Option<ClaimedRow> = conn
        .prepare_cached(
            "UPDATE held_calls SET state = 'claimed', claim_token = ?2, claimed_by = ?3, \
             claimed_at = ?4, updated_at = ?4 \
             WHERE interaction_id = ?1 AND state = 'approved' AND input_hash = ?5 \
             AND definition_hash = ?6 \
             AND (approvals_needed <= 1 OR json_array_length(approvals_json) >= approvals_needed) \
             RETURNING approver, approver_subject, approver_issuer",
        )
        .and_then(|mut s| {
            // `query_row` steps and resets the statement before it returns: the autocommit
            // transaction is committed by then.
            s.query_row(
                params![
                    id,
                    claim.token,
                    inner.options.instance,
                    now.as_millis(),
                    claim.input_hash,
                    claim.definition_hash,
                ],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()
        })
        .map_err(|e| inner.err(e))?;
    if let Some((approver, subject, issuer)) = won {
        return Ok(Claimed {
            approver: approver.unwrap_or_default(),
            approver_principal: match (subject, issuer) {
                (Some(subject), Some(issuer)) => Some(toolgate_core::Principal { subject, issuer }),
                _ => None,
            },
        });
    }
    let row: Option<ClaimRow> = conn
        .prepare_cached(
            "SELECT state, input_hash, definition_hash FROM held_calls WHERE interaction_id = ?1",
        )
        .and_then(|mut s| {
            s.query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .optional()
        })
        .map_err(|e| inner.err(e))?;
    let Some((state, input_hash, definition_hash)) = row else {
        return Err(ClaimError::UnknownId(id.to_owned()));
    };
    let state = State::parse(&state)
        .ok_or_else(|| inner.record_err(id, format!("unknown state `{state}`")))?;
    Err(state::claim_lost(
        id,
        claim,
        state,
        &input_hash,
        &definition_hash,
    ))
}

pub(super) fn complete_op(
    inner: &Inner,
    conn: &mut Connection,
    id: &str,
    completion: &Completion,
    now: Timestamp,
) -> Result<State, CompleteError> {
    let to = state::completed_state(completion.outcome);
    let changed = conn
        .prepare_cached(
            "UPDATE held_calls SET state = ?3, result_json = ?4, finished_at = ?5, updated_at = ?5 \
             WHERE interaction_id = ?1 AND state = 'claimed' AND claim_token = ?2",
        )
        .and_then(|mut s| {
            s.execute(params![
                id,
                completion.token,
                to.as_str(),
                completion.result.to_string(),
                now.as_millis(),
            ])
        })
        .map_err(|e| inner.err(e))?;
    if changed == 1 {
        return Ok(to);
    }
    Err(state::complete_lost(id, inner.state_of(conn, id)?))
}
