//! [`ResponseFuture`]: polls the inner future under the span, and ends the span with the
//! outcome — or, when dropped first, as cancelled.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use opentelemetry::Context as OtelContext;
use opentelemetry::KeyValue;
use opentelemetry::trace::{Status, TraceContextExt};
use pin_project_lite::pin_project;
use toolgate::core::{CallOutcome, DecisionNote, DecisionSink, ShadowNote, ToolResponse};
use toolgate::redact::Redactor;

use crate::attributes::{self as attr, values};
use crate::record;
use crate::shared::Shared;
use opentelemetry::metrics::Counter;

/// Everything needed to end the span. Ends it as cancelled when dropped unended.
pub(crate) struct Finish {
    cx: OtelContext,
    sink: DecisionSink,
    tool: String,
    content: bool,
    redactor: Redactor,
    decisions: Option<Counter<u64>>,
    shadow_disagreements: Option<Counter<u64>>,
    ended: bool,
}

/// The note the gate recorded, read without taking it: an outer layer (audit) may share
/// the sink and read it after us.
fn peek(sink: &DecisionSink) -> Option<DecisionNote> {
    let mut seen = None;
    sink.update(|note| seen = Some(note.clone()));
    seen
}

impl Finish {
    pub(crate) fn new(cx: OtelContext, sink: DecisionSink, tool: String, shared: &Shared) -> Self {
        Self {
            cx,
            sink,
            tool,
            content: shared.content,
            redactor: shared.redactor.clone(),
            decisions: shared.decisions.clone(),
            shadow_disagreements: shared.shadow_disagreements.clone(),
            ended: false,
        }
    }

    /// Ends the span with the call's outcome.
    fn complete<E>(&mut self, result: &Result<ToolResponse, E>) {
        let note = peek(&self.sink);
        let mut attributes = Vec::with_capacity(12);
        let response = result.as_ref().ok();
        let answered_by = self.sink.answered_by();
        record::decision(
            &self.redactor,
            note.as_ref(),
            answered_by.as_ref(),
            response,
            &mut attributes,
        );
        self.shadow(note.as_ref(), response, &mut attributes);
        if let Some(d) = self.sink.delegation() {
            record::delegation(&d, &mut attributes);
        }
        let outcome = result
            .as_ref()
            .map_or(CallOutcome::Error, ToolResponse::outcome)
            .as_str();
        let error = match result {
            Ok(ToolResponse::Completed(_) | ToolResponse::Held(_)) => None,
            Ok(ToolResponse::Failed(_)) => {
                Some((values::TOOL_ERROR, "the tool reported a failure".into()))
            }
            Ok(ToolResponse::Refused(r)) => Some((r.code.as_str(), format!("refused: {}", r.code))),
            Err(_) => Some((
                std::any::type_name::<E>(),
                "the tool's service returned an error".into(),
            )),
        };
        attributes.push(KeyValue::new(attr::TOOLGATE_CALL_OUTCOME, outcome));
        if self.content
            && let Ok(ToolResponse::Completed(output) | ToolResponse::Failed(output)) = result
        {
            attributes.push(KeyValue::new(
                attr::GEN_AI_TOOL_CALL_RESULT,
                record::result_text(&self.redactor, &self.tool, output),
            ));
        }
        self.end(attributes, error);
    }

    /// Ends the span as cancelled: the future was dropped before the call completed.
    fn cancelled(&mut self) {
        let note = peek(&self.sink);
        let mut attributes = Vec::with_capacity(8);
        let answered_by = self.sink.answered_by();
        record::decision(
            &self.redactor,
            note.as_ref(),
            answered_by.as_ref(),
            None,
            &mut attributes,
        );
        self.shadow(note.as_ref(), None, &mut attributes);
        attributes.push(KeyValue::new(attr::TOOLGATE_CALL_OUTCOME, "cancelled"));
        self.end(
            attributes,
            Some((
                values::CANCELLED,
                "the call was dropped before it completed".into(),
            )),
        );
    }

    /// R46: the shadow policy's decision on the span, and a disagreement counted by kind.
    fn shadow(
        &self,
        note: Option<&DecisionNote>,
        response: Option<&ToolResponse>,
        attributes: &mut Vec<KeyValue>,
    ) {
        let Some(shadow) = self.sink.shadow() else {
            return;
        };
        let enforced = ShadowNote::enforced(note, response);
        let disagrees = record::shadow(&shadow, &enforced, attributes);
        if disagrees && let Some(counter) = &self.shadow_disagreements {
            let mut labels = vec![
                KeyValue::new(attr::TOOLGATE_SHADOW_KIND, shadow.kind(&enforced)),
                KeyValue::new(attr::TOOLGATE_DECISION_OUTCOME, enforced.verdict.as_str()),
                KeyValue::new(
                    attr::TOOLGATE_SHADOW_OUTCOME,
                    shadow.decision.verdict.as_str(),
                ),
            ];
            if let Some(r) = shadow.decision.refusal() {
                labels.push(KeyValue::new(
                    attr::TOOLGATE_SHADOW_REFUSAL_CODE,
                    r.code.as_str(),
                ));
            }
            counter.add(1, &labels);
        }
    }

    fn end(&mut self, mut attributes: Vec<KeyValue>, error: Option<(&'static str, String)>) {
        self.ended = true;
        if let Some(counter) = &self.decisions {
            // Low cardinality only: never the tool, the agent or a reason.
            let labels: Vec<KeyValue> = attributes
                .iter()
                .filter(|kv| {
                    matches!(
                        kv.key.as_str(),
                        attr::TOOLGATE_DECISION_OUTCOME
                            | attr::TOOLGATE_DECISION_CHECK
                            | attr::TOOLGATE_REFUSAL_CODE
                            | attr::TOOLGATE_CALL_OUTCOME
                    )
                })
                .cloned()
                .collect();
            counter.add(1, &labels);
        }
        let span = self.cx.span();
        if let Some((kind, description)) = error {
            attributes.push(KeyValue::new(attr::ERROR_TYPE, kind));
            span.set_status(Status::error(description));
        }
        span.set_attributes(attributes);
        span.end();
    }
}

impl Drop for Finish {
    fn drop(&mut self) {
        if !self.ended {
            self.cancelled();
        }
    }
}

pin_project! {
    /// Response future of [`ToolSpan`](crate::ToolSpan): the inner future, polled with the
    /// span as the current context; the span ends when it completes (or is dropped).
    pub struct ResponseFuture<F> {
        #[pin]
        inner: F,
        finish: Option<Finish>,
    }
}

impl<F> ResponseFuture<F> {
    pub(crate) fn new(inner: F, finish: Finish) -> Self {
        Self {
            inner,
            finish: Some(finish),
        }
    }
}

impl<F> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("ended", &self.finish.is_none())
            .finish_non_exhaustive()
    }
}

impl<F, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<ToolResponse, E>>,
{
    type Output = Result<ToolResponse, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let _guard = this.finish.as_ref().map(|f| f.cx.clone().attach());
        let result = ready!(this.inner.poll(cx));
        if let Some(mut finish) = this.finish.take() {
            finish.complete(&result);
        }
        Poll::Ready(result)
    }
}
