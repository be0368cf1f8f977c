//! The approval gate layer (R14 steps 5–7, R15–R17, R25–R26, R32, R35).
//!
//! One thing because it is one future's path: deciding (or reading the pin), asking,
//! waiting, deciding again after the wait and minting the permit are the steps of one call,
//! and splitting them would spread the fail-closed ordering across files.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use serde_json::Value;
use toolgate_core::{
    AgentRef, Ask, AskSource, CallId, ChannelKind, Check, Decision, DecisionNote, DecisionSink,
    Refusal, RefusalCode, ToolCall, ToolOutput, ToolResponse, Verdict, WaitEnd,
};
use toolgate_engine::ask::{self, WaitRefused};
use toolgate_engine::catalog::Entry;
use toolgate_engine::{CallView, Governance, canon};
use tower_layer::Layer;
use tower_service::Service;

use super::channel::new_question;
use super::channel::{
    ApprovalChannel, ApprovalOutcome, ApprovalRequest, BoxFuture, ResumeTicket, interaction_id,
};
use super::hooks::{HookCall, ToolHooks};
use super::observe::{WaitObserver, WaitOutcome, WaitWatch};
use crate::future::OnceResponse;
use crate::handle::{GovernanceHandle, PinnedDecision};
use crate::permit::Permit;

/// Layer of the [`ApprovalGate`].
#[derive(Clone)]
#[must_use]
pub struct ApprovalGateLayer {
    handle: GovernanceHandle,
    /// At most one per kind: an agent's asks go to the channel of its kind (R26).
    channels: Vec<Arc<dyn ApprovalChannel>>,
    hooks: Option<Arc<dyn ToolHooks>>,
    observer: Option<Arc<dyn WaitObserver>>,
    /// The composite stack's seal when this is its gate (0 otherwise).
    seal: u64,
}

impl fmt::Debug for ApprovalGateLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApprovalGateLayer")
            .field("handle", &self.handle)
            .field("channels", &self.channels)
            .field("hooks", &self.hooks.is_some())
            .finish()
    }
}

impl ApprovalGateLayer {
    /// A gate deciding by the snapshots in `handle`, with no approval channel: every call
    /// that would ask is refused `no_approval_channel` until one is set.
    pub fn new(handle: GovernanceHandle) -> Self {
        Self {
            handle,
            channels: Vec::new(),
            hooks: None,
            observer: None,
            seal: 0,
        }
    }

    /// The composite stack's gate: it reads a decision its exposure filter sealed with
    /// `seal` without comparing input hashes ([`GovernanceHandle::decide_to_send`]).
    pub(crate) fn with_seal(mut self, seal: u64) -> Self {
        self.seal = seal;
        self
    }

    /// Routes asks of `channel`'s kind to it (replacing a channel of the same kind). An
    /// ask goes to the channel whose kind is the agent's (`agents[i].approval.channel`) or
    /// else the configuration's `approval.channel`; with no channel of that kind it is
    /// refused as unroutable. Give one channel per kind the configuration names.
    pub fn channel(self, channel: impl ApprovalChannel) -> Self {
        self.shared_channel(Arc::new(channel))
    }

    /// As [`ApprovalGateLayer::channel`], for a channel already shared.
    pub fn shared_channel(mut self, channel: Arc<dyn ApprovalChannel>) -> Self {
        self.channels.retain(|c| c.kind() != channel.kind());
        self.channels.push(channel);
        self
    }

    /// Hooks every call (R32).
    pub fn hooks(mut self, hooks: impl ToolHooks) -> Self {
        self.hooks = Some(Arc::new(hooks));
        self
    }

    /// As [`ApprovalGateLayer::hooks`], for hooks already shared.
    pub fn shared_hooks(mut self, hooks: Arc<dyn ToolHooks>) -> Self {
        self.hooks = Some(hooks);
        self
    }

    /// Tells `observer` when a call starts and stops waiting for a person, and how the wait
    /// ended (for metrics: `toolgate_otel::ApprovalMetrics`).
    pub fn wait_observer(self, observer: impl WaitObserver) -> Self {
        self.shared_wait_observer(Arc::new(observer))
    }

    /// As [`ApprovalGateLayer::wait_observer`], for an observer already shared.
    pub fn shared_wait_observer(mut self, observer: Arc<dyn WaitObserver>) -> Self {
        self.observer = Some(observer);
        self
    }
}

impl<S> Layer<S> for ApprovalGateLayer {
    type Service = ApprovalGate<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ApprovalGate {
            inner,
            handle: self.handle.clone(),
            channels: self.channels.clone(),
            hooks: self.hooks.clone(),
            observer: self.observer.clone(),
            seal: self.seal,
        }
    }
}

/// The approval gate: decides every call with the engine (every check of R14, then the
/// approval decision), asks one question through the channel when something asks, and
/// sends the call only when it runs.
#[derive(Clone)]
pub struct ApprovalGate<S> {
    inner: S,
    handle: GovernanceHandle,
    channels: Vec<Arc<dyn ApprovalChannel>>,
    hooks: Option<Arc<dyn ToolHooks>>,
    observer: Option<Arc<dyn WaitObserver>>,
    seal: u64,
}

impl<S: fmt::Debug> fmt::Debug for ApprovalGate<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApprovalGate")
            .field("inner", &self.inner)
            .field("channels", &self.channels)
            .field("hooks", &self.hooks.is_some())
            .finish()
    }
}

impl<S> ApprovalGate<S> {
    crate::inner_service_accessors!(inner: S);
}

/// What `after_call` needs once the call itself has been handed to the tool.
struct After {
    hooks: Arc<dyn ToolHooks>,
    call_id: CallId,
    tool: String,
    agent: AgentRef,
    input: Value,
}

impl After {
    fn of(hooks: &Arc<dyn ToolHooks>, call: &ToolCall, tool: &str) -> Self {
        Self {
            hooks: Arc::clone(hooks),
            call_id: call.id.clone(),
            tool: tool.to_owned(),
            agent: call.agent.clone(),
            input: call.input.clone(),
        }
    }

    fn apply(&self, response: ToolResponse) -> ToolResponse {
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
    fn refused(refusal: Refusal) -> Self {
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

/// A refusal after an ask (the engine's one spelling).
fn rejected(why: impl Into<String>, asks: &[Ask]) -> Refusal {
    ask::rejected_after_ask(why, asks)
}

fn hook_view<'a>(call: &'a ToolCall, tool: &'a str) -> HookCall<'a> {
    HookCall {
        call_id: &call.id,
        tool,
        agent: &call.agent,
        input: &call.input,
    }
}

fn hook_refusal(text: String) -> Refusal {
    Refusal::new(RefusalCode::Rejected, Check::Hook, text)
}

impl<S> Service<ToolCall> for ApprovalGate<S>
where
    S: Service<ToolCall, Response = ToolResponse> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = ToolResponse;
    type Error = S::Error;
    type Future = GateFuture<S::Future, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut call: ToolCall) -> Self::Future {
        // Decide once: the decision an earlier layer of this handle pinned — only if it is
        // about this very call, input included (R14, R38) — or made now.
        let (pinned, input_binding) = self.handle.decide_to_send(&mut call, self.seal);
        let governance = pinned.governance();
        let Some(entry) = pinned.entry() else {
            return GateFuture::refused(
                pinned
                    .decision()
                    .refusal()
                    .unwrap_or_else(|| rejected("the decision was inconsistent", &[])),
            );
        };
        let tool: &str = &entry.name;
        // Where an ask goes is the engine's (R26, R39): the kind in the verdict, the
        // agent's timeout here.
        let timeout = pinned.agent().and_then(|a| governance.ask_route(a).timeout);
        let mut decision = std::borrow::Cow::Borrowed(pinned.decision());
        // A hook is consulted only about a call that passed every check (R14 steps 1–6, R36
        // and the tenant policy): its ask joins the others before they are routed; it never
        // sees a call those checks refused.
        let passed = !matches!(decision.verdict, Verdict::Refused(_))
            || decision.decided_by == Check::Routing;
        // R42: the host's own ungoverned tools see no hook at all (no ask, no before_call,
        // no after_call).
        let hooks = self.hooks.as_ref().filter(|_| !entry.ungoverned);
        let mut hook_ask = None;
        if let Some(hooks) = hooks
            && passed
            && let Some(message) = hooks.evaluate_approval(&hook_view(&call, tool))
        {
            let ask = Ask {
                source: AskSource::Hook,
                reason: message,
            };
            // Joined into the pinned decision and routed again: no second decision.
            decision = std::borrow::Cow::Owned(governance.with_extra_asks(
                pinned.decided(),
                call.run,
                vec![ask.clone()],
            ));
            hook_ask = Some(ask);
        }
        let sink = call.extensions.get::<DecisionSink>().cloned();
        // R46: the shadow's decision is recorded beside the enforced one (with the same
        // hook's ask) and read by nothing that decides.
        if let (Some(sink), Some(shadow)) = (&sink, pinned.shadow()) {
            let decision = match &hook_ask {
                Some(ask) => governance.with_extra_asks(shadow, call.run, vec![ask.clone()]),
                None => shadow.decision.clone(),
            };
            sink.record_shadow(toolgate_core::ShadowNote { decision });
        }
        if let Some(sink) = &sink {
            let wait = match decision.verdict {
                Verdict::Refused(_) => WaitEnd::Refused,
                Verdict::Run {
                    auto_approved: true,
                } => WaitEnd::AutoApproved,
                // R45: a call a grant answered is recorded as approved by whoever gave it
                // (the grant itself is in the decision, `granted`).
                Verdict::Run { .. } => match &decision.granted {
                    Some(g) => WaitEnd::Approved {
                        approver: g.granted_by.clone(),
                    },
                    None => WaitEnd::NotAsked,
                },
                Verdict::Ask { .. } => WaitEnd::Unroutable,
            };
            sink.record(DecisionNote {
                decision: decision.clone().into_owned(),
                wait,
                interaction_id: None,
                input_hash: pinned.canonical_input_hash(&call.input),
            });
        }
        let ticket = call.extensions.get::<ResumeTicket>().cloned();
        match decision.verdict {
            Verdict::Refused(_) => match decision.refusal() {
                Some(r) => GateFuture::refused(r),
                None => GateFuture::refused(rejected("the decision was inconsistent", &[])),
            },
            // R26, R38: a resumed held call is claimed before it is sent, whatever the fresh
            // decision is. When nothing asks any more (the policy or posture was relaxed, an
            // exemption or override was added, or only an agent-level ask is left under
            // `auto_approve_required`), the ticket is still redeemed through the durable
            // channel — its conditional claim — so the call is sent at most once.
            Verdict::Run { .. } if ticket.is_some() => match self.ticket_channel() {
                Ok(channel) => self.through_channel(
                    channel,
                    call,
                    entry,
                    (decision.asks.clone(), ticket),
                    sink,
                    timeout,
                ),
                Err(refusal) => GateFuture::refused(refusal),
            },
            // R44: with an asynchronous counter (a shared database) the reservation is
            // awaited, never blocked on, before the call is sent.
            Verdict::Run { .. } if self.handle.reserves_asynchronously(pinned.decided()) => {
                let hooks = hooks.cloned();
                self.send_reserving(call, pinned.clone(), input_binding, sink, hooks)
            }
            Verdict::Run { .. } => {
                // R44, R45: the send is counted against its quotas (and its grant) right
                // before it is sent, atomically with the check; a full quota refuses it.
                if let Err(r) = self.handle.record_send(governance, pinned.decided(), &call) {
                    if let Some(sink) = &sink {
                        let refused = Decision::refused(r.clone());
                        sink.update(|note| {
                            note.decision = refused;
                            note.wait = WaitEnd::Refused;
                        });
                    }
                    return GateFuture::refused(r);
                }
                // R38: the permit the tool side checks, minted only here and on the ask path.
                // `call.input` is the input just hashed: the gate holds the call.
                if let Err(r) =
                    Permit::attach_bound(&mut call, &self.handle, &pinned, entry, input_binding)
                {
                    return GateFuture::refused(r);
                }
                if let Some(hooks) = hooks {
                    if let Err(text) = hooks.before_call(&hook_view(&call, tool)) {
                        return GateFuture::refused(hook_refusal(text));
                    }
                    let after = After::of(hooks, &call, tool);
                    return GateFuture {
                        kind: GateKind::Inner {
                            future: self.inner.call(call),
                            after: Some(after),
                        },
                    };
                }
                GateFuture {
                    kind: GateKind::Inner {
                        future: self.inner.call(call),
                        after: None,
                    },
                }
            }
            Verdict::Ask { channel: kind } => {
                // Until a question is actually asked, a refusal here is `unroutable`.
                if let Some(sink) = &sink {
                    sink.update(|note| note.wait = WaitEnd::Unroutable);
                }
                let Some(channel) = self
                    .channels
                    .iter()
                    .find(|c| c.kind() == kind)
                    .or(self.channels.first())
                    .cloned()
                else {
                    return GateFuture::refused(Refusal::with_reasons(
                        RefusalCode::NoApprovalChannel,
                        Check::Routing,
                        std::iter::once(format!(
                            "the configuration routes asks to the `{}` channel but the gate was given no channel",
                            kind.as_str()
                        ))
                        .chain(decision.reasons.iter().cloned())
                        .collect(),
                    ));
                };
                if channel.kind() != kind {
                    return GateFuture::refused(Refusal::with_reasons(
                        RefusalCode::NoApprovalChannel,
                        Check::Routing,
                        std::iter::once(format!(
                            "the request cannot be routed: the configuration names the `{}` channel but the gate's channel is `{}`",
                            kind.as_str(),
                            channel.kind().as_str()
                        ))
                        .chain(decision.reasons.iter().cloned())
                        .collect(),
                    ));
                }
                if ticket.is_some()
                    && let Err(refusal) = self.ticket_channel()
                {
                    return GateFuture::refused(refusal);
                }
                self.through_channel(
                    channel,
                    call,
                    entry,
                    (decision.asks.clone(), ticket),
                    sink,
                    timeout,
                )
            }
        }
    }
}

impl<S> ApprovalGate<S>
where
    S: Service<ToolCall, Response = ToolResponse> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    /// The channel that can redeem a resume ticket: only a durable inbox claims a held
    /// call (R26). Any other channel would ask again, or approve without a claim, so a
    /// ticket routed to it could be sent twice: refused, never sent.
    fn ticket_channel(&self) -> Result<Arc<dyn ApprovalChannel>, Refusal> {
        let inbox = self
            .channels
            .iter()
            .find(|c| c.kind() == ChannelKind::Inbox);
        match inbox.or(self.channels.first()) {
            Some(c) if c.kind() == ChannelKind::Inbox => Ok(Arc::clone(c)),
            Some(c) => Err(Refusal::new(
                RefusalCode::NoApprovalChannel,
                Check::Routing,
                format!(
                    "a resumed held call must be claimed by a durable `inbox` channel before it is sent, and the gate's channel is `{}`",
                    c.kind().as_str()
                ),
            )),
            None => Err(Refusal::new(
                RefusalCode::NoApprovalChannel,
                Check::Routing,
                "a resumed held call must be claimed by a durable `inbox` channel before it is sent, and the gate was given no channel",
            )),
        }
    }

    /// Sends `call`, which runs without asking, once an asynchronous quota counter has
    /// reserved its send (R44; [`GovernanceHandle::set_async_quota_counter`]): a full quota
    /// or an unreachable counter refuses it; then the permit, the hooks and the tool, as on
    /// the synchronous path. The service polled ready for this call is the one that sends it.
    fn send_reserving(
        &mut self,
        mut call: ToolCall,
        pinned: PinnedDecision,
        input_binding: Option<[u8; 32]>,
        sink: Option<DecisionSink>,
        hooks: Option<Arc<dyn ToolHooks>>,
    ) -> GateFuture<S::Future, S::Error> {
        let fresh = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, fresh);
        let handle = self.handle.clone();
        let future = async move {
            let reserved = handle
                .record_send_async(pinned.governance(), pinned.decided(), &call)
                .await;
            if let Err(r) = reserved {
                if let Some(sink) = &sink {
                    let refused = Decision::refused(r.clone());
                    sink.update(|note| {
                        note.decision = refused;
                        note.wait = WaitEnd::Refused;
                    });
                }
                return Ok(ToolResponse::Refused(r));
            }
            let Some(entry) = pinned.entry() else {
                return Ok(ToolResponse::Refused(rejected(
                    "the decision was inconsistent",
                    &[],
                )));
            };
            if let Err(r) = Permit::attach_bound(&mut call, &handle, &pinned, entry, input_binding)
            {
                return Ok(ToolResponse::Refused(r));
            }
            let tool = entry.name.to_string();
            let after = match &hooks {
                Some(h) => {
                    if let Err(text) = h.before_call(&hook_view(&call, &tool)) {
                        return Ok(ToolResponse::Refused(hook_refusal(text)));
                    }
                    Some(After::of(h, &call, &tool))
                }
                None => None,
            };
            let response = inner.call(call).await?;
            Ok(match after {
                Some(a) => a.apply(response),
                None => response,
            })
        };
        GateFuture {
            kind: GateKind::Waiting {
                future: Box::pin(future),
            },
        }
    }

    /// Puts the one question about `call` (or, with a ticket, the redemption of a held
    /// call's answer) to `channel`; the call is sent only on an approval, after every check
    /// passes again (R35, R38).
    fn through_channel(
        &mut self,
        channel: Arc<dyn ApprovalChannel>,
        call: ToolCall,
        entry: &Entry,
        (asks, ticket): (Vec<Ask>, Option<ResumeTicket>),
        sink: Option<DecisionSink>,
        timeout: Option<std::time::Duration>,
    ) -> GateFuture<S::Future, S::Error> {
        let tool: &str = &entry.name;
        let Some(input_hash) = canon::input_hash(&call.input) else {
            return GateFuture::refused(rejected(
                "the input cannot be canonicalised, so no approval can be bound to it",
                &asks,
            ));
        };
        let issued = match &ticket {
            Some(t) => Some(t.interaction_id.clone()),
            None => interaction_id(),
        };
        let Some(interaction_id) = issued else {
            return GateFuture::refused(rejected(
                "no unguessable interaction id could be made",
                &asks,
            ));
        };
        let request = ApprovalRequest {
            interaction_id,
            call_id: call.id.clone(),
            tool: tool.to_owned(),
            identities: entry.records.iter().map(|r| r.identity().clone()).collect(),
            agent: call.agent.clone(),
            input: Arc::new(call.input.clone()),
            literals: toolgate_engine::number::NumberLiterals::of(&call).clone(),
            input_hash,
            definition_hash: canon::entry_definition_hash(entry),
            asks,
            run: call.run,
            turn: call.turn.clone(),
            ticket,
            // Issue 24: the first record's declaration names the fields (R24: as the rule
            // matched it); the host's values come from the call's extensions.
            target: entry
                .records
                .first()
                .and_then(|r| r.decl.target.as_ref())
                .and_then(|spec| {
                    spec.resolve(
                        &call.input,
                        call.extensions.get::<toolgate_core::ExecutionTarget>(),
                    )
                }),
        };
        // Release the capacity our `poll_ready` reserved: a person may take minutes.
        // The future gets a fresh handle and polls it ready only once approved; the
        // caller polls `self` ready again before its next call, as tower requires.
        let fresh = self.inner.clone();
        let reserved = std::mem::replace(&mut self.inner, fresh);
        let inner = reserved.clone();
        drop(reserved);
        if let Some(sink) = &sink {
            let id = request.interaction_id.clone();
            sink.update(|note| {
                note.interaction_id = Some(id);
                // A future dropped mid-wait leaves `cancelled` (R26).
                note.wait = WaitEnd::Cancelled;
            });
        }
        // `timeout`: the agent's own approval timeout (`agents[i].approval.timeout_secs`).
        let path = AskPath {
            inner,
            handle: self.handle.clone(),
            hooks: self.hooks.clone(),
            observer: self.observer.clone(),
            channel,
            sink,
            timeout,
        };
        GateFuture {
            kind: GateKind::Waiting {
                future: Box::pin(wait_and_send(path, request, call, tool.to_owned())),
            },
        }
    }
}

/// What the ask path carries into its future.
struct AskPath<S> {
    inner: S,
    handle: GovernanceHandle,
    hooks: Option<Arc<dyn ToolHooks>>,
    observer: Option<Arc<dyn WaitObserver>>,
    channel: Arc<dyn ApprovalChannel>,
    sink: Option<DecisionSink>,
    timeout: Option<std::time::Duration>,
}

/// The ask path: one question, then — only on a person's approval, with the definition and
/// input unchanged (R35) — the call.
async fn wait_and_send<S>(
    path: AskPath<S>,
    request: ApprovalRequest,
    call: ToolCall,
    tool: String,
) -> Result<ToolResponse, S::Error>
where
    S: Service<ToolCall, Response = ToolResponse>,
{
    let AskPath {
        mut inner,
        handle,
        hooks,
        observer,
        channel,
        sink,
        timeout,
    } = path;
    let asks = request.asks.clone();
    let input_hash = request.input_hash.clone();
    let definition_hash = request.definition_hash.clone();
    // Reports the wait's end once; `cancelled` if this future is dropped mid-wait.
    let watch = WaitWatch::start(observer, channel.kind());
    let outcome = match timeout {
        // Nobody answered within the agent's timeout: expired, never approved.
        Some(t) => tokio::time::timeout(t, channel.request(request))
            .await
            .unwrap_or(ApprovalOutcome::Expired),
        None => channel.request(request).await,
    };
    watch.end(WaitOutcome::of(&outcome));
    if let Some(sink) = &sink {
        let wait = match &outcome {
            ApprovalOutcome::Approved { approver } => WaitEnd::Approved {
                approver: approver.clone(),
            },
            ApprovalOutcome::Denied { approver, .. } => WaitEnd::Denied {
                approver: approver.clone(),
            },
            ApprovalOutcome::Expired => WaitEnd::Expired,
            ApprovalOutcome::Cancelled => WaitEnd::Cancelled,
            ApprovalOutcome::Held { .. } => WaitEnd::Held,
            ApprovalOutcome::Unroutable(_) => WaitEnd::Unroutable,
            ApprovalOutcome::Refused { .. } => WaitEnd::Refused,
        };
        let held_id = match &outcome {
            ApprovalOutcome::Held { interaction_id } => Some(interaction_id.clone()),
            _ => None,
        };
        sink.update(|note| {
            note.wait = wait;
            if held_id.is_some() {
                note.interaction_id = held_id;
            }
        });
    }
    let refusal = match outcome {
        ApprovalOutcome::Approved { approver } => {
            // Wait for capacity first: every check is made when the call is about to be sent.
            std::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
            // R35: the tool's definition now, by the newest snapshot.
            let (generation, now) = handle.load_counted();
            let current = now.catalog().get(&tool).map(canon::entry_definition_hash);
            if current.as_deref() != Some(definition_hash.as_str()) {
                let mut refusal = rejected(
                    format!(
                        "approved by {approver}, but the definition of `{tool}` changed while the call waited; it will be asked about again"
                    ),
                    &asks,
                );
                // `decided_by` tells the truth: a rug pull, not routing (R35).
                refusal.decided_by = Check::DefinitionChanged;
                return Ok(ToolResponse::Refused(refusal));
            }
            if canon::input_hash(&call.input).as_deref() != Some(input_hash.as_str()) {
                return Ok(ToolResponse::Refused(rejected(
                    format!("approved by {approver}, but the input differs from what was approved"),
                    &asks,
                )));
            }
            // R38: the approved call passes every check again against the configuration in
            // force now (the newest snapshot, not the one pinned when it was asked about).
            let ledger = handle.ledger();
            let history = ledger.history(&call);
            let mut decided = match recheck(&now, &call, &history, &approver, &asks) {
                Ok(decided) => decided,
                Err(refusal) => return Ok(ToolResponse::Refused(refusal)),
            };
            // R44: the approved send is counted right before it is sent, atomically with
            // the check (a quota that filled during the wait refuses it). A person answered
            // this call: no grant's use is spent on it (R45).
            decided.decision.granted = None;
            if let Err(mut refusal) = handle.record_send_async(&now, &decided, &call).await {
                refusal.reasons.push(format!(
                    "approved by {approver}, but the call's quota filled while it waited; it was not sent"
                ));
                return Ok(ToolResponse::Refused(refusal));
            }
            // Layers inside the gate decide by the snapshot the call was last checked by.
            let mut call = call;
            // R38: the permit the tool side checks, for the input and definition approved.
            let attached = match now.catalog().get(&tool) {
                Some(entry) => Permit::attach(&mut call, &handle, &now, entry),
                None => Err(rejected(
                    format!("approved by {approver}, but `{tool}` is no longer registered"),
                    &asks,
                )),
            };
            if let Err(refusal) = attached {
                return Ok(ToolResponse::Refused(refusal));
            }
            handle.repin(&mut call, generation, now);
            let after = match &hooks {
                Some(h) => {
                    if let Err(text) = h.before_call(&hook_view(&call, &tool)) {
                        return Ok(ToolResponse::Refused(hook_refusal(text)));
                    }
                    Some(After::of(h, &call, &tool))
                }
                None => None,
            };
            let response = inner.call(call).await?;
            return Ok(match after {
                Some(a) => a.apply(response),
                None => response,
            });
        }
        ApprovalOutcome::Held { interaction_id } => {
            return Ok(ToolResponse::Held(toolgate_core::HeldCall {
                interaction_id,
                reasons: asks.iter().map(|a| a.reason.clone()).collect(),
            }));
        }
        // How a wait's end becomes a refusal is the engine's (R26).
        ApprovalOutcome::Denied { approver, reason } => ask::wait_refusal(
            WaitRefused::Denied {
                approver: &approver,
                reason: reason.as_deref(),
            },
            &asks,
        ),
        ApprovalOutcome::Expired => ask::wait_refusal(WaitRefused::Expired, &asks),
        ApprovalOutcome::Cancelled => ask::wait_refusal(WaitRefused::Cancelled, &asks),
        ApprovalOutcome::Refused { reason } => {
            ask::wait_refusal(WaitRefused::ChannelRefused { reason: &reason }, &asks)
        }
        ApprovalOutcome::Unroutable(why) => {
            ask::wait_refusal(WaitRefused::Unroutable { why: &why }, &asks)
        }
    };
    Ok(ToolResponse::Refused(refusal))
}

/// R38: an approved call decided again, right before it is sent, by `now` — the
/// configuration in force. A refusal that arrived during the wait wins (a `deny`, an
/// unreadable policy, a tool taken from the agent, the air gap switched on, …), keeping its
/// own code. A fresh decision that no longer asks, or asks for no reason beyond those the
/// person answered, lets the call go. One that asks for a reason the person was never
/// asked about is refused `rejected` (fail closed): the approval answered only the question
/// it was asked, and the new one is asked on the next call.
fn recheck(
    now: &Governance,
    call: &ToolCall,
    history: &toolgate_engine::History<'_>,
    approver: &str,
    asked: &[Ask],
) -> Result<toolgate_engine::Decided, Refusal> {
    // The hook's own ask (R32) is not asked again: it was part of the answered question.
    let decided = now.decide_call_at(CallView::of(call), Vec::new(), history);
    let decision = &decided.decision;
    match decision.verdict {
        Verdict::Refused(_) => {
            let mut refusal = decision
                .refusal()
                .unwrap_or_else(|| rejected("the decision was inconsistent", &[]));
            refusal.reasons.push(format!(
                "approved by {approver}, but the configuration in force refused the call before it was sent; a refusal that arrives during the wait wins"
            ));
            Err(refusal)
        }
        Verdict::Run { .. } | Verdict::Ask { .. } => match new_question(asked, &decision.asks) {
            None => Ok(decided),
            Some(new) => {
                let mut refusal = rejected(
                    format!(
                        "approved by {approver}, but the decision changed during the wait: it now also asks \"{}\", which the approval did not answer; the call will be asked about again",
                        new.reason
                    ),
                    &[],
                );
                refusal.reasons.extend(decision.reasons.iter().cloned());
                Err(refusal)
            }
        },
    }
}
