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
use serde::Deserialize;
use toolgate_inbox::{
    HeldCursor, HeldPage, HeldQuery, HeldRecord, InboxError, Listing, Order, State as CallState,
    Timestamp,
};

use crate::html::{self, Tab, esc, text};
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
fn filter_form(out: &mut String, path: &str, pq: &PageQuery, q: &HeldQuery) {
    let v = |f: &Option<String>| esc(&given(f).unwrap_or_default());
    let _ = write!(
        out,
        "<form method=\"get\" action=\"{path}\" class=\"filters\" id=\"filters\" role=\"search\" aria-label=\"Filter the list\">\
         <label>Search input <input type=\"search\" name=\"q\" id=\"f-q\" value=\"{}\" placeholder=\"text in the input\"></label>\
         <label>Agent <input type=\"text\" name=\"agent\" id=\"f-agent\" value=\"{}\"></label>\
         <label>Tool <input type=\"text\" name=\"tool\" id=\"f-tool\" value=\"{}\"></label>\
         <label>Server <input type=\"text\" name=\"server\" id=\"f-server\" value=\"{}\"></label>\
         <label>Session <input type=\"text\" name=\"session\" id=\"f-session\" value=\"{}\"></label>\
         <label>Reason <select name=\"source\" id=\"f-source\"><option value=\"\">any source</option>",
        v(&pq.q),
        v(&pq.agent),
        v(&pq.tool),
        v(&pq.server),
        v(&pq.session),
    );
    for (k, label) in SOURCES {
        let sel = if q.reason_source.as_deref() == Some(k) {
            " selected"
        } else {
            ""
        };
        let _ = write!(out, "<option value=\"{k}\"{sel}>{label}</option>");
    }
    let newest = q.order == Order::NewestFirst;
    let _ = write!(
        out,
        "</select></label>\
         <label>Older than (min) <input type=\"number\" min=\"0\" name=\"older\" id=\"f-older\" value=\"{}\"></label>\
         <label>Newer than (min) <input type=\"number\" min=\"0\" name=\"newer\" id=\"f-newer\" value=\"{}\"></label>\
         <label>Order <select name=\"order\" id=\"f-order\"><option value=\"oldest\"{}>oldest first</option><option value=\"newest\"{}>newest first</option></select></label>\
         <button type=\"submit\" id=\"f-apply\">Filter</button> <a href=\"{path}\" id=\"f-clear\">Clear</a></form>",
        v(&pq.older),
        v(&pq.newer),
        if newest { "" } else { " selected" },
        if newest { " selected" } else { "" },
    );
}

/// "Previous page" and "First page" past the first, and "Next page", each keeping the
/// filters.
fn pager(out: &mut String, path: &str, pq: &PageQuery, prev: &Previous, page: &HeldPage) {
    out.push_str("<nav class=\"pager\" aria-label=\"Pages\">");
    if *prev != Previous::None {
        let _ = write!(
            out,
            "<a href=\"{}\" id=\"page-first\">First page</a> ",
            esc(&pq.href(path, None))
        );
        let to = match prev {
            Previous::Before(c) => pq.href_at(path, Some(("before", c))),
            _ => pq.href(path, None),
        };
        let _ = write!(
            out,
            "<a href=\"{}\" id=\"page-prev\" rel=\"prev\">Previous page</a> ",
            esc(&to)
        );
    }
    if let Some(next) = &page.next {
        let _ = write!(
            out,
            "<a href=\"{}\" id=\"page-next\" rel=\"next\">Next page</a>",
            esc(&pq.href(path, Some(next)))
        );
    }
    out.push_str("</nav>");
}

/// The bulk answer bar: its form carries the selected cards' checkboxes (`form="bulk"`),
/// each with the hashes its card showed (R35).
fn bulk_bar(out: &mut String, who: &Who, hidden: bool) {
    let _ = write!(
        out,
        "<form method=\"post\" action=\"/bulk\" id=\"bulk\" class=\"bulk\" aria-label=\"Answer the selected calls\"{}>\
         <input type=\"hidden\" name=\"csrf\" value=\"{}\"><input type=\"hidden\" name=\"idempotency_key\" value=\"{}\">\
         <label class=\"pick-all\" hidden><input type=\"checkbox\" id=\"pick-all\"> Select all on this page</label>\
         <span id=\"picked\" aria-live=\"polite\"></span>\
         <label class=\"sr\" for=\"bulk-reason\">Deny reason for the selected calls</label>\
         <input type=\"text\" name=\"reason\" id=\"bulk-reason\" maxlength=\"{}\" placeholder=\"Reason for a denial (optional)\">\
         <button type=\"submit\" name=\"decision\" value=\"approve\" class=\"approve\" id=\"bulk-approve\">Approve selected</button>\
         <button type=\"submit\" name=\"decision\" value=\"deny\" class=\"deny\" id=\"bulk-deny\">Deny selected</button></form>",
        if hidden { " hidden" } else { "" },
        esc(&who.csrf),
        random_hex(16),
        toolgate_inbox::MAX_REASON_CHARS,
    );
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
    out: &mut String,
    r: &HeldRecord,
    who: &Who,
    now: Timestamp,
    cues: &[(&'static str, String)],
) {
    session_open(out, r.call.turn.as_ref().map(|t| t.session.as_str()));
    turn_open(out, r, 1);
    card_cued(out, r, who, now, true, cues);
    out.push_str("</section></section>");
}

fn session_open(out: &mut String, session: Option<&str>) {
    match session {
        Some(s) => {
            let _ = write!(
                out,
                "<section class=\"session\"><h2>Session <code>{}</code></h2>",
                text(s)
            );
        }
        None => out.push_str("<section class=\"session\"><h2>Outside any session</h2>"),
    }
}

fn turn_open(out: &mut String, r: &HeldRecord, n: usize) {
    let key = esc(&group_key(r));
    match &r.call.turn {
        Some(t) => {
            let _ = write!(
                out,
                "<section class=\"turn\" data-key=\"{key}\"><h3 class=\"turn-title\">Turn <code>{}</code> · paused by {n} held call{} on this page</h3>",
                text(&t.turn),
                if n == 1 { "" } else { "s" }
            );
        }
        None => {
            let _ = write!(out, "<section class=\"turn\" data-key=\"{key}\">");
        }
    }
}

/// The cards of one page grouped by session, then turn, each group in the order of its
/// first card on the page (R43); calls outside any session last.
fn cards(out: &mut String, records: &[HeldRecord], who: &Who, ctx: &crate::risk::RiskContext) {
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
    for (session, turns) in &sessions {
        session_open(out, *session);
        for (_, calls) in turns {
            if let Some(first) = calls.first() {
                turn_open(out, first, calls.len());
            }
            for r in calls {
                let cues = crate::risk::cues(ctx, r);
                card_cued(out, r, who, now, true, &cues);
            }
            out.push_str("</section>");
        }
        out.push_str("</section>");
    }
}

fn respond(who: &Who, tab: Tab, title: &str, inner: &str, attrs: &str, fragment: bool) -> Response {
    if fragment {
        return Html(inner.to_owned()).into_response();
    }
    let body = format!("<div id=\"live\" data-live=\"1\"{attrs}>{inner}</div>");
    html::page(title, Some((who, tab)), &body).into_response()
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
    let mut inner = String::with_capacity(64 * 1024);
    let _ = write!(
        inner,
        "<h1>Pending approvals <span class=\"count\" id=\"pending-count\">{count}</span></h1>"
    );
    filter_form(&mut inner, "/", &pq, &q);
    if count == 0 {
        if pq.filtered() {
            inner.push_str(
                "<p class=\"empty\" id=\"empty\">No held call matches these filters.</p>",
            );
        } else {
            inner.push_str(
                "<p class=\"empty\" id=\"empty\">No held call is waiting for an answer.</p>",
            );
        }
    }
    bulk_bar(&mut inner, &who, count == 0);
    // Where a call held from now on belongs: at the bottom of the last page oldest-first,
    // at the top of the first page newest-first; elsewhere it is only counted.
    let add = match (q.order, prev != Previous::None, page.next.is_some()) {
        (Order::OldestFirst, _, false) => "bottom",
        (Order::NewestFirst, false, _) => "top",
        _ => "none",
    };
    let _ = write!(
        inner,
        "<p class=\"note\" id=\"new-note\" hidden></p><div id=\"cards\" data-add=\"{add}\">"
    );
    cards(&mut inner, &page.records, &who, &ctx);
    inner.push_str("</div>");
    pager(&mut inner, "/", &pq, &prev, &page);
    inner.push_str(KEYS_HELP);
    let attrs = format!(
        " data-delta=\"1\" data-events=\"{}\"",
        esc(&format!("/events?{}", pq.filter_string()))
    );
    respond(
        &who,
        Tab::Pending,
        "Pending approvals",
        &inner,
        &attrs,
        pq.fragment.is_some(),
    )
}

/// The keyboard shortcuts, listed on the pending page.
const KEYS_HELP: &str = "<details class=\"keys\" id=\"keys\"><summary>Keyboard shortcuts</summary><dl>\
<dt><kbd>j</kbd> / <kbd>k</kbd></dt><dd>next / previous call</dd>\
<dt><kbd>a</kbd></dt><dd>approve the current call</dd>\
<dt><kbd>d</kbd></dt><dd>deny the current call (with the reason typed)</dd>\
<dt><kbd>r</kbd></dt><dd>focus the deny reason</dd>\
<dt><kbd>x</kbd></dt><dd>select the current call for a bulk answer</dd>\
<dt><kbd>u</kbd></dt><dd>undo the answer being sent</dd></dl>\
<p>An answer given with a key or the bulk bar waits a few seconds, with <em>Undo</em>, before it is sent.</p></details>";

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
    let mut inner =
        format!("<h1>History <span class=\"count\" id=\"history-count\">{count}</span></h1>");
    filter_form(&mut inner, "/history", &pq, &q);
    inner.push_str(
        "<table class=\"history\"><thead><tr><th>Held</th><th>Call</th><th>Input</th><th>Agent</th><th>Session</th><th>State</th><th>Who answered</th><th>When</th><th>Reason</th></tr></thead><tbody>",
    );
    for r in &page.records {
        let who_answered = match (&r.approver, r.state) {
            // R51: a call several people approved names them all.
            (Some(_), s) if s != CallState::Denied && r.approvals_needed() > 1 => {
                text(&r.approved_by())
            }
            (Some(a), _) => format!("{}{}", text(a), crate::pages::principal_html(r)),
            (None, CallState::Expired) => String::from("nobody: it expired"),
            (None, CallState::Cancelled) => String::from("nobody: its turn was cancelled"),
            (None, _) => String::new(),
        };
        let when = r.answered_at.unwrap_or(r.updated_at);
        let _ = write!(
            inner,
            "<tr class=\"state-{state}\" id=\"row-{id}\"><td><span class=\"ago\" data-since=\"{}\">{} ago</span></td><td><a href=\"/calls/{id}\">{}</a></td><td><code class=\"excerpt\">{}</code></td><td>{}</td><td>{}</td><td class=\"state\">{state}</td><td class=\"approver\">{who_answered}</td><td><time datetime=\"{when}\">{when}</time></td><td>{}</td></tr>",
            r.call.created_at.as_millis(),
            age(r.call.created_at.age(now)),
            text(&r.interaction().prompt),
            text(&excerpt(r)),
            text(&agent_text(r)),
            text(r.call.turn.as_ref().map_or("", |t| t.session.as_str())),
            text(r.answer_reason.as_deref().unwrap_or("")),
            id = esc(r.id()),
            state = r.state.as_str(),
        );
    }
    inner.push_str("</tbody></table>");
    if page.records.is_empty() {
        inner.push_str(if pq.filtered() {
            "<p class=\"empty\">Nothing answered matches these filters.</p>"
        } else {
            "<p class=\"empty\">Nothing answered yet.</p>"
        });
    }
    pager(&mut inner, "/history", &pq, &prev, &page);
    respond(
        &who,
        Tab::History,
        "History",
        &inner,
        "",
        pq.fragment.is_some(),
    )
}
