//! How a [`crate::PostgresInbox`] connects.

use std::time::Duration;

use toolgate_inbox::{InboxError, InboxErrorKind};

/// The longest schema name accepted (the notification channel's name is built from it and
/// PostgreSQL identifiers are at most 63 bytes).
pub const MAX_SCHEMA_NAME: usize = 40;

/// How a [`crate::PostgresInbox`] connects and behaves.
///
/// ```
/// use std::time::Duration;
/// use toolgate_inbox_postgres::PostgresOptions;
/// let o = PostgresOptions::default()
///     .instance("gate-eu-1")
///     .pool_size(4)
///     .schema("toolgate")
///     .lock_timeout(Duration::from_secs(2));
/// assert_eq!(o.instance, "gate-eu-1");
/// assert!(o.validate().is_ok());
/// assert!(PostgresOptions::default().schema("Robert'); DROP").validate().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PostgresOptions {
    /// This runtime instance's name, recorded with each claim; [`toolgate_inbox::HeldCalls::recover`]
    /// marks only this instance's claims `unknown` (default `default`). Give every instance
    /// that shares one inbox its own name, stable across its restarts.
    pub instance: String,
    /// The most connections the pool opens (default 8). Waiters and notifications use one
    /// more connection of their own, opened on the first [`crate::PostgresInbox::subscribe`].
    pub pool_size: usize,
    /// The PostgreSQL schema that holds the inbox's tables, created when missing (default:
    /// none, the connection's own `search_path`, usually `public`). Lower-case ASCII letters,
    /// digits and `_`, not starting with a digit, at most [`MAX_SCHEMA_NAME`] characters.
    pub schema: Option<String>,
    /// How long to wait for the server when connecting (default 10 s).
    pub connect_timeout: Duration,
    /// How long an operation waits for a free pooled connection (default 30 s).
    pub wait_timeout: Duration,
    /// How long a statement waits for a row lock another connection holds before it fails
    /// as busy (`lock_timeout`, default 5 s; like SQLite's busy timeout).
    pub lock_timeout: Duration,
    /// How often a waiter looks at the call itself, besides waking on notifications
    /// (default 1 s): the fallback when notifications are lost while the listening
    /// connection reconnects.
    pub poll_interval: Duration,
    /// Hosts (as the URL names them, case-insensitive) the inbox may reach in plain text
    /// although they are not loopback, when the URL says `sslmode=disable` (default: none;
    /// the `toolgate` command reads them from
    /// [`TOOLGATE_PG_PLAINTEXT_HOSTS`](crate::PLAINTEXT_HOSTS_ENV)). Plain text to any other
    /// host is refused: see [`crate::transport`].
    pub plaintext_hosts: Vec<String>,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        Self {
            instance: String::from("default"),
            pool_size: 8,
            schema: None,
            connect_timeout: Duration::from_secs(10),
            wait_timeout: Duration::from_secs(30),
            lock_timeout: Duration::from_secs(5),
            poll_interval: Duration::from_secs(1),
            plaintext_hosts: Vec::new(),
        }
    }
}

impl PostgresOptions {
    /// Sets the instance name.
    #[must_use]
    pub fn instance(mut self, name: impl Into<String>) -> Self {
        self.instance = name.into();
        self
    }

    /// Sets the pool size.
    #[must_use]
    pub fn pool_size(mut self, n: usize) -> Self {
        self.pool_size = n;
        self
    }

    /// Sets the schema that holds the inbox's tables.
    #[must_use]
    pub fn schema(mut self, name: impl Into<String>) -> Self {
        self.schema = Some(name.into());
        self
    }

    /// Sets the connect timeout.
    #[must_use]
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = d;
        self
    }

    /// Sets how long an operation waits for a pooled connection.
    #[must_use]
    pub fn wait_timeout(mut self, d: Duration) -> Self {
        self.wait_timeout = d;
        self
    }

    /// Sets the lock timeout.
    #[must_use]
    pub fn lock_timeout(mut self, d: Duration) -> Self {
        self.lock_timeout = d;
        self
    }

    /// Sets how often waiters look at the call besides waking on notifications.
    #[must_use]
    pub fn poll_interval(mut self, d: Duration) -> Self {
        self.poll_interval = d;
        self
    }

    /// Lets the inbox reach `host` in plain text with `sslmode=disable` although it is not
    /// loopback: only for a network you trust, since held calls, answers and the password
    /// cross it readable.
    #[must_use]
    pub fn plaintext_host(mut self, host: impl Into<String>) -> Self {
        self.plaintext_hosts.push(host.into());
        self
    }

    /// Adds the hosts of [`TOOLGATE_PG_PLAINTEXT_HOSTS`](crate::PLAINTEXT_HOSTS_ENV)
    /// (comma-separated) to [`PostgresOptions::plaintext_hosts`], as the `toolgate` command
    /// does.
    #[must_use]
    pub fn plaintext_hosts_from_env(mut self) -> Self {
        if let Ok(list) = std::env::var(crate::PLAINTEXT_HOSTS_ENV) {
            self.plaintext_hosts.extend(
                list.split(',')
                    .map(str::trim)
                    .filter(|h| !h.is_empty())
                    .map(str::to_owned),
            );
        }
        self
    }

    /// Checks the options; [`crate::PostgresInbox::connect`] calls it first.
    pub fn validate(&self) -> Result<(), InboxError> {
        let invalid = |why: String| Err(InboxError::new(InboxErrorKind::Unavailable, why));
        if self.instance.trim().is_empty() {
            return invalid(String::from("the inbox's instance name is empty"));
        }
        if self.instance.contains('\0') {
            return invalid(format!(
                "the inbox's instance name `{}` contains a NUL character",
                self.instance.escape_debug()
            ));
        }
        if self.pool_size == 0 {
            return invalid(String::from(
                "the inbox's pool size is 0; it needs at least one connection",
            ));
        }
        if let Some(schema) = &self.schema
            && !valid_schema_name(schema)
        {
            return invalid(format!(
                "the inbox schema name `{}` is not lower-case ASCII letters, digits and `_` (not starting with a digit, at most {MAX_SCHEMA_NAME} characters)",
                schema.escape_debug()
            ));
        }
        if self.poll_interval.is_zero() {
            return invalid(String::from("the inbox's poll interval is zero"));
        }
        if self.plaintext_hosts.iter().any(|h| h.trim().is_empty()) {
            return invalid(String::from(
                "a host the inbox may reach in plain text is named as an empty string",
            ));
        }
        Ok(())
    }
}

pub(crate) fn valid_schema_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some('a'..='z' | '_'))
        && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '_'))
        && s.len() <= MAX_SCHEMA_NAME
        && !s.starts_with("pg_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_are_plain_identifiers() {
        for ok in [
            "toolgate",
            "_x",
            "tg_t_0123abcd",
            &"a".repeat(MAX_SCHEMA_NAME),
        ] {
            assert!(valid_schema_name(ok), "{ok}");
        }
        for bad in [
            "",
            "1x",
            "Toolgate",
            "a b",
            "a\"b",
            "a;b",
            "pg_catalog",
            &"a".repeat(MAX_SCHEMA_NAME + 1),
        ] {
            assert!(!valid_schema_name(bad), "{bad}");
        }
    }

    #[test]
    fn options_that_cannot_work_are_refused() {
        assert!(PostgresOptions::default().validate().is_ok());
        assert!(PostgresOptions::default().instance(" ").validate().is_err());
        assert!(PostgresOptions::default().pool_size(0).validate().is_err());
        assert!(
            PostgresOptions::default()
                .poll_interval(Duration::ZERO)
                .validate()
                .is_err()
        );
    }
}
