//! Fixtures for the approval page's tests: a real gate over a real SQLite inbox, and the
//! page serving the same file on 127.0.0.1:0 (as `toolgate serve` would, from another
//! connection).
#![allow(
    dead_code,
    unreachable_pub,
    missing_docs,
    reason = "a kit shared by test files: each uses its own part"
)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use toolgate::GovernanceHandle;
use toolgate::approval::ApprovalGateLayer;
use toolgate::{AirGapLayer, ConfidentialityLayer, ExposureLayer};
use toolgate_core::{AgentRef, ToolCall, ToolOutput, ToolResponse};
use toolgate_engine::Governance;
use toolgate_engine::config::{Format, load_str};
use toolgate_inbox::{Inbox, InboxStore, PolicyWatch, SqliteInbox, SqliteOptions};
use toolgate_web::{WebSettings, hash_token};
use tower::util::BoxCloneService;
use tower::{ServiceBuilder, ServiceExt, service_fn};

pub const ALICE: &str = "alice-token-0123456789";
pub const BOB: &str = "bob-token-9876543210";

/// The configuration: `refund` (http) and `github / create_issue` (mcp) ask; alice may
/// answer anything and edit the policy; bob may answer only github's calls.
pub fn config(auth: &str) -> Value {
    let people = if auth == "proxy" {
        json!([
            {"name": "alice", "edit_policy": true},
            {"name": "bob", "tools": [{"server": "github"}]}
        ])
    } else {
        json!([
            {"name": "alice", "token_sha256": hash_token(ALICE), "edit_policy": true},
            {"name": "bob", "token_sha256": hash_token(BOB), "tools": [{"server": "github"}]}
        ])
    };
    let mut approvers = json!({"people": people});
    if auth == "proxy" {
        approvers["auth"] = json!("proxy_header");
        approvers["header"] = json!("X-Remote-User");
    }
    json!({
        "approval": {"channel": "inbox"},
        "tools": [
            {"kind": "http", "name": "refund", "approval": "require_approval", "description": "Refund an order"},
            {"kind": "http", "name": "lookup", "read_only": true},
            {"kind": "mcp", "server": "github", "name": "create_issue", "approval": "require_approval"}
        ],
        "agents": [
            {"name": "support", "allowed_tools": ["refund", "lookup", "github__create_issue"]}
        ],
        "approvers": approvers
    })
}

pub fn governance(auth: &str) -> Governance {
    load_str(&config(auth).to_string(), Format::Json).unwrap()
}

/// The configuration of `config(auth)` after `tweak`.
pub fn governance_tweaked(auth: &str, tweak: impl FnOnce(&mut Value)) -> Governance {
    let mut c = config(auth);
    tweak(&mut c);
    load_str(&c.to_string(), Format::Json).unwrap()
}

pub type Stack = BoxCloneService<ToolCall, ToolResponse, Infallible>;

/// The tool behind the gate: counts what it is sent.
#[derive(Debug, Clone, Default)]
pub struct Tool {
    pub runs: Arc<AtomicUsize>,
    pub received: Arc<Mutex<Vec<Value>>>,
}

impl Tool {
    pub fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }
}

pub struct Server {
    pub addr: SocketAddr,
    pub base: String,
    pub db: PathBuf,
    /// The gate's side: its own connection to the inbox file.
    pub inbox: Inbox,
    pub handle: GovernanceHandle,
    pub stack: Stack,
    pub tool: Tool,
    /// What a reload replaces (`toolgate serve` on SIGHUP, issue 33 item 4).
    pub in_force: toolgate_web::ApproversInForce,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

pub async fn start(auth: &str) -> Server {
    start_with(auth, Duration::from_millis(100)).await
}

pub async fn start_with(auth: &str, poll: Duration) -> Server {
    start_gov(governance(auth), poll).await
}

pub async fn start_gov(gov: Governance, poll: Duration) -> Server {
    start_gov_with(gov, poll, |_| {}).await
}

/// As [`start_gov`], with the page's settings changed by `tweak` before it starts.
pub async fn start_gov_with(
    gov: Governance,
    poll: Duration,
    tweak: impl FnOnce(&mut WebSettings),
) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("inbox.db");
    let gate = Inbox::new(SqliteInbox::open(&db, SqliteOptions::default()).unwrap());
    let page_store: Arc<dyn InboxStore> =
        Arc::new(SqliteInbox::open(&db, SqliteOptions::default()).unwrap());
    start_stores_with(gov, poll, gate, page_store, None, dir, db, tweak).await
}

/// The gate on `inbox`, the page on `page_store` (another connection to the same inbox).
pub async fn start_stores(
    gov: Governance,
    poll: Duration,
    inbox: Inbox,
    page_store: Arc<dyn InboxStore>,
    wake: Option<Arc<tokio::sync::Notify>>,
    dir: tempfile::TempDir,
    db: PathBuf,
) -> Server {
    start_stores_with(gov, poll, inbox, page_store, wake, dir, db, |_| {}).await
}

/// As [`start_stores`], with the page's settings changed by `tweak` before it starts.
#[allow(
    clippy::too_many_arguments,
    reason = "a test helper: the parts of one server"
)]
pub async fn start_stores_with(
    gov: Governance,
    poll: Duration,
    inbox: Inbox,
    page_store: Arc<dyn InboxStore>,
    wake: Option<Arc<tokio::sync::Notify>>,
    dir: tempfile::TempDir,
    db: PathBuf,
    tweak: impl FnOnce(&mut WebSettings),
) -> Server {
    let mut settings =
        WebSettings::from_governance(&gov, std::path::Path::new("toolgate.json")).unwrap();
    settings.poll_interval = poll;
    tweak(&mut settings);
    // `approvers.auth: jwt` (issue 22): the identity provider's keys.
    settings.connect_identity_provider().await.unwrap();
    let in_force = settings.in_force.clone();
    let handle = GovernanceHandle::new(gov);
    let tool = Tool::default();
    let stack = stack(&handle, &inbox, &tool);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(toolgate_web::serve_woken(
        listener,
        page_store,
        settings,
        wake,
        async move {
            let _ = rx.await;
        },
    ));
    Server {
        addr,
        base: format!("http://{addr}"),
        db,
        inbox,
        handle,
        stack,
        tool,
        in_force,
        stop: Some(tx),
        _dir: dir,
    }
}

pub fn stack(handle: &GovernanceHandle, inbox: &Inbox, tool: &Tool) -> Stack {
    let tool = tool.clone();
    let svc = ServiceBuilder::new()
        .layer(ExposureLayer::new(handle.clone()))
        .layer(ConfidentialityLayer::new(handle.clone()))
        .layer(AirGapLayer::new(handle.clone()))
        .layer(ApprovalGateLayer::new(handle.clone()).channel(inbox.channel()))
        .service(service_fn(move |call: ToolCall| {
            tool.runs.fetch_add(1, Ordering::SeqCst);
            tool.received.lock().unwrap().push(call.input.clone());
            std::future::ready(Ok::<_, Infallible>(ToolResponse::Completed(
                ToolOutput::new(json!({"done": call.input})),
            )))
        }));
    BoxCloneService::new(svc)
}

impl Server {
    pub async fn send(&self, call: ToolCall) -> ToolResponse {
        match self.stack.clone().oneshot(call).await {
            Ok(r) => r,
            Err(never) => match never {},
        }
    }

    /// Sends a call that must be held; its interaction id.
    pub async fn hold(&self, call: ToolCall) -> String {
        match self.send(call).await {
            ToolResponse::Held(h) => h.interaction_id,
            other => panic!("expected a held call, got {other:?}"),
        }
    }

    pub async fn hold_refund(&self, input: Value) -> String {
        self.hold(ToolCall::new(AgentRef::profile("support"), "refund", input))
            .await
    }

    /// The gate picks up the stored policy (what `poll_policy` does on its interval).
    pub async fn reload_policy(&self) {
        let mut watch = PolicyWatch::new(self.handle.clone(), None);
        watch.poll_once(&**self.inbox.store()).await;
    }

    pub fn client(&self) -> Client {
        Client::new(&self.base)
    }
}

/// Percent-encodes a form value.
pub fn enc(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

pub fn form(fields: &[(&str, &str)]) -> String {
    fields
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// The first `value` of an input named `name` in `html`.
pub fn field(html: &str, name: &str) -> Option<String> {
    let at = html.find(&format!("name=\"{name}\" value=\""))?;
    let rest = &html[at + name.len() + 15..];
    Some(
        rest[..rest.find('"')?]
            .replace("&quot;", "\"")
            .replace("&amp;", "&"),
    )
}

pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> String {
        self.headers
            .get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap_or("").to_owned())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// A browser-like client: keeps the session cookie, follows no redirect.
pub struct Client {
    http: reqwest::Client,
    base: String,
    pub cookie: Option<String>,
    /// Extra header (proxy mode).
    pub user: Option<(String, String)>,
}

impl Client {
    pub fn new(base: &str) -> Self {
        Self {
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            base: base.to_owned(),
            cookie: None,
            user: None,
        }
    }

    fn req(&self, r: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        let mut r = r;
        if let Some(c) = &self.cookie {
            r = r.header("cookie", c.clone());
        }
        if let Some((k, v)) = &self.user {
            r = r.header(k.as_str(), v.as_str());
        }
        r
    }

    async fn reply(r: reqwest::Response) -> Reply {
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        let body = r.text().await.unwrap_or_default();
        Reply {
            status,
            headers,
            body,
        }
    }

    pub async fn get(&self, path: &str) -> Reply {
        let r = self.req(self.http.get(format!("{}{path}", self.base)));
        Self::reply(r.send().await.unwrap()).await
    }

    pub async fn post_raw(&self, path: &str, body: String) -> Reply {
        let r = self
            .req(self.http.post(format!("{}{path}", self.base)))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        Self::reply(r.send().await.unwrap()).await
    }

    pub async fn post(&self, path: &str, fields: &[(&str, &str)]) -> Reply {
        self.post_raw(path, form(fields)).await
    }

    /// Signs in with `token`; the reply of the sign-in POST.
    pub async fn login(&mut self, token: &str) -> Reply {
        let page = self.get("/login").await;
        assert_eq!(page.status, 200, "{}", page.body);
        let nonce = field(&page.body, "csrf").expect("the sign-in form's nonce");
        let login_cookie = page
            .header("set-cookie")
            .split(';')
            .next()
            .unwrap()
            .to_owned();
        let saved = self.cookie.replace(login_cookie);
        let reply = self
            .post("/login", &[("csrf", &nonce), ("token", token)])
            .await;
        self.cookie = saved;
        if reply.status == 303 {
            let session = reply.header("set-cookie");
            let pair = session.split(';').next().unwrap().to_owned();
            assert!(pair.starts_with("tg_session="), "{session}");
            self.cookie = Some(pair);
        }
        reply
    }

    /// The CSRF token of the signed-in person (from any page).
    pub async fn csrf(&self) -> String {
        field(&self.get("/").await.body, "csrf").expect("a CSRF token on the page")
    }
}

pub async fn signed_in(server: &Server, token: &str) -> Client {
    let mut c = server.client();
    let r = c.login(token).await;
    assert_eq!(r.status, 303, "{}", r.body);
    c
}

// ----- the grant form (R45, issue 34 item 7) -----

/// The fields of a card's grant form as the page filled them, with `edits` applied.
pub fn grant_fields(page: &str, edits: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let at = page.find("action=\"/calls/").unwrap();
    let form_at = page[at..].find("class=\"grant\"").map(|i| i + at).unwrap();
    let form = &page[form_at..];
    let end = form.find("</form>").unwrap();
    let form = &form[..end];
    for name in [
        "csrf",
        "input_hash",
        "definition_hash",
        "idempotency_key",
        "for",
        "max_calls",
        "agent",
        "tool",
        "server",
        "session",
        "reason",
    ] {
        out.push((name.to_owned(), field(form, name).unwrap_or_default()));
    }
    let when = form
        .split("name=\"when\"")
        .nth(1)
        .and_then(|t| t.split_once('>'))
        .and_then(|(_, t)| t.split_once("</textarea>"))
        .map(|(t, _)| unescape(t))
        .unwrap_or_default();
    out.push(("when".into(), when));
    for (k, v) in edits {
        match out.iter_mut().find(|(n, _)| n == k) {
            Some(slot) => slot.1 = (*v).to_owned(),
            None => out.push(((*k).to_owned(), (*v).to_owned())),
        }
    }
    out
}

/// Posts a card's grant form with `fields` (the page's reply, nothing followed).
pub async fn post_grant(c: &Client, id: &str, fields: &[(String, String)]) -> Reply {
    let pairs: Vec<(&str, &str)> = fields
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    c.post(&format!("/calls/{id}/grant"), &pairs).await
}

/// Posts a grant that leaves more open than the card's offer: the page answers with what it
/// leaves open, in words, and nothing is saved (issue 34 item 7); saved from there, with the
/// digest of that list. The check page's reply, and the reply of saving from it.
pub async fn post_grant_confirmed(
    c: &Client,
    id: &str,
    fields: &[(String, String)],
) -> (Reply, Reply) {
    let check = post_grant(c, id, fields).await;
    assert_eq!(check.status, 200, "{}", check.body);
    assert!(check.body.contains("id=\"grant-check\""), "{}", check.body);
    let print = field(&check.body, "open_fields").expect("the list's digest");
    let mut fields = fields.to_vec();
    fields.retain(|(k, _)| k != "open_fields");
    fields.push(("open_fields".into(), print));
    let saved = post_grant(c, id, &fields).await;
    (check, saved)
}

/// Text of an element as the page escaped it, read back.
pub fn unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// The configuration of [`config`] with two more tools that ask (issue 34 item 7): `transfer`
/// (money to an account) and `shell` (a command line), both allowed to `support`.
pub fn issue34_governance() -> Governance {
    governance_tweaked("token", |c| {
        if let Some(tools) = c["tools"].as_array_mut() {
            tools.push(json!({"kind": "http", "name": "transfer", "approval": "require_approval"}));
            tools.push(json!({"kind": "http", "name": "shell", "approval": "require_approval"}));
        }
        if let Some(allowed) = c["agents"][0]["allowed_tools"].as_array_mut() {
            allowed.push(json!("transfer"));
            allowed.push(json!("shell"));
        }
    })
}

/// A call of `support` to `tool` with `input`.
pub fn call(tool: &str, input: Value) -> ToolCall {
    ToolCall::new(AgentRef::profile("support"), tool, input)
}
