//! The gate's response future: the tool's own future on the run path, a refusal, or a boxed
//! future — the ask path's wait, or a hooked call (its hooks may await).

use super::*;

/// What `after_call` needs once the call itself has been handed to the tool.
pub(super) struct After {
    hooks: Arc<dyn ToolHooks>,
    call: ToolCall,
    tool: String,
}

impl After {
    pub(super) fn of(hooks: &Arc<dyn ToolHooks>, call: &ToolCall, tool: &str) -> Self {
        // The hook sees the call as sent, without the extensions the tool's side reads.
        let mut seen = ToolCall::new(call.agent.clone(), tool, call.input.clone());
        seen.tool = call.tool.clone();
        seen.id = call.id.clone();
        seen.turn = call.turn.clone();
        seen.run = call.run;
        Self {
            hooks: Arc::clone(hooks),
            call: seen,
            tool: tool.to_owned(),
        }
    }

    /// `after_call` on the tool's response: kept, or replaced by the hook's rejection.
    pub(super) async fn apply(self, response: ToolResponse) -> ToolResponse {
        let view = HookCall::of(&self.call, &self.tool);
        match self.hooks.after_call(&view, &response).await {
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
        Inner { #[pin] future: F },
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
    /// The tool's own future (a call with no hooks).
    pub(super) fn inner(future: F) -> Self {
        Self {
            kind: GateKind::Inner { future },
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
            GateProj::Inner { future } => future.poll(cx),
            GateProj::Refused { response } => Poll::Ready(Ok(response.take())),
            GateProj::Waiting { future } => future.as_mut().poll(cx),
        }
    }
}
