//! Who is asking: sign-in with a token (a session cookie) or a trusted proxy header, and the
//! CSRF token every state-changing request carries.

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use maud::html;
use serde::Deserialize;
use toolgate_engine::approvers::ApproverAuth;

use crate::html;
use crate::state::App;
use crate::state::Session;
use crate::state::Who;
use crate::token::random_hex;
use crate::token::same;

pub(crate) const SESSION_COOKIE: &str = "tg_session";
const LOGIN_COOKIE: &str = "tg_login";

/// Who an identity-provider token made this request (`auth: jwt`): the [`identify`]
/// middleware verifies the token once and every handler of the request reads the result
/// through [`App::who`].
#[derive(Debug, Clone)]
pub(crate) struct Identified {
    who: Option<Who>,
    /// Why nobody was identified (no token, a refused one, no rights), and the status.
    refused: Option<(StatusCode, String)>,
}

/// The person a page or API request comes from, as a handler takes it: read from the
/// request's extensions, where [`identify`] put an identity-provider token's approver, or
/// from the request's session cookie or trusted header (the approvers in force either way)
/// — never from a task-local.
#[derive(Debug, Clone)]
pub(crate) struct Identity {
    who: Option<Who>,
    refused: Option<(StatusCode, String)>,
}

impl Identity {
    /// The approver, when the request comes from one.
    pub(crate) fn who(&self) -> Option<Who> {
        self.who.clone()
    }

    /// Why an identity-provider token identified nobody (`auth: jwt`), and the status.
    pub(crate) fn refusal(&self) -> Option<(StatusCode, String)> {
        self.refused.clone()
    }
}

impl axum::extract::FromRequestParts<App> for Identity {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        app: &App,
    ) -> Result<Self, Self::Rejection> {
        Ok(match &app.0.settings.approvers.auth {
            ApproverAuth::Jwt(_) => match parts.extensions.get::<Identified>() {
                Some(i) => Identity {
                    who: i.who.clone(),
                    refused: i.refused.clone(),
                },
                None => Identity {
                    who: None,
                    refused: None,
                },
            },
            _ => Identity {
                who: app.who(&parts.headers),
                refused: None,
            },
        })
    }
}

/// Verifies the request's identity-provider token (`Authorization: Bearer`, or the trusted
/// proxy's `approvers.jwt.header`) and runs the rest of the request as that approver, with
/// the rights `approvers.people` and `approvers.groups` give their name and groups. In
/// other modes it does nothing.
pub(crate) async fn identify(
    State(app): State<App>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let ApproverAuth::Jwt(jwt) = &app.0.settings.approvers.auth else {
        return next.run(req).await;
    };
    let Some(identified) = identify_jwt(&app, jwt, req.headers()).await else {
        return next.run(req).await;
    };
    // The request's extensions carry who it is: handlers take it as the [`Identity`]
    // extractor.
    let mut req = req;
    req.extensions_mut().insert(identified);
    next.run(req).await
}

/// Who an identity-provider token in `headers` is, against the approvers in force now; `None`
/// for a management key of the HTTP API (no identity-provider token). Used by [`identify`]
/// for each request and by a page's event stream for each event.
pub(crate) async fn identify_jwt(
    app: &App,
    jwt: &toolgate_engine::approvers::JwtApprovers,
    headers: &HeaderMap,
) -> Option<Identified> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(toolgate_idp::bearer_token);
    let proxied = jwt
        .header
        .as_deref()
        .and_then(|h| headers.get(h))
        .and_then(|v| v.to_str().ok());
    let token = bearer.or(proxied).map(str::trim).filter(|t| !t.is_empty());
    // A management key of the HTTP API is no identity-provider token.
    if bearer.is_some_and(|t| {
        crate::auth::key_of(&app.0.settings.in_force.with_access().1, t.trim()).is_some()
    }) {
        return None;
    }
    let identified = match (token, &app.0.settings.verifier) {
        (None, _) => Identified {
            who: None,
            refused: Some((
                StatusCode::UNAUTHORIZED,
                String::from(
                    "no access token came with the request (`Authorization: Bearer`, or the proxy's header)",
                ),
            )),
        },
        (Some(_), None) => Identified {
            who: None,
            refused: Some((
                StatusCode::UNAUTHORIZED,
                String::from(
                    "the identity provider's keys were not loaded, so no token can be verified",
                ),
            )),
        },
        (Some(token), Some(verifier)) => match verifier.verify(token).await {
            Err(why) => {
                tracing::warn!(refused = %why, "an approver's token was refused");
                let status = if why.status() == 403 {
                    StatusCode::FORBIDDEN
                } else {
                    StatusCode::UNAUTHORIZED
                };
                Identified {
                    who: None,
                    refused: Some((status, why.to_string())),
                }
            }
            Ok(v) => {
                match crate::credential::approver_of_token(&app.0.settings.in_force.get(), jwt, &v)
                {
                    Err((status, why)) => Identified {
                        who: None,
                        refused: Some((
                            StatusCode::from_u16(status).unwrap_or(StatusCode::FORBIDDEN),
                            why,
                        )),
                    },
                    Ok(approver) => {
                        let csrf = crate::hash_token(&format!(
                            "{}\0jwt\0{}\0{}",
                            app.0.secret, v.principal.issuer, v.principal.subject
                        ));
                        Identified {
                            who: Some(Who {
                                approver,
                                csrf,
                                principal: Some(v.principal.clone()),
                            }),
                            refused: None,
                        }
                    }
                }
            }
        },
    };
    Some(identified)
}

pub(crate) fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

impl App {
    /// The authenticated person, if any.
    /// Who `headers` speak for now, against the approvers in force, outside the request
    /// that carried them (a page's event stream): an identity-provider token is verified
    /// again.
    pub(crate) async fn who_now(&self, headers: &HeaderMap) -> Option<Who> {
        match &self.0.settings.approvers.auth {
            ApproverAuth::Jwt(jwt) => identify_jwt(self, jwt, headers).await?.who,
            _ => self.who(headers),
        }
    }

    pub(crate) fn who(&self, headers: &HeaderMap) -> Option<Who> {
        let settings = &self.0.settings;
        match &settings.approvers.auth {
            ApproverAuth::ProxyHeader(name) => {
                let person = headers.get(name.as_str())?.to_str().ok()?.trim();
                let approver = settings.in_force.get().approver(person)?.clone();
                let csrf = crate::hash_token(&format!("{}\0{}", self.0.secret, approver.name));
                Some(Who {
                    approver,
                    csrf,
                    principal: None,
                })
            }
            // An identity-provider token's approver is the request's own ([`Identity`]): from
            // headers alone, nobody.
            ApproverAuth::Jwt(_) => None,
            _ => {
                let id = cookie(headers, SESSION_COOKIE)?;
                let mut sessions = self.0.sessions.lock().ok()?;
                let session = sessions.get(id)?.clone();
                if session.since.elapsed() > settings.session_ttl {
                    sessions.remove(id);
                    return None;
                }
                // The token signed in with must still be this approver's.
                let in_force = settings.in_force.get();
                let approver = in_force.approver(&session.approver).filter(|a| {
                    a.token_sha256
                        .as_deref()
                        .is_some_and(|h| same(h, &session.token_sha256))
                });
                let Some(approver) = approver.cloned() else {
                    sessions.remove(id);
                    tracing::info!(
                        approver = %toolgate_core::display::visible(&session.approver),
                        "a sign-in was ended: its token is no longer an approver's"
                    );
                    return None;
                };
                Some(Who {
                    approver,
                    csrf: session.csrf,
                    principal: None,
                })
            }
        }
    }

    /// Whether people are signed in by something in front of the page or in the request
    /// (a proxy's header, an identity-provider token), not by the sign-in form.
    fn proxy_mode(&self) -> bool {
        matches!(
            self.0.settings.approvers.auth,
            ApproverAuth::ProxyHeader(_) | ApproverAuth::Jwt(_)
        )
    }

    /// The response to a page request nobody signed in for: the sign-in page (tokens) or
    /// 401 (a proxy that sent no known name; no identity-provider token, or one refused:
    /// with why and a `WWW-Authenticate: Bearer` challenge).
    pub(crate) fn sign_in_first(&self, identity: &Identity) -> Response {
        if let ApproverAuth::Jwt(_) = &self.0.settings.approvers.auth {
            let (status, why) = identity.refusal().unwrap_or((
                StatusCode::UNAUTHORIZED,
                String::from("no access token came with the request"),
            ));
            let mut res = html::refusal(status, "Not signed in", &why);
            let challenge = if status == StatusCode::FORBIDDEN {
                "Bearer error=\"insufficient_scope\""
            } else {
                "Bearer error=\"invalid_token\""
            };
            res.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static(challenge),
            );
            return res;
        }
        if self.proxy_mode() {
            html::refusal(
                StatusCode::UNAUTHORIZED,
                "Not signed in",
                "the proxy in front of this page sent no approver this configuration names",
            )
        } else {
            Redirect::to("/login").into_response()
        }
    }
}

/// A 401 for a state-changing request without a signed-in person.
pub(crate) fn unauthorized() -> Response {
    html::refusal(
        StatusCode::UNAUTHORIZED,
        "Not signed in",
        "sign in before answering or saving; nothing was changed",
    )
}

/// A 403 for a form without the right CSRF token.
pub(crate) fn check_csrf(who: &Who, given: Option<&str>) -> Result<(), Response> {
    if given.is_some_and(|t| same(t, &who.csrf)) {
        Ok(())
    } else {
        Err(html::refusal(
            StatusCode::FORBIDDEN,
            "Refused",
            "the form's CSRF token is missing or wrong (reload the page and try again); nothing was changed",
        ))
    }
}

pub(crate) async fn login_page(State(app): State<App>, identity: Identity) -> Response {
    if app.proxy_mode() || identity.who().is_some() {
        return Redirect::to("/").into_response();
    }
    login_form(None, StatusCode::OK)
}

fn login_form(error: Option<&str>, status: StatusCode) -> Response {
    let nonce = random_hex(16);
    let body = html! {
        section class="login" {
            h1 { "Sign in to approve held calls" }
            @if let Some(e) = error { p class="error" role="alert" { (e) } }
            form method="post" action="/login" {
                input type="hidden" name="csrf" value=(nonce);
                label {
                    "Approver token "
                    input type="password" name="token" id="token" autocomplete="current-password" required;
                }
                button type="submit" id="sign-in" { "Sign in" }
            }
        }
    };
    let mut res = (status, html::page("Sign in", None, body)).into_response();
    if let Ok(v) = HeaderValue::from_str(&format!(
        "{LOGIN_COOKIE}={nonce}; Path=/login; HttpOnly; SameSite=Strict"
    )) {
        res.headers_mut().append(header::SET_COOKIE, v);
    }
    res
}

#[derive(Debug, Deserialize)]
pub(crate) struct LoginForm {
    token: Option<String>,
    csrf: Option<String>,
}

/// The client's address; unknown (a router served without connect info) counts as one
/// address, so attempts are still throttled.
pub(crate) fn client_ip(peer: Option<&ConnectInfo<SocketAddr>>) -> IpAddr {
    peer.map_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), |c| c.0.ip())
}

pub(crate) async fn login(
    State(app): State<App>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    if app.proxy_mode() {
        return Redirect::to("/").into_response();
    }
    // Throttled per address before anything else is looked at.
    let ip = client_ip(peer.as_ref().map(|e| &e.0));
    let taken = match app.0.throttle.lock() {
        Ok(mut t) => t.take(ip, Instant::now()),
        Err(_) => Err(crate::throttle::REFILL),
    };
    if let Err(wait) = taken {
        let secs = (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1);
        tracing::warn!(client = %ip, "a sign-in was refused: too many attempts from this address");
        let mut res = login_form(
            Some(&format!(
                "too many sign-in attempts from this address; try again in {secs} s"
            )),
            StatusCode::TOO_MANY_REQUESTS,
        );
        if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
            res.headers_mut().insert(header::RETRY_AFTER, v);
        }
        return res;
    }
    // Sign-in CSRF: the form's nonce must equal the cookie set with the form.
    let nonce = cookie(&headers, LOGIN_COOKIE).unwrap_or("");
    if !form.csrf.as_deref().is_some_and(|c| same(c, nonce)) {
        return login_form(
            Some("the sign-in form expired or did not come from this page; try again"),
            StatusCode::FORBIDDEN,
        );
    }
    let token = form.token.unwrap_or_default();
    let hash = crate::hash_token(&token);
    let in_force = app.0.settings.in_force.get();
    let found = crate::credential::person_by_token(&in_force, &token);
    let Some(approver) = found else {
        tracing::warn!(client = %ip, "a sign-in with an unknown token was refused");
        return login_form(
            Some("that token is not an approver's"),
            StatusCode::UNAUTHORIZED,
        );
    };
    let id = random_hex(32);
    let csrf = random_hex(32);
    if id.is_empty() || csrf.is_empty() {
        return html::refusal(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Cannot sign in",
            "no randomness is available for a session",
        );
    }
    if let Ok(mut sessions) = app.0.sessions.lock() {
        let ttl = app.0.settings.session_ttl;
        sessions.retain(|_, s| s.since.elapsed() <= ttl);
        sessions.insert(
            id.clone(),
            Session {
                approver: approver.name.clone(),
                token_sha256: hash.clone(),
                csrf,
                since: Instant::now(),
            },
        );
    }
    // Never the token, the session id or the CSRF token: the name and the address only.
    tracing::info!(
        approver = %toolgate_core::display::visible(&approver.name),
        client = %ip,
        "an approver signed in on the approval page"
    );
    let mut res = Redirect::to("/").into_response();
    // Behind TLS (a `public_url` on https), the cookie is never sent over plain HTTP.
    let secure = app
        .0
        .settings
        .approvers
        .public_url
        .as_deref()
        .is_some_and(|u| u.starts_with("https://"));
    if let Ok(v) = HeaderValue::from_str(&format!(
        "{SESSION_COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict{}",
        if secure { "; Secure" } else { "" }
    )) {
        res.headers_mut().append(header::SET_COOKIE, v);
    }
    res
}

#[derive(Debug, Deserialize)]
pub(crate) struct LogoutForm {
    csrf: Option<String>,
}

pub(crate) async fn logout(
    State(app): State<App>,
    headers: HeaderMap,
    identity: crate::auth::Identity,
    Form(form): Form<LogoutForm>,
) -> Response {
    let Some(who) = identity.who() else {
        return unauthorized();
    };
    if let Err(r) = check_csrf(&who, form.csrf.as_deref()) {
        return r;
    }
    if let Some(id) = cookie(&headers, SESSION_COOKIE)
        && let Ok(mut sessions) = app.0.sessions.lock()
    {
        sessions.remove(id);
    }
    tracing::info!(
        approver = %toolgate_core::display::visible(&who.approver.name),
        "an approver signed out of the approval page"
    );
    let mut res = Redirect::to("/login").into_response();
    res.headers_mut().append(
        header::SET_COOKIE,
        HeaderValue::from_static("tg_session=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"),
    );
    res
}

/// The management key of `access` whose SHA-256 `token` has, if any
/// (compared in constant time).
pub(crate) fn key_of<'a>(
    access: &'a crate::access::PageAccess,
    token: &str,
) -> Option<&'a crate::access::ApiKey> {
    let hash = crate::hash_token(token);
    access
        .api_keys
        .iter()
        .find(|k| crate::token::same(&k.key_sha256, &hash))
}

#[cfg(test)]
mod tests {
    use axum::http::{HeaderMap, HeaderValue, header};

    #[test]
    fn tokens_compare_whole_and_never_empty() {
        assert!(super::same("abc", "abc"));
        assert!(!super::same("abc", "abd"));
        assert!(!super::same("abc", "abcd"));
        assert!(!super::same("", ""), "an empty token never matches");
    }

    #[test]
    fn cookies_are_found_by_exact_name() {
        let mut h = HeaderMap::new();
        h.append(
            header::COOKIE,
            HeaderValue::from_static("xtg_session=evil; tg_session=good"),
        );
        assert_eq!(super::cookie(&h, "tg_session"), Some("good"));
        assert_eq!(super::cookie(&h, "tg_login"), None);
    }

    #[test]
    fn random_tokens_are_long_and_distinct() {
        let a = super::random_hex(32);
        assert_eq!(a.len(), 64);
        assert_ne!(a, super::random_hex(32));
    }
}
