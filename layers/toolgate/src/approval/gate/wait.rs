//! The ask path of the gate: the channel a call is routed to, a held call's resume ticket,
//! the asynchronous quota reservation, the wait for a person and the decision made again
//! before an approved call is sent (R26, R35, R38, R44).

use super::*;

impl<S> ApprovalGate<S>
where
    S: Service<ToolCall, Response = ToolResponse> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    /// The channel that can redeem a resume ticket: only a durable inbox claims a held
    /// call (R26). Any other channel would ask again, or approve without a claim, so a
    /// ticket routed to it could be sent twice: refused, never sent.
    pub(super) fn ticket_channel(&self) -> Result<Arc<dyn ApprovalChannel>, Refusal> {
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
    pub(super) fn send_reserving(
        &mut self,
        mut call: ToolCall,
        pinned: PinnedDecision,
        input_binding: Option<crate::binding::Binding>,
        sink: Option<DecisionSink>,
        hooks: Option<Arc<dyn ToolHooks>>,
    ) -> GateFuture<S::Future, S::Error> {
        let fresh = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, fresh);
        let handle = self.handle.clone();
        let future = async move {
            // R32, R44: a call `before_call` cancels is no send, so it is asked first.
            if let (Some(h), Some(entry)) = (&hooks, pinned.entry())
                && let Err(text) = h.before_call(&hook_view(&call, &entry.name)).await
            {
                return Ok(ToolResponse::Refused(hook_refusal(text)));
            }
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
            let after = hooks.as_ref().map(|h| After::of(h, &call, &tool));
            let response = inner.call(call).await?;
            Ok(match after {
                Some(a) => a.apply(response).await,
                None => response,
            })
        };
        GateFuture::waiting(Box::pin(future))
    }

    /// Puts the one question about `call` (or, with a ticket, the redemption of a held
    /// call's answer) to `channel`; the call is sent only on an approval, after every check
    /// passes again (R35, R38). `approvals` is how many distinct people the decision needs
    /// (R51), handed to the channel with the question.
    pub(super) fn through_channel(
        &mut self,
        channel: Arc<dyn ApprovalChannel>,
        call: ToolCall,
        entry: &Entry,
        (asks, ticket, approvals, labels): (
            Vec<Ask>,
            Option<ResumeTicket>,
            u8,
            Option<toolgate_core::LabelsRead>,
        ),
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
            literals: toolgate_core::number::NumberLiterals::of(&call).clone(),
            input_hash,
            definition_hash: canon::entry_definition_hash(entry),
            asks,
            run: call.run,
            turn: call.turn.clone(),
            ticket,
            // The first record's declaration names the target's fields (R24: as the rule
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
            approvals: approvals.max(1),
            // R49: what the session had done when it was asked, for the person.
            labels,
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
        GateFuture::waiting(Box::pin(wait_and_send(
            path,
            request,
            call,
            tool.to_owned(),
        )))
    }
}

/// What the ask path carries into its future.
pub(super) struct AskPath<S> {
    inner: S,
    handle: GovernanceHandle,
    hooks: Option<Arc<dyn ToolHooks>>,
    observer: Option<Arc<dyn WaitObserver>>,
    channel: Arc<dyn ApprovalChannel>,
    sink: Option<DecisionSink>,
    timeout: Option<std::time::Duration>,
}

/// What the person was asked, kept to check the approved call against before it is sent.
struct Asked {
    asks: Vec<Ask>,
    /// R51: the channel approves a question that needs this many people; a fresh decision
    /// that needs more is a question it did not answer.
    approvals: u8,
    input_hash: String,
    definition_hash: String,
}

/// The ask path: one question, then — only on a person's approval, with the definition and
/// input unchanged (R35) — the call.
pub(super) async fn wait_and_send<S>(
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
    let asked = Asked {
        asks: request.asks.clone(),
        approvals: request.approvals,
        input_hash: request.input_hash.clone(),
        definition_hash: request.definition_hash.clone(),
    };
    // Reports the wait's end once; `cancelled` if this future is dropped mid-wait.
    let watch = WaitWatch::start(observer, channel.kind());
    let expired = VerifiedOutcome {
        outcome: ApprovalOutcome::Expired,
        answered_by: None,
    };
    let VerifiedOutcome {
        outcome,
        answered_by,
    } = match timeout {
        // Nobody answered within the agent's timeout: expired, never approved.
        Some(t) => tokio::time::timeout(t, channel.request_verified(request))
            .await
            .unwrap_or(expired),
        None => channel.request_verified(request).await,
    };
    watch.end(WaitOutcome::of(&outcome));
    if let Some(sink) = &sink {
        note_wait_end(sink, &outcome, answered_by);
    }
    let asks = &asked.asks;
    let refusal = match outcome {
        ApprovalOutcome::Approved { approver } => {
            let approved = Approved {
                handle: &handle,
                hooks: hooks.as_ref(),
                tool: &tool,
                approver: &approver,
                asked: &asked,
            };
            return approved.send(&mut inner, call).await;
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
            asks,
        ),
        ApprovalOutcome::Expired => ask::wait_refusal(WaitRefused::Expired, asks),
        ApprovalOutcome::Cancelled => ask::wait_refusal(WaitRefused::Cancelled, asks),
        ApprovalOutcome::Refused { reason } => {
            ask::wait_refusal(WaitRefused::ChannelRefused { reason: &reason }, asks)
        }
        ApprovalOutcome::Unroutable(why) => {
            ask::wait_refusal(WaitRefused::Unroutable { why: &why }, asks)
        }
    };
    Ok(ToolResponse::Refused(refusal))
}

/// Notes how the wait ended (and a held call's id) on the call's decision record.
fn note_wait_end(
    sink: &DecisionSink,
    outcome: &ApprovalOutcome,
    answered_by: Option<toolgate_core::Principal>,
) {
    let wait = match outcome {
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
    let held_id = match outcome {
        ApprovalOutcome::Held { interaction_id } => Some(interaction_id.clone()),
        _ => None,
    };
    sink.update(|note| {
        note.wait = wait;
        if held_id.is_some() {
            note.interaction_id = held_id;
        }
    });
    // R47: who answered, by their verified principal, beside their name.
    if let (Some(p), ApprovalOutcome::Approved { .. } | ApprovalOutcome::Denied { .. }) =
        (answered_by, outcome)
    {
        sink.record_answered_by(p);
    }
}

/// A call a person approved, on its way to being checked again and sent.
struct Approved<'a> {
    handle: &'a GovernanceHandle,
    hooks: Option<&'a Arc<dyn ToolHooks>>,
    tool: &'a str,
    approver: &'a str,
    asked: &'a Asked,
}

impl Approved<'_> {
    /// Sends the approved call through `inner` once capacity is free and every check
    /// passes again (R35, R38, R44); otherwise the refusal, and nothing is sent.
    async fn send<S>(self, inner: &mut S, call: ToolCall) -> Result<ToolResponse, S::Error>
    where
        S: Service<ToolCall, Response = ToolResponse>,
    {
        let Self {
            handle,
            hooks,
            tool,
            approver,
            asked,
        } = self;
        let asks = &asked.asks;
        // Wait for capacity first: every check is made when the call is about to be sent.
        std::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
        // R35: the tool's definition now, by the newest snapshot.
        let (generation, now) = handle.load_counted();
        let current = now.catalog().get(tool).map(canon::entry_definition_hash);
        if current.as_deref() != Some(asked.definition_hash.as_str()) {
            let mut refusal = rejected(
                format!(
                    "approved by {approver}, but the definition of `{tool}` changed while the call waited; it will be asked about again"
                ),
                asks,
            );
            // `decided_by` tells the truth: a rug pull, not routing (R35).
            refusal.decided_by = Check::DefinitionChanged;
            return Ok(ToolResponse::Refused(refusal));
        }
        if canon::input_hash(&call.input).as_deref() != Some(asked.input_hash.as_str()) {
            return Ok(ToolResponse::Refused(rejected(
                format!("approved by {approver}, but the input differs from what was approved"),
                asks,
            )));
        }
        // R38: the approved call passes every check again against the configuration in
        // force now (the newest snapshot, not the one pinned when it was asked about),
        // and the session's labels now (R49: read again from a shared store).
        let mut call = call;
        handle.read_session_labels(&mut call).await;
        let ledger = handle.ledger();
        let history = ledger.history(&call);
        let mut decided = match recheck(&now, &call, &history, approver, (asks, asked.approvals)) {
            Ok(decided) => decided,
            Err(refusal) => return Ok(ToolResponse::Refused(refusal)),
        };
        // R44: the approved send is counted right before it is sent, atomically with
        // the check (a quota that filled during the wait refuses it). A person answered
        // this call: no grant's use is spent on it (R45).
        decided.decision.granted = None;
        // R32, R44: a call `before_call` cancels is no send, so it is asked first.
        if let Some(h) = hooks
            && let Err(text) = h.before_call(&hook_view(&call, tool)).await
        {
            return Ok(ToolResponse::Refused(hook_refusal(text)));
        }
        if let Err(mut refusal) = handle.record_send_async(&now, &decided, &call).await {
            refusal.reasons.push(format!(
                "approved by {approver}, but the call's quota filled while it waited; it was not sent"
            ));
            return Ok(ToolResponse::Refused(refusal));
        }
        // Layers inside the gate decide by the snapshot the call was last checked by.
        // R38: the permit the tool side checks, for the input and definition approved.
        let attached = match now.catalog().get(tool) {
            Some(entry) => Permit::attach(&mut call, handle, &now, entry),
            None => Err(rejected(
                format!("approved by {approver}, but `{tool}` is no longer registered"),
                asks,
            )),
        };
        if let Err(refusal) = attached {
            return Ok(ToolResponse::Refused(refusal));
        }
        handle.repin(&mut call, generation, now);
        let after = hooks.map(|h| After::of(h, &call, tool));
        let response = inner.call(call).await?;
        Ok(match after {
            Some(a) => a.apply(response).await,
            None => response,
        })
    }
}

/// R38: an approved call decided again, right before it is sent, by `now` — the
/// configuration in force. A refusal that arrived during the wait wins (a `deny`, an
/// unreadable policy, a tool taken from the agent, the air gap switched on, …), keeping its
/// own code. A fresh decision that no longer asks, or asks for no reason beyond those the
/// person answered, lets the call go. One that asks for a reason the person was never
/// asked about is refused `rejected` (fail closed): the approval answered only the question
/// it was asked, and the new one is asked on the next call. So is one that now needs more
/// people's approvals than the channel gathered (`approved_by`, R51).
pub(super) fn recheck(
    now: &Governance,
    call: &ToolCall,
    history: &toolgate_engine::History<'_>,
    approver: &str,
    (asked, approved_by): (&[Ask], u8),
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
        Verdict::Ask { .. } if decision.approvals > approved_by => {
            let mut refusal = rejected(
                format!(
                    "approved by {approver}, but the call now needs {} approvals from distinct people (R51) and was approved as a call that needs {approved_by}; the call will be asked about again",
                    decision.approvals
                ),
                &[],
            );
            refusal.reasons.extend(decision.reasons.iter().cloned());
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
