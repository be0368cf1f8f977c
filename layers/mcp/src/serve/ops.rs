//! Operations (serve.md, "Operations: health, readiness, metrics, the stored policy,
//! replicas"): what a host records about a running server ([`Observe`]) and the endpoints
//! `serve_http` answers without a token — `GET /healthz` (alive), `GET /readyz` (every
//! upstream connected, the inbox's store reachable; 503 with a JSON body naming what is not
//! ready) and `GET /metrics` (the host's metrics text, Prometheus).

use super::*;

/// The governed stack a call passes (outermost first): what [`Observe::wrap_stack`] wraps.
pub type GovernedStack = BoxCloneService<ToolCall, ToolResponse, McpCallError>;

/// The body of `GET /metrics`: made anew for each request (a host looks at the inbox's held
/// calls first, say).
pub type MetricsText =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<String, String>> + Send>> + Send + Sync>;

/// Called once per call sent to an upstream server: the server's id, how long it took, and
/// how it ended (`completed`, `failed`, `timeout`, `error`).
pub type UpstreamObserver = Arc<dyn Fn(&str, Duration, &'static str) + Send + Sync>;

type Wrap = Arc<dyn Fn(GovernedStack) -> GovernedStack + Send + Sync>;

/// What the host records about a running server, for
/// [`GovernedServer::start_observed`]: none of it decides anything. The crate knows no
/// metrics library; the `toolgate` binary fills this with `toolgate_otel`'s Prometheus
/// exporter.
///
/// ```
/// use std::sync::Arc;
/// use toolgate_mcp::serve::Observe;
/// let observe = Observe::default()
///     .wrap_stack(Arc::new(|stack| stack))
///     .upstream_observer(Arc::new(|server, took, outcome| {
///         println!("{server}: {outcome} in {took:?}");
///     }))
///     .metrics_text(Arc::new(|| Box::pin(async { Ok(String::from("# nothing yet\n")) })));
/// # let _ = observe;
/// ```
#[derive(Clone, Default)]
pub struct Observe {
    pub(super) wrap: Option<Wrap>,
    pub(super) waits: Option<Arc<dyn toolgate::approval::WaitObserver>>,
    pub(super) upstream: Option<UpstreamObserver>,
    pub(super) metrics: Option<MetricsText>,
}

impl fmt::Debug for Observe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Observe")
            .field("wrap", &self.wrap.is_some())
            .field("waits", &self.waits.is_some())
            .field("upstream", &self.upstream.is_some())
            .field("metrics", &self.metrics.is_some())
            .finish()
    }
}

impl Observe {
    /// Wraps the whole governed stack (outermost: it sees every call, refused ones too), for
    /// a layer that only observes, such as `toolgate_otel`'s decisions counter. It must not
    /// change what a call does.
    #[must_use]
    pub fn wrap_stack(
        mut self,
        wrap: Arc<dyn Fn(GovernedStack) -> GovernedStack + Send + Sync>,
    ) -> Self {
        self.wrap = Some(wrap);
        self
    }

    /// Tells `observer` when a call starts and stops waiting for a person.
    #[must_use]
    pub fn wait_observer(mut self, observer: Arc<dyn toolgate::approval::WaitObserver>) -> Self {
        self.waits = Some(observer);
        self
    }

    /// Tells `observer` how long each call sent upstream took.
    #[must_use]
    pub fn upstream_observer(mut self, observer: UpstreamObserver) -> Self {
        self.upstream = Some(observer);
        self
    }

    /// What `GET /metrics` answers (`text/plain; version=0.0.4`); without it, 404.
    #[must_use]
    pub fn metrics_text(mut self, metrics: MetricsText) -> Self {
        self.metrics = Some(metrics);
        self
    }
}

/// A shared wait observer, as the builder takes one.
pub(super) struct SharedWaits(pub(super) Arc<dyn toolgate::approval::WaitObserver>);

impl toolgate::approval::WaitObserver for SharedWaits {
    fn wait_started(&self, wait: &toolgate::approval::WaitStarted) {
        self.0.wait_started(wait);
    }

    fn wait_ended(&self, wait: &toolgate::approval::WaitEnded) {
        self.0.wait_ended(wait);
    }
}

/// How long `/readyz` waits for the store's answer.
const STORE_PROBE: Duration = Duration::from_secs(2);

/// What the server is, for `/readyz`: whether it is ready, and the JSON body saying why.
pub(super) async fn readiness(shared: &Shared) -> (bool, Value) {
    let mut not_ready = Vec::new();
    let mut upstreams = Map::new();
    let down = lock(&shared.down).clone();
    for id in shared.server_ids() {
        let key = toolgate_core::names::normalize_segment(&id)
            .map(|s| s.to_ascii_lowercase())
            .unwrap_or_else(|_| id.to_ascii_lowercase());
        let state = match (down.get(&key), shared.gateway.is_open(&id)) {
            (Some(why), _) => Err(why.clone()),
            (None, Some(true)) => Ok(()),
            (None, Some(false)) => Err(String::from(
                "its connection closed; toolgate is reconnecting",
            )),
            (None, None) => Err(String::from("not connected")),
        };
        match state {
            Ok(()) => {
                upstreams.insert(id, json!("connected"));
            }
            Err(why) => {
                not_ready.push(format!("upstream `{id}`: {why}"));
                upstreams.insert(id, Value::String(why));
            }
        }
    }
    let store = match &shared.inbox {
        None => Value::String(String::from("none")),
        Some(inbox) => {
            // One indexed look-up of an id no call has: the store answered or it did not.
            match tokio::time::timeout(STORE_PROBE, inbox.store().get("toolgate-readyz")).await {
                Ok(Ok(_)) => json!("reachable"),
                Ok(Err(e)) => {
                    let why = format!("unreachable: {e}");
                    not_ready.push(format!("store: {why}"));
                    Value::String(why)
                }
                Err(_) => {
                    let why = format!(
                        "unreachable: no answer within {}",
                        humantime::format_duration(STORE_PROBE)
                    );
                    not_ready.push(format!("store: {why}"));
                    Value::String(why)
                }
            }
        }
    };
    let policy = match shared.gateway.handle().load().policy() {
        toolgate_engine::PolicyState::Readable(_) => json!("readable"),
        toolgate_engine::PolicyState::Unreadable(why) => {
            json!(format!(
                "unreadable (calls are refused `policy_unreadable`): {why}"
            ))
        }
    };
    let ready = not_ready.is_empty();
    (
        ready,
        json!({
            "ready": ready,
            "upstreams": upstreams,
            "store": store,
            "policy": policy,
            "not_ready": not_ready,
        }),
    )
}

/// The answer to an operations request (`GET` or `HEAD` of `/healthz`, `/readyz`,
/// `/metrics`): status, content type and body; `None` for any other request.
pub(super) async fn answer(
    shared: &Shared,
    method: &hyper::Method,
    path: &str,
) -> Option<(hyper::StatusCode, &'static str, String)> {
    if method != hyper::Method::GET && method != hyper::Method::HEAD {
        return None;
    }
    const JSON: &str = "application/json";
    match path {
        "/healthz" => Some((
            hyper::StatusCode::OK,
            JSON,
            json!({"alive": true}).to_string(),
        )),
        "/readyz" => {
            let (ready, body) = readiness(shared).await;
            let status = if ready {
                hyper::StatusCode::OK
            } else {
                hyper::StatusCode::SERVICE_UNAVAILABLE
            };
            Some((status, JSON, body.to_string()))
        }
        "/metrics" => Some(match &shared.observe.metrics {
            None => (
                hyper::StatusCode::NOT_FOUND,
                "text/plain; charset=utf-8",
                String::from("no metrics are configured for this server\n"),
            ),
            Some(text) => match text().await {
                Ok(body) => (
                    hyper::StatusCode::OK,
                    "text/plain; version=0.0.4; charset=utf-8",
                    body,
                ),
                Err(e) => (
                    hyper::StatusCode::INTERNAL_SERVER_ERROR,
                    "text/plain; charset=utf-8",
                    format!("the metrics cannot be given: {e}\n"),
                ),
            },
        }),
        _ => None,
    }
}
