//! The SQL of the stored tenant policy (R22) and the shadow policy (R46).

use super::*;

/// Replaces the stored policy. With `expected` (`Some(None)`: no policy stored), only if the
/// stored `updatedAt` is that one.
pub(crate) fn put_policy_op(
    inner: &Inner,
    conn: &mut Connection,
    body: &str,
    expected: Option<Option<&str>>,
) -> Result<StoredPolicy, PolicySaveError> {
    // INVARIANT: `BEGIN IMMEDIATE` takes the database's write lock before the read, so no
    // other connection or process can put between the comparison and the save.
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| inner.err(e))?;
    let previous: Option<String> = tx
        .query_row(
            "SELECT updated_at FROM stored_policy WHERE id = 1",
            [],
            |r| r.get(0),
        )
        .optional()
        .map_err(|e| inner.err(e))?;
    if let Some(expected) = expected
        && expected != previous.as_deref()
    {
        return Err(PolicySaveError::Conflict {
            expected: expected.map(str::to_owned),
            stored: previous,
        });
    }
    let updated_at = codec::next_updated_at(previous.as_deref(), SystemTime::now());
    // INVARIANT: the whole policy is one row, replaced in one transaction (R23).
    tx.execute(
        "INSERT INTO stored_policy (id, body, updated_at) VALUES (1, ?1, ?2) \
         ON CONFLICT (id) DO UPDATE SET body = excluded.body, updated_at = excluded.updated_at",
        params![body, updated_at],
    )
    .map_err(|e| inner.err(e))?;
    tx.commit().map_err(|e| inner.err(e))?;
    Ok(StoredPolicy {
        body: body.to_owned(),
        updated_at,
    })
}

/// Replaces the stored shadow policy (R46), stamped after the previous shadow's stamp.
pub(crate) fn put_shadow_op(
    inner: &Inner,
    conn: &mut Connection,
    body: &str,
) -> Result<StoredPolicy, InboxError> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| inner.err(e))?;
    let previous: Option<String> = tx
        .query_row(
            "SELECT updated_at FROM stored_shadow_policy WHERE id = 1",
            [],
            |r| r.get(0),
        )
        .optional()
        .map_err(|e| inner.err(e))?;
    let updated_at = codec::next_updated_at(previous.as_deref(), SystemTime::now());
    tx.execute(
        "INSERT INTO stored_shadow_policy (id, body, updated_at) VALUES (1, ?1, ?2) \
         ON CONFLICT (id) DO UPDATE SET body = excluded.body, updated_at = excluded.updated_at",
        params![body, updated_at],
    )
    .map_err(|e| inner.err(e))?;
    tx.commit().map_err(|e| inner.err(e))?;
    Ok(StoredPolicy {
        body: body.to_owned(),
        updated_at,
    })
}
