//! The audit layer (R33): one record per call with the whole story, redacted, chained by
//! hash.
//!
//! Place it just inside the tool span and outside every deciding layer, so that it sees
//! every call — those refused by a filter as well as those the gate asked about and those
//! that ran. [`ToolgateLayer`](crate::ToolgateLayer) puts it there (slot 2) from the
//! configuration's `audit` section, with the one redactor of its `redaction` section (the
//! whole order: [the layers guide](crate::guide::layers)).
//!
//! It puts a [`DecisionSink`] in the call's extensions; the approval gate records
//! its decision there (which check or rule decided, every reason, how a wait ended and who
//! answered), and the layer writes one record after the outcome.
//!
//! # Record schema
//!
//! Each record is an [`AuditRecord`], built with its
//! constructor and the constructors of its parts and handed to the sink as a JSON object;
//! [its module](crate::core::audit_record) has the table of fields (`time`, `call_id`,
//! `tool`, `identities`, `agent`, `subagent`, `session`, `policy_updated_at`, `principal`,
//! `input_hash`, `input`, `edit`, `decision`, `shadow`, `approval`, `delegation`,
//! `outcome`, `error`, `duration_ms`, `output`, and the chain's `seq`, `prev`, `hash`) and
//! says which are `null` and which absent when they do not apply. Replay
//! (`toolgate policy simulate`) reads the same type.
//!
//! Every reason and every content field passes through the [`Redactor`] first.
//!
//! # Failing sinks
//!
//! By default a failing sink refuses calls: a sink that reports itself failing refuses the
//! call before it is sent (`rejected`, with the sink's error); a record that cannot be
//! written after the call ran withholds the result from the model (a failed result saying
//! why), and the layer itself remembers the failure, so every later call is refused
//! (`rejected`) whatever the sink's [`AuditSink::ready`] says — a custom sink that
//! implements only [`AuditSink::write`] stops calls too.
//!
//! The failure is shared by every clone of the layer and every service built from it.
//! Recovery is an operator's act, never automatic: repair or replace the sink, then either
//! build a new layer (a new layer starts with no failure) or call [`AuditLayer::reset`] on a
//! clone of the layer kept for that purpose; [`AuditLayer::failure`] says what failed. A
//! sink that keeps its own failed state (such as [`JsonlFileSink`]) still refuses through
//! `ready` after a reset until it is replaced.
//!
//! [`AuditLayer::with_insecure_fail_open`] lets calls run and emits an error event instead.
//!
//! # Example
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use std::sync::Arc;
//! use serde_json::json;
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//! use toolgate::GovernanceHandle;
//! use toolgate::approval::ApprovalGateLayer;
//! use toolgate::audit::{AuditLayer, MemorySink};
//! use toolgate::core::{AgentRef, ToolCall, ToolOutput, ToolResponse};
//! use toolgate::engine::config::{load_str, Format};
//!
//! let handle = GovernanceHandle::new(load_str(r#"{"tools": [{"kind": "http", "name": "lookup"}],
//!     "agents": [{"name": "dev", "allowed_tools": ["lookup"]}]}"#, Format::Json).unwrap());
//! let sink = Arc::new(MemorySink::new());
//! let svc = ServiceBuilder::new()
//!     .layer(AuditLayer::shared(sink.clone()).governance(handle.clone()))
//!     .layer(ApprovalGateLayer::new(handle))
//!     .service(service_fn(|_c: ToolCall| async {
//!         Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::new(json!("ok"))))
//!     }));
//! let dev = AgentRef::profile("dev");
//! svc.clone().oneshot(ToolCall::new(dev.clone(), "lookup", json!({"password": "hunter2"}))).await.unwrap();
//! svc.oneshot(ToolCall::new(dev, "wipe", json!({}))).await.unwrap();
//! let lines = sink.lines();
//! assert!(lines[0].contains(r#""outcome":"completed""#));
//! assert!(lines[1].contains(r#""refusal":"unknown_tool""#));
//! assert!(!lines.concat().contains("hunter2"));
//! # }
//! ```

mod sink;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime};

use pin_project_lite::pin_project;
use serde_json::Value;
use toolgate_core::audit_record::{
    AuditApproval, AuditDecision, AuditDelegation, AuditEdit, AuditIdentity, AuditPrincipal,
    AuditRecord, AuditShadow,
};
use toolgate_core::{
    CallOutcome, Check, DecisionNote, DecisionSink, Refusal, RefusalCode, ShadowNote, ToolCall,
    ToolOutput, ToolResponse,
};
use toolgate_engine::canon;
use toolgate_engine::recording::{AuditSettings, OnSinkFailure};
use tower_layer::Layer;
use tower_service::Service;

pub use sink::{AuditError, AuditSink, JsonlFileSink, MemorySink, TracingSink};
pub use toolgate_engine::chain::{ChainBreak, GENESIS, verify_chain};

use crate::handle::{GovernanceHandle, PinnedDecision};
use crate::redact::Redactor;

/// Layer of the [`Audit`] service.
#[derive(Clone)]
#[must_use]
pub struct AuditLayer {
    sink: Arc<dyn AuditSink>,
    redactor: Redactor,
    on_failure: OnSinkFailure,
    include_input: bool,
    include_output: bool,
    handle: Option<GovernanceHandle>,
    // INVARIANT: set on the first record that cannot be written; while set, a fail-closed
    // layer sends no call (R33). Shared by every clone, cleared only by `reset`.
    failed: Arc<Mutex<Option<String>>>,
}

impl fmt::Debug for AuditLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuditLayer")
            .field("sink", &self.sink)
            .field("on_failure", &self.on_failure)
            .field("include_input", &self.include_input)
            .field("include_output", &self.include_output)
            .field("failed", &self.failure())
            .finish()
    }
}

impl AuditLayer {
    /// Records every call to `sink`, refusing calls when the sink fails.
    pub fn new(sink: impl AuditSink) -> Self {
        Self::shared(Arc::new(sink))
    }

    /// The sink this layer writes to (shared).
    pub fn sink(&self) -> Arc<dyn AuditSink> {
        Arc::clone(&self.sink)
    }

    /// As [`AuditLayer::new`] for a sink already shared.
    pub fn shared(sink: Arc<dyn AuditSink>) -> Self {
        Self {
            sink,
            redactor: Redactor::default(),
            on_failure: OnSinkFailure::Refuse,
            include_input: false,
            include_output: false,
            handle: None,
            failed: Arc::new(Mutex::new(None)),
        }
    }

    /// The audit layer a configuration's `audit` section asks for: its `file` opened as a
    /// [`JsonlFileSink`] with its flush policy, failure mode and content fields; `None`
    /// when the section names no file. A file that cannot be opened is an error, never a
    /// silently missing audit trail.
    pub fn from_settings(settings: &AuditSettings) -> Result<Option<Self>, AuditError> {
        let Some(file) = &settings.file else {
            return Ok(None);
        };
        let sink = JsonlFileSink::open(file, settings.flush)?;
        Ok(Some(Self::new(sink).settings(settings)))
    }

    /// Applies a configuration's `audit` section (failure mode, content fields).
    pub fn settings(mut self, settings: &AuditSettings) -> Self {
        self.on_failure = settings.on_sink_failure;
        self.include_input = settings.include_input;
        self.include_output = settings.include_output;
        self
    }

    /// Looks tool identities up in these snapshots (for the `identities` field).
    pub fn governance(mut self, handle: GovernanceHandle) -> Self {
        self.handle = Some(handle);
        self
    }

    /// Redacts with `redactor` instead of the default rules.
    pub fn redactor(mut self, redactor: Redactor) -> Self {
        self.redactor = redactor;
        self
    }

    /// Puts the redacted input and output in each record.
    pub fn include_content(mut self, input: bool, output: bool) -> Self {
        self.include_input = input;
        self.include_output = output;
        self
    }

    /// Lets calls run when the sink fails, with an error event per lost record. Calls can
    /// then run unrecorded: use only where availability outranks the audit trail.
    pub fn with_insecure_fail_open(mut self) -> Self {
        self.on_failure = OnSinkFailure::Log;
        self
    }

    /// Why a record could not be written, if one could not since the layer was built (or
    /// last [`reset`](AuditLayer::reset)). While this is `Some`, a fail-closed layer refuses
    /// every call. Shared by every clone of the layer.
    #[must_use]
    pub fn failure(&self) -> Option<String> {
        match self.failed.lock() {
            Ok(f) => f.clone(),
            Err(_) => Some(String::from("the audit layer's failure state is unusable")),
        }
    }

    /// Forgets a write failure, so calls run again: the operator's recovery once the sink
    /// is repaired (see [Failing sinks](crate::audit#failing-sinks)). Affects every clone of the
    /// layer and every service built from it. A sink that still reports itself failing
    /// through [`AuditSink::ready`] keeps refusing calls.
    pub fn reset(&self) {
        match self.failed.lock() {
            Ok(mut f) => *f = None,
            Err(poisoned) => *poisoned.into_inner() = None,
        }
        self.failed.clear_poison();
    }

    /// Remembers the first write failure.
    fn fail(&self, why: &AuditError) {
        let mut f = match self.failed.lock() {
            Ok(f) => f,
            Err(poisoned) => poisoned.into_inner(),
        };
        if f.is_none() {
            *f = Some(why.0.clone());
        }
    }

    /// Why calls must be refused now, under fail-closed: a remembered write failure, or a
    /// sink that reports itself failing.
    fn refusal(&self) -> Option<String> {
        if self.on_failure != OnSinkFailure::Refuse {
            return None;
        }
        if let Some(why) = self.failure() {
            return Some(format!(
                "an audit record could not be written ({why}), so no call may run unrecorded \
                 until the operator repairs the sink and resets the audit layer"
            ));
        }
        self.sink
            .ready()
            .err()
            .map(|e| format!("the audit sink is failing, so no call may run unrecorded: {e}"))
    }
}

impl<S> Layer<S> for AuditLayer {
    type Service = Audit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Audit {
            inner,
            layer: self.clone(),
        }
    }
}

/// The audit service.
#[derive(Clone)]
pub struct Audit<S> {
    inner: S,
    layer: AuditLayer,
}

impl<S: fmt::Debug> fmt::Debug for Audit<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Audit")
            .field("inner", &self.inner)
            .field("layer", &self.layer)
            .finish()
    }
}

impl<S> Audit<S> {
    crate::inner_service_accessors!(inner: S);
}

/// What the record needs from the call, taken before it is sent.
struct Pending {
    layer: AuditLayer,
    sink: DecisionSink,
    started: Instant,
    record: AuditRecord<'static>,
    tool: String,
    include_output: bool,
    /// The shadow policy's decision as pinned (R46), for a call no gate recorded one for (a
    /// filter refused it before the gate).
    shadow: Option<toolgate_core::Decision>,
}

impl fmt::Debug for Pending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pending").field("tool", &self.tool).finish()
    }
}

pin_project! {
    /// Response future of [`Audit`]. Dropped before it ends (the caller cancelled the call:
    /// an MCP client's `notifications/cancelled`, a timeout around the stack), it still
    /// writes the call's record: outcome `error`, the reason that it was cancelled, and the
    /// wait `cancelled` when it was waiting for a person (R26: the record says which ended
    /// the wait).
    pub struct AuditFuture<F> {
        #[pin]
        kind: Kind<F>,
    }
    impl<F> PinnedDrop for AuditFuture<F> {
        fn drop(this: Pin<&mut Self>) {
            if let KindProj::Inner { pending, .. } = this.project().kind.project()
                && let Some(p) = pending.take()
            {
                let _ = p.finish::<&str>(Err(CANCELLED));
            }
        }
    }
}

/// The error a cancelled call's record carries.
const CANCELLED: &str =
    "cancelled: the caller abandoned the call before it ended (nothing more of it is sent)";

pin_project! {
    #[project = KindProj]
    enum Kind<F> {
        Inner { #[pin] future: F, pending: Option<Pending> },
        Refused { response: crate::future::OnceResponse },
    }
}

impl<F> fmt::Debug for AuditFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AuditFuture")
    }
}

impl<S> Service<ToolCall> for Audit<S>
where
    S: Service<ToolCall, Response = ToolResponse>,
    S::Error: fmt::Display,
{
    type Response = ToolResponse;
    type Error = S::Error;
    type Future = AuditFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut call: ToolCall) -> Self::Future {
        let layer = &self.layer;
        if let Some(why) = layer.refusal() {
            // INVARIANT: nothing runs unrecorded under fail-closed.
            return AuditFuture {
                kind: Kind::Refused {
                    response: crate::future::OnceResponse::new(ToolResponse::Refused(
                        Refusal::new(RefusalCode::Rejected, Check::AuditSink, why),
                    )),
                },
            };
        }
        let sink = decision_sink(&mut call);
        let tool = call.tool.display_name();
        let time = humantime::format_rfc3339_micros(SystemTime::now()).to_string();
        // An agent's own `audit` settings replace the section's (R39: inherited, never
        // looser).
        let mut include = (layer.include_input, layer.include_output);
        // Decide once: the first layer of the handle decides the call and pins the decision
        // with its entry and profile for every layer after it.
        let pinned = layer.handle.as_ref().map(|h| h.decide(&mut call));
        let identities = pinned
            .as_ref()
            .map(|pinned| {
                include = agent_include(pinned, &call, include);
                identities(pinned)
            })
            .unwrap_or_default();
        let record = AuditRecord::new(
            time,
            call.id.as_str().to_owned(),
            tool.clone(),
            call.agent.profile.as_str().to_owned(),
        )
        .identities(identities);
        let record = with_caller(record, &call, pinned.as_ref());
        let record = with_input(record, layer, &tool, &call, pinned.as_ref(), include.0);
        AuditFuture {
            kind: Kind::Inner {
                future: self.inner.call(call),
                pending: Some(Pending {
                    layer: layer.clone(),
                    sink,
                    started: Instant::now(),
                    record,
                    tool,
                    include_output: include.1,
                    shadow: pinned
                        .as_ref()
                        .and_then(|p| p.shadow())
                        .map(|d| d.decision.clone()),
                }),
            },
        }
    }
}

/// The call's decision sink, put in its extensions when no layer before this one did.
fn decision_sink(call: &mut ToolCall) -> DecisionSink {
    match call.extensions.get::<DecisionSink>() {
        Some(s) => s.clone(),
        None => {
            let s = DecisionSink::default();
            call.extensions.insert(s.clone());
            s
        }
    }
}

/// Whether the record includes the input and the output, by the agent's own `audit`
/// settings over the section's `include` (R39).
fn agent_include(
    pinned: &PinnedDecision,
    call: &ToolCall,
    mut include: (bool, bool),
) -> (bool, bool) {
    // A call refused before its profile was resolved still gets its agent's
    // settings (a look-up only on that refused path).
    let agent = pinned
        .agent()
        .or_else(|| pinned.governance().agent(&call.agent.profile));
    if let Some(a) = agent {
        include = (
            a.audit_content.0.unwrap_or(include.0),
            a.audit_content.1.unwrap_or(include.1),
        );
    }
    include
}

/// The record's `identities`: every tool behind the name the call used (none for an
/// unknown tool).
fn identities(pinned: &PinnedDecision) -> Vec<AuditIdentity<'static>> {
    pinned
        .entry()
        .map(|e| {
            e.records
                .iter()
                // Seed 000: an operator's override keeps the declared scope for audit; both
                // are recorded.
                .map(|r| {
                    AuditIdentity::of(r.identity(), r.decl.network, r.decl.effective_network())
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The record's fields about who called beside `agent`: `subagent`, `session`,
/// `policy_updated_at` and, when the caller's token named one, `principal`.
fn with_caller(
    record: AuditRecord<'static>,
    call: &ToolCall,
    pinned: Option<&PinnedDecision>,
) -> AuditRecord<'static> {
    // R43, R46: the session the call belongs to, and the stored policy it was decided
    // under (its `updated_at`), so a replay judges it as it was made.
    let policy_at = pinned.and_then(|p| match p.governance().policy() {
        toolgate_engine::PolicyState::Readable(policy) => policy.updated_at().map(str::to_owned),
        _ => None,
    });
    record
        .subagent(call.agent.subagent.clone())
        .session(call.turn.as_ref().map(|t| t.session.clone()))
        .policy_updated_at(policy_at)
        // The verified principal (`sub`, `iss`) the caller's token named, when it came with
        // one (absent otherwise, so records of other callers are unchanged).
        .principal(
            call.extensions
                .get::<toolgate_core::Principal>()
                .map(AuditPrincipal::of),
        )
}

/// The record's fields about the input: `input_hash`, the redacted `input` when the
/// record includes it, and an approver's `edit`.
fn with_input(
    record: AuditRecord<'static>,
    layer: &AuditLayer,
    tool: &str,
    call: &ToolCall,
    pinned: Option<&PinnedDecision>,
    include_input: bool,
) -> AuditRecord<'static> {
    // Computed once per call: the gate's decision note reuses it.
    let hash = pinned.map_or_else(
        || canon::input_hash(&call.input),
        |p| p.canonical_input_hash(&call.input),
    );
    let mut record = record.input_hash(hash);
    if include_input {
        record = record.input(layer.redactor.redact_value(tool, &call.input));
    }
    // Approved with edits (approval-page.md, "Approve with edits"): the input the agent
    // sent, beside the edited one the call carries, and who edited.
    let edit = call
        .extensions
        .get::<toolgate_core::InputEdit>()
        .map(|edit| {
            let original =
                include_input.then(|| layer.redactor.redact_value(tool, &edit.original_input));
            AuditEdit::of(edit, original)
        });
    record.edit(edit)
}

impl Pending {
    /// The record's `decision`: the gate's, else the refusal a layer answered with, else a
    /// call nothing decided.
    fn decision(
        &self,
        note: Option<&DecisionNote>,
        response: Option<&ToolResponse>,
    ) -> AuditDecision<'static> {
        let redact = |s: &str| self.layer.redactor.redact_text(s);
        match note {
            Some(n) => AuditDecision::of(&n.decision, &redact),
            // No gate recorded anything: a filter refused the call, or there is no gate.
            None => match response.and_then(ToolResponse::refusal) {
                Some(refusal) => AuditDecision::refused(refusal, &redact),
                None => AuditDecision::ungated(),
            },
        }
    }

    /// Writes the record; returns the response the model gets.
    fn finish<E: fmt::Display>(
        mut self,
        result: Result<ToolResponse, E>,
    ) -> Result<ToolResponse, E> {
        let note = self.sink.get();
        let mut record = std::mem::take(&mut self.record);
        let elapsed = self.started.elapsed();
        let redact = |s: &str| self.layer.redactor.redact_text(s);
        record.decision = self.decision(note.as_ref(), result.as_ref().ok());
        // R46: the shadow policy's decision beside the enforced one.
        if let Some(shadow) = self
            .sink
            .shadow()
            .or_else(|| self.shadow.clone().map(ShadowNote::new))
        {
            let enforced = ShadowNote::enforced(note.as_ref(), result.as_ref().ok());
            record.shadow = Some(AuditShadow::of(&shadow, &enforced, &redact));
        }
        // R47: the answering person's verified principal, when their answer came with an
        // identity-provider token (absent otherwise).
        record.approval = note
            .as_ref()
            .map(|n| AuditApproval::of(n, self.sink.answered_by().as_ref()));
        // RFC 8693: whom the call was sent upstream for, when the tool exchanged the
        // caller's token (absent otherwise, so other records are unchanged).
        record.delegation = self.sink.delegation().as_ref().map(AuditDelegation::of);
        let outcome = result
            .as_ref()
            .map_or(CallOutcome::Error, ToolResponse::outcome);
        record.outcome = outcome.as_str().into();
        if let Err(e) = &result {
            record.error = Some(redact(&e.to_string()).into());
        }
        record.duration_ms = (elapsed.as_secs_f64() * 1000.0 * 1000.0).round() / 1000.0;
        if self.include_output
            && let Ok(ToolResponse::Completed(out) | ToolResponse::Failed(out)) = &result
        {
            record.output = Some(self.layer.redactor.redact_value(&self.tool, &out.content));
        }
        let written = record
            .to_map()
            .map_err(|e| AuditError(format!("the record cannot be written as JSON: {e}")))
            .and_then(|record| self.layer.sink.write(record));
        match written {
            Ok(()) => result,
            Err(e) => {
                tracing::error!(target: "toolgate::audit", error = %e, tool = %self.tool, "an audit record could not be written");
                self.layer.fail(&e);
                match (self.layer.on_failure, result) {
                    (
                        OnSinkFailure::Refuse,
                        Ok(ToolResponse::Completed(_) | ToolResponse::Failed(_)),
                    ) => Ok(ToolResponse::Failed(ToolOutput::new(Value::from(format!(
                        "the result was withheld: the call could not be recorded ({e})"
                    ))))),
                    (_, other) => other,
                }
            }
        }
    }
}

impl<F, E> Future for AuditFuture<F>
where
    F: Future<Output = Result<ToolResponse, E>>,
    E: fmt::Display,
{
    type Output = Result<ToolResponse, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Inner { future, pending } => match future.poll(cx) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(result) => match pending.take() {
                    Some(p) => Poll::Ready(p.finish(result)),
                    None => Poll::Ready(result),
                },
            },
            KindProj::Refused { response } => Poll::Ready(Ok(response.take())),
        }
    }
}
