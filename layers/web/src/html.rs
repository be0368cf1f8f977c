//! HTML building blocks: the page frame, refusals, the static files, and [`Shown`], text a
//! person reads with its hidden characters marked.
//!
//! Every page is built with [`maud::html!`], which escapes each spliced value (`&`, `<`,
//! `>`, `"`; every attribute value is double-quoted): markup from data can only be text.
//! Raw markup could go in only through an explicit [`maud::PreEscaped`]; the pages use none.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use maud::{DOCTYPE, Markup, Render, html};

use crate::state::Who;

/// Text a person reads, spliced into a page with its hidden characters (bidi controls,
/// zero-width characters, controls) shown marked (`⟦U+202E⟧`,
/// [`toolgate_core::display::visible`]) and then escaped: `(Shown(&name))`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shown<'a>(pub(crate) &'a str);

impl Render for Shown<'_> {
    fn render_to(&self, buffer: &mut String) {
        toolgate_core::display::visible(self.0).render_to(buffer);
    }
}

/// Which tab a page belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tab {
    Pending,
    History,
    Policy,
    Grants,
}

/// The navigation of a signed-in person's page, `tab` marked current.
fn nav(who: &Who, tab: Tab) -> Markup {
    let current = |t: Tab| (t == tab).then_some("current");
    html! {
        nav {
            a href="/" id="tab-pending" class=[current(Tab::Pending)] { "Pending" }
            " "
            a href="/history" id="tab-history" class=[current(Tab::History)] { "History" }
            " "
            a href="/policy" id="tab-policy" class=[current(Tab::Policy)] { "Policy" }
            " "
            a href="/grants" id="tab-grants" class=[current(Tab::Grants)] { "Grants" }
            span class="who" {
                "signed in as "
                strong id="who" { (Shown(&who.approver.name)) }
                form method="post" action="/logout" class="inline" {
                    input type="hidden" name="csrf" value=(who.csrf);
                    button type="submit" { "Sign out" }
                }
            }
        }
    }
}

/// A whole page: the frame, the navigation (for a signed-in person), and `body`.
pub(crate) fn page(title: &str, nav_of: Option<(&Who, Tab)>, body: Markup) -> Html<String> {
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (Shown(title)) " · toolgate" }
                link rel="stylesheet" href="/static/app.css";
                script src="/static/app.js" defer {}
            }
            body {
                header {
                    span class="brand" { "toolgate" }
                    @if let Some((who, tab)) = nav_of { (nav(who, tab)) }
                }
                div id="stale" class="stale" hidden { "Something changed. " a href="" { "Reload" } }
                main { (body) }
                div id="toast" class="toast" role="status" aria-live="polite" hidden {}
            }
        }
    };
    Html(markup.into_string())
}

/// A refusal page with its status: what was refused and why, escaped.
pub(crate) fn refusal(status: StatusCode, title: &str, why: &str) -> Response {
    let body = html! {
        section class="refusal" {
            h1 { (Shown(title)) }
            p class="error" id="refusal" role="alert" { (Shown(why)) }
            p { a href="/" { "Back to pending approvals" } }
        }
    };
    (status, page(title, None, body)).into_response()
}

fn asset(body: &'static str, kind: &'static str) -> Response {
    let mut res = body.into_response();
    let h = res.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("max-age=300"),
    );
    res
}

pub(crate) async fn script() -> Response {
    asset(
        include_str!("../static/app.js"),
        "text/javascript; charset=utf-8",
    )
}

pub(crate) async fn style() -> Response {
    asset(include_str!("../static/app.css"), "text/css; charset=utf-8")
}

#[cfg(test)]
mod tests {
    use maud::html;

    use super::Shown;

    #[test]
    fn shown_text_is_escaped_with_its_hidden_characters_marked() {
        let name = "<b title=\"x\">a&b</b>\u{202e}";
        let page = html! { p title=(Shown(name)) { (Shown(name)) } }.into_string();
        assert_eq!(
            page,
            "<p title=\"&lt;b title=&quot;x&quot;&gt;a&amp;b&lt;/b&gt;⟦U+202E⟧\">\
             &lt;b title=&quot;x&quot;&gt;a&amp;b&lt;/b&gt;⟦U+202E⟧</p>"
        );
        assert_eq!(html! { (Shown("plain ü")) }.into_string(), "plain ü");
    }
}
