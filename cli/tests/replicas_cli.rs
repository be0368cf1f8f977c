//! Replicas (issue 23 item 5): two `toolgate mcp serve --http` and two `toolgate serve`
//! processes behind a real HAProxy (Debian's package, `.ci/haproxy.sh`), sharing one
//! PostgreSQL inbox (`.ci/postgres.sh`). Without HAProxy or `TOOLGATE_PG_URL` the test skips
//! with a printed reason, and fails when `CI` is set.
//!
//! Sticky sessions: the balancer keeps each MCP session (`Mcp-Session-Id`, learnt from the
//! response that opened it) on the replica that opened it, because a session's streams
//! and its log level live in that process (a 2026-07-28 client has no session: its requests go
//! round robin, and its approval questions are in the database); everything that
//! decides a call — held calls, answers, claims, quotas, the stored policy — is in the
//! database, so a client whose replica died opens a new session through the balancer and
//! goes on, on any replica. The page's sign-ins live in its process too: the page backend
//! is sticky by a cookie.
#![cfg(all(feature = "mcp", feature = "serve"))]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use serde_json::{Value, json};

mod common;

use common::{Proc, free_port, hanging_relay, http_get, upstream_at};

const DEV_TOKEN: &str = "replica-dev-token";
/// The token of `asker`, whose asks go to its own client by elicitation (R47).
const ASKER_TOKEN: &str = "replica-asker-token";
/// `correct horse`, alice's sign-in token on the page.
const ALICE: &str = "correct horse";
const ALICE_HASH: &str = "4104d36f8da2c254349f85836793ebe029e0c957063a34c91c2e9203187b5631";

fn needed(what: &str) -> Option<()> {
    if std::env::var_os("CI").is_some() {
        panic!("{what} (CI is set, so this fails rather than skips)");
    }
    eprintln!("SKIPPED: {what}");
    None
}

fn haproxy() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TOOLGATE_HAPROXY") {
        return Some(PathBuf::from(p));
    }
    for dir in ["/usr/sbin", "/usr/bin", "/usr/local/sbin"] {
        let p = Path::new(dir).join("haproxy");
        if p.exists() {
            return Some(p);
        }
    }
    needed("HAProxy is not installed; run .ci/haproxy.sh")?;
    None
}

/// `toolgate ARGS --config CONFIG`, its standard error echoed (prefixed with `name`).
fn toolgate(name: &str, args: &[&str], config: &Path) -> Proc {
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(args)
        .arg("--config")
        .arg(config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = child.stderr.take().unwrap();
    let name = name.to_owned();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            eprintln!("{name}: {line}");
        }
    });
    Proc(child)
}

/// A fresh database on the test server, for this test alone.
async fn fresh_database(url: &str) -> String {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    // Two tests of this binary may ask in one millisecond: a counter keeps the names apart.
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = format!(
        "toolgate_replicas_{}_{n}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
    );
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    let (base, _) = url.rsplit_once('/').unwrap();
    format!("{base}/{name}")
}

async fn db(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

async fn state_of(db: &tokio_postgres::Client, id: &str) -> (String, Option<String>) {
    let row = db
        .query_one(
            "SELECT state, session_id FROM held_calls WHERE interaction_id = $1",
            &[&id],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

/// The configuration every replica reads: the shared PostgreSQL inbox, the page behind the
/// balancer (`public_url`), the upstream behind the relay.
fn write_config(dir: &Path, pg: &str, upstream: SocketAddr, lb_page: u16) -> PathBuf {
    let config = json!({
        "approval": {"channel": "inbox"},
        "inbox": {"postgres": pg},
        "approvers": {
            "listen": "127.0.0.1:0",
            "public_url": format!("http://127.0.0.1:{lb_page}"),
            "allowed_hosts": ["127.0.0.1"],
            "people": [{"name": "alice", "token_sha256": ALICE_HASH}]
        },
        "servers": {"drift": {"trust_tool_annotations": true}},
        "behavior_gating": {"require_approval_for_non_read_only": true},
        "agents": [
            {"name": "dev", "allowed_tools": ["drift__lookup", "drift__bare"]},
            {"name": "asker", "allowed_tools": ["drift__bare"], "approval": {"channel": "elicitation"}}
        ],
        "mcp": {
            "servers": {"drift": {"url": format!("http://{upstream}/mcp")}},
            "tokens": [
                {"sha256": toolgate_mcp::serve::token_hash(DEV_TOKEN), "agent": "dev"},
                {"sha256": toolgate_mcp::serve::token_hash(ASKER_TOKEN), "agent": "asker"}
            ],
            "call_timeout_secs": 60
        }
    });
    let path = dir.join("toolgate.json");
    std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
    path
}

/// The balancer's configuration: `deploy/haproxy.cfg` with this test's ports.
fn haproxy_config(lb_mcp: u16, mcp: [u16; 2], lb_page: u16, page: [u16; 2]) -> String {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/haproxy.cfg"),
    )
    .unwrap();
    text.replace("127.0.0.1:8931", &format!("127.0.0.1:{lb_mcp}"))
        .replace("127.0.0.1:18931", &format!("127.0.0.1:{}", mcp[0]))
        .replace("127.0.0.1:18932", &format!("127.0.0.1:{}", mcp[1]))
        .replace("127.0.0.1:8788", &format!("127.0.0.1:{lb_page}"))
        .replace("127.0.0.1:18788", &format!("127.0.0.1:{}", page[0]))
        .replace("127.0.0.1:18789", &format!("127.0.0.1:{}", page[1]))
        // The test's checks are quick, so a killed replica leaves at once.
        .replace("inter 2s", "inter 200ms")
        // Which replica answered, for the test to see a retry cross replicas.
        .replace(
            "backend toolgate_mcp\n    balance roundrobin\n",
            "backend toolgate_mcp\n    balance roundrobin\n    http-response set-header X-Toolgate-Replica %s\n",
        )
}

async fn client(addr: &str) -> RunningService<RoleClient, ()> {
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp"))
            .auth_header(DEV_TOKEN),
    );
    ().serve(transport).await.unwrap()
}

async fn call(
    client: &RunningService<RoleClient, ()>,
    tool: &str,
    input: Value,
) -> Result<CallToolResult, String> {
    let Value::Object(args) = input else { panic!() };
    // A call whose replica died may never be answered: it ends here.
    match tokio::time::timeout(
        Duration::from_secs(20),
        client.call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(args)),
    )
    .await
    {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err(String::from("no answer within 20 s")),
    }
}

fn meta(r: &CallToolResult) -> Value {
    r.structured_content
        .as_ref()
        .map(|s| s["toolgate"].clone())
        .unwrap_or(Value::Null)
}

async fn until(what: &str, within: Duration, mut check: impl FnMut() -> bool) -> Duration {
    let t0 = Instant::now();
    while !check() {
        assert!(t0.elapsed() < within, "not within {within:?}: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    t0.elapsed()
}

/// The value of the hidden input `name` in `html`.
fn field(html: &str, name: &str) -> Option<String> {
    let at = html.find(&format!("name=\"{name}\" value=\""))?;
    let rest = &html[at + name.len() + 15..];
    Some(
        rest[..rest.find('"')?]
            .replace("&quot;", "\"")
            .replace("&amp;", "&"),
    )
}

fn form(fields: &[(&str, &str)]) -> String {
    let enc = |s: &str| {
        let mut out = String::new();
        for b in s.bytes() {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                out.push(char::from(b));
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
        out
    };
    fields
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect::<Vec<_>>()
        .join("&")
}

fn cookie(r: &reqwest::Response) -> String {
    r.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.split(';').next())
        .collect::<Vec<_>>()
        .join("; ")
}

/// Signs alice in on the page at `base` and approves held call `id` there.
async fn approve_on_page(base: &str, id: &str) {
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let login = http.get(format!("{base}/login")).send().await.unwrap();
    let login_cookie = cookie(&login);
    let nonce = field(&login.text().await.unwrap(), "csrf").unwrap();
    let signed = http
        .post(format!("{base}/login"))
        .header("cookie", login_cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form(&[("csrf", &nonce), ("token", ALICE)]))
        .send()
        .await
        .unwrap();
    assert_eq!(signed.status().as_u16(), 303);
    let session = cookie(&signed);
    let card = http
        .get(format!("{base}/calls/{id}"))
        .header("cookie", &session)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let fields = [
        ("decision", String::from("approve")),
        ("csrf", field(&card, "csrf").unwrap()),
        ("idempotency_key", field(&card, "idempotency_key").unwrap()),
        ("input_hash", field(&card, "input_hash").unwrap()),
        ("definition_hash", field(&card, "definition_hash").unwrap()),
    ];
    let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let answered = http
        .post(format!("{base}/calls/{id}/answer"))
        .header("cookie", &session)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form(&fields))
        .send()
        .await
        .unwrap();
    assert_eq!(answered.status().as_u16(), 303, "the approval on the page");
}

fn put_policy(pg: &str, policy: &str) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["policy", "put", "--pg-url", pg, "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(policy.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn issue23_two_replicas_of_each_behind_haproxy_share_one_postgres() {
    let Some(haproxy) = haproxy() else { return };
    let Some(base_url) = std::env::var("TOOLGATE_PG_URL")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        let _ = needed("TOOLGATE_PG_URL is not set; run `eval \"$(bash .ci/postgres.sh)\"`");
        return;
    };
    let pg = fresh_database(&base_url).await;
    let db = db(&pg).await;
    let dir = tempfile::tempdir().unwrap();
    let (drift, drift_addr) = upstream_at().await;
    let hang = Arc::new(AtomicBool::new(false));
    let relay = hanging_relay(drift_addr, Arc::clone(&hang));
    let (lb_mcp, lb_page) = (free_port(), free_port());
    let mcp_ports = [free_port(), free_port()];
    let page_ports = [free_port(), free_port()];
    let config = write_config(dir.path(), &pg, relay, lb_page);
    let mcp_replica = |i: usize| {
        toolgate(
            ["mcp-a", "mcp-b"][i],
            &[
                "mcp",
                "serve",
                "--http",
                &format!("127.0.0.1:{}", mcp_ports[i]),
            ],
            &config,
        )
    };
    let mut mcp = [mcp_replica(0), mcp_replica(1)];
    let _pages = [0, 1].map(|i| {
        toolgate(
            ["page-a", "page-b"][i],
            &["serve", "--listen", &format!("127.0.0.1:{}", page_ports[i])],
            &config,
        )
    });
    let lb_config = dir.path().join("haproxy.cfg");
    std::fs::write(
        &lb_config,
        haproxy_config(lb_mcp, mcp_ports, lb_page, page_ports),
    )
    .unwrap();
    let _lb = Proc(
        Command::new(&haproxy)
            .args(["-db", "-f"])
            .arg(&lb_config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let a = format!("127.0.0.1:{}", mcp_ports[0]);
    let b = format!("127.0.0.1:{}", mcp_ports[1]);
    let lb = format!("127.0.0.1:{lb_mcp}");
    let page_b = format!("http://127.0.0.1:{}", page_ports[1]);
    for addr in [
        &a,
        &b,
        &format!("127.0.0.1:{}", page_ports[0]),
        &page_b[7..].to_owned(),
    ] {
        until(&format!("{addr} is ready"), Duration::from_secs(60), || {
            http_get(addr, "/readyz") == 200
        })
        .await;
    }
    until("the balancer serves", Duration::from_secs(10), || {
        http_get(&lb, "/readyz") == 200
    })
    .await;

    // Throughput of governed calls through the balancer (benches/README.md).
    {
        let clients = 8;
        let per = 50;
        let t0 = Instant::now();
        let mut tasks = Vec::new();
        for c in 0..clients {
            let lb = lb.clone();
            tasks.push(tokio::spawn(async move {
                let cl = client(&lb).await;
                for i in 0..per {
                    let r = call(&cl, "drift__lookup", json!({"query": format!("{c}-{i}")}))
                        .await
                        .unwrap();
                    assert_eq!(r.is_error, Some(false), "{r:?}");
                }
                let _ = cl.cancel().await;
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let took = t0.elapsed();
        let n = clients * per;
        eprintln!(
            "REPLICAS THROUGHPUT: {n} governed calls by {clients} clients through HAProxy to 2 replicas in {took:?}: {:.0} calls/s",
            n as f64 / took.as_secs_f64()
        );
        assert_eq!(drift.calls("lookup"), n as u64);
    }

    // Issue 35 item 7: a 2026-07-28 client (the Python SDK's default) has no session, so the
    // balancer sticks nothing and sends each request to the next replica: a question asked by
    // one replica is answered by the client's retry on the other, from the shared inbox.
    if let Some(python) = common::python_sdk() {
        let before = drift.calls("bare");
        let out = Command::new(&python)
            .arg(
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../layers/mcp-testkit/tests/python/replica_elicit.py"),
            )
            .args([&format!("http://{lb}/mcp"), ASKER_TOKEN, "4"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "the Python SDK client failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let seen: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
        let mut crossed = 0;
        for call in &seen {
            assert_eq!(call["protocol"], "2026-07-28", "{call}");
            assert_eq!(call["isError"], false, "{call}");
            assert_eq!(call["text"], "bare ran", "{call}");
            assert_eq!(call["asked"].as_array().unwrap().len(), 1, "{call}");
            let replicas = call["replicas"].as_array().unwrap();
            assert_eq!(replicas.len(), 2, "the question and its retry: {call}");
            crossed += usize::from(replicas[0] != replicas[1]);
        }
        assert!(
            crossed > 0,
            "round robin sent every retry to the replica that asked: {seen:?}"
        );
        assert_eq!(drift.calls("bare") - before, 4, "each call sent once");
        eprintln!("REPLICAS ELICITATION: {crossed} of 4 retries answered by the other replica");
    }

    // The sends of `bare` from here on (the 2026-07-28 calls above sent their own).
    let bare_before = drift.calls("bare");
    let bare_sent = || drift.calls("bare") - bare_before;
    // Held through replica A, approved on the page served by replica B, repeated through
    // both replicas at once: sent exactly once.
    let on_a = client(&a).await;
    let held = call(&on_a, "drift__bare", json!({"n": 1})).await.unwrap();
    assert_eq!(meta(&held)["outcome"], "held", "{held:?}");
    let id = meta(&held)["interaction_id"].as_str().unwrap().to_owned();
    // The held result links the card through the balancer.
    assert!(
        meta(&held)["approval_url"]
            .as_str()
            .unwrap()
            .starts_with(&format!("http://127.0.0.1:{lb_page}/calls/")),
        "{held:?}"
    );
    approve_on_page(&page_b, &id).await;
    let on_b = client(&b).await;
    let (ra, rb) = tokio::join!(
        call(&on_a, "drift__bare", json!({"n": 1})),
        call(&on_b, "drift__bare", json!({"n": 1}))
    );
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    let ran = [&ra, &rb]
        .iter()
        .filter(|r| r.is_error == Some(false))
        .count();
    assert_eq!(ran, 1, "one repeat runs it: {ra:?} {rb:?}");
    assert_eq!(bare_sent(), 1, "sent exactly once");
    let through_lb = client(&lb).await;
    let again = call(&through_lb, "drift__bare", json!({"n": 1}))
        .await
        .unwrap();
    assert_eq!(again.is_error, Some(true), "{again:?}");
    assert_eq!(bare_sent(), 1, "never sent twice");
    assert_eq!(state_of(&db, &id).await.0, "done");

    // A policy put reaches both replicas within a second (LISTEN/NOTIFY).
    put_policy(
        &pg,
        r#"{"rules": [{"effect": "deny", "tool": "lookup", "reason": "paused"}]}"#,
    );
    let t0 = Instant::now();
    for cl in [&on_a, &on_b] {
        loop {
            let r = call(cl, "drift__lookup", json!({"query": "p"}))
                .await
                .unwrap();
            if meta(&r)["code"] == "denied" {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(1),
                "the put did not reach a replica within 1 s"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    eprintln!(
        "REPLICAS POLICY: the put reached both replicas in {:?}",
        t0.elapsed()
    );

    // Quotas hold across replicas (R44): three sends in the window, whichever replica.
    put_policy(
        &pg,
        r#"{"rules": [], "quotas": [{"max": 3, "window_secs": 600, "tool": "lookup", "reason": "three lookups per ten minutes"}]}"#,
    );
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let sent_before = drift.calls("lookup");
    let mut ran = 0;
    let mut limited = 0;
    for i in 0..8 {
        let cl = if i % 2 == 0 { &on_a } else { &on_b };
        let r = call(cl, "drift__lookup", json!({"query": format!("q{i}")}))
            .await
            .unwrap();
        match r.is_error {
            Some(false) => ran += 1,
            _ => {
                assert_eq!(meta(&r)["code"], "rate_limited", "{r:?}");
                limited += 1;
            }
        }
    }
    assert_eq!((ran, limited), (3, 5));
    assert_eq!(drift.calls("lookup") - sent_before, 3);
    put_policy(&pg, r#"{"rules": []}"#);
    tokio::time::sleep(Duration::from_millis(1200)).await;

    // A replica killed mid-call leaves the call `unknown`, recovered at its next start.
    let held = call(&on_a, "drift__bare", json!({"n": 2})).await.unwrap();
    let id2 = meta(&held)["interaction_id"].as_str().unwrap().to_owned();
    approve_on_page(&page_b, &id2).await;
    hang.store(true, Ordering::SeqCst);
    let stuck = tokio::spawn(async move { call(&on_a, "drift__bare", json!({"n": 2})).await });
    let t0 = Instant::now();
    while state_of(&db, &id2).await.0 != "claimed" {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the repeat claimed it"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = mcp[0].0.kill();
    let _ = mcp[0].0.wait();
    stuck.abort();
    hang.store(false, Ordering::SeqCst);
    assert_eq!(state_of(&db, &id2).await.0, "claimed");
    mcp[0] = mcp_replica(0);
    until("replica A is back", Duration::from_secs(60), || {
        http_get(&a, "/readyz") == 200
    })
    .await;
    assert_eq!(
        state_of(&db, &id2).await.0,
        "unknown",
        "recovered at the next start"
    );
    let repeat = call(&on_b, "drift__bare", json!({"n": 2})).await.unwrap();
    assert_eq!(repeat.is_error, Some(true), "{repeat:?}");
    assert_eq!(bare_sent(), 1, "an unknown call is never sent again");

    // A client whose replica dies reconnects through the balancer and goes on.
    let sticky = client(&lb).await;
    let held = call(&sticky, "drift__bare", json!({"n": 3})).await.unwrap();
    let id3 = meta(&held)["interaction_id"].as_str().unwrap().to_owned();
    let session = state_of(&db, &id3).await.1.unwrap();
    let victim = mcp
        .iter()
        .position(|p| session.contains(&format!("-{}-", p.pid())))
        .expect("the session names its replica's process");
    let _ = mcp[victim].0.kill();
    let _ = mcp[victim].0.wait();
    // The same client goes on: the balancer sends its next request to the other replica,
    // which does not know the session (404), and the client opens a new one through the
    // balancer (the MCP client's re-initialization).
    let t0 = Instant::now();
    loop {
        match call(&sticky, "drift__lookup", json!({"query": "after"})).await {
            Ok(r) if r.is_error == Some(false) => break,
            other => {
                assert!(t0.elapsed() < Duration::from_secs(10), "{other:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    eprintln!(
        "REPLICAS FAILOVER: the client went on {:?} after its replica was killed",
        t0.elapsed()
    );
    approve_on_page(&page_b, &id3).await;
    let redeemed = call(&sticky, "drift__bare", json!({"n": 3})).await.unwrap();
    assert_eq!(redeemed.is_error, Some(false), "{redeemed:?}");
    assert_eq!(
        bare_sent(),
        2,
        "the approved call ran once, on the other replica"
    );
    let held = call(&sticky, "drift__bare", json!({"n": 4})).await.unwrap();
    let id4 = meta(&held)["interaction_id"].as_str().unwrap().to_owned();
    let survivor = mcp[1 - victim].pid();
    assert!(
        state_of(&db, &id4)
            .await
            .1
            .unwrap()
            .contains(&format!("-{survivor}-")),
        "the client's new session is on the surviving replica"
    );
    let _ = through_lb.cancel().await;
    let _ = on_b.cancel().await;
}

fn http_get_body(addr: &str, path: &str) -> (u16, String) {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return (0, String::new());
    };
    let _ = write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    );
    let mut resp = String::new();
    let _ = s.read_to_string(&mut resp);
    let status = resp
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (
        status,
        resp.split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue23_readyz_is_503_naming_the_store_once_the_database_is_gone() {
    let Some(base_url) = std::env::var("TOOLGATE_PG_URL")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        let _ = needed("TOOLGATE_PG_URL is not set; run `eval \"$(bash .ci/postgres.sh)\"`");
        return;
    };
    let pg = fresh_database(&base_url).await;
    let name = pg.rsplit('/').next().unwrap().to_owned();
    let dir = tempfile::tempdir().unwrap();
    let (_drift, drift_addr) = upstream_at().await;
    let config = write_config(dir.path(), &pg, drift_addr, free_port());
    let (mcp_port, page_port) = (free_port(), free_port());
    let mcp = format!("127.0.0.1:{mcp_port}");
    let page = format!("127.0.0.1:{page_port}");
    let _mcp = toolgate("mcp", &["mcp", "serve", "--http", &mcp], &config);
    let _page = toolgate("page", &["serve", "--listen", &page], &config);
    for addr in [&mcp, &page] {
        until(&format!("{addr} is ready"), Duration::from_secs(60), || {
            http_get(addr, "/readyz") == 200
        })
        .await;
    }
    // The database goes away under both.
    db(&base_url)
        .await
        .batch_execute(&format!("DROP DATABASE {name} WITH (FORCE)"))
        .await
        .unwrap();
    for addr in [&mcp, &page] {
        until(
            &format!("{addr} says the store is not ready"),
            Duration::from_secs(10),
            || {
                let (status, body) = http_get_body(addr, "/readyz");
                status == 503 && body.contains("\"not_ready\":[\"store: unreachable")
            },
        )
        .await;
        // Alive all the same.
        assert_eq!(http_get(addr, "/healthz"), 200);
    }
}
