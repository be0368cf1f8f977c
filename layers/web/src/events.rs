//! Server-sent events: one poller looks at the store and bumps a counter when the held calls
//! change; every open page gets a `changed` event and refreshes its live part.

use std::collections::hash_map::DefaultHasher;
use std::convert::Infallible;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, Stream};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use toolgate_inbox::{InboxStore, State as CallState};

use crate::app::App;

/// A fingerprint of the pending held calls (ids and last change): a new held call, and
/// every answer, expiry or cancellation (which ends a pending call), changes it. Only the
/// pending calls are read, so a long history costs nothing here.
pub(crate) async fn fingerprint(store: &dyn InboxStore) -> Option<u64> {
    let records = store.list(Some(CallState::Pending)).await.ok()?;
    let mut h = DefaultHasher::new();
    records.len().hash(&mut h);
    for r in &records {
        r.id().hash(&mut h);
        r.state.as_str().hash(&mut h);
        r.updated_at.as_millis().hash(&mut h);
    }
    Some(h.finish())
}

pub(crate) fn spawn_poller(
    store: Arc<dyn InboxStore>,
    every: Duration,
    wake: Option<Arc<Notify>>,
    primed: Option<Option<u64>>,
    tx: watch::Sender<u64>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut last = match primed {
            Some(seen) => seen,
            None => fingerprint(&*store).await,
        };
        loop {
            // A wake-up (a store's change notice, e.g. PostgreSQL's LISTEN) looks at once;
            // the interval is the fallback.
            match &wake {
                Some(w) => {
                    tokio::select! {
                        () = tokio::time::sleep(every) => {}
                        () = w.notified() => {}
                    }
                }
                None => tokio::time::sleep(every).await,
            }
            let now = fingerprint(&*store).await;
            if now.is_some() && now != last {
                last = now;
                tx.send_modify(|v| *v = v.wrapping_add(1));
            }
        }
    })
}

fn changes(mut rx: watch::Receiver<u64>) -> impl Stream<Item = Result<Event, Infallible>> {
    rx.mark_unchanged();
    stream::unfold(rx, |mut rx| async move {
        rx.changed().await.ok()?;
        let v = *rx.borrow_and_update();
        Some((
            Ok(Event::default().event("changed").data(v.to_string())),
            rx,
        ))
    })
}

pub(crate) async fn sse(State(app): State<App>, headers: HeaderMap) -> Response {
    if app.who(&headers).is_none() {
        return crate::auth::unauthorized();
    }
    Sse::new(changes(app.0.changes.clone()))
        .keep_alive(KeepAlive::default())
        .into_response()
}
