//! What governance adds to a stdio round trip: `tools/call` of server-everything's `echo`
//! (a real Node MCP server from the npm registry, over stdio) sent three ways, in one
//! criterion group:
//!
//! - `raw_rmcp`: rmcp's `Peer::call_tool` on a client of its own (no toolgate at all);
//! - `mcp_service`: [`McpToolService`](toolgate_mcp::McpToolService) alone (routing, the
//!   listed-tool check, result mapping);
//! - `governed`: the whole stack of the crate docs — schema validation, exposure,
//!   confidentiality, air gap, the approval gate (posture on; `echo` is exempt as a trusted
//!   read-only tool, so it runs without a question) and output scrubbing — over the same
//!   service.
//!
//! A second group, `governance_in_process`, runs the same layers over a stub that answers
//! at once with `echo`'s result: the governance part alone, free of the server's noise.
//!
//! Then, outside criterion, **interleaved A/B rounds** (issue 12): each round times
//! `MCP_AB_CALLS` (200) raw calls and as many governed ones, one at a time, in alternating
//! order (raw first in odd rounds, governed first in even ones), for `MCP_AB_ROUNDS` (10)
//! rounds, and prints each round's medians and the median over rounds of governed ÷ raw: the
//! two paths share every minute of the machine's load, which criterion's one-after-the-other
//! groups do not.
//!
//! The raw client and the gateway each run their own process of the same server. Skips
//! with a message when the servers are not installed
//! (`layers/mcp/scripts/install-npm-servers.sh`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a bench: a failed setup stops it"
)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use criterion::{Criterion, criterion_group, criterion_main};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;
use serde_json::{Map, Value, json};
use toolgate::approval::ApprovalGateLayer;
use toolgate::redact::Redactor;
use toolgate::scrub::ScrubOutputLayer;
use toolgate::{AirGapLayer, ConfidentialityLayer, ExposureLayer, GovernanceHandle};
use toolgate_core::{AgentRef, ToolCall, ToolResponse};
use toolgate_engine::{AgentProfile, Governance};
use toolgate_mcp::{McpGateway, McpServerConfig, SchemaValidationLayer};
use tower::{Service, ServiceBuilder, ServiceExt as _};

fn everything() -> Option<PathBuf> {
    let dir = match std::env::var_os("TOOLGATE_MCP_SERVERS") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.tmp/mcp-servers"),
    };
    let entry = dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    entry.is_file().then_some(entry)
}

fn bench(c: &mut Criterion) {
    let Some(entry) = everything() else {
        eprintln!(
            "SKIPPED: server-everything is not installed; run layers/mcp/scripts/install-npm-servers.sh"
        );
        return;
    };
    let rt = Arc::new(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("a runtime: {e}")),
    );

    // The raw client.
    let raw = rt.block_on(async {
        let mut cmd = tokio::process::Command::new("node");
        cmd.arg(&entry).arg("stdio");
        let child = TokioChildProcess::builder(cmd)
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("node: {e}"))
            .0;
        ().serve(child)
            .await
            .unwrap_or_else(|e| panic!("raw client: {e}"))
    });
    let mut args = Map::new();
    args.insert("message".into(), Value::from("hello"));

    // The gateway and the governed stack.
    let handle = GovernanceHandle::new(
        Governance::builder()
            .require_approval_for_non_read_only(true)
            .agent(AgentProfile::new("bench").allow(["everything__echo"]))
            .build()
            .unwrap_or_else(|e| panic!("governance: {e}")),
    );
    let gateway = McpGateway::new(handle.clone());
    rt.block_on(async {
        gateway
            .connect(
                McpServerConfig::stdio("everything", "node")
                    .unwrap_or_else(|e| panic!("{e}"))
                    .arg(entry.display().to_string())
                    .trust_tool_annotations(true),
            )
            .await
            .unwrap_or_else(|e| panic!("gateway: {e}"))
    });
    // The baseline: the bare MCP service, no gate in front (so no permit either).
    let service = gateway.service().with_insecure_no_permit();
    let governed = ServiceBuilder::new()
        .layer(SchemaValidationLayer::new(handle.clone()))
        .layer(ExposureLayer::new(handle.clone()))
        .layer(ConfidentialityLayer::new(handle.clone()))
        .layer(AirGapLayer::new(handle.clone()))
        .layer(ApprovalGateLayer::new(handle.clone()))
        .layer(ScrubOutputLayer::new(Redactor::default()))
        .service(gateway.service());
    let agent = AgentRef::profile("bench");
    let call = || {
        ToolCall::new(
            agent.clone(),
            "everything__echo",
            json!({"message": "hello"}),
        )
    };
    // Both paths work before anything is measured.
    rt.block_on(async {
        let r = governed.clone().oneshot(call()).await;
        assert!(matches!(r, Ok(ToolResponse::Completed(_))), "{r:?}");
    });

    let mut g = c.benchmark_group("stdio_round_trip");
    g.bench_function("raw_rmcp", |b| {
        b.to_async(rt.as_ref()).iter(|| {
            let peer = raw.peer().clone();
            let args = args.clone();
            async move {
                peer.call_tool(CallToolRequestParams::new("echo").with_arguments(args))
                    .await
                    .unwrap_or_else(|e| panic!("{e}"))
            }
        });
    });
    g.bench_function("mcp_service", |b| {
        b.to_async(rt.as_ref()).iter(|| {
            let mut svc = service.clone();
            let c = call();
            async move { svc.call(c).await.unwrap_or_else(|e| panic!("{e}")) }
        });
    });
    g.bench_function("governed", |b| {
        b.to_async(rt.as_ref()).iter(|| {
            let svc = governed.clone();
            let c = call();
            async move { svc.oneshot(c).await.unwrap_or_else(|e| panic!("{e}")) }
        });
    });
    g.finish();

    ab_rounds(&rt, &raw, &args, &governed, &call);

    // The same layers over a stub answering at once with echo's own result: the part of
    // the governed round trip that is governance, without the server's noise.
    let stub_result = rt.block_on(async {
        service
            .clone()
            .oneshot(call())
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    });
    let stub = tower::service_fn(move |_c: ToolCall| {
        let r = stub_result.clone();
        async move { Ok::<_, toolgate_mcp::McpCallError>(r) }
    });
    let layers_only = ServiceBuilder::new()
        .layer(SchemaValidationLayer::new(handle.clone()))
        .layer(ExposureLayer::new(handle.clone()))
        .layer(ConfidentialityLayer::new(handle.clone()))
        .layer(AirGapLayer::new(handle.clone()))
        .layer(ApprovalGateLayer::new(handle.clone()))
        .layer(ScrubOutputLayer::new(Redactor::default()))
        .service(stub);
    let mut g = c.benchmark_group("governance_in_process");
    g.bench_function("layers_over_a_stub", |b| {
        b.to_async(rt.as_ref()).iter(|| {
            let svc = layers_only.clone();
            let c = call();
            async move { svc.oneshot(c).await.unwrap_or_else(|e| panic!("{e}")) }
        });
    });
    g.finish();
    rt.block_on(gateway.shutdown());
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(v: &mut [u64]) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

/// Interleaved A/B rounds of the raw rmcp call and the governed one (see the module docs).
fn ab_rounds<S>(
    rt: &tokio::runtime::Runtime,
    raw: &rmcp::service::RunningService<rmcp::RoleClient, ()>,
    args: &Map<String, Value>,
    governed: &S,
    call: &dyn Fn() -> ToolCall,
) where
    S: Service<ToolCall, Response = ToolResponse> + Clone,
    S::Error: std::fmt::Debug,
{
    let rounds = env("MCP_AB_ROUNDS", 10);
    let calls = env("MCP_AB_CALLS", 200);
    let mut ratios = Vec::new();
    let (mut all_raw, mut all_gov) = (Vec::new(), Vec::new());
    println!("stdio A/B: {rounds} rounds of {calls} raw and {calls} governed calls (µs medians)");
    for round in 0..rounds {
        let time_raw = || {
            rt.block_on(async {
                let mut out = Vec::with_capacity(calls);
                for _ in 0..calls {
                    let peer = raw.peer().clone();
                    let start = Instant::now();
                    let r = peer
                        .call_tool(CallToolRequestParams::new("echo").with_arguments(args.clone()))
                        .await;
                    out.push(u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX));
                    assert!(r.is_ok(), "raw call: {r:?}");
                }
                out
            })
        };
        let time_gov = || {
            rt.block_on(async {
                let mut out = Vec::with_capacity(calls);
                for _ in 0..calls {
                    let svc = governed.clone();
                    let c = call();
                    let start = Instant::now();
                    let r = svc.oneshot(c).await;
                    out.push(u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX));
                    assert!(
                        matches!(r, Ok(ToolResponse::Completed(_))),
                        "governed call: {r:?}"
                    );
                }
                out
            })
        };
        let (mut r, mut g) = if round % 2 == 0 {
            let r = time_raw();
            (r, time_gov())
        } else {
            let g = time_gov();
            (time_raw(), g)
        };
        all_raw.extend_from_slice(&r);
        all_gov.extend_from_slice(&g);
        let (mr, mg) = (median(&mut r), median(&mut g));
        let ratio = mg as f64 / mr.max(1) as f64;
        ratios.push(ratio);
        println!(
            "round {round}: raw {:.1} µs, governed {:.1} µs, governed / raw {ratio:.3}×",
            mr as f64 / 1e3,
            mg as f64 / 1e3
        );
    }
    ratios.sort_by(f64::total_cmp);
    println!(
        "stdio A/B: median of the rounds' governed / raw = {:.3}× (target ≤ 1.05×); all calls: raw median {:.1} µs, governed median {:.1} µs",
        ratios.get(ratios.len() / 2).copied().unwrap_or(0.0),
        median(&mut all_raw) as f64 / 1e3,
        median(&mut all_gov) as f64 / 1e3
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
