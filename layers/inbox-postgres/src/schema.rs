//! The inbox's tables, created on connect (idempotently, under an advisory lock so that
//! instances starting together do not race), and checked against the schema version this
//! program writes.

use tokio_postgres::{Client, Transaction};
use toolgate_inbox::{InboxError, InboxErrorKind as Kind};

use crate::error;

/// The schema version this code writes (the `schema_version` row of `toolgate_inbox_meta`).
pub const SCHEMA_VERSION: i64 = 2;

/// The key of the transaction-scoped advisory lock taken while the schema is created or
/// checked ("TGIB", as SQLite's `application_id`).
pub const MIGRATION_LOCK: i64 = 0x5447_4942;

/// The `application` row of `toolgate_inbox_meta`.
pub const APPLICATION: &str = "toolgate-inbox";

/// The meta table: created first, it says whether (and which version of) the inbox exists.
pub const META_TABLE: &str = "
CREATE TABLE IF NOT EXISTS toolgate_inbox_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
)";

/// The schema, version 1. `{channel}` is replaced by the notification channel's name,
/// quoted as a string literal. Times are milliseconds since the Unix epoch by the clock of
/// the instance that wrote them, as in the SQLite backend; JSON is kept as text so that the
/// input's exact spelling survives (`jsonb` would normalise numbers and key order).
pub const SCHEMA_V1: &str = "
CREATE TABLE IF NOT EXISTS held_calls (
    interaction_id  TEXT PRIMARY KEY,
    call_id         TEXT NOT NULL,
    tool            TEXT NOT NULL,
    identities      TEXT NOT NULL,
    definition_hash TEXT NOT NULL,
    agent_profile   TEXT NOT NULL,
    agent_subagent  TEXT,
    input_json      TEXT NOT NULL,
    input_canonical TEXT NOT NULL,
    input_hash      TEXT NOT NULL,
    reasons         TEXT NOT NULL,
    run_mode        TEXT NOT NULL,
    run_background  BOOLEAN NOT NULL,
    created_at      BIGINT NOT NULL,
    expires_at      BIGINT NOT NULL,
    state           TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'denied', 'expired',
                        'cancelled', 'claimed', 'done', 'failed', 'unknown')),
    approver        TEXT,
    answer_key      TEXT,
    answer_approve  BOOLEAN,
    answer_reason   TEXT,
    answered_at     BIGINT,
    claim_token     TEXT,
    claimed_by      TEXT,
    claimed_at      BIGINT,
    result_json     TEXT,
    finished_at     BIGINT,
    updated_at      BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS held_calls_by_state ON held_calls (state, expires_at);
CREATE INDEX IF NOT EXISTS held_calls_by_created ON held_calls (created_at, interaction_id);
CREATE INDEX IF NOT EXISTS held_calls_claimed ON held_calls (claimed_by) WHERE state = 'claimed';
CREATE TABLE IF NOT EXISTS stored_policy (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    body        TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);
CREATE OR REPLACE FUNCTION toolgate_inbox_notify() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF TG_TABLE_NAME = 'held_calls' THEN
        IF TG_OP = 'INSERT' OR OLD.state IS DISTINCT FROM NEW.state THEN
            PERFORM pg_notify(TG_ARGV[0], NEW.state || ' ' || NEW.interaction_id);
        END IF;
    ELSE
        PERFORM pg_notify(TG_ARGV[0], 'policy ' || NEW.updated_at);
    END IF;
    RETURN NULL;
END
$fn$;
DROP TRIGGER IF EXISTS held_calls_notify ON held_calls;
CREATE TRIGGER held_calls_notify AFTER INSERT OR UPDATE ON held_calls
    FOR EACH ROW EXECUTE FUNCTION toolgate_inbox_notify({channel});
DROP TRIGGER IF EXISTS stored_policy_notify ON stored_policy;
CREATE TRIGGER stored_policy_notify AFTER INSERT OR UPDATE ON stored_policy
    FOR EACH ROW EXECUTE FUNCTION toolgate_inbox_notify({channel});
";

/// The upgrade from version 1 to version 2: the session and turn each call was held in
/// (R43). A version-1 inbox is upgraded in place, under the migration lock.
pub const SCHEMA_V2: &str = "
ALTER TABLE held_calls ADD COLUMN IF NOT EXISTS session_id TEXT;
ALTER TABLE held_calls ADD COLUMN IF NOT EXISTS turn_id TEXT;
CREATE INDEX IF NOT EXISTS held_calls_by_session ON held_calls (session_id, turn_id, created_at);
";

/// The index `find_open` reads: the open (`pending`, `approved`) calls by agent and input
/// hash, so that its size follows the open calls, not the history. Not a schema version of
/// its own: `migrate` creates it, under the migration lock, in an inbox that lacks it (a
/// program that does not know it ignores it).
pub const OPEN_INDEX: &str = "
CREATE INDEX IF NOT EXISTS held_calls_open ON held_calls (agent_profile, input_hash)
    WHERE state IN ('pending', 'approved');
";

/// The indexes the approval page's pages and change feed read (held-calls.md, "Pages of
/// held calls"): the calls of one state in the order they were held, and every call by its
/// last change. Like [`OPEN_INDEX`], not a schema version of its own: `migrate` creates
/// them, under the migration lock, in an inbox that lacks them.
pub const PAGE_INDEXES: &str = "
CREATE INDEX IF NOT EXISTS held_calls_by_state_created ON held_calls (state, created_at, interaction_id);
CREATE INDEX IF NOT EXISTS held_calls_by_updated ON held_calls (updated_at, interaction_id);
";

/// What `hold_unless_repeated` adds: when the ending of a call was told to a repeat of it
/// (R26), and the index it finds a call's repeats by. Like [`OPEN_INDEX`], not a schema
/// version of its own: `migrate` adds them, under the migration lock, to an inbox that
/// lacks them (a program that does not know them ignores them).
pub const REPEAT_COLUMN: &str = "
ALTER TABLE held_calls ADD COLUMN IF NOT EXISTS repeat_told_at BIGINT;
CREATE INDEX IF NOT EXISTS held_calls_by_input ON held_calls (agent_profile, input_hash, created_at);
";

/// What an answer records besides the approver's name: their verified principal, the `sub`
/// and `iss` of the identity-provider token they answered with (R47). Like [`OPEN_INDEX`],
/// not a schema version of its own: `migrate` adds them, under the migration lock, to an
/// inbox that lacks them (answers recorded before have none; a program that does not know
/// them ignores them).
pub(crate) const APPROVER_PRINCIPAL_COLUMNS: &str = "
ALTER TABLE held_calls ADD COLUMN IF NOT EXISTS approver_subject TEXT;
ALTER TABLE held_calls ADD COLUMN IF NOT EXISTS approver_issuer TEXT;
";

/// Four eyes (R51): how many distinct people must approve each held call, and the approvals
/// given so far to one that needs several (a JSON array as text, one element per person:
/// name, principal, time, key, and the input and definition hashes approved). Like
/// [`OPEN_INDEX`], not a schema version of its own: `migrate` adds them, under the migration
/// lock, to an inbox that lacks them (calls held before need one approval). A program that
/// does not know them ignores them, so every instance sharing an inbox must know them
/// before a rule asks for more than one approval: a call such a program approved with one
/// answer is never claimed by one that knows them.
pub(crate) const APPROVALS_COLUMNS: &str = "
ALTER TABLE held_calls ADD COLUMN IF NOT EXISTS approvals_needed INTEGER NOT NULL DEFAULT 1
    CHECK (approvals_needed BETWEEN 1 AND 5);
ALTER TABLE held_calls ADD COLUMN IF NOT EXISTS approvals_json TEXT;
";

/// The labels a held call's decision read (R49: the tool's and its session's, as JSON),
/// shown to the person; added like [`APPROVALS_COLUMNS`] to an inbox that lacks it (calls
/// held before show none).
pub(crate) const LABELS_COLUMN: &str =
    "ALTER TABLE held_calls ADD COLUMN IF NOT EXISTS labels_json TEXT;";

/// The shadow tenant policy (R46), one row beside `stored_policy`, announced on the same
/// channel (`policy <updatedAt>`, so a running gate's watch looks again). Like
/// [`OPEN_INDEX`], not a schema version of its own: `migrate` adds it, under the migration
/// lock, to an inbox that lacks it. `{channel}` is replaced by the inbox's channel.
pub(crate) const SHADOW_TABLE: &str = "
CREATE TABLE IF NOT EXISTS stored_shadow_policy (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    body        TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);
DROP TRIGGER IF EXISTS stored_shadow_policy_notify ON stored_shadow_policy;
CREATE TRIGGER stored_shadow_policy_notify AFTER INSERT OR UPDATE ON stored_shadow_policy
    FOR EACH ROW EXECUTE FUNCTION toolgate_inbox_notify({channel});
";

/// The grants people gave (R45), in the order given (`seq`). Like [`OPEN_INDEX`], not a
/// schema version of its own: `migrate` creates it, under the migration lock, in an inbox
/// that lacks it (a program that does not know it ignores it). A revocation is recorded
/// with who and when; a spent grant is one whose `uses` reached `max_calls` (`last_used_at`
/// says when); an expired one is past `expires_at`.
pub const GRANTS_TABLE: &str = "
CREATE TABLE IF NOT EXISTS grants (
    seq          BIGSERIAL PRIMARY KEY,
    id           TEXT NOT NULL UNIQUE,
    body         TEXT NOT NULL,
    expires_at   BIGINT NOT NULL,
    max_calls    BIGINT CHECK (max_calls IS NULL OR max_calls >= 1),
    uses         BIGINT NOT NULL DEFAULT 0,
    last_used_at BIGINT,
    created_at   BIGINT NOT NULL,
    revoked_by   TEXT,
    revoked_at   BIGINT,
    CHECK ((revoked_by IS NULL) = (revoked_at IS NULL))
);
";

/// Who gave each grant, by their verified principal. Added, under the migration lock, to an
/// inbox that lacks them; grants given before have none.
pub(crate) const GRANT_GIVER_COLUMNS: &str = "
ALTER TABLE grants ADD COLUMN IF NOT EXISTS giver_subject TEXT;
ALTER TABLE grants ADD COLUMN IF NOT EXISTS giver_issuer TEXT;
";

/// Approve with edits and the execution target (approval-page.md, "Approve with edits"):
/// the target each call was held with, as JSON, and beside `held_calls` the input each
/// edited approval replaced and who edited. Like [`OPEN_INDEX`], not a schema version of
/// its own: `migrate` adds them, under the migration lock, to an inbox that lacks them
/// (calls held before have no target; a program that does not know them ignores them).
pub(crate) const EDIT_AND_TARGET: &str = "
ALTER TABLE held_calls ADD COLUMN IF NOT EXISTS target_json TEXT;
CREATE TABLE IF NOT EXISTS held_edits (
    interaction_id           TEXT PRIMARY KEY,
    original_input_json      TEXT NOT NULL,
    original_input_canonical TEXT NOT NULL,
    original_input_hash      TEXT NOT NULL,
    edited_by                TEXT NOT NULL,
    edited_at                BIGINT NOT NULL,
    answer_key               TEXT
);
";

/// The index a repeat of an edited call is found by (R26): the agent repeats the input it
/// sent, which the edit replaced. Like [`OPEN_INDEX`], not a schema version of its own:
/// `migrate` creates it, under the migration lock, when missing.
pub(crate) const EDITS_INDEX: &str = "
CREATE INDEX IF NOT EXISTS held_edits_original ON held_edits (original_input_hash);
";

/// The approval questions open for their clients' retries (R47, protocol 2026-07-28), each
/// until its expiry, so that any replica answers a retry. Like [`OPEN_INDEX`], not a schema
/// version of its own: `migrate` creates it, under the migration lock, in an inbox that
/// lacks it.
pub(crate) const QUESTIONS_TABLE: &str = "
CREATE TABLE IF NOT EXISTS open_questions (
    key        TEXT PRIMARY KEY,
    body       TEXT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS open_questions_by_expiry ON open_questions (expires_at);
";

/// The nonces of signed callbacks taken (the Slack replay guard; approval-page.md,
/// "Answering from Slack"), each until when it is kept. Like [`OPEN_INDEX`], not a schema
/// version of its own: `migrate` creates it, under the migration lock, in an inbox that
/// lacks it.
pub(crate) const NONCES_TABLE: &str = "
CREATE TABLE IF NOT EXISTS seen_nonces (
    nonce    TEXT PRIMARY KEY,
    until_ms BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS seen_nonces_by_until ON seen_nonces (until_ms);
";

/// Where the inbox lives, as found or made by [`migrate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Located {
    /// The schema holding the tables.
    pub(crate) schema: String,
    /// The `LISTEN`/`NOTIFY` channel its triggers announce changes on.
    pub(crate) channel: String,
}

/// `"name"`, with embedded quotes doubled.
pub(crate) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `'text'`, with embedded quotes doubled (the server runs with
/// `standard_conforming_strings`, so backslashes are not special).
pub(crate) fn quote_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// The channel for an inbox in `schema`, at most 63 bytes.
pub(crate) fn channel_for(schema: &str) -> String {
    let mut channel = format!("toolgate_inbox.{schema}");
    while channel.len() > 63 {
        channel.pop();
    }
    channel
}

/// Creates the inbox (schema, tables, triggers, the version row) when it does not exist, and
/// checks it when it does. Refuses, changing nothing, a newer schema version, a schema that
/// holds a `held_calls` table of something else, a server older than PostgreSQL 11 and a
/// database whose encoding is not UTF-8.
pub(crate) async fn migrate(
    client: &mut Client,
    schema: Option<&str>,
    server: &str,
) -> Result<Located, InboxError> {
    let err = |e: tokio_postgres::Error| error::db(server, &e);
    check_server(client, server).await?;
    let tx = client.transaction().await.map_err(err)?;
    // INVARIANT: one instance at a time creates or checks the schema, so concurrent first
    // starts cannot race on `CREATE TABLE IF NOT EXISTS` (which is not atomic in PostgreSQL).
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(err)?;
    let current = select_schema(&tx, schema, server).await?;
    let located = if table_exists(&tx, &current, "toolgate_inbox_meta")
        .await
        .map_err(err)?
    {
        let channel = upgrade(&tx, &current, server).await?;
        Located {
            schema: current,
            channel,
        }
    } else {
        let channel = create(&tx, &current, server).await?;
        Located {
            schema: current,
            channel,
        }
    };
    tx.commit().await.map_err(err)?;
    Ok(located)
}

/// What an inbox of schema version 2 gains when it lacks it, in the order this program
/// learnt them: each a probe (`$1` the schema; true when it is there) and the statements that
/// add it. Each is looked up first: `ALTER TABLE` and `CREATE INDEX` lock the table against
/// writes even when nothing is missing.
const ADDITIONS: &[(&str, &str)] = &[
    (
        "SELECT EXISTS (SELECT 1 FROM pg_indexes WHERE schemaname = $1 \
         AND tablename = 'held_calls' AND indexname = 'held_calls_open')",
        OPEN_INDEX,
    ),
    (
        "SELECT (SELECT count(*) FROM pg_indexes WHERE schemaname = $1 AND tablename = 'held_calls' \
         AND indexname IN ('held_calls_by_state_created', 'held_calls_by_updated')) >= 2",
        PAGE_INDEXES,
    ),
    (
        "SELECT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = $1 \
         AND table_name = 'held_calls' AND column_name = 'repeat_told_at') \
         AND EXISTS (SELECT 1 FROM pg_indexes WHERE schemaname = $1 \
         AND tablename = 'held_calls' AND indexname = 'held_calls_by_input')",
        REPEAT_COLUMN,
    ),
    (
        "SELECT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = $1 \
         AND table_name = 'held_calls' AND column_name = 'approver_issuer')",
        APPROVER_PRINCIPAL_COLUMNS,
    ),
    (
        "SELECT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = $1 \
         AND table_name = 'held_calls' AND column_name = 'approvals_json')",
        APPROVALS_COLUMNS,
    ),
    (
        "SELECT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = $1 \
         AND table_name = 'held_calls' AND column_name = 'labels_json')",
        LABELS_COLUMN,
    ),
    (
        "SELECT EXISTS (SELECT 1 FROM pg_tables WHERE schemaname = $1 AND tablename = 'grants')",
        GRANTS_TABLE,
    ),
    (
        "SELECT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = $1 \
         AND table_name = 'grants' AND column_name = 'giver_subject')",
        GRANT_GIVER_COLUMNS,
    ),
    (
        "SELECT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = $1 \
         AND table_name = 'held_calls' AND column_name = 'target_json') \
         AND EXISTS (SELECT 1 FROM pg_tables WHERE schemaname = $1 \
         AND tablename = 'held_edits')",
        EDIT_AND_TARGET,
    ),
    (
        "SELECT EXISTS (SELECT 1 FROM pg_indexes WHERE schemaname = $1 \
         AND tablename = 'held_edits' AND indexname = 'held_edits_original')",
        EDITS_INDEX,
    ),
    (
        "SELECT EXISTS (SELECT 1 FROM pg_tables WHERE schemaname = $1 AND tablename = 'seen_nonces')",
        NONCES_TABLE,
    ),
    (
        "SELECT EXISTS (SELECT 1 FROM pg_tables WHERE schemaname = $1 AND tablename = 'open_questions')",
        QUESTIONS_TABLE,
    ),
];

/// The server is one the inbox runs on: PostgreSQL 11 or newer, in UTF-8.
async fn check_server(client: &Client, server: &str) -> Result<(), InboxError> {
    let err = |e: tokio_postgres::Error| error::db(server, &e);
    let row = client
        .query_one(
            "SELECT current_setting('server_version_num')::int, current_setting('server_encoding')",
            &[],
        )
        .await
        .map_err(err)?;
    let version: i32 = row.try_get(0).map_err(err)?;
    let encoding: String = row.try_get(1).map_err(err)?;
    if version < 110_000 {
        return Err(InboxError::new(
            Kind::Unavailable,
            format!(
                "the inbox database `{server}` runs PostgreSQL {version}; the inbox needs 11 or newer"
            ),
        ));
    }
    if !matches!(encoding.as_str(), "UTF8" | "SQL_ASCII") {
        return Err(InboxError::new(
            Kind::Unavailable,
            format!(
                "the inbox database `{server}` uses the encoding `{encoding}`; the inbox needs `UTF8`"
            ),
        ));
    }
    Ok(())
}

/// The schema the inbox lives in: `schema`, created when missing and selected by the
/// connection's `search_path`, else the connection's current one.
async fn select_schema(
    tx: &Transaction<'_>,
    schema: Option<&str>,
    server: &str,
) -> Result<String, InboxError> {
    let err = |e: tokio_postgres::Error| error::db(server, &e);
    if let Some(schema) = schema {
        tx.batch_execute(&format!(
            "CREATE SCHEMA IF NOT EXISTS {}",
            quote_ident(schema)
        ))
        .await
        .map_err(err)?;
    }
    let current: Option<String> = tx
        .query_one("SELECT current_schema()", &[])
        .await
        .and_then(|r| r.try_get(0))
        .map_err(err)?;
    let Some(current) = current else {
        return Err(InboxError::new(
            Kind::Schema,
            format!(
                "the inbox database `{server}` has no schema to keep the inbox in (check `search_path`)"
            ),
        ));
    };
    if let Some(schema) = schema
        && schema != current
    {
        return Err(InboxError::new(
            Kind::Schema,
            format!(
                "the inbox database `{server}` did not select the schema `{schema}` (the connection's `search_path` selects `{current}`)"
            ),
        ));
    }
    Ok(current)
}

async fn table_exists(
    tx: &Transaction<'_>,
    current: &str,
    table: &str,
) -> Result<bool, tokio_postgres::Error> {
    tx.query_one(
        "SELECT EXISTS (SELECT 1 FROM pg_tables WHERE schemaname = $1 AND tablename = $2)",
        &[&current, &table],
    )
    .await
    .and_then(|r| r.try_get::<_, bool>(0))
}

fn foreign(current: &str, server: &str) -> InboxError {
    InboxError::new(
        Kind::Schema,
        format!(
            "the schema `{current}` of `{server}` holds tables that are not a toolgate inbox; they were left unchanged"
        ),
    )
}

/// Checks the toolgate inbox in `current` and adds what this program knows and it lacks
/// (schema version 1 → 2, then [`ADDITIONS`] and the shadow policy's table); its `NOTIFY`
/// channel.
async fn upgrade(tx: &Transaction<'_>, current: &str, server: &str) -> Result<String, InboxError> {
    let err = |e: tokio_postgres::Error| error::db(server, &e);
    let rows = tx
        .query(
            "SELECT key, value FROM toolgate_inbox_meta WHERE key IN ('application', 'schema_version', 'notify_channel')",
            &[],
        )
        .await
        .map_err(err)?;
    let mut meta = std::collections::HashMap::new();
    for row in rows {
        let key: String = row.try_get(0).map_err(err)?;
        let value: String = row.try_get(1).map_err(err)?;
        meta.insert(key, value);
    }
    if meta.get("application").map(String::as_str) != Some(APPLICATION) {
        return Err(foreign(current, server));
    }
    let stored: i64 = meta
        .get("schema_version")
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| foreign(current, server))?;
    if stored > SCHEMA_VERSION {
        return Err(InboxError::new(
            Kind::Schema,
            format!(
                "the inbox in schema `{current}` of `{server}` has schema version {stored}, newer than this program's {SCHEMA_VERSION}"
            ),
        ));
    }
    if stored == 1 {
        tx.batch_execute(SCHEMA_V2).await.map_err(err)?;
        tx.execute(
            "UPDATE toolgate_inbox_meta SET value = $1 WHERE key = 'schema_version'",
            &[&SCHEMA_VERSION.to_string()],
        )
        .await
        .map_err(err)?;
    } else if stored < SCHEMA_VERSION {
        return Err(InboxError::new(
            Kind::Schema,
            format!(
                "the inbox in schema `{current}` of `{server}` has schema version {stored}, which this program cannot upgrade"
            ),
        ));
    }
    for (probe, statements) in ADDITIONS {
        let present: bool = tx
            .query_one(*probe, &[&current])
            .await
            .and_then(|r| r.try_get(0))
            .map_err(err)?;
        if !present {
            tx.batch_execute(statements).await.map_err(err)?;
        }
    }
    let channel = meta
        .get("notify_channel")
        .cloned()
        .ok_or_else(|| foreign(current, server))?;
    if !table_exists(tx, current, "stored_shadow_policy")
        .await
        .map_err(err)?
    {
        tx.batch_execute(&SHADOW_TABLE.replace("{channel}", &quote_literal(&channel)))
            .await
            .map_err(err)?;
    }
    Ok(channel)
}

/// Creates a new inbox in `current`, which must hold none of its tables; its `NOTIFY` channel.
async fn create(tx: &Transaction<'_>, current: &str, server: &str) -> Result<String, InboxError> {
    let err = |e: tokio_postgres::Error| error::db(server, &e);
    if table_exists(tx, current, "held_calls").await.map_err(err)?
        || table_exists(tx, current, "stored_policy")
            .await
            .map_err(err)?
    {
        return Err(foreign(current, server));
    }
    let channel = channel_for(current);
    tx.batch_execute(META_TABLE).await.map_err(err)?;
    tx.batch_execute(&SCHEMA_V1.replace("{channel}", &quote_literal(&channel)))
        .await
        .map_err(err)?;
    tx.batch_execute(SCHEMA_V2).await.map_err(err)?;
    for (_, statements) in ADDITIONS {
        tx.batch_execute(statements).await.map_err(err)?;
    }
    tx.batch_execute(&SHADOW_TABLE.replace("{channel}", &quote_literal(&channel)))
        .await
        .map_err(err)?;
    let version = SCHEMA_VERSION.to_string();
    tx.execute(
        "INSERT INTO toolgate_inbox_meta (key, value) VALUES ('application', $1), \
         ('schema_version', $2), ('notify_channel', $3), \
         ('created_at', to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'))",
        &[&APPLICATION, &version, &channel],
    )
    .await
    .map_err(err)?;
    Ok(channel)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_fit_in_an_identifier() {
        assert_eq!(channel_for("public"), "toolgate_inbox.public");
        assert_eq!(channel_for(&"s".repeat(100)).len(), 63);
        let cut = channel_for(&"é".repeat(40));
        assert!(
            cut.len() <= 63 && cut.ends_with('é'),
            "cut at a character: {cut}"
        );
    }

    #[test]
    fn quoting_doubles_quotes() {
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
        assert_eq!(quote_literal("it's"), "'it''s'");
    }
}
