//! The shared state and the router.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use toolgate_inbox::InboxStore;
use tower_http::limit::RequestBodyLimitLayer;

use crate::WebSettings;
use crate::auth::Session;

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
    /// One policy save at a time in this process, so the `updatedAt` check and the put
    /// are not interleaved with another save here.
    pub(crate) policy_lock: tokio::sync::Mutex<()>,
    /// Bumped whenever the poller sees the held calls change.
    pub(crate) changes: watch::Receiver<u64>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
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
        Self::start_primed(store, settings, wake, None)
    }

    /// As [`App::start_woken`], with the store's state already looked at (`primed`), so a
    /// change right after the start is never taken for the starting state.
    pub(crate) fn start_primed(
        store: Arc<dyn InboxStore>,
        settings: WebSettings,
        wake: Option<Arc<tokio::sync::Notify>>,
        primed: Option<Option<u64>>,
    ) -> Self {
        let (tx, rx) = watch::channel(0_u64);
        let mut tasks = vec![crate::events::spawn_poller(
            Arc::clone(&store),
            settings.poll_interval,
            wake,
            primed,
            tx,
        )];
        if let Some(url) = settings.approvers.webhook.clone() {
            tasks.push(crate::webhook::spawn(
                Arc::clone(&store),
                url,
                settings.approvers.public_url.clone(),
                settings.poll_interval,
            ));
        }
        Self(Arc::new(Inner {
            store,
            settings,
            secret: crate::auth::random_hex(32),
            sessions: Mutex::new(HashMap::new()),
            policy_lock: tokio::sync::Mutex::new(()),
            changes: rx,
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

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

async fn security_headers(req: Request, next: Next) -> Response {
    let mut res = next.run(req).await;
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    res
}

/// The page's routes, with the security headers and the body limit.
pub fn router(app: App) -> Router {
    Router::new()
        .route("/", get(crate::pages::pending))
        .route("/history", get(crate::pages::history))
        .route("/calls/{id}", get(crate::pages::one))
        .route("/calls/{id}/answer", post(crate::pages::answer))
        .route("/events", get(crate::events::sse))
        .route("/policy", get(crate::policy::page))
        .route("/policy/rule", post(crate::policy::save_rule))
        .route("/policy/delete", post(crate::policy::delete_rule))
        .route("/policy/whole", post(crate::policy::save_whole))
        .route(
            "/login",
            get(crate::auth::login_page).post(crate::auth::login),
        )
        .route("/logout", post(crate::auth::logout))
        .route("/static/app.js", get(crate::html::script))
        .route("/static/app.css", get(crate::html::style))
        .layer(RequestBodyLimitLayer::new(crate::MAX_BODY_BYTES))
        .layer(middleware::from_fn(security_headers))
        .with_state(app)
}
