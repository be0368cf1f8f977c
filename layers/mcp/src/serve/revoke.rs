//! Revocation without restart (serve.md, "Agents and approvers from the identity
//! provider"): every streamable HTTP request is authenticated against the tokens in force,
//! so a revoked token is refused from the next request on; and the sessions opened with one
//! are closed. Each open session remembers the bearer token its latest request came with;
//! when the tokens in force change (a reload: SIGHUP) or the identity provider's keys are
//! read or fetched again (a reload, a `jwks_url` refresh on its cache lifetime or for an
//! unknown `kid`), each session's token is authenticated again, and a session whose token
//! no longer is — a static token no longer listed, a JWT whose key was removed, that
//! expired, or that now names another agent — is closed: its streams end, and a request
//! naming it is answered 404, so the client starts over with a token in force.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

use super::Shared;
use super::auth::Tokens;

/// How often the sweeper looks whether the tokens or keys in force changed.
const LOOK_EVERY: Duration = Duration::from_millis(200);

/// How often, besides, the sessions the manager no longer holds (ended by their clients)
/// are forgotten, so the map follows the open sessions without any reload.
const FORGET_EVERY: Duration = Duration::from_secs(60);

/// The token each open session's latest request came with, and the agent it spoke for.
#[derive(Default)]
pub(super) struct OpenSessions {
    by_id: Mutex<HashMap<String, (String, String)>>,
}

impl std::fmt::Debug for OpenSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the tokens.
        f.debug_struct("OpenSessions")
            .field("sessions", &self.lock().len())
            .finish()
    }
}

impl OpenSessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (String, String)>> {
        self.by_id
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Forgets the sessions `manager` no longer holds.
    pub(super) async fn forget_ended(&self, manager: &LocalSessionManager) {
        let open: std::collections::HashSet<String> = manager
            .sessions
            .read()
            .await
            .keys()
            .map(|k| k.to_string())
            .collect();
        self.lock().retain(|id, _| open.contains(id));
    }

    /// Session `id` was last used with `bearer`, speaking for `agent`.
    pub(super) fn seen(&self, id: &str, bearer: &str, agent: &str) {
        self.lock()
            .insert(id.to_owned(), (bearer.to_owned(), agent.to_owned()));
    }

    /// Authenticates each open session's token again with `tokens`; closes (in `manager`)
    /// each session whose token is no longer taken, or now speaks for another agent, and
    /// forgets the sessions the manager no longer holds. The ids of the closed sessions.
    pub(super) async fn sweep(
        &self,
        tokens: &Tokens,
        manager: &LocalSessionManager,
    ) -> Vec<String> {
        let open: std::collections::HashSet<String> = manager
            .sessions
            .read()
            .await
            .keys()
            .map(|k| k.to_string())
            .collect();
        let entries: Vec<(String, (String, String))> = {
            let mut by_id = self.lock();
            by_id.retain(|id, _| open.contains(id));
            by_id.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
        };
        let mut closed = Vec::new();
        for (id, (bearer, agent)) in entries {
            let mut headers = hyper::HeaderMap::new();
            let Ok(value) = hyper::header::HeaderValue::from_str(&format!("Bearer {bearer}"))
            else {
                continue;
            };
            headers.insert(hyper::header::AUTHORIZATION, value);
            let still = match tokens.authenticate(&headers).await {
                Ok(a) => a.agent == agent,
                Err(_) => false,
            };
            if still {
                continue;
            }
            let sid: Arc<str> = Arc::from(id.as_str());
            let _ = manager.close_session(&sid).await;
            self.lock().remove(&id);
            tracing::info!(
                target: "toolgate_mcp::serve",
                agent = %toolgate_core::display::visible(&agent),
                "an MCP session was closed: the token it was opened with is no longer taken"
            );
            closed.push(id);
        }
        closed
    }
}

/// Aborts the task it holds when dropped.
pub(super) struct Sweeper(tokio::task::JoinHandle<()>);

impl Drop for Sweeper {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts the sweeper of `sessions`: it sweeps whenever the tokens in force are replaced or
/// the identity provider's keys are read again, until `shared` is gone or it is dropped.
pub(super) fn start(
    shared: Weak<Shared>,
    sessions: Arc<OpenSessions>,
    manager: Arc<LocalSessionManager>,
) -> Sweeper {
    let in_force = |shared: &Weak<Shared>| {
        let tokens = shared.upgrade()?.tokens();
        let generation = tokens.jwt.as_ref().map(|j| j.verifier.keys_generation());
        Some((tokens, generation))
    };
    let mut last = in_force(&shared);
    Sweeper(tokio::spawn(async move {
        let mut forgot = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(LOOK_EVERY).await;
            if forgot.elapsed() >= FORGET_EVERY {
                sessions.forget_ended(&manager).await;
                forgot = tokio::time::Instant::now();
            }
            let Some((tokens, generation)) = in_force(&shared) else {
                return;
            };
            let changed = match &last {
                None => true,
                Some((t, g)) => !Arc::ptr_eq(t, &tokens) || *g != generation,
            };
            if changed {
                sessions.sweep(&tokens, &manager).await;
                // The sweep itself may have fetched the keys (a token naming an unknown
                // `kid`): what was swept with is the baseline.
                let generation = tokens.jwt.as_ref().map(|j| j.verifier.keys_generation());
                last = Some((tokens, generation));
            }
        }
    }))
}
