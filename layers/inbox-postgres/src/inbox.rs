//! [`PostgresInbox`]: the [`InboxStore`] on PostgreSQL.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, Runtime};
use tokio::task::JoinHandle;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Config, NoTls, Row};
use toolgate::GovernanceHandle;
use toolgate::core::{AgentRef, RunContext, Turn};
use toolgate::engine::policy::Policy;
use toolgate_inbox::{
    Answer, AnswerError, AnswerReceipt, BoxFuture, Claim, ClaimError, Claimed, CompleteError,
    Completion, HeldRecord, InboxError, InboxErrorKind as Kind, InboxStore, NewHeldCall,
    PolicyPoll, PolicyWatch, State, StoredPolicy, Timestamp, codec,
    state::{self, PendingLost},
};

use crate::error;
use crate::listen::{Listener, Notice, Subscription, can_reach};
use crate::options::PostgresOptions;
use crate::schema::{self, Located};

const COLUMNS: &str = "interaction_id, call_id, tool, identities, definition_hash, agent_profile, \
    agent_subagent, input_json, input_canonical, input_hash, reasons, run_mode, run_background, \
    created_at, expires_at, state, approver, answer_key, answer_reason, answered_at, claimed_by, \
    claimed_at, result_json, finished_at, updated_at, session_id, turn_id";

/// How many times an operation that found its row in an impossible in-between state (a call
/// held between the conditional update and the read that explains its failure) tries again.
const ATTEMPTS: usize = 3;

struct Inner {
    pool: Pool,
    config: Config,
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

/// Why a wait for a held call ended without it reaching the state waited for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitError {
    /// No held call has this id.
    UnknownId(String),
    /// The call is in a state from which the one waited for cannot be reached (denied while
    /// waiting for `approved`, say).
    Unreachable {
        /// The held call.
        id: String,
        /// Its state.
        state: State,
    },
    /// The call did not reach the state in time.
    Timeout {
        /// The held call.
        id: String,
        /// Its state when the time was up.
        state: State,
        /// How long it was waited for.
        waited: Duration,
    },
    /// The store failed.
    Store(InboxError),
}

impl fmt::Display for WaitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WaitError::UnknownId(id) => {
                write!(f, "no held call `{id}`: this inbox did not issue it")
            }
            WaitError::Unreachable { id, state } => write!(
                f,
                "held call `{id}` is `{state}`; what was waited for can no longer happen"
            ),
            WaitError::Timeout { id, state, waited } => write!(
                f,
                "held call `{id}` is still `{state}` after {}",
                humantime::format_duration(*waited)
            ),
            WaitError::Store(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for WaitError {}

impl From<InboxError> for WaitError {
    fn from(e: InboxError) -> Self {
        WaitError::Store(e)
    }
}

impl PostgresInbox {
    /// The inbox the configuration's `inbox` section names: connects to its `postgres` URL
    /// with `options` and holds calls for its `ttl` (or the inbox's default). A section
    /// naming a SQLite file is refused here: open it with `toolgate_inbox::Inbox::open_configured`.
    pub async fn connect_configured(
        settings: &toolgate::engine::observe::InboxSettings,
        options: PostgresOptions,
    ) -> Result<toolgate_inbox::Inbox, InboxError> {
        use toolgate::engine::observe::InboxStoreSetting;
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
    /// Only unencrypted connections are made: use a Unix socket, loopback or a trusted
    /// network.
    pub async fn connect(url: &str, options: PostgresOptions) -> Result<Self, InboxError> {
        options.validate()?;
        let mut config: Config = url.parse().map_err(|e| {
            InboxError::new(
                Kind::Unavailable,
                format!(
                    "the inbox database URL cannot be read: {}",
                    error::describe(&e)
                ),
            )
        })?;
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
        let pool = Pool::builder(Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig::default(),
        ))
        .max_size(options.pool_size)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(options.wait_timeout))
        .create_timeout(Some(options.connect_timeout))
        .recycle_timeout(Some(options.connect_timeout))
        .build()
        .map_err(|e| {
            InboxError::new(
                Kind::Backend,
                format!("the connections to the inbox database `{server}` cannot be set up: {e}"),
            )
        })?;
        let mut client = pool
            .get()
            .await
            .map_err(|e| error::pool(&server, options.wait_timeout, &e))?;
        let located = schema::migrate(&mut client, options.schema.as_deref(), &server).await?;
        drop(client);
        Ok(Self {
            inner: Arc::new(Inner {
                pool,
                config,
                options,
                server,
                located,
                listener: tokio::sync::OnceCell::new(),
            }),
        })
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

    /// Subscribes to the inbox's changes: every state change of every held call and every
    /// policy put, by any instance. The first call opens the listening connection (one per
    /// inbox, shared by its clones) and returns once it listens; it reconnects by itself
    /// when lost, and then sends [`Notice::Missed`].
    pub async fn subscribe(&self) -> Result<Subscription, InboxError> {
        let inner = &self.inner;
        let listener = inner
            .listener
            .get_or_try_init(|| {
                Listener::start(
                    inner.config.clone(),
                    inner.located.channel.clone(),
                    inner.server.clone(),
                    inner.options.poll_interval,
                )
            })
            .await?;
        Ok(listener.subscribe())
    }

    /// Waits until the held call `id` is in `state`, and returns it then.
    ///
    /// Wakes on the inbox's notifications (another instance's answer wakes it at once), and
    /// also looks every [`PostgresOptions::poll_interval`] in case notices were lost; when
    /// notifications cannot be had at all, it polls. Fails as soon as `state` can no longer
    /// be reached (a call denied while waiting for `approved`), or after `timeout`.
    pub async fn wait_for(
        &self,
        id: &str,
        state: State,
        timeout: Duration,
    ) -> Result<HeldRecord, WaitError> {
        self.wait(id, timeout, |s| s == state, |s| can_reach(s, state))
            .await
    }

    /// Waits until the held call `id` is in a state for which `done` holds (failing as
    /// [`WaitError::Unreachable`] when it is in a final state for which it does not).
    pub async fn wait_until(
        &self,
        id: &str,
        timeout: Duration,
        done: impl Fn(State) -> bool,
    ) -> Result<HeldRecord, WaitError> {
        self.wait(id, timeout, &done, |s| !s.is_final() || done(s))
            .await
    }

    async fn wait(
        &self,
        id: &str,
        timeout: Duration,
        done: impl Fn(State) -> bool,
        reachable: impl Fn(State) -> bool,
    ) -> Result<HeldRecord, WaitError> {
        let started = Instant::now();
        // INVARIANT: subscribe before the first look, so a change committed between the look
        // and the wait is announced to this subscription.
        let mut notices = match self.subscribe().await {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(error = %e, "waiting for a held call by polling: notifications cannot be had");
                None
            }
        };
        loop {
            let record = self
                .get(id)
                .await?
                .ok_or_else(|| WaitError::UnknownId(id.to_owned()))?;
            if done(record.state) {
                return Ok(record);
            }
            if !reachable(record.state) {
                return Err(WaitError::Unreachable {
                    id: id.to_owned(),
                    state: record.state,
                });
            }
            let waited = started.elapsed();
            if waited >= timeout {
                return Err(WaitError::Timeout {
                    id: id.to_owned(),
                    state: record.state,
                    waited,
                });
            }
            let nap = self.inner.options.poll_interval.min(timeout - waited);
            match &mut notices {
                Some(n) => {
                    let _ = tokio::time::timeout(nap, next_about(n, id)).await;
                }
                None => tokio::time::sleep(nap).await,
            }
        }
    }

    /// Keeps `handle`'s tenant policy in step with the stored one: looks at once, then again
    /// whenever a policy put is announced (any instance's `toolgate policy put` reaches every
    /// running gate within a round trip), and every `fallback` in case announcements are lost.
    /// `seen` is the `updatedAt` already in force (from [`toolgate_inbox::load_policy_state`]).
    /// Abort the returned handle to stop.
    pub fn watch_policy(
        &self,
        handle: GovernanceHandle,
        seen: Option<String>,
        fallback: Duration,
    ) -> JoinHandle<()> {
        let store = self.clone();
        tokio::spawn(async move {
            let mut watch = PolicyWatch::new(handle, seen);
            let mut notices = match store.subscribe().await {
                Ok(s) => Some(s),
                Err(e) => {
                    tracing::warn!(error = %e, "watching the stored policy by polling: notifications cannot be had");
                    None
                }
            };
            loop {
                match watch.poll_once(&store).await {
                    PolicyPoll::Unchanged => {}
                    PolicyPoll::Replaced {
                        updated_at,
                        readable,
                    } => {
                        tracing::info!(%updated_at, readable, "the stored tenant policy was replaced");
                    }
                    PolicyPoll::Refused(why) => {
                        tracing::warn!(%why, "a new stored tenant policy was refused; the old one stays");
                    }
                    PolicyPoll::StoreFailed(why) => {
                        tracing::warn!(%why, "the stored tenant policy could not be read; the policy in force stays");
                    }
                }
                match &mut notices {
                    Some(n) => {
                        let _ = tokio::time::timeout(fallback, next_policy(n)).await;
                    }
                    None => tokio::time::sleep(fallback).await,
                }
            }
        })
    }

    // ----- plumbing -----

    fn err(&self, e: &tokio_postgres::Error) -> InboxError {
        error::db(&self.inner.server, e)
    }

    fn record_err(&self, id: &str, why: impl fmt::Display) -> InboxError {
        InboxError::new(
            Kind::Record,
            format!(
                "held call `{id}` in `{}` cannot be read: {why}",
                self.inner.server
            ),
        )
    }

    async fn client(&self) -> Result<Object, InboxError> {
        self.inner
            .pool
            .get()
            .await
            .map_err(|e| error::pool(&self.inner.server, self.inner.options.wait_timeout, &e))
    }

    async fn query_opt(
        &self,
        client: &Object,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, InboxError> {
        let stmt = client.prepare_cached(sql).await.map_err(|e| self.err(&e))?;
        client
            .query_opt(&stmt, params)
            .await
            .map_err(|e| self.err(&e))
    }

    async fn query(
        &self,
        client: &Object,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, InboxError> {
        let stmt = client.prepare_cached(sql).await.map_err(|e| self.err(&e))?;
        client.query(&stmt, params).await.map_err(|e| self.err(&e))
    }

    async fn state_of(&self, client: &Object, id: &str) -> Result<Option<State>, InboxError> {
        let row = self
            .query_opt(
                client,
                "SELECT state FROM held_calls WHERE interaction_id = $1",
                &[&id],
            )
            .await?;
        match row {
            None => Ok(None),
            Some(row) => {
                let s: String = row.try_get(0).map_err(|e| self.err(&e))?;
                State::parse(&s)
                    .map(Some)
                    .ok_or_else(|| self.record_err(id, format!("unknown state `{s}`")))
            }
        }
    }

    fn parse_state(&self, id: &str, s: &str) -> Result<State, InboxError> {
        State::parse(s).ok_or_else(|| self.record_err(id, format!("unknown state `{s}`")))
    }

    /// Marks `id` expired if it is still pending and due at `now`.
    async fn expire_one(
        &self,
        client: &Object,
        id: &str,
        now: Timestamp,
    ) -> Result<(), InboxError> {
        self.query_opt(
            client,
            "UPDATE held_calls SET state = 'expired', updated_at = $2 \
             WHERE interaction_id = $1 AND state = 'pending' AND expires_at <= $2 \
             RETURNING interaction_id",
            &[&id, &now.as_millis()],
        )
        .await
        .map(|_| ())
    }

    /// Moves every row the conditional `update` (returning `interaction_id, created_at`)
    /// changed, oldest first.
    async fn move_all(
        &self,
        update: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<String>, InboxError> {
        let client = self.client().await?;
        let rows = self.query(&client, update, params).await?;
        let mut moved = Vec::with_capacity(rows.len());
        for row in rows {
            let id: String = row.try_get(0).map_err(|e| self.err(&e))?;
            let created: i64 = row.try_get(1).map_err(|e| self.err(&e))?;
            moved.push((created, id));
        }
        moved.sort();
        Ok(moved.into_iter().map(|(_, id)| id).collect())
    }

    // ----- operations -----

    async fn hold_op(&self, c: NewHeldCall) -> Result<(), InboxError> {
        let client = self.client().await?;
        let identities = codec::identities_json(&c.identities);
        let reasons = codec::reasons_json(&c.reasons);
        let inserted = self
            .query_opt(
                &client,
                "INSERT INTO held_calls (interaction_id, call_id, tool, identities, definition_hash, \
                 agent_profile, agent_subagent, input_json, input_canonical, input_hash, reasons, \
                 run_mode, run_background, created_at, expires_at, state, updated_at, session_id, \
                 turn_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, \
                 'pending', $14, $16, $17) RETURNING interaction_id",
                &[
                    &c.interaction_id,
                    &c.call_id,
                    &c.tool,
                    &identities,
                    &c.definition_hash,
                    &c.agent.profile,
                    &c.agent.subagent,
                    &c.input_json,
                    &c.input_canonical,
                    &c.input_hash,
                    &reasons,
                    &c.run.mode.as_str(),
                    &c.run.background,
                    &c.created_at.as_millis(),
                    &c.expires_at.as_millis(),
                    &c.turn.as_ref().map(|t| t.session.as_str()),
                    &c.turn.as_ref().map(|t| t.turn.as_str()),
                ],
            )
            .await;
        match inserted {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == Kind::Duplicate => Err(InboxError::new(
                Kind::Duplicate,
                format!("a held call `{}` already exists", c.interaction_id),
            )),
            Err(e) => Err(e),
        }
    }

    async fn get_op(&self, id: &str) -> Result<Option<HeldRecord>, InboxError> {
        let client = self.client().await?;
        let row = self
            .query_opt(
                &client,
                &format!("SELECT {COLUMNS} FROM held_calls WHERE interaction_id = $1"),
                &[&id],
            )
            .await?;
        match row {
            None => Ok(None),
            Some(row) => read_row(&row)
                .map(Some)
                .map_err(|why| self.record_err(id, why)),
        }
    }

    async fn list_op(&self, state: Option<State>) -> Result<Vec<HeldRecord>, InboxError> {
        let client = self.client().await?;
        let rows = match state {
            Some(s) => {
                self.query(
                    &client,
                    &format!(
                        "SELECT {COLUMNS} FROM held_calls WHERE state = $1 \
                         ORDER BY created_at, interaction_id"
                    ),
                    &[&s.as_str()],
                )
                .await?
            }
            None => {
                self.query(
                    &client,
                    &format!(
                        "SELECT {COLUMNS} FROM held_calls ORDER BY created_at, interaction_id"
                    ),
                    &[],
                )
                .await?
            }
        };
        rows.iter()
            .map(|row| {
                read_row(row).map_err(|why| {
                    let id: String = row.try_get(0).unwrap_or_else(|_| String::from("?"));
                    self.record_err(&id, why)
                })
            })
            .collect()
    }

    async fn session_calls_op(
        &self,
        session: &str,
        turn: Option<&str>,
    ) -> Result<Vec<HeldRecord>, InboxError> {
        let client = self.client().await?;
        let rows = self
            .query(
                &client,
                &format!(
                    "SELECT {COLUMNS} FROM held_calls WHERE session_id = $1 \
                     AND ($2::text IS NULL OR turn_id = $2) ORDER BY created_at, interaction_id"
                ),
                &[&session, &turn],
            )
            .await?;
        rows.iter()
            .map(|row| {
                read_row(row).map_err(|why| {
                    let id: String = row.try_get(0).unwrap_or_else(|_| String::from("?"));
                    self.record_err(&id, why)
                })
            })
            .collect()
    }

    async fn cancel_turn_op(&self, session: &str, turn: &str) -> Result<Vec<String>, InboxError> {
        let client = self.client().await?;
        let now = Timestamp::now();
        // INVARIANT: one statement: every pending call of the turn ends at once, `cancelled`,
        // or `expired` when nobody answered in time (R26, R43).
        let rows = self
            .query(
                &client,
                "UPDATE held_calls SET state = CASE WHEN expires_at <= $3 THEN 'expired' \
                 ELSE 'cancelled' END, updated_at = $3 \
                 WHERE session_id = $1 AND turn_id = $2 AND state = 'pending' \
                 RETURNING interaction_id, created_at, state",
                &[&session, &turn, &now.as_millis()],
            )
            .await?;
        let mut cancelled = Vec::new();
        for row in rows {
            let id: String = row.try_get(0).map_err(|e| self.err(&e))?;
            let created: i64 = row.try_get(1).map_err(|e| self.err(&e))?;
            let state: String = row.try_get(2).map_err(|e| self.err(&e))?;
            if state == "cancelled" {
                cancelled.push((created, id));
            }
        }
        cancelled.sort();
        Ok(cancelled.into_iter().map(|(_, id)| id).collect())
    }

    async fn answer_op(&self, id: &str, answer: Answer) -> Result<AnswerReceipt, AnswerError> {
        let (new_state, reason) = state::answer_update(&answer)?;
        let client = self.client().await?;
        for _ in 0..ATTEMPTS {
            let now = Timestamp::now();
            // INVARIANT: an answer is one conditional update from `pending`; of racing
            // answers exactly one changes the row (the others wait for its row lock, then see
            // it no longer pending). A call answered, expired or cancelled is not overwritten.
            let won = self
                .query_opt(
                    &client,
                    "UPDATE held_calls SET state = $2, approver = $3, answer_key = $4, \
                     answer_approve = $5, answer_reason = $6, answered_at = $7, updated_at = $7 \
                     WHERE interaction_id = $1 AND state = 'pending' AND expires_at > $7 \
                     RETURNING interaction_id",
                    &[
                        &id,
                        &new_state.as_str(),
                        &answer.approver,
                        &answer.idempotency_key,
                        &answer.approve,
                        &reason,
                        &now.as_millis(),
                    ],
                )
                .await?;
            if won.is_some() {
                return Ok(state::answer_won(id, &answer, reason, now));
            }
            // Why not: read what is there.
            let Some(row) = self
                .query_opt(
                    &client,
                    "SELECT state, answer_key, answer_approve, expires_at, approver, \
                     answer_reason, answered_at FROM held_calls WHERE interaction_id = $1",
                    &[&id],
                )
                .await?
            else {
                return Err(AnswerError::UnknownId(id.to_owned()));
            };
            let read = |e: tokio_postgres::Error| AnswerError::Store(self.err(&e));
            let st: String = row.try_get(0).map_err(read)?;
            let st = self.parse_state(id, &st)?;
            let expires_at: i64 = row.try_get(3).map_err(read)?;
            let recorded = state::RecordedAnswer {
                key: row.try_get(1).map_err(read)?,
                approve: row.try_get(2).map_err(read)?,
                approver: row.try_get(4).map_err(read)?,
                reason: row.try_get(5).map_err(read)?,
                answered_at: row
                    .try_get::<_, Option<i64>>(6)
                    .map_err(read)?
                    .map(Timestamp::from_millis),
            };
            if let Some(replayed) = state::replay(id, &answer, recorded) {
                return replayed;
            }
            // Held between the update and the read: try again.
            self.lost_pending(&client, id, st, expires_at, now).await?;
        }
        Err(AnswerError::Store(state::changed_while(id, "answered")))
    }

    /// Acts on [`state::pending_lost`]: `Ok(())` when the call is still pending and not yet
    /// due (the caller tries again), otherwise the error to answer with (a call past its
    /// expiry is marked `expired` first).
    async fn lost_pending(
        &self,
        client: &Object,
        id: &str,
        st: State,
        expires_at: i64,
        now: Timestamp,
    ) -> Result<(), AnswerError> {
        match state::pending_lost(id, st, Timestamp::from_millis(expires_at), now) {
            PendingLost::StillPending => Ok(()),
            PendingLost::Expire(e) => {
                self.expire_one(client, id, now).await?;
                Err(e)
            }
            PendingLost::Refuse(e) => Err(e),
        }
    }

    async fn cancel_op(&self, id: &str) -> Result<(), AnswerError> {
        let client = self.client().await?;
        for _ in 0..ATTEMPTS {
            let now = Timestamp::now();
            let cancelled = self
                .query_opt(
                    &client,
                    "UPDATE held_calls SET state = 'cancelled', updated_at = $2 \
                     WHERE interaction_id = $1 AND state = 'pending' AND expires_at > $2 \
                     RETURNING interaction_id",
                    &[&id, &now.as_millis()],
                )
                .await?;
            if cancelled.is_some() {
                return Ok(());
            }
            let Some(row) = self
                .query_opt(
                    &client,
                    "SELECT state, expires_at FROM held_calls WHERE interaction_id = $1",
                    &[&id],
                )
                .await?
            else {
                return Err(AnswerError::UnknownId(id.to_owned()));
            };
            let read = |e: tokio_postgres::Error| AnswerError::Store(self.err(&e));
            let state: String = row.try_get(0).map_err(read)?;
            let expires_at: i64 = row.try_get(1).map_err(read)?;
            let state = self.parse_state(id, &state)?;
            self.lost_pending(&client, id, state, expires_at, now)
                .await?;
        }
        Err(AnswerError::Store(state::changed_while(id, "cancelled")))
    }

    async fn claim_op(&self, id: &str, claim: Claim) -> Result<Claimed, ClaimError> {
        let client = self.client().await?;
        let now = Timestamp::now();
        // INVARIANT: `approved → claimed` is one conditional update that also checks both R35
        // hashes, committed (autocommit) before this returns, so before the tool is invoked.
        // Of racing senders, on any instances, exactly one changes the row.
        let won = self
            .query_opt(
                &client,
                "UPDATE held_calls SET state = 'claimed', claim_token = $2, claimed_by = $3, \
                 claimed_at = $4, updated_at = $4 \
                 WHERE interaction_id = $1 AND state = 'approved' AND input_hash = $5 \
                 AND definition_hash = $6 \
                 RETURNING approver",
                &[
                    &id,
                    &claim.token,
                    &self.inner.options.instance,
                    &now.as_millis(),
                    &claim.input_hash,
                    &claim.definition_hash,
                ],
            )
            .await?;
        if let Some(row) = won {
            let approver: Option<String> = row.try_get(0).map_err(|e| self.err(&e))?;
            return Ok(Claimed {
                approver: approver.unwrap_or_default(),
            });
        }
        let Some(row) = self
            .query_opt(
                &client,
                "SELECT state, input_hash, definition_hash FROM held_calls WHERE interaction_id = $1",
                &[&id],
            )
            .await?
        else {
            return Err(ClaimError::UnknownId(id.to_owned()));
        };
        let read = |e: tokio_postgres::Error| ClaimError::Store(self.err(&e));
        let state: String = row.try_get(0).map_err(read)?;
        let input_hash: String = row.try_get(1).map_err(read)?;
        let definition_hash: String = row.try_get(2).map_err(read)?;
        let state = self.parse_state(id, &state)?;
        Err(state::claim_lost(
            id,
            &claim,
            state,
            &input_hash,
            &definition_hash,
        ))
    }

    async fn complete_op(&self, id: &str, completion: Completion) -> Result<State, CompleteError> {
        let client = self.client().await?;
        let to = state::completed_state(completion.outcome);
        let now = Timestamp::now();
        // Only the claim's own token records, once.
        let recorded = self
            .query_opt(
                &client,
                "UPDATE held_calls SET state = $3, result_json = $4, finished_at = $5, updated_at = $5 \
                 WHERE interaction_id = $1 AND state = 'claimed' AND claim_token = $2 \
                 RETURNING interaction_id",
                &[
                    &id,
                    &completion.token,
                    &to.as_str(),
                    &completion.result.to_string(),
                    &now.as_millis(),
                ],
            )
            .await?;
        if recorded.is_some() {
            return Ok(to);
        }
        Err(state::complete_lost(id, self.state_of(&client, id).await?))
    }

    async fn get_policy_op(&self) -> Result<Option<StoredPolicy>, InboxError> {
        let client = self.client().await?;
        let row = self
            .query_opt(
                &client,
                "SELECT body, updated_at FROM stored_policy WHERE id = 1",
                &[],
            )
            .await?;
        match row {
            None => Ok(None),
            Some(row) => Ok(Some(StoredPolicy {
                body: row.try_get(0).map_err(|e| self.err(&e))?,
                updated_at: row.try_get(1).map_err(|e| self.err(&e))?,
            })),
        }
    }

    async fn put_policy_op(&self, body: String) -> Result<StoredPolicy, InboxError> {
        let mut client = self.client().await?;
        let server = self.inner.server.clone();
        let err = |e: tokio_postgres::Error| error::db(&server, &e);
        let tx = client.transaction().await.map_err(err)?;
        // INVARIANT: puts are serialised (readers are not blocked), so each `updatedAt` is
        // computed after the previous one committed and is strictly later than it (R23).
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
}

/// Waits for a notice about `id` (or one saying notices were lost). Never returns once the
/// inbox is gone: the caller's timeout ends the wait, and it looks itself.
async fn next_about(notices: &mut Subscription, id: &str) {
    loop {
        match notices.next().await {
            Some(Notice::State { interaction_id, .. }) if interaction_id == id => return,
            Some(Notice::Missed) => return,
            Some(_) => {}
            None => std::future::pending::<()>().await,
        }
    }
}

/// Waits for a policy notice (or one saying notices were lost).
async fn next_policy(notices: &mut Subscription) {
    loop {
        match notices.next().await {
            Some(Notice::Policy { .. } | Notice::Missed) => return,
            Some(_) => {}
            None => std::future::pending::<()>().await,
        }
    }
}

/// Reads one row selected with [`COLUMNS`].
fn read_row(row: &Row) -> Result<HeldRecord, String> {
    fn col<'a, T: tokio_postgres::types::FromSql<'a>>(row: &'a Row, i: usize) -> Result<T, String> {
        row.try_get(i).map_err(|e| error::describe(&e))
    }
    let ts = |i: usize| -> Result<Option<Timestamp>, String> {
        Ok(col::<Option<i64>>(row, i)?.map(Timestamp::from_millis))
    };
    let state: String = col(row, 15)?;
    let state = State::parse(&state).ok_or_else(|| format!("unknown state `{state}`"))?;
    let result = match col::<Option<String>>(row, 22)? {
        Some(t) => Some(codec::parse_json(&t)?),
        None => None,
    };
    Ok(HeldRecord {
        call: NewHeldCall {
            interaction_id: col(row, 0)?,
            call_id: col(row, 1)?,
            tool: col(row, 2)?,
            identities: codec::identities_from_json(&col::<String>(row, 3)?)?,
            definition_hash: col(row, 4)?,
            agent: AgentRef {
                profile: col(row, 5)?,
                subagent: col(row, 6)?,
            },
            input_json: col(row, 7)?,
            input_canonical: col(row, 8)?,
            input_hash: col(row, 9)?,
            reasons: codec::reasons_from_json(&col::<String>(row, 10)?)?,
            run: RunContext {
                mode: codec::run_mode_from(&col::<String>(row, 11)?)?,
                background: col(row, 12)?,
            },
            turn: match (
                col::<Option<String>>(row, 25)?,
                col::<Option<String>>(row, 26)?,
            ) {
                (Some(session), Some(turn)) => Some(Turn { session, turn }),
                _ => None,
            },
            created_at: Timestamp::from_millis(col(row, 13)?),
            expires_at: Timestamp::from_millis(col(row, 14)?),
        },
        state,
        approver: col(row, 16)?,
        answer_key: col(row, 17)?,
        answer_reason: col(row, 18)?,
        answered_at: ts(19)?,
        claimed_by: col(row, 20)?,
        claimed_at: ts(21)?,
        result,
        finished_at: ts(23)?,
        updated_at: Timestamp::from_millis(col(row, 24)?),
    })
}

impl InboxStore for PostgresInbox {
    fn hold(&self, call: NewHeldCall) -> BoxFuture<'_, Result<(), InboxError>> {
        Box::pin(self.hold_op(call))
    }

    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<HeldRecord>, InboxError>> {
        Box::pin(self.get_op(id))
    }

    fn list(&self, state: Option<State>) -> BoxFuture<'_, Result<Vec<HeldRecord>, InboxError>> {
        Box::pin(self.list_op(state))
    }

    fn session_calls<'a>(
        &'a self,
        session: &'a str,
        turn: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<HeldRecord>, InboxError>> {
        Box::pin(self.session_calls_op(session, turn))
    }

    fn cancel_turn<'a>(
        &'a self,
        session: &'a str,
        turn: &'a str,
    ) -> BoxFuture<'a, Result<Vec<String>, InboxError>> {
        Box::pin(self.cancel_turn_op(session, turn))
    }

    fn answer<'a>(
        &'a self,
        id: &'a str,
        answer: Answer,
    ) -> BoxFuture<'a, Result<AnswerReceipt, AnswerError>> {
        Box::pin(self.answer_op(id, answer))
    }

    fn cancel<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), AnswerError>> {
        Box::pin(self.cancel_op(id))
    }

    fn expire_due(&self, now: Timestamp) -> BoxFuture<'_, Result<Vec<String>, InboxError>> {
        Box::pin(async move {
            self.move_all(
                "UPDATE held_calls SET state = 'expired', updated_at = $1 \
                 WHERE state = 'pending' AND expires_at <= $1 \
                 RETURNING interaction_id, created_at",
                &[&now.as_millis()],
            )
            .await
        })
    }

    fn claim<'a>(
        &'a self,
        id: &'a str,
        claim: Claim,
    ) -> BoxFuture<'a, Result<Claimed, ClaimError>> {
        Box::pin(self.claim_op(id, claim))
    }

    fn complete<'a>(
        &'a self,
        id: &'a str,
        completion: Completion,
    ) -> BoxFuture<'a, Result<State, CompleteError>> {
        Box::pin(self.complete_op(id, completion))
    }

    fn recover(&self) -> BoxFuture<'_, Result<Vec<String>, InboxError>> {
        Box::pin(async move {
            // INVARIANT: only this instance's claims; another live instance's claims are its
            // own to record (or to recover when it restarts).
            self.move_all(
                "UPDATE held_calls SET state = 'unknown', updated_at = $2 \
                 WHERE state = 'claimed' AND claimed_by = $1 \
                 RETURNING interaction_id, created_at",
                &[&self.inner.options.instance, &Timestamp::now().as_millis()],
            )
            .await
        })
    }

    fn get_policy(&self) -> BoxFuture<'_, Result<Option<StoredPolicy>, InboxError>> {
        Box::pin(self.get_policy_op())
    }

    fn put_policy<'a>(
        &'a self,
        policy: &'a Policy,
    ) -> BoxFuture<'a, Result<StoredPolicy, InboxError>> {
        let body = codec::policy_body(policy);
        Box::pin(self.put_policy_op(body))
    }
}
