//! No contention (issue 12): the composite stack's throughput (`toolgate::ToolgateLayer`, no
//! audit or scrub configured, 200 rules, the allowed call of every bench here) on a
//! multi-thread Tokio runtime with 1 and 2 worker threads, one group so the ratio comes
//! from one run. Each worker runs one task that drives its own copy of the stack (built from
//! one layer over one `GovernanceHandle`, so the snapshot, the catalog and every cache are
//! shared) through `poll_ready`, `call` and one poll, as `stack.rs` does; the calls are built
//! in the task, outside no timer (both sides pay the same). criterion's time per element is
//! the wall time of `iters` calls spread over the workers, so the 2-worker figure over the
//! 1-worker one is the scaling: 0.5 would be perfect.
//!
//! Run: `cargo bench -p toolgate-benches --bench throughput -- --warm-up-time 1 --measurement-time 3`.
//! The machine must have two idle cores for the ratio to mean anything: state its load.

use std::convert::Infallible;
use std::future::{Future, Ready, ready};
use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use toolgate::{GovernanceHandle, ToolgateLayer};
use toolgate_benches::{CALL_WIRE_NAME, call_agent, call_input, governance};
use toolgate_core::{ToolCall, ToolOutput, ToolResponse};
use tower::{Layer, Service, service_fn};

fn tool(call: ToolCall) -> Ready<Result<ToolResponse, Infallible>> {
    ready(Ok(ToolResponse::Completed(ToolOutput::new(call.input))))
}

/// One call through `svc`: ready, call, poll once (every future on the path is ready).
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

fn bench(c: &mut Criterion) {
    let handle = GovernanceHandle::new(governance(200));
    let layer = ToolgateLayer::builder(handle)
        .build()
        .expect("the bench configuration routes no asks");
    {
        let mut svc = layer.layer(service_fn(tool));
        let response = drive(
            &mut svc,
            ToolCall::new(call_agent(), CALL_WIRE_NAME, call_input()),
        );
        assert!(
            matches!(response, ToolResponse::Completed(_)),
            "the benched call did not run: {response:?}"
        );
    }
    let mut group = c.benchmark_group("stack_throughput");
    group.throughput(Throughput::Elements(1));
    for workers in [1usize, 2] {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .build()
            .expect("runtime");
        group.bench_with_input(
            BenchmarkId::new("composite_200_rules_workers", workers),
            &workers,
            |b, &workers| {
                b.iter_custom(|iters| {
                    let per_task = iters.div_ceil(workers as u64);
                    let layer = layer.clone();
                    rt.block_on(async move {
                        let start = Instant::now();
                        let tasks: Vec<_> = (0..workers)
                            .map(|_| {
                                let mut svc = layer.layer(service_fn(tool));
                                tokio::spawn(async move {
                                    for _ in 0..per_task {
                                        let call = ToolCall::new(
                                            call_agent(),
                                            CALL_WIRE_NAME,
                                            call_input(),
                                        );
                                        black_box(drive(&mut svc, call));
                                    }
                                })
                            })
                            .collect();
                        for t in tasks {
                            t.await.expect("task");
                        }
                        // Normalised to `iters` calls (the tasks ran `per_task × workers`).
                        let elapsed = start.elapsed();
                        Duration::from_secs_f64(
                            elapsed.as_secs_f64() * iters as f64
                                / (per_task * workers as u64) as f64,
                        )
                    })
                })
            },
        );
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
