//! The SQLite inbox's schema: its tables and indexes (created on open, upgraded in place,
//! checked by `user_version` and `application_id`), as the PostgreSQL backend's `schema.rs`.

use super::*;

/// The schema version this code writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = 2;

/// `PRAGMA application_id` of a toolgate inbox ("TGIB").
pub const APPLICATION_ID: i64 = 0x5447_4942;

/// The schema, version 1.
pub const SCHEMA_V1: &str = "
CREATE TABLE held_calls (
    interaction_id  TEXT PRIMARY KEY NOT NULL,
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
    run_background  INTEGER NOT NULL CHECK (run_background IN (0, 1)),
    created_at      INTEGER NOT NULL,
    expires_at      INTEGER NOT NULL,
    state           TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'denied', 'expired',
                        'cancelled', 'claimed', 'done', 'failed', 'unknown')),
    approver        TEXT,
    answer_key      TEXT,
    answer_approve  INTEGER CHECK (answer_approve IN (0, 1)),
    answer_reason   TEXT,
    answered_at     INTEGER,
    claim_token     TEXT,
    claimed_by      TEXT,
    claimed_at      INTEGER,
    result_json     TEXT,
    finished_at     INTEGER,
    updated_at      INTEGER NOT NULL
);
CREATE INDEX held_calls_by_state ON held_calls (state, expires_at);
CREATE INDEX held_calls_by_created ON held_calls (created_at);
CREATE TABLE stored_policy (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    body        TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);
";

/// The upgrade from version 1 to version 2: the session and turn each call was held in
/// (R43). A version-1 file is upgraded in place when it is opened.
pub const SCHEMA_V2: &str = "
ALTER TABLE held_calls ADD COLUMN session_id TEXT;
ALTER TABLE held_calls ADD COLUMN turn_id TEXT;
CREATE INDEX held_calls_by_session ON held_calls (session_id, turn_id, created_at);
";

/// The index [`HeldCalls::find_open`](crate::HeldCalls::find_open) reads: the open (`pending`, `approved`) calls by
/// agent and input hash, so that its size follows the open calls, not the history. Not a
/// schema version of its own: it is created, when missing, each time a version-2 file is
/// opened (a no-op read when it exists), and a program that does not know it ignores it.
pub const OPEN_INDEX: &str = "
CREATE INDEX IF NOT EXISTS held_calls_open ON held_calls (agent_profile, input_hash)
    WHERE state IN ('pending', 'approved');
";

/// What [`HeldCalls::hold_unless_repeated`](crate::HeldCalls::hold_unless_repeated) adds to a version-2 file: when the ending of
/// a call was told to a repeat of it (R26), and the index it finds a call's repeats by (all
/// of them, not only the open ones). Like [`OPEN_INDEX`], not a schema version of its own:
/// added, when missing, each time a version-2 file is opened; a program that does not know
/// them ignores them.
pub const REPEAT_COLUMN: &str = "
ALTER TABLE held_calls ADD COLUMN repeat_told_at INTEGER;
";

/// The grants people gave (R45), in the order given (`seq`). Like [`OPEN_INDEX`], not a
/// schema version of its own: created, when missing, each time a version-2 file is opened
/// (a program that does not know it ignores it). A revocation is recorded with who and when;
/// a spent grant is one whose `uses` reached `max_calls` (`last_used_at` says when); an
/// expired one is past `expires_at`.
pub const GRANTS_TABLE: &str = "
CREATE TABLE IF NOT EXISTS grants (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    id           TEXT NOT NULL UNIQUE,
    body         TEXT NOT NULL,
    expires_at   INTEGER NOT NULL,
    max_calls    INTEGER CHECK (max_calls IS NULL OR max_calls >= 1),
    uses         INTEGER NOT NULL DEFAULT 0,
    last_used_at INTEGER,
    created_at   INTEGER NOT NULL,
    revoked_by   TEXT,
    revoked_at   INTEGER,
    CHECK ((revoked_by IS NULL) = (revoked_at IS NULL))
);
";

/// What an answer records besides the approver's name: their verified principal, the
/// `sub` and `iss` of the identity-provider token they answered with (R47). Like
/// [`OPEN_INDEX`], not a schema version of its own: added, when missing, each time a
/// version-2 file is opened (answers recorded before have none); a program that does not
/// know them ignores them.
pub(crate) const APPROVER_PRINCIPAL_COLUMNS: &str = "
ALTER TABLE held_calls ADD COLUMN approver_subject TEXT;
ALTER TABLE held_calls ADD COLUMN approver_issuer TEXT;
";

/// Who gave each grant, by their verified principal (a grant given with an
/// identity-provider token records its `sub` and `iss`, as an approval does). Added, when
/// missing, each time a file is opened; grants given before have none.
pub(crate) const GRANT_GIVER_COLUMNS: &str = "
ALTER TABLE grants ADD COLUMN giver_subject TEXT;
ALTER TABLE grants ADD COLUMN giver_issuer TEXT;
";

/// Four eyes (R51): how many distinct people must approve each held call, and the
/// approvals given so far to one that needs several (a JSON array, one element per person:
/// name, principal, time, key, and the input and definition hashes approved). Like
/// [`OPEN_INDEX`], not a schema version of its own: added, when missing, each time a
/// version-2 file is opened; calls held before need one approval. A program that does not
/// know them ignores them, so every replica sharing a file must know them before a rule
/// asks for more than one approval: a call such a program approved with one answer is
/// never claimed by one that knows them.
pub(crate) const APPROVALS_COLUMNS: &str = "
ALTER TABLE held_calls ADD COLUMN approvals_needed INTEGER NOT NULL DEFAULT 1
    CHECK (approvals_needed BETWEEN 1 AND 5);
ALTER TABLE held_calls ADD COLUMN approvals_json TEXT;
";

/// The labels a held call's decision read (R49: the tool's and its session's, as JSON), shown
/// to the person; added to a file that lacks it when opened (calls held before show none).
pub(crate) const LABELS_COLUMN: &str = "ALTER TABLE held_calls ADD COLUMN labels_json TEXT;";

/// The index of every held call by agent, input hash and age (see [`REPEAT_COLUMN`]).
pub const REPEAT_INDEX: &str = "
CREATE INDEX IF NOT EXISTS held_calls_by_input ON held_calls (agent_profile, input_hash, created_at);
";

/// The shadow tenant policy (R46), one row beside `stored_policy`. Like [`OPEN_INDEX`], not
/// a schema version of its own: created, when missing, each time a version-2 file is
/// opened; a program that does not know it ignores it.
pub(crate) const SHADOW_TABLE: &str = "
CREATE TABLE IF NOT EXISTS stored_shadow_policy (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    body        TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);
";

impl Inner {
    pub(super) fn migrate(&self, conn: &mut Connection) -> Result<(), InboxError> {
        let version = user_version(conn).map_err(|e| self.err(e))?;
        if version == SCHEMA_VERSION {
            self.check_application_id(conn)?;
            conn.execute_batch(OPEN_INDEX).map_err(|e| self.err(e))?;
            conn.execute_batch(super::edit::EDITS_TABLE)
                .map_err(|e| self.err(e))?;
            self.add_shadow_table(conn)?;
            self.add_repeat_column(conn)?;
            self.add_principal_columns(conn)?;
            self.add_approvals_columns(conn)?;
            self.add_columns(conn, "held_calls", "labels_json", LABELS_COLUMN)?;
            self.add_columns(conn, "grants", "giver_subject", GRANT_GIVER_COLUMNS)?;
            return query::add_page_indexes(self, conn);
        }
        if version > SCHEMA_VERSION {
            return Err(self.newer(version));
        }
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        // Another process may have created the schema while we waited for the lock.
        let version = user_version(&tx).map_err(|e| self.err(e))?;
        if version == 0 {
            let objects: i64 = tx
                .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
                .map_err(|e| self.err(e))?;
            if objects > 0 {
                return Err(self.foreign());
            }
            tx.execute_batch(SCHEMA_V1).map_err(|e| self.err(e))?;
            tx.execute_batch(SCHEMA_V2).map_err(|e| self.err(e))?;
            tx.execute_batch(OPEN_INDEX).map_err(|e| self.err(e))?;
            tx.pragma_update(None, "application_id", APPLICATION_ID)
                .map_err(|e| self.err(e))?;
            tx.pragma_update(None, "user_version", SCHEMA_VERSION)
                .map_err(|e| self.err(e))?;
        } else if version == 1 {
            // Only a toolgate inbox is upgraded; anything else is left unchanged.
            self.check_application_id(&tx)?;
            tx.execute_batch(SCHEMA_V2).map_err(|e| self.err(e))?;
            tx.execute_batch(OPEN_INDEX).map_err(|e| self.err(e))?;
            tx.pragma_update(None, "user_version", SCHEMA_VERSION)
                .map_err(|e| self.err(e))?;
        } else if version > SCHEMA_VERSION {
            return Err(self.newer(version));
        }
        tx.commit().map_err(|e| self.err(e))?;
        self.check_application_id(conn)?;
        conn.execute_batch(super::edit::EDITS_TABLE)
            .map_err(|e| self.err(e))?;
        self.add_shadow_table(conn)?;
        self.add_repeat_column(conn)?;
        self.add_principal_columns(conn)?;
        self.add_approvals_columns(conn)?;
        self.add_columns(conn, "held_calls", "labels_json", LABELS_COLUMN)?;
        self.add_columns(conn, "grants", "giver_subject", GRANT_GIVER_COLUMNS)?;
        query::add_page_indexes(self, conn)
    }

    /// Adds `columns` (SQL) to a file whose `table` lacks `probe` (read first: a file that
    /// has it is not written to; looked up again under the write lock, since another process
    /// may have added them meanwhile).
    pub(super) fn add_columns(
        &self,
        conn: &mut Connection,
        table: &str,
        probe: &str,
        columns: &str,
    ) -> Result<(), InboxError> {
        let has = |c: &Connection| -> rusqlite::Result<bool> {
            c.query_row(
                "SELECT count(*) FROM pragma_table_info(?1) WHERE name = ?2",
                [table, probe],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n > 0)
        };
        if has(conn).map_err(|e| self.err(e))? {
            return Ok(());
        }
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        if !has(&tx).map_err(|e| self.err(e))? {
            tx.execute_batch(columns).map_err(|e| self.err(e))?;
        }
        tx.commit().map_err(|e| self.err(e))
    }

    /// Adds [`APPROVALS_COLUMNS`] to a file that lacks them (read first: a file that has
    /// them is not written to).
    pub(super) fn add_approvals_columns(&self, conn: &mut Connection) -> Result<(), InboxError> {
        self.add_columns(conn, "held_calls", "approvals_json", APPROVALS_COLUMNS)
    }

    /// Adds [`APPROVER_PRINCIPAL_COLUMNS`] to a file that lacks them (read first: a file
    /// that has them is not written to).
    pub(super) fn add_principal_columns(&self, conn: &mut Connection) -> Result<(), InboxError> {
        self.add_columns(
            conn,
            "held_calls",
            "approver_subject",
            APPROVER_PRINCIPAL_COLUMNS,
        )
    }

    /// Adds [`SHADOW_TABLE`] to a file that lacks it (read first: a file that has it is not
    /// written to, so a read-only open of a current file stays read-only).
    pub(super) fn add_shadow_table(&self, conn: &mut Connection) -> Result<(), InboxError> {
        let has: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'stored_shadow_policy'",
                [],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))?;
        if has == 0 {
            conn.execute_batch(SHADOW_TABLE).map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    /// Adds [`REPEAT_COLUMN`] and [`REPEAT_INDEX`] to a file that lacks them (read first: a
    /// file that has them is not written to).
    pub(super) fn add_repeat_column(&self, conn: &mut Connection) -> Result<(), InboxError> {
        edit::add_target_column(self, conn)?;
        let has = |c: &Connection| -> rusqlite::Result<bool> {
            c.query_row(
                "SELECT count(*) FROM pragma_table_info('held_calls') WHERE name = 'repeat_told_at'",
                [],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n > 0)
        };
        if has(conn).map_err(|e| self.err(e))? {
            conn.execute_batch(REPEAT_INDEX).map_err(|e| self.err(e))?;
            return conn.execute_batch(GRANTS_TABLE).map_err(|e| self.err(e));
        }
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        // Another process may have added it while we waited for the lock.
        if !has(&tx).map_err(|e| self.err(e))? {
            tx.execute_batch(REPEAT_COLUMN).map_err(|e| self.err(e))?;
        }
        tx.execute_batch(REPEAT_INDEX).map_err(|e| self.err(e))?;
        tx.execute_batch(GRANTS_TABLE).map_err(|e| self.err(e))?;
        tx.commit().map_err(|e| self.err(e))
    }

    pub(super) fn check_application_id(&self, conn: &Connection) -> Result<(), InboxError> {
        let id: i64 = conn
            .query_row("PRAGMA application_id", [], |r| r.get(0))
            .map_err(|e| self.err(e))?;
        if id == APPLICATION_ID {
            Ok(())
        } else {
            Err(self.foreign())
        }
    }

    pub(super) fn newer(&self, version: i64) -> InboxError {
        InboxError::new(
            Kind::Schema,
            format!(
                "the inbox database `{}` has schema version {version}, newer than this program's {SCHEMA_VERSION}",
                self.path.display()
            ),
        )
    }

    pub(super) fn foreign(&self) -> InboxError {
        InboxError::new(
            Kind::Schema,
            format!(
                "`{}` is a SQLite database but not a toolgate inbox; it was left unchanged",
                self.path.display()
            ),
        )
    }
}

pub(super) fn user_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("PRAGMA user_version", [], |r| r.get(0))
}
