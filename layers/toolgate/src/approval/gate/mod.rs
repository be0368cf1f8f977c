//! The approval gate layer (R14 steps 5–7, R15–R17, R25–R26, R32, R35).
//!
//! The steps of one call, in order: here the layer and the service's `call` (deciding or
//! reading the pin, the run path with its permit, a refusal); `ask` the ask path (routing to
//! a channel, the resume ticket, the asynchronous quota reservation, waiting, deciding again
//! after the wait, R38); `future` the response future and the `after_call` hook. Every
//! refusal is made before the inner service is called, on every path.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use serde_json::Value;
use toolgate_core::{
    Ask, AskSource, ChannelKind, Check, Decision, DecisionNote, DecisionSink, Refusal, RefusalCode,
    ToolCall, ToolOutput, ToolResponse, Verdict, WaitEnd,
};
use toolgate_engine::ask::{self, WaitRefused};
use toolgate_engine::catalog::Entry;
use toolgate_engine::{CallView, Governance, canon};
use tower_layer::Layer;
use tower_service::Service;

mod future;
mod wait;

pub use future::GateFuture;

use future::After;

use super::hooks::{HookCall, ToolHooks};
use super::observe::{WaitObserver, WaitOutcome, WaitWatch};
use crate::future::OnceResponse;
use crate::handle::{GovernanceHandle, PinnedDecision};
use crate::permit::Permit;
use toolgate_core::approval::new_question;
use toolgate_core::approval::{
    ApprovalChannel, ApprovalOutcome, ApprovalRequest, BoxFuture, ResumeTicket, VerifiedOutcome,
    interaction_id,
};

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
/// A refusal after an ask (the engine's one spelling).
fn rejected(why: impl Into<String>, asks: &[Ask]) -> Refusal {
    ask::rejected_after_ask(why, asks)
}

fn hook_view<'a>(call: &'a ToolCall, tool: &'a str) -> HookCall<'a> {
    HookCall::of(call, tool)
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
        let Some(entry) = pinned.entry() else {
            return GateFuture::refused(
                pinned
                    .decision()
                    .refusal()
                    .unwrap_or_else(|| rejected("the decision was inconsistent", &[])),
            );
        };
        // A hook is consulted only about a call that passed every check (R14 steps 1–6, R36
        // and the tenant policy): its ask joins the others before they are routed; it never
        // sees a call those checks refused. R42: the host's own ungoverned tools see no hook
        // at all (no ask, no before_call, no after_call).
        let decision = pinned.decision();
        let passed = !matches!(decision.verdict, Verdict::Refused(_))
            || decision.decided_by == Check::Routing;
        match self.hooks.as_ref().filter(|_| !entry.ungoverned) {
            // R32: `evaluate_approval` may await (a remote decision service): the call is
            // routed once it has answered, by a gate holding the service polled ready for it.
            Some(hooks) if passed => {
                let hooks = Arc::clone(hooks);
                let fresh = self.inner.clone();
                let mut gate = self.clone();
                gate.inner = std::mem::replace(&mut self.inner, fresh);
                let tool = entry.name.to_string();
                GateFuture::waiting(Box::pin(async move {
                    let message = hooks.evaluate_approval(&hook_view(&call, &tool)).await;
                    gate.dispatch(call, pinned, input_binding, message).await
                }))
            }
            _ => self.dispatch(call, pinned, input_binding, None),
        }
    }
}

impl<S> ApprovalGate<S>
where
    S: Service<ToolCall, Response = ToolResponse> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    /// Routes `call`, decided as `pinned`, with the ask of `evaluate_approval` when a hook
    /// gave one: refused, sent, or asked about through the channel.
    fn dispatch(
        &mut self,
        call: ToolCall,
        pinned: PinnedDecision,
        input_binding: Option<crate::binding::Binding>,
        hook_message: Option<String>,
    ) -> GateFuture<S::Future, S::Error> {
        let governance = pinned.governance();
        let Some(entry) = pinned.entry() else {
            return GateFuture::refused(
                pinned
                    .decision()
                    .refusal()
                    .unwrap_or_else(|| rejected("the decision was inconsistent", &[])),
            );
        };
        // Where an ask goes is the engine's (R26, R39): the kind in the verdict, the
        // agent's timeout here.
        let timeout = pinned.agent().and_then(|a| governance.ask_route(a).timeout);
        let mut decision = std::borrow::Cow::Borrowed(pinned.decision());
        let hooks = self.hooks.as_ref().filter(|_| !entry.ungoverned);
        let mut hook_ask = None;
        if let Some(message) = hook_message {
            let ask = Ask::new(AskSource::Hook, message);
            // Joined into the pinned decision and routed again: no second decision.
            decision = std::borrow::Cow::Owned(governance.with_extra_asks(
                pinned.decided(),
                call.run,
                vec![ask.clone()],
            ));
            hook_ask = Some(ask);
        }
        let sink = call.extensions.get::<DecisionSink>().cloned();
        if let Some(sink) = &sink {
            note_decision(sink, &pinned, &decision, hook_ask.as_ref(), &call);
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
                    (
                        decision.asks.clone(),
                        ticket,
                        decision.approvals,
                        decision.labels.clone(),
                    ),
                    sink,
                    timeout,
                ),
                Err(refusal) => GateFuture::refused(refusal),
            },
            // R44: with an asynchronous counter (a shared database) the reservation is
            // awaited, never blocked on, before the call is sent; R32: so are the hooks
            // (`before_call` before the send is counted, `after_call` on the result).
            Verdict::Run { .. }
                if hooks.is_some()
                    || self
                        .handle
                        .reserves_asynchronously(governance, pinned.decided()) =>
            {
                let hooks = hooks.cloned();
                self.send_reserving(call, pinned.clone(), input_binding, sink, hooks)
            }
            Verdict::Run { .. } => {
                self.send_now(call, &pinned, entry, input_binding, sink.as_ref())
            }
            Verdict::Ask { channel: kind } => {
                // Until a question is actually asked, a refusal here is `unroutable`.
                if let Some(sink) = &sink {
                    sink.update(|note| note.wait = WaitEnd::Unroutable);
                }
                let channel = match self.channel_for(kind, &decision) {
                    Ok(c) => c,
                    Err(refusal) => return GateFuture::refused(refusal),
                };
                if ticket.is_some()
                    && let Err(refusal) = self.ticket_channel()
                {
                    return GateFuture::refused(refusal);
                }
                self.through_channel(
                    channel,
                    call,
                    entry,
                    (
                        decision.asks.clone(),
                        ticket,
                        decision.approvals,
                        decision.labels.clone(),
                    ),
                    sink,
                    timeout,
                )
            }
        }
    }

    /// Sends a call nothing asks about: its quotas (and grant) counted right before the
    /// send, atomically with the check (R44, R45), and the permit the tool side checks
    /// attached (R38).
    fn send_now(
        &mut self,
        mut call: ToolCall,
        pinned: &PinnedDecision,
        entry: &Entry,
        input_binding: Option<crate::binding::Binding>,
        sink: Option<&DecisionSink>,
    ) -> GateFuture<S::Future, S::Error> {
        // R44, R45: the send is counted against its quotas (and its grant) right
        // before it is sent, atomically with the check; a full quota refuses it.
        if let Err(r) = self
            .handle
            .record_send(pinned.governance(), pinned.decided(), &call)
        {
            if let Some(sink) = sink {
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
        if let Err(r) = Permit::attach_bound(&mut call, &self.handle, pinned, entry, input_binding)
        {
            return GateFuture::refused(r);
        }
        GateFuture::inner(self.inner.call(call))
    }

    /// The channel asks of `kind` go to, checked (R26, R47, R51): one of that kind the gate
    /// was given, which gathers as many approvals as `decision` needs.
    fn channel_for(
        &self,
        kind: ChannelKind,
        decision: &Decision,
    ) -> Result<Arc<dyn ApprovalChannel>, Refusal> {
        let Some(channel) = self
            .channels
            .iter()
            .find(|c| c.kind() == kind)
            .or(self.channels.first())
            .cloned()
        else {
            return Err(Refusal::with_reasons(
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
            return Err(Refusal::with_reasons(
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
        // R51: a call that needs several people's approvals goes only to a channel that
        // gathers that many; anything less would send it on fewer answers.
        if decision.approvals > channel.approvals_gathered() {
            return Err(Refusal::with_reasons(
                RefusalCode::NoApprovalChannel,
                Check::Routing,
                std::iter::once(format!(
                    "the call needs {} approvals from distinct people (R51) and this host's `{}` channel gathers {}: refused rather than sent on fewer answers",
                    decision.approvals,
                    channel.kind().as_str(),
                    channel.approvals_gathered()
                ))
                .chain(decision.reasons.iter().cloned())
                .collect(),
            ));
        }
        Ok(channel)
    }
}

/// Records `decision` (with the hook's ask, when one joined it) on the call's sink: the
/// shadow's decision beside it (R46, read by nothing that decides), and how the wait ends as
/// far as is known before any question is asked.
fn note_decision(
    sink: &DecisionSink,
    pinned: &PinnedDecision,
    decision: &Decision,
    hook_ask: Option<&Ask>,
    call: &ToolCall,
) {
    let governance = pinned.governance();
    if let Some(shadow) = pinned.shadow() {
        let decision = match hook_ask {
            Some(ask) => governance.with_extra_asks(shadow, call.run, vec![ask.clone()]),
            None => shadow.decision.clone(),
        };
        sink.record_shadow(toolgate_core::ShadowNote::new(decision));
    }
    let wait = match decision.verdict {
        Verdict::Refused(_) => WaitEnd::Refused,
        Verdict::Run {
            auto_approved: true,
        } => WaitEnd::AutoApproved,
        // R45: a call a grant answered is recorded as approved by whoever gave it (the grant
        // itself is in the decision, `granted`).
        Verdict::Run { .. } => match &decision.granted {
            Some(g) => WaitEnd::Approved {
                approver: g.granted_by.clone(),
            },
            None => WaitEnd::NotAsked,
        },
        Verdict::Ask { .. } => WaitEnd::Unroutable,
    };
    let mut note = DecisionNote::new(decision.clone(), wait);
    note.input_hash = pinned.canonical_input_hash(&call.input);
    sink.record(note);
}
