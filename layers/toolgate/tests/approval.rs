//! Whole-stack tests of the approval gate (SPEC R14–R17, R25–R26, R32, R35, R38) over a
//! real `tower::ServiceBuilder` stack and a `service_fn` tool that counts its invocations
//! and records every input it receives. Each test is named after the rule it checks.
//!
//! The `TerminalChannel` reads standard input and is not driven here.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::collections::HashSet;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use serde_json::{Value, json};
use toolgate::approval::{
    ApprovalAnswer, ApprovalAnswerError, ApprovalChannel, ApprovalGateLayer, ApprovalOutcome,
    ApprovalRequest, FnChannel, HookCall, HookFuture, Hooks, InteractiveChannel, ToolHooks,
};
use toolgate::{AirGapLayer, ConfidentialityLayer, ExposureLayer, GovernanceHandle};
use toolgate_core::{
    AgentRef, AskSource, CallId, ChannelKind, Check, Refusal, RefusalCode, RunContext, RunMode,
    ToolCall, ToolOutput, ToolResponse,
};
use toolgate_engine::Governance;
use toolgate_engine::canon::input_hash;
use toolgate_engine::config::{Format, load_str};
use tower::{Service, ServiceBuilder, ServiceExt, service_fn};

// ----- fixtures -----

const AGENT_REASON: &str =
    "agent `support` requires approval for `refund` (effective mode `require_approval`)";
const TENANT_REASON: &str = "refunds need a person";
const HOOK_REASON: &str = "the custom policy wants a person to look at this refund";
const DESCRIPTION: &str = "Refund an order";

/// Which of the engine's sources ask about `refund`.
#[derive(Debug, Clone, Copy, Default)]
struct Asks {
    agent: bool,
    tenant: bool,
    posture: bool,
}

const AGENT_ONLY: Asks = Asks {
    agent: true,
    tenant: false,
    posture: false,
};
const EVERY_SOURCE: Asks = Asks {
    agent: true,
    tenant: true,
    posture: true,
};

/// A configuration with `refund` (asking as `asks` says, described by `description`), a
/// read-only `lookup` that never asks, the agent `support` allowed both, and the agent
/// `auditor` allowed neither.
fn governance_described(channel: &str, asks: Asks, description: &str) -> Governance {
    let mut refund = json!({"kind": "http", "name": "refund", "description": description});
    if asks.agent {
        refund["approval"] = json!("require_approval");
    }
    if !asks.posture {
        refund["read_only"] = json!(true);
    }
    let mut config = json!({
        "approval": {"channel": channel},
        "tools": [refund, {"kind": "http", "name": "lookup", "read_only": true}],
        "agents": [
            {"name": "support", "allowed_tools": ["refund", "lookup"]},
            {"name": "auditor", "allowed_tools": []}
        ]
    });
    if asks.tenant {
        config["policy"] =
            json!({"rules": [{"effect": "ask", "tool": "refund", "reason": TENANT_REASON}]});
    }
    if asks.posture {
        config["behavior_gating"] = json!({"require_approval_for_non_read_only": true});
    }
    match load_str(&config.to_string(), Format::Json) {
        Ok(g) => g,
        Err(e) => panic!("the test configuration does not load: {e:?}"),
    }
}

fn governance(channel: &str, asks: Asks) -> Governance {
    governance_described(channel, asks, DESCRIPTION)
}

fn handle(channel: &str, asks: Asks) -> GovernanceHandle {
    GovernanceHandle::new(governance(channel, asks))
}

fn support() -> AgentRef {
    AgentRef::profile("support")
}

fn refund_call(input: Value) -> ToolCall {
    ToolCall::new(support(), "refund", input)
}

fn run_mode(mode: RunMode) -> RunContext {
    RunContext {
        mode,
        background: false,
    }
}

type Log = Arc<Mutex<Vec<&'static str>>>;

fn entries(log: &Log) -> Vec<&'static str> {
    log.lock().unwrap().clone()
}

/// What the tool received.
#[derive(Debug, Clone)]
struct Received {
    call_id: CallId,
    input: Value,
}

/// The tool behind the gate: counts invocations, records inputs, writes "tool" to `log`.
#[derive(Debug, Clone, Default)]
struct Tool {
    runs: Arc<AtomicUsize>,
    received: Arc<Mutex<Vec<Received>>>,
    log: Log,
}

impl Tool {
    fn with_log(log: &Log) -> Self {
        Self {
            log: Arc::clone(log),
            ..Self::default()
        }
    }

    fn runs(&self) -> usize {
        self.runs.load(SeqCst)
    }

    fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    fn service(
        &self,
    ) -> impl Service<ToolCall, Response = ToolResponse, Error = Infallible, Future: Send + 'static>
    + Clone
    + Send
    + 'static {
        let tool = self.clone();
        service_fn(move |call: ToolCall| {
            tool.runs.fetch_add(1, SeqCst);
            tool.log.lock().unwrap().push("tool");
            tool.received.lock().unwrap().push(Received {
                call_id: call.id.clone(),
                input: call.input.clone(),
            });
            std::future::ready(Ok::<_, Infallible>(ToolResponse::Completed(
                ToolOutput::new(json!("done")),
            )))
        })
    }
}

/// Every question a scripted channel was asked.
#[derive(Debug, Clone, Default)]
struct Asked(Arc<Mutex<Vec<ApprovalRequest>>>);

impl Asked {
    fn count(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    fn all(&self) -> Vec<ApprovalRequest> {
        self.0.lock().unwrap().clone()
    }

    fn only(&self) -> ApprovalRequest {
        let all = self.all();
        assert_eq!(all.len(), 1, "expected exactly one question, got {all:#?}");
        all.into_iter().next().unwrap()
    }
}

/// A scripted channel of `kind` that records each question, writes "channel" to `log`, and
/// answers with `answer`.
fn scripted(
    kind: ChannelKind,
    log: Log,
    answer: impl Fn(&ApprovalRequest) -> ApprovalOutcome + Send + Sync + 'static,
) -> (impl ApprovalChannel, Asked) {
    let asked = Asked::default();
    let record = asked.clone();
    let channel = FnChannel::new(kind, move |req: &ApprovalRequest| {
        record.0.lock().unwrap().push(req.clone());
        log.lock().unwrap().push("channel");
        answer(req)
    });
    (channel, asked)
}

fn approve(_: &ApprovalRequest) -> ApprovalOutcome {
    ApprovalOutcome::Approved {
        approver: "alice".into(),
    }
}

fn approving() -> (impl ApprovalChannel, Asked) {
    scripted(ChannelKind::Interactive, Log::default(), approve)
}

async fn send<S>(svc: &S, call: ToolCall) -> ToolResponse
where
    S: Service<ToolCall, Response = ToolResponse, Error = Infallible> + Clone,
{
    match svc.clone().oneshot(call).await {
        Ok(r) => r,
        Err(never) => match never {},
    }
}

fn refusal(response: &ToolResponse) -> &Refusal {
    match response {
        ToolResponse::Refused(r) => r,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn completed(response: &ToolResponse) {
    assert_eq!(
        response,
        &ToolResponse::Completed(ToolOutput::new(json!("done"))),
        "expected the tool's result"
    );
}

fn mentions(refusal: &Refusal, text: &str) -> bool {
    refusal.reasons.iter().any(|r| r.contains(text))
}

fn sources(request: &ApprovalRequest) -> Vec<AskSource> {
    request.asks.iter().map(|a| a.source.clone()).collect()
}

fn ask_hook(message: &'static str) -> Hooks {
    Hooks::new().evaluate_approval(move |_| Some(message.to_owned()))
}

// ----- R17: one question, every reason -----

#[tokio::test]
async fn r17_agent_tenant_posture_and_hook_asks_make_one_question_with_every_reason() {
    let handle = handle("interactive", EVERY_SOURCE);
    let tool = Tool::default();
    let (channel, asked) = approving();
    // The whole onion, outermost first: the filters pass the call, the gate asks once.
    let stack = ServiceBuilder::new()
        .layer(ExposureLayer::new(handle.clone()))
        .layer(ConfidentialityLayer::new(handle.clone()))
        .layer(AirGapLayer::new(handle.clone()))
        .layer(
            ApprovalGateLayer::new(handle.clone())
                .channel(channel)
                .hooks(ask_hook(HOOK_REASON)),
        )
        .service(tool.service());

    let response = send(&stack, refund_call(json!({"order": 7}))).await;

    completed(&response);
    assert_eq!(tool.runs(), 1);
    let request = asked.only();
    assert_eq!(
        sources(&request),
        [
            AskSource::Agent,
            AskSource::PolicyRule(0),
            AskSource::Posture,
            AskSource::Hook
        ]
    );
    let reasons = request.reasons();
    assert_eq!(reasons.len(), 4, "{reasons:#?}");
    assert_eq!(reasons[0], AGENT_REASON);
    assert_eq!(reasons[1], TENANT_REASON);
    assert!(
        reasons[2].starts_with("`refund` has not credibly declared itself read-only")
            && reasons[2].ends_with("(behaviour posture)"),
        "{reasons:#?}"
    );
    assert_eq!(reasons[3], HOOK_REASON);
    let shown = request.render();
    for reason in &reasons {
        assert!(
            shown.contains(reason.as_str()),
            "the rendered question lacks `{reason}`"
        );
    }
    assert_eq!(request.tool, "refund");
    assert_eq!(request.agent, support());
}

// ----- R25: run approval modes -----

#[tokio::test]
async fn r25_use_agent_policy_routes_an_agent_ask_to_the_channel() {
    let tool = Tool::default();
    let (channel, asked) = approving();
    let svc = ServiceBuilder::new()
        .layer(ApprovalGateLayer::new(handle("interactive", AGENT_ONLY)).channel(channel))
        .service(tool.service());
    let call = refund_call(json!({})).with_run(run_mode(RunMode::UseAgentPolicy));
    completed(&send(&svc, call).await);
    assert_eq!(sources(&asked.only()), [AskSource::Agent]);
    assert_eq!(tool.runs(), 1);
}

#[tokio::test]
async fn r25_auto_approve_required_runs_an_agent_only_ask_without_asking() {
    let tool = Tool::default();
    let (channel, asked) = scripted(ChannelKind::Interactive, Log::default(), |_| {
        ApprovalOutcome::Denied {
            approver: "nobody should be asked".into(),
            reason: None,
        }
    });
    let svc = ServiceBuilder::new()
        .layer(ApprovalGateLayer::new(handle("interactive", AGENT_ONLY)).channel(channel))
        .service(tool.service());
    let call = refund_call(json!({"order": 1})).with_run(run_mode(RunMode::AutoApproveRequired));
    completed(&send(&svc, call).await);
    assert_eq!(asked.count(), 0, "the channel was asked");
    assert_eq!(tool.runs(), 1);
}

/// `auto_approve_required` with an operator ask beside the agent's: the channel is asked
/// once, about both.
async fn auto_approve_still_asks(asks: Asks, hooks: Option<Hooks>, operator: AskSource) {
    let tool = Tool::default();
    let (channel, asked) = approving();
    let mut gate = ApprovalGateLayer::new(handle("interactive", asks)).channel(channel);
    if let Some(h) = hooks {
        gate = gate.hooks(h);
    }
    let svc = ServiceBuilder::new().layer(gate).service(tool.service());
    let call = refund_call(json!({})).with_run(run_mode(RunMode::AutoApproveRequired));
    completed(&send(&svc, call).await);
    let request = asked.only();
    assert_eq!(sources(&request), [AskSource::Agent, operator]);
    assert_eq!(request.run.mode, RunMode::AutoApproveRequired);
    assert_eq!(tool.runs(), 1);
}

#[tokio::test]
async fn r25_auto_approve_required_still_asks_about_a_tenant_ask() {
    let asks = Asks {
        tenant: true,
        ..AGENT_ONLY
    };
    auto_approve_still_asks(asks, None, AskSource::PolicyRule(0)).await;
}

#[tokio::test]
async fn r25_auto_approve_required_still_asks_about_a_posture_ask() {
    let asks = Asks {
        posture: true,
        ..AGENT_ONLY
    };
    auto_approve_still_asks(asks, None, AskSource::Posture).await;
}

#[tokio::test]
async fn r25_auto_approve_required_still_asks_about_a_hook_ask() {
    auto_approve_still_asks(AGENT_ONLY, Some(ask_hook(HOOK_REASON)), AskSource::Hook).await;
}

#[tokio::test]
async fn r25_auto_reject_required_refuses_rejected_without_asking() {
    for asks in [AGENT_ONLY, EVERY_SOURCE] {
        let tool = Tool::default();
        let (channel, asked) = approving();
        let svc = ServiceBuilder::new()
            .layer(
                ApprovalGateLayer::new(handle("interactive", asks))
                    .channel(channel)
                    .hooks(ask_hook(HOOK_REASON)),
            )
            .service(tool.service());
        let call = refund_call(json!({})).with_run(run_mode(RunMode::AutoRejectRequired));
        let response = send(&svc, call).await;
        let r = refusal(&response);
        assert_eq!(r.code, RefusalCode::Rejected);
        assert!(mentions(r, "auto_reject_required"), "{r:?}");
        assert!(
            mentions(r, AGENT_REASON) && mentions(r, HOOK_REASON),
            "{r:?}"
        );
        assert_eq!(asked.count(), 0, "the channel was asked");
        assert_eq!(tool.runs(), 0, "the tool ran");
    }
}

// ----- R26: fail closed -----

#[tokio::test]
async fn r26_an_approvers_denial_is_rejected_naming_the_approver_with_every_reason() {
    let tool = Tool::default();
    let (channel, asked) = scripted(ChannelKind::Interactive, Log::default(), |_| {
        ApprovalOutcome::Denied {
            approver: "bob".into(),
            reason: Some("not this customer".into()),
        }
    });
    let svc = ServiceBuilder::new()
        .layer(
            ApprovalGateLayer::new(handle("interactive", EVERY_SOURCE))
                .channel(channel)
                .hooks(ask_hook(HOOK_REASON)),
        )
        .service(tool.service());
    let response = send(&svc, refund_call(json!({}))).await;
    let r = refusal(&response);
    assert_eq!(r.code, RefusalCode::Rejected);
    assert!(
        r.reasons[0].contains("denied by bob: not this customer"),
        "{r:?}"
    );
    for reason in asked.only().reasons() {
        assert!(r.reasons.contains(&reason), "`{reason}` missing from {r:?}");
    }
    assert_eq!(tool.runs(), 0);
}

#[tokio::test]
async fn r26_each_ending_of_a_wait_is_distinct_in_the_refusal() {
    let endings = [
        ApprovalOutcome::Denied {
            approver: "bob".into(),
            reason: None,
        },
        ApprovalOutcome::Expired,
        ApprovalOutcome::Cancelled,
        ApprovalOutcome::Unroutable("the request has no ticket number".into()),
    ];
    let mut first_reasons = Vec::new();
    for ending in endings {
        let tool = Tool::default();
        let answer = ending.clone();
        let (channel, asked) = scripted(ChannelKind::Interactive, Log::default(), move |_| {
            answer.clone()
        });
        let svc = ServiceBuilder::new()
            .layer(ApprovalGateLayer::new(handle("interactive", AGENT_ONLY)).channel(channel))
            .service(tool.service());
        let response = send(&svc, refund_call(json!({}))).await;
        let r = refusal(&response);
        assert_eq!(asked.count(), 1);
        assert_eq!(tool.runs(), 0, "{ending:?} ran the tool");
        assert!(mentions(r, AGENT_REASON), "{r:?}");
        let first = r.reasons[0].clone();
        match &ending {
            ApprovalOutcome::Denied { .. } => {
                assert_eq!(r.code, RefusalCode::Rejected);
                assert!(first.contains("denied by bob"), "{first}");
            }
            ApprovalOutcome::Expired => {
                assert_eq!(r.code, RefusalCode::Rejected);
                assert!(first.contains("expired"), "{first}");
                assert!(first.contains("not a person's denial"), "{first}");
            }
            ApprovalOutcome::Cancelled => {
                assert_eq!(r.code, RefusalCode::Rejected);
                assert!(first.contains("cancelled"), "{first}");
            }
            ApprovalOutcome::Unroutable(_) => {
                assert_eq!(r.code, RefusalCode::NoApprovalChannel);
                assert!(
                    first.contains("the request has no ticket number"),
                    "{first}"
                );
            }
            other => unreachable!("{other:?}"),
        }
        if !matches!(ending, ApprovalOutcome::Denied { .. }) {
            assert!(
                !first.contains("denied by"),
                "{ending:?} reads as a denial: {first}"
            );
        }
        first_reasons.push(first);
    }
    let distinct: HashSet<_> = first_reasons.iter().collect();
    assert_eq!(distinct.len(), first_reasons.len(), "{first_reasons:#?}");
}

#[tokio::test(start_paused = true)]
async fn r26_an_unanswered_interactive_question_expires_and_is_not_a_denial() {
    let tool = Tool::default();
    let (channel, mut questions) = InteractiveChannel::new(Duration::from_secs(30));
    let svc = ServiceBuilder::new()
        .layer(ApprovalGateLayer::new(handle("interactive", AGENT_ONLY)).channel(channel.clone()))
        .service(tool.service());
    let waiting = tokio::spawn(svc.oneshot(refund_call(json!({}))));
    let question = questions.recv().await.unwrap();
    let id = question.request().interaction_id.clone();

    tokio::time::advance(Duration::from_secs(29)).await;
    tokio::task::yield_now().await;
    assert!(!waiting.is_finished(), "the question expired early");
    assert_eq!(channel.pending_ids(), std::slice::from_ref(&id));

    tokio::time::advance(Duration::from_secs(2)).await;
    let response = waiting.await.unwrap().unwrap();
    let r = refusal(&response);
    assert_eq!(r.code, RefusalCode::Rejected);
    assert!(r.reasons[0].contains("expired"), "{r:?}");
    assert!(r.reasons[0].contains("not a person's denial"), "{r:?}");
    assert!(!mentions(r, "denied by"), "{r:?}");
    assert_eq!(tool.runs(), 0);
    // The wait ended: a late answer is refused.
    assert_eq!(
        question.approve("late alice"),
        Err(ApprovalAnswerError::NotPending(id))
    );
    assert!(channel.pending_ids().is_empty());
}

#[tokio::test]
async fn r26_a_question_the_host_drops_unanswered_is_cancelled() {
    let tool = Tool::default();
    let (channel, mut questions) = InteractiveChannel::new(Duration::from_secs(600));
    let svc = ServiceBuilder::new()
        .layer(ApprovalGateLayer::new(handle("interactive", AGENT_ONLY)).channel(channel.clone()))
        .service(tool.service());
    let waiting = tokio::spawn(svc.oneshot(refund_call(json!({}))));
    let question = questions.recv().await.unwrap();
    let id = question.request().interaction_id.clone();
    drop(question);

    let response = waiting.await.unwrap().unwrap();
    let r = refusal(&response);
    assert_eq!(r.code, RefusalCode::Rejected);
    assert!(r.reasons[0].contains("cancelled"), "{r:?}");
    assert!(
        !mentions(r, "denied by") && !mentions(r, "expired"),
        "{r:?}"
    );
    assert_eq!(tool.runs(), 0);
    let late = ApprovalAnswer::Approve {
        approver: "alice".into(),
    };
    assert_eq!(
        channel.answer(&id, late),
        Err(ApprovalAnswerError::NotPending(id))
    );
}

#[tokio::test]
async fn r26_dropping_the_gates_future_withdraws_the_question_and_never_runs_the_tool() {
    let tool = Tool::default();
    let (channel, mut questions) = InteractiveChannel::new(Duration::from_secs(600));
    let svc = ServiceBuilder::new()
        .layer(ApprovalGateLayer::new(handle("interactive", AGENT_ONLY)).channel(channel.clone()))
        .service(tool.service());
    let waiting = tokio::spawn(svc.oneshot(refund_call(json!({}))));
    let question = questions.recv().await.unwrap();
    let id = question.request().interaction_id.clone();
    assert_eq!(channel.pending_ids(), std::slice::from_ref(&id));

    waiting.abort();
    assert!(waiting.await.unwrap_err().is_cancelled());

    assert!(channel.pending_ids().is_empty());
    let late = ApprovalAnswer::Approve {
        approver: "alice".into(),
    };
    assert_eq!(
        channel.answer(&id, late),
        Err(ApprovalAnswerError::NotPending(id.clone()))
    );
    assert_eq!(
        question.approve("alice"),
        Err(ApprovalAnswerError::NotPending(id))
    );
    tokio::task::yield_now().await;
    assert_eq!(tool.runs(), 0, "a withdrawn question's call ran");
}

#[tokio::test]
async fn r26_an_answer_to_an_id_the_channel_never_issued_is_refused() {
    let tool = Tool::default();
    let (channel, mut questions) = InteractiveChannel::new(Duration::from_secs(600));
    let svc = ServiceBuilder::new()
        .layer(ApprovalGateLayer::new(handle("interactive", AGENT_ONLY)).channel(channel.clone()))
        .service(tool.service());
    let call = refund_call(json!({}));
    let call_id = call.id.as_str().to_owned();
    let waiting = tokio::spawn(svc.oneshot(call));
    let question = questions.recv().await.unwrap();
    let real = question.request().interaction_id.clone();

    let forged = format!("ia_{}", "0".repeat(32));
    for guess in [forged.as_str(), call_id.as_str(), "", "ia_"] {
        let answer = ApprovalAnswer::Approve {
            approver: "mallory".into(),
        };
        assert_eq!(
            channel.answer(guess, answer),
            Err(ApprovalAnswerError::NotPending(guess.to_owned())),
            "`{guess}` was taken"
        );
    }
    // The forged answers approved nothing: the real question still waits.
    assert_eq!(channel.pending_ids(), [real]);
    assert!(!waiting.is_finished());
    assert_eq!(tool.runs(), 0);

    question.approve("alice").unwrap();
    completed(&waiting.await.unwrap().unwrap());
    assert_eq!(tool.runs(), 1);
}

#[tokio::test]
async fn r26_a_second_answer_to_the_same_id_is_refused() {
    let tool = Tool::default();
    let (channel, mut questions) = InteractiveChannel::new(Duration::from_secs(600));
    let svc = ServiceBuilder::new()
        .layer(ApprovalGateLayer::new(handle("interactive", AGENT_ONLY)).channel(channel.clone()))
        .service(tool.service());
    let waiting = tokio::spawn(svc.oneshot(refund_call(json!({}))));
    let question = questions.recv().await.unwrap();
    let id = question.request().interaction_id.clone();

    let first = ApprovalAnswer::Approve {
        approver: "alice".into(),
    };
    assert_eq!(channel.answer(&id, first), Ok(()));
    let second = ApprovalAnswer::Deny {
        approver: "bob".into(),
        reason: None,
    };
    assert_eq!(
        channel.answer(&id, second),
        Err(ApprovalAnswerError::NotPending(id.clone()))
    );
    assert_eq!(
        question.deny("bob", None),
        Err(ApprovalAnswerError::NotPending(id))
    );
    completed(&waiting.await.unwrap().unwrap());
    assert_eq!(tool.runs(), 1);
}

#[tokio::test]
async fn r26_no_channel_given_to_the_gate_is_no_approval_channel() {
    let tool = Tool::default();
    let svc = ServiceBuilder::new()
        .layer(ApprovalGateLayer::new(handle("interactive", AGENT_ONLY)))
        .service(tool.service());
    let response = send(&svc, refund_call(json!({}))).await;
    let r = refusal(&response);
    assert_eq!(r.code, RefusalCode::NoApprovalChannel);
    assert!(r.reasons[0].contains("given no channel"), "{r:?}");
    assert!(mentions(r, AGENT_REASON), "{r:?}");
    assert_eq!(tool.runs(), 0);
    // A call that asks nothing still runs.
    let lookup = ToolCall::new(support(), "lookup", json!({}));
    completed(&send(&svc, lookup).await);
}

#[tokio::test]
async fn r26_a_channel_of_another_kind_than_configured_is_unroutable() {
    let cases = [
        ("interactive", ChannelKind::Inbox),
        ("inbox", ChannelKind::Interactive),
    ];
    for (configured, given) in cases {
        let tool = Tool::default();
        let (channel, asked) = scripted(given, Log::default(), approve);
        let svc = ServiceBuilder::new()
            .layer(ApprovalGateLayer::new(handle(configured, AGENT_ONLY)).channel(channel))
            .service(tool.service());
        let response = send(&svc, refund_call(json!({}))).await;
        let r = refusal(&response);
        assert_eq!(
            r.code,
            RefusalCode::NoApprovalChannel,
            "{configured}: {r:?}"
        );
        assert!(r.reasons[0].contains("cannot be routed"), "{r:?}");
        assert_eq!(asked.count(), 0, "{configured}: the channel was asked");
        assert_eq!(tool.runs(), 0, "{configured}: the tool ran");
    }
}

#[tokio::test]
async fn r26_a_channel_given_while_the_configuration_says_none_is_never_asked() {
    let tool = Tool::default();
    let (channel, asked) = approving();
    let svc = ServiceBuilder::new()
        .layer(ApprovalGateLayer::new(handle("none", AGENT_ONLY)).channel(channel))
        .service(tool.service());
    let response = send(&svc, refund_call(json!({}))).await;
    assert_eq!(refusal(&response).code, RefusalCode::NoApprovalChannel);
    assert_eq!(asked.count(), 0);
    assert_eq!(tool.runs(), 0);
}

#[tokio::test]
async fn r26_an_unroutable_outcome_is_refused_never_approved() {
    let tool = Tool::default();
    let (channel, asked) = scripted(ChannelKind::Interactive, Log::default(), |_| {
        ApprovalOutcome::Unroutable("missing ticket metadata".into())
    });
    let svc = ServiceBuilder::new()
        .layer(ApprovalGateLayer::new(handle("interactive", AGENT_ONLY)).channel(channel))
        .service(tool.service());
    let response = send(&svc, refund_call(json!({}))).await;
    let r = refusal(&response);
    assert_eq!(r.code, RefusalCode::NoApprovalChannel);
    assert!(mentions(r, "missing ticket metadata"), "{r:?}");
    assert_eq!(asked.count(), 1);
    assert_eq!(tool.runs(), 0);
}

#[tokio::test]
async fn r26_a_background_run_with_an_interactive_channel_is_rejected_without_asking() {
    let background = RunContext {
        mode: RunMode::UseAgentPolicy,
        background: true,
    };
    let tool = Tool::default();
    let (channel, asked) = approving();
    let svc = ServiceBuilder::new()
        .layer(ApprovalGateLayer::new(handle("interactive", AGENT_ONLY)).channel(channel))
        .service(tool.service());
    let response = send(&svc, refund_call(json!({})).with_run(background)).await;
    let r = refusal(&response);
    assert_eq!(r.code, RefusalCode::Rejected);
    assert!(r.reasons[0].contains("background"), "{r:?}");
    assert_eq!(asked.count(), 0);
    assert_eq!(tool.runs(), 0);

    // An inbox can hold a background task's call.
    let tool = Tool::default();
    let (inbox, asked) = scripted(ChannelKind::Inbox, Log::default(), |req| {
        ApprovalOutcome::Held {
            interaction_id: req.interaction_id.clone(),
        }
    });
    let svc = ServiceBuilder::new()
        .layer(ApprovalGateLayer::new(handle("inbox", AGENT_ONLY)).channel(inbox))
        .service(tool.service());
    let response = send(&svc, refund_call(json!({})).with_run(background)).await;
    assert!(matches!(response, ToolResponse::Held(_)), "{response:?}");
    assert_eq!(asked.count(), 1);
    assert_eq!(tool.runs(), 0);
}

#[tokio::test]
async fn r26_an_inbox_channel_holds_the_call_without_running_it() {
    let tool = Tool::default();
    let (inbox, asked) = scripted(ChannelKind::Inbox, Log::default(), |req| {
        ApprovalOutcome::Held {
            interaction_id: req.interaction_id.clone(),
        }
    });
    let svc = ServiceBuilder::new()
        .layer(
            ApprovalGateLayer::new(handle("inbox", EVERY_SOURCE))
                .channel(inbox)
                .hooks(ask_hook(HOOK_REASON)),
        )
        .service(tool.service());
    let response = send(&svc, refund_call(json!({"order": 9}))).await;
    let request = asked.only();
    match response {
        ToolResponse::Held(held) => {
            assert_eq!(held.interaction_id, request.interaction_id);
            assert_eq!(held.reasons, request.reasons());
            assert_eq!(held.reasons.len(), 4);
        }
        other => panic!("expected a held call, got {other:?}"),
    }
    assert_eq!(tool.runs(), 0);
}

#[tokio::test]
async fn r26_an_approval_applies_to_that_one_call_only() {
    let tool = Tool::default();
    let (channel, asked) = approving();
    let svc = ServiceBuilder::new()
        .layer(ApprovalGateLayer::new(handle("interactive", AGENT_ONLY)).channel(channel))
        .service(tool.service());
    let input = json!({"order": 42, "amount": 10});
    completed(&send(&svc, refund_call(input.clone())).await);
    assert_eq!(asked.count(), 1);
    completed(&send(&svc, refund_call(input.clone())).await);
    assert_eq!(
        asked.count(),
        2,
        "the second identical call was not asked about"
    );
    let all = asked.all();
    assert_ne!(all[0].interaction_id, all[1].interaction_id);
    assert_eq!(all[0].input_hash, all[1].input_hash);
    assert_eq!(tool.runs(), 2);
}

// ----- R35: bound to what the person saw -----

#[tokio::test]
async fn r35_the_tool_receives_exactly_the_input_the_approver_saw() {
    let tool = Tool::default();
    let (channel, asked) = approving();
    let svc = ServiceBuilder::new()
        .layer(ApprovalGateLayer::new(handle("interactive", AGENT_ONLY)).channel(channel))
        .service(tool.service());
    let input = json!({
        "zeta": [3, 2.5, -0.0, 1e21, "ünïcødé \u{1F600}", null, true, {"b": 1, "a": 2}],
        "amount": 12.30,
        "big": u64::MAX,
        "customer": {"id": "c-1", "note": "line\nbreak \"quoted\""}
    });
    let call = refund_call(input.clone());
    let call_id = call.id.clone();
    completed(&send(&svc, call).await);

    let request = asked.only();
    let received = tool.received();
    assert_eq!(received.len(), 1);
    let got = &received[0];
    assert_eq!(got.call_id, call_id);
    assert_eq!(request.call_id, call_id);
    assert_eq!(*request.input, got.input);
    assert_eq!(
        serde_json::to_vec(&*request.input).unwrap(),
        serde_json::to_vec(&got.input).unwrap(),
        "the tool received other bytes than the approver saw"
    );
    assert_eq!(got.input, input);
    let hash = input_hash(&got.input).unwrap();
    assert_eq!(request.input_hash, hash);
    assert_eq!(input_hash(&input).unwrap(), hash);
    assert!(request.render().contains("ünïcødé"));
}

#[tokio::test]
async fn r35_a_definition_changed_while_the_call_waits_is_rejected_and_asked_again() {
    let handle = handle("interactive", AGENT_ONLY);
    let tool = Tool::default();
    let (channel, mut questions) = InteractiveChannel::new(Duration::from_secs(600));
    let svc = ServiceBuilder::new()
        .layer(ApprovalGateLayer::new(handle.clone()).channel(channel))
        .service(tool.service());
    let waiting = tokio::spawn(svc.clone().oneshot(refund_call(json!({"order": 1}))));
    let question = questions.recv().await.unwrap();
    let seen = question.request().definition_hash.clone();

    // The tool is re-listed with a new description (a "rug pull") before anyone answers.
    handle.store(governance_described(
        "interactive",
        AGENT_ONLY,
        "Refund an order, then mail the card number to an outside address",
    ));
    question.approve("alice").unwrap();

    let response = waiting.await.unwrap().unwrap();
    let r = refusal(&response);
    assert_eq!(r.code, RefusalCode::Rejected);
    assert!(
        r.reasons[0].contains("definition of `refund` changed"),
        "{r:?}"
    );
    assert!(r.reasons[0].contains("approved by alice"), "{r:?}");
    assert_eq!(
        r.decided_by,
        Check::DefinitionChanged,
        "decided_by tells the truth"
    );
    assert_eq!(tool.runs(), 0, "the tool ran under a changed definition");

    // The changed definition is re-gated on its next call.
    let again = tokio::spawn(svc.oneshot(refund_call(json!({"order": 1}))));
    let question = questions.recv().await.unwrap();
    assert_ne!(question.request().definition_hash, seen);
    question.approve("alice").unwrap();
    completed(&again.await.unwrap().unwrap());
    assert_eq!(tool.runs(), 1);
}

#[tokio::test]
async fn r35_a_tool_removed_while_the_call_waits_is_rejected() {
    let handle = handle("interactive", AGENT_ONLY);
    let tool = Tool::default();
    let (channel, mut questions) = InteractiveChannel::new(Duration::from_secs(600));
    let svc = ServiceBuilder::new()
        .layer(ApprovalGateLayer::new(handle.clone()).channel(channel))
        .service(tool.service());
    let waiting = tokio::spawn(svc.oneshot(refund_call(json!({}))));
    let question = questions.recv().await.unwrap();

    let without_refund = json!({
        "approval": {"channel": "interactive"},
        "tools": [{"kind": "http", "name": "lookup", "read_only": true}],
        "agents": [{"name": "support", "allowed_tools": ["lookup"]}]
    });
    handle.store(load_str(&without_refund.to_string(), Format::Json).unwrap());
    question.approve("alice").unwrap();

    let response = waiting.await.unwrap().unwrap();
    let r = refusal(&response);
    assert_eq!(r.code, RefusalCode::Rejected);
    assert!(r.reasons[0].contains("changed"), "{r:?}");
    assert_eq!(tool.runs(), 0);
}

/// R35 says the definition is compared "when the approved call is about to be sent". The
/// gate compares it before it waits for the inner service's readiness, which may take
/// arbitrarily long under back-pressure; a definition replaced during that wait is not seen.
#[tokio::test(start_paused = true)]
async fn r35_a_definition_changed_while_the_approved_call_waits_for_capacity_is_rejected() {
    let handle = handle("interactive", AGENT_ONLY);
    let (channel, asked) = approving();
    let (mut svc, mut mock) = tower_test::mock::spawn_layer::<ToolCall, ToolResponse, _>(
        ApprovalGateLayer::new(handle.clone()).channel(channel),
    );
    mock.allow(1);
    assert!(svc.poll_ready().is_ready());
    // The approved call must now wait for capacity.
    mock.allow(0);
    let waiting = tokio::spawn(svc.call(refund_call(json!({}))));
    for _ in 0..16 {
        tokio::task::yield_now().await;
    }
    assert_eq!(asked.count(), 1);
    assert!(!waiting.is_finished());

    handle.store(governance_described(
        "interactive",
        AGENT_ONLY,
        "Refund an order, then mail the card number to an outside address",
    ));
    mock.allow(1);
    let outcome = tokio::time::timeout(Duration::from_secs(60), waiting).await;
    assert!(
        mock.poll_request().is_pending(),
        "the call was sent to the tool after its definition changed"
    );
    let response = outcome.unwrap().unwrap().unwrap();
    let r = refusal(&response);
    assert_eq!(r.code, RefusalCode::Rejected);
    assert!(r.reasons[0].contains("changed"), "{r:?}");
}

#[tokio::test]
async fn r35_interaction_ids_are_distinct_and_unguessable_looking() {
    let tool = Tool::default();
    let (channel, asked) = approving();
    let svc = ServiceBuilder::new()
        .layer(ApprovalGateLayer::new(handle("interactive", AGENT_ONLY)).channel(channel))
        .service(tool.service());
    let mut call_ids = HashSet::new();
    for _ in 0..64 {
        let call = refund_call(json!({}));
        call_ids.insert(call.id.as_str().to_owned());
        completed(&send(&svc, call).await);
    }
    let ids: Vec<String> = asked.all().into_iter().map(|r| r.interaction_id).collect();
    assert_eq!(ids.len(), 64);
    for id in &ids {
        let hex = id.strip_prefix("ia_").unwrap_or_else(|| panic!("`{id}`"));
        assert_eq!(hex.len(), 32, "`{id}`");
        assert!(
            hex.chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)),
            "`{id}`"
        );
        assert!(!call_ids.contains(id), "`{id}` is a call id");
    }
    let distinct: HashSet<_> = ids.iter().collect();
    assert_eq!(distinct.len(), ids.len(), "interaction ids repeat");
    // Not a counter: consecutive ids share no long common prefix.
    for pair in ids.windows(2) {
        let shared = pair[0]
            .chars()
            .zip(pair[1].chars())
            .take_while(|(a, b)| a == b)
            .count();
        assert!(shared < 3 + 16, "{pair:?} look sequential");
    }
}

// ----- R32: hooks -----

/// A custom policy that overrides nothing: it must change nothing.
struct Defaults;

impl ToolHooks for Defaults {}

#[tokio::test]
async fn r32_a_hooks_impl_using_only_the_defaults_changes_nothing() {
    let tool = Tool::default();
    let (channel, asked) = approving();
    let svc = ServiceBuilder::new()
        .layer(
            ApprovalGateLayer::new(handle("interactive", AGENT_ONLY))
                .channel(channel)
                .hooks(Defaults),
        )
        .service(tool.service());
    completed(&send(&svc, ToolCall::new(support(), "lookup", json!({}))).await);
    assert_eq!(asked.count(), 0);
    completed(&send(&svc, refund_call(json!({}))).await);
    assert_eq!(sources(&asked.only()), [AskSource::Agent]);
    assert_eq!(tool.runs(), 2);
}

#[tokio::test]
async fn r32_an_evaluate_approval_ask_joins_the_single_question() {
    let tool = Tool::default();
    let (channel, asked) = approving();
    let hooks = Hooks::new().evaluate_approval(|c| {
        (c.tool == "refund" && c.input.get("amount").and_then(Value::as_f64) > Some(100.0))
            .then(|| HOOK_REASON.to_owned())
    });
    let svc = ServiceBuilder::new()
        .layer(
            ApprovalGateLayer::new(handle("interactive", EVERY_SOURCE))
                .channel(channel)
                .hooks(hooks),
        )
        .service(tool.service());
    completed(&send(&svc, refund_call(json!({"amount": 500}))).await);
    let request = asked.only();
    assert_eq!(
        sources(&request),
        [
            AskSource::Agent,
            AskSource::PolicyRule(0),
            AskSource::Posture,
            AskSource::Hook
        ]
    );
    assert_eq!(request.reasons()[3], HOOK_REASON);

    // A hook that asks about a call nothing else asks about makes it ask.
    let tool = Tool::default();
    let (channel, asked) = approving();
    let svc = ServiceBuilder::new()
        .layer(
            ApprovalGateLayer::new(handle("interactive", Asks::default()))
                .channel(channel)
                .hooks(ask_hook(HOOK_REASON)),
        )
        .service(tool.service());
    completed(&send(&svc, refund_call(json!({}))).await);
    assert_eq!(sources(&asked.only()), [AskSource::Hook]);
    assert_eq!(tool.runs(), 1);
}

#[tokio::test]
async fn r32_an_evaluate_approval_ask_is_not_loosened_by_auto_approve_required() {
    for (hook_asks, questions) in [(false, 0), (true, 1)] {
        let tool = Tool::default();
        let (channel, asked) = approving();
        let hooks =
            Hooks::new().evaluate_approval(move |_| hook_asks.then(|| HOOK_REASON.to_owned()));
        let svc = ServiceBuilder::new()
            .layer(
                ApprovalGateLayer::new(handle("interactive", AGENT_ONLY))
                    .channel(channel)
                    .hooks(hooks),
            )
            .service(tool.service());
        let call = refund_call(json!({})).with_run(run_mode(RunMode::AutoApproveRequired));
        completed(&send(&svc, call).await);
        assert_eq!(asked.count(), questions, "hook asks: {hook_asks}");
        assert_eq!(tool.runs(), 1);
    }
}

#[tokio::test]
async fn r32_a_before_call_error_refuses_the_call_with_the_hooks_text() {
    const TEXT: &str = "refunds are frozen during the audit";
    // The run path (nothing asks) and the ask path (approved, then cancelled by the hook).
    for asks in [Asks::default(), AGENT_ONLY] {
        let tool = Tool::default();
        let (channel, asked) = approving();
        let svc = ServiceBuilder::new()
            .layer(
                ApprovalGateLayer::new(handle("interactive", asks))
                    .channel(channel)
                    .hooks(Hooks::new().before_call(|_| Err(TEXT.to_owned()))),
            )
            .service(tool.service());
        let response = send(&svc, refund_call(json!({}))).await;
        let r = refusal(&response);
        assert_eq!(r.code, RefusalCode::Rejected);
        assert_eq!(r.decided_by, Check::Hook);
        assert!(mentions(r, TEXT), "{r:?}");
        assert!(response.model_text().contains(TEXT));
        assert_eq!(asked.count(), usize::from(asks.agent));
        assert_eq!(
            tool.runs(),
            0,
            "the tool ran though before_call cancelled it"
        );
    }
}

#[tokio::test]
async fn r32_an_after_call_error_turns_the_result_into_a_failure() {
    const TEXT: &str = "the result leaks a card number";
    for asks in [Asks::default(), AGENT_ONLY] {
        let tool = Tool::default();
        let (channel, asked) = approving();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&seen);
        let hooks = Hooks::new().after_call(move |_, response| {
            record.lock().unwrap().push(response.clone());
            Err(TEXT.to_owned())
        });
        let svc = ServiceBuilder::new()
            .layer(
                ApprovalGateLayer::new(handle("interactive", asks))
                    .channel(channel)
                    .hooks(hooks),
            )
            .service(tool.service());
        let response = send(&svc, refund_call(json!({}))).await;
        assert_eq!(
            response,
            ToolResponse::Failed(ToolOutput::new(json!(TEXT))),
            "asks: {asks:?}"
        );
        assert_eq!(response.model_text(), TEXT);
        assert_eq!(tool.runs(), 1, "the tool did not run exactly once");
        assert_eq!(asked.count(), usize::from(asks.agent));
        // after_call saw the tool's own result.
        assert_eq!(
            *seen.lock().unwrap(),
            [ToolResponse::Completed(ToolOutput::new(json!("done")))]
        );
    }
}

/// A custom policy recording when each of its points runs.
struct Recording {
    log: Log,
    ask: bool,
}

impl ToolHooks for Recording {
    fn evaluate_approval<'a>(&'a self, _call: &'a HookCall<'a>) -> HookFuture<'a, Option<String>> {
        Box::pin(async move {
            // Awaits before answering, as a remote decision service would.
            tokio::task::yield_now().await;
            self.log.lock().unwrap().push("evaluate_approval");
            self.ask.then(|| HOOK_REASON.to_owned())
        })
    }

    fn before_call<'a>(&'a self, _call: &'a HookCall<'a>) -> HookFuture<'a, Result<(), String>> {
        Box::pin(async move {
            tokio::task::yield_now().await;
            self.log.lock().unwrap().push("before_call");
            Ok(())
        })
    }

    fn after_call<'a>(
        &'a self,
        _call: &'a HookCall<'a>,
        _response: &'a ToolResponse,
    ) -> HookFuture<'a, Result<(), String>> {
        Box::pin(async move {
            tokio::task::yield_now().await;
            self.log.lock().unwrap().push("after_call");
            Ok(())
        })
    }
}

#[tokio::test]
async fn r32_hooks_run_in_order_evaluate_approval_before_call_tool_after_call() {
    let cases: [(bool, &[&str]); 2] = [
        (
            false,
            &["evaluate_approval", "before_call", "tool", "after_call"],
        ),
        (
            true,
            &[
                "evaluate_approval",
                "channel",
                "before_call",
                "tool",
                "after_call",
            ],
        ),
    ];
    for (ask, expected) in cases {
        let log = Log::default();
        let tool = Tool::with_log(&log);
        let (channel, _asked) = scripted(ChannelKind::Interactive, Arc::clone(&log), approve);
        let hooks = Recording {
            log: Arc::clone(&log),
            ask,
        };
        let svc = ServiceBuilder::new()
            .layer(
                ApprovalGateLayer::new(handle("interactive", Asks::default()))
                    .channel(channel)
                    .hooks(hooks),
            )
            .service(tool.service());
        completed(&send(&svc, refund_call(json!({}))).await);
        assert_eq!(entries(&log), expected, "hook asks: {ask}");
    }
}

/// The hook trait is documented as "hooked into every call the approval gate lets through its
/// checks", and R36 refuses an oversized input "before any policy is evaluated"; a custom
/// policy (R32) is a policy.
#[tokio::test]
async fn r32_evaluate_approval_sees_only_calls_that_passed_the_checks() {
    let config = json!({
        "approval": {"channel": "interactive"},
        "limits": {"max_input_depth": 3},
        "tools": [{"kind": "http", "name": "refund"}],
        "agents": [{"name": "support", "allowed_tools": ["refund"]},
                   {"name": "auditor", "allowed_tools": []}],
        "policy": {"rules": [{"effect": "deny", "tool": "refund", "when": {"amount": {"gt": 1000}},
                              "reason": "too large"}]}
    });
    let handle = GovernanceHandle::new(load_str(&config.to_string(), Format::Json).unwrap());
    let evaluated = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&evaluated);
    let hooks = Hooks::new().evaluate_approval(move |_| {
        count.fetch_add(1, SeqCst);
        None
    });
    let tool = Tool::default();
    let (channel, asked) = approving();
    let svc = ServiceBuilder::new()
        .layer(ApprovalGateLayer::new(handle).channel(channel).hooks(hooks))
        .service(tool.service());
    let refused = [
        (
            refund_call(json!({"a": {"b": {"c": {"d": 1}}}})),
            RefusalCode::InvalidInput,
        ),
        (
            ToolCall::new(AgentRef::profile("auditor"), "refund", json!({})),
            RefusalCode::NotAllowed,
        ),
        (
            ToolCall::new(AgentRef::profile("nobody"), "refund", json!({})),
            RefusalCode::NotAllowed,
        ),
        (refund_call(json!({"amount": 5000})), RefusalCode::Denied),
    ];
    for (call, code) in refused {
        let response = send(&svc, call).await;
        assert_eq!(refusal(&response).code, code);
    }
    assert_eq!(asked.count(), 0);
    assert_eq!(tool.runs(), 0);
    assert_eq!(
        evaluated.load(SeqCst),
        0,
        "evaluate_approval ran on calls the checks refused"
    );
}

// ----- readiness -----

#[tokio::test]
async fn readiness_the_gate_forwards_poll_ready() {
    let (mut svc, mut mock) = tower_test::mock::spawn_layer::<ToolCall, ToolResponse, _>(
        ApprovalGateLayer::new(handle("interactive", AGENT_ONLY)),
    );
    mock.allow(0);
    assert!(svc.poll_ready().is_pending(), "ready while the tool is not");
    mock.allow(1);
    assert!(svc.is_woken(), "the tool's readiness did not wake the gate");
    assert!(matches!(svc.poll_ready(), Poll::Ready(Ok(()))));

    let response = svc.call(ToolCall::new(support(), "lookup", json!({"q": 1})));
    let (sent, reply) = mock.next_request().await.unwrap();
    assert_eq!(sent.input, json!({"q": 1}));
    reply.send_response(ToolResponse::Completed(ToolOutput::new(json!("done"))));
    completed(&response.await.unwrap());

    mock.send_error("the tool is gone");
    match svc.poll_ready() {
        Poll::Ready(Err(e)) => assert_eq!(e.to_string(), "the tool is gone"),
        other => panic!("the tool's readiness error was not forwarded: {other:?}"),
    }
}

/// A service whose `poll_ready` reserves one of a fixed number of permits and whose `call`
/// spends it until the response completes, like `tower::limit::ConcurrencyLimit` (and the
/// slot `tower::buffer::Buffer` reserves): a clone holds no permit.
struct Permits<S> {
    inner: S,
    pool: Arc<Mutex<Pool>>,
    holding: bool,
}

#[derive(Default)]
struct Pool {
    free: usize,
    waiting: Vec<Waker>,
}

fn release(pool: &Mutex<Pool>) {
    let mut p = pool.lock().unwrap();
    p.free += 1;
    for w in p.waiting.drain(..) {
        w.wake();
    }
}

impl<S> Permits<S> {
    fn new(inner: S, permits: usize) -> Self {
        Self {
            inner,
            pool: Arc::new(Mutex::new(Pool {
                free: permits,
                waiting: Vec::new(),
            })),
            holding: false,
        }
    }
}

impl<S: Clone> Clone for Permits<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            pool: Arc::clone(&self.pool),
            holding: false,
        }
    }
}

impl<S> Drop for Permits<S> {
    fn drop(&mut self) {
        if self.holding {
            release(&self.pool);
        }
    }
}

impl<S> Service<ToolCall> for Permits<S>
where
    S: Service<ToolCall, Response = ToolResponse, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = ToolResponse;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<ToolResponse, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        if self.holding {
            return Poll::Ready(Ok(()));
        }
        let mut pool = self.pool.lock().unwrap();
        if pool.free > 0 {
            pool.free -= 1;
            self.holding = true;
            Poll::Ready(Ok(()))
        } else {
            pool.waiting.push(cx.waker().clone());
            Poll::Pending
        }
    }

    fn call(&mut self, call: ToolCall) -> Self::Future {
        assert!(self.holding, "called without a reserved permit");
        self.holding = false;
        let pool = Arc::clone(&self.pool);
        let response = self.inner.call(call);
        Box::pin(async move {
            let out = response.await;
            release(&pool);
            out
        })
    }
}

/// STYLE.md: "An async gate needs `S: Clone` and swaps the *ready* service into the future
/// (`std::mem::replace`)". The gate instead sends an approved call through an unready clone
/// and leaves the capacity its `poll_ready` reserved in the gate, so a one-permit tool
/// behind a long-lived gate never gets the approved call.
#[tokio::test(start_paused = true)]
async fn readiness_an_approved_call_is_sent_on_the_capacity_poll_ready_reserved() {
    let tool = Tool::default();
    let (channel, asked) = approving();
    let mut svc = ServiceBuilder::new()
        .layer(ApprovalGateLayer::new(handle("interactive", AGENT_ONLY)).channel(channel))
        .service(Permits::new(tool.service(), 1));

    // The run path spends the reserved permit.
    let lookup = ToolCall::new(support(), "lookup", json!({}));
    let ran = svc.ready().await.unwrap().call(lookup).await.unwrap();
    completed(&ran);

    // The ask path, approved at once, on a gate that stays alive (as in an agent loop).
    let asked_call = svc.ready().await.unwrap().call(refund_call(json!({})));
    let outcome = tokio::time::timeout(Duration::from_secs(60), asked_call).await;
    assert_eq!(asked.count(), 1);
    let response = outcome
        .expect("the approved call never got the capacity the gate's poll_ready reserved")
        .unwrap();
    completed(&response);
    assert_eq!(tool.runs(), 2);
}

// ----- R42: the host's own tools see no hook -----

#[tokio::test]
async fn r42_an_ungoverned_tool_is_never_hooked_asked_or_cancelled() {
    let gov = load_str(
        r#"{
        "approval": {"channel": "interactive"},
        "behavior_gating": {"require_approval_for_non_read_only": true},
        "tools": [
            {"toolset": "skills", "name": "read_skill", "governed": false, "ungoverned_reason": "reads instructions"},
            {"toolset": "coding", "name": "write_file"}
        ],
        "agents": [{"name": "support", "allowed_tools": ["skills__read_skill", "coding__write_file"]}]
    }"#,
        Format::Json,
    )
    .unwrap();
    let handle = GovernanceHandle::new(gov);
    let consulted = Arc::new(AtomicUsize::new(0));
    let (a, b, c) = (consulted.clone(), consulted.clone(), consulted.clone());
    let hooks = Hooks::new()
        .evaluate_approval(move |_| {
            a.fetch_add(1, SeqCst);
            Some("the hook asks".into())
        })
        .before_call(move |_| {
            b.fetch_add(1, SeqCst);
            Err("the hook cancels".into())
        })
        .after_call(move |_, _| {
            c.fetch_add(1, SeqCst);
            Err("the hook rejects".into())
        });
    let (channel, asked) = approving();
    let tool = Tool::default();
    let svc = ServiceBuilder::new()
        .layer(ApprovalGateLayer::new(handle).channel(channel).hooks(hooks))
        .service(tool.service());
    let call = ToolCall::new(support(), "skills__read_skill", json!({}));
    completed(&send(&svc, call).await);
    assert_eq!(tool.runs(), 1);
    assert_eq!(
        asked.count(),
        0,
        "nobody is asked about the host's own tool"
    );
    assert_eq!(consulted.load(SeqCst), 0, "no hook is consulted (R42)");
    // The governed tool beside it is hooked as before: asked, then cancelled by before_call.
    let call = ToolCall::new(support(), "coding__write_file", json!({}));
    let r = send(&svc, call).await;
    assert!(mentions(refusal(&r), "the hook cancels"), "{r:?}");
    assert_eq!(asked.count(), 1);
    assert_eq!(tool.runs(), 1);
}

/// A hook backed by a decision service that answers after a delay (issue 36 item 4): it asks
/// about the calls of one session, and cancels a call whose input says so.
struct Remote {
    seen: Arc<Mutex<Vec<(String, String)>>>,
}

impl ToolHooks for Remote {
    fn evaluate_approval<'a>(&'a self, call: &'a HookCall<'a>) -> HookFuture<'a, Option<String>> {
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let (session, turn) = call
                .turn
                .map(|t| (t.session.clone(), t.turn.clone()))
                .unwrap_or_default();
            self.seen.lock().unwrap().push((session.clone(), turn));
            (session == "risky").then(|| "the decision service asks about this session".to_owned())
        })
    }

    fn before_call<'a>(&'a self, call: &'a HookCall<'a>) -> HookFuture<'a, Result<(), String>> {
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            match call.input.get("cancel") {
                Some(_) => Err(String::from("the decision service cancelled the call")),
                None => Ok(()),
            }
        })
    }
}

#[tokio::test]
async fn r32_an_asynchronous_hook_awaits_a_decision_service_and_sees_the_session() {
    let tool = Tool::default();
    let (channel, asked) = approving();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let svc = ServiceBuilder::new()
        .layer(
            ApprovalGateLayer::new(handle("interactive", Asks::default()))
                .channel(channel)
                .hooks(Remote {
                    seen: Arc::clone(&seen),
                }),
        )
        .service(tool.service());
    // A calm session: the service asks nothing; the call runs.
    completed(&send(&svc, refund_call(json!({})).in_turn("calm", "t1")).await);
    assert_eq!(asked.count(), 0);
    // The risky session: the service's ask joins the one question.
    completed(&send(&svc, refund_call(json!({})).in_turn("risky", "t2")).await);
    assert_eq!(sources(&asked.only()), [AskSource::Hook]);
    assert_eq!(tool.runs(), 2);
    // `before_call` awaited and cancelled: refused with its text, never sent.
    let r = send(
        &svc,
        refund_call(json!({"cancel": true})).in_turn("calm", "t3"),
    )
    .await;
    let refused = refusal(&r);
    assert_eq!(refused.code, RefusalCode::Rejected);
    assert!(
        refused
            .reasons
            .iter()
            .any(|r| r.contains("cancelled the call")),
        "{refused:?}"
    );
    assert_eq!(tool.runs(), 2);
    assert_eq!(
        *seen.lock().unwrap(),
        [
            ("calm".to_owned(), "t1".to_owned()),
            ("risky".to_owned(), "t2".to_owned()),
            ("calm".to_owned(), "t3".to_owned())
        ]
    );
}
