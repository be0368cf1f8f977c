//! The SQLite statements of the paged, filtered reads ([`crate::HeldQuery`]; held-calls.md,
//! "Pages of held calls"): one `SELECT` per page, one `count(*)`, and the change feed by
//! `updated_at`, each over an index ([`PAGE_INDEXES`]). What each filter means is
//! [`HeldQuery::matches`]'s.

use rusqlite::{Connection, ErrorCode, types::Value as Sql};

use super::{COLUMNS, Inner, read_row};
use crate::error::InboxError;
use crate::model::{HeldRecord, Timestamp};
use crate::query::{HeldPage, HeldQuery, Listing, Order, SqlDialect};

/// The indexes the pages and the change feed read: the calls of one state in the order
/// they were held, and every call by its last change. Not a schema version of their own:
/// created, when missing, each time a file is opened (a file opened read-only that lacks
/// them is read without them, by a scan).
pub const PAGE_INDEXES: &str = "
CREATE INDEX IF NOT EXISTS held_calls_by_state_created ON held_calls (state, created_at, interaction_id);
CREATE INDEX IF NOT EXISTS held_calls_by_updated ON held_calls (updated_at, interaction_id);
";

/// Adds [`PAGE_INDEXES`] when missing (looked up first, so a current file is not written
/// to); a read-only file keeps working without them.
pub(super) fn add_page_indexes(inner: &Inner, conn: &Connection) -> Result<(), InboxError> {
    let have: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'index' \
             AND name IN ('held_calls_by_state_created', 'held_calls_by_updated')",
            [],
            |r| r.get(0),
        )
        .map_err(|e| inner.err(e))?;
    if have == 2 {
        return Ok(());
    }
    match conn.execute_batch(PAGE_INDEXES) {
        Ok(()) => Ok(()),
        Err(e) if e.sqlite_error_code() == Some(ErrorCode::ReadOnly) => Ok(()),
        Err(e) => Err(inner.err(e)),
    }
}

/// The `WHERE` clause of `q`'s filters (without its cursor) and its parameters.
fn filters(q: &HeldQuery) -> (Vec<String>, Vec<Sql>) {
    let mut clauses = vec![String::from(match q.listing {
        Listing::Pending => "state = 'pending'",
        Listing::History => "state <> 'pending'",
    })];
    let mut params: Vec<Sql> = Vec::new();
    let mut push = |clause: &str, value: Sql, params: &mut Vec<Sql>| {
        params.push(value);
        clauses.push(clause.replace('?', &format!("?{}", params.len())));
    };
    if let Some(a) = &q.agent {
        push(
            "(agent_profile = ? OR agent_subagent = ?)",
            Sql::Text(a.clone()),
            &mut params,
        );
    }
    if let Some(t) = &q.tool {
        push("tool = ?", Sql::Text(t.clone()), &mut params);
    }
    if let Some(s) = &q.server {
        push(
            "EXISTS (SELECT 1 FROM json_each(held_calls.identities) WHERE json_extract(value, '$.source') = ?)",
            Sql::Text(s.clone()),
            &mut params,
        );
    }
    if let Some(s) = &q.session {
        push("session_id = ?", Sql::Text(s.clone()), &mut params);
    }
    if let Some(k) = &q.reason_source {
        push(
            "EXISTS (SELECT 1 FROM json_each(held_calls.reasons) WHERE json_extract(value, '$.source') = ?)",
            Sql::Text(k.clone()),
            &mut params,
        );
    }
    if let Some(t) = q.held_before {
        push("created_at <= ?", Sql::Integer(t.as_millis()), &mut params);
    }
    if let Some(t) = q.held_after {
        push("created_at >= ?", Sql::Integer(t.as_millis()), &mut params);
    }
    if let Some(t) = q.text_lower() {
        // SQLite's `lower` folds ASCII only, as `HeldQuery::matches` does.
        push("instr(lower(input_json), ?) > 0", Sql::Text(t), &mut params);
    }
    if let Some(v) = &q.visible_to {
        let clause = v.sql(SqlDialect::Sqlite, &mut |text| {
            params.push(Sql::Text(text));
            format!("?{}", params.len())
        });
        clauses.push(clause);
    }
    (clauses, params)
}

fn rows(
    inner: &Inner,
    conn: &Connection,
    sql: &str,
    params: &[Sql],
) -> Result<Vec<HeldRecord>, InboxError> {
    let mut stmt = conn.prepare_cached(sql).map_err(|e| inner.err(e))?;
    let found = stmt
        .query_map(rusqlite::params_from_iter(params.iter()), read_row)
        .map_err(|e| inner.err(e))?;
    let mut out = Vec::new();
    for row in found {
        match row.map_err(|e| inner.err(e))? {
            Ok(r) => out.push(r),
            Err(why) => return Err(inner.record_err("?", why)),
        }
    }
    Ok(out)
}

pub(super) fn query_op(
    inner: &Inner,
    conn: &mut Connection,
    q: &HeldQuery,
) -> Result<HeldPage, InboxError> {
    let (sql, params) = page_sql(q);
    Ok(HeldPage::cut(
        rows(inner, conn, &sql, &params)?,
        q.page_size(),
    ))
}

/// The statement of one page of `q` (one more than its size, to know whether a next page
/// exists) and its parameters.
fn page_sql(q: &HeldQuery) -> (String, Vec<Sql>) {
    let (mut clauses, mut params) = filters(q);
    let (cmp, dir) = match q.order {
        Order::OldestFirst => (">", "ASC"),
        Order::NewestFirst => ("<", "DESC"),
    };
    if let Some(c) = &q.after {
        params.push(Sql::Integer(c.created_at.as_millis()));
        params.push(Sql::Text(c.id.clone()));
        let n = params.len();
        clauses.push(format!(
            "(created_at, interaction_id) {cmp} (?{}, ?{n})",
            n - 1
        ));
    }
    let sql = format!(
        "SELECT {COLUMNS} FROM held_calls WHERE {} ORDER BY created_at {dir}, interaction_id {dir} LIMIT {}",
        clauses.join(" AND "),
        q.page_size() + 1
    );
    (sql, params)
}

pub(super) fn count_op(
    inner: &Inner,
    conn: &mut Connection,
    q: &HeldQuery,
) -> Result<u64, InboxError> {
    let (clauses, params) = filters(q);
    let sql = format!(
        "SELECT count(*) FROM held_calls WHERE {}",
        clauses.join(" AND ")
    );
    let n: i64 = conn
        .prepare_cached(&sql)
        .and_then(|mut s| s.query_row(rusqlite::params_from_iter(params.iter()), |r| r.get(0)))
        .map_err(|e| inner.err(e))?;
    Ok(u64::try_from(n).unwrap_or(0))
}

pub(super) fn changed_since_op(
    inner: &Inner,
    conn: &mut Connection,
    since: Timestamp,
    limit: usize,
) -> Result<Vec<HeldRecord>, InboxError> {
    let sql = format!(
        "SELECT {COLUMNS} FROM held_calls WHERE updated_at >= ?1 \
         ORDER BY updated_at, interaction_id LIMIT ?2"
    );
    rows(
        inner,
        conn,
        &sql,
        &[
            Sql::Integer(since.as_millis()),
            Sql::Integer(i64::try_from(limit).unwrap_or(i64::MAX)),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::VisibleTo;
    use crate::{SqliteInbox, SqliteOptions};
    use toolgate_engine::approvers::ToolSelector;
    use toolgate_engine::policy::Glob;

    /// A page of what an approver with selectors may see is one statement that reads the
    /// index of the calls of one state in the order held (the selectors are a condition on
    /// each row it reads, never a scan of the whole table).
    #[test]
    fn issue24_an_approvers_page_reads_the_index_of_one_state_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("inbox.db");
        drop(SqliteInbox::open(&path, SqliteOptions::default()).unwrap());
        let conn = Connection::open(&path).unwrap();
        let q = HeldQuery {
            visible_to: Some(VisibleTo {
                selectors: vec![ToolSelector {
                    server: Some(Glob::new("git*")),
                    agent: Some(Glob::new("support")),
                    ..Default::default()
                }],
                approver: "bob".into(),
            }),
            ..HeldQuery::pending()
        };
        let (sql, params) = page_sql(&q);
        let plan: Vec<String> = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .unwrap()
            .query_map(rusqlite::params_from_iter(params.iter()), |r| {
                r.get::<_, String>(3)
            })
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert!(
            plan.iter()
                .any(|step| step.contains("USING INDEX held_calls_by_state_created")),
            "{plan:?}"
        );
        assert!(
            !plan.iter().any(|step| step.contains("TEMP B-TREE")),
            "no sort: the index gives the order, {plan:?}"
        );
    }
}
