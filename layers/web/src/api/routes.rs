//! The `/v1` routes: every operation of the HTTP API and its handler, the table the OpenAPI
//! document is checked against.

use axum::Router;
use axum::routing::{MethodRouter, get, post, put};

use crate::api::calls;
use crate::api::openapi;
use crate::api::policy;
use crate::api::slack;
use crate::state::App;

/// The API's routes: method, path (axum's `{param}` syntax, as OpenAPI writes it), handler.
/// The router is built from this table, and a test checks the OpenAPI document against it.
pub(crate) fn routes() -> Vec<(&'static str, &'static str, MethodRouter<App>)> {
    vec![
        ("get", "/v1/openapi.json", get(openapi::document)),
        ("get", "/v1/tenant/tool-policy", get(policy::get_policy)),
        ("put", "/v1/tenant/tool-policy", put(policy::put_policy)),
        ("get", "/v1/sessions/{id}/pending", get(calls::pending)),
        ("post", "/v1/interactions/{id}/answer", post(calls::answer)),
        ("get", "/v1/calls/{id}", get(calls::call)),
        ("post", "/v1/callbacks/slack", post(slack::callback)),
    ]
}

/// The API's routes as a router (merged into the page's).
pub(crate) fn router() -> Router<App> {
    let mut by_path: Vec<(&'static str, MethodRouter<App>)> = Vec::new();
    for (_, path, mr) in routes() {
        match by_path.iter().position(|(p, _)| *p == path) {
            Some(i) => {
                let (p, old) = by_path.swap_remove(i);
                by_path.push((p, old.merge(mr)));
            }
            None => by_path.push((path, mr)),
        }
    }
    by_path
        .into_iter()
        .fold(Router::new(), |r, (path, mr)| r.route(path, mr))
}
