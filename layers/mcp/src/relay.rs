//! What an upstream MCP server sends while it serves one governed call — progress
//! notifications, log messages (and, when asked for, sampling and elicitation requests) — and
//! the way back to the client that made the call.
//!
//! A host that wants them puts a [`CallRelay`] in the call's extensions. The call service
//! ([`McpToolService`](crate::McpToolService)) registers it with the server's connection only
//! when it sends the call — after every check of the governed stack and the permit (R38) —
//! and removes it when the call ends: nothing is relayed for a call that was refused, held or
//! not yet sent. While it is registered:
//!
//! - **progress**: the upstream request carries a progress token of its connection's own
//!   (rmcp gives every request one, unique on the connection); the server's
//!   `notifications/progress` for that token go to this relay, and only to it (and on to the
//!   client only when the client's own request asked for progress).
//! - **log messages** (`notifications/message`) and **requests** (sampling, elicitation)
//!   carry no call of their own on the wire, so they go to the relay of the one call in
//!   flight on that connection; with none or several in flight, a message is dropped (traced)
//!   and a request answered with an error — never sent to a client that did not make the call.
//! - **attribution**: a relayed elicitation is the upstream server's question, never
//!   toolgate's. Its message opens with a line toolgate writes — [`relayed_header`], naming
//!   the server's configured id — and its `_meta` carries [`RELAYED_FROM_META`]; any
//!   `_meta` key of toolgate's own namespace the server put there is dropped. toolgate's own
//!   approval questions open with [`APPROVAL_HEADER`] and carry [`APPROVAL_META`], which no
//!   relayed question can: the first line of a relayed one is always toolgate's attribution.

// Sampling and logging are deprecated by SEP-2577 in rmcp, and still what the servers of the
// protocol versions toolgate speaks send: relaying them is the point of this module.
#![allow(
    deprecated,
    reason = "logging and sampling (SEP-2577): what today's servers send during a call"
)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::ErrorData;
use rmcp::model::{
    CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams, ElicitResult,
    LoggingMessageNotificationParam, ProgressNotificationParam, ProgressToken, RequestMetaObject,
};
use tokio::sync::{mpsc, oneshot};

/// The `_meta` namespace toolgate writes on the questions it sends a client.
pub const META_NAMESPACE: &str = "io.toolgate/";

/// The `_meta` key naming the upstream server a relayed elicitation comes from.
pub const RELAYED_FROM_META: &str = "io.toolgate/relayedFrom";

/// The `_meta` key of toolgate's own approval question (its interaction id).
pub const APPROVAL_META: &str = "io.toolgate/approval";

/// The first line of toolgate's own approval question.
pub const APPROVAL_HEADER: &str = "toolgate approval";

/// The first line of a relayed elicitation: whose question it is.
pub fn relayed_header(server: &str) -> String {
    format!(
        "Question from the MCP server `{server}` (relayed by toolgate; not a toolgate approval):"
    )
}

/// Marks an upstream server's elicitation as that server's (module docs, "attribution"):
/// toolgate's line first, then the server's message; toolgate's `_meta` namespace is the
/// relay's to write. A mode toolgate does not know cannot be marked, so it is not relayed.
pub(crate) fn attribute(
    params: ElicitRequestParams,
    server: &str,
) -> Result<ElicitRequestParams, ErrorData> {
    fn mark(
        meta: Option<RequestMetaObject>,
        message: String,
        server: &str,
    ) -> (Option<RequestMetaObject>, String) {
        let mut meta = meta.unwrap_or_default();
        meta.0.0.retain(|k, _| !k.starts_with(META_NAMESPACE));
        meta.0.0.insert(
            RELAYED_FROM_META.to_owned(),
            serde_json::Value::String(server.to_owned()),
        );
        (
            Some(meta),
            format!("{}\n\n{message}", relayed_header(server)),
        )
    }
    match params {
        ElicitRequestParams::FormElicitationParams {
            meta,
            message,
            requested_schema,
        } => {
            let (meta, message) = mark(meta, message, server);
            Ok(ElicitRequestParams::FormElicitationParams {
                meta,
                message,
                requested_schema,
            })
        }
        ElicitRequestParams::UrlElicitationParams {
            meta,
            message,
            url,
            elicitation_id,
        } => {
            let (meta, message) = mark(meta, message, server);
            Ok(ElicitRequestParams::UrlElicitationParams {
                meta,
                message,
                url,
                elicitation_id,
            })
        }
        _ => Err(ErrorData::invalid_request(
            "toolgate relays elicitation only in the form and url modes, whose question it can attribute to its server",
            None,
        )),
    }
}

/// One thing an upstream server sent while serving the call, for the client that made it.
#[derive(Debug)]
#[non_exhaustive]
pub enum Relayed {
    /// `notifications/progress` (its token is toolgate's upstream one: put the client's back).
    Progress(ProgressNotificationParam),
    /// `notifications/message`.
    Log(LoggingMessageNotificationParam),
    /// `sampling/createMessage`: answer on the sender.
    Sampling(
        CreateMessageRequestParams,
        oneshot::Sender<Result<CreateMessageResult, ErrorData>>,
    ),
    /// `elicitation/create`: answer on the sender.
    Elicitation(
        ElicitRequestParams,
        oneshot::Sender<Result<ElicitResult, ErrorData>>,
    ),
}

/// Where what the upstream server sends while serving one call goes: put it in the
/// [`ToolCall`](toolgate_core::ToolCall)'s extensions before the governed stack.
#[derive(Debug, Clone)]
pub struct CallRelay {
    tx: mpsc::UnboundedSender<Relayed>,
    progress: bool,
}

impl CallRelay {
    /// A relay sending to `tx`; `progress`: the client asked for progress (its request
    /// carried a progress token).
    pub fn new(tx: mpsc::UnboundedSender<Relayed>, progress: bool) -> Self {
        Self { tx, progress }
    }

    /// Whether the client asked for progress.
    pub fn wants_progress(&self) -> bool {
        self.progress
    }

    fn send(&self, what: Relayed) -> bool {
        self.tx.send(what).is_ok()
    }
}

/// At most this many progress notifications wait for their call to note its token.
const UNCLAIMED: usize = 64;

/// How long a finished call's relay stays registered: notifications the server sent just
/// before its result are handled on their own tasks, and may be looked up after the result
/// arrived.
pub(crate) const LINGER: Duration = Duration::from_millis(100);

struct Entry {
    id: u64,
    token: Option<ProgressToken>,
    relay: CallRelay,
    /// The call ended (its result came, or it was abandoned): kept only for late
    /// notifications, never counted as in flight.
    done: bool,
}

/// The calls in flight on one connection, with their relays.
#[derive(Default)]
pub(crate) struct InFlight {
    next: AtomicU64,
    calls: Mutex<Vec<Entry>>,
    /// Progress for a token no call holds yet: rmcp picks a request's token as it sends it,
    /// so the server's first notification can be routed before the call has noted its token
    /// ([`Registration::set_token`] takes these). The oldest go past [`UNCLAIMED`].
    unclaimed: Mutex<std::collections::VecDeque<ProgressNotificationParam>>,
    /// The relayed notifications this connection has read and routed.
    pub(crate) arrivals: Arc<crate::arrivals::Arrivals>,
}

impl std::fmt::Debug for InFlight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InFlight")
            .field("calls", &lock(&self.calls).len())
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Registered while the call is in flight; dropping it ends the call's registration (the
/// entry lingers briefly for late notifications, see [`LINGER`]).
pub(crate) struct Registration {
    inflight: Arc<InFlight>,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let id = self.id;
        if let Some(e) = lock(&self.inflight.calls).iter_mut().find(|e| e.id == id) {
            e.done = true;
        }
        let inflight = Arc::clone(&self.inflight);
        let remove = move || lock(&inflight.calls).retain(|e| e.id != id);
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move {
                    tokio::time::sleep(LINGER).await;
                    remove();
                });
            }
            Err(_) => remove(),
        }
    }
}

impl Registration {
    /// Waits until what the server sent before the call's result is routed to the call's
    /// relay (see `crate::arrivals`).
    pub(crate) async fn settled(&self) {
        self.inflight.arrivals.settled().await;
    }

    /// The progress token the upstream request was sent with.
    /// Progress the server sent for it before this, in the order it came, goes to the
    /// call's relay now.
    pub(crate) fn set_token(&self, token: ProgressToken) {
        let mut calls = lock(&self.inflight.calls);
        let Some(e) = calls.iter_mut().find(|e| e.id == self.id) else {
            return;
        };
        let mut unclaimed = lock(&self.inflight.unclaimed);
        let early: std::collections::VecDeque<ProgressNotificationParam> = {
            let (mine, others) = unclaimed
                .drain(..)
                .partition(|p: &ProgressNotificationParam| p.progress_token == token);
            *unclaimed = others;
            mine
        };
        e.token = Some(token);
        if e.relay.progress {
            for p in early {
                e.relay.send(Relayed::Progress(p));
            }
        }
    }
}

impl InFlight {
    /// Registers a call's relay (before the request is sent, so it is in flight from the
    /// first message the server may send about it).
    pub(crate) fn register(self: &Arc<Self>, relay: CallRelay) -> Registration {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        lock(&self.calls).push(Entry {
            id,
            token: None,
            relay,
            done: false,
        });
        Registration {
            inflight: Arc::clone(self),
            id,
        }
    }

    /// A progress notification: to the relay whose upstream token it names.
    pub(crate) fn progress(&self, params: ProgressNotificationParam) {
        let calls = lock(&self.calls);
        match calls
            .iter()
            .find(|e| e.token.as_ref() == Some(&params.progress_token))
        {
            Some(e) if e.relay.progress => {
                e.relay.send(Relayed::Progress(params));
            }
            Some(_) => {}
            // Perhaps a call's first, come before the call noted its token: kept for it.
            None => {
                let mut unclaimed = lock(&self.unclaimed);
                if unclaimed.len() == UNCLAIMED {
                    unclaimed.pop_front();
                    tracing::debug!(
                        target: "toolgate_mcp::relay",
                        "progress for a token of no call in flight: dropped"
                    );
                }
                unclaimed.push_back(params);
            }
        }
    }

    /// The relay of the one call in flight, if exactly one is; for a late notification, the
    /// one call that ended last while none other is in flight.
    fn only(&self, late_ok: bool) -> Option<CallRelay> {
        let calls = lock(&self.calls);
        let live: Vec<&Entry> = calls.iter().filter(|e| !e.done).collect();
        match live.as_slice() {
            [one] => Some(one.relay.clone()),
            [] if late_ok => match calls.as_slice() {
                [one] => Some(one.relay.clone()),
                _ => None,
            },
            _ => None,
        }
    }

    /// A log message: to the one call in flight, else dropped.
    pub(crate) fn log(&self, params: LoggingMessageNotificationParam) {
        match self.only(true) {
            Some(r) => {
                r.send(Relayed::Log(params));
            }
            None => tracing::debug!(
                target: "toolgate_mcp::relay",
                "a log message while no single call is in flight: dropped"
            ),
        }
    }

    /// A sampling request: to the one call in flight, else an error.
    pub(crate) async fn sampling(
        &self,
        params: CreateMessageRequestParams,
    ) -> Result<CreateMessageResult, ErrorData> {
        let relay = self.only(false).ok_or_else(no_single_call)?;
        let (tx, rx) = oneshot::channel();
        if !relay.send(Relayed::Sampling(params, tx)) {
            return Err(gone());
        }
        rx.await.unwrap_or_else(|_| Err(gone()))
    }

    /// An elicitation request: to the one call in flight, else an error.
    pub(crate) async fn elicitation(
        &self,
        params: ElicitRequestParams,
    ) -> Result<ElicitResult, ErrorData> {
        let relay = self.only(false).ok_or_else(no_single_call)?;
        let (tx, rx) = oneshot::channel();
        if !relay.send(Relayed::Elicitation(params, tx)) {
            return Err(gone());
        }
        rx.await.unwrap_or_else(|_| Err(gone()))
    }
}

fn no_single_call() -> ErrorData {
    ErrorData::invalid_request(
        "toolgate relays a server's requests only to the client of the one governed call in flight on this connection, and there is not exactly one",
        None,
    )
}

fn gone() -> ErrorData {
    ErrorData::internal_error(
        "the client whose call this request belongs to is no longer waiting for it",
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::NumberOrString;

    fn progress(token: i64, n: f64) -> ProgressNotificationParam {
        ProgressNotificationParam::new(ProgressToken(NumberOrString::Number(token)), n)
    }

    /// rmcp picks a request's progress token as it sends it, so the server's first
    /// notification can be routed before the call has noted its token: it waits for the
    /// call, in order, and reaches it; another call's never does.
    #[tokio::test]
    async fn progress_come_before_the_call_noted_its_token_still_reaches_the_call() {
        let inflight = Arc::new(InFlight::default());
        let (tx, mut rx) = mpsc::unbounded_channel();
        let registration = inflight.register(CallRelay::new(tx, true));
        inflight.progress(progress(7, 0.0));
        inflight.progress(progress(8, 5.0));
        inflight.progress(progress(7, 50.0));
        registration.set_token(ProgressToken(NumberOrString::Number(7)));
        inflight.progress(progress(7, 100.0));
        let mut got = Vec::new();
        while let Ok(Relayed::Progress(p)) = rx.try_recv() {
            got.push(p.progress);
        }
        assert_eq!(got, [0.0, 50.0, 100.0]);
        assert_eq!(
            lock(&inflight.unclaimed).len(),
            1,
            "token 8's waits for its own call"
        );
    }

    #[test]
    fn unclaimed_progress_is_bounded() {
        let inflight = InFlight::default();
        for i in 0..(UNCLAIMED as i64 + 10) {
            inflight.progress(progress(i, 0.0));
        }
        assert_eq!(lock(&inflight.unclaimed).len(), UNCLAIMED);
    }
}
