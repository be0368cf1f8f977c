//! Issue 22 item 5: the secrets of upstream MCP servers, read from files or the environment
//! at start, sent as headers (streamable HTTP) or environment variables (stdio), never
//! shown. The upstream is the drift server over real streamable HTTP behind a check of the
//! headers; stdio servers are real processes.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};
use toolgate::GovernanceHandle;
use toolgate_core::{AgentRef, ToolCall, ToolIdentity, ToolResponse};
use toolgate_engine::Governance;
use toolgate_mcp::serve::ServeConfig;
use toolgate_mcp::{GatewayError, McpGateway, McpServerConfig};
use toolgate_mcp_testkit::drift_server::DriftServer;
use tower::ServiceExt;

type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// Whether a request's headers are let in; else 401.
type Required = Arc<dyn Fn(&hyper::HeaderMap) -> bool + Send + Sync>;

/// Requires each header to have its value.
fn headers(want: Vec<(&'static str, String)>) -> Required {
    Arc::new(move |h: &hyper::HeaderMap| {
        want.iter()
            .all(|(name, v)| h.get(*name).and_then(|x| x.to_str().ok()) == Some(v))
    })
}

/// The drift server on loopback streamable HTTP, answering 401 (with a `WWW-Authenticate`
/// challenge) to any request `required` does not let in. Returns its URL.
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
                            if !required(req.headers()) {
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

async fn try_lookup(gateway: &McpGateway, server: &str) -> Result<ToolResponse, String> {
    gateway
        .service()
        .with_insecure_no_permit()
        .oneshot(ToolCall::by_identity(
            AgentRef::profile("test"),
            ToolIdentity::mcp(server, "lookup"),
            json!({"query": "with secrets"}),
        ))
        .await
        .map_err(|e| e.to_string())
}

async fn lookup(gateway: &McpGateway, server: &str) -> ToolResponse {
    try_lookup(gateway, server).await.unwrap()
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
    let url = guarded_upstream(headers(vec![
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

/// A token endpoint on loopback: it issues `tok-1`, `tok-2`, … to the client `toolgate`
/// with the secret `s3cr:et&+` (HTTP Basic, form-encoded first: RFC 6749 §2.3.1) asking
/// `grant_type=client_credentials` and `scope=mcp:tools`, each valid `expires_in` seconds;
/// anything else is 401 `invalid_client`. Returns its URL and how many tokens it issued.
async fn token_endpoint(expires_in: u64) -> (String, Arc<AtomicUsize>) {
    use base64::Engine as _;
    let issued = Arc::new(AtomicUsize::new(0));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("toolgate:s3cr%3Aet%26%2B")
    );
    let count = Arc::clone(&issued);
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let (count, basic) = (Arc::clone(&count), basic.clone());
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let (count, basic) = (Arc::clone(&count), basic.clone());
                        async move {
                            let auth_ok = req
                                .headers()
                                .get(hyper::header::AUTHORIZATION)
                                .and_then(|v| v.to_str().ok())
                                == Some(basic.as_str());
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            let body = String::from_utf8_lossy(&body).into_owned();
                            let fields: Vec<&str> = body.split('&').collect();
                            let exchange = fields.contains(
                                &"grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Atoken-exchange",
                            ) && fields.iter().any(|f| f.starts_with("subject_token="));
                            let (status, answer) = if auth_ok
                                && (exchange || fields.contains(&"grant_type=client_credentials"))
                                && fields.contains(&"scope=mcp%3Atools")
                            {
                                let n = count.fetch_add(1, Ordering::SeqCst) + 1;
                                let mut answer = json!({"access_token": format!("tok-{n}"), "token_type": "Bearer", "expires_in": expires_in});
                                if exchange {
                                    answer["access_token"] = json!(format!("xtok-{n}"));
                                    answer["issued_token_type"] =
                                        json!("urn:ietf:params:oauth:token-type:access_token");
                                }
                                (hyper::StatusCode::OK, answer)
                            } else {
                                (
                                    hyper::StatusCode::UNAUTHORIZED,
                                    json!({"error": "invalid_client", "error_description": "unknown client or wrong secret"}),
                                )
                            };
                            let mut r =
                                hyper::Response::new(Full::new(Bytes::from(answer.to_string())));
                            *r.status_mut() = status;
                            r.headers_mut().insert(
                                hyper::header::CONTENT_TYPE,
                                hyper::header::HeaderValue::from_static("application/json"),
                            );
                            Ok::<_, Infallible>(r)
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
    (format!("http://{addr}/token"), issued)
}

/// An upstream that accepts the bearer tokens in `accepted` (changed by the test), and
/// counts the requests it refused.
async fn bearer_upstream(accepted: Arc<Mutex<Vec<String>>>) -> (String, Arc<AtomicUsize>) {
    let refused = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&refused);
    let url = guarded_upstream(Arc::new(move |h: &hyper::HeaderMap| {
        let sent = h
            .get(hyper::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::to_owned);
        let ok = sent.is_some_and(|t| accepted.lock().unwrap().contains(&t));
        if !ok {
            count.fetch_add(1, Ordering::SeqCst);
        }
        ok
    }))
    .await;
    (url, refused)
}

fn oauth_section(url: &str, token_url: &str, secret_file: &str) -> Value {
    json!({"servers": {"remote": {
        "url": url,
        "oauth": {
            "token_url": token_url,
            "client_id": "toolgate",
            "client_secret": {"file": secret_file},
            "scope": "mcp:tools"
        }
    }}})
}

#[tokio::test]
async fn issue22_5_oauth_client_credentials_fetch_a_token_and_a_new_one_on_a_401() {
    let (token_url, issued) = token_endpoint(3600).await;
    let accepted = Arc::new(Mutex::new(vec![String::from("tok-1")]));
    let (url, refused) = bearer_upstream(Arc::clone(&accepted)).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("client-secret"), "s3cr:et&+\n").unwrap();
    let section = oauth_section(&url, &token_url, "client-secret");
    let config = server(section.clone(), dir.path()).unwrap();
    assert!(!format!("{config:?}").contains("s3cr:et"), "{config:?}");
    let printed = ServeConfig::effective(&section).unwrap().to_string();
    assert!(!printed.contains("s3cr:et"), "{printed}");

    let gateway = new_gateway();
    gateway.connect(config).await.unwrap();
    assert!(matches!(
        lookup(&gateway, "remote").await,
        ToolResponse::Completed(_)
    ));
    assert_eq!(issued.load(Ordering::SeqCst), 1, "one token, kept");
    assert_eq!(refused.load(Ordering::SeqCst), 0);

    // The server stops taking `tok-1` (revoked): the next call is refused once, a new
    // token is fetched, and the call goes through with it.
    *accepted.lock().unwrap() = vec![String::from("tok-2")];
    let r = lookup(&gateway, "remote").await;
    assert!(matches!(r, ToolResponse::Completed(_)), "{r:?}");
    assert_eq!(issued.load(Ordering::SeqCst), 2);
    assert_eq!(refused.load(Ordering::SeqCst), 1);

    // A token the endpoint cannot replace with one the server takes: refused, not looped.
    *accepted.lock().unwrap() = vec![];
    let err = try_lookup(&gateway, "remote").await.unwrap_err();
    assert!(err.contains("Auth required"), "{err}");
    assert_eq!(refused.load(Ordering::SeqCst), 3, "one retry, no more");
    gateway.shutdown().await;
}

#[tokio::test]
async fn issue22_5_an_expired_token_is_replaced_before_it_is_sent() {
    let (token_url, issued) = token_endpoint(1).await;
    let accepted = Arc::new(Mutex::new(vec![
        String::from("tok-1"),
        String::from("tok-2"),
    ]));
    let (url, refused) = bearer_upstream(accepted).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("client-secret"), "s3cr:et&+").unwrap();
    let config = server(oauth_section(&url, &token_url, "client-secret"), dir.path()).unwrap();
    let gateway = new_gateway();
    gateway.connect(config).await.unwrap();
    assert_eq!(issued.load(Ordering::SeqCst), 1);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(matches!(
        lookup(&gateway, "remote").await,
        ToolResponse::Completed(_)
    ));
    assert_eq!(issued.load(Ordering::SeqCst), 2, "fetched again on expiry");
    assert_eq!(refused.load(Ordering::SeqCst), 0, "never sent expired");
    gateway.shutdown().await;
}

#[tokio::test]
async fn issue22_5_a_token_endpoint_that_refuses_is_a_connect_error_naming_the_server() {
    let (token_url, issued) = token_endpoint(3600).await;
    let (url, _) = bearer_upstream(Arc::new(Mutex::new(vec![]))).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("client-secret"), "wrong-secret-9").unwrap();
    let config = server(oauth_section(&url, &token_url, "client-secret"), dir.path()).unwrap();
    let err = new_gateway().connect(config).await.unwrap_err();
    let GatewayError::Connect {
        server: id,
        message,
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(id, "remote");
    assert!(
        message.contains(&format!("the token endpoint `{token_url}` refused")),
        "{message}"
    );
    assert!(message.contains("`invalid_client`"), "{message}");
    assert!(!err.to_string().contains("wrong-secret-9"), "{err}");
    assert_eq!(issued.load(Ordering::SeqCst), 0);

    // A client secret that cannot be read stops the start, naming the field.
    let section = json!({"servers": {"remote": {
        "url": url,
        "oauth": {"token_url": token_url, "client_id": "toolgate", "client_secret": {"env": "TOOLGATE_TEST_UNSET_VARIABLE"}}
    }}});
    let err = server(section, dir.path()).unwrap_err();
    assert!(
        err.contains("mcp.servers.remote.oauth.client_secret: the environment variable `TOOLGATE_TEST_UNSET_VARIABLE` is not set"),
        "{err}"
    );
    // `oauth` and an `Authorization` header are one too many.
    let section = json!({"servers": {"remote": {
        "url": "http://127.0.0.1:1/mcp",
        "headers": {"Authorization": {"env": "X"}},
        "oauth": {"token_url": "http://127.0.0.1:1/token", "client_id": "toolgate", "client_secret": {"env": "X"}}
    }}});
    let err = ServeConfig::read(&section).unwrap_err().to_string();
    assert!(
        err.contains(
            "mcp.servers.remote.headers.Authorization: the server authenticates with `oauth`"
        ),
        "{err}"
    );
}

/// Issue 22 (items 4 and 5): the OAuth client secret is read again for each token asked
/// for, so rotating it needs no restart: the file rewritten with a secret the endpoint does
/// not take makes the next fetch fail (the call is refused, the old secret never used
/// instead), the good one written back is taken at the fetch after, and a file gone fails
/// the fetch naming the field.
#[tokio::test]
async fn issue22_4_a_rotated_client_secret_is_read_at_the_next_token_fetch() {
    let (token_url, issued) = token_endpoint(3600).await;
    let accepted = Arc::new(Mutex::new(vec![String::from("tok-1")]));
    let (url, _refused) = bearer_upstream(Arc::clone(&accepted)).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("client-secret");
    std::fs::write(&file, "s3cr:et&+\n").unwrap();
    let config = server(oauth_section(&url, &token_url, "client-secret"), dir.path()).unwrap();
    let gateway = new_gateway();
    gateway.connect(config).await.unwrap();
    assert!(matches!(
        lookup(&gateway, "remote").await,
        ToolResponse::Completed(_)
    ));
    assert_eq!(issued.load(Ordering::SeqCst), 1);

    // The secret file now holds one the endpoint refuses, and the server stops taking
    // `tok-1`: the new token is asked for with the file's secret, and refused.
    std::fs::write(&file, "a-secret-the-endpoint-does-not-know\n").unwrap();
    *accepted.lock().unwrap() = vec![String::from("tok-2")];
    let err = try_lookup(&gateway, "remote").await.unwrap_err();
    assert!(err.contains("refused the client credentials"), "{err}");
    assert_eq!(
        issued.load(Ordering::SeqCst),
        1,
        "the old secret was not used"
    );

    // The good secret back in the file: the next fetch takes it.
    std::fs::write(&file, "s3cr:et&+\n").unwrap();
    let r = lookup(&gateway, "remote").await;
    assert!(matches!(r, ToolResponse::Completed(_)), "{r:?}");
    assert_eq!(issued.load(Ordering::SeqCst), 2);

    // A secret that can no longer be read fails the fetch, naming the field.
    std::fs::remove_file(&file).unwrap();
    *accepted.lock().unwrap() = vec![String::from("tok-3")];
    let err = try_lookup(&gateway, "remote").await.unwrap_err();
    assert!(
        err.contains("servers.remote.oauth.client_secret` cannot be read"),
        "{err}"
    );
    gateway.shutdown().await;
}

/// Issue 22: an `https://` token endpoint over real TLS on loopback (a test CA): its
/// configured `ca_file` is trusted, and the token it gives reaches the upstream.
#[tokio::test]
async fn issue22_5_an_https_token_endpoint_signed_by_the_configured_ca_gives_the_token() {
    use toolgate_idp_kit::tls::{TestCa, TlsServer};
    let ca = TestCa::new();
    let endpoint = TlsServer::start(
        ca.server_cert(&["127.0.0.1"]),
        json!({"access_token": "tok-tls", "token_type": "Bearer", "expires_in": 3600}),
    )
    .await;
    let (url, refused) = bearer_upstream(Arc::new(Mutex::new(vec![String::from("tok-tls")]))).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("client-secret"), "s3cr:et&+").unwrap();
    ca.write(dir.path());
    let mut section = oauth_section(&url, &endpoint.url("/token"), "client-secret");
    section["servers"]["remote"]["oauth"]["ca_file"] = json!("ca.pem");
    let gateway = new_gateway();
    gateway
        .connect(server(section, dir.path()).unwrap())
        .await
        .unwrap();
    assert!(matches!(
        lookup(&gateway, "remote").await,
        ToolResponse::Completed(_)
    ));
    assert_eq!(endpoint.served(), 1);
    let asked = endpoint.last_request();
    assert!(asked.starts_with("POST /token HTTP/1.1"), "{asked}");
    assert!(asked.contains("grant_type=client_credentials"), "{asked}");
    assert_eq!(refused.load(Ordering::SeqCst), 0);
    gateway.shutdown().await;
}

/// Issue 22: a token endpoint whose certificate the trust does not cover (no `ca_file`, so
/// the system's roots; another name) gives no token: connecting fails with why, and no
/// request went to the endpoint. Plain `http://` off this machine is refused when read.
#[tokio::test]
async fn issue22_5_an_https_token_endpoint_the_trust_does_not_cover_gives_no_token() {
    use toolgate_idp_kit::tls::{TestCa, TlsServer};
    let ca = TestCa::new();
    let endpoint = TlsServer::start(
        ca.server_cert(&["127.0.0.1"]),
        json!({"access_token": "tok-tls", "token_type": "Bearer"}),
    )
    .await;
    let (url, _) = bearer_upstream(Arc::new(Mutex::new(vec![String::from("tok-tls")]))).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("client-secret"), "s3cr:et&+").unwrap();
    ca.write(dir.path());
    let connect_error = |section: Value| {
        let dir = dir.path().to_owned();
        async move {
            match new_gateway()
                .connect(server(section, &dir).unwrap())
                .await
                .unwrap_err()
            {
                GatewayError::Connect { server, message } => {
                    assert_eq!(server, "remote");
                    message
                }
                other => panic!("{other:?}"),
            }
        }
    };
    let section = oauth_section(&url, &endpoint.url("/token"), "client-secret");
    let message = connect_error(section).await;
    assert!(
        message.contains("cannot reach the token endpoint"),
        "{message}"
    );
    assert!(message.contains("UnknownIssuer"), "{message}");
    let mut section = oauth_section(
        &url,
        &endpoint.url_as("localhost", "/token"),
        "client-secret",
    );
    section["servers"]["remote"]["oauth"]["ca_file"] = json!("ca.pem");
    let message = connect_error(section).await;
    assert!(message.contains("not valid for name"), "{message}");
    assert_eq!(endpoint.served(), 0, "no request over a refused handshake");

    // A CA file that does not read: a start error naming the field.
    let mut section = oauth_section(&url, &endpoint.url("/token"), "client-secret");
    section["servers"]["remote"]["oauth"]["ca_file"] = json!("missing.pem");
    let err = new_gateway()
        .connect(server(section, dir.path()).unwrap())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("servers.remote.oauth.ca_file"), "{err}");
    // Plain `http://` to another machine; a `ca_file` with `http://`.
    let section = oauth_section(&url, "http://idp.internal/token", "client-secret");
    let err = ServeConfig::read(&section).unwrap_err().to_string();
    assert!(err.contains("mcp.servers.remote.oauth.token_url"), "{err}");
    assert!(err.contains("not a loopback address"), "{err}");
    let mut section = oauth_section(&url, "http://127.0.0.1:1/token", "client-secret");
    section["servers"]["remote"]["oauth"]["ca_file"] = json!("ca.pem");
    let err = ServeConfig::read(&section).unwrap_err().to_string();
    assert!(err.contains("mcp.servers.remote.oauth.ca_file"), "{err}");
}

/// A call to `remote`'s `lookup` made for the caller whose verified token is `subject`.
async fn lookup_for(gateway: &McpGateway, subject: Option<&str>) -> Result<ToolResponse, String> {
    let mut call = ToolCall::by_identity(
        AgentRef::profile("test"),
        ToolIdentity::mcp("remote", "lookup"),
        json!({"query": "for someone"}),
    );
    if let Some(s) = subject {
        call.extensions
            .insert(toolgate_mcp::SubjectToken::new(s, "alice"));
    }
    gateway
        .service()
        .with_insecure_no_permit()
        .oneshot(call)
        .await
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn issue35_11_an_exchanged_token_the_server_refuses_is_exchanged_again_once() {
    let (token_url, issued) = token_endpoint(3600).await;
    // The connection's own requests carry the client credentials' `tok-1`; calls carry
    // the token exchanged for their caller.
    let accepted = Arc::new(Mutex::new(vec![
        String::from("tok-1"),
        String::from("xtok-2"),
    ]));
    let (url, refused) = bearer_upstream(Arc::clone(&accepted)).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("client-secret"), "s3cr:et&+\n").unwrap();
    let mut section = oauth_section(&url, &token_url, "client-secret");
    section["servers"]["remote"]["token_exchange"] = section["servers"]["remote"]["oauth"].clone();
    section["jwt"] =
        json!({"issuer": "i", "audience": "a", "jwks_file": "k", "agents": {"c": "test"}});
    let config = server(section, dir.path()).unwrap();

    let gateway = new_gateway();
    // Only toolgate's own HTTP client sends a call with its caller's exchanged token.
    let custom = gateway
        .connect_with(config.clone(), tokio::io::duplex(64).0)
        .await
        .unwrap_err();
    assert!(custom.to_string().contains("token_exchange"), "{custom}");
    gateway.connect(config).await.unwrap();
    assert_eq!(issued.load(Ordering::SeqCst), 1);

    let r = lookup_for(&gateway, Some("alice-token")).await.unwrap();
    assert!(matches!(r, ToolResponse::Completed(_)), "{r:?}");
    assert_eq!(issued.load(Ordering::SeqCst), 2, "one exchange");
    assert_eq!(refused.load(Ordering::SeqCst), 0);

    // The server stops taking `xtok-2`: the call is refused once, exchanged again, sent.
    *accepted.lock().unwrap() = vec![String::from("tok-1"), String::from("xtok-3")];
    let r = lookup_for(&gateway, Some("alice-token")).await.unwrap();
    assert!(matches!(r, ToolResponse::Completed(_)), "{r:?}");
    assert_eq!(issued.load(Ordering::SeqCst), 3);
    assert_eq!(refused.load(Ordering::SeqCst), 1);

    // No caller token: refused before anything is sent or asked for.
    let err = lookup_for(&gateway, None).await.unwrap_err();
    assert!(err.contains("was not sent"), "{err}");
    assert!(err.contains("no verified identity-provider token"), "{err}");
    assert_eq!(issued.load(Ordering::SeqCst), 3);
    assert_eq!(refused.load(Ordering::SeqCst), 1);

    // A token the exchange cannot replace with one the server takes: refused, not looped,
    // and never sent with the connection's own token instead.
    *accepted.lock().unwrap() = vec![String::from("tok-1")];
    let err = lookup_for(&gateway, Some("alice-token")).await.unwrap_err();
    assert!(err.contains("Auth required"), "{err}");
    assert_eq!(refused.load(Ordering::SeqCst), 3, "one retry, no more");
    gateway.shutdown().await;
}
