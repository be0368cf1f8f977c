//! Grants (R45) on PostgreSQL: the `grants` table, each use and each revocation one
//! conditional `UPDATE … WHERE id = $1 AND <live>`, so racing instances never count more
//! than `max_calls` sends, and a grant that ended keeps its ending.

use std::sync::Arc;

use deadpool_postgres::{Object, Pool, Runtime};
use tokio_postgres::types::ToSql;
use toolgate_engine::grant::{Grant, GrantStore};
use toolgate_inbox::{
    InboxError, InboxErrorKind as Kind, InboxGrants, RevokeError, StoredGrant, Timestamp,
};

use super::{Inner, PostgresInbox};
use crate::error;

/// The columns [`PostgresInbox::read_grants`] reads, in order.
const GRANT_COLUMNS: &str =
    "id, body, uses, last_used_at, created_at, revoked_by, revoked_at, giver_subject, giver_issuer";

/// A grant live at `$1` (R45): not revoked, before its expiry, fewer than `max_calls` sends.
const GRANT_LIVE: &str =
    "revoked_at IS NULL AND expires_at > $1 AND (max_calls IS NULL OR uses < max_calls)";

/// How many connections the grants thread keeps.
const GRANT_POOL: usize = 4;

impl PostgresInbox {
    async fn grant_client(&self) -> Result<Object, InboxError> {
        self.inner
            .pool
            .get()
            .await
            .map_err(|e| error::pool(&self.inner.server, self.inner.options.wait_timeout, &e))
    }

    async fn read_grants(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<StoredGrant>, InboxError> {
        let client = self.grant_client().await?;
        let err = |e: tokio_postgres::Error| error::db(&self.inner.server, &e);
        let stmt = client.prepare_cached(sql).await.map_err(err)?;
        let rows = client.query(&stmt, params).await.map_err(err)?;
        rows.iter()
            .map(|r| {
                let id: String = r.try_get(0).map_err(err)?;
                let body: String = r.try_get(1).map_err(err)?;
                let by: Option<String> = r.try_get(5).map_err(err)?;
                let at: Option<i64> = r.try_get(6).map_err(err)?;
                let giver: (Option<String>, Option<String>) =
                    (r.try_get(7).map_err(err)?, r.try_get(8).map_err(err)?);
                StoredGrant::from_stored_by(
                    &id,
                    &body,
                    r.try_get(2).map_err(err)?,
                    r.try_get(3).map_err(err)?,
                    r.try_get(4).map_err(err)?,
                    (by, at),
                    giver,
                )
            })
            .collect()
    }

    /// `UPDATE`s one grant with `sql` (`$1` the time, then `params`); how many rows changed.
    async fn update_grant(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, InboxError> {
        let client = self.grant_client().await?;
        let err = |e: tokio_postgres::Error| error::db(&self.inner.server, &e);
        let stmt = client.prepare_cached(sql).await.map_err(err)?;
        client.execute(&stmt, params).await.map_err(err)
    }

    pub(super) async fn add_grant_op(
        &self,
        grant: &Grant,
        principal: Option<&toolgate_core::Principal>,
        now: Timestamp,
    ) -> Result<StoredGrant, InboxError> {
        let (subject, issuer) = (
            principal.map(|p| p.subject.as_str()),
            principal.map(|p| p.issuer.as_str()),
        );
        let expires = i64::try_from(grant.expires_at()).unwrap_or(i64::MAX);
        let max = grant
            .max_calls()
            .map(|m| i64::try_from(m).unwrap_or(i64::MAX));
        let inserted = self
            .update_grant(
                "INSERT INTO grants (id, body, expires_at, max_calls, created_at, giver_subject, \
                 giver_issuer) VALUES ($1, $2, $3, $4, $5, $6, $7)",
                &[
                    &grant.id(),
                    &grant.source_text(),
                    &expires,
                    &max,
                    &now.as_millis(),
                    &subject,
                    &issuer,
                ],
            )
            .await;
        match inserted {
            Ok(_) => Ok(StoredGrant {
                grant: grant.clone(),
                created_at: now,
                uses: 0,
                last_used_at: None,
                revoked: None,
                principal: principal.cloned(),
            }),
            Err(e) if e.kind() == Kind::Duplicate => Err(InboxError::new(
                Kind::Duplicate,
                format!("a grant with the id `{}` exists already", grant.id()),
            )),
            Err(e) => Err(e),
        }
    }

    pub(super) async fn grants_op(&self) -> Result<Vec<StoredGrant>, InboxError> {
        self.read_grants(
            &format!("SELECT {GRANT_COLUMNS} FROM grants ORDER BY seq"),
            &[],
        )
        .await
    }

    pub(super) async fn live_grants_op(
        &self,
        now: Timestamp,
    ) -> Result<Vec<StoredGrant>, InboxError> {
        self.read_grants(
            &format!("SELECT {GRANT_COLUMNS} FROM grants WHERE {GRANT_LIVE} ORDER BY seq"),
            &[&now.as_millis()],
        )
        .await
    }

    pub(super) async fn use_grant_op(&self, id: &str, now: Timestamp) -> Result<bool, InboxError> {
        // One statement: racing updates queue on the row's lock and PostgreSQL re-checks
        // the `WHERE` against the row the winner left, so `max_calls` is never passed.
        let sql = format!(
            "UPDATE grants SET uses = uses + 1, last_used_at = $1 WHERE id = $2 AND {GRANT_LIVE}"
        );
        Ok(self.update_grant(&sql, &[&now.as_millis(), &id]).await? == 1)
    }

    pub(super) async fn revoke_grant_op(
        &self,
        id: &str,
        by: &str,
        now: Timestamp,
    ) -> Result<StoredGrant, RevokeError> {
        let sql = format!(
            "UPDATE grants SET revoked_at = $1, revoked_by = $2 WHERE id = $3 AND {GRANT_LIVE}"
        );
        let changed = self
            .update_grant(&sql, &[&now.as_millis(), &by, &id])
            .await?;
        let found = self
            .read_grants(
                &format!("SELECT {GRANT_COLUMNS} FROM grants WHERE id = $1"),
                &[&id],
            )
            .await?
            .pop();
        match found {
            None => Err(RevokeError::UnknownId(id.to_owned())),
            Some(g) if changed == 1 => Ok(g),
            Some(g) => Err(RevokeError::Ended {
                id: id.to_owned(),
                state: g.state(now),
            }),
        }
    }

    /// The engine's grant store on this inbox: a thread of its own drives connections of
    /// its own (made on its runtime, so a caller blocked waiting for a look-up never holds
    /// up the connection that answers it).
    pub(super) fn grant_store_op(&self) -> Result<Arc<dyn GrantStore>, InboxError> {
        let inner = Arc::clone(&self.inner);
        let name = format!("the inbox database `{}`", inner.server);
        let grants = InboxGrants::start_with(name, move || async move {
            let pool = Pool::builder(inner.connector.manager(inner.config.clone()))
                .max_size(GRANT_POOL)
                .runtime(Runtime::Tokio1)
                .wait_timeout(Some(inner.options.wait_timeout))
                .create_timeout(Some(inner.options.connect_timeout))
                .recycle_timeout(Some(inner.options.connect_timeout))
                .build()
                .map_err(|e| {
                    InboxError::new(
                        Kind::Backend,
                        format!(
                            "the connections to the inbox database `{}` cannot be set up: {e}",
                            inner.server
                        ),
                    )
                })?;
            let own = PostgresInbox {
                inner: Arc::new(Inner {
                    pool,
                    config: inner.config.clone(),
                    connector: inner.connector.clone(),
                    transport: inner.transport.clone(),
                    options: inner.options.clone(),
                    server: inner.server.clone(),
                    located: inner.located.clone(),
                    listener: tokio::sync::OnceCell::new(),
                }),
            };
            Ok(Arc::new(own) as Arc<dyn toolgate_inbox::InboxStore>)
        })?;
        Ok(Arc::new(grants))
    }
}
