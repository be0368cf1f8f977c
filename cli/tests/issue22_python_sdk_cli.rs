//! Issue 22, through the official MCP Python SDK client (PyPI `mcp`, installed by
//! `layers/mcp/scripts/install-python-sdk.sh`): `toolgate mcp serve --http` with `mcp.jwt`
//! takes JWTs signed by the test's own keys (RSA and EC), the JWKS served over loopback
//! HTTP by the test; each token's agent sees its own list, and every token that must not be
//! taken — expired, not yet valid, the wrong audience or issuer, an unknown `kid` (fetched
//! again once, then refused), `alg: none`, HS256 keyed with the public key, an agent claim
//! naming no profile — is answered 401 with a `WWW-Authenticate` pointing to the
//! protected-resource metadata, and lists nothing. Skips with a printed reason when the SDK
//! is missing; fails when `CI` is set.
#![cfg(feature = "mcp")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;

use std::process::{Command, Stdio};

use serde_json::{Value, json};
use toolgate_idp_kit::{
    JwksServer, RSA1_PUBLIC_PEM, SigningKey, claims, hs256, jwks, now, unsigned,
};
use toolgate_mcp_testkit::drift_server::DriftServer;

const ISS: &str = "https://idp.test/realms/agents";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue22_the_python_sdk_client_lists_as_its_jwts_agent_and_every_bad_token_is_401() {
    let Some(python) = common::python_sdk() else {
        return;
    };
    let drift = DriftServer::new();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let served = drift.clone();
    tokio::spawn(async move {
        served
            .serve_http("127.0.0.1:0".parse().unwrap(), move |addr| {
                let _ = tx.send(addr);
            })
            .await
    });
    let upstream = format!("http://{}/mcp", rx.await.unwrap());
    let (rsa, ec, other) = (SigningKey::rsa1(), SigningKey::ec1(), SigningKey::rsa2());
    let keys = JwksServer::start(jwks(&[&rsa, &ec])).await;
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let aud = format!("http://{addr}/mcp");
    let c = json!({
        "approval": {"channel": "none"},
        "servers": {"drift": {"trust_tool_annotations": true}},
        "agents": [
            {"name": "dev", "allowed_tools": ["drift__lookup"]},
            {"name": "ops", "allowed_tools": ["drift__lookup", "drift__stats"]}
        ],
        "mcp": {
            "servers": {"drift": {"url": upstream}},
            "jwt": {"issuer": ISS, "audience": aud, "jwks_url": keys.url,
                    "algorithms": ["RS256", "ES256"], "leeway_secs": 5,
                    "authorization_servers": [ISS],
                    "agents": {"client-dev": "dev", "client-ops": "ops"}}
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("toolgate.json");
    std::fs::write(&path, c.to_string()).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["mcp", "serve", "--http", &addr, "--config"])
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(child.stderr.take().unwrap()));
    loop {
        let line = lines
            .next()
            .expect("toolgate mcp serve ended before serving")
            .unwrap();
        eprintln!("toolgate: {line}");
        if line.contains("serving MCP") {
            break;
        }
    }
    std::thread::spawn(move || {
        for l in lines.map_while(Result::ok) {
            eprintln!("toolgate: {l}");
        }
    });
    let fetched_at_start = keys.fetches();

    let agent = |a: &str| json!({"azp": a});
    let tokens = [
        (
            "dev",
            rsa.sign(&claims(ISS, &aud, "alice", agent("client-dev"))),
        ),
        (
            "ops",
            ec.sign(&claims(ISS, &aud, "bob", agent("client-ops"))),
        ),
        (
            "expired",
            rsa.sign(&claims(
                ISS,
                &aud,
                "alice",
                json!({"azp": "client-dev", "nbf": now() - 7200, "exp": now() - 3600}),
            )),
        ),
        (
            "not_yet_valid",
            rsa.sign(&claims(
                ISS,
                &aud,
                "alice",
                json!({"azp": "client-dev", "nbf": now() + 3600}),
            )),
        ),
        (
            "wrong_aud",
            rsa.sign(&claims(
                ISS,
                "http://127.0.0.1:1/mcp",
                "alice",
                agent("client-dev"),
            )),
        ),
        (
            "wrong_iss",
            rsa.sign(&claims(
                "https://evil.test/",
                &aud,
                "alice",
                agent("client-dev"),
            )),
        ),
        (
            "unknown_kid",
            other.sign(&claims(ISS, &aud, "alice", agent("client-dev"))),
        ),
        (
            "alg_none",
            unsigned("rsa-1", &claims(ISS, &aud, "alice", agent("client-dev"))),
        ),
        (
            "hs256_public_key",
            hs256(
                RSA1_PUBLIC_PEM.as_bytes(),
                "rsa-1",
                &claims(ISS, &aud, "alice", agent("client-dev")),
            ),
        ),
        (
            "no_profile",
            rsa.sign(&claims(ISS, &aud, "eve", agent("client-nobody"))),
        ),
    ];
    let out = Command::new(&python)
        .arg(common::repo().join("layers/mcp-testkit/tests/python/jwt_client.py"))
        .arg(&aud)
        .args(tokens.iter().map(|(l, t)| format!("{l}={t}")))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        out.status.success(),
        "the Python SDK client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
    eprintln!("{seen:#}");
    assert_eq!(seen["dev"]["tools"], json!(["drift__lookup"]), "{seen}");
    assert_eq!(
        seen["ops"]["tools"],
        json!(["drift__lookup", "drift__stats"]),
        "{seen}"
    );
    for (label, _) in &tokens[2..] {
        let s = &seen[*label];
        assert_eq!(s["status"], 401, "{label}: {s}");
        assert!(s["tools"].is_null(), "{label} listed tools: {s}");
        // The SDK client itself was refused: HTTP 401 to each of its requests, no session.
        assert!(s["error"].is_string(), "{label}: {s}");
        let statuses = s["sdk_statuses"].as_array().cloned().unwrap_or_default();
        assert!(
            !statuses.is_empty() && statuses.iter().all(|c| c == 401),
            "{label}: {s}"
        );
        let challenge = s["challenge"].as_str().unwrap_or_default();
        assert!(
            challenge.starts_with("Bearer") && challenge.contains("resource_metadata="),
            "{label}: {challenge}"
        );
        // A client following the metadata finds the authorization server.
        assert_eq!(s["authorization_servers"], json!([ISS]), "{label}: {s}");
        assert_eq!(s["resource"], json!(aud), "{label}: {s}");
    }
    // The unknown `kid` had the JWKS fetched again (a rotation is taken at once), then was
    // refused; a fetch for an unknown `kid` is made at most once per 10 s, so its two
    // attempts (the SDK's and the plain POST) fetched once, or twice on a slow machine.
    let refetched = keys.fetches() - fetched_at_start;
    assert!(
        (1..=2).contains(&refetched),
        "the unknown kid is fetched for once per attempt at most: {refetched}"
    );
    assert!(
        drift.calls("lookup") == 0,
        "nothing was called through a refused token"
    );
}
