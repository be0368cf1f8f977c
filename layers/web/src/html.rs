//! HTML building blocks: escaping, the page frame, refusals, the static files.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};

use crate::state::Who;

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

/// A whole page: the frame, the navigation (for a signed-in person), and `body`.
pub(crate) fn page(title: &str, nav: Option<(&Who, Tab)>, body: &str) -> Html<String> {
    let nav = match nav {
        None => String::new(),
        Some((who, tab)) => {
            let cls = |t: Tab| if t == tab { " class=\"current\"" } else { "" };
            format!(
                "<nav><a href=\"/\" id=\"tab-pending\"{}>Pending</a> <a href=\"/history\" id=\"tab-history\"{}>History</a> <a href=\"/policy\" id=\"tab-policy\"{}>Policy</a> <a href=\"/grants\" id=\"tab-grants\"{}>Grants</a>\
                 <span class=\"who\">signed in as <strong id=\"who\">{}</strong>\
                 <form method=\"post\" action=\"/logout\" class=\"inline\"><input type=\"hidden\" name=\"csrf\" value=\"{}\"><button type=\"submit\">Sign out</button></form></span></nav>",
                cls(Tab::Pending),
                cls(Tab::History),
                cls(Tab::Policy),
                cls(Tab::Grants),
                text(&who.approver.name),
                esc(&who.csrf),
            )
        }
    };
    Html(format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} · toolgate</title><link rel=\"stylesheet\" href=\"/static/app.css\">\
         <script src=\"/static/app.js\" defer></script></head>\
         <body><header><span class=\"brand\">toolgate</span>{nav}</header>\
         <div id=\"stale\" class=\"stale\" hidden>Something changed. <a href=\"\">Reload</a></div>\
         <main>{body}</main><div id=\"toast\" class=\"toast\" role=\"status\" aria-live=\"polite\" hidden></div></body></html>",
        text(title)
    ))
}

/// A refusal page with its status: what was refused and why, escaped.
pub(crate) fn refusal(status: StatusCode, title: &str, why: &str) -> Response {
    let body = format!(
        "<section class=\"refusal\"><h1>{}</h1><p class=\"error\" id=\"refusal\" role=\"alert\">{}</p><p><a href=\"/\">Back to pending approvals</a></p></section>",
        text(title),
        text(why)
    );
    (status, page(title, None, &body)).into_response()
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
    #[test]
    fn every_markup_character_is_escaped() {
        assert_eq!(
            super::esc(r#"<a href="x" onclick='y'>&amp;</a>"#),
            "&lt;a href=&quot;x&quot; onclick=&#39;y&#39;&gt;&amp;amp;&lt;/a&gt;"
        );
        assert_eq!(super::esc("plain ü"), "plain ü");
    }
}
