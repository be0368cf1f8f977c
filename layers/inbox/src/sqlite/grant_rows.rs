//! The stored grants' and policies' rows, read back.

use super::*;

/// The columns [`read_grants`] reads, in order.
pub(super) const GRANT_COLUMNS: &str =
    "id, body, uses, last_used_at, created_at, revoked_by, revoked_at, giver_subject, giver_issuer";

/// A grant live at `?1` (R45): not revoked, before its expiry, fewer than `max_calls` sends.
pub(super) const GRANT_LIVE: &str =
    "revoked_at IS NULL AND expires_at > ?1 AND (max_calls IS NULL OR uses < max_calls)";

/// The grants `sql` selects ([`GRANT_COLUMNS`]); a row that cannot be read fails the whole
/// read (fail closed).
pub(super) fn read_grants(
    inner: &Inner,
    conn: &Connection,
    sql: &str,
    args: &[&dyn rusqlite::ToSql],
) -> Result<Vec<StoredGrant>, InboxError> {
    let mut stmt = conn.prepare_cached(sql).map_err(|e| inner.err(e))?;
    let rows = stmt
        .query_map(args, |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, Option<i64>>(3)?,
                r.get::<_, i64>(4)?,
                r.get::<_, Option<String>>(5)?,
                r.get::<_, Option<i64>>(6)?,
                (
                    r.get::<_, Option<String>>(7)?,
                    r.get::<_, Option<String>>(8)?,
                ),
            ))
        })
        .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
        .map_err(|e| inner.err(e))?;
    rows.into_iter()
        .map(|(id, body, uses, last, created, by, at, giver)| {
            StoredGrant::from_stored_by(&id, &body, uses, last, created, (by, at), giver)
        })
        .collect()
}

/// The one-row policy `select` reads (the enforced policy's table or the shadow's).
pub(super) fn read_policy_row(
    conn: &Connection,
    select: &str,
) -> rusqlite::Result<Option<StoredPolicy>> {
    conn.query_row(select, [], |r| {
        Ok(StoredPolicy {
            body: r.get(0)?,
            updated_at: r.get(1)?,
        })
    })
    .optional()
}
