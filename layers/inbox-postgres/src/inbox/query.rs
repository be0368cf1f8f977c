//! The PostgreSQL statements of the paged, filtered reads ([`toolgate_inbox::HeldQuery`];
//! held-calls.md, "Pages of held calls"): one `SELECT` per page, one `count(*)`, and the
//! change feed by `updated_at`, over the indexes [`crate::schema::PAGE_INDEXES`] adds. What
//! each filter means is `HeldQuery::matches`'s; the SQLite backend's statements say the
//! same.

use tokio_postgres::types::ToSql;
use toolgate_inbox::{
    HeldPage, HeldQuery, HeldRecord, InboxError, Listing, Order, SqlDialect, Timestamp,
};

use super::PostgresInbox;
use super::ops::{COLUMNS, read_row};

/// ASCII letters only, as `HeldQuery::matches` and SQLite's `lower` fold (PostgreSQL's
/// `lower` folds every letter).
const FOLD: &str =
    "translate(input_json, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz')";

/// One parameter of a statement being built.
enum Param {
    Text(String),
    Int(i64),
}

impl Param {
    fn sql(&self) -> &(dyn ToSql + Sync) {
        match self {
            Param::Text(t) => t,
            Param::Int(i) => i,
        }
    }
}

/// The `WHERE` clauses of `q`'s filters (without its cursor) and their parameters.
fn filters(q: &HeldQuery) -> (Vec<String>, Vec<Param>) {
    let mut clauses = vec![String::from(match q.listing {
        Listing::Pending => "state = 'pending'",
        Listing::History => "state <> 'pending'",
    })];
    let mut params = Vec::new();
    let mut push = |clause: &str, value: Param, params: &mut Vec<Param>| {
        params.push(value);
        clauses.push(clause.replace('?', &format!("${}", params.len())));
    };
    if let Some(a) = &q.agent {
        push(
            "(agent_profile = ? OR agent_subagent = ?)",
            Param::Text(a.clone()),
            &mut params,
        );
    }
    if let Some(t) = &q.tool {
        push("tool = ?", Param::Text(t.clone()), &mut params);
    }
    if let Some(s) = &q.server {
        push(
            "identities::jsonb @> jsonb_build_array(jsonb_build_object('source', ?::text))",
            Param::Text(s.clone()),
            &mut params,
        );
    }
    if let Some(s) = &q.session {
        push("session_id = ?", Param::Text(s.clone()), &mut params);
    }
    if let Some(k) = &q.reason_source {
        push(
            "reasons::jsonb @> jsonb_build_array(jsonb_build_object('source', ?::text))",
            Param::Text(k.clone()),
            &mut params,
        );
    }
    if let Some(t) = q.held_before {
        push("created_at <= ?", Param::Int(t.as_millis()), &mut params);
    }
    if let Some(t) = q.held_after {
        push("created_at >= ?", Param::Int(t.as_millis()), &mut params);
    }
    if let Some(t) = q.text_lower() {
        push(
            &format!("strpos({FOLD}, ?::text) > 0"),
            Param::Text(t),
            &mut params,
        );
    }
    if let Some(v) = &q.visible_to {
        let clause = v.sql(SqlDialect::Postgres, &mut |text| {
            params.push(Param::Text(text));
            format!("${}", params.len())
        });
        clauses.push(clause);
    }
    (clauses, params)
}

impl PostgresInbox {
    async fn read_rows(&self, sql: &str, params: &[Param]) -> Result<Vec<HeldRecord>, InboxError> {
        let client = self.client().await?;
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(Param::sql).collect();
        let rows = self.query(&client, sql, &refs).await?;
        rows.iter()
            .map(|row| {
                read_row(row).map_err(|why| {
                    let id: String = row.try_get(0).unwrap_or_else(|_| String::from("?"));
                    self.record_err(&id, why)
                })
            })
            .collect()
    }

    pub(super) async fn query_held_op(&self, q: &HeldQuery) -> Result<HeldPage, InboxError> {
        let (mut clauses, mut params) = filters(q);
        let (cmp, dir) = match q.order {
            Order::OldestFirst => (">", "ASC"),
            Order::NewestFirst => ("<", "DESC"),
        };
        if let Some(c) = &q.after {
            params.push(Param::Int(c.created_at.as_millis()));
            params.push(Param::Text(c.id.clone()));
            let n = params.len();
            clauses.push(format!(
                "(created_at, interaction_id) {cmp} (${}, ${n})",
                n - 1
            ));
        }
        let size = q.page_size();
        let sql = format!(
            "SELECT {COLUMNS} FROM held_calls WHERE {} ORDER BY created_at {dir}, interaction_id {dir} LIMIT {}",
            clauses.join(" AND "),
            size + 1
        );
        Ok(HeldPage::cut(self.read_rows(&sql, &params).await?, size))
    }

    pub(super) async fn count_held_op(&self, q: &HeldQuery) -> Result<u64, InboxError> {
        let (clauses, params) = filters(q);
        let sql = format!(
            "SELECT count(*) FROM held_calls WHERE {}",
            clauses.join(" AND ")
        );
        let client = self.client().await?;
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(Param::sql).collect();
        let rows = self.query(&client, &sql, &refs).await?;
        let n: i64 = rows
            .first()
            .map(|r| r.try_get(0))
            .transpose()
            .map_err(|e| self.err(&e))?
            .unwrap_or(0);
        Ok(u64::try_from(n).unwrap_or(0))
    }

    pub(super) async fn changed_since_op(
        &self,
        since: Timestamp,
        limit: usize,
    ) -> Result<Vec<HeldRecord>, InboxError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM held_calls WHERE updated_at >= $1 \
             ORDER BY updated_at, interaction_id LIMIT $2"
        );
        self.read_rows(
            &sql,
            &[
                Param::Int(since.as_millis()),
                Param::Int(i64::try_from(limit).unwrap_or(i64::MAX)),
            ],
        )
        .await
    }
}
