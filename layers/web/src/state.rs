//! The page's state: the store, the settings, the signed-in sessions, who a request is,
//! and the change feed; made once at start, cheap to clone, read by every handler.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use toolgate_engine::approvers::Approver;
use toolgate_inbox::InboxStore;

use crate::WebSettings;

/// The page's state: the store, the settings, the signed-in sessions and the change feed.
/// Cheap to clone.
#[derive(Clone)]
pub struct App(pub(crate) Arc<Inner>);

pub(crate) struct Inner {
    pub(crate) store: Arc<dyn InboxStore>,
    pub(crate) settings: WebSettings,
    /// A per-process secret: CSRF tokens for proxy-authenticated people derive from it.
    pub(crate) secret: String,
    pub(crate) sessions: Mutex<HashMap<String, Session>>,
    /// Sign-in attempts by client address.
    pub(crate) throttle: Mutex<crate::throttle::Throttle>,
    /// The `Host` values the page answers, and the origins it takes a form from:
    /// `approvers.allowed_hosts`, or the defaults for the address it listens on.
    pub(crate) hosts: Vec<String>,
    /// Bumped whenever the poller sees the held calls change.
    pub(crate) changes: watch::Receiver<u64>,
    /// Each held call the poller saw change (the live update sends only these).
    pub(crate) deltas: tokio::sync::broadcast::Sender<Arc<toolgate_inbox::HeldRecord>>,
    pub(crate) tasks: Mutex<Vec<JoinHandle<()>>>,
    /// The outbound client Slack's `response_url`s are posted with (answering from Slack is
    /// configured); `None` when it could not be made (then no message is updated, logged).
    pub(crate) slack_out: Option<toolgate_idp::FetchClient>,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App")
            .field("store", &self.0.store)
            .field("approvers", &self.0.settings.approvers.people.len())
            .finish_non_exhaustive()
    }
}

impl App {
    /// The page's state over `store`, with its store poller (and webhook sender) started
    /// on the current Tokio runtime.
    pub fn start(store: Arc<dyn InboxStore>, settings: WebSettings) -> Self {
        Self::start_woken(store, settings, None)
    }

    /// As [`App::start`]; `wake`, when given, makes the poller look at the store at once
    /// (notified by a store's change feed, such as `PostgresInbox::subscribe`), the poll
    /// interval staying as the fallback.
    pub fn start_woken(
        store: Arc<dyn InboxStore>,
        settings: WebSettings,
        wake: Option<Arc<tokio::sync::Notify>>,
    ) -> Self {
        let listen = settings.approvers.listen;
        Self::start_primed(store, settings, wake, None, listen)
    }

    /// As [`App::start_woken`], with the store's state already looked at (`primed`), so a
    /// change right after the start is never taken for the starting state; `listen` is the
    /// address the page is bound to (for the default allowed hosts).
    pub(crate) fn start_primed(
        store: Arc<dyn InboxStore>,
        settings: WebSettings,
        wake: Option<Arc<tokio::sync::Notify>>,
        primed: Option<toolgate_inbox::Timestamp>,
        listen: std::net::SocketAddr,
    ) -> Self {
        let hosts = settings.approvers.hosts(listen);
        // One snapshot in force for every request: the configuration set on the settings
        // joins the approvers there.
        settings.in_force.adopt(settings.governance.clone());
        let (tx, rx) = watch::channel(0_u64);
        let (deltas, _) = tokio::sync::broadcast::channel(1024);
        let mut tasks = vec![crate::poller::spawn_poller(
            Arc::clone(&store),
            settings.poll_interval,
            wake,
            primed,
            tx,
            deltas.clone(),
        )];
        if let Some(url) = settings.approvers.webhook.clone() {
            tasks.push(crate::webhook::spawn(
                Arc::clone(&store),
                url,
                settings.approvers.public_url.clone(),
                settings.poll_interval,
            ));
        }
        let slack_out = settings.slack_secret.as_ref().and_then(|_| {
            toolgate_idp::FetchClient::new(None)
                .map_err(|why| {
                    tracing::error!(%why, "Slack's messages cannot be updated: no outbound client");
                })
                .ok()
        });
        Self(Arc::new(Inner {
            store,
            slack_out,
            settings,
            secret: crate::token::random_hex(32),
            hosts,
            sessions: Mutex::new(HashMap::new()),
            throttle: Mutex::new(crate::throttle::Throttle::default()),
            changes: rx,
            deltas,
            tasks: Mutex::new(tasks),
        }))
    }

    /// Stops the background tasks.
    pub fn stop(&self) {
        if let Ok(mut tasks) = self.0.tasks.lock() {
            for t in tasks.drain(..) {
                t.abort();
            }
        }
    }
}

/// One signed-in person.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    pub(crate) approver: String,
    /// The SHA-256 of the token signed in with: the session lasts only while that token is
    /// the approver's in the approvers in force (revocation without restart).
    pub(crate) token_sha256: String,
    pub(crate) csrf: String,
    pub(crate) since: Instant,
}

/// The authenticated person behind a request, and the CSRF token their forms carry; for an
/// identity-provider token, the verified principal (`sub`, `iss`) too.
#[derive(Debug, Clone)]
pub(crate) struct Who {
    pub(crate) approver: Approver,
    pub(crate) csrf: String,
    pub(crate) principal: Option<toolgate_core::Principal>,
}

impl Who {
    /// This person's answer to a held call, as every form of the page gives it (the card's
    /// Approve and Deny, the bulk bar, "Approve, and allow …", the edited approval): their
    /// approver name and, when they signed in with an identity-provider token, their
    /// verified principal (`sub`, `iss`; R47), kept with the answer. One function, so no
    /// form records less than another (the grant's approval had none).
    pub(crate) fn answer(
        &self,
        approve: bool,
        idempotency_key: String,
        reason: Option<String>,
    ) -> toolgate_inbox::Answer {
        toolgate_inbox::Answer {
            approve,
            idempotency_key: Some(idempotency_key),
            approver: self.approver.name.clone(),
            reason,
            principal: self.principal.clone(),
            binding: None,
        }
    }
}
