//! Mapping PostgreSQL and pool failures to [`InboxError`]s that name the server (never its
//! password) and say what kind of failure it was.

use std::error::Error as _;
use std::time::Duration;

use deadpool_postgres::{PoolError, TimeoutType};
use tokio_postgres::error::SqlState;
use toolgate_inbox::{InboxError, InboxErrorKind as Kind};

/// A failure of a query or a connection.
pub(crate) fn db(server: &str, e: &tokio_postgres::Error) -> InboxError {
    let detail = describe(e);
    let kind = kind_of(e);
    let message = match kind {
        Kind::Busy => format!("the inbox database `{server}` is busy: {detail}"),
        Kind::Corrupt => format!("the inbox database `{server}` is damaged: {detail}"),
        Kind::Unavailable => format!("the inbox database `{server}` cannot be used: {detail}"),
        Kind::Duplicate => format!("the inbox database `{server}` refused a duplicate: {detail}"),
        Kind::Schema => format!(
            "the inbox database `{server}` does not have the inbox's tables as this program expects: {detail}"
        ),
        _ => format!("the inbox database `{server}` failed: {detail}"),
    };
    InboxError::new(kind, message)
}

/// The kind of a PostgreSQL failure.
pub(crate) fn kind_of(e: &tokio_postgres::Error) -> Kind {
    let Some(code) = e.code() else {
        // No SQLSTATE: the connection failed, closed, timed out, or the protocol broke.
        return Kind::Unavailable;
    };
    let class = code.code().get(..2).unwrap_or_default();
    if *code == SqlState::UNIQUE_VIOLATION {
        Kind::Duplicate
    } else if *code == SqlState::LOCK_NOT_AVAILABLE
        || *code == SqlState::T_R_SERIALIZATION_FAILURE
        || *code == SqlState::T_R_DEADLOCK_DETECTED
        || *code == SqlState::QUERY_CANCELED
        || *code == SqlState::TOO_MANY_CONNECTIONS
    {
        Kind::Busy
    } else if *code == SqlState::DATA_CORRUPTED || *code == SqlState::INDEX_CORRUPTED {
        Kind::Corrupt
    } else if *code == SqlState::UNDEFINED_TABLE
        || *code == SqlState::UNDEFINED_COLUMN
        || *code == SqlState::UNDEFINED_FUNCTION
    {
        Kind::Schema
    } else if matches!(class, "08" | "28" | "3D" | "53" | "57" | "58")
        || *code == SqlState::INSUFFICIENT_PRIVILEGE
        || *code == SqlState::READ_ONLY_SQL_TRANSACTION
    {
        // Connection exceptions, authorisation, a missing database, insufficient resources
        // (disk full), operator intervention (shutdown), system errors, no permission, a
        // read-only standby.
        Kind::Unavailable
    } else {
        Kind::Backend
    }
}

/// A pool failure: no connection could be had.
pub(crate) fn pool(server: &str, wait: Duration, e: &PoolError) -> InboxError {
    match e {
        PoolError::Backend(e) => db(server, e),
        PoolError::Timeout(TimeoutType::Wait) => InboxError::new(
            Kind::Busy,
            format!(
                "no connection to the inbox database `{server}` became free within {}",
                humantime::format_duration(wait)
            ),
        ),
        PoolError::Timeout(TimeoutType::Create) => InboxError::new(
            Kind::Unavailable,
            format!("the inbox database `{server}` cannot be used: connecting timed out"),
        ),
        PoolError::Timeout(TimeoutType::Recycle) => InboxError::new(
            Kind::Unavailable,
            format!(
                "the inbox database `{server}` cannot be used: checking a pooled connection timed out"
            ),
        ),
        PoolError::Closed => InboxError::new(
            Kind::Unavailable,
            format!("the connections to the inbox database `{server}` were closed"),
        ),
        other => InboxError::new(
            Kind::Backend,
            format!("the inbox database `{server}` failed: {other}"),
        ),
    }
}

/// A failure's text: the server's message (with its detail) or the error and its causes.
pub(crate) fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut s = db.message().to_owned();
        if let Some(detail) = db.detail() {
            s.push_str(" (");
            s.push_str(detail);
            s.push(')');
        }
        return s;
    }
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        source = cause.source();
    }
    s
}

/// The server as people should see it: `host:port/database`, without user or password.
pub(crate) fn server_name(config: &tokio_postgres::Config) -> String {
    use tokio_postgres::config::Host;
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let port = config
                .get_ports()
                .get(i)
                .or_else(|| config.get_ports().first())
                .copied()
                .unwrap_or(5432);
            match h {
                Host::Tcp(name) => format!("{name}:{port}"),
                #[cfg(unix)]
                Host::Unix(path) => format!("{}:{port}", path.display()),
            }
        })
        .collect();
    let hosts = if hosts.is_empty() {
        String::from("localhost")
    } else {
        hosts.join(",")
    };
    format!("{hosts}/{}", config.get_dbname().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_name_never_shows_the_password() {
        let config: tokio_postgres::Config = "postgres://alice:s3cret@127.0.0.1:5433/inbox"
            .parse()
            .unwrap();
        let name = server_name(&config);
        assert_eq!(name, "127.0.0.1:5433/inbox");
        assert!(!name.contains("s3cret") && !name.contains("alice"));
        let config: tokio_postgres::Config = "host=/run/postgresql dbname=x".parse().unwrap();
        assert_eq!(server_name(&config), "/run/postgresql:5432/x");
    }
}
