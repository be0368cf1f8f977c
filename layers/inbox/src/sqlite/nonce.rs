//! The SQLite side of the replay guard ([`Nonces::take_nonce`]; approval-page.md,
//! "Answering from Slack"): the `seen_nonces` table, created when first needed, and the one
//! conditional insert that takes a nonce.
//!
//! [`Nonces::take_nonce`]: crate::Nonces::take_nonce

use rusqlite::{Connection, TransactionBehavior, params};

use super::Inner;
use crate::error::InboxError;
use crate::model::Timestamp;

/// The nonces taken, each until when it is kept. Like `held_edits`, not a schema version of
/// its own: created when the first nonce is taken; a program that does not know it ignores
/// it.
pub(crate) const NONCES_TABLE: &str = "
CREATE TABLE IF NOT EXISTS seen_nonces (
    nonce    TEXT PRIMARY KEY NOT NULL,
    until_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS seen_nonces_by_until ON seen_nonces (until_ms);
";

pub(super) fn take_op(
    inner: &Inner,
    conn: &mut Connection,
    nonce: &str,
    until: Timestamp,
    now: Timestamp,
) -> Result<bool, InboxError> {
    conn.execute_batch(NONCES_TABLE).map_err(|e| inner.err(e))?;
    // INVARIANT: the take and the pruning in one `IMMEDIATE` transaction, which takes the
    // write lock before it writes: an attempt that meets another connection's lock (the fast
    // path runs with no busy timeout, and runs the operation again when it does) has changed
    // nothing. Two autocommit statements would leave the nonce taken by a first attempt
    // whose pruning failed, and its retry would find it taken (seen under load).
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| inner.err(e))?;
    // One statement takes it: a nonce still kept conflicts and is left as it is (0 rows), a
    // nonce past its window is taken anew.
    let taken = tx
        .execute(
            "INSERT INTO seen_nonces (nonce, until_ms) VALUES (?1, ?2) \
             ON CONFLICT (nonce) DO UPDATE SET until_ms = excluded.until_ms \
             WHERE seen_nonces.until_ms < ?3",
            params![nonce, until.as_millis(), now.as_millis()],
        )
        .map_err(|e| inner.err(e))?;
    tx.execute(
        "DELETE FROM seen_nonces WHERE until_ms < ?1",
        [now.as_millis()],
    )
    .map_err(|e| inner.err(e))?;
    tx.commit().map_err(|e| inner.err(e))?;
    Ok(taken == 1)
}
