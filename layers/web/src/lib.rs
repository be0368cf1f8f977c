//! # toolgate-web
//!
//! The approval page: people answer held calls and edit the stored tenant policy in a
//! browser (`toolgate serve --config toolgate.json`). Server-rendered HTML over any
//! [`InboxStore`] (SQLite or PostgreSQL), one small static script, no build step.
//!
//! - **Pending approvals** (`/`): one card per held call, a page at a time from the store
//!   (oldest or newest first, filtered by agent, tool, server, session, reason source and
//!   age, searched by input text: [`toolgate_inbox::HeldQuery`]), grouped by session and
//!   turn (SPEC R43): the prompt (`Approve server / tool?`), the model's name, every
//!   reason with its source and the risk cues, the agent or subagent, the input exactly as
//!   it will be sent (pretty-printed, escaped), age and expiry, and **Approve** / **Deny**
//!   with an optional reason, or a selection answered in bulk (refused whole when one of it
//!   may not be answered). New held calls and answers appear without a reload (server-sent
//!   events on `/events`, fed by one poller over the store's change feed), each change
//!   alone: the card added or the call ended, never the whole list.
//!   Beside Approve, **Approve, and allow matching calls for …** approves the call and gives
//!   a grant (R45), pre-filled from the card (agent, tool, session, a `when` the input
//!   passes, 30 minutes, 5 calls) and editable, bound to the card's hashes like Approve.
//! - **Grants** (`/grants`): every grant the person gave or has the rights to give, with its
//!   state (`live`, `expired`, `spent`, `revoked` — who revoked it and when), and Revoke
//!   (after a confirmation; only with rights over what it answers).
//! - **History** (`/history`): answered, expired and cancelled calls, and who answered.
//! - **Policy** (`/policy`): the stored tenant policy's rules, strictest first; edit one in a
//!   panel, add one, delete one; every save replaces the policy whole through the same
//!   validation as `toolgate policy put` ([`toolgate_inbox::put_policy_text_if_unchanged`],
//!   R22), with each error shown next to its field; a save based on an older `updatedAt`
//!   than the stored one is refused as a conflict — checked by the store in the save's own
//!   transaction, so also against another page process or `toolgate policy put`.
//!   **Preview** beside each save replays the change over the last recorded calls of the
//!   configuration's audit file first ([`PolicyPreview`], R46): "this change over the last N
//!   recorded calls: X would now be refused, Y asked, Z run", with the calls that change.
//!
//! ## Who may answer
//!
//! The configuration's `approvers` section
//! ([`toolgate_engine::approvers::ApproverSettings`]) names the people: each signs in with
//! a token whose SHA-256 the configuration keeps ([`hash_token`]), or a trusted reverse
//! proxy puts their name in a header. The name recorded on an answer is always the
//! authenticated one. A person's `tools` selectors limit which held calls they may answer;
//! `edit_policy` lets them save the policy. Without an approver the page does not start
//! ([`WebSettings::from_governance`]).
//!
//! ## Safety of the page itself
//!
//! Binds loopback by default; sign-in sets an `HttpOnly; SameSite=Strict` cookie; every
//! state-changing request carries a CSRF token; the Approve form carries the input hash and
//! definition hash the page showed, and an approval of a call that differs is refused (R35);
//! the form's idempotency key makes a double submit one answer; every value is escaped; a
//! Content-Security-Policy without inline scripts or styles; request bodies are bounded;
//! only requests for the allowed hosts are answered, and only forms from them are taken
//! (`approvers.allowed_hosts`); sign-in attempts are throttled per client address (five at
//! once, then one every ten seconds: 429 with `Retry-After`).
#![forbid(unsafe_code)]
// A handler's early exit is the refusal page itself (`Result<_, Response>`), built once per
// request; boxing it would only add an allocation.
#![allow(
    clippy::result_large_err,
    reason = "a handler's early exit is the refusal page itself, built once per request; boxing it would only add an allocation"
)]

/// Guides: the chapters of the manual about this crate.
pub mod guide {
    #[doc = include_str!("../docs/approval-page.md")]
    pub mod approval_page {}
}

pub mod access;
mod answer;
mod api;
mod app;
mod auth;
mod bulk;
pub mod credential;
mod events;
mod grants;
mod html;
mod in_force;
mod listing;
mod ops;
mod pages;
mod policy;
mod poller;
mod rights;
mod risk;
pub mod slack;
mod state;
mod throttle;
mod token;
mod webhook;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use toolgate_engine::approvers::ApproverSettings;
use toolgate_engine::policy::Limits;
use toolgate_engine::{ConfigErrors, Governance};
use toolgate_inbox::InboxStore;

pub use app::router;
pub use in_force::{ApproversInForce, NotReplaced};
pub use ops::WebMetrics;
pub use state::App;

/// The largest request body the page accepts (a policy saved whole included).
pub const MAX_BODY_BYTES: usize = 256 * 1024;

/// What the page needs: who may answer, the limits policies are validated under, and
/// timings.
#[derive(Debug, Clone)]
pub struct WebSettings {
    /// The `approvers` section.
    pub approvers: ApproverSettings,
    /// The limits a saved policy is validated under (the configuration's `limits`).
    pub limits: Limits,
    /// How often the store is looked at for new held calls and answers (server-sent
    /// events).
    pub poll_interval: Duration,
    /// How long a sign-in lasts.
    pub session_ttl: Duration,
    /// What the policy tab replays a change over before a save (R46), when the
    /// configuration has an audit file: "this change over the last N recorded calls: X
    /// would now be refused, Y asked, Z run".
    pub preview: Option<PolicyPreview>,
    /// The configuration grants given on the page are checked against (R45: its tools and
    /// each approver's rights over them); `None`: the page gives and revokes no grant.
    pub governance: Option<Arc<Governance>>,
    /// The identity provider's token verifier, for `approvers.auth: jwt` (serve.md, "Agents
    /// and approvers from the identity provider"): made by
    /// [`WebSettings::connect_identity_provider`]. Without one, that mode refuses every
    /// request (fail closed).
    pub verifier: Option<toolgate_idp::Verifier>,
    /// The people, tokens and groups in force: made from `approvers` by
    /// [`WebSettings::new`]; sign-ins, sessions and rights read it on every request, so
    /// replacing it ([`ApproversInForce::replace`], `toolgate serve` on SIGHUP) revokes a
    /// token or a person without a restart. The rest of `approvers` (listen address, hosts,
    /// webhook, how people sign in) is read once, at start.
    pub in_force: ApproversInForce,
    /// The Slack app's signing secret (approval-page.md, "Answering from Slack"), read from
    /// `approvers.slack`'s `signing_secret_file`; without one, `POST /v1/callbacks/slack`
    /// refuses every request.
    pub slack_secret: Option<String>,
    /// What a press's `response_url` must start with for toolgate to post the message's
    /// update there ([`slack::SLACK_RESPONSE_URL_PREFIX`], Slack's own; a test points it at
    /// a receiver on loopback). A press whose `response_url` does not is answered, and its
    /// message is not updated (logged): a signed callback never makes the page post elsewhere.
    pub slack_response_url_prefix: String,
    /// What `GET /metrics` answers; `None`: 404.
    pub metrics: Option<WebMetrics>,
}

/// The policy tab's preview of a change (R46): the recorded calls it is replayed over and
/// the configuration they were decided under — the replay of `toolgate policy simulate`
/// ([`toolgate_engine::replay`]).
#[derive(Debug, Clone)]
pub struct PolicyPreview {
    /// The configuration the calls were decided under (tools, agents, settings). Its
    /// policy is replaced by the stored one, when one is stored, for the policy in force.
    pub governance: Arc<Governance>,
    /// The audit log (JSON lines, as `audit.file` writes them).
    pub audit_file: std::path::PathBuf,
    /// How many of the latest records are replayed.
    pub last: usize,
}

/// Why a configuration gives no page settings ([`WebSettings::from_governance`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SettingsError {
    /// The configuration (read from the path held) has no `approvers` section.
    #[error(
        "the configuration `{}` has no `approvers` section, so nobody could sign in: the approval page does not start without an approver (add `approvers.people` with a `name` and a `token_sha256` from `toolgate serve hash-token`)",
        .0.display()
    )]
    NoApprovers(std::path::PathBuf),
    /// The page's fields of `approvers` do not read ([`WebSettings::new`]).
    #[error("{0}")]
    Page(ConfigErrors),
    /// `approvers.slack.signing_secret_file` cannot be read.
    #[error("approvers.slack.signing_secret_file: cannot read `{}`: {source}", .file.display())]
    SlackSecretUnreadable {
        /// The file, as resolved against the configuration's directory.
        file: std::path::PathBuf,
        /// Why it cannot be read.
        source: std::io::Error,
    },
    /// `approvers.slack.signing_secret_file` holds nothing but line ends.
    #[error("approvers.slack.signing_secret_file: `{}` is empty", .0.display())]
    SlackSecretEmpty(std::path::PathBuf),
}

/// How many of the latest audit records the policy tab replays by default.
pub const DEFAULT_PREVIEW_RECORDS: usize = 10_000;

impl WebSettings {
    /// The settings of a loaded configuration read from `path`. Refuses, naming `path`,
    /// when the configuration has no approver: the page never starts without one.
    pub fn from_governance(gov: &Governance, path: &Path) -> Result<Self, SettingsError> {
        let Some(approvers) = gov.approver_settings() else {
            return Err(SettingsError::NoApprovers(path.to_path_buf()));
        };
        let mut settings =
            Self::new(approvers.clone(), gov.settings().limits).map_err(SettingsError::Page)?;
        let shared = Arc::new(gov.clone());
        settings.preview = gov
            .audit_settings()
            .file
            .as_ref()
            .map(|file| PolicyPreview {
                governance: Arc::clone(&shared),
                audit_file: file.into(),
                last: DEFAULT_PREVIEW_RECORDS,
            });
        settings.governance = Some(shared);
        let (_, access) = settings.in_force.with_access();
        if let Some(slack) = &access.slack {
            let file = &slack.signing_secret_file;
            let file = match path.parent() {
                Some(dir) if file.is_relative() => dir.join(file),
                _ => file.clone(),
            };
            let secret = match std::fs::read_to_string(&file) {
                Ok(secret) => secret,
                Err(source) => return Err(SettingsError::SlackSecretUnreadable { file, source }),
            };
            let secret = secret.trim_end_matches(['\r', '\n']).to_owned();
            if secret.trim().is_empty() {
                return Err(SettingsError::SlackSecretEmpty(file));
            }
            settings.slack_secret = Some(secret);
        }
        Ok(settings)
    }

    /// Settings with the default timings (a look at the store every second, sign-ins
    /// lasting 12 hours).
    ///
    /// # Errors
    ///
    /// The page's fields of `approvers` (`api_keys`, `slack`, the verification settings of
    /// `jwt`) that do not read ([`access::PageAccess::read`]), each named by its path.
    pub fn new(approvers: ApproverSettings, limits: Limits) -> Result<Self, ConfigErrors> {
        Ok(Self {
            in_force: ApproversInForce::new(approvers.clone())?,
            approvers,
            limits,
            poll_interval: Duration::from_secs(1),
            session_ttl: Duration::from_secs(12 * 3600),
            preview: None,
            governance: None,
            verifier: None,
            slack_secret: None,
            slack_response_url_prefix: String::from(slack::SLACK_RESPONSE_URL_PREFIX),
            metrics: None,
        })
    }
}

impl WebSettings {
    /// For `approvers.auth: jwt`: reads the `jwks_file` or fetches the `jwks_url`, making
    /// the verifier every request's token is checked with. Nothing to do in other modes.
    ///
    /// # Errors
    ///
    /// Keys that cannot be had, naming the field (`approvers.jwt.jwks_file: …`).
    pub async fn connect_identity_provider(&mut self) -> Result<(), ConfigErrors> {
        // The verification settings in force, read from `approvers.jwt` with the page's
        // fields ([`access::PageAccess::read`]); `auth: jwt` only.
        if let Some(settings) = self.in_force.with_access().1.jwt.clone() {
            let v = toolgate_idp::Verifier::start(settings, "approvers.jwt").await?;
            self.verifier = Some(v);
        }
        Ok(())
    }
}

/// The SHA-256 (64 lower-case hex digits) of a sign-in token: what `token_sha256` holds.
///
/// ```
/// assert_eq!(toolgate_web::hash_token("correct horse").len(), 64);
/// ```
pub fn hash_token(token: &str) -> String {
    let h = toolgate_engine::canon::sha256_hex(token.as_bytes());
    h.strip_prefix("sha256:").unwrap_or(&h).to_owned()
}

/// Serves the page on `listener` until `shutdown` resolves. The store poller (and the
/// webhook sender, when configured) run as long as the server does.
pub async fn serve(
    listener: tokio::net::TcpListener,
    store: Arc<dyn InboxStore>,
    settings: WebSettings,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_woken(listener, store, settings, None, shutdown).await
}

/// As [`serve`]; each `wake.notify_one()` (from a store's change feed, such as
/// PostgreSQL's `LISTEN` through `PostgresInbox::subscribe`) makes open pages update at once
/// instead of at the next poll.
pub async fn serve_woken(
    listener: tokio::net::TcpListener,
    store: Arc<dyn InboxStore>,
    settings: WebSettings,
    wake: Option<Arc<tokio::sync::Notify>>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    // The starting state is read before the first request is accepted.
    let primed = poller::prime();
    let listen = listener.local_addr()?;
    let app = App::start_primed(store, settings, wake, Some(primed), listen);
    let router = router(app.clone());
    // The client's address reaches the handlers (sign-in throttling, the log).
    let result = axum::serve(
        listener,
        router.into_make_service_with_connect_info::<std::net::SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown)
    .await;
    app.stop();
    result
}
