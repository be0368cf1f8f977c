//! The stored tenant policy (R22) and the shadow policy (R46) on PostgreSQL.

use super::*;

impl PostgresInbox {
    pub(super) async fn get_policy_op(&self) -> Result<Option<StoredPolicy>, InboxError> {
        self.read_policy_row("SELECT body, updated_at FROM stored_policy WHERE id = 1")
            .await
    }

    /// The one-row policy `select` reads (the enforced policy's table or the shadow's).
    pub(super) async fn read_policy_row(
        &self,
        select: &str,
    ) -> Result<Option<StoredPolicy>, InboxError> {
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
    pub(super) async fn put_policy_op(
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

    pub(super) async fn get_shadow_op(&self) -> Result<Option<StoredPolicy>, InboxError> {
        self.read_policy_row("SELECT body, updated_at FROM stored_shadow_policy WHERE id = 1")
            .await
    }

    /// Replaces the stored shadow policy (R46), stamped after the previous shadow's stamp
    /// (puts serialised, as the enforced policy's are).
    pub(super) async fn put_shadow_op(&self, body: String) -> Result<StoredPolicy, InboxError> {
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

    pub(super) async fn clear_shadow_op(&self) -> Result<bool, InboxError> {
        let client = self.client().await?;
        let server = self.inner.server.clone();
        let n = client
            .execute("DELETE FROM stored_shadow_policy WHERE id = 1", &[])
            .await
            .map_err(|e| error::db(&server, &e))?;
        Ok(n > 0)
    }
}
