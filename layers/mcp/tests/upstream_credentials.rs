//! Issue 22 item 5: the secrets of upstream MCP servers, read from files or the environment
//! at start, sent as headers (streamable HTTP) or environment variables (stdio), never
//! shown. The upstream is the drift server over real streamable HTTP behind a check of the
//! headers; stdio servers are real processes.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};
use toolgate::GovernanceHandle;
use toolgate::core::{AgentRef, ToolCall, ToolIdentity, ToolResponse};
use toolgate::engine::Governance;
use toolgate_mcp::drift_server::DriftServer;
use toolgate_mcp::serve::ServeConfig;
use toolgate_mcp::{GatewayError, McpGateway, McpServerConfig};
use tower::ServiceExt;

type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// The value every request must carry in each header, else 401.
type Required = Arc<Vec<(&'static str, String)>>;

/// The drift server on loopback streamable HTTP, answering 401 (with a `WWW-Authenticate`
/// challenge) to any request without the `required` headers. Returns its URL.
async fn guarded_upstream(required: Required) -> String {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = DriftServer::new();
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let service = service.clone();
            let required = Arc::clone(&required);
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let service = service.clone();
                        let required = Arc::clone(&required);
                        async move {
                            let ok = required.iter().all(|(name, want)| {
                                req.headers().get(*name).and_then(|v| v.to_str().ok()) == Some(want)
                            });
                            if !ok {
                                let mut r = hyper::Response::new(Full::new(Bytes::new()).boxed());
                                *r.status_mut() = hyper::StatusCode::UNAUTHORIZED;
                                r.headers_mut().insert(
                                    hyper::header::WWW_AUTHENTICATE,
                                    hyper::header::HeaderValue::from_static("Bearer"),
                                );
                                return Ok::<hyper::Response<Body>, Infallible>(r);
                            }
                            service.oneshot(req).await
                        }
                    },
                );
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, svc)
                    .await;
            });
        }
    });
    format!("http://{addr}/mcp")
}

fn new_gateway() -> McpGateway {
    McpGateway::new(GovernanceHandle::new(
        Governance::builder().build().unwrap(),
    ))
}

async fn lookup(gateway: &McpGateway, server: &str) -> ToolResponse {
    gateway
        .service()
        .with_insecure_no_permit()
        .oneshot(ToolCall::by_identity(
            AgentRef::profile("test"),
            ToolIdentity::mcp(server, "lookup"),
            json!({"query": "with secrets"}),
        ))
        .await
        .unwrap()
}

/// The one server of an `mcp` section, read, resolved against `dir` and its secrets loaded.
fn server(section: Value, dir: &std::path::Path) -> Result<McpServerConfig, String> {
    let serve = ServeConfig::read(&section)
        .map_err(|e| e.to_string())?
        .relative_to(dir)
        .load_secrets()
        .map_err(|e| e.to_string())?;
    assert!(
        !format!("{serve:?}").contains("file-token-1"),
        "a loaded secret is in Debug"
    );
    Ok(serve.servers.into_iter().next().unwrap())
}

/// Cargo sets it for the tests it runs: an environment variable the test does not have to
/// set (setting one needs `unsafe`).
const ENV_VAR: &str = "CARGO_PKG_NAME";
const ENV_VALUE: &str = env!("CARGO_PKG_NAME");

#[tokio::test]
async fn issue22_5_headers_from_a_file_and_the_environment_reach_the_upstream() {
    let url = guarded_upstream(Arc::new(vec![
        ("authorization", String::from("Bearer file-token-1")),
        ("x-team", ENV_VALUE.to_owned()),
    ]))
    .await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("secrets")).unwrap();
    std::fs::write(dir.path().join("secrets/token"), "file-token-1\n").unwrap();
    let section = json!({"servers": {"remote": {
        "url": url,
        "headers": {
            "Authorization": {"file": "secrets/token", "prefix": "Bearer "},
            "X-Team": {"env": ENV_VAR}
        }
    }}});
    let config = server(section.clone(), dir.path()).unwrap();
    assert!(!format!("{config:?}").contains("file-token-1"));
    let gateway = new_gateway();
    gateway.connect(config).await.unwrap();
    let r = lookup(&gateway, "remote").await;
    let ToolResponse::Completed(out) = r else {
        panic!("{r:?}")
    };
    assert_eq!(out.content[0]["text"], "found with secrets");
    gateway.shutdown().await;

    // `config print` shows where the secret comes from, never the value.
    let printed = ServeConfig::effective(&section).unwrap().to_string();
    assert!(printed.contains(r#""file":"secrets/token""#), "{printed}");
    assert!(!printed.contains("file-token-1"), "{printed}");

    // The upstream does refuse a client without them.
    let bare = McpServerConfig::streamable_http("remote", url)
        .unwrap()
        .request_timeout(Duration::from_secs(10));
    let err = new_gateway().connect(bare).await.unwrap_err();
    assert!(matches!(err, GatewayError::Connect { .. }), "{err}");
}

#[tokio::test]
async fn issue22_5_a_secret_that_cannot_be_read_is_a_start_error_naming_its_field() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("empty"), "\n").unwrap();
    let section = json!({"servers": {"remote": {
        "url": "http://127.0.0.1:1/mcp",
        "headers": {
            "Authorization": {"file": "secrets/missing", "prefix": "Bearer "},
            "X-Team": {"env": "TOOLGATE_TEST_UNSET_VARIABLE"},
            "X-Empty": {"file": "empty"}
        }
    }}});
    let err = server(section, dir.path()).unwrap_err();
    assert!(
        err.contains("mcp.servers.remote.headers.Authorization: cannot read the file `")
            && err.contains("secrets/missing`"),
        "{err}"
    );
    assert!(
        err.contains("mcp.servers.remote.headers.X-Team: the environment variable `TOOLGATE_TEST_UNSET_VARIABLE` is not set"),
        "{err}"
    );
    assert!(
        err.contains("mcp.servers.remote.headers.X-Empty: the file `") && err.contains("is empty"),
        "{err}"
    );

    // A secret written in the configuration is refused, and never echoed.
    let section = json!({"servers": {"gh": {
        "command": "gh-server",
        "env_secrets": {"GITHUB_TOKEN": "ghp_written_in_the_text"}
    }}});
    let err = ServeConfig::read(&section).unwrap_err().to_string();
    assert!(
        err.contains("mcp.servers.gh.env_secrets.GITHUB_TOKEN: expected {\"file\""),
        "{err}"
    );
    assert!(!err.contains("ghp_written_in_the_text"), "{err}");
}

#[tokio::test]
async fn issue22_5_a_stdio_servers_environment_secrets_reach_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("gh-token"), "file-token-1\n").unwrap();
    // The server starts only when both secrets are what they should be.
    let script = format!(
        r#"test "$GITHUB_TOKEN" = file-"token-1" && test "$API_KEY" = {ENV_VALUE} && exec '{}'"#,
        env!("CARGO_BIN_EXE_toolgate-mcp-drift-server")
    );
    let section = json!({"servers": {"drift": {
        "command": "sh",
        "args": ["-c", script],
        "env_secrets": {
            "GITHUB_TOKEN": {"file": "gh-token"},
            "API_KEY": {"env": ENV_VAR}
        }
    }}});
    let config = server(section, dir.path()).unwrap();
    let gateway = new_gateway();
    gateway.connect(config).await.unwrap();
    assert!(matches!(
        lookup(&gateway, "drift").await,
        ToolResponse::Completed(_)
    ));
    gateway.shutdown().await;

    // Connected without `load_secrets`, a missing file is a connect-time error naming it.
    let config = McpServerConfig::stdio("drift", "sh").unwrap().env_secret(
        "GITHUB_TOKEN",
        toolgate_mcp::SecretSource::file(dir.path().join("nope")),
    );
    let err = new_gateway().connect(config).await.unwrap_err();
    let GatewayError::Secret { server, errors } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(server, "drift");
    assert_eq!(
        errors.errors[0].path,
        "servers.drift.env_secrets.GITHUB_TOKEN"
    );
}
