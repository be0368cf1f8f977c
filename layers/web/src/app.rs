//! The shared state and the router.

use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use tower_http::limit::RequestBodyLimitLayer;

use crate::state::App;

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
    // `same-origin`, not `no-referrer`: nothing leaks to another site, and the page's own
    // forms carry its real `Origin` (under `no-referrer` a browser sends `Origin: null`,
    // which the origin check refuses, as it must for a sandboxed or hostile page).
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    res
}

/// Whether the `Host` value (or an origin's authority) `given` is one of `hosts`: equal
/// (ASCII case-insensitively), or, for an allowed host written without a port, the same
/// name with any port.
fn host_allowed(hosts: &[String], given: &str) -> bool {
    let given = given.to_ascii_lowercase();
    let name = match given.strip_prefix('[') {
        Some(v6) => v6.split_once(']').map_or(given.as_str(), |(a, _)| a),
        None => given.rsplit_once(':').map_or(given.as_str(), |(h, _)| h),
    };
    hosts.iter().any(|h| {
        *h == given
            || (!h.contains(':') || (h.starts_with('[') && h.ends_with(']')))
                && h.trim_start_matches('[').trim_end_matches(']') == name
    })
}

fn named(hosts: &[String]) -> String {
    hosts
        .iter()
        .map(|h| format!("`{h}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Where a request may come from (approval-page.md): every request names one of the allowed
/// hosts (`Host`; else 421, so a DNS-rebinding page that reaches the port under its own
/// name is answered nothing), and a state-changing one that says where its form came from
/// (`Origin`, `Sec-Fetch-Site`) came from this page (else 403). In `proxy_header` mode too:
/// there the proxy's header makes anyone who reaches the page an approver.
async fn where_from(
    axum::extract::State(app): axum::extract::State<App>,
    req: Request,
    next: Next,
) -> Response {
    let hosts = &app.0.hosts;
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| req.uri().authority().map(|a| a.as_str().to_owned()));
    let Some(host) = host.clone().filter(|h| host_allowed(hosts, h)) else {
        let asked = host.map_or_else(|| String::from("no host"), |h| format!("`{h}`"));
        tracing::warn!(host = %asked, "a request for a host the page does not answer was refused");
        return crate::html::refusal(
            axum::http::StatusCode::MISDIRECTED_REQUEST,
            "Not this page",
            &format!(
                "the request was for {asked}, and this page answers only for {} (set `approvers.allowed_hosts` to the names people reach it by); nothing was changed",
                named(hosts)
            ),
        );
    };
    let changes = !matches!(
        *req.method(),
        axum::http::Method::GET | axum::http::Method::HEAD
    );
    if changes {
        let site = req
            .headers()
            .get("sec-fetch-site")
            .and_then(|v| v.to_str().ok());
        let origin = req
            .headers()
            .get(header::ORIGIN)
            .map(|v| v.to_str().unwrap_or("(unreadable)").to_owned());
        let origin_ok = origin.as_deref().is_none_or(|o| {
            o.strip_prefix("http://")
                .or_else(|| o.strip_prefix("https://"))
                .is_some_and(|authority| !authority.contains('/') && host_allowed(hosts, authority))
        });
        if !origin_ok || site == Some("cross-site") {
            let from = origin.unwrap_or_else(|| String::from("another site"));
            tracing::warn!(origin = %from, host = %host, "a form from another origin was refused");
            return crate::html::refusal(
                axum::http::StatusCode::FORBIDDEN,
                "Refused",
                &format!(
                    "the form came from `{from}`, not from this page ({}); nothing was changed",
                    named(hosts)
                ),
            );
        }
    }
    next.run(req).await
}

/// The page's routes, with the security headers and the body limit.
pub fn router(app: App) -> Router {
    Router::new()
        .route("/", get(crate::listing::pending))
        .route("/history", get(crate::listing::history))
        .route("/bulk", post(crate::bulk::bulk))
        .route("/calls/{id}", get(crate::pages::one))
        .route("/calls/{id}/answer", post(crate::pages::answer))
        .route("/calls/{id}/grant", post(crate::grants::approve_and_grant))
        .route(
            "/calls/{id}/approve-edited",
            post(crate::api::edit::approve_edited_form),
        )
        .route("/grants", get(crate::grants::page))
        .route(
            "/grants/{id}/revoke",
            get(crate::grants::confirm_revoke).post(crate::grants::revoke),
        )
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
        .merge(crate::api::routes::router())
        .layer(RequestBodyLimitLayer::new(crate::MAX_BODY_BYTES))
        .layer(middleware::from_fn_with_state(
            app.clone(),
            crate::auth::identify,
        ))
        .layer(middleware::from_fn_with_state(app.clone(), where_from))
        .layer(middleware::from_fn(security_headers))
        // For load balancers and monitoring, before the host check and sign-in
        // (approval-page.md, "Operations and replicas").
        .route("/healthz", get(crate::ops::healthz))
        .route("/readyz", get(crate::ops::readyz))
        .route("/metrics", get(crate::ops::metrics))
        .with_state(app)
}

#[cfg(test)]
mod tests {
    use super::host_allowed;

    #[test]
    fn issue20_hosts_match_whole_names_and_ports() {
        let hosts: Vec<String> = [
            "127.0.0.1:8788",
            "approve.example.com",
            "[::1]:8788",
            "[::2]",
        ]
        .map(String::from)
        .to_vec();
        for ok in [
            "127.0.0.1:8788",
            "approve.example.com",
            "APPROVE.example.com:443",
            "[::1]:8788",
            "[::2]:1",
        ] {
            assert!(host_allowed(&hosts, ok), "{ok}");
        }
        for bad in [
            "127.0.0.1:8789",
            "127.0.0.1",
            "evil.example:8788",
            "approve.example.com.evil.example",
            "[::1]:9",
            "",
        ] {
            assert!(!host_allowed(&hosts, bad), "{bad}");
        }
    }
}
