//! Issue 35 item 11 through `toolgate mcp serve --http`: a server with a `token_exchange`
//! gets every request made for a caller — `tools/call`, `resources/read`, `prompts/get` —
//! with the token exchanged for that caller's verified JWT (RFC 8693), never the
//! connection's; a caller without one (a static token) is refused before anything is sent.
//! The upstream is an rmcp server over real streamable HTTP that answers with the bearer it
//! got; the token endpoint is the test's (node-oidc-provider's real grant is tested in
//! `cli/tests/issue34_oidc_provider_cli.rs`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, GetPromptRequestParams, GetPromptResult,
    ListPromptsResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams, Prompt,
    PromptMessage, ReadResourceRequestParams, ReadResourceResult, Resource, ResourceContents,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::json;
use toolgate::GovernanceHandle;
use toolgate_engine::config::{Format, load_str};
use toolgate_idp_kit::{JwksServer, SigningKey, claims, jwks};
use toolgate_mcp::serve::{GovernedServer, ServeConfig, token_hash};

const ISS: &str = "https://idp.test/realms/agents";

/// The bearer a request came with, as the upstream saw it.
fn bearer_of(ctx: &RequestContext<RoleServer>) -> String {
    ctx.extensions
        .get::<hyper::http::request::Parts>()
        .and_then(|p| p.headers.get(hyper::header::AUTHORIZATION))
        .and_then(|v| v.to_str().ok())
        .unwrap_or("none")
        .to_owned()
}

/// A server of one tool, one resource and one prompt, each answering with the bearer its
/// request came with.
#[derive(Clone)]
struct Echoes;

impl ServerHandler for Echoes {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_prompts()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut t = Tool::new(
            "whoami",
            "Says who called.",
            Arc::new(serde_json::Map::new()),
        );
        t.annotations = Some(
            rmcp::model::ToolAnnotations::new()
                .read_only(true)
                .destructive(false)
                .open_world(false),
        );
        Ok(ListToolsResult::with_all_items(vec![t]))
    }

    async fn call_tool(
        &self,
        _: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::text(bearer_of(&ctx))]).into())
    }

    async fn list_resources(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(vec![Resource::new(
            "docs://readme",
            "readme",
        )]))
    }

    async fn read_resource(
        &self,
        r: ReadResourceRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, ErrorData> {
        Ok(ReadResourceResult::new(vec![ResourceContents::text(bearer_of(&ctx), r.uri)]).into())
    }

    async fn list_prompts(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(ListPromptsResult::with_all_items(vec![Prompt::new(
            "greet",
            Some("Greets."),
            None,
        )]))
    }

    async fn get_prompt(
        &self,
        _: GetPromptRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetPromptResponse, ErrorData> {
        Ok(GetPromptResult::new(vec![PromptMessage::new_text(
            rmcp::model::Role::User,
            bearer_of(&ctx),
        )])
        .into())
    }
}

/// `Echoes` over streamable HTTP on loopback: its URL.
async fn upstream() -> String {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service = StreamableHttpService::new(
        || Ok(Echoes),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let service = service.clone();
            tokio::spawn(async move {
                let io = hyper_util::rt::TokioIo::new(stream);
                let svc = hyper_util::service::TowerToHyperService::new(service);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, svc)
                    .await;
            });
        }
    });
    format!("http://{addr}/mcp")
}

/// A token endpoint taking RFC 8693 exchanges from client `gw` (secret `gw-secret`, HTTP
/// Basic): the n-th exchange issues `x-n`, valid an hour. Returns its URL and the subject
/// tokens it was given.
async fn exchange_endpoint() -> (String, Arc<Mutex<Vec<String>>>) {
    use base64::Engine as _;
    let subjects = Arc::new(Mutex::new(Vec::new()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("gw:gw-secret")
    );
    let seen = Arc::clone(&subjects);
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let (seen, basic) = (Arc::clone(&seen), basic.clone());
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let (seen, basic) = (Arc::clone(&seen), basic.clone());
                        async move {
                            let auth_ok = req
                                .headers()
                                .get(hyper::header::AUTHORIZATION)
                                .and_then(|v| v.to_str().ok())
                                == Some(basic.as_str());
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            let form: Vec<(String, String)> =
                                form_urlencoded::parse(&body).into_owned().collect();
                            let get =
                                |k: &str| form.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
                            let answer = if auth_ok
                                && get("grant_type").as_deref()
                                    == Some("urn:ietf:params:oauth:grant-type:token-exchange")
                                && let Some(subject) = get("subject_token")
                            {
                                let n = {
                                    let mut s = seen.lock().unwrap();
                                    s.push(subject);
                                    s.len()
                                };
                                json!({"access_token": format!("x-{n}"), "token_type": "Bearer",
                                       "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
                                       "expires_in": 3600})
                            } else {
                                json!({"error": "invalid_grant"})
                            };
                            let ok = answer.get("error").is_none();
                            let mut r =
                                hyper::Response::new(Full::new(Bytes::from(answer.to_string())));
                            if !ok {
                                *r.status_mut() = hyper::StatusCode::BAD_REQUEST;
                            }
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
    (format!("http://{addr}/token"), subjects)
}

fn free_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// A session of `bearer`'s caller: the tool's, the resource's and the prompt's answers (or
/// why each failed).
async fn ask_all(addr: SocketAddr, bearer: &str) -> [Result<String, String>; 3] {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp"))
            .auth_header(bearer),
    );
    let client = ().serve(transport).await.unwrap();
    let tool = client
        .call_tool(CallToolRequestParams::new("docs__whoami"))
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| match r.is_error {
            Some(true) => Err(format!("{:?}", r.content)),
            _ => Ok(r.content[0].as_text().unwrap().text.clone()),
        });
    let resource = client
        .read_resource(ReadResourceRequestParams::new("docs://readme"))
        .await
        .map_err(|e| e.to_string())
        .map(|r| match &r.contents[0] {
            ResourceContents::TextResourceContents { text, .. } => text.clone(),
            other => format!("{other:?}"),
        });
    let prompt = client
        .get_prompt(GetPromptRequestParams::new("docs__greet"))
        .await
        .map_err(|e| e.to_string())
        .map(|r| format!("{:?}", r.messages[0].content));
    let _ = client.cancel().await;
    [tool, resource, prompt]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue35_11_every_request_for_a_caller_carries_the_token_exchanged_for_it() {
    let url = upstream().await;
    let (token_url, subjects) = exchange_endpoint().await;
    let rsa = SigningKey::rsa1();
    let idp = JwksServer::start(jwks(&[&rsa])).await;
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("gw-secret");
    std::fs::write(&secret, "gw-secret\n").unwrap();
    let addr = free_addr();
    let config = ServeConfig::read(&json!({
        "servers": {"docs": {"url": url, "token_exchange": {
            "token_url": token_url, "client_id": "gw", "client_secret": {"file": secret}}}},
        "tokens": [{"sha256": token_hash("static-dev"), "agent": "dev"}],
        "jwt": {"issuer": ISS, "audience": format!("http://{addr}/mcp"), "jwks_url": idp.url,
                "agent_claim": "azp", "agents": {"client-dev": "dev"}}
    }))
    .unwrap()
    .load_secrets()
    .unwrap();
    let gov = load_str(
        r#"{"servers": {"docs": {"trust_tool_annotations": true}},
            "agents": [{"name": "dev", "allowed_tools": ["docs__*"],
                        "allowed_resources": ["docs__*"], "allowed_prompts": ["docs__*"]}]}"#,
        Format::Json,
    )
    .unwrap();
    let server = GovernedServer::start(GovernanceHandle::new(gov), &config, None)
        .await
        .unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let s = server.clone();
    tokio::spawn(async move {
        s.serve_http(addr, None, |a| {
            let _ = tx.send(a);
        })
        .await
    });
    assert_eq!(rx.await.unwrap(), addr);

    let alice = rsa.sign(&claims(
        ISS,
        &format!("http://{addr}/mcp"),
        "alice",
        json!({"azp": "client-dev"}),
    ));
    let answers = ask_all(addr, &alice).await;
    // One exchange, of alice's own token; every request for her carried its result.
    assert_eq!(*subjects.lock().unwrap(), std::slice::from_ref(&alice));
    let [tool, resource, prompt] = answers;
    assert_eq!(tool.as_deref(), Ok("Bearer x-1"), "tools/call");
    assert_eq!(resource.as_deref(), Ok("Bearer x-1"), "resources/read");
    assert!(
        prompt.as_ref().is_ok_and(|p| p.contains("Bearer x-1")),
        "prompts/get: {prompt:?}"
    );

    // A static token names no subject: nothing is sent, nothing exchanged.
    let answers = ask_all(addr, "static-dev").await;
    for (what, a) in ["tools/call", "resources/read", "prompts/get"]
        .iter()
        .zip(&answers)
    {
        let why = a.as_ref().expect_err(what);
        assert!(
            why.contains("no verified identity-provider token"),
            "{what}: {why}"
        );
        assert!(!why.contains("Bearer"), "{what}: {why}");
    }
    assert_eq!(subjects.lock().unwrap().len(), 1);
}
