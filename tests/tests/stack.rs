//! Whole-stack tests of the tower layers (SPEC R14, R16, R26, R36; STYLE "The shape of a
//! layer"): exposure → confidentiality → air gap → approval gate, composed in a real
//! `tower::ServiceBuilder` over `tower::service_fn` and over a `tower_test` mock.
//!
//! What is checked here:
//!
//! - readiness is forwarded through every layer, alone and composed (a mock that is not
//!   ready makes the stack not ready; a readiness error passes through unchanged);
//! - a refused call never reaches the inner service, for every kind of refusal, and nobody
//!   is asked about it; the refusal carries its code, the deciding [`Check`] and reasons,
//!   and equals what the pure engine decides for the same call;
//! - each filter refuses at its own layer (exposure before confidentiality before the air
//!   gap before the gate), so nothing behind a refusing layer sees the call;
//! - an allowed call (run or asked-and-approved) reaches the inner service exactly once,
//!   with its input unchanged;
//! - the inner service's error type, and its error values, pass through unchanged.

use std::convert::Infallible;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;

use serde_json::{Value, json};
use toolgate::approval::{ApprovalChannel, ApprovalGateLayer, ApprovalOutcome, FnChannel};
use toolgate::{AirGapLayer, ConfidentialityLayer, ExposureLayer, GovernanceHandle};
use toolgate_core::{
    AgentRef, ChannelKind, Check, Decision, Refusal, RefusalCode, RunContext, RunMode, ToolCall,
    ToolOutput, ToolResponse, Verdict,
};
use toolgate_engine::config::{Format, load_str};
use toolgate_engine::{CallInput, CallView, Governance, PolicyState};
use tower::layer::util::{Identity, Stack};
use tower::{Layer, Service, ServiceBuilder, ServiceExt, service_fn};
use tower_test::mock::{self, Mock};

// ---------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------

/// One configuration with a tool for every refusal kind (SPEC §7 CONFIG shape).
fn base_config(channel: &str) -> Value {
    json!({
        "approval": {"channel": channel},
        "air_gapped": true,
        "limits": {"max_input_bytes": 256},
        "tools": [
            {"kind": "http", "name": "lookup", "read_only": true},
            {"kind": "http", "name": "wipe"},
            {"toolset": "memory", "name": "save", "confidential": true},
            {"toolset": "memory", "name": "recall"},
            {"kind": "http", "name": "fetch", "network": "egress"},
            {"kind": "http", "name": "drop_table", "approval": "deny"},
            {"kind": "http", "name": "refund_order"},
            {"kind": "http", "name": "deploy", "approval": "require_approval"}
        ],
        "agents": [
            {"name": "support", "confidential": true,
             "allowed_tools": ["lookup", "memory__save", "memory__recall", "fetch", "drop_table",
                               "refund_order", "deploy"]},
            {"name": "helper", "as_tool": true, "allowed_tools": ["lookup", "deploy"]}
        ],
        "policy": {"rules": [{"effect": "deny", "tool": "refund_*", "reason": "refunds are closed"}]}
    })
}

fn load(config: &Value) -> Governance {
    load_str(&config.to_string(), Format::Json)
        .unwrap_or_else(|e| panic!("the fixture configuration must load: {e}"))
}

/// An input nested `depth` levels deep (SPEC §8: `{}` is depth 1).
fn nested(depth: usize) -> Value {
    let mut v = json!({});
    for _ in 1..depth {
        v = json!({ "a": v });
    }
    v
}

fn call(agent: &str, tool: &str, input: Value, run: RunContext) -> ToolCall {
    ToolCall::new(AgentRef::profile(agent), tool, input).with_run(run)
}

fn run_mode(mode: RunMode) -> RunContext {
    RunContext {
        mode,
        background: false,
    }
}

fn decide(gov: &Governance, agent: &str, tool: &str, input: &Value, run: RunContext) -> Decision {
    let tool = toolgate_core::ToolRef::Name(tool.to_owned());
    let agent = AgentRef::profile(agent);
    gov.decide(CallView {
        tool: &tool,
        agent: &agent,
        input: CallInput::Value(input),
        run,
    })
}

/// An approval channel of `kind` that approves every question and counts them.
fn approving(kind: ChannelKind) -> (Arc<dyn ApprovalChannel>, Arc<AtomicUsize>) {
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&asked);
    let channel = FnChannel::new(kind, move |_req| {
        counter.fetch_add(1, Ordering::SeqCst);
        ApprovalOutcome::Approved {
            approver: String::from("alice"),
        }
    });
    (Arc::new(channel), asked)
}

/// What the inner `service_fn` saw: the wire name and the input of every call.
type Seen = Arc<Mutex<Vec<(String, Value)>>>;

/// A tool service that records every call and echoes its input.
fn recorder() -> (
    impl Service<ToolCall, Response = ToolResponse, Error = Infallible, Future: Send + 'static>
    + Clone
    + Send
    + 'static,
    Seen,
) {
    let seen: Seen = Arc::default();
    let log = Arc::clone(&seen);
    let svc = service_fn(move |call: ToolCall| {
        let log = Arc::clone(&log);
        async move {
            let input = call.input.clone();
            log.lock()
                .unwrap()
                .push((call.tool.display_name(), input.clone()));
            Ok::<_, Infallible>(ToolResponse::Completed(ToolOutput::new(input)))
        }
    });
    (svc, seen)
}

/// The four layers, outermost first (`ServiceBuilder` nests each new layer inside).
type Layers = ServiceBuilder<
    Stack<ApprovalGateLayer, Stack<AirGapLayer, Stack<ConfidentialityLayer, Outer>>>,
>;
/// The outermost layer.
type Outer = Stack<ExposureLayer, Identity>;

/// The four layers, outermost first, as one `ServiceBuilder` (itself a `Layer`).
fn layers(handle: &GovernanceHandle, channel: Arc<dyn ApprovalChannel>) -> Layers {
    ServiceBuilder::new()
        .layer(ExposureLayer::new(handle.clone()))
        .layer(ConfidentialityLayer::new(handle.clone()))
        .layer(AirGapLayer::new(handle.clone()))
        .layer(ApprovalGateLayer::new(handle.clone()).shared_channel(channel))
}

fn refusal_of(response: &ToolResponse) -> &Refusal {
    response
        .refusal()
        .unwrap_or_else(|| panic!("expected a refusal, got {response:?}"))
}

// ---------------------------------------------------------------------------------------
// Every refusal kind
// ---------------------------------------------------------------------------------------

struct RefusalCase {
    what: &'static str,
    gov: Governance,
    agent: &'static str,
    tool: &'static str,
    input: Value,
    run: RunContext,
    code: RefusalCode,
    check: Check,
    /// How many of the layers behind exposure, confidentiality and the air gap see the call
    /// (0 = exposure refuses, 3 = the gate refuses).
    passes: usize,
}

fn refusal_cases() -> Vec<RefusalCase> {
    let interactive = load(&base_config("interactive"));
    let no_channel = load(&base_config("none"));
    let unreadable = interactive
        .with_policy(PolicyState::Unreadable(String::from(
            "the policy store returned malformed JSON",
        )))
        .unwrap();
    let plain = RunContext::default();
    let case = |what, gov: &Governance, agent, tool, input, run, code, check, passes| RefusalCase {
        what,
        gov: gov.clone(),
        agent,
        tool,
        input,
        run,
        code,
        check,
        passes,
    };
    vec![
        case(
            "unknown tool",
            &interactive,
            "support",
            "no_such_tool",
            json!({}),
            plain,
            RefusalCode::UnknownTool,
            Check::UnknownTool,
            0,
        ),
        case(
            "input over max_input_bytes",
            &interactive,
            "support",
            "lookup",
            json!({ "blob": "x".repeat(300) }),
            plain,
            RefusalCode::InvalidInput,
            Check::InputBounds,
            0,
        ),
        case(
            "input nested past max_input_depth",
            &interactive,
            "support",
            "lookup",
            nested(65),
            plain,
            RefusalCode::InvalidInput,
            Check::InputBounds,
            0,
        ),
        case(
            "input that is not an object",
            &interactive,
            "support",
            "lookup",
            json!([1, 2]),
            plain,
            RefusalCode::InvalidInput,
            Check::InputBounds,
            0,
        ),
        case(
            "tool outside the allowed names",
            &interactive,
            "support",
            "wipe",
            json!({}),
            plain,
            RefusalCode::NotAllowed,
            Check::Allowed,
            0,
        ),
        case(
            "unknown agent profile",
            &interactive,
            "nobody",
            "lookup",
            json!({}),
            plain,
            RefusalCode::NotAllowed,
            Check::Allowed,
            0,
        ),
        case(
            "confidential agent, withheld tool",
            &interactive,
            "support",
            "memory__save",
            json!({}),
            plain,
            RefusalCode::Confidential,
            Check::Confidentiality,
            1,
        ),
        case(
            "egress tool on an air-gapped host",
            &interactive,
            "support",
            "fetch",
            json!({}),
            plain,
            RefusalCode::AirGapped,
            Check::AirGap,
            2,
        ),
        case(
            "effective mode deny",
            &interactive,
            "support",
            "drop_table",
            json!({}),
            plain,
            RefusalCode::Denied,
            Check::AgentMode,
            3,
        ),
        case(
            "tenant rule deny",
            &interactive,
            "support",
            "refund_order",
            json!({"amount": 5}),
            plain,
            RefusalCode::Denied,
            Check::TenantPolicy,
            3,
        ),
        case(
            "ask with approval channel none",
            &no_channel,
            "support",
            "deploy",
            json!({}),
            plain,
            RefusalCode::NoApprovalChannel,
            Check::Routing,
            3,
        ),
        case(
            "agent running as a tool, wrapped tool",
            &interactive,
            "helper",
            "deploy",
            json!({}),
            plain,
            RefusalCode::NoApprovalChannel,
            Check::AgentMode,
            3,
        ),
        case(
            "run mode auto_reject_required",
            &interactive,
            "support",
            "deploy",
            json!({}),
            run_mode(RunMode::AutoRejectRequired),
            RefusalCode::Rejected,
            Check::Routing,
            3,
        ),
        case(
            "background task, interactive channel",
            &interactive,
            "support",
            "deploy",
            json!({}),
            RunContext {
                mode: RunMode::UseAgentPolicy,
                background: true,
            },
            RefusalCode::Rejected,
            Check::Routing,
            3,
        ),
        case(
            "stored policy unreadable",
            &unreadable,
            "support",
            "lookup",
            json!({}),
            plain,
            RefusalCode::PolicyUnreadable,
            Check::TenantPolicy,
            3,
        ),
    ]
}

/// The engine's own decision for a case: the stack must give exactly this refusal.
fn expected_refusal(case: &RefusalCase) -> Refusal {
    let d = decide(&case.gov, case.agent, case.tool, &case.input, case.run);
    assert_eq!(
        d.verdict,
        Verdict::Refused(case.code),
        "{}: the engine itself must refuse",
        case.what
    );
    let r = d.refusal().unwrap();
    assert_eq!(r.decided_by, case.check, "{}", case.what);
    assert!(
        !r.reasons.is_empty() && r.reasons.iter().all(|s| !s.trim().is_empty()),
        "{}",
        case.what
    );
    r
}

#[tokio::test]
async fn r14_refused_call_never_reaches_inner_service_fn_for_every_refusal_kind() {
    for case in refusal_cases() {
        let want = expected_refusal(&case);
        let handle = GovernanceHandle::new(case.gov.clone());
        let (channel, asked) = approving(ChannelKind::Interactive);
        let (inner, seen) = recorder();
        let stack = layers(&handle, channel).service(inner);
        let response = stack
            .oneshot(call(case.agent, case.tool, case.input.clone(), case.run))
            .await
            .unwrap();
        let got = refusal_of(&response);
        assert_eq!(got.code, case.code, "{}", case.what);
        assert_eq!(got.decided_by, case.check, "{}", case.what);
        assert!(!got.reasons.is_empty(), "{}", case.what);
        assert_eq!(
            got, &want,
            "{}: the stack's refusal is the engine's",
            case.what
        );
        assert!(
            seen.lock().unwrap().is_empty(),
            "{}: a refused call reached the tool",
            case.what
        );
        assert_eq!(
            asked.load(Ordering::SeqCst),
            0,
            "{}: nobody is asked about a refused call",
            case.what
        );
    }
}

#[tokio::test]
async fn r14_refused_call_never_reaches_inner_mock_for_every_refusal_kind() {
    for case in refusal_cases() {
        let want = expected_refusal(&case);
        let handle = GovernanceHandle::new(case.gov.clone());
        let (channel, asked) = approving(ChannelKind::Interactive);
        let (mut svc, mut mock) =
            mock::spawn_layer::<ToolCall, ToolResponse, _>(layers(&handle, channel));
        assert!(svc.poll_ready::<ToolCall>().is_ready(), "{}", case.what);
        let response = svc
            .call(call(case.agent, case.tool, case.input.clone(), case.run))
            .await
            .unwrap();
        assert_eq!(refusal_of(&response), &want, "{}", case.what);
        assert!(
            mock.poll_request().is_pending(),
            "{}: the mock received a refused call",
            case.what
        );
        assert_eq!(asked.load(Ordering::SeqCst), 0, "{}", case.what);
    }
}

/// A probe between two layers: counts the calls that got past the layer in front of it.
#[derive(Clone, Default)]
struct Probe(Arc<AtomicUsize>);

impl Probe {
    fn hits(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

#[tokio::test]
async fn r14_each_filter_refuses_at_its_own_layer_in_check_order() {
    for case in refusal_cases() {
        let handle = GovernanceHandle::new(case.gov.clone());
        let (channel, _asked) = approving(ChannelKind::Interactive);
        let (inner, seen) = recorder();
        let probes: [Probe; 3] = Default::default();
        let tap = |p: &Probe| {
            let p = p.clone();
            move |c: ToolCall| {
                p.0.fetch_add(1, Ordering::SeqCst);
                c
            }
        };
        let stack = ServiceBuilder::new()
            .layer(ExposureLayer::new(handle.clone()))
            .map_request(tap(&probes[0]))
            .layer(ConfidentialityLayer::new(handle.clone()))
            .map_request(tap(&probes[1]))
            .layer(AirGapLayer::new(handle.clone()))
            .map_request(tap(&probes[2]))
            .layer(ApprovalGateLayer::new(handle.clone()).shared_channel(channel))
            .service(inner);
        let response = stack
            .oneshot(call(case.agent, case.tool, case.input.clone(), case.run))
            .await
            .unwrap();
        assert_eq!(refusal_of(&response).code, case.code, "{}", case.what);
        let hits: Vec<usize> = probes.iter().map(Probe::hits).collect();
        let want: Vec<usize> = (0..3).map(|i| usize::from(i < case.passes)).collect();
        assert_eq!(hits, want, "{}: which layers the call got past", case.what);
        assert!(seen.lock().unwrap().is_empty(), "{}", case.what);
    }
}

// ---------------------------------------------------------------------------------------
// Allowed calls
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn r16_allowed_call_reaches_inner_exactly_once_with_input_unchanged() {
    let gov = load(&base_config("interactive"));
    let handle = GovernanceHandle::new(gov.clone());
    let input = json!({"query": "order 42", "nested": {"list": [1, 2.5, "x", null]}, "k": true});
    for (tool, run, asks) in [
        ("lookup", RunContext::default(), 0),
        ("memory__recall", RunContext::default(), 0),
        ("deploy", RunContext::default(), 1),
        ("deploy", run_mode(RunMode::AutoApproveRequired), 0),
    ] {
        let d = decide(&gov, "support", tool, &input, run);
        assert!(
            matches!(d.verdict, Verdict::Run { .. } | Verdict::Ask { .. }),
            "{tool}: {d:?}"
        );
        let (channel, asked) = approving(ChannelKind::Interactive);
        let (inner, seen) = recorder();
        let stack = layers(&handle, channel).service(inner);
        let response = stack
            .oneshot(call("support", tool, input.clone(), run))
            .await
            .unwrap();
        assert_eq!(
            response,
            ToolResponse::Completed(ToolOutput::new(input.clone())),
            "{tool}"
        );
        assert_eq!(
            *seen.lock().unwrap(),
            vec![(tool.to_owned(), input.clone())],
            "{tool}: exactly one call, input unchanged"
        );
        assert_eq!(asked.load(Ordering::SeqCst), asks, "{tool}: {run:?}");
    }
}

#[tokio::test]
async fn r16_allowed_call_reaches_mock_exactly_once_with_input_unchanged() {
    let gov = load(&base_config("interactive"));
    let handle = GovernanceHandle::new(gov);
    for (tool, asks) in [("lookup", 0), ("deploy", 1)] {
        let input = json!({"text": "héllo\n", "n": [[1]]});
        let (channel, asked) = approving(ChannelKind::Interactive);
        let (mut svc, mut mock) =
            mock::spawn_layer::<ToolCall, ToolResponse, _>(layers(&handle, channel));
        assert!(svc.poll_ready::<ToolCall>().is_ready());
        let pending =
            tokio::spawn(svc.call(call("support", tool, input.clone(), RunContext::default())));
        let (req, reply) = mock
            .next_request()
            .await
            .expect("the call reaches the mock");
        assert_eq!(req.tool.display_name(), tool);
        assert_eq!(req.agent, AgentRef::profile("support"));
        assert_eq!(req.input, input, "{tool}: input unchanged");
        reply.send_response(ToolResponse::Completed(ToolOutput::new(json!("done"))));
        let response = pending.await.unwrap().unwrap();
        assert_eq!(
            response,
            ToolResponse::Completed(ToolOutput::new(json!("done")))
        );
        assert!(mock.poll_request().is_pending(), "{tool}: exactly once");
        assert_eq!(asked.load(Ordering::SeqCst), asks, "{tool}");
    }
}

// ---------------------------------------------------------------------------------------
// Readiness
// ---------------------------------------------------------------------------------------

/// The mock's error type (`tower_test`'s boxed error).
type MockError = Box<dyn std::error::Error + Send + Sync>;

/// A readiness error of the inner service.
#[derive(Debug, PartialEq, Eq)]
struct Overloaded(u32);

impl fmt::Display for Overloaded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "overloaded ({})", self.0)
    }
}

impl std::error::Error for Overloaded {}

fn assert_forwards_readiness<L>(what: &str, layer: L)
where
    L: Layer<Mock<ToolCall, ToolResponse>>,
    L::Service: Service<ToolCall, Response = ToolResponse, Error = MockError>,
{
    let (mut svc, mut mock) = mock::spawn_layer::<ToolCall, ToolResponse, L>(layer);
    mock.allow(0);
    assert!(
        svc.poll_ready::<ToolCall>().is_pending(),
        "{what}: inner not ready → not ready"
    );
    mock.allow(1);
    assert!(svc.is_woken(), "{what}: the inner wake-up is forwarded");
    assert!(
        matches!(svc.poll_ready::<ToolCall>(), Poll::Ready(Ok(()))),
        "{what}: inner ready → ready"
    );
}

fn assert_forwards_readiness_error<L>(what: &str, layer: L)
where
    L: Layer<Mock<ToolCall, ToolResponse>>,
    L::Service: Service<ToolCall, Response = ToolResponse, Error = MockError>,
{
    let (mut svc, mut mock) = mock::spawn_layer::<ToolCall, ToolResponse, L>(layer);
    mock.allow(0);
    assert!(svc.poll_ready::<ToolCall>().is_pending(), "{what}");
    mock.send_error(Overloaded(7));
    match svc.poll_ready::<ToolCall>() {
        Poll::Ready(Err(e)) => assert_eq!(
            e.downcast_ref::<Overloaded>(),
            Some(&Overloaded(7)),
            "{what}: the inner readiness error passes through unchanged"
        ),
        other => panic!("{what}: expected the inner readiness error, got {other:?}"),
    }
}

#[test]
fn readiness_is_forwarded_by_every_layer_alone_and_composed() {
    let handle = GovernanceHandle::new(load(&base_config("interactive")));
    let (channel, _) = approving(ChannelKind::Interactive);
    assert_forwards_readiness("exposure", ExposureLayer::new(handle.clone()));
    assert_forwards_readiness("confidentiality", ConfidentialityLayer::new(handle.clone()));
    assert_forwards_readiness("air gap", AirGapLayer::new(handle.clone()));
    assert_forwards_readiness(
        "approval gate",
        ApprovalGateLayer::new(handle.clone()).shared_channel(Arc::clone(&channel)),
    );
    assert_forwards_readiness("whole stack", layers(&handle, Arc::clone(&channel)));

    assert_forwards_readiness_error("exposure", ExposureLayer::new(handle.clone()));
    assert_forwards_readiness_error("confidentiality", ConfidentialityLayer::new(handle.clone()));
    assert_forwards_readiness_error("air gap", AirGapLayer::new(handle.clone()));
    assert_forwards_readiness_error(
        "approval gate",
        ApprovalGateLayer::new(handle.clone()).shared_channel(Arc::clone(&channel)),
    );
    assert_forwards_readiness_error("whole stack", layers(&handle, channel));
}

#[tokio::test]
async fn readiness_pending_stack_serves_once_the_inner_service_is_ready() {
    let handle = GovernanceHandle::new(load(&base_config("interactive")));
    let (channel, _) = approving(ChannelKind::Interactive);
    let (mut svc, mut mock) =
        mock::spawn_layer::<ToolCall, ToolResponse, _>(layers(&handle, channel));
    mock.allow(0);
    assert!(svc.poll_ready::<ToolCall>().is_pending());
    mock.allow(1);
    assert!(svc.is_woken());
    assert!(svc.poll_ready::<ToolCall>().is_ready());
    let pending = tokio::spawn(svc.call(call(
        "support",
        "lookup",
        json!({"q": 1}),
        RunContext::default(),
    )));
    let (req, reply) = mock.next_request().await.unwrap();
    assert_eq!(req.input, json!({"q": 1}));
    reply.send_response(ToolResponse::Completed(ToolOutput::new(json!("ok"))));
    assert!(matches!(
        pending.await.unwrap().unwrap(),
        ToolResponse::Completed(_)
    ));
    // The one permitted request is used: the stack is not ready again until more are allowed.
    assert!(svc.poll_ready::<ToolCall>().is_pending());
}

// ---------------------------------------------------------------------------------------
// The inner error type
// ---------------------------------------------------------------------------------------

/// The tool transport's own error type.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TransportError(u32);

fn assert_error_type<S: Service<ToolCall, Error = TransportError>>(_: &S) {}

#[tokio::test]
async fn style_inner_error_type_passes_through_unchanged() {
    let handle = GovernanceHandle::new(load(&base_config("interactive")));
    let (channel, asked) = approving(ChannelKind::Interactive);
    let failing =
        service_fn(|_call: ToolCall| async { Err::<ToolResponse, _>(TransportError(503)) });
    let stack = layers(&handle, channel).service(failing);
    // Compile-time: no layer that only decides changes the error type.
    assert_error_type(&stack);

    // The run path and the asked-and-approved path both hand back the inner error value.
    for tool in ["lookup", "deploy"] {
        let got = stack
            .clone()
            .oneshot(call("support", tool, json!({}), RunContext::default()))
            .await;
        assert_eq!(got, Err(TransportError(503)), "{tool}");
    }
    assert_eq!(asked.load(Ordering::SeqCst), 1);

    // A refusal is a response, never an error.
    let refused = stack
        .oneshot(call("support", "wipe", json!({}), RunContext::default()))
        .await;
    assert_eq!(
        refused.map(|r| r.refusal().map(|r| r.code)),
        Ok(Some(RefusalCode::NotAllowed))
    );
}

#[tokio::test]
async fn style_inner_error_value_passes_through_a_mock_unchanged() {
    let handle = GovernanceHandle::new(load(&base_config("interactive")));
    let (channel, _) = approving(ChannelKind::Interactive);
    for tool in ["lookup", "deploy"] {
        let (mut svc, mut mock) =
            mock::spawn_layer::<ToolCall, ToolResponse, _>(layers(&handle, Arc::clone(&channel)));
        assert!(svc.poll_ready::<ToolCall>().is_ready());
        let pending =
            tokio::spawn(svc.call(call("support", tool, json!({}), RunContext::default())));
        let (_req, reply) = mock.next_request().await.unwrap();
        reply.send_error(Overloaded(42));
        let err = pending.await.unwrap().unwrap_err();
        assert_eq!(
            err.downcast_ref::<Overloaded>(),
            Some(&Overloaded(42)),
            "{tool}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Capacity reserved by `poll_ready` (STYLE: "swaps the *ready* service into the future")
// ---------------------------------------------------------------------------------------

/// A pool of permits shared by the clones of [`OnePermit`].
#[derive(Default)]
struct Pool {
    state: Mutex<(usize, Vec<std::task::Waker>)>,
}

impl Pool {
    fn release(&self) {
        let wakers = {
            let mut s = self.state.lock().unwrap();
            s.0 += 1;
            std::mem::take(&mut s.1)
        };
        wakers.into_iter().for_each(std::task::Waker::wake);
    }
}

/// A tool service with bounded capacity in the style of `tower::limit::ConcurrencyLimit`:
/// `poll_ready` reserves a permit, `call` moves it into the response, and a clone starts
/// without one.
struct OnePermit {
    pool: Arc<Pool>,
    held: bool,
}

impl OnePermit {
    fn new(permits: usize) -> Self {
        let pool = Pool::default();
        pool.state.lock().unwrap().0 = permits;
        Self {
            pool: Arc::new(pool),
            held: false,
        }
    }
}

impl Clone for OnePermit {
    fn clone(&self) -> Self {
        Self {
            pool: Arc::clone(&self.pool),
            held: false,
        }
    }
}

impl Drop for OnePermit {
    fn drop(&mut self) {
        if self.held {
            self.pool.release();
        }
    }
}

impl Service<ToolCall> for OnePermit {
    type Response = ToolResponse;
    type Error = Infallible;
    type Future = std::future::Ready<Result<ToolResponse, Infallible>>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Result<(), Infallible>> {
        if self.held {
            return Poll::Ready(Ok(()));
        }
        let mut s = self.pool.state.lock().unwrap();
        if s.0 > 0 {
            s.0 -= 1;
            self.held = true;
            Poll::Ready(Ok(()))
        } else {
            s.1.push(cx.waker().clone());
            Poll::Pending
        }
    }

    fn call(&mut self, call: ToolCall) -> Self::Future {
        assert!(self.held, "called without a reserved permit");
        self.held = false;
        // The call completes at once: its permit goes straight back to the pool.
        self.pool.release();
        std::future::ready(Ok(ToolResponse::Completed(ToolOutput::new(call.input))))
    }
}

#[tokio::test]
async fn style_run_path_uses_the_capacity_reserved_by_poll_ready() {
    let handle = GovernanceHandle::new(load(&base_config("interactive")));
    let (channel, _) = approving(ChannelKind::Interactive);
    let mut svc = layers(&handle, channel).service(OnePermit::new(1));
    for _ in 0..3 {
        let ready = svc.ready().await.unwrap();
        let fut = ready.call(call("support", "lookup", json!({}), RunContext::default()));
        let got = tokio::time::timeout(std::time::Duration::from_secs(2), fut).await;
        assert!(matches!(got, Ok(Ok(ToolResponse::Completed(_)))), "{got:?}");
    }
}

/// Regression guard for the ask path of `ApprovalGate::call` (STYLE: "swaps the *ready*
/// service into the future"): the capacity the stack reserved in `poll_ready` must reach
/// the approved call. An earlier gate sent the approved call through an unready clone while
/// the ready original kept its reservation, so with an inner service of capacity 1 kept
/// alive by its owner (a server loop, a `Buffer` worker) the approved call hung.
#[tokio::test]
async fn style_approved_call_uses_the_capacity_reserved_by_poll_ready() {
    let handle = GovernanceHandle::new(load(&base_config("interactive")));
    let (channel, asked) = approving(ChannelKind::Interactive);
    let mut svc = layers(&handle, channel).service(OnePermit::new(1));
    let ready = svc.ready().await.unwrap();
    let fut = ready.call(call("support", "deploy", json!({}), RunContext::default()));
    let got = tokio::time::timeout(std::time::Duration::from_secs(2), fut).await;
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    assert!(
        matches!(got, Ok(Ok(ToolResponse::Completed(_)))),
        "the approved call did not get the capacity its stack reserved: {got:?}"
    );
}
