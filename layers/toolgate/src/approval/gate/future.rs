//! The gate's response future: the tool's own future on the run path (then `after_call`),
//! a refusal, or the boxed wait of the ask path.

use super::*;

pub(super) struct After {
    hooks: Arc<dyn ToolHooks>,
    call_id: CallId,
    tool: String,
    agent: AgentRef,
    input: Value,
}

impl After {
    pub(super) fn of(hooks: &Arc<dyn ToolHooks>, call: &ToolCall, tool: &str) -> Self {
        Self {
            hooks: Arc::clone(hooks),
            call_id: call.id.clone(),
            tool: tool.to_owned(),
            agent: call.agent.clone(),
            input: call.input.clone(),
        }
    }

    pub(super) fn apply(&self, response: ToolResponse) -> ToolResponse {
        let view = HookCall {
            call_id: &self.call_id,
            tool: &self.tool,
            agent: &self.agent,
            input: &self.input,
        };
        match self.hooks.after_call(&view, &response) {
            Ok(()) => response,
            Err(text) => ToolResponse::Failed(ToolOutput::new(Value::String(text))),
        }
    }
}

impl fmt::Debug for After {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("After").field("tool", &self.tool).finish()
    }
}

pin_project! {
    /// Response future of [`ApprovalGate`]: the tool's future on the run path (no
    /// allocation), a refusal, or a boxed wait for a person on the ask path.
    pub struct GateFuture<F, E> {
        #[pin]
        kind: GateKind<F, E>,
    }
}

pin_project! {
    #[project = GateProj]
    enum GateKind<F, E> {
        Inner { #[pin] future: F, after: Option<After> },
        Refused { response: OnceResponse },
        Waiting { future: BoxFuture<Result<ToolResponse, E>> },
    }
}

impl<F, E> fmt::Debug for GateFuture<F, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("GateFuture")
    }
}

impl<F, E> GateFuture<F, E> {
    /// The tool's own future, then `after_call` when there are hooks.
    pub(super) fn inner(future: F, after: Option<After>) -> Self {
        Self {
            kind: GateKind::Inner { future, after },
        }
    }

    /// The ask path's boxed wait.
    pub(super) fn waiting(future: BoxFuture<Result<ToolResponse, E>>) -> Self {
        Self {
            kind: GateKind::Waiting { future },
        }
    }

    pub(super) fn refused(refusal: Refusal) -> Self {
        Self {
            kind: GateKind::Refused {
                response: OnceResponse::new(ToolResponse::Refused(refusal)),
            },
        }
    }
}

impl<F, E> Future for GateFuture<F, E>
where
    F: Future<Output = Result<ToolResponse, E>>,
{
    type Output = Result<ToolResponse, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            GateProj::Inner { future, after } => match future.poll(cx) {
                Poll::Ready(Ok(response)) => Poll::Ready(Ok(match after.take() {
                    Some(a) => a.apply(response),
                    None => response,
                })),
                other => other,
            },
            GateProj::Refused { response } => Poll::Ready(Ok(response.take())),
            GateProj::Waiting { future } => future.as_mut().poll(cx),
        }
    }
}
