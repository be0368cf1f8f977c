//! HTML building blocks: the page frame, refusals, the static files, and [`Shown`], text a
//! person reads with its hidden characters marked.
//!
//! Every page is built with [`maud::html!`], which escapes each spliced value: markup from
//! data can only be text. Raw markup goes in only through an explicit
//! [`maud::PreEscaped`], each with the reason it is safe beside it.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use maud::{DOCTYPE, Markup, PreEscaped, Render, html};

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

/// Escapes text for HTML element content and quoted attribute values.
pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Escapes a value a person reads, with its hidden characters (bidi controls, zero-width
/// characters, controls) shown marked (`⟦U+202E⟧`, [`toolgate_core::display::visible`]).
pub(crate) fn text(s: &str) -> String {
    esc(&toolgate_core::display::visible(s))
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
pub(crate) fn page(title: &str, nav_of: Option<(&Who, Tab)>, body: &str) -> Html<String> {
    // Safe for now: `body` is markup the callers built, each escaping its values; it becomes
    // `Markup` once every caller builds its body with `html!`.
    let body = PreEscaped(body);
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
    (status, page(title, None, &body.into_string())).into_response()
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
    fn every_markup_character_is_escaped() {
        assert_eq!(
            super::esc(r#"<a href="x" onclick='y'>&amp;</a>"#),
            "&lt;a href=&quot;x&quot; onclick=&#39;y&#39;&gt;&amp;amp;&lt;/a&gt;"
        );
        assert_eq!(super::esc("plain ü"), "plain ü");
    }

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
