//! Issue 35 item 1: upstream MCP servers over `https://` — the drift server (rmcp, the
//! official Rust SDK) behind a real TLS front on loopback with a test CA, reached through the
//! project's one outbound client: trust only a `ca_file`'s CAs (or the system's), mutual TLS
//! with a client certificate, and plain `http://` only to loopback unless opted in.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use serde_json::json;
use toolgate::GovernanceHandle;
use toolgate_core::{AgentRef, ToolCall, ToolIdentity, ToolResponse};
use toolgate_engine::Governance;
use toolgate_idp_kit::tls::{TestCa, tls_front};
use toolgate_mcp::serve::ServeConfig;
use toolgate_mcp::{McpGateway, McpServerConfig};
use toolgate_mcp_testkit::drift_server::DriftServer;
use tower::ServiceExt;

/// The drift server on loopback streamable HTTP (plain): its address.
async fn plain_upstream() -> std::net::SocketAddr {
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        DriftServer::new()
            .serve_http("127.0.0.1:0".parse().unwrap(), |a| {
                let _ = tx.send(a);
            })
            .await
    });
    rx.await.unwrap()
}

fn gateway() -> McpGateway {
    McpGateway::new(GovernanceHandle::new(
        Governance::builder().build().unwrap(),
    ))
}

async fn lookup(gateway: &McpGateway) -> ToolResponse {
    gateway
        .service()
        .with_insecure_no_permit()
        .oneshot(ToolCall::by_identity(
            AgentRef::profile("test"),
            ToolIdentity::mcp("remote", "lookup"),
            json!({"query": "over tls"}),
        ))
        .await
        .unwrap()
}

fn read(section: serde_json::Value, dir: &std::path::Path) -> Result<McpServerConfig, String> {
    let serve = ServeConfig::read(&section)
        .map_err(|e| e.to_string())?
        .relative_to(dir);
    Ok(serve.servers.into_iter().next().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue35_an_https_upstream_is_reached_trusting_only_its_ca_file() {
    let ca = TestCa::new();
    let dir = tempfile::tempdir().unwrap();
    ca.write(dir.path());
    let front = tls_front(ca.server_cert(&["localhost"]), None, plain_upstream().await).await;
    let url = format!("https://localhost:{}/mcp", front.port());
    // Read as `mcp serve` reads it: `tls.ca_file` relative to the configuration's folder.
    let config = read(
        json!({"servers": {"remote": {"url": url, "tls": {"ca_file": "ca.pem"}}}}),
        dir.path(),
    )
    .unwrap();
    assert!(
        config.trust().unwrap().contains("ca.pem"),
        "{:?}",
        config.trust()
    );
    let g = gateway();
    g.connect(config).await.unwrap();
    let r = lookup(&g).await;
    let ToolResponse::Completed(out) = &r else {
        panic!("{r:?}")
    };
    assert_eq!(out.content[0]["text"], "found over tls");
    g.shutdown().await;
    // The system's roots do not know the test CA: refused, saying why.
    let err = gateway()
        .connect(McpServerConfig::streamable_http("remote", &url).unwrap())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("certificate") || err.contains("UnknownIssuer"),
        "{err}"
    );
    // Another CA's file: refused as well.
    let other = TestCa::new();
    let odir = tempfile::tempdir().unwrap();
    let err = gateway()
        .connect(
            McpServerConfig::streamable_http("remote", &url)
                .unwrap()
                .ca_file(other.write(odir.path())),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("certificate") || err.contains("UnknownIssuer"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue35_a_mutual_tls_upstream_takes_only_a_client_with_its_certificate() {
    let ca = TestCa::new();
    let dir = tempfile::tempdir().unwrap();
    let ca_file = ca.write(dir.path());
    let front = tls_front(
        ca.server_cert(&["127.0.0.1"]),
        Some(&ca),
        plain_upstream().await,
    )
    .await;
    let url = format!("https://127.0.0.1:{}/mcp", front.port());
    let without = McpServerConfig::streamable_http("remote", &url)
        .unwrap()
        .ca_file(&ca_file);
    assert!(
        gateway().connect(without.clone()).await.is_err(),
        "no client certificate"
    );
    let (cert, key) = ca
        .server_cert(&["toolgate-client"])
        .write(dir.path(), "client");
    let with = without.client_identity(cert, key);
    assert!(with.trust().unwrap().contains("client.pem"));
    let g = gateway();
    g.connect(with).await.unwrap();
    assert!(matches!(lookup(&g).await, ToolResponse::Completed(_)));
    g.shutdown().await;
}

#[test]
fn issue35_plain_http_only_to_loopback_unless_the_server_opts_in_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let err = read(
        json!({"servers": {"lan": {"url": "http://10.1.2.3:8931/mcp"}}}),
        dir.path(),
    )
    .unwrap_err();
    assert!(err.contains("mcp.servers.lan.url"), "{err}");
    assert!(err.contains("plain_http"), "{err}");
    let ok = read(
        json!({"servers": {"lan": {"url": "http://10.1.2.3:8931/mcp", "plain_http": true}}}),
        dir.path(),
    )
    .unwrap();
    assert_eq!(ok.url_problem(), None);
    assert_eq!(ok.trust(), None, "plain text: no trust to speak of");
    for (tls, at) in [
        (
            json!({"client_cert": "c.pem"}),
            "mcp.servers.r.tls.client_key",
        ),
        (json!({"ca": "x"}), "mcp.servers.r.tls.ca"),
    ] {
        let err = read(
            json!({"servers": {"r": {"url": "https://mcp.example.com/mcp", "tls": tls}}}),
            dir.path(),
        )
        .unwrap_err();
        assert!(err.contains(at), "{err}");
    }
    let err = read(
        json!({"servers": {"r": {"url": "http://127.0.0.1:1/mcp", "tls": {"ca_file": "ca.pem"}}}}),
        dir.path(),
    )
    .unwrap_err();
    assert!(err.contains("only to an `https://`"), "{err}");
}
