//! Input validation against a tool's advertised input schema (R36).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use jsonschema::{PatternOptions, Validator};
use serde_json::Value;
use toolgate::GovernanceHandle;
use toolgate_core::number::NumberLiterals;
use toolgate_core::{
    Check, Refusal, RefusalCode, ToolCall, ToolIdentity, ToolKind, ToolRef, ToolResponse,
};
use toolgate_engine::catalog::Record;
use tower_layer::Layer;
use tower_service::Service;

/// The most schema errors named in one refusal.
const MAX_REASONS: usize = 5;
/// The compiled-size limit of a `pattern` (the `regex` crate's engine: linear time).
const PATTERN_SIZE_LIMIT: usize = 1 << 20;

/// A compiled schema, or why it cannot be compiled.
type Compiled = Result<Arc<Validator>, String>;

/// Compiled validators, by tool identity, kept while the schema stays the same.
#[derive(Default)]
struct Cache {
    map: Mutex<HashMap<(String, String), (Value, Compiled)>>,
}

impl fmt::Debug for Cache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.map.lock().map(|m| m.len()).unwrap_or(0);
        f.debug_struct("Cache").field("validators", &n).finish()
    }
}

impl Cache {
    /// The validator for `schema`, compiled once per identity and schema. A schema that
    /// cannot be compiled is an error (and calls are refused).
    fn validator(&self, id: &ToolIdentity, schema: &Value) -> Result<Arc<Validator>, String> {
        let key = (id.source().to_ascii_lowercase(), id.name().to_owned());
        if let Ok(map) = self.map.lock()
            && let Some((cached, v)) = map.get(&key)
            && cached == schema
        {
            return v.clone();
        }
        let compiled = jsonschema::options()
            // Linear-time patterns (R37): a server's `pattern` never makes a call slow.
            .with_pattern_options(PatternOptions::regex().size_limit(PATTERN_SIZE_LIMIT))
            .build(schema)
            .map(Arc::new)
            .map_err(|e| e.to_string());
        if let Ok(mut map) = self.map.lock() {
            map.insert(key, (schema.clone(), compiled.clone()));
        }
        compiled
    }
}

/// Layer of [`SchemaValidation`]: refuses a call whose input fails the tool's advertised
/// `inputSchema` with `invalid_input` (R36), so it never reaches the server.
///
/// The schema is the one in the call's pinned governance snapshot (the definition the
/// call is decided by), so the layer gives the same answer wherever it sits. It runs the
/// engine's input bounds first (size and depth, R36) — nothing unbounded reaches the
/// validator — and refuses a tool the snapshot does not know (`unknown_tool`). Schemas
/// are compiled once per tool and definition, with no remote `$ref` resolution and with
/// the `regex` crate's linear-time engine for `pattern`; a schema that cannot be compiled
/// refuses every call to its tool.
///
/// # Example
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use serde_json::json;
/// use tower::{ServiceBuilder, ServiceExt, service_fn};
/// use toolgate::GovernanceHandle;
/// use toolgate_core::{AgentRef, RefusalCode, ToolCall, ToolDeclaration, ToolIdentity, ToolOutput, ToolResponse};
/// use toolgate_engine::Governance;
/// use toolgate_mcp::SchemaValidationLayer;
///
/// let mut decl = ToolDeclaration::new(ToolIdentity::mcp("kb", "page"));
/// decl.input_schema = Some(json!({"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}));
/// let handle = GovernanceHandle::new(Governance::builder().tool(decl).build().unwrap());
/// let svc = ServiceBuilder::new()
///     .layer(SchemaValidationLayer::new(handle))
///     .service(service_fn(|_c: ToolCall| async {
///         Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::new(json!("page 7"))))
///     }));
/// let agent = AgentRef::profile("a");
/// let ok = svc.clone().oneshot(ToolCall::new(agent.clone(), "kb__page", json!({"id": 7}))).await.unwrap();
/// assert!(matches!(ok, ToolResponse::Completed(_)));
/// let bad = svc.oneshot(ToolCall::new(agent, "kb__page", json!({"id": "seven"}))).await.unwrap();
/// assert_eq!(bad.refusal().unwrap().code, RefusalCode::InvalidInput);
/// # }
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct SchemaValidationLayer {
    handle: GovernanceHandle,
    cache: Arc<Cache>,
}

impl SchemaValidationLayer {
    /// Validates by the schemas in `handle`'s snapshots.
    pub fn new(handle: GovernanceHandle) -> Self {
        Self {
            handle,
            cache: Arc::new(Cache::default()),
        }
    }
}

impl<S> Layer<S> for SchemaValidationLayer {
    type Service = SchemaValidation<S>;

    fn layer(&self, inner: S) -> Self::Service {
        SchemaValidation {
            inner,
            handle: self.handle.clone(),
            cache: Arc::clone(&self.cache),
        }
    }
}

/// Refuses calls whose input fails the tool's advertised input schema; see
/// [`SchemaValidationLayer`].
#[derive(Debug, Clone)]
pub struct SchemaValidation<S> {
    inner: S,
    handle: GovernanceHandle,
    cache: Arc<Cache>,
}

impl<S> SchemaValidation<S> {
    toolgate::inner_service_accessors!(inner: S);
}

/// The refusal of an input holding an integer an MCP server cannot be sent as written.
pub(crate) fn unsendable(written: &str) -> Refusal {
    invalid(format!(
        "the input holds the integer `{written}`, which is past 64 bits: an MCP server would be sent it rounded, as another number, so the call is refused (R20)"
    ))
}

fn invalid(reason: String) -> Refusal {
    Refusal::new(RefusalCode::InvalidInput, Check::InputSchema, reason)
}

/// The records a call can reach: the one its identity names, or every record behind its
/// name (each must accept the input).
fn reachable<'e>(records: &'e [Record], tool: &ToolRef) -> Vec<&'e Record> {
    let named = match tool {
        ToolRef::Identity(id) | ToolRef::Both { identity: id, .. } => Some(id),
        ToolRef::Name(_) => None,
    };
    records
        .iter()
        .filter(|r| {
            named.is_none_or(|id| {
                let rid = r.identity();
                rid.kind() == id.kind()
                    && rid.source().eq_ignore_ascii_case(id.source())
                    && rid.name().eq_ignore_ascii_case(id.name())
            })
        })
        .collect()
}

impl<S> SchemaValidation<S> {
    fn check(&self, call: &mut ToolCall) -> Result<(), Refusal> {
        let governance = self.handle.pin(call);
        let entry = governance.lookup(&call.tool)?;
        // R36: the bounds first, so the validator only ever sees a bounded input.
        governance.check_input_exact(&call.input, NumberLiterals::of(call))?;
        // R20, R26: an MCP server is sent the JSON value, which holds an integer past 64
        // bits only rounded: such a call would reach the server with another number than
        // the one decided (and shown to a person), so it is refused before anyone is asked.
        if entry
            .records
            .iter()
            .any(|r| r.identity().kind() == ToolKind::Mcp)
            && let Some(written) = NumberLiterals::of(call).first_inexact_integer(&call.input)
        {
            return Err(unsendable(written));
        }
        for record in reachable(&entry.records, &call.tool) {
            let Some(schema) = &record.decl.input_schema else {
                continue;
            };
            let validator = self.cache.validator(record.identity(), schema).map_err(|e| {
                invalid(format!(
                    "the input schema `{}` advertises cannot be used, so no input can be checked against it: {e}",
                    entry.name
                ))
            })?;
            if validator.is_valid(&call.input) {
                continue;
            }
            let errors: Vec<String> = validator
                .iter_errors(&call.input)
                .take(MAX_REASONS)
                .map(|e| {
                    // Masked: the reason names where and why, never the input's values.
                    let at = e.instance_path().to_string();
                    let at = if at.is_empty() { String::from("/") } else { at };
                    format!("at `{at}`: {}", e.masked())
                })
                .collect();
            // Refused even if the validator named no error: it said the input is invalid.
            let mut reasons = vec![format!(
                "the input does not match the input schema of `{}`",
                entry.name
            )];
            reasons.extend(errors.into_iter().take(MAX_REASONS));
            return Err(Refusal::with_reasons(
                RefusalCode::InvalidInput,
                Check::InputSchema,
                reasons,
            ));
        }
        Ok(())
    }
}

/// Response future of [`SchemaValidation`]: toolgate's one forwarding-or-refusing future.
pub type SchemaFuture<F> = toolgate::ResponseFuture<F>;

impl<S> Service<ToolCall> for SchemaValidation<S>
where
    S: Service<ToolCall, Response = ToolResponse>,
{
    type Response = ToolResponse;
    type Error = S::Error;
    type Future = SchemaFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut call: ToolCall) -> Self::Future {
        match self.check(&mut call) {
            Ok(()) => SchemaFuture::inner(self.inner.call(call)),
            // INVARIANT: a call refused `invalid_input` never reaches the inner service.
            Err(refusal) => SchemaFuture::refused(ToolResponse::Refused(refusal)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde_json::json;
    use toolgate_core::{AgentRef, ToolDeclaration, ToolOutput};
    use toolgate_engine::Governance;
    use tower::{ServiceExt, service_fn};

    use super::*;

    fn handle(schema: Value) -> GovernanceHandle {
        let mut decl = ToolDeclaration::new(ToolIdentity::mcp("kb", "page"));
        decl.input_schema = Some(schema);
        GovernanceHandle::new(Governance::builder().tool(decl).build().unwrap())
    }

    async fn run(h: &GovernanceHandle, input: Value) -> (ToolResponse, usize) {
        let hits = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&hits);
        let svc = SchemaValidationLayer::new(h.clone()).layer(service_fn(move |_c: ToolCall| {
            counter.fetch_add(1, Ordering::SeqCst);
            async {
                Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::default()))
            }
        }));
        let r = svc
            .oneshot(ToolCall::new(AgentRef::profile("a"), "kb__page", input))
            .await
            .unwrap();
        (r, hits.load(Ordering::SeqCst))
    }

    #[tokio::test]
    async fn r36_invalid_input_never_reaches_the_inner_service() {
        let h = handle(
            json!({"type": "object", "properties": {"id": {"type": "integer"}},
                              "required": ["id"], "additionalProperties": false}),
        );
        let (r, hits) = run(&h, json!({"id": 1})).await;
        assert!(matches!(r, ToolResponse::Completed(_)));
        assert_eq!(hits, 1);
        for bad in [
            json!({}),
            json!({"id": "x"}),
            json!({"id": 1, "extra": true}),
        ] {
            let (r, hits) = run(&h, bad.clone()).await;
            let refusal = r.refusal().unwrap();
            assert_eq!(refusal.code, RefusalCode::InvalidInput, "{bad}");
            assert_eq!(hits, 0);
        }
    }

    #[tokio::test]
    async fn r36_reasons_never_echo_the_input() {
        let h = handle(json!({"type": "object", "properties": {"pin": {"type": "integer"}}}));
        let (r, _) = run(&h, json!({"pin": "hunter2-secret"})).await;
        let text = r.refusal().unwrap().reasons.join(" ");
        assert!(text.contains("/pin"), "{text}");
        assert!(!text.contains("hunter2"), "{text}");
    }

    #[tokio::test]
    async fn an_unusable_schema_refuses_every_call() {
        let h = handle(
            json!({"type": "object", "properties": {"x": {"$ref": "https://example.invalid/s.json"}}}),
        );
        let (r, hits) = run(&h, json!({"x": 1})).await;
        assert_eq!(r.refusal().unwrap().code, RefusalCode::InvalidInput);
        assert_eq!(hits, 0);
    }

    #[tokio::test]
    async fn r36_bounds_come_before_the_schema_and_unknown_tools_are_refused() {
        let h = handle(json!({"type": "object"}));
        let mut deep = json!(1);
        for _ in 0..100 {
            deep = json!({"a": deep});
        }
        let (r, hits) = run(&h, deep).await;
        assert_eq!(r.refusal().unwrap().code, RefusalCode::InvalidInput);
        assert_eq!(hits, 0);

        let svc = SchemaValidationLayer::new(h).layer(service_fn(|_c: ToolCall| async {
            Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::default()))
        }));
        let r = svc
            .oneshot(ToolCall::new(AgentRef::profile("a"), "kb__nope", json!({})))
            .await
            .unwrap();
        assert_eq!(r.refusal().unwrap().code, RefusalCode::UnknownTool);
    }
}
