//! The PostgreSQL side of the replay guard (approval-page.md, "Answering from Slack"): one
//! conditional insert into `seen_nonces` ([`crate::schema::NONCES_TABLE`]) takes a nonce,
//! and the nonces past their window are pruned.

use super::*;

impl PostgresInbox {
    /// [`Nonces::take_nonce`].
    pub(super) async fn take_nonce_op(
        &self,
        nonce: &str,
        until: Timestamp,
        now: Timestamp,
    ) -> Result<bool, InboxError> {
        let client = self.client().await?;
        // INVARIANT: one statement; of racing takes of one nonce the first inserts and the
        // others conflict with it (kept: no row); a nonce past its window is taken anew.
        let taken = self
            .query_opt(
                &client,
                "INSERT INTO seen_nonces (nonce, until_ms) VALUES ($1, $2) \
                 ON CONFLICT (nonce) DO UPDATE SET until_ms = EXCLUDED.until_ms \
                 WHERE seen_nonces.until_ms < $3 RETURNING nonce",
                &[&nonce, &until.as_millis(), &now.as_millis()],
            )
            .await?
            .is_some();
        self.query(
            &client,
            "DELETE FROM seen_nonces WHERE until_ms < $1",
            &[&now.as_millis()],
        )
        .await?;
        Ok(taken)
    }
}
