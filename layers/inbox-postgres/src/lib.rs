//! # toolgate-inbox-postgres
//!
//! The PostgreSQL backend of toolgate's durable approval inbox (SPEC R26, R35, R38, R22), for
//! several runtime instances sharing one inbox. It implements the same
//! [`toolgate_inbox::InboxStore`] contract as the embedded SQLite backend and passes the same
//! shared suite (`toolgate_inbox_suite::run_all`, a test kit of its own); everything built on the trait — the
//! [`toolgate_inbox::InboxChannel`] the approval gate holds calls with,
//! [`toolgate_inbox::Inbox::resume`], the stored policy — works unchanged.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use tower::ServiceBuilder;
//! use toolgate::GovernanceHandle;
//! use toolgate::approval::ApprovalGateLayer;
//! use toolgate_core::{ToolCall, ToolOutput, ToolResponse};
//! use toolgate_engine::config::{Format, load_str};
//! use toolgate_inbox::prelude::*;
//! use toolgate_inbox::{Inbox, State};
//! use toolgate_inbox_postgres::{PostgresInbox, PostgresOptions};
//!
//! // Each runtime instance connects with its own, stable name.
//! let store = PostgresInbox::connect(
//!     "postgres://toolgate@127.0.0.1:5432/toolgate",
//!     PostgresOptions::default().instance("gate-eu-1"),
//! )
//! .await?;
//! // At startup: this instance's calls that were claimed when it died become `unknown`.
//! let unknown = store.recover().await?;
//! assert!(unknown.is_empty());
//!
//! let handle = GovernanceHandle::new(load_str(r#"{"approval": {"channel": "inbox"},
//!     "tools": [{"kind": "http", "name": "refund", "approval": "require_approval"}],
//!     "agents": [{"name": "support", "allowed_tools": ["refund"]}]}"#, Format::Json)?);
//! let inbox = Inbox::new(store.clone());
//! let stack = ServiceBuilder::new()
//!     .layer(ApprovalGateLayer::new(handle).channel(inbox.channel()))
//!     .service(tower::service_fn(|call: ToolCall| async move {
//!         Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::new(call.input)))
//!     }));
//!
//! // Somewhere a call was held and its id handed to a person; wait (without polling the
//! // table in a loop: another instance's answer wakes this one) until it is approved …
//! let id = "ia_…";
//! store.wait_for(id, State::Approved, Duration::from_secs(3600)).await?;
//! // … and send it once, through the same stack as any call. If another instance resumes
//! // it at the same moment, exactly one of them reaches the tool.
//! let resumed = inbox.resume(id, stack).await?;
//! assert_eq!(resumed.recorded, Some(State::Done));
//! # Ok(()) }
//! ```
//!
//! ## Plain text or TLS
//!
//! The URL's libpq settings `sslmode` and `sslrootcert` say how the server is reached, read
//! more strictly than libpq reads them, and nothing falls back to plain text (see
//! [`transport`], which says how a URL would connect without connecting):
//!
//! | `sslmode` | toolgate |
//! | --- | --- |
//! | (none) | plain text to a loopback host (`localhost`, `127.0.0.0/8`, `::1`) or a Unix socket; `verify-full` to any other host, or whenever `sslrootcert` is given |
//! | `disable` | plain text, to a loopback host or a Unix socket only; another host only when [`PostgresOptions::plaintext_hosts`] names it ([`PLAINTEXT_HOSTS_ENV`] for the `toolgate` command) |
//! | `allow`, `prefer` | refused: both use plain text when the server offers no TLS |
//! | `require` | TLS; without `sslrootcert` encrypted but the certificate is not checked (as libpq); with it, the chain is checked as `verify-ca` |
//! | `verify-ca` | TLS; the certificate must chain to a trusted CA; the host name is not checked |
//! | `verify-full` | TLS; the certificate must chain to a trusted CA and be for the URL's host |
//!
//! Trusted CAs: the certificates of the PEM file `sslrootcert=PATH` (then only those), or,
//! without it or with `sslrootcert=system`, the system's roots as `rustls-native-certs` reads
//! them (`/etc/ssl/certs` and the like, or `SSL_CERT_FILE` / `SSL_CERT_DIR`). TLS is rustls
//! on the `ring` provider. libpq's environment variables (`PGSSLMODE`, …) are not read;
//! client certificates (`sslcert`, `sslkey`) and revocation lists (`sslcrl`) are not
//! supported, and a URL naming them is refused.
//!
//! ```
//! use toolgate_inbox_postgres::{PostgresOptions, SslMode, transport};
//! let t = transport(
//!     "postgres://toolgate@db.internal/toolgate?sslmode=require",
//!     &PostgresOptions::default(),
//! )
//! .unwrap();
//! assert_eq!(t.mode, SslMode::Require);
//! assert!(t.to_string().contains("not checked"));
//! ```
//!
//! ## Exactly one winner
//!
//! Every transition of the state machine (see [`toolgate_inbox::State`]) is one conditional
//! statement, committed before the method returns:
//!
//! ```sql
//! UPDATE held_calls SET state = 'claimed', claim_token = $2, claimed_by = $3, …
//!  WHERE interaction_id = $1 AND state = 'approved' AND input_hash = $5 AND definition_hash = $6
//! RETURNING approver
//! ```
//!
//! Racing statements queue on the row's lock; once the first commits, PostgreSQL re-checks
//! the others' `WHERE` against the new row, so they change nothing and return no row. The
//! loser then reads the row to say why (already decided, expired, changed input or
//! definition). Answers, cancellations, claims and recorded results all work this way;
//! [`HeldCalls::recover`](toolgate_inbox::HeldCalls::recover) moves only the calls claimed
//! by *this* instance (its [`PostgresOptions::instance`]) to `unknown`, so one instance's
//! restart never touches another's calls in flight.
//!
//! ## Waking waiters
//!
//! Triggers on the inbox's tables `NOTIFY` every state change (`<state> <interaction id>`)
//! and every policy put (`policy <updatedAt>`) on the inbox's channel
//! ([`PostgresInbox::channel`]); the notification is sent when the change commits, by
//! whichever instance (or the CLI) made it. [`PostgresInbox::subscribe`] opens one
//! listening connection per inbox and returns a [`Subscription`] of [`Notice`]s;
//! [`PostgresInbox::wait_for`] subscribes *before* it looks at the call, so no change
//! between the look and the wait is missed, and also looks every
//! [`PostgresOptions::poll_interval`] in case notices were lost while the listening
//! connection reconnected (it then also gets [`Notice::Missed`]).
//! [`PostgresInbox::watch_policy`] keeps a running gate's tenant policy in step with the
//! stored one the same way.
//!
//! ## Schema
//!
//! Created on connect when missing, under a transaction-scoped advisory lock (instances that
//! start together do not race), in [`PostgresOptions::schema`] or the connection's current
//! schema: `toolgate_inbox_meta` (rows `application`, `schema_version`, `notify_channel`),
//! `held_calls` ([`SCHEMA_V1`], with the session and turn columns of [`SCHEMA_V2`] and the
//! index of open calls, [`OPEN_INDEX`], added to an inbox that lacks it), `stored_policy`
//! (one row, replaced whole, with a strictly
//! increasing `updatedAt`), `grants` ([`GRANTS_TABLE`], R45), and the notifying triggers. A newer schema version, or tables of
//! the same names that are not a toolgate inbox, are refused and left unchanged.
//!
//! ## Grants
//!
//! Grants (R45) live in the `grants` table; each use is one conditional
//! `UPDATE grants SET uses = uses + 1 … WHERE id = $1 AND <live>`, so instances racing to
//! spend a grant never pass its `max_calls`. [`PostgresInbox::grant_store`](toolgate_inbox::StoredGrants::grant_store)
//! gives the engine's grant store on it, driven by a thread with connections of its own
//! (the engine decides synchronously).
//!
//! ## Time
//!
//! As in the SQLite backend, times are the writing instance's clock in milliseconds since
//! the Unix epoch: instances sharing an inbox should keep their clocks in step (NTP). The
//! stored policy's `updatedAt` stays strictly increasing even when they do not.
#![forbid(unsafe_code)]

mod error;
mod inbox;
mod listen;
mod options;
mod quota;
mod schema;
mod tls;

pub use inbox::{PostgresInbox, WaitError};
pub use listen::{Notice, Subscription};
pub use options::{MAX_SCHEMA_NAME, PostgresOptions};
pub use quota::{PostgresQuotaCounter, QUOTA_LOCK, QUOTA_SCHEMA};
pub use schema::{
    APPLICATION, GRANTS_TABLE, META_TABLE, MIGRATION_LOCK, OPEN_INDEX, PAGE_INDEXES, REPEAT_COLUMN,
    SCHEMA_V1, SCHEMA_V2, SCHEMA_VERSION,
};
pub use tls::{PLAINTEXT_HOSTS_ENV, SslMode, Transport, Trust, transport};
