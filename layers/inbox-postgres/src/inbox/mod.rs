//! [`PostgresInbox`]: the [`InboxStore`](toolgate_inbox::InboxStore) on PostgreSQL.
//!
//! One thing per file: this one connects and holds the pool (`mod.rs`); `wait` waits on
//! notifications for a held call or the stored policy; `ops` runs each store operation as
//! conditional SQL and reads rows back (the decisions are `toolgate_inbox::state`'s).

mod grants;
mod ops;
mod query;
mod wait;

pub use wait::WaitError;

use std::fmt;
use std::sync::Arc;

use deadpool_postgres::{Pool, Runtime};
use tokio_postgres::Config;
use toolgate_inbox::{InboxError, InboxErrorKind as Kind};

use crate::error;
use crate::listen::Listener;
use crate::options::PostgresOptions;
use crate::schema::{self, Located};
use crate::tls::{self, Connector, Transport};

struct Inner {
    pool: Pool,
    config: Config,
    connector: Connector,
    transport: Transport,
    options: PostgresOptions,
    server: String,
    located: Located,
    listener: tokio::sync::OnceCell<Listener>,
}

/// An inbox in a PostgreSQL database, shared by any number of runtime instances.
///
/// Cheap to clone: clones share one connection pool (and one listening connection).
/// Every state change is one conditional `UPDATE … WHERE interaction_id = $1 AND state = <from>
/// … RETURNING …`, committed before the method returns: of any number of racing answers or
/// claims, from any number of instances, exactly one changes the row.
#[derive(Clone)]
pub struct PostgresInbox {
    inner: Arc<Inner>,
}

impl fmt::Debug for PostgresInbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresInbox")
            .field("server", &self.inner.server)
            .field("schema", &self.inner.located.schema)
            .field("options", &self.inner.options)
            .finish()
    }
}

impl PostgresInbox {
    /// The inbox the configuration's `inbox` section names: connects to its `postgres` URL
    /// with `options` and holds calls for its `ttl` (or the inbox's default). A section
    /// naming a SQLite file is refused here: open it with `toolgate_inbox::Inbox::open_configured`.
    pub async fn connect_configured(
        settings: &toolgate_inbox::InboxSettings,
        options: PostgresOptions,
    ) -> Result<toolgate_inbox::Inbox, InboxError> {
        use toolgate_inbox::InboxStoreSetting;
        let InboxStoreSetting::Postgres(url) = &settings.store else {
            return Err(InboxError::new(
                Kind::Unavailable,
                "the configuration names a SQLite inbox: open it with `toolgate_inbox::Inbox::open_configured`",
            ));
        };
        let store = Self::connect(url, options).await?;
        let inbox = toolgate_inbox::Inbox::new(store);
        Ok(match settings.ttl {
            Some(ttl) => inbox.with_ttl(ttl),
            None => inbox,
        })
    }

    /// Connects to the database at `url` (`postgres://user@host:port/db` or
    /// `host=… dbname=…`), creates the inbox's schema when it does not exist (idempotent; safe
    /// when several instances start at once) and checks it when it does.
    ///
    /// Over TLS or in plain text as the URL's `sslmode` and `sslrootcert` say, read more
    /// strictly than libpq reads them (see [`crate::transport`]): without `sslmode`, plain
    /// text to a loopback host or a Unix socket and `verify-full` to any other host;
    /// `sslmode=disable` to a host that is not loopback only when
    /// [`PostgresOptions::plaintext_hosts`] names it; `allow` and `prefer` refused. Nothing
    /// falls back to plain text.
    pub async fn connect(url: &str, options: PostgresOptions) -> Result<Self, InboxError> {
        options.validate()?;
        let tls::Prepared {
            mut config,
            connector,
            transport,
        } = tls::prepare(url, &options)?;
        let mut startup = config.get_options().unwrap_or_default().to_owned();
        if let Some(schema) = &options.schema {
            // Validated: lower-case ASCII letters, digits and `_` only.
            startup.push_str(&format!(" -c search_path={schema}"));
        }
        startup.push_str(&format!(
            " -c lock_timeout={}",
            options.lock_timeout.as_millis().max(1)
        ));
        config.options(startup.trim());
        if config.get_application_name().is_none() {
            config.application_name(format!("toolgate-inbox {}", options.instance));
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(options.connect_timeout);
        }
        let server = error::server_name(&config);
        tracing::debug!(server, "the inbox database: {transport}");
        let pool = Pool::builder(connector.manager(config.clone()))
            .max_size(options.pool_size)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(options.wait_timeout))
            .create_timeout(Some(options.connect_timeout))
            .recycle_timeout(Some(options.connect_timeout))
            .build()
            .map_err(|e| {
                InboxError::new(
                    Kind::Backend,
                    format!(
                        "the connections to the inbox database `{server}` cannot be set up: {e}"
                    ),
                )
            })?;
        let mut client = pool
            .get()
            .await
            .map_err(|e| transport.explain(error::pool(&server, options.wait_timeout, &e)))?;
        let located = schema::migrate(&mut client, options.schema.as_deref(), &server).await?;
        drop(client);
        Ok(Self {
            inner: Arc::new(Inner {
                pool,
                config,
                connector,
                transport,
                options,
                server,
                located,
                listener: tokio::sync::OnceCell::new(),
            }),
        })
    }

    /// The connection pool (shared with the quota counter, [`crate::PostgresQuotaCounter`]).
    pub(crate) fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// How it reaches the server: plain text or TLS, and which certificates it trusts.
    pub fn transport(&self) -> &Transport {
        &self.inner.transport
    }

    /// The options it was connected with.
    pub fn options(&self) -> &PostgresOptions {
        &self.inner.options
    }

    /// This instance's name (recorded with its claims).
    pub fn instance(&self) -> &str {
        &self.inner.options.instance
    }

    /// The server as `host:port/database` (never the user or password).
    pub fn server(&self) -> &str {
        &self.inner.server
    }

    /// The PostgreSQL schema holding the inbox's tables.
    pub fn schema(&self) -> &str {
        &self.inner.located.schema
    }

    /// The `LISTEN`/`NOTIFY` channel on which the inbox's triggers announce changes.
    pub fn channel(&self) -> &str {
        &self.inner.located.channel
    }
}
