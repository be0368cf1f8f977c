//! Stack overhead: (a) the floor, a bare `tower::service_fn` driven through `poll_ready` and
//! `call`, against (b) the full toolgate stack (exposure → confidentiality → air gap →
//! approval gate) over the same `service_fn`, deciding the allowed call against a 200-rule
//! tenant policy. For the breakdown, the same group also runs the stack with no tenant
//! rules, the three filter layers alone, the composite `ToolgateLayer`, the approval
//! gate alone and `decide` alone (no layer; in the stacks' harness and hot). One criterion
//! group,
//! so the ratios come from one run.
//!
//! Harness, the same for every bench here: the call is built outside the timed region
//! (`iter_batched`, 32 calls a batch), then `poll_ready`, `call` and one `poll` of the
//! response future with a no-op waker. Every future in the path is ready at once, so no runtime is needed; a poll
//! that is not ready panics rather than measuring something else.

use std::convert::Infallible;
use std::future::{Future, Ready, ready};
use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use criterion::measurement::WallTime;
use criterion::{BatchSize, BenchmarkGroup, Criterion, criterion_group, criterion_main};
use toolgate::approval::ApprovalGateLayer;
use toolgate::{AirGapLayer, ConfidentialityLayer, ExposureLayer, GovernanceHandle, ToolgateLayer};
use toolgate_benches::{CALL_WIRE_NAME, call_agent, call_input, governance};
use toolgate_core::{RunContext, ToolCall, ToolOutput, ToolRef, ToolResponse};
use toolgate_engine::{CallInput, CallView};
use tower::{Service, ServiceBuilder, service_fn};

/// The tool: answers at once by echoing the call's input, with no allocation of its own.
/// The input moves into the response, which criterion drops outside the timed region, so
/// neither (a) nor (b) times freeing the input's JSON tree: only the call's own strings and
/// extensions are freed inside.
fn tool(call: ToolCall) -> Ready<Result<ToolResponse, Infallible>> {
    ready(Ok(ToolResponse::Completed(ToolOutput::new(call.input))))
}

/// One call through `svc`: ready, call, poll once.
fn drive<S>(svc: &mut S, call: ToolCall) -> ToolResponse
where
    S: Service<ToolCall, Response = ToolResponse, Error = Infallible>,
{
    let mut cx = Context::from_waker(Waker::noop());
    match svc.poll_ready(&mut cx) {
        Poll::Ready(Ok(())) => {}
        Poll::Ready(Err(never)) => match never {},
        Poll::Pending => panic!("the service was not ready"),
    }
    let future = pin!(svc.call(call));
    match future.poll(&mut cx) {
        Poll::Ready(Ok(response)) => response,
        Poll::Ready(Err(never)) => match never {},
        Poll::Pending => panic!("the response future was not ready"),
    }
}

/// Calls built per batch, just before they are driven: few enough that each call's input
/// is still in cache when its turn comes, as an input just parsed from the wire would be,
/// and enough that the timer's own cost is spread thin.
const CALLS_PER_BATCH: u64 = 32;

fn make_call() -> ToolCall {
    ToolCall::new(call_agent(), CALL_WIRE_NAME, call_input())
}

fn full_stack(rules: usize) -> impl Service<ToolCall, Response = ToolResponse, Error = Infallible> {
    let handle = GovernanceHandle::new(governance(rules));
    ServiceBuilder::new()
        .layer(ExposureLayer::new(handle.clone()))
        .layer(ConfidentialityLayer::new(handle.clone()))
        .layer(AirGapLayer::new(handle.clone()))
        .layer(ApprovalGateLayer::new(handle))
        .service(service_fn(tool))
}

/// Benches one service on the allow path, after checking that the call reaches the tool.
fn run<S>(group: &mut BenchmarkGroup<'_, WallTime>, name: &str, mut svc: S)
where
    S: Service<ToolCall, Response = ToolResponse, Error = Infallible>,
{
    let response = drive(&mut svc, make_call());
    assert!(
        matches!(response, ToolResponse::Completed(_)),
        "{name}: the benched call did not run: {response:?}"
    );
    group.bench_function(name, |b| {
        b.iter_batched(
            make_call,
            |call| drive(black_box(&mut svc), call),
            BatchSize::NumIterations(CALLS_PER_BATCH),
        )
    });
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("stack_overhead");
    // (a) and (b), the comparison the target is about.
    run(&mut group, "a_floor_service_fn", service_fn(tool));
    run(&mut group, "b_full_stack_200_rules", full_stack(200));
    // The breakdown: the stack with no tenant rules, the three filters alone, the gate alone.
    run(&mut group, "c_full_stack_0_rules", full_stack(0));
    let handle = GovernanceHandle::new(governance(200));
    run(
        &mut group,
        "d_filters_only",
        ServiceBuilder::new()
            .layer(ExposureLayer::new(handle.clone()))
            .layer(ConfidentialityLayer::new(handle.clone()))
            .layer(AirGapLayer::new(handle.clone()))
            .service(service_fn(tool)),
    );
    // The composite (`ToolgateLayer`: no audit or scrub configured), the same checks in one
    // layer: its cost over (b) is what assembling them costs.
    run(
        &mut group,
        "f_composite_200_rules",
        ServiceBuilder::new()
            .layer(
                ToolgateLayer::builder(handle.clone())
                    .build()
                    .expect("the bench configuration routes no asks"),
            )
            .service(service_fn(tool)),
    );
    run(
        &mut group,
        "e_gate_only_200_rules",
        ServiceBuilder::new()
            .layer(ApprovalGateLayer::new(handle))
            .service(service_fn(tool)),
    );
    // `decide` alone on the same call at 200 rules, no layer: what the composite must stay
    // within 15 % of, since it decides each call once. `g`: the stacks' harness (a fresh
    // call per iteration, 32 a batch, the call dropped outside the timed region);
    // `h`: the engine benches' harness (one call view, hot in cache).
    let gov = governance(200);
    assert!(
        gov.decide(CallView::of(&make_call())).runs(),
        "the benched call runs"
    );
    group.bench_function("g_decide_200_rules", |b| {
        b.iter_batched_ref(
            make_call,
            |call| black_box(&gov).decide(CallView::of(black_box(call))),
            BatchSize::NumIterations(CALLS_PER_BATCH),
        )
    });
    let (tool_ref, agent, input) = (
        ToolRef::Name(CALL_WIRE_NAME.into()),
        call_agent(),
        call_input(),
    );
    let view = CallView {
        tool: &tool_ref,
        agent: &agent,
        input: CallInput::Value(&input),
        run: RunContext::default(),
    };
    group.bench_function("h_decide_200_rules_hot", |b| {
        b.iter(|| black_box(&gov).decide(black_box(view)))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
