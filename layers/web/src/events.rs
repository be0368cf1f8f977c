//! Server-sent events: one poller reads the store's change feed
//! ([`HeldCalls::changed_since`]) and passes on each call that changed; every open page
//! gets only what changed — `added` (the new card, rendered for that person and only when
//! it passes the page's filters), `ended` (the id and state of a call answered, expired or
//! cancelled) — and a `changed` event for the pages that refresh themselves (history,
//! grants).

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, Stream};
use tokio::sync::broadcast;
use toolgate_inbox::{HeldQuery, HeldRecord, Listing, State as CallState, Timestamp};

use crate::listing::PageQuery;
use crate::state::App;
use crate::state::Who;

/// What one page's stream is made of.
enum Item {
    Changed(u64),
    Delta(Arc<HeldRecord>),
    /// Changes were missed (a slow page): it reloads its list.
    Lagged,
}

/// The event a change is for `who` on a page filtered by `filter`: `added` with the card
/// (a pending call they may see and the filter passes), `ended` with its id, state and
/// whether the page counted it (a call they may see that is no longer pending), or
/// nothing.
fn delta_event(
    who: &Who,
    filter: &HeldQuery,
    ctx: &crate::risk::RiskContext,
    r: &HeldRecord,
) -> Option<Event> {
    if !crate::rights::may_see(who, r) {
        return None;
    }
    if r.state == CallState::Pending {
        if !filter.matches(r) {
            return None;
        }
        let cues = crate::risk::cues(ctx, r);
        let card = crate::listing::grouped_card(r, who, Timestamp::now(), &cues);
        return Some(Event::default().event("added").data(card.into_string()));
    }
    let mut as_pending = r.clone();
    as_pending.state = CallState::Pending;
    let counted = filter.matches(&as_pending);
    let data = serde_json::json!({
        "id": r.id(),
        "state": r.state.as_str(),
        "approver": r.approver,
        "counted": counted,
    });
    Some(Event::default().event("ended").data(data.to_string()))
}

/// The stream of one page. Who the page is for is read again for every event, from the
/// request's own credentials against the approvers in force: a person a reload removed, or
/// whose sign-in ended, gets nothing more (the stream ends), and one a reload narrowed gets
/// only the calls they may still answer.
fn changes(
    app: App,
    headers: HeaderMap,
    filter: HeldQuery,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let mut rx = app.0.changes.clone();
    rx.mark_unchanged();
    let deltas = app.0.deltas.subscribe();
    let state = (app, headers, filter, rx, deltas);
    stream::unfold(
        state,
        |(app, headers, filter, mut rx, mut deltas)| async move {
            loop {
                let item = tokio::select! {
                    changed = rx.changed() => match changed {
                        Ok(()) => Item::Changed(*rx.borrow_and_update()),
                        Err(_) => return None,
                    },
                    delta = deltas.recv() => match delta {
                        Ok(r) => Item::Delta(r),
                        Err(broadcast::error::RecvError::Lagged(_)) => Item::Lagged,
                        Err(broadcast::error::RecvError::Closed) => return None,
                    },
                };
                let who = app.who_now(&headers).await?;
                let event = match item {
                    Item::Changed(v) => Some(Event::default().event("changed").data(v.to_string())),
                    Item::Lagged => Some(Event::default().event("resync").data("1")),
                    Item::Delta(r) => {
                        let ctx = crate::risk::RiskContext::load(&app).await;
                        delta_event(&who, &filter, &ctx, &r)
                    }
                };
                if let Some(e) = event {
                    return Some((Ok(e), (app, headers, filter, rx, deltas)));
                }
            }
        },
    )
}

pub(crate) async fn sse(
    State(app): State<App>,
    headers: HeaderMap,
    identity: crate::auth::Identity,
    Query(pq): Query<PageQuery>,
) -> Response {
    if identity.who().is_none() {
        return crate::auth::unauthorized();
    }
    // The page's own filters (its ages from now on); a filter that cannot be read gets
    // the refusal, as the page did.
    let mut filter = match pq.held_query(Listing::Pending, Timestamp::now()) {
        Ok(q) => q,
        Err(r) => return r,
    };
    // Newer-than is relative to the page's load; a call held from now on is newer still.
    filter.held_after = None;
    filter.after = None;
    Sse::new(changes(app, headers, filter))
        .keep_alive(KeepAlive::default())
        .into_response()
}
