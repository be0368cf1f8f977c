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
//! The raw client and the gateway each run their own process of the same server. Skips
//! with a message when the servers are not installed
//! (`layers/mcp/scripts/install-npm-servers.sh`).

use std::path::PathBuf;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;
use serde_json::{Map, Value, json};
use toolgate::approval::ApprovalGateLayer;
use toolgate::core::{AgentRef, ToolCall, ToolResponse};
use toolgate::engine::{AgentProfile, Governance};
use toolgate::redact::Redactor;
use toolgate::scrub::ScrubOutputLayer;
use toolgate::{AirGapLayer, ConfidentialityLayer, ExposureLayer, GovernanceHandle};
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

criterion_group!(benches, bench);
criterion_main!(benches);
