//! `toolgate mcp serve --http` as an OAuth 2.1 resource server (issue 22): bearer JWTs signed
//! by the tests' own keys (RS256 and ES256), the JWKS served over loopback by the test, the
//! rmcp client sending the tokens.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};
use toolgate::GovernanceHandle;
use toolgate_engine::config::{Format, load_str};
use toolgate_idp_kit::{
    JwksServer, RSA1_PUBLIC_PEM, SigningKey, claims, hs256, jwks, now, unsigned,
};
use toolgate_mcp::serve::{GovernedServer, ServeConfig, token_hash};

const ISS: &str = "https://idp.test/realms/agents";

const GOVERNANCE: &str = r#"{
    "approval": {"channel": "elicitation"}, "AUDIT"
    "servers": {"drift": {"trust_tool_annotations": true}},
    "behavior_gating": {"require_approval_for_non_read_only": true},
    "agents": [
        {"name": "dev", "allowed_tools": ["drift__lookup", "drift__bare", "drift__stats", "drift__fail", "drift__set_mode"],
         "subagents": ["triage-*"]},
        {"name": "viewer", "allowed_tools": ["drift__lookup"]}
    ]}"#;

/// A free loopback port: the server's resource URI (the tokens' audience) names it.
fn free_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

fn section(addr: SocketAddr, keys: Value) -> ServeConfig {
    let mut jwt = json!({
        "issuer": ISS,
        "audience": format!("http://{addr}/mcp"),
        "algorithms": ["RS256", "ES256"],
        "leeway_secs": 5,
        "required_scopes": ["mcp:tools"],
        "agent_claim": "azp",
        "agents": {"client-dev": "dev", "client-viewer": "viewer"},
        "subagent_claim": "act_as"
    });
    if let (Some(o), Value::Object(k)) = (jwt.as_object_mut(), keys) {
        o.extend(k);
        // A `null` leaves the setting out (`"agent_claim": null`: the default claims).
        o.retain(|_, v| !v.is_null());
    }
    let bin = env!("CARGO_BIN_EXE_toolgate-mcp-drift-server");
    ServeConfig::read(&json!({
        "servers": {"drift": {"command": bin}},
        "tokens": [{"sha256": token_hash("static-dev"), "agent": "dev", "name": "ci"}],
        "jwt": jwt
    }))
    .unwrap()
}

fn governance(audit: Option<&std::path::Path>) -> toolgate_engine::Governance {
    let audit = audit.map_or(String::new(), |p| {
        format!(
            r#""audit": {{"file": {}}},"#,
            json!(p.display().to_string())
        )
    });
    load_str(&GOVERNANCE.replace(r#""AUDIT""#, &audit), Format::Json).unwrap()
}

async fn serve(addr: SocketAddr, config: &ServeConfig) -> GovernedServer {
    serve_with(addr, config, None).await
}

async fn serve_with(
    addr: SocketAddr,
    config: &ServeConfig,
    audit: Option<&std::path::Path>,
) -> GovernedServer {
    let handle = GovernanceHandle::new(governance(audit));
    let server = GovernedServer::start(handle, config, None).await.unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let s = server.clone();
    tokio::spawn(async move {
        s.serve_http(addr, None, |a| {
            let _ = tx.send(a);
        })
        .await
    });
    assert_eq!(rx.await.unwrap(), addr);
    server
}

fn token(key: &SigningKey, addr: SocketAddr, extra: Value) -> String {
    let mut c = claims(
        ISS,
        &format!("http://{addr}/mcp"),
        "alice@example.com",
        json!({"azp": "client-viewer", "scope": "openid mcp:tools"}),
    );
    if let (Some(o), Value::Object(e)) = (c.as_object_mut(), extra) {
        o.extend(e);
    }
    key.sign(&c)
}

/// One raw HTTP exchange: the status code, the `WWW-Authenticate` header and the body.
async fn raw(
    addr: SocketAddr,
    method: &str,
    path: &str,
    bearer: Option<&str>,
) -> (u16, String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = if method == "POST" {
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#
    } else {
        ""
    };
    let auth = bearer
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(req.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut got)).await;
    let text = String::from_utf8_lossy(&got).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let challenge = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .starts_with("www-authenticate:")
                .then(|| l.split_once(':').unwrap().1.trim().to_owned())
        })
        .unwrap_or_default();
    (status, challenge, body.to_owned())
}

async fn listed(addr: SocketAddr, bearer: &str) -> Result<Vec<String>, String> {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp"))
            .auth_header(bearer),
    );
    let client = ().serve(transport).await.map_err(|e| e.to_string())?;
    let tools = client.list_all_tools().await.map_err(|e| e.to_string())?;
    let _ = client.cancel().await;
    Ok(tools.into_iter().map(|t| t.name.to_string()).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue22_each_jwt_sees_its_agents_list_and_every_bad_token_is_refused_with_nothing_listed()
{
    let (rsa, ec) = (SigningKey::rsa1(), SigningKey::ec1());
    let idp = JwksServer::start(jwks(&[&rsa, &ec])).await;
    let addr = free_addr();
    let _server = serve(addr, &section(addr, json!({"jwks_url": idp.url}))).await;

    // RS256 for the viewer client, ES256 for the dev client: each its own agent's list.
    let viewer = listed(addr, &token(&rsa, addr, json!({}))).await.unwrap();
    assert_eq!(viewer, ["drift__lookup"]);
    let dev = listed(addr, &token(&ec, addr, json!({"azp": "client-dev"})))
        .await
        .unwrap();
    assert_eq!(dev.len(), 5, "{dev:?}");
    // Static tokens stay, beside the identity provider's.
    assert_eq!(listed(addr, "static-dev").await.unwrap().len(), 5);

    let aud = format!("http://{addr}/mcp");
    let metadata = format!("http://{addr}/.well-known/oauth-protected-resource/mcp");
    let mut no_azp = claims(ISS, &aud, "alice", json!({"scope": "mcp:tools"}));
    no_azp.as_object_mut().unwrap().remove("azp");
    let refused: Vec<(&str, String, &str)> = vec![
        (
            "expired",
            token(&rsa, addr, json!({"exp": now() - 120})),
            "expired",
        ),
        (
            "not yet valid",
            token(&rsa, addr, json!({"nbf": now() + 600})),
            "not valid yet",
        ),
        (
            "wrong aud",
            token(&rsa, addr, json!({"aud": "http://127.0.0.1:1/mcp"})),
            "audience",
        ),
        (
            "wrong iss",
            token(&rsa, addr, json!({"iss": "https://evil.test/"})),
            "issuer",
        ),
        (
            "alg none",
            unsigned(
                "rsa-1",
                &claims(
                    ISS,
                    &aud,
                    "alice",
                    json!({"azp": "client-dev", "scope": "mcp:tools"}),
                ),
            ),
            "none",
        ),
        (
            "HS256 signed with the public key",
            hs256(
                RSA1_PUBLIC_PEM.as_bytes(),
                "rsa-1",
                &claims(
                    ISS,
                    &aud,
                    "alice",
                    json!({"azp": "client-dev", "scope": "mcp:tools"}),
                ),
            ),
            "HS256",
        ),
        (
            "unknown kid",
            token(&SigningKey::rsa2().with_kid("stranger"), addr, json!({})),
            "stranger",
        ),
        (
            "claim naming no profile",
            token(&rsa, addr, json!({"azp": "client-unknown"})),
            "names no agent profile",
        ),
        ("no agent claim", ec.sign(&no_azp), "no `azp` claim"),
        (
            "not a token",
            String::from("not-a-token"),
            "not a signed JWT",
        ),
    ];
    for (what, bad, why) in &refused {
        let (status, challenge, body) = raw(addr, "POST", "/mcp", Some(bad)).await;
        assert_eq!(status, 401, "{what}: {body}");
        assert!(body.contains(why), "{what}: {body}");
        assert!(
            challenge.contains(&format!("resource_metadata=\"{metadata}\""))
                && challenge.contains("invalid_token"),
            "{what}: {challenge}"
        );
        assert!(
            listed(addr, bad).await.is_err(),
            "{what}: nothing is listed"
        );
    }
    // A valid token without the required scope: 403, insufficient_scope.
    let narrow = token(&rsa, addr, json!({"scope": "openid"}));
    let (status, challenge, _) = raw(addr, "POST", "/mcp", Some(&narrow)).await;
    assert_eq!(status, 403);
    assert!(
        challenge.contains("insufficient_scope") && challenge.contains("scope=\"mcp:tools\""),
        "{challenge}"
    );
    assert!(listed(addr, &narrow).await.is_err());
    // No token at all: 401 pointing to the metadata.
    let (status, challenge, _) = raw(addr, "POST", "/mcp", None).await;
    assert_eq!(status, 401);
    assert_eq!(
        challenge,
        format!("Bearer resource_metadata=\"{metadata}\"")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue22_a_client_following_the_challenge_finds_the_authorization_server() {
    let rsa = SigningKey::rsa1();
    let idp = JwksServer::start(jwks(&[&rsa])).await;
    let addr = free_addr();
    let _server = serve(addr, &section(addr, json!({"jwks_url": idp.url}))).await;
    let (status, challenge, _) = raw(addr, "POST", "/mcp", None).await;
    assert_eq!(status, 401);
    let url = challenge
        .split("resource_metadata=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap()
        .to_owned();
    let path = url.strip_prefix(&format!("http://{addr}")).unwrap();
    for path in [path, "/.well-known/oauth-protected-resource"] {
        let (status, _, body) = raw(addr, "GET", path, None).await;
        assert_eq!(status, 200, "{path}: {body}");
        let doc: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(doc["resource"], format!("http://{addr}/mcp"));
        assert_eq!(doc["authorization_servers"], json!([ISS]));
        assert_eq!(doc["scopes_supported"], json!(["mcp:tools"]));
        assert_eq!(doc["bearer_methods_supported"], json!(["header"]));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue22_a_rotated_key_is_fetched_once_and_a_made_up_kid_costs_no_more_fetches() {
    let (k1, k2) = (SigningKey::rsa1(), SigningKey::rsa2());
    let idp = JwksServer::start(jwks(&[&k1])).await;
    let addr = free_addr();
    let _server = serve(addr, &section(addr, json!({"jwks_url": idp.url}))).await;
    assert_eq!(idp.fetches(), 1);
    assert_eq!(
        listed(addr, &token(&k1, addr, json!({}))).await.unwrap(),
        ["drift__lookup"]
    );
    idp.publish(jwks(&[&k2]));
    assert_eq!(
        listed(addr, &token(&k2, addr, json!({}))).await.unwrap(),
        ["drift__lookup"]
    );
    let after_rotation = idp.fetches();
    assert_eq!(after_rotation, 2, "one fetch for the new kid");
    // The key the provider dropped, and made-up kids: refused, with no fetch each.
    let (status, _, body) = raw(addr, "POST", "/mcp", Some(&token(&k1, addr, json!({})))).await;
    assert_eq!(status, 401, "{body}");
    for i in 0..5 {
        let bad = token(
            &k2.clone().with_kid(&format!("made-up-{i}")),
            addr,
            json!({}),
        );
        assert_eq!(raw(addr, "POST", "/mcp", Some(&bad)).await.0, 401);
    }
    assert_eq!(idp.fetches(), after_rotation);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue22_a_key_removed_from_the_jwks_file_stops_working_on_reload() {
    let (k1, k2) = (SigningKey::rsa1(), SigningKey::ec1());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("jwks.json");
    std::fs::write(&file, jwks(&[&k1, &k2]).to_string()).unwrap();
    let addr = free_addr();
    let config = section(addr, json!({"jwks_file": file}));
    let server = serve(addr, &config).await;
    let t1 = token(&k1, addr, json!({}));
    assert!(listed(addr, &t1).await.is_ok());
    std::fs::write(&file, jwks(&[&k2]).to_string()).unwrap();
    server.reload(governance(None), &config).await.unwrap();
    let (status, _, body) = raw(addr, "POST", "/mcp", Some(&t1)).await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("rsa-1"), "{body}");
    assert!(listed(addr, &token(&k2, addr, json!({}))).await.is_ok());
    // A file that no longer reads keeps the keys in force (the reload fails, loudly).
    std::fs::write(&file, "{").unwrap();
    let e = server.reload(governance(None), &config).await.unwrap_err();
    assert!(e.to_string().contains("mcp.jwt.jwks_file"), "{e}");
    assert!(listed(addr, &token(&k2, addr, json!({}))).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue22_issue34_a_subagent_claim_calls_as_a_subagent_its_profile_declares() {
    let rsa = SigningKey::rsa1();
    let idp = JwksServer::start(jwks(&[&rsa])).await;
    let addr = free_addr();
    let _server = serve(addr, &section(addr, json!({"jwks_url": idp.url}))).await;
    // Issue 34 item 3: a client does not choose its own subagent id. An id the profile does
    // not declare, another profile's name (SPEC §8) and one differing from it only by case
    // or white space are refused at the door: nothing is listed, nothing runs.
    for id in [
        "act-as-anyone",
        "viewer",
        " viewer",
        "Viewer",
        "viewer\t",
        "dev",
        "",
    ] {
        let t = token(&rsa, addr, json!({"azp": "client-dev", "act_as": id}));
        let (status, challenge, body) = raw(addr, "POST", "/mcp", Some(&t)).await;
        assert_eq!(status, 401, "act_as {id:?}: {body}");
        assert!(challenge.contains("invalid_token"), "{challenge}");
        assert!(
            listed(addr, &t).await.is_err(),
            "act_as {id:?} listed tools"
        );
    }
    let t = token(
        &rsa,
        addr,
        json!({"azp": "client-dev", "act_as": "act-as-anyone"}),
    );
    let (_, _, body) = raw(addr, "POST", "/mcp", Some(&t)).await;
    assert!(
        body.contains("is not one agent profile `dev` declares"),
        "{body}"
    );
    // A declared one calls, as that subagent of `dev`.
    let t = token(
        &rsa,
        addr,
        json!({"azp": "client-dev", "act_as": "triage-7"}),
    );
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp")).auth_header(t),
    );
    let client = ().serve(transport).await.unwrap();
    let Value::Object(args) = json!({"query": "q"}) else {
        panic!()
    };
    let r = client
        .call_tool(CallToolRequestParams::new("drift__lookup").with_arguments(args))
        .await
        .unwrap();
    assert_ne!(r.is_error, Some(true), "{r:?}");
    let _ = client.cancel().await;
    // A subagent claim that is no string is refused at the door.
    let bad = token(&rsa, addr, json!({"azp": "client-dev", "act_as": 7}));
    assert_eq!(raw(addr, "POST", "/mcp", Some(&bad)).await.0, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue22_the_audit_record_names_the_callers_verified_principal() {
    let rsa = SigningKey::rsa1();
    let idp = JwksServer::start(jwks(&[&rsa])).await;
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let addr = free_addr();
    let _server = serve_with(
        addr,
        &section(addr, json!({"jwks_url": idp.url})),
        Some(&audit),
    )
    .await;
    for bearer in [
        token(&rsa, addr, json!({"azp": "client-dev"})),
        String::from("static-dev"),
    ] {
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp"))
                .auth_header(bearer),
        );
        let client = ().serve(transport).await.unwrap();
        let Value::Object(args) = json!({"query": "q"}) else {
            panic!()
        };
        let r = client
            .call_tool(CallToolRequestParams::new("drift__lookup").with_arguments(args))
            .await
            .unwrap();
        assert_eq!(r.is_error, Some(false), "{r:?}");
        let _ = client.cancel().await;
    }
    let records: Vec<Value> = std::fs::read_to_string(&audit)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        // The calls' records (the trail also holds the gateway's drift events, issue 23).
        .filter(|r| r.get("event").is_none())
        .collect();
    assert_eq!(records.len(), 2);
    assert_eq!(
        records[0]["principal"],
        json!({"subject": "alice@example.com", "issuer": ISS})
    );
    assert_eq!(records[0]["agent"], "dev");
    assert!(
        records[1].get("principal").is_none(),
        "a static token names no principal"
    );
}

/// A client that declares elicitation and declines every question.
#[derive(Clone, Default)]
struct Declines;

impl rmcp::ClientHandler for Declines {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        rmcp::model::ClientConfig::new(
            rmcp::model::ClientCapabilities::builder()
                .enable_elicitation()
                .build(),
            rmcp::model::Implementation::new("declines", "0"),
        )
    }

    async fn create_elicitation(
        &self,
        _request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        Ok(rmcp::model::ElicitResult::new(
            rmcp::model::ElicitationAction::Decline,
        ))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue22_r47_an_elicitation_answer_names_the_verified_principal() {
    let rsa = SigningKey::rsa1();
    let idp = JwksServer::start(jwks(&[&rsa])).await;
    let addr = free_addr();
    let _server = serve(addr, &section(addr, json!({"jwks_url": idp.url}))).await;
    let t = token(&rsa, addr, json!({"azp": "client-dev"}));
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp")).auth_header(t),
    );
    let client = Declines.serve(transport).await.unwrap();
    let Value::Object(args) = json!({"mode": "removed"}) else {
        panic!()
    };
    let r = client
        .call_tool(CallToolRequestParams::new("drift__set_mode").with_arguments(args))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(true), "{r:?}");
    let text = serde_json::to_string(&r.content).unwrap();
    assert!(
        text.contains(&format!(
            "`alice@example.com` of `{ISS}` (client `client-dev`)"
        )),
        "{text}"
    );
    let _ = client.cancel().await;
}

/// A client that declares elicitation and accepts every question.
#[derive(Clone, Default)]
struct Accepts;

impl rmcp::ClientHandler for Accepts {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        rmcp::model::ClientConfig::new(
            rmcp::model::ClientCapabilities::builder()
                .enable_elicitation()
                .build(),
            rmcp::model::Implementation::new("accepts", "0"),
        )
    }

    async fn create_elicitation(
        &self,
        _request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        Ok(rmcp::model::ElicitResult::new(
            rmcp::model::ElicitationAction::Accept,
        ))
    }
}

/// Issue 22: an answer given by elicitation in a session authenticated by JWT records that
/// session's verified `sub` and `iss` as the answering principal (the audit record's
/// `approval.principal`, through `request_verified`); a static token's answer records the
/// name only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue22_r47_an_elicitation_answer_in_a_jwt_session_records_its_verified_principal() {
    let rsa = SigningKey::rsa1();
    let idp = JwksServer::start(jwks(&[&rsa])).await;
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let addr = free_addr();
    let _server = serve_with(
        addr,
        &section(addr, json!({"jwks_url": idp.url})),
        Some(&audit),
    )
    .await;
    for bearer in [
        token(&rsa, addr, json!({"azp": "client-dev"})),
        String::from("static-dev"),
    ] {
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp"))
                .auth_header(bearer),
        );
        let client = Accepts.serve(transport).await.unwrap();
        let Value::Object(args) = json!({"mode": "clean"}) else {
            panic!()
        };
        let r = client
            .call_tool(CallToolRequestParams::new("drift__set_mode").with_arguments(args))
            .await
            .unwrap();
        assert_eq!(r.is_error, Some(false), "approved by elicitation: {r:?}");
        let _ = client.cancel().await;
    }
    let records: Vec<Value> = std::fs::read_to_string(&audit)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r.get("event").is_none())
        .collect();
    assert_eq!(records.len(), 2, "{records:?}");
    let jwt = &records[0]["approval"];
    assert_eq!(jwt["wait"], "approved", "{jwt}");
    assert!(
        jwt["approver"]
            .as_str()
            .unwrap()
            .starts_with("elicitation: `alice@example.com`"),
        "{jwt}"
    );
    assert_eq!(
        jwt["principal"],
        json!({"subject": "alice@example.com", "issuer": ISS}),
        "{jwt}"
    );
    let static_token = &records[1]["approval"];
    assert_eq!(static_token["wait"], "approved", "{static_token}");
    assert!(
        static_token.get("principal").is_none(),
        "a static token's answer names no principal: {static_token}"
    );
}

/// Issue 34 item 6: without `agent_claim`, the agent is the token's `client_id` (RFC 9068
/// §2.2, as a certified provider names the client), else its `azp`; both present with
/// different values is refused, and so is neither. With `agent_claim` written, only that
/// claim is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue34_the_agent_is_the_client_id_else_the_azp_and_two_clients_are_refused() {
    let rsa = SigningKey::rsa1();
    let idp = JwksServer::start(jwks(&[&rsa])).await;
    let addr = free_addr();
    let _server = serve(
        addr,
        &section(addr, json!({"jwks_url": idp.url, "agent_claim": null})),
    )
    .await;
    let aud = format!("http://{addr}/mcp");
    let mint = |extra: Value| {
        let mut c = claims(ISS, &aud, "svc", json!({"scope": "mcp:tools"}));
        if let (Some(o), Value::Object(e)) = (c.as_object_mut(), extra) {
            o.extend(e);
        }
        rsa.sign(&c)
    };
    // `client_id` alone (an RFC 9068 access token): the dev client, five tools.
    let dev = listed(addr, &mint(json!({"client_id": "client-dev"})))
        .await
        .unwrap();
    assert_eq!(dev.len(), 5, "{dev:?}");
    // `azp` alone: the viewer client.
    let viewer = listed(addr, &mint(json!({"azp": "client-viewer"})))
        .await
        .unwrap();
    assert_eq!(viewer, ["drift__lookup"]);
    // Both, naming one client: taken.
    let both = mint(json!({"client_id": "client-viewer", "azp": "client-viewer"}));
    assert_eq!(listed(addr, &both).await.unwrap(), ["drift__lookup"]);
    let refused = [
        (
            "two clients",
            mint(json!({"client_id": "client-viewer", "azp": "client-dev"})),
            "name different clients",
        ),
        ("neither claim", mint(json!({})), "no `client_id`"),
        (
            "client_id not a string",
            mint(json!({"client_id": 7, "azp": "client-dev"})),
            "`client_id` is not a non-blank string",
        ),
        (
            "azp blank",
            mint(json!({"client_id": "client-dev", "azp": " "})),
            "`azp` is not a non-blank string",
        ),
        (
            "client_id naming no profile",
            mint(json!({"client_id": "client-unknown"})),
            "names no agent profile",
        ),
    ];
    for (what, bad, why) in &refused {
        let (status, challenge, body) = raw(addr, "POST", "/mcp", Some(bad)).await;
        assert_eq!(status, 401, "{what}: {body}");
        assert!(body.contains(why), "{what}: {body}");
        assert!(challenge.contains("invalid_token"), "{what}: {challenge}");
        assert!(
            listed(addr, bad).await.is_err(),
            "{what}: nothing is listed"
        );
    }

    // `agent_claim` written: that claim only (`client_id` is not looked at, nor a conflict).
    let addr = free_addr();
    let _server = serve(addr, &section(addr, json!({"jwks_url": idp.url}))).await;
    let aud = format!("http://{addr}/mcp");
    let mint = |extra: Value| {
        let mut c = claims(ISS, &aud, "svc", json!({"scope": "mcp:tools"}));
        if let (Some(o), Value::Object(e)) = (c.as_object_mut(), extra) {
            o.extend(e);
        }
        rsa.sign(&c)
    };
    let two = mint(json!({"client_id": "client-dev", "azp": "client-viewer"}));
    assert_eq!(listed(addr, &two).await.unwrap(), ["drift__lookup"]);
    let (status, _, body) = raw(
        addr,
        "POST",
        "/mcp",
        Some(&mint(json!({"client_id": "client-dev"}))),
    )
    .await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("no `azp` claim"), "{body}");
}

/// Issue 34 item 5 through the server: with `"token_type": "at+jwt"` only RFC 9068 access
/// tokens are taken; without it a token typed as another kind of JWT is still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue34_token_type_at_jwt_takes_only_typed_access_tokens() {
    let rsa = SigningKey::rsa1();
    let idp = JwksServer::start(jwks(&[&rsa])).await;
    let addr = free_addr();
    let _server = serve(
        addr,
        &section(addr, json!({"jwks_url": idp.url, "token_type": "at+jwt"})),
    )
    .await;
    let aud = format!("http://{addr}/mcp");
    let c = claims(
        ISS,
        &aud,
        "svc",
        json!({"azp": "client-viewer", "scope": "mcp:tools"}),
    );
    let typed = rsa.sign_typed(&c, Some("at+jwt"));
    assert_eq!(listed(addr, &typed).await.unwrap(), ["drift__lookup"]);
    for typ in [None, Some("JWT"), Some("dpop+jwt")] {
        let (status, _, body) = raw(addr, "POST", "/mcp", Some(&rsa.sign_typed(&c, typ))).await;
        assert_eq!(status, 401, "{typ:?}: {body}");
        assert!(body.contains("`typ`"), "{typ:?}: {body}");
    }
    // Without `token_type`: `JWT` is taken, `logout+jwt` is not.
    let addr = free_addr();
    let _server = serve(addr, &section(addr, json!({"jwks_url": idp.url}))).await;
    let aud = format!("http://{addr}/mcp");
    let c = claims(
        ISS,
        &aud,
        "svc",
        json!({"azp": "client-viewer", "scope": "mcp:tools"}),
    );
    assert!(listed(addr, &rsa.sign_typed(&c, Some("JWT"))).await.is_ok());
    let (status, _, body) = raw(
        addr,
        "POST",
        "/mcp",
        Some(&rsa.sign_typed(&c, Some("logout+jwt"))),
    )
    .await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("another kind of JWT"), "{body}");
}
