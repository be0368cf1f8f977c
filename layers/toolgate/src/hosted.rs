//! Calls whose tool the host runs: a governed stack for agent frameworks that call their
//! tools themselves, between hooks.
//!
//! An agent framework (rig, agent-base) decides nothing about a tool call: it offers hooks
//! before and after the tool runs, and runs the tool in between. Deciding in the first hook
//! with [`GovernanceHandle::decide`] alone would leave out what only the stack does — the
//! audit record, the approval channel, the quota's send and the permit binding the input
//! (R38, R44). A [`HostedStack`] keeps all of it: [`HostedStack::clear`] sends the call down
//! the whole governed stack, whose tool end ([`HostTool`], behind a [`RequirePermit`]) does
//! not run anything — it hands the call, exactly as the gate passed it, back to the host as a
//! [`Clearance`] and waits. The host runs its tool with that input, checked by the permit
//! ([`Clearance::verify`]), and gives the result back ([`Clearance::finish`]): it goes up
//! through the stack as any tool's result does, scrubbed and audited, and the host hands
//! what comes out to its model.
//!
//! A call the stack does not pass comes back at once as [`Cleared::Answered`] — refused or
//! held, with the text the model should read ([`ToolResponse::model_text`]); it was never
//! sent. A clearance dropped without a result is recorded as a call the host did not run
//! (`failed`).
//!
//! The stack runs on its own tokio task from `clear` to `finish`, so the host's hooks may
//! return in between; `clear` must be called within a tokio runtime.
//!
//! # Example
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use serde_json::json;
//! use toolgate::{GovernanceHandle, ToolgateLayer};
//! use toolgate::audit::MemorySink;
//! use toolgate::core::{AgentRef, RefusalCode, ToolCall, ToolOutput, ToolResponse};
//! use toolgate::engine::config::{load_str, Format};
//! use toolgate::hosted::{Cleared, HostedStack};
//!
//! let handle = GovernanceHandle::new(load_str(r#"{
//!     "redaction": {"keys": ["ssn"], "scrub_output": true},
//!     "tools": [{"kind": "http", "name": "lookup"}, {"kind": "http", "name": "wipe"}],
//!     "agents": [{"name": "dev", "allowed_tools": ["lookup"]}]
//! }"#, Format::Json).unwrap());
//! let audit = std::sync::Arc::new(MemorySink::new());
//! let hosted = HostedStack::new(ToolgateLayer::builder(handle).shared_audit_sink(audit.clone()).build().unwrap());
//! let dev = AgentRef::profile("dev");
//!
//! // Passed: the host runs its tool with the input the gate passed, and hands back the result.
//! let Cleared::Sent(mut clearance) = hosted.clear(ToolCall::new(dev.clone(), "lookup", json!({"id": 7}))).await
//!     else { panic!("lookup is allowed") };
//! assert!(clearance.verify("lookup", &json!({"id": 7})).is_ok());
//! assert!(clearance.verify("lookup", &json!({"id": 8})).is_err()); // not the input the gate passed
//! let ran = ToolResponse::Completed(ToolOutput::new(json!({"name": "Ada", "ssn": "078-05-1120"})));
//! let ToolResponse::Completed(out) = clearance.finish(ran).await else { panic!() };
//! assert_ne!(out.content["ssn"], "078-05-1120"); // scrubbed on the way up
//!
//! // Refused: answered at once, never sent.
//! let Cleared::Answered(refused) = hosted.clear(ToolCall::new(dev, "wipe", json!({}))).await
//!     else { panic!("wipe is not allowed") };
//! assert_eq!(refused.refusal().unwrap().code, RefusalCode::NotAllowed);
//! assert_eq!(audit.lines().len(), 2); // both audited
//! # }
//! ```

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use serde_json::{Value, json};
use tokio::sync::oneshot;
use toolgate_core::{Check, Refusal, RefusalCode, ToolCall, ToolOutput, ToolResponse};
use tower::util::BoxCloneSyncService;
use tower::{BoxError, ServiceExt};
use tower_layer::Layer;
use tower_service::Service;

use crate::handle::GovernanceHandle;
use crate::permit::{Permit, RequirePermit, RequirePermitLayer};
use crate::redact::Redactor;
use crate::stack::{Filtered, Toolgate, ToolgateLayer};

/// What a host's tool result is recorded as when the host never gave one.
const NOT_RUN: &str = "the host did not run the call after toolgate passed it";

/// A governed stack whose tool the host runs: see the [module docs](self).
#[derive(Clone)]
pub struct HostedStack {
    service: BoxCloneSyncService<ToolCall, ToolResponse, BoxError>,
    handle: GovernanceHandle,
    redactor: Redactor,
    scrubs: bool,
}

impl fmt::Debug for HostedStack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostedStack")
            .field("handle", &self.handle)
            .field("scrubs_output", &self.scrubs)
            .finish_non_exhaustive()
    }
}

impl HostedStack {
    /// The composite `layer` over the host's side of the call: every part the configuration
    /// asks for (audit, the filters, the gate and its channels, scrubbing, and whatever was
    /// added in its slots, such as `toolgate_otel`'s span) decides and records each call.
    pub fn new<L, O>(layer: ToolgateLayer<L, O>) -> Self
    where
        L: Layer<Filtered<RequirePermit<HostTool>>>,
        O: Layer<Toolgate<RequirePermit<HostTool>, L>>,
        O::Service: Service<ToolCall, Response = ToolResponse> + Clone + Send + Sync + 'static,
        <O::Service as Service<ToolCall>>::Error: Into<BoxError>,
        <O::Service as Service<ToolCall>>::Future: Send + 'static,
    {
        let handle = layer.handle().clone();
        let redactor = layer.redactor().clone();
        let scrubs = layer.scrubs_output();
        let tool = RequirePermitLayer::new(handle.clone()).layer(HostTool { _private: () });
        let service = layer.layer(tool).map_err(Into::into);
        Self {
            service: BoxCloneSyncService::new(service),
            handle,
            redactor,
            scrubs,
        }
    }

    /// Sends `call` down the stack until it is passed to the tool (its permit minted, its
    /// send recorded: [`Cleared::Sent`]) or answered without being sent — refused, or held
    /// in a durable inbox ([`Cleared::Answered`]). A person asked through an interactive
    /// channel is waited for here.
    pub async fn clear(&self, mut call: ToolCall) -> Cleared {
        let (arrived, mut arrival) = oneshot::channel();
        let (done, mut answered) = oneshot::channel();
        call.extensions.insert(Meeting(arrived));
        let service = self.service.clone();
        tokio::spawn(async move {
            let response = service.oneshot(call).await.unwrap_or_else(|e| failed(&e));
            let _ = done.send(response);
        });
        // Whichever comes first: the call reaching the tool end, or the stack's answer.
        let first = std::future::poll_fn(|cx| {
            if let Poll::Ready(here) = Pin::new(&mut arrival).poll(cx) {
                return Poll::Ready(Ok(here));
            }
            Pin::new(&mut answered).poll(cx).map(Err)
        })
        .await;
        match first {
            Ok(Ok(Arrival { call, result })) => Cleared::Sent(Clearance {
                call: Box::new(call),
                result: Some(result),
                done: answered,
                handle: self.handle.clone(),
            }),
            // Answered without reaching the tool end (the call, and its meeting, dropped).
            Ok(Err(_)) => Cleared::Answered(settled(answered.await)),
            Err(response) => Cleared::Answered(settled(response)),
        }
    }

    /// The handle the stack decides by (for exposure: `Governance::exposure`).
    pub fn handle(&self) -> &GovernanceHandle {
        &self.handle
    }

    /// The stack's one redactor (the configuration's `redaction` section).
    pub fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    /// Whether the stack scrubs what the model receives (`redaction.scrub_output`).
    pub fn scrubs_output(&self) -> bool {
        self.scrubs
    }
}

/// How [`HostedStack::clear`] left a call.
#[derive(Debug)]
pub enum Cleared {
    /// Passed: the host runs its tool with [`Clearance::call`]'s input and hands the result
    /// back.
    Sent(Clearance),
    /// Answered without being sent: refused or held (or a transport failure of a layer,
    /// `failed`). Its [`ToolResponse::model_text`] is what the model should read.
    Answered(ToolResponse),
}

/// A call the governed stack passed to the host's tool and is waiting on: the host runs the
/// tool with exactly [`Clearance::call`]'s input, then [`finish`](Clearance::finish)es it
/// with the result. Dropped unfinished, the stack records that the host did not run it.
pub struct Clearance {
    /// Boxed: a clearance travels by value through the host's hooks.
    call: Box<ToolCall>,
    result: Option<oneshot::Sender<ToolResponse>>,
    done: oneshot::Receiver<ToolResponse>,
    handle: GovernanceHandle,
}

impl fmt::Debug for Clearance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Clearance")
            .field("tool", &self.call.tool.display_name())
            .field("call_id", &self.call.id)
            .finish_non_exhaustive()
    }
}

impl Clearance {
    /// The call as the approval gate passed it — its permit among its extensions.
    pub fn call(&self) -> &ToolCall {
        &self.call
    }

    /// Whether the host is about to run what the gate passed: the tool `tool` with exactly
    /// `input`, checked by the call's [`Permit`] (R38: its agent, its call and the keyed
    /// binding of its input). The refusal says what differs.
    ///
    /// # Errors
    ///
    /// `rejected` when the tool or the input is not the one the gate passed.
    pub fn verify(&mut self, tool: &str, input: &Value) -> Result<(), Refusal> {
        let passed = self.call.tool.display_name();
        if passed != tool {
            return Err(Refusal::new(
                RefusalCode::Rejected,
                Check::Permit,
                format!("the approval gate passed a call to `{passed}`, not to `{tool}`"),
            ));
        }
        // The permit is checked as a tool side checks it, on the call carrying the input
        // about to run; the passed input is put back whatever the answer.
        let passed_input = std::mem::replace(&mut self.call.input, input.clone());
        let verdict = Permit::verify_call(&self.call, &self.handle).map(|_| ());
        self.call.input = passed_input;
        verdict
    }

    /// Hands the tool's `response` to the stack: it goes up through scrubbing, the gate and
    /// audit as any tool's result does. The future gives what the model should get; the
    /// stack records the call whether or not it is awaited.
    pub fn finish(mut self, response: ToolResponse) -> Finishing {
        if let Some(result) = self.result.take() {
            let _ = result.send(response);
        }
        let (_, done) = oneshot::channel();
        Finishing {
            done: std::mem::replace(&mut self.done, done),
        }
    }

    /// Tells the stack the host did not run the call (a later hook skipped it, the run
    /// ended): recorded as `failed` with `why`.
    pub fn abandon(mut self, why: &str) {
        if let Some(result) = self.result.take() {
            let _ = result.send(not_run(why));
        }
    }
}

impl Drop for Clearance {
    fn drop(&mut self) {
        if let Some(result) = self.result.take() {
            let _ = result.send(not_run(NOT_RUN));
        }
    }
}

/// What the tool's result becomes in the model's hands: [`Clearance::finish`]'s future.
#[derive(Debug)]
#[must_use = "the stack records the call anyway; await it for what the model should get"]
pub struct Finishing {
    done: oneshot::Receiver<ToolResponse>,
}

impl Future for Finishing {
    type Output = ToolResponse;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<ToolResponse> {
        Pin::new(&mut self.done).poll(cx).map(settled)
    }
}

/// The tool end of a [`HostedStack`]: it runs nothing; it hands each call the gate passed
/// back to the host waiting in [`HostedStack::clear`] and answers with the host's result.
/// Only a hosted stack makes one.
#[derive(Debug, Clone)]
pub struct HostTool {
    _private: (),
}

/// Where the host waits for the call to reach the tool end.
struct Meeting(oneshot::Sender<Arrival>);

/// The passed call, and where its result goes.
struct Arrival {
    call: ToolCall,
    result: oneshot::Sender<ToolResponse>,
}

impl Service<ToolCall> for HostTool {
    type Response = ToolResponse;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<ToolResponse, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut call: ToolCall) -> Self::Future {
        let meeting = call.extensions.remove::<Meeting>();
        Box::pin(async move {
            let Some(Meeting(host)) = meeting else {
                return Ok(not_run(
                    "the call did not come through HostedStack::clear, so no host is waiting to run it",
                ));
            };
            let (result, answer) = oneshot::channel();
            if host.send(Arrival { call, result }).is_err() {
                return Ok(not_run(
                    "the host stopped waiting before the call was passed",
                ));
            }
            Ok(answer.await.unwrap_or_else(|_| not_run(NOT_RUN)))
        })
    }
}

fn not_run(why: &str) -> ToolResponse {
    ToolResponse::Failed(ToolOutput::new(json!(why)))
}

fn failed(e: &BoxError) -> ToolResponse {
    ToolResponse::Failed(ToolOutput::new(json!(format!(
        "the governed stack failed: {e}"
    ))))
}

fn settled(r: Result<ToolResponse, oneshot::error::RecvError>) -> ToolResponse {
    r.unwrap_or_else(|_| not_run("the governed stack stopped before the call ended"))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;
    use toolgate_core::{AgentRef, RefusalCode, ToolCall, ToolOutput, ToolResponse};
    use toolgate_engine::config::{Format, load_str};

    use super::{Cleared, HostedStack};
    use crate::audit::MemorySink;
    use crate::{GovernanceHandle, ToolgateLayer};

    fn hosted(config: &str) -> (HostedStack, Arc<MemorySink>) {
        let handle = GovernanceHandle::new(load_str(config, Format::Json).unwrap());
        let audit = Arc::new(MemorySink::new());
        let layer = ToolgateLayer::builder(handle)
            .shared_audit_sink(audit.clone())
            .build()
            .unwrap();
        (HostedStack::new(layer), audit)
    }

    const CONFIG: &str = r#"{"tools": [{"kind": "http", "name": "lookup"}],
        "agents": [{"name": "dev", "allowed_tools": ["lookup"]}],
        "policy": {"rules": [], "quotas": [{"max": 1, "window_secs": 3600, "tool": "lookup"}]}}"#;

    fn lookup(id: u64) -> ToolCall {
        ToolCall::new(AgentRef::profile("dev"), "lookup", json!({"id": id}))
    }

    #[tokio::test]
    async fn issue36_a_cleared_call_is_a_send_its_quota_counts() {
        let (hosted, audit) = hosted(CONFIG);
        let Cleared::Sent(first) = hosted.clear(lookup(1)).await else {
            panic!("the first lookup is within the quota")
        };
        let Cleared::Answered(second) = hosted.clear(lookup(2)).await else {
            panic!("the second lookup is past the quota")
        };
        assert_eq!(second.refusal().unwrap().code, RefusalCode::RateLimited);
        let done = first
            .finish(ToolResponse::Completed(ToolOutput::new(json!("ok"))))
            .await;
        assert_eq!(done, ToolResponse::Completed(ToolOutput::new(json!("ok"))));
        let lines = audit.lines();
        assert_eq!(lines.len(), 2);
        assert!(lines.iter().any(|l| l.contains(r#""outcome":"completed""#)));
    }

    #[tokio::test]
    async fn issue36_a_clearance_admits_only_the_passed_tool_and_input() {
        let (hosted, _) = hosted(CONFIG);
        let Cleared::Sent(mut clearance) = hosted.clear(lookup(1)).await else {
            panic!("passed")
        };
        assert!(clearance.verify("lookup", &json!({"id": 1})).is_ok());
        let other = clearance.verify("lookup", &json!({"id": 1.0})).unwrap_err();
        assert_eq!(other.code, RefusalCode::Rejected);
        assert!(clearance.verify("wipe", &json!({"id": 1})).is_err());
        // The passed input is put back after a probe.
        assert_eq!(clearance.call().input, json!({"id": 1}));
    }

    #[tokio::test]
    async fn issue36_a_clearance_dropped_unfinished_is_recorded_as_not_run() {
        let (hosted, audit) = hosted(CONFIG);
        let Cleared::Sent(clearance) = hosted.clear(lookup(1)).await else {
            panic!("passed")
        };
        drop(clearance);
        for _ in 0..2000 {
            if !audit.lines().is_empty() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        let lines = audit.lines();
        assert_eq!(lines.len(), 1);
        assert!(lines[0].contains(r#""outcome":"failed""#), "{}", lines[0]);
    }
}
