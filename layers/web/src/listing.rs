//! The pending and history lists at scale (approval-page.md): one page at a time from the
//! store ([`toolgate_inbox::HeldQuery`], newest or oldest first), filtered by agent, tool,
//! server, session, reason source and age and searched by input text, with the count of
//! what matches, a pager, and the bulk answer bar.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use maud::{Markup, html};
use serde::Deserialize;
use toolgate_inbox::{
    HeldCursor, HeldPage, HeldQuery, HeldRecord, InboxError, Listing, Order, State as CallState,
    Timestamp,
};

use crate::html::{self, Shown, Tab};
use crate::pages::{age, agent_text, card_cued};
use crate::rights::may_see;
use crate::rights::store_failed;
use crate::state::App;
use crate::state::Who;
use crate::token::random_hex;

/// How many cards or rows a page shows unless `size` says otherwise: a card with its forms
/// is about 6 KB, so a page stays under 100 KB.
pub(crate) const PAGE_SIZE: usize = 15;

/// The most a page shows (`size`).
pub(crate) const MAX_SIZE: usize = 200;

/// The reason sources a list can be filtered by ([`toolgate_core::AskSource::kind`]).
const SOURCES: [(&str, &str); 5] = [
    ("agent", "agent approval mode"),
    ("policy_rule", "a tenant policy rule"),
    ("policy_default", "the tenant policy default"),
    ("posture", "the behaviour posture"),
    ("hook", "a hook"),
];

/// A list's query string: its filters, order, page and size. Every field is text so that
/// a bad value is refused naming its field, not dropped.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct PageQuery {
    /// `1`: only the live part (for the script's refresh).
    pub(crate) fragment: Option<String>,
    pub(crate) agent: Option<String>,
    pub(crate) tool: Option<String>,
    pub(crate) server: Option<String>,
    pub(crate) session: Option<String>,
    /// A reason source kind (`posture`, `policy_rule`, …).
    pub(crate) source: Option<String>,
    /// Held at least this many minutes ago.
    pub(crate) older: Option<String>,
    /// Held at most this many minutes ago.
    pub(crate) newer: Option<String>,
    /// Text the input contains.
    pub(crate) q: Option<String>,
    /// `oldest` or `newest`.
    pub(crate) order: Option<String>,
    /// The cursor of the page (`HeldCursor::to_text`).
    pub(crate) after: Option<String>,
    /// The page that ends just before this call (`HeldCursor::to_text`): the Previous link.
    pub(crate) before: Option<String>,
    /// Cards a page.
    pub(crate) size: Option<String>,
}

fn given(v: &Option<String>) -> Option<String> {
    v.as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

fn bad(field: &str, why: &str) -> Response {
    html::refusal(
        StatusCode::BAD_REQUEST,
        "Refused",
        &format!("`{field}` {why}; nothing was listed"),
    )
}

fn minutes(field: &str, v: &Option<String>) -> Result<Option<Duration>, Response> {
    let Some(t) = given(v) else {
        return Ok(None);
    };
    match t.parse::<u64>() {
        Ok(m) if m <= 10_000_000 => Ok(Some(Duration::from_secs(m * 60))),
        _ => Err(bad(
            field,
            &format!("is `{t}`, not a whole number of minutes"),
        )),
    }
}

/// Percent-encodes `s` for a query string.
pub(crate) fn enc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

impl PageQuery {
    /// The store query this asks for, at `now` (ages are measured from it), or the refusal
    /// naming the field that cannot be read.
    pub(crate) fn held_query(
        &self,
        listing: Listing,
        now: Timestamp,
    ) -> Result<HeldQuery, Response> {
        let mut q = match listing {
            Listing::Pending => HeldQuery::pending(),
            Listing::History => HeldQuery::history(),
        };
        q.order = match given(&self.order).as_deref() {
            None => q.order,
            Some("oldest") => Order::OldestFirst,
            Some("newest") => Order::NewestFirst,
            Some(o) => return Err(bad("order", &format!("is `{o}`, not `oldest` or `newest`"))),
        };
        q.agent = given(&self.agent);
        q.tool = given(&self.tool);
        q.server = given(&self.server);
        q.session = given(&self.session);
        q.reason_source = match given(&self.source) {
            None => None,
            Some(s) if SOURCES.iter().any(|(k, _)| *k == s) => Some(s),
            Some(s) => {
                return Err(bad(
                    "source",
                    &format!(
                        "is `{s}`, not one of {}",
                        SOURCES
                            .iter()
                            .map(|(k, _)| format!("`{k}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            }
        };
        q.held_before = minutes("older", &self.older)?.map(|d| now.saturating_sub(d));
        q.held_after = minutes("newer", &self.newer)?.map(|d| now.saturating_sub(d));
        q.text = given(&self.q);
        q.after = match given(&self.after) {
            None => None,
            Some(a) => Some(
                HeldCursor::parse(&a)
                    .ok_or_else(|| bad("after", &format!("is `{a}`, not a page of this list")))?,
            ),
        };
        q.limit = match given(&self.size) {
            None => PAGE_SIZE,
            Some(n) => match n.parse::<usize>() {
                Ok(n) if (1..=MAX_SIZE).contains(&n) => n,
                _ => {
                    return Err(bad(
                        "size",
                        &format!("is `{n}`, not a number from 1 to {MAX_SIZE}"),
                    ));
                }
            },
        };
        Ok(q)
    }

    /// Whether any filter is set.
    fn filtered(&self) -> bool {
        [
            &self.agent,
            &self.tool,
            &self.server,
            &self.session,
            &self.source,
            &self.older,
            &self.newer,
            &self.q,
        ]
        .iter()
        .any(|v| given(v).is_some())
    }

    /// The query string of the filters, order and size (not the page), `&`-joined.
    pub(crate) fn filter_string(&self) -> String {
        let pairs = [
            ("agent", &self.agent),
            ("tool", &self.tool),
            ("server", &self.server),
            ("session", &self.session),
            ("source", &self.source),
            ("older", &self.older),
            ("newer", &self.newer),
            ("q", &self.q),
            ("order", &self.order),
            ("size", &self.size),
        ];
        pairs
            .iter()
            .filter_map(|(k, v)| given(v).map(|v| format!("{k}={}", enc(&v))))
            .collect::<Vec<_>>()
            .join("&")
    }

    fn href(&self, path: &str, after: Option<&HeldCursor>) -> String {
        self.href_at(path, after.map(|c| ("after", c)))
    }

    /// The list's link with its filters, at a page given by `after` or `before` (or the
    /// first page).
    fn href_at(&self, path: &str, at: Option<(&str, &HeldCursor)>) -> String {
        let mut qs = self.filter_string();
        if let Some((key, c)) = at {
            if !qs.is_empty() {
                qs.push('&');
            }
            let _ = write!(qs, "{key}={}", enc(&c.to_text()));
        }
        if qs.is_empty() {
            path.to_owned()
        } else {
            format!("{path}?{qs}")
        }
    }
}

/// One page of what `who` may see of `q`, and how many of those match in all: one page
/// query and one count, with a person's `tools` selectors put into the store's statement
/// ([`toolgate_inbox::VisibleTo`], the same rule as [`crate::rights::may_see`]).
pub(crate) async fn visible_page(
    app: &App,
    who: &Who,
    q: &HeldQuery,
) -> Result<(HeldPage, u64), InboxError> {
    let store = &app.0.store;
    let q = visible_query(who, q);
    let page = store.query_held(&q).await?;
    let count = store.count_held(&q).await?;
    // The store's filter is `may_see`'s; checked again on what is shown, failing closed.
    let shown = page.records.len();
    let mut page = page;
    page.records.retain(|r| may_see(who, r));
    if page.records.len() != shown {
        return Err(InboxError::new(
            toolgate_inbox::InboxErrorKind::Backend,
            "the inbox listed a call beyond the approver's rights",
        ));
    }
    Ok((page, count))
}

/// `q` narrowed to what `who` may see (nothing added for a person with rights over every
/// tool).
pub(crate) fn visible_query(who: &Who, q: &HeldQuery) -> HeldQuery {
    let mut q = q.clone();
    if let Some(selectors) = &who.approver.tools {
        q.visible_to = Some(toolgate_inbox::VisibleTo {
            selectors: selectors.clone(),
            approver: who.approver.name.clone(),
        });
    }
    q
}

/// Where the Previous link of a page goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Previous {
    /// This is the first page: no link.
    None,
    /// To the first page.
    First,
    /// To the page that ends just before this call.
    Before(HeldCursor),
}

/// The page `pq` asks for (`q` is its store query, `after` its cursor): one forward page, or
/// with `before` the page that ends just before that call — read backwards and shown in the
/// list's order; when it reaches the start of the list the first page is shown instead, full.
/// Returns the page, the count, and where its Previous link goes.
pub(crate) async fn shown_page(
    app: &App,
    who: &Who,
    pq: &PageQuery,
    q: &HeldQuery,
) -> Result<(HeldPage, u64, Previous), Response> {
    let before = match given(&pq.before) {
        None => None,
        Some(b) => Some(
            HeldCursor::parse(&b)
                .ok_or_else(|| bad("before", &format!("is `{b}`, not a page of this list")))?,
        ),
    };
    if before.is_some() && q.after.is_some() {
        return Err(bad("before", "cannot be given with `after`"));
    }
    let Some(before) = before else {
        let (page, count) = visible_page(app, who, q).await.map_err(store_failed)?;
        let prev = match (&q.after, page.records.first()) {
            (None, _) => Previous::None,
            (Some(_), Some(first)) => Previous::Before(HeldCursor::after(first)),
            (Some(_), None) => Previous::First,
        };
        return Ok((page, count, prev));
    };
    let mut back = q.clone();
    back.order = match q.order {
        Order::OldestFirst => Order::NewestFirst,
        Order::NewestFirst => Order::OldestFirst,
    };
    back.after = Some(before);
    let (mut page, count) = visible_page(app, who, &back).await.map_err(store_failed)?;
    if page.next.is_none() {
        // Nothing before these: the first page, full.
        let mut first = q.clone();
        first.after = None;
        let (page, count) = visible_page(app, who, &first).await.map_err(store_failed)?;
        return Ok((page, count, Previous::None));
    }
    page.records.reverse();
    page.next = page.records.last().map(HeldCursor::after);
    let prev = page
        .records
        .first()
        .map_or(Previous::First, |r| Previous::Before(HeldCursor::after(r)));
    Ok((page, count, prev))
}

/// The filter form (a `GET` of the same list), every field labelled.
fn filter_form(path: &str, pq: &PageQuery, q: &HeldQuery) -> Markup {
    // What the person typed, as typed: the form sends it back.
    let v = |f: &Option<String>| given(f).unwrap_or_default();
    let text_field = |label: &str, name: &str, value: &Option<String>| {
        html! {
            label { (label) " " input type="text" name=(name) id={ "f-" (name) } value=(v(value)); }
        }
    };
    let minutes = |label: &str, name: &str, value: &Option<String>| {
        html! {
            label { (label) " " input type="number" min="0" name=(name) id={ "f-" (name) } value=(v(value)); }
        }
    };
    let newest = q.order == Order::NewestFirst;
    html! {
        form method="get" action=(path) class="filters" id="filters" role="search" aria-label="Filter the list" {
            label {
                "Search input "
                input type="search" name="q" id="f-q" value=(v(&pq.q)) placeholder="text in the input";
            }
            (text_field("Agent", "agent", &pq.agent))
            (text_field("Tool", "tool", &pq.tool))
            (text_field("Server", "server", &pq.server))
            (text_field("Session", "session", &pq.session))
            label {
                "Reason "
                select name="source" id="f-source" {
                    option value="" { "any source" }
                    @for (k, label) in SOURCES {
                        option value=(k) selected[q.reason_source.as_deref() == Some(k)] { (label) }
                    }
                }
            }
            (minutes("Older than (min)", "older", &pq.older))
            (minutes("Newer than (min)", "newer", &pq.newer))
            label {
                "Order "
                select name="order" id="f-order" {
                    option value="oldest" selected[!newest] { "oldest first" }
                    option value="newest" selected[newest] { "newest first" }
                }
            }
            button type="submit" id="f-apply" { "Filter" }
            " "
            a href=(path) id="f-clear" { "Clear" }
        }
    }
}

/// "Previous page" and "First page" past the first, and "Next page", each keeping the
/// filters.
fn pager(path: &str, pq: &PageQuery, prev: &Previous, page: &HeldPage) -> Markup {
    let to = match prev {
        Previous::Before(c) => pq.href_at(path, Some(("before", c))),
        _ => pq.href(path, None),
    };
    html! {
        nav class="pager" aria-label="Pages" {
            @if *prev != Previous::None {
                a href=(pq.href(path, None)) id="page-first" { "First page" }
                " "
                a href=(to) id="page-prev" rel="prev" { "Previous page" }
                " "
            }
            @if let Some(next) = &page.next {
                a href=(pq.href(path, Some(next))) id="page-next" rel="next" { "Next page" }
            }
        }
    }
}

/// The bulk answer bar: its form carries the selected cards' checkboxes (`form="bulk"`),
/// each with the hashes its card showed (R35).
fn bulk_bar(who: &Who, hidden: bool) -> Markup {
    html! {
        form method="post" action="/bulk" id="bulk" class="bulk" aria-label="Answer the selected calls" hidden[hidden] {
            input type="hidden" name="csrf" value=(who.csrf);
            input type="hidden" name="idempotency_key" value=(random_hex(16));
            label class="pick-all" hidden { input type="checkbox" id="pick-all"; " Select all on this page" }
            span id="picked" aria-live="polite" {}
            label class="sr" for="bulk-reason" { "Deny reason for the selected calls" }
            input type="text" name="reason" id="bulk-reason" maxlength=(toolgate_inbox::MAX_REASON_CHARS)
                placeholder="Reason for a denial (optional)";
            button type="submit" name="decision" value="approve" class="approve" id="bulk-approve" { "Approve selected" }
            button type="submit" name="decision" value="deny" class="deny" id="bulk-deny" { "Deny selected" }
        }
    }
}

/// The key of a card's session and turn group, as the page marks it (`data-key`).
pub(crate) fn group_key(r: &HeldRecord) -> String {
    match &r.call.turn {
        Some(t) => format!("s:{}\u{1f}t:{}", t.session, t.turn),
        None => String::from("none"),
    }
}

/// A card inside its session and turn sections (R43), as one group on the page: what a
/// live update inserts when the page has no section for it yet.
pub(crate) fn grouped_card(
    r: &HeldRecord,
    who: &Who,
    now: Timestamp,
    cues: &[(&'static str, String)],
) -> Markup {
    let card = card_cued(r, who, now, true, cues);
    session_section(
        r.call.turn.as_ref().map(|t| t.session.as_str()),
        turn_section(r, 1, card),
    )
}

/// A session's section holding `inner`.
fn session_section(session: Option<&str>, inner: Markup) -> Markup {
    html! {
        section class="session" {
            h2 {
                @if let Some(s) = session {
                    "Session " code { (Shown(s)) }
                } @else {
                    "Outside any session"
                }
            }
            (inner)
        }
    }
}

/// The section of `r`'s turn, where `n` of its calls are on the page, holding `inner`.
fn turn_section(r: &HeldRecord, n: usize, inner: Markup) -> Markup {
    html! {
        section class="turn" data-key=(group_key(r)) {
            @if let Some(t) = &r.call.turn {
                h3 class="turn-title" {
                    "Turn " code { (Shown(&t.turn)) } " · paused by " (n) " held call"
                    @if n != 1 { "s" }
                    " on this page"
                }
            }
            (inner)
        }
    }
}

/// The cards of one page grouped by session, then turn, each group in the order of its
/// first card on the page (R43); calls outside any session last.
fn cards(records: &[HeldRecord], who: &Who, ctx: &crate::risk::RiskContext) -> Markup {
    let now = Timestamp::now();
    type Turns<'a> = Vec<(String, Vec<&'a HeldRecord>)>;
    let mut sessions: Vec<(Option<&str>, Turns<'_>)> = Vec::new();
    let mut where_session: HashMap<Option<&str>, usize> = HashMap::new();
    for r in records {
        let session = r.call.turn.as_ref().map(|t| t.session.as_str());
        let si = *where_session.entry(session).or_insert_with(|| {
            sessions.push((session, Vec::new()));
            sessions.len() - 1
        });
        let Some((_, turns)) = sessions.get_mut(si) else {
            continue;
        };
        let key = group_key(r);
        match turns.iter_mut().find(|(k, _)| *k == key) {
            Some((_, calls)) => calls.push(r),
            None => turns.push((key, vec![r])),
        }
    }
    sessions.sort_by_key(|(s, _)| s.is_none());
    let turn = |calls: &[&HeldRecord]| {
        let cards = html! {
            @for r in calls {
                (card_cued(r, who, now, true, &crate::risk::cues(ctx, r)))
            }
        };
        match calls.first() {
            Some(first) => turn_section(first, calls.len(), cards),
            None => cards,
        }
    };
    html! {
        @for (session, turns) in &sessions {
            (session_section(*session, html! { @for (_, calls) in turns { (turn(calls)) } }))
        }
    }
}

/// A list page, or only its live part (`fragment`, for the script's refresh). `events`: the
/// event stream the pending page follows (its updates applied as deltas).
fn respond(
    who: &Who,
    tab: Tab,
    title: &str,
    inner: Markup,
    events: Option<&str>,
    fragment: bool,
) -> Response {
    if fragment {
        return Html(inner.into_string()).into_response();
    }
    let body = html! {
        div id="live" data-live="1" data-delta=[events.map(|_| "1")] data-events=[events] { (inner) }
    };
    html::page(title, Some((who, tab)), body).into_response()
}

pub(crate) async fn pending(
    State(app): State<App>,
    identity: crate::auth::Identity,
    Query(pq): Query<PageQuery>,
) -> Response {
    let Some(who) = identity.who() else {
        return app.sign_in_first(&identity);
    };
    let q = match pq.held_query(Listing::Pending, Timestamp::now()) {
        Ok(q) => q,
        Err(r) => return r,
    };
    let (page, count, prev) = match shown_page(&app, &who, &pq, &q).await {
        Ok(p) => p,
        Err(r) => return r,
    };
    let ctx = crate::risk::RiskContext::load(&app).await;
    // Where a call held from now on belongs: at the bottom of the last page oldest-first,
    // at the top of the first page newest-first; elsewhere it is only counted.
    let add = match (q.order, prev != Previous::None, page.next.is_some()) {
        (Order::OldestFirst, _, false) => "bottom",
        (Order::NewestFirst, false, _) => "top",
        _ => "none",
    };
    let inner = html! {
        h1 { "Pending approvals " span class="count" id="pending-count" { (count) } }
        (filter_form("/", &pq, &q))
        @if count == 0 {
            @if pq.filtered() {
                p class="empty" id="empty" { "No held call matches these filters." }
            } @else {
                p class="empty" id="empty" { "No held call is waiting for an answer." }
            }
        }
        (bulk_bar(&who, count == 0))
        p class="note" id="new-note" hidden {}
        div id="cards" data-add=(add) { (cards(&page.records, &who, &ctx)) }
        (pager("/", &pq, &prev, &page))
        (keys_help())
    };
    let events = format!("/events?{}", pq.filter_string());
    respond(
        &who,
        Tab::Pending,
        "Pending approvals",
        inner,
        Some(&events),
        pq.fragment.is_some(),
    )
}

/// The keyboard shortcuts, listed on the pending page.
fn keys_help() -> Markup {
    let key = |k: &str, what: &str| html! { dt { kbd { (k) } } dd { (what) } };
    html! {
        details class="keys" id="keys" {
            summary { "Keyboard shortcuts" }
            dl {
                dt { kbd { "j" } " / " kbd { "k" } }
                dd { "next / previous call" }
                (key("a", "approve the current call"))
                (key("d", "deny the current call (with the reason typed)"))
                (key("r", "focus the deny reason"))
                (key("x", "select the current call for a bulk answer"))
                (key("u", "undo the answer being sent"))
            }
            p {
                "An answer given with a key or the bulk bar waits a few seconds, with " em { "Undo" } ", before it is sent."
            }
        }
    }
}

/// The short form of an input, for a history row.
fn excerpt(r: &HeldRecord) -> String {
    let t = &r.call.input_json;
    let mut s: String = t.chars().take(80).collect();
    if t.chars().count() > 80 {
        s.push('…');
    }
    s
}

pub(crate) async fn history(
    State(app): State<App>,
    identity: crate::auth::Identity,
    Query(pq): Query<PageQuery>,
) -> Response {
    let Some(who) = identity.who() else {
        return app.sign_in_first(&identity);
    };
    let q = match pq.held_query(Listing::History, Timestamp::now()) {
        Ok(q) => q,
        Err(r) => return r,
    };
    let (page, count, prev) = match shown_page(&app, &who, &pq, &q).await {
        Ok(p) => p,
        Err(r) => return r,
    };
    let now = Timestamp::now();
    let inner = html! {
        h1 { "History " span class="count" id="history-count" { (count) } }
        (filter_form("/history", &pq, &q))
        table class="history" {
            thead {
                tr {
                    th { "Held" } th { "Call" } th { "Input" } th { "Agent" } th { "Session" }
                    th { "State" } th { "Who answered" } th { "When" } th { "Reason" }
                }
            }
            tbody { @for r in &page.records { (history_row(r, now)) } }
        }
        @if page.records.is_empty() {
            @if pq.filtered() {
                p class="empty" { "Nothing answered matches these filters." }
            } @else {
                p class="empty" { "Nothing answered yet." }
            }
        }
        (pager("/history", &pq, &prev, &page))
    };
    respond(
        &who,
        Tab::History,
        "History",
        inner,
        None,
        pq.fragment.is_some(),
    )
}

/// One answered call's row on the history page.
fn history_row(r: &HeldRecord, now: Timestamp) -> Markup {
    let who_answered = match (&r.approver, r.state) {
        // R51: a call several people approved names them all.
        (Some(_), s) if s != CallState::Denied && r.approvals_needed() > 1 => {
            html! { (Shown(&r.approved_by())) }
        }
        (Some(a), _) => html! { (Shown(a)) (crate::pages::principal_html(r)) },
        (None, CallState::Expired) => html! { "nobody: it expired" },
        (None, CallState::Cancelled) => html! { "nobody: its turn was cancelled" },
        (None, _) => html! {},
    };
    let when = r.answered_at.unwrap_or(r.updated_at);
    let (id, state) = (r.id(), r.state.as_str());
    html! {
        tr class={ "state-" (state) } id={ "row-" (id) } {
            td { span class="ago" data-since=(r.call.created_at.as_millis()) { (age(r.call.created_at.age(now))) " ago" } }
            td { a href={ "/calls/" (id) } { (Shown(&r.interaction().prompt)) } }
            td { code class="excerpt" { (Shown(&excerpt(r))) } }
            td { (Shown(&agent_text(r))) }
            td { (Shown(r.call.turn.as_ref().map_or("", |t| t.session.as_str()))) }
            td class="state" { (state) }
            td class="approver" { (who_answered) }
            td { time datetime=(when) { (when) } }
            td { (Shown(r.answer_reason.as_deref().unwrap_or(""))) }
        }
    }
}
