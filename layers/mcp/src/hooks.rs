//! Hooks from the configuration (R32): external decision services asked before a call is
//! sent or after its result comes back, in the request shape of OPA's data API, so an
//! operator can point them at an OPA or Cedar service of their own.
//!
//! ```json
//! {"hooks": [
//!   {"url": "https://opa.internal/v1/data/toolgate/allow", "phase": "before_call", "timeout_ms": 500},
//!   {"url": "http://127.0.0.1:8181/v1/data/toolgate/result_ok", "phase": "after_call"}
//! ]}
//! ```
//!
//! Each service is sent `POST <url>` with `{"input": {...}}` — the phase, the tool, the
//! agent (and subagent), the session and turn, the call id, the run's mode, and the input
//! (for `after_call` also the result's outcome and output) redacted as the audit record
//! redacts them — and answers `{"result": …}`:
//!
//! | `result` | the call |
//! |---|---|
//! | `true`, or `{"allow": true}` | goes on |
//! | `false`, or `{"allow": false, "reason": "…"}` | is cancelled (`before_call`) or its result rejected (`after_call`), with the reason |
//! | absent (an undefined rule), anything else | refused: the answer does not say yes |
//!
//! A service can only tighten: its "yes" lets the call go on as toolgate decided it. A timeout
//! (`timeout_ms`, default 1,000), a connection or TLS failure, a status other than 2xx, or an
//! answer that does not parse refuses the call (fail closed), naming the service and why.
//! `https://` URLs are reached with the project's one outbound client (rustls); plain
//! `http://` only to loopback.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use toolgate::approval::{HookCall, HookFuture, ToolHooks};
use toolgate::redact::Redactor;
use toolgate_core::ToolResponse;
use toolgate_engine::ConfigErrors;

/// The longest a decision service may take, unless `timeout_ms` says otherwise.
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_millis(1000);

/// The longest `timeout_ms` allowed: one minute.
pub const MAX_HOOK_TIMEOUT_MS: u64 = 60_000;

/// The largest answer read from a decision service.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// When a decision service is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HookPhase {
    /// Right before the call is sent (after any approval): "no" cancels it, and a cancelled
    /// call is no send (R44).
    BeforeCall,
    /// After the tool answered: "no" rejects the result (the model gets the reason instead).
    AfterCall,
}

impl HookPhase {
    /// As written in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            HookPhase::BeforeCall => "before_call",
            HookPhase::AfterCall => "after_call",
        }
    }
}

/// One `hooks[i]` entry: a decision service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookService {
    /// Where the question is posted.
    pub url: String,
    /// When it is asked.
    pub phase: HookPhase,
    /// How long it may take.
    pub timeout: Duration,
}

/// Reads the configuration's `hooks` section (a list of decision services). Every problem
/// is reported with its path (`hooks[0].phase`).
///
/// ```
/// use serde_json::json;
/// use toolgate_mcp::hooks::{HookPhase, read_hooks};
/// let hooks = read_hooks(&json!([{"url": "https://opa.internal/v1/data/t/allow", "phase": "before_call", "timeout_ms": 250}])).unwrap();
/// assert_eq!((hooks[0].phase, hooks[0].timeout.as_millis()), (HookPhase::BeforeCall, 250));
/// let errs = read_hooks(&json!([{"url": "ftp://x", "phase": "sometimes", "timeout_ms": 0, "extra": 1}])).unwrap_err();
/// let paths: Vec<&str> = errs.errors.iter().map(|e| e.path.as_str()).collect();
/// assert_eq!(paths, ["hooks[0].extra", "hooks[0].url", "hooks[0].phase", "hooks[0].timeout_ms"]);
/// ```
///
/// # Errors
///
/// Not a list; an entry that is not an object, has an unknown field, no `url` or one toolgate
/// does not fetch from (only `https://`, or `http://` to loopback, no credentials in it), a
/// `phase` other than `before_call` or `after_call`, or a `timeout_ms` that is not an integer
/// from 1 to 60,000.
pub fn read_hooks(section: &Value) -> Result<Vec<HookService>, ConfigErrors> {
    let mut errs = ConfigErrors::default();
    let Value::Array(items) = section else {
        return Err(ConfigErrors::one(
            "hooks",
            "expected a list of decision services (`[{\"url\": …, \"phase\": …}]`)",
        ));
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let path = format!("hooks[{i}]");
        let Value::Object(o) = item else {
            errs.push(path, "expected an object with `url` and `phase`");
            continue;
        };
        for key in o.keys() {
            if !matches!(key.as_str(), "url" | "phase" | "timeout_ms") {
                errs.push(
                    format!("{path}.{key}"),
                    "unknown field (a decision service has `url`, `phase` and `timeout_ms`)",
                );
            }
        }
        let url = match o.get("url") {
            Some(Value::String(u)) => match toolgate_core::outbound::fetch_url_problem(u) {
                None => Some(u.clone()),
                Some(why) => {
                    errs.push(format!("{path}.url"), why);
                    None
                }
            },
            Some(other) => {
                errs.push(
                    format!("{path}.url"),
                    format!("expected a URL, found {other}"),
                );
                None
            }
            None => {
                errs.push(format!("{path}.url"), "`url` is required");
                None
            }
        };
        let phase = match o.get("phase").and_then(Value::as_str) {
            Some("before_call") => Some(HookPhase::BeforeCall),
            Some("after_call") => Some(HookPhase::AfterCall),
            Some(other) => {
                errs.push(
                    format!("{path}.phase"),
                    format!("`{other}` is not a phase: `before_call` or `after_call`"),
                );
                None
            }
            None => {
                errs.push(
                    format!("{path}.phase"),
                    "`phase` is required: `before_call` or `after_call`",
                );
                None
            }
        };
        let timeout = match o.get("timeout_ms") {
            None => Some(DEFAULT_HOOK_TIMEOUT),
            Some(v) => match v.as_u64() {
                Some(ms) if (1..=MAX_HOOK_TIMEOUT_MS).contains(&ms) => {
                    Some(Duration::from_millis(ms))
                }
                _ => {
                    errs.push(
                        format!("{path}.timeout_ms"),
                        format!("expected an integer from 1 to {MAX_HOOK_TIMEOUT_MS} (milliseconds), found {v}"),
                    );
                    None
                }
            },
        };
        if let (Some(url), Some(phase), Some(timeout)) = (url, phase, timeout) {
            out.push(HookService {
                url,
                phase,
                timeout,
            });
        }
    }
    if errs.is_empty() { Ok(out) } else { Err(errs) }
}

/// The decision services of a configuration, as one [`ToolHooks`]: each `before_call`
/// service in the order written, then the call, then each `after_call` service. The first
/// "no" ends it.
#[derive(Clone)]
pub struct DecisionServices {
    services: Arc<[HookService]>,
    client: toolgate_idp::FetchClient,
    redactor: Redactor,
}

impl std::fmt::Debug for DecisionServices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecisionServices")
            .field("services", &self.services)
            .finish_non_exhaustive()
    }
}

impl DecisionServices {
    /// The services `services`, asked with the one outbound client, each call's input (and
    /// result) redacted by `redactor` (the audit record's: the configuration's `redaction`).
    ///
    /// # Errors
    ///
    /// The outbound client cannot be made (its TLS configuration).
    pub fn new(
        services: Vec<HookService>,
        redactor: Redactor,
    ) -> Result<Self, toolgate_idp::TlsError> {
        Ok(Self {
            services: services.into(),
            client: toolgate_idp::FetchClient::new(None)?,
            redactor,
        })
    }

    /// Whether any service is asked in `phase`.
    pub fn asks_in(&self, phase: HookPhase) -> bool {
        self.services.iter().any(|s| s.phase == phase)
    }

    /// The question: OPA's data-API request body.
    fn question(
        &self,
        phase: HookPhase,
        call: &HookCall<'_>,
        response: Option<&ToolResponse>,
    ) -> Value {
        let mut input = Map::new();
        input.insert("phase".into(), phase.as_str().into());
        input.insert("tool".into(), call.tool.into());
        input.insert("agent".into(), call.agent.profile.clone().into());
        if let Some(sub) = &call.agent.subagent {
            input.insert("subagent".into(), sub.clone().into());
        }
        input.insert("call_id".into(), call.call_id.as_str().into());
        if let Some(t) = call.turn {
            input.insert("session".into(), t.session.clone().into());
            input.insert("turn".into(), t.turn.clone().into());
        }
        input.insert("run_mode".into(), call.run.mode.as_str().into());
        input.insert(
            "input".into(),
            self.redactor.redact_value(call.tool, call.input),
        );
        if let Some(r) = response {
            let (outcome, output) = match r {
                ToolResponse::Completed(o) => ("completed", Some(&o.content)),
                ToolResponse::Failed(o) => ("failed", Some(&o.content)),
                ToolResponse::Refused(_) => ("refused", None),
                ToolResponse::Held(_) => ("held", None),
            };
            input.insert("outcome".into(), outcome.into());
            if let Some(content) = output {
                input.insert(
                    "output".into(),
                    self.redactor.redact_value(call.tool, content),
                );
            }
        }
        json!({ "input": input })
    }

    /// Asks every service of `phase`; the first that does not say yes gives the reason.
    async fn ask(
        &self,
        phase: HookPhase,
        call: &HookCall<'_>,
        response: Option<&ToolResponse>,
    ) -> Result<(), Refusal> {
        let mut body = None;
        for service in self.services.iter().filter(|s| s.phase == phase) {
            let text = body
                .get_or_insert_with(|| self.question(phase, call, response).to_string())
                .clone();
            let headers = [(
                axum::http::header::CONTENT_TYPE,
                axum::http::HeaderValue::from_static("application/json"),
            )];
            let answer = self
                .client
                .post(
                    &service.url,
                    &headers,
                    text,
                    MAX_ANSWER_BYTES,
                    service.timeout,
                )
                .await
                .map_err(|e| Refusal::of(service, Said::Unreachable(e)))?;
            if !(200..300).contains(&answer.status) {
                return Err(Refusal::of(service, Said::Status(answer.status)));
            }
            verdict(service, &answer.body)?;
        }
        Ok(())
    }
}

/// Why a decision service did not let a call go on: which service, and what it said.
#[derive(Debug, thiserror::Error)]
#[error("the decision service `{url}` ({}) {said}", .phase.as_str())]
struct Refusal {
    url: String,
    phase: HookPhase,
    said: Said,
}

impl Refusal {
    fn of(service: &HookService, said: Said) -> Self {
        Self {
            url: service.url.clone(),
            phase: service.phase,
            said,
        }
    }
}

/// What a decision service said, or why it could not be asked.
#[derive(Debug, thiserror::Error)]
enum Said {
    #[error("could not be asked, so the call is refused (fail closed): {0}")]
    Unreachable(toolgate_idp::FetchError),
    #[error("could not be asked, so the call is refused (fail closed): it answered HTTP {0}")]
    Status(u16),
    #[error("answered something that is not JSON ({0}), so the call is refused (fail closed)")]
    NotJson(serde_json::Error),
    #[error("said no")]
    No,
    #[error("said no: {0}")]
    NoBecause(String),
    #[error("answered a `result` without a boolean `allow`, so the call is refused (fail closed)")]
    NoAllow,
    #[error(
        "answered `result: {0}`, neither a boolean nor an object with `allow`, so the call is refused (fail closed)"
    )]
    Neither(Value),
    #[error("answered no `result` (an undefined rule), so the call is refused (fail closed)")]
    NoResult,
}

/// Reads a service's answer: `Ok` only for a yes.
fn verdict(service: &HookService, body: &[u8]) -> Result<(), Refusal> {
    let said = |said: Said| Refusal::of(service, said);
    let value: Value = serde_json::from_slice(body).map_err(|e| said(Said::NotJson(e)))?;
    match value.get("result") {
        Some(Value::Bool(true)) => Ok(()),
        Some(Value::Bool(false)) => Err(said(Said::No)),
        Some(Value::Object(r)) => match r.get("allow") {
            Some(Value::Bool(true)) => Ok(()),
            Some(Value::Bool(false)) => Err(said(match r.get("reason").and_then(Value::as_str) {
                Some(reason) => Said::NoBecause(reason.to_owned()),
                None => Said::No,
            })),
            _ => Err(said(Said::NoAllow)),
        },
        Some(other) => Err(said(Said::Neither(other.clone()))),
        None => Err(said(Said::NoResult)),
    }
}

impl ToolHooks for DecisionServices {
    // The trait's error is the text the model is given.
    fn before_call<'a>(&'a self, call: &'a HookCall<'a>) -> HookFuture<'a, Result<(), String>> {
        Box::pin(async move {
            self.ask(HookPhase::BeforeCall, call, None)
                .await
                .map_err(|r| r.to_string())
        })
    }

    fn after_call<'a>(
        &'a self,
        call: &'a HookCall<'a>,
        response: &'a ToolResponse,
    ) -> HookFuture<'a, Result<(), String>> {
        Box::pin(async move {
            self.ask(HookPhase::AfterCall, call, Some(response))
                .await
                .map_err(|r| r.to_string())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service() -> HookService {
        HookService {
            url: "http://127.0.0.1:1/x".into(),
            phase: HookPhase::BeforeCall,
            timeout: DEFAULT_HOOK_TIMEOUT,
        }
    }

    #[test]
    fn r32_only_a_yes_lets_a_call_go_on() {
        let s = service();
        assert!(verdict(&s, br#"{"result": true}"#).is_ok());
        assert!(verdict(&s, br#"{"result": {"allow": true, "reason": "fine"}}"#).is_ok());
        for (body, words) in [
            (&br#"{"result": false}"#[..], "said no"),
            (
                br#"{"result": {"allow": false, "reason": "too late at night"}}"#,
                "too late at night",
            ),
            (br#"{}"#, "no `result`"),
            (br#"{"result": "yes"}"#, "neither a boolean"),
            (
                br#"{"result": {"allow": "true"}}"#,
                "without a boolean `allow`",
            ),
            (br#"{"result": 1}"#, "neither a boolean"),
            (b"<html>", "not JSON"),
        ] {
            let e = verdict(&s, body).unwrap_err().to_string();
            assert!(e.contains(words), "{e}");
            assert!(e.contains("http://127.0.0.1:1/x"), "{e}");
        }
    }
}
