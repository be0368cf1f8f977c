//! Operations (approval-page.md, "Operations and replicas"): `GET /healthz` (alive), `GET
//! /readyz` (the inbox's store reachable; 503 with a JSON body naming what is not), `GET
//! /metrics` (the host's metrics text, Prometheus, when
//! [`WebSettings::metrics`](crate::WebSettings::metrics) is set). Answered before the
//! page's host check and sign-in, so a load balancer's health check reaches them; they show
//! no held call, no name and no policy.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::state::App;

type Render =
    dyn Fn() -> Pin<Box<dyn Future<Output = Result<String, String>> + Send>> + Send + Sync;

/// What `GET /metrics` answers, made anew for each request (the `toolgate` binary renders
/// `toolgate_otel::PrometheusMetrics` after counting the inbox's pending held calls).
///
/// ```
/// use toolgate_web::WebMetrics;
/// let metrics = WebMetrics::new(|| Box::pin(async { Ok(String::from("# none\n")) }));
/// # let _ = metrics;
/// ```
#[derive(Clone)]
pub struct WebMetrics(Arc<Render>);

impl WebMetrics {
    /// Metrics rendered by `render`.
    pub fn new(
        render: impl Fn() -> Pin<Box<dyn Future<Output = Result<String, String>> + Send>>
        + Send
        + Sync
        + 'static,
    ) -> Self {
        Self(Arc::new(render))
    }
}

impl fmt::Debug for WebMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WebMetrics")
    }
}

/// How long `/readyz` waits for the store's answer.
const STORE_PROBE: Duration = Duration::from_secs(2);

fn json_reply(status: StatusCode, body: serde_json::Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

pub(crate) async fn healthz() -> Response {
    json_reply(StatusCode::OK, json!({"alive": true}))
}

pub(crate) async fn readyz(State(app): State<App>) -> Response {
    // One indexed look-up of an id no call has: the store answered or it did not.
    let store = match tokio::time::timeout(STORE_PROBE, app.0.store.get("toolgate-readyz")).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("unreachable: {e}")),
        Err(_) => Err(format!(
            "unreachable: no answer within {}",
            humantime::format_duration(STORE_PROBE)
        )),
    };
    match store {
        Ok(()) => json_reply(
            StatusCode::OK,
            json!({"ready": true, "store": "reachable", "not_ready": []}),
        ),
        Err(why) => json_reply(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"ready": false, "store": why, "not_ready": [format!("store: {why}")]}),
        ),
    }
}

pub(crate) async fn metrics(State(app): State<App>) -> Response {
    let Some(metrics) = app.0.settings.metrics.clone() else {
        return (
            StatusCode::NOT_FOUND,
            "no metrics are configured for this page\n",
        )
            .into_response();
    };
    match (metrics.0)().await {
        Ok(text) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the metrics cannot be given: {e}\n"),
        )
            .into_response(),
    }
}
