//! `toolgate_mcp::serve` (issue 15) from the rmcp client: toolgate as an MCP server in front
//! of our drift server (stdio child), downstream in-process and over streamable HTTP.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ElicitRequestParams,
    ElicitResult, ElicitationAction, Implementation, ProgressNotificationParam, Tool,
};
use rmcp::service::{NotificationContext, RequestContext, RunningService};
use rmcp::{ClientHandler, ErrorData, RoleClient, ServiceExt};
use serde_json::{Map, Value, json};
use toolgate::GovernanceHandle;
use toolgate_engine::config::{Format, load_str};
use toolgate_inbox::{Answer, Inbox, SqliteInbox, SqliteOptions};
use toolgate_mcp::serve::{APPROVAL_NOTE, GovernedServer, ServeConfig, WireNames, token_hash};

/// The downstream client: answers elicitations as told (or declares no elicitation at all),
/// records what it was asked and counts `list_changed` notifications.
#[derive(Clone)]
struct Client {
    elicit: Option<ElicitationAction>,
    asked: Arc<Mutex<Vec<String>>>,
    list_changed: Arc<AtomicUsize>,
    /// Relayed from the upstream during calls: `progress <token> <n>/<total>`, `log <data>`.
    relayed: Arc<Mutex<Vec<String>>>,
    /// How long its user takes to answer.
    delay: Duration,
}

impl Client {
    fn new(elicit: Option<ElicitationAction>) -> Self {
        Self {
            elicit,
            asked: Arc::default(),
            list_changed: Arc::default(),
            relayed: Arc::default(),
            delay: Duration::ZERO,
        }
    }

    /// A client whose user answers only after `delay`.
    fn answering_after(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
}

impl ClientHandler for Client {
    fn get_info(&self) -> ClientConfig {
        let caps = if self.elicit.is_some() {
            ClientCapabilities::builder().enable_elicitation().build()
        } else {
            ClientCapabilities::default()
        };
        ClientConfig::new(caps, Implementation::new("serve-test-client", "0"))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        if let ElicitRequestParams::FormElicitationParams { message, .. } = &request {
            self.asked.lock().unwrap().push(message.clone());
        }
        tokio::time::sleep(self.delay).await;
        Ok(ElicitResult::new(
            self.elicit.clone().unwrap_or(ElicitationAction::Decline),
        ))
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.list_changed.fetch_add(1, Ordering::SeqCst);
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let token = serde_json::to_value(&params.progress_token).unwrap();
        self.relayed.lock().unwrap().push(format!(
            "progress {token} {}/{}",
            params.progress,
            params.total.unwrap_or_default()
        ));
    }

    #[allow(deprecated, reason = "logging (SEP-2577): what toolgate relays")]
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.relayed
            .lock()
            .unwrap()
            .push(format!("log {}", params.data.as_str().unwrap_or_default()));
    }
}

const AGENTS: &str = r#"
    "servers": {"drift": {"trust_tool_annotations": true}},
    "behavior_gating": {"require_approval_for_non_read_only": true},
    "agents": [
        {"name": "dev", "allowed_tools": ["drift__lookup", "drift__bare", "drift__stats", "drift__fail", "drift__set_mode"]},
        {"name": "viewer", "allowed_tools": ["drift__lookup"]}
    ]"#;

fn serve_config() -> ServeConfig {
    ServeConfig {
        servers: vec![common::drift("drift")],
        tokens: HashMap::from([
            (token_hash("dev-token"), String::from("dev")),
            (token_hash("viewer-token"), String::from("viewer")),
        ]),
        token_names: HashMap::from([(token_hash("dev-token"), String::from("dev laptop"))]),
        call_timeout: Duration::from_secs(20),
        wire_names: WireNames::Qualified,
        jwt: None,
        gateway: Default::default(),
        hooks: Vec::new(),
    }
}

async fn server(channel: &str, inbox: Option<Inbox>, extra: &str) -> GovernedServer {
    let text = format!(r#"{{"approval": {{"channel": "{channel}"}}, {AGENTS} {extra}}}"#);
    let handle = GovernanceHandle::new(load_str(&text, Format::Json).unwrap());
    GovernedServer::start(handle, &serve_config(), inbox)
        .await
        .unwrap()
}

async fn connect(
    server: &GovernedServer,
    agent: &str,
    client: Client,
) -> RunningService<RoleClient, Client> {
    let (client_end, server_end) = tokio::io::duplex(256 * 1024);
    let server = server.clone();
    let agent = agent.to_owned();
    tokio::spawn(async move { server.serve_io(&agent, server_end).await });
    client.serve(client_end).await.unwrap()
}

fn names(tools: &[Tool]) -> Vec<String> {
    let mut n: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    n.sort();
    n
}

async fn call(
    client: &RunningService<RoleClient, Client>,
    tool: &str,
    args: Value,
) -> CallToolResult {
    let Value::Object(args) = args else { panic!() };
    client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(args))
        .await
        .unwrap_or_else(|e| panic!("`{tool}` must be answered with a tool result, got {e}"))
}

fn text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join(" ")
}

fn code(r: &CallToolResult) -> Option<String> {
    r.structured_content.as_ref()?["toolgate"]["code"]
        .as_str()
        .map(str::to_owned)
}

async fn calls_received(client: &RunningService<RoleClient, Client>, tool: &str) -> u64 {
    let stats = call(client, "drift__stats", json!({})).await;
    stats.structured_content.unwrap()["calls"][tool]
        .as_u64()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r6_two_agents_see_their_own_exposure_with_schemas_annotations_and_the_approval_note() {
    let server = server("elicitation", None, "").await;
    let dev = connect(&server, "dev", Client::new(None)).await;
    let viewer = connect(&server, "viewer", Client::new(None)).await;
    let dev_tools = dev.list_all_tools().await.unwrap();
    let viewer_tools = viewer.list_all_tools().await.unwrap();
    assert_eq!(
        names(&dev_tools),
        [
            "drift__bare",
            "drift__fail",
            "drift__lookup",
            "drift__set_mode",
            "drift__stats"
        ]
    );
    assert_eq!(names(&viewer_tools), ["drift__lookup"]);
    let lookup = viewer_tools.first().unwrap();
    assert_eq!(
        lookup.input_schema.get("required"),
        Some(&json!(["query"])),
        "the input schema as recorded"
    );
    let ann = lookup
        .annotations
        .as_ref()
        .expect("annotations as recorded");
    assert_eq!(ann.read_only_hint, Some(true));
    assert_eq!(ann.title.as_deref(), Some("Look up"));
    assert!(
        !lookup
            .description
            .as_deref()
            .unwrap_or("")
            .contains(APPROVAL_NOTE)
    );
    // `bare` has no annotations: the posture wraps it (R12), and the list says so.
    let bare = dev_tools.iter().find(|t| t.name == "drift__bare").unwrap();
    assert!(
        bare.description
            .as_deref()
            .unwrap()
            .ends_with(APPROVAL_NOTE),
        "{:?}",
        bare.description
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_call_runs_and_a_refusal_is_a_tool_result_with_is_error() {
    let server = server("elicitation", None, "").await;
    let dev = connect(&server, "dev", Client::new(None)).await;
    let viewer = connect(&server, "viewer", Client::new(None)).await;
    let ran = call(&dev, "drift__lookup", json!({"query": "k1"})).await;
    assert_eq!(ran.is_error, Some(false));
    assert_eq!(text(&ran), "found k1");

    let refused = call(&viewer, "drift__bare", json!({})).await;
    assert_eq!(refused.is_error, Some(true));
    assert_eq!(
        code(&refused).as_deref(),
        Some("not_allowed"),
        "{refused:?}"
    );
    assert!(text(&refused).contains("not_allowed"), "{}", text(&refused));
    // R36: the input schema, before anything is sent.
    let invalid = call(&dev, "drift__lookup", json!({"query": 7})).await;
    assert_eq!(code(&invalid).as_deref(), Some("invalid_input"));
    // A tool failure stays a tool failure.
    let failed = call(&dev, "drift__fail", json!({})).await;
    assert_eq!(failed.is_error, Some(true));
    assert_eq!(code(&failed), None);
    assert_eq!(
        calls_received(&dev, "bare").await,
        0,
        "the refused call was never sent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r26_an_ask_is_answered_by_elicitation_accept_runs_decline_and_cancel_refuse() {
    let server = server("elicitation", None, "").await;
    let yes = Client::new(Some(ElicitationAction::Accept));
    let asked = Arc::clone(&yes.asked);
    let dev = connect(&server, "dev", yes).await;
    let ran = call(&dev, "drift__bare", json!({"why": "test"})).await;
    assert_eq!(text(&ran), "bare ran", "{ran:?}");
    let messages = asked.lock().unwrap().clone();
    assert_eq!(messages.len(), 1);
    assert!(
        messages[0].contains("bare"),
        "the prompt names the tool: {}",
        messages[0]
    );
    assert!(
        messages[0].contains("\"why\""),
        "the input is shown: {}",
        messages[0]
    );

    for (action, word) in [
        (ElicitationAction::Decline, "declined"),
        (ElicitationAction::Cancel, "cancelled"),
    ] {
        let dev = connect(&server, "dev", Client::new(Some(action))).await;
        let refused = call(&dev, "drift__bare", json!({})).await;
        assert_eq!(refused.is_error, Some(true));
        assert_eq!(code(&refused).as_deref(), Some("rejected"), "{refused:?}");
        assert!(text(&refused).contains(word), "{}", text(&refused));
    }
    assert_eq!(
        calls_received(&dev, "bare").await,
        1,
        "only the accepted call ran"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r26_an_ask_with_no_elicitation_and_no_inbox_is_no_approval_channel() {
    let server = server("elicitation", None, "").await;
    let dev = connect(&server, "dev", Client::new(None)).await;
    let refused = call(&dev, "drift__bare", json!({})).await;
    assert_eq!(
        code(&refused).as_deref(),
        Some("no_approval_channel"),
        "{refused:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r38_a_held_call_approved_in_the_inbox_runs_once_when_called_again() {
    let dir = tempfile::tempdir().unwrap();
    let inbox = Inbox::new(
        SqliteInbox::open(dir.path().join("inbox.db"), SqliteOptions::default()).unwrap(),
    );
    let server = server("inbox", Some(inbox.clone()), "").await;
    let dev = connect(&server, "dev", Client::new(None)).await;
    let input = json!({"n": 1});
    let held = call(&dev, "drift__bare", input.clone()).await;
    assert_eq!(held.is_error, Some(true));
    let meta = &held.structured_content.as_ref().unwrap()["toolgate"];
    assert_eq!(meta["outcome"], "held");
    let id = meta["interaction_id"].as_str().unwrap().to_owned();
    assert!(text(&held).contains(&id), "{}", text(&held));
    assert!(!meta["reasons"].as_array().unwrap().is_empty());

    // Asked again before anyone answered: the same held call, not a second one.
    let again = call(&dev, "drift__bare", input.clone()).await;
    assert_eq!(
        again.structured_content.unwrap()["toolgate"]["interaction_id"],
        id.as_str()
    );
    assert_eq!(inbox.store().list(None).await.unwrap().len(), 1);

    inbox
        .store()
        .answer(&id, Answer::approve("k1", "alice"))
        .await
        .unwrap();
    let ran = call(&dev, "drift__bare", input.clone()).await;
    assert_eq!(text(&ran), "bare ran", "{ran:?}");
    assert_eq!(calls_received(&dev, "bare").await, 1);
    // Another input is its own call; and the same input again is a new held call.
    let other = call(&dev, "drift__bare", json!({"n": 2})).await;
    assert_eq!(
        other.structured_content.unwrap()["toolgate"]["outcome"],
        "held"
    );
    // R26: the first repeat of a call already sent is told so, and holds nothing …
    let told = call(&dev, "drift__bare", input.clone()).await;
    assert_eq!(code(&told).as_deref(), Some("rejected"), "{told:?}");
    assert!(text(&told).contains("already sent"), "{}", text(&told));
    assert_eq!(inbox.store().list(None).await.unwrap().len(), 2);
    // … and the one after that is a new held call.
    let new = call(&dev, "drift__bare", input).await;
    let new_id = new.structured_content.unwrap()["toolgate"]["interaction_id"].clone();
    assert_ne!(new_id, id.as_str(), "a redeemed approval is not used twice");
    assert_eq!(calls_received(&dev, "bare").await, 1, "sent exactly once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r26_concurrent_repeats_of_a_sent_call_hold_one_card_between_them() {
    let dir = tempfile::tempdir().unwrap();
    let inbox = Inbox::new(
        SqliteInbox::open(dir.path().join("inbox.db"), SqliteOptions::default()).unwrap(),
    );
    let server = server("inbox", Some(inbox.clone()), "").await;
    let dev = connect(&server, "dev", Client::new(None)).await;
    let input = json!({"n": 9});
    let held = call(&dev, "drift__bare", input.clone()).await;
    let id = held.structured_content.unwrap()["toolgate"]["interaction_id"]
        .as_str()
        .unwrap()
        .to_owned();
    inbox
        .store()
        .answer(&id, Answer::approved_by("alice"))
        .await
        .unwrap();
    let ran = call(&dev, "drift__bare", input.clone()).await;
    assert_eq!(text(&ran), "bare ran", "{ran:?}");
    // Then two repeats at once, twice over (each on its own session).
    for round in 0..2 {
        let a = connect(&server, "dev", Client::new(None)).await;
        let b = connect(&server, "dev", Client::new(None)).await;
        let (ra, rb) = tokio::join!(
            call(&a, "drift__bare", input.clone()),
            call(&b, "drift__bare", input.clone())
        );
        let ran = [&ra, &rb].iter().filter(|r| text(r) == "bare ran").count();
        assert_eq!(ran, 0, "R26: the approval was redeemed once: {ra:?} {rb:?}");
        let told = [&ra, &rb]
            .iter()
            .filter(|r| text(r).contains("already sent"))
            .count();
        assert_eq!(
            told,
            usize::from(round == 0),
            "R26: one repeat is told the call was already sent, once: {ra:?} {rb:?}"
        );
    }
    assert_eq!(calls_received(&dev, "bare").await, 1, "sent exactly once");
    let pending = inbox
        .store()
        .list(Some(toolgate_inbox::State::Pending))
        .await
        .unwrap();
    assert_eq!(
        pending.len(),
        1,
        "R26: concurrent repeats hold one fresh card between them, never two: {pending:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r26_a_denied_held_call_is_told_to_the_agent_with_the_reason_once() {
    let dir = tempfile::tempdir().unwrap();
    let inbox = Inbox::new(
        SqliteInbox::open(dir.path().join("inbox.db"), SqliteOptions::default()).unwrap(),
    );
    let server = server("inbox", Some(inbox.clone()), "").await;
    let dev = connect(&server, "dev", Client::new(None)).await;
    let input = json!({"n": 7});
    let held = call(&dev, "drift__bare", input.clone()).await;
    let id = held.structured_content.unwrap()["toolgate"]["interaction_id"]
        .as_str()
        .unwrap()
        .to_owned();
    inbox
        .store()
        .answer(
            &id,
            Answer::deny("k1", "alice", Some("wrong account".into())),
        )
        .await
        .unwrap();
    let told = call(&dev, "drift__bare", input.clone()).await;
    assert_eq!(
        code(&told).as_deref(),
        Some("rejected"),
        "R26: the repeat of a denied call is refused: {told:?}"
    );
    assert!(
        text(&told).contains("wrong account") && text(&told).contains("alice"),
        "R26: the agent is told who denied it and why: {}",
        text(&told)
    );
    assert_eq!(
        inbox.store().list(None).await.unwrap().len(),
        1,
        "R26: the repeat told the denial holds no fresh card"
    );
    let asked_again = call(&dev, "drift__bare", input).await;
    let meta = &asked_again.structured_content.unwrap()["toolgate"];
    assert_eq!(meta["outcome"], "held", "told once, then a fresh ask");
    assert_ne!(meta["interaction_id"], id.as_str());
    assert_eq!(calls_received(&dev, "bare").await, 0, "nothing was sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r26_r38_the_same_call_asked_again_finds_its_held_call_whatever_the_tool_names_case() {
    let dir = tempfile::tempdir().unwrap();
    let inbox = Inbox::new(
        SqliteInbox::open(dir.path().join("inbox.db"), SqliteOptions::default()).unwrap(),
    );
    let server = server("inbox", Some(inbox.clone()), "").await;
    let dev = connect(&server, "dev", Client::new(None)).await;
    let held = call(&dev, "drift__bare", json!({"n": 1, "m": [1, 2]})).await;
    let id = held.structured_content.unwrap()["toolgate"]["interaction_id"].clone();
    // The same input with its keys in another order is the same call (R35's canonical
    // form), and the tool's name is matched without regard to ASCII case.
    let again = call(&dev, "DRIFT__Bare", json!({"m": [1, 2], "n": 1})).await;
    assert_eq!(
        again.structured_content.unwrap()["toolgate"]["interaction_id"],
        id,
        "R26: the same held call, not a second one"
    );
    assert_eq!(inbox.store().list(None).await.unwrap().len(), 1);
    inbox
        .store()
        .answer(id.as_str().unwrap(), Answer::approved_by("alice"))
        .await
        .unwrap();
    let ran = call(&dev, "drift__BARE", json!({"n": 1, "m": [1, 2]})).await;
    assert_eq!(
        text(&ran),
        "bare ran",
        "R38: the approved call runs: {ran:?}"
    );
    assert_eq!(calls_received(&dev, "bare").await, 1, "sent exactly once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r6_r23_a_reload_serves_the_new_list_and_tells_only_the_sessions_whose_list_changed() {
    let server = server("elicitation", None, "").await;
    let (viewer_client, dev_client) = (Client::new(None), Client::new(None));
    let (viewer_changed, dev_changed) = (
        Arc::clone(&viewer_client.list_changed),
        Arc::clone(&dev_client.list_changed),
    );
    let viewer = connect(&server, "viewer", viewer_client).await;
    let dev = connect(&server, "dev", dev_client).await;
    let dev_before = names(&dev.list_all_tools().await.unwrap());
    for _ in 0..2 {
        // Listed twice on one snapshot: the same list.
        assert_eq!(
            names(&viewer.list_all_tools().await.unwrap()),
            ["drift__lookup"]
        );
    }
    let reload = |viewer_tools: &str| {
        let agents = AGENTS.replace(
            r#"{"name": "viewer", "allowed_tools": ["drift__lookup"]}"#,
            &format!(r#"{{"name": "viewer", "allowed_tools": [{viewer_tools}]}}"#),
        );
        let text = format!(r#"{{"approval": {{"channel": "elicitation"}}, {agents}}}"#);
        let server = server.clone();
        async move {
            server
                .reload(load_str(&text, Format::Json).unwrap(), &serve_config())
                .await
                .unwrap();
        }
    };
    let told = |count: Arc<AtomicUsize>, n: usize| async move {
        tokio::time::timeout(Duration::from_secs(20), async {
            while count.load(Ordering::SeqCst) < n {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("the session is told its list changed");
    };
    reload(r#""drift__lookup", "drift__stats""#).await;
    assert_eq!(
        names(&viewer.list_all_tools().await.unwrap()),
        ["drift__lookup", "drift__stats"],
        "R23: the new snapshot's list, not the one listed before"
    );
    told(Arc::clone(&viewer_changed), 1).await;
    assert_eq!(
        names(&dev.list_all_tools().await.unwrap()),
        dev_before,
        "dev's list did not change"
    );
    assert_eq!(dev_changed.load(Ordering::SeqCst), 0, "and dev is not told");
    // Back to the first configuration: a newer snapshot again, never the older cached list.
    reload(r#""drift__lookup""#).await;
    assert_eq!(
        names(&viewer.list_all_tools().await.unwrap()),
        ["drift__lookup"]
    );
    told(Arc::clone(&viewer_changed), 2).await;
    assert_eq!(
        viewer_changed.load(Ordering::SeqCst),
        2,
        "told once per change"
    );
    assert_eq!(
        dev_changed.load(Ordering::SeqCst),
        0,
        "dev's list never changed"
    );
}

/// R47: a reload may not route asks to a channel the server was not started with; the error
/// names the path that routes them, `agents[i].approval.channel` for an agent's own (it once
/// said `agents`), and the snapshot in force stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r47_a_reload_routing_asks_to_a_channel_not_started_with_names_its_path_and_keeps_the_snapshot()
 {
    let server = server("elicitation", None, "").await;
    let agents = AGENTS.replace(
        r#"{"name": "viewer", "allowed_tools": ["drift__lookup"]}"#,
        r#"{"name": "viewer", "allowed_tools": ["drift__lookup", "drift__bare"], "approval": {"channel": "inbox"}}"#,
    );
    let text = format!(r#"{{"approval": {{"channel": "elicitation"}}, {agents}}}"#);
    let Err(e) = server
        .reload(load_str(&text, Format::Json).unwrap(), &serve_config())
        .await
    else {
        panic!("a reload routing asks to `inbox` was taken by a server started without it");
    };
    let text = e.to_string();
    assert!(text.contains("agents[1].approval.channel"), "{text}");
    assert!(
        text.contains("agent `viewer`'s asks are routed to the `inbox` channel"),
        "{text}"
    );
    assert_eq!(
        names(&server.tools_for("viewer").unwrap()),
        ["drift__lookup"]
    );

    let host = format!(r#"{{"approval": {{"channel": "inbox"}}, {AGENTS}}}"#);
    let e = server
        .reload(load_str(&host, Format::Json).unwrap(), &serve_config())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("approval.channel") && e.contains("asks are routed to the `inbox` channel"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r35_drift_sends_list_changed_and_the_new_list() {
    let server = server("elicitation", None, "").await;
    let watcher = Client::new(None);
    let changed = Arc::clone(&watcher.list_changed);
    let viewer = connect(&server, "viewer", watcher).await;
    assert_eq!(
        names(&viewer.list_all_tools().await.unwrap()),
        ["drift__lookup"]
    );
    // A person accepts `set_mode` (it is not read-only): the upstream drops `lookup`.
    let dev = connect(&server, "dev", Client::new(Some(ElicitationAction::Accept))).await;
    let switched = call(&dev, "drift__set_mode", json!({"mode": "removed"})).await;
    assert_eq!(switched.is_error, Some(false), "{switched:?}");
    tokio::time::timeout(Duration::from_secs(20), async {
        while changed.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the viewer is told its list changed");
    assert!(viewer.list_all_tools().await.unwrap().is_empty());
}

async fn http_status(addr: std::net::SocketAddr, auth: Option<&str>) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
    let auth = auth
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let req = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 512];
    let n = s.read(&mut buf).await.unwrap();
    String::from_utf8_lossy(&buf[..n])
        .lines()
        .next()
        .unwrap_or("")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_needs_a_known_bearer_token_and_each_token_sees_its_agent() {
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let server = server("elicitation", None, "").await;
    let (tx, rx) = tokio::sync::oneshot::channel();
    let s = server.clone();
    tokio::spawn(async move {
        s.serve_http("127.0.0.1:0".parse().unwrap(), None, |a| {
            let _ = tx.send(a);
        })
        .await
    });
    let addr = rx.await.unwrap();
    assert!(http_status(addr, None).await.contains("401"));
    assert!(http_status(addr, Some("not-a-token")).await.contains("401"));
    assert!(
        http_status(addr, Some("viewer-token"))
            .await
            .contains("200")
    );

    let mut lists = Vec::new();
    for token in ["dev-token", "viewer-token"] {
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp"))
                .auth_header(token),
        );
        let client = Client::new(None).serve(transport).await.unwrap();
        lists.push(names(&client.list_all_tools().await.unwrap()));
        let ran = call(&client, "drift__lookup", json!({"query": token})).await;
        assert_eq!(text(&ran), format!("found {token}"));
        let _ = client.cancel().await;
    }
    assert_eq!(lists[1], ["drift__lookup"]);
    assert_eq!(lists[0].len(), 5);
}

/// The pid of the process whose environment carries `TOOLGATE_TEST_MARK=<mark>`.
fn pid_with_mark(mark: &str) -> Option<String> {
    let want = format!("TOOLGATE_TEST_MARK={mark}");
    for entry in std::fs::read_dir("/proc").ok()? {
        let path = entry.ok()?.path();
        let Ok(env) = std::fs::read(path.join("environ")) else {
            continue;
        };
        if env.split(|&b| b == 0).any(|v| v == want.as_bytes()) {
            return path.file_name().map(|p| p.to_string_lossy().to_string());
        }
    }
    None
}

/// Calls `tool` until `pred` holds for its result (at most 30 s: a bound, not a timing check).
async fn call_until(
    client: &RunningService<RoleClient, Client>,
    tool: &str,
    pred: impl Fn(&CallToolResult) -> bool,
) -> CallToolResult {
    tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let r = call(client, tool, json!({"query": "q"})).await;
            if pred(&r) {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the expected result arrived")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_exits_is_refused_with_a_reason_while_it_reconnects_and_the_session_survives()
 {
    let dir = tempfile::tempdir().unwrap();
    let flag = dir.path().join("up");
    std::fs::write(&flag, "").unwrap();
    let mark = format!("reconnect-{}", std::process::id());
    // Starts the drift server only while the flag file exists.
    let upstream = toolgate_mcp::McpServerConfig::stdio("drift", "sh")
        .unwrap()
        .args([
            "-c",
            &format!(
                "[ -f '{}' ] && exec '{}' || exit 1",
                flag.display(),
                env!("CARGO_BIN_EXE_toolgate-mcp-drift-server")
            ),
        ])
        .env("TOOLGATE_TEST_MARK", mark.clone());
    let text = format!(r#"{{"approval": {{"channel": "elicitation"}}, {AGENTS}}}"#);
    let handle = GovernanceHandle::new(load_str(&text, Format::Json).unwrap());
    let config = ServeConfig {
        servers: vec![upstream],
        tokens: HashMap::new(),
        token_names: HashMap::new(),
        call_timeout: Duration::from_secs(20),
        wire_names: WireNames::Qualified,
        jwt: None,
        gateway: Default::default(),
        hooks: Vec::new(),
    };
    let server = GovernedServer::start(handle, &config, None).await.unwrap();
    let dev = connect(&server, "dev", Client::new(None)).await;
    assert_eq!(
        text_of(&call(&dev, "drift__lookup", json!({"query": "a"})).await),
        "found a"
    );

    // The server dies and cannot start again for now.
    std::fs::remove_file(&flag).unwrap();
    let pid = pid_with_mark(&mark).expect("the upstream's pid");
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let refused = call_until(&dev, "drift__lookup", |r| code(r).is_some()).await;
    assert_eq!(code(&refused).as_deref(), Some("rejected"), "{refused:?}");
    assert!(
        text_of(&refused).contains("reconnecting"),
        "{}",
        text_of(&refused)
    );

    // It can start again: the same session gets answers again.
    std::fs::write(&flag, "").unwrap();
    let back = call_until(&dev, "drift__lookup", |r| r.is_error == Some(false)).await;
    assert_eq!(text_of(&back), "found q");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_upstream_call_ends_at_the_call_timeout_as_a_failed_result() {
    let Some(everything) = common::npm_server("server-everything") else {
        return;
    };
    let text = r#"{"approval": {"channel": "elicitation"},
        "servers": {"everything": {"trust_tool_annotations": true}},
        "agents": [{"name": "dev", "allowed_tools": ["everything__trigger-long-running-operation", "everything__echo"]}]}"#;
    let handle = GovernanceHandle::new(load_str(text, Format::Json).unwrap());
    let config = ServeConfig {
        servers: vec![common::node("everything", &everything)],
        tokens: HashMap::new(),
        token_names: HashMap::new(),
        call_timeout: Duration::from_secs(1),
        wire_names: WireNames::Qualified,
        jwt: None,
        gateway: Default::default(),
        hooks: Vec::new(),
    };
    let server = GovernedServer::start(handle, &config, None).await.unwrap();
    let dev = connect(&server, "dev", Client::new(None)).await;
    let slow = call(
        &dev,
        "everything__trigger-long-running-operation",
        json!({"duration": 30, "steps": 2}),
    )
    .await;
    assert_eq!(slow.is_error, Some(true), "{slow:?}");
    assert!(
        text_of(&slow).contains("did not answer"),
        "{}",
        text_of(&slow)
    );
    // The session goes on.
    let echo = call(&dev, "everything__echo", json!({"message": "still here"})).await;
    assert_eq!(text_of(&echo), "Echo: still here");
}

fn text_of(r: &CallToolResult) -> String {
    text(r)
}

#[test]
fn a_held_calls_approval_page_link_is_public_url_else_listen() {
    let people = r#""people": [{"name": "a", "token_sha256": "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"}]"#;
    let public = load_str(
        &format!(
            r#"{{"approvers": {{"listen": "127.0.0.1:8788", "public_url": "https://approvals.example.com/toolgate/", {people}}}}}"#
        ),
        Format::Json,
    )
    .unwrap();
    assert_eq!(
        toolgate_mcp::serve::approval_page_link(&public, "ix_1").as_deref(),
        Some("https://approvals.example.com/toolgate/calls/ix_1")
    );
    let listen = load_str(
        &format!(r#"{{"approvers": {{"listen": "127.0.0.1:9999", {people}}}}}"#),
        Format::Json,
    )
    .unwrap();
    assert_eq!(
        toolgate_mcp::serve::approval_page_link(&listen, "ix_1").as_deref(),
        Some("http://127.0.0.1:9999/calls/ix_1")
    );
    let none = load_str("{}", Format::Json).unwrap();
    assert_eq!(toolgate_mcp::serve::approval_page_link(&none, "ix_1"), None);
    // And in the held result's structured content, never in the text the model reads
    // (issue 34 item 2: the model is told no way to answer).
    let held = toolgate_mcp::serve::call_result_with_page(
        toolgate_core::ToolResponse::Held(toolgate_core::HeldCall {
            interaction_id: "ix_1".into(),
            reasons: vec!["not read-only".into()],
        }),
        Some("http://127.0.0.1:9999/calls/ix_1"),
    );
    assert!(!text(&held).contains("http://127.0.0.1:9999/calls/ix_1"));
    assert!(!text(&held).contains("inbox approve"));
    assert_eq!(
        held.structured_content.unwrap()["toolgate"]["approval_url"],
        "http://127.0.0.1:9999/calls/ix_1"
    );
}

// ---- `mcp.wire_names: "own"` ----

async fn own_server() -> GovernedServer {
    let text = format!(r#"{{"approval": {{"channel": "elicitation"}}, {AGENTS}}}"#);
    let handle = GovernanceHandle::new(load_str(&text, Format::Json).unwrap());
    let mut config = serve_config();
    config.wire_names = WireNames::Own;
    GovernedServer::start(handle, &config, None).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_wire_names_list_each_tool_by_its_own_name_and_calls_are_governed_by_qualified_names() {
    let server = own_server().await;
    let dev = connect(&server, "dev", Client::new(None)).await;
    let viewer = connect(&server, "viewer", Client::new(None)).await;
    // The exposure, by own names (R6 decides, by qualified names, what is listed).
    assert_eq!(
        names(&dev.list_all_tools().await.unwrap()),
        ["bare", "fail", "lookup", "set_mode", "stats"]
    );
    assert_eq!(names(&viewer.list_all_tools().await.unwrap()), ["lookup"]);
    let ran = call(&dev, "lookup", json!({"query": "k1"})).await;
    assert_eq!(ran.is_error, Some(false), "{ran:?}");
    assert_eq!(text(&ran), "found k1");
    // R2: no exact match, one ASCII case-insensitive match.
    let ran = call(&dev, "LOOKUP", json!({"query": "k2"})).await;
    assert_eq!(text(&ran), "found k2");
    // Governance is by qualified names as always: `bare` is not the viewer's...
    let refused = call(&viewer, "bare", json!({})).await;
    assert_eq!(refused.is_error, Some(true));
    assert_eq!(
        code(&refused).as_deref(),
        Some("not_allowed"),
        "{refused:?}"
    );
    assert!(text(&refused).contains("drift__bare"), "{}", text(&refused));
    // ...and the dev's `bare` needs an approval (R12) nobody can give here.
    let asked = call(&dev, "bare", json!({})).await;
    assert_eq!(
        code(&asked).as_deref(),
        Some("no_approval_channel"),
        "{asked:?}"
    );
    // R36 still checks the input.
    let invalid = call(&dev, "lookup", json!({"query": 7})).await;
    assert_eq!(code(&invalid).as_deref(), Some("invalid_input"));
    // One spelling on the wire: the qualified name, and a name the server never listed,
    // are unknown — tool results, never protocol errors.
    for name in ["drift__lookup", "nope"] {
        let unknown = call(&dev, name, json!({"query": "k3"})).await;
        assert_eq!(unknown.is_error, Some(true));
        assert_eq!(
            code(&unknown).as_deref(),
            Some("unknown_tool"),
            "{unknown:?}"
        );
    }
    let stats = call(&dev, "stats", json!({})).await;
    let calls = &stats.structured_content.unwrap()["calls"];
    assert_eq!(calls["lookup"], 2, "{calls}");
    assert!(
        calls["bare"].is_null(),
        "the refused calls were never sent: {calls}"
    );
    assert!(calls["drift__lookup"].is_null(), "{calls}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_wire_names_with_two_servers_do_not_load_or_start() {
    let err = ServeConfig::read(&json!({
        "servers": {"a": {"command": "node"}, "b": {"command": "node"}},
        "wire_names": "own"
    }))
    .unwrap_err();
    assert_eq!(err.errors.len(), 1, "{err}");
    assert_eq!(err.errors[0].path, "mcp.wire_names");
    assert!(
        err.errors[0].message.contains("exactly one server"),
        "{err}"
    );
    // Built by hand, the same configuration does not start.
    let text = format!(r#"{{"approval": {{"channel": "elicitation"}}, {AGENTS}}}"#);
    let handle = GovernanceHandle::new(load_str(&text, Format::Json).unwrap());
    let mut config = serve_config();
    config.servers.push(common::drift("other"));
    config.wire_names = WireNames::Own;
    let Err(e) = GovernedServer::start(handle, &config, None).await else {
        panic!("two servers with own names must not start");
    };
    assert!(e.to_string().contains("mcp.wire_names"), "{e}");
}

// ---- Relays: what the upstream sends while it serves a call ----

/// The conformance upstream (the official TS SDK), copied next to the installed SDK so its
/// imports resolve; `None` (skip) when the SDK is not installed.
fn conformance_upstream() -> Option<toolgate_mcp::McpServerConfig> {
    let dir = common::servers_dir();
    if !dir
        .join("node_modules/@modelcontextprotocol/sdk/package.json")
        .is_file()
    {
        common::npm_server("sdk")?;
    }
    let script = dir.join("toolgate-conformance-upstream.mjs");
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/node/conformance_upstream.mjs"
        ),
        &script,
    )
    .unwrap();
    Some(common::node("conformance", &script))
}

/// Waits (at most 5 s) until the test client's handler recorded `n` relayed messages.
async fn relayed_at_least(client: &Client, n: usize) {
    for _ in 0..500 {
        if client.relayed.lock().unwrap().len() >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn relay_server(allowed: &[&str]) -> Option<GovernedServer> {
    let upstream = conformance_upstream()?;
    let text = json!({
        "approval": {"channel": "elicitation"},
        "agents": [{"name": "dev", "allowed_tools": allowed}]
    })
    .to_string();
    let handle = GovernanceHandle::new(load_str(&text, Format::Json).unwrap());
    let config = ServeConfig {
        servers: vec![upstream],
        tokens: HashMap::new(),
        token_names: HashMap::new(),
        call_timeout: Duration::from_secs(20),
        wire_names: WireNames::Own,
        jwt: None,
        gateway: Default::default(),
        hooks: Vec::new(),
    };
    Some(GovernedServer::start(handle, &config, None).await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_and_log_messages_of_a_running_call_reach_the_client_that_made_it() {
    let Some(server) = relay_server(&[
        "conformance__test_tool_with_progress",
        "conformance__test_tool_with_logging",
    ])
    .await
    else {
        return;
    };
    let caller = Client::new(None);
    let dev = connect(&server, "dev", caller.clone()).await;
    let bystander = Client::new(None);
    let other = connect(&server, "dev", bystander.clone()).await;
    let _ = other.list_all_tools().await.unwrap();
    // The client's request carries a progress token (rmcp gives every request one): three
    // notifications under that token, before the result.
    use rmcp::model::{CallToolRequest, ClientRequest, ServerResult};
    let handle = dev
        .send_request_with_option(
            ClientRequest::CallToolRequest(CallToolRequest::new(CallToolRequestParams::new(
                "test_tool_with_progress",
            ))),
            rmcp::service::PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    let token = serde_json::to_value(&handle.progress_token).unwrap();
    let ServerResult::CallToolResult(done) = handle.await_response().await.unwrap() else {
        panic!("a tool result")
    };
    assert_eq!(text(&done), "Progress reported: true");
    // This test's own rmcp client handles each notification on a task of its own, after
    // toolgate sent them before the result: wait for its handler, not for toolgate.
    relayed_at_least(&caller, 3).await;
    assert_eq!(
        *caller.relayed.lock().unwrap(),
        [
            format!("progress {token} 0/100"),
            format!("progress {token} 50/100"),
            format!("progress {token} 100/100")
        ]
    );
    caller.relayed.lock().unwrap().clear();
    // The server's log messages during the call, in order.
    let done = call(&dev, "test_tool_with_logging", json!({})).await;
    assert_eq!(done.is_error, Some(false));
    relayed_at_least(&caller, 3).await;
    assert_eq!(
        *caller.relayed.lock().unwrap(),
        [
            "log Tool execution started",
            "log Tool processing data",
            "log Tool execution completed"
        ]
    );
    assert!(
        bystander.relayed.lock().unwrap().is_empty(),
        "another session of the same agent gets nothing of this call"
    );
}

/// A server's last progress notification is sent just before its result; rmcp handles each
/// notification on a task of its own, so the result could overtake it, and a client stops
/// listening for progress once it has the result (the conformance suite's
/// `tools-call-with-progress` failed so in a loaded CI run). The call service answers only
/// when every notification read before the result is in the call's relay: checked over
/// many calls, each the moment its future resolves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_progress_notification_is_relayed_before_the_result_it_precedes() {
    use toolgate_core::{AgentRef, ToolCall};
    use toolgate_mcp::McpGateway;
    use toolgate_mcp::relay::{CallRelay, Relayed};
    use tower::ServiceExt;
    let Some(upstream) = conformance_upstream() else {
        return;
    };
    let text = json!({"agents": [{"name": "dev", "allowed_tools": ["conformance__test_tool_with_progress"]}]})
        .to_string();
    let handle = GovernanceHandle::new(load_str(&text, Format::Json).unwrap());
    let gateway = McpGateway::new(handle.clone());
    gateway.connect(upstream).await.unwrap();
    let stack = tower::ServiceBuilder::new()
        .layer(toolgate::approval::ApprovalGateLayer::new(handle))
        .service(gateway.service());
    for round in 0..40 {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut call = ToolCall::new(
            AgentRef::profile("dev"),
            "conformance__test_tool_with_progress",
            json!({}),
        );
        call.extensions.insert(CallRelay::new(tx, true));
        let response = stack.clone().oneshot(call).await.unwrap();
        assert!(response.refusal().is_none(), "{response:?}");
        let mut progress = Vec::new();
        while let Ok(what) = rx.try_recv() {
            if let Relayed::Progress(p) = what {
                progress.push(p.progress);
            }
        }
        assert_eq!(progress, [0.0, 50.0, 100.0], "call {round}");
    }
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_call_relays_nothing_and_a_level_set_filters_log_messages() {
    let Some(server) = relay_server(&["conformance__test_tool_with_logging"]).await else {
        return;
    };
    let caller = Client::new(None);
    let dev = connect(&server, "dev", caller.clone()).await;
    // Not allowed: refused before anything is sent, so the server sends nothing for it.
    let refused = call(&dev, "test_tool_with_progress", json!({})).await;
    assert_eq!(
        code(&refused).as_deref(),
        Some("not_allowed"),
        "{refused:?}"
    );
    #[allow(deprecated, reason = "logging (SEP-2577)")]
    dev.set_level(rmcp::model::SetLevelRequestParams::new(
        rmcp::model::LoggingLevel::Warning,
    ))
    .await
    .unwrap();
    let done = call(&dev, "test_tool_with_logging", json!({})).await;
    assert_eq!(done.is_error, Some(false));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        caller.relayed.lock().unwrap().is_empty(),
        "info messages are below the warning level set, and the refused call sent nothing: {:?}",
        caller.relayed.lock().unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstreams_elicitation_during_a_call_goes_to_the_calling_client_only_if_it_can_answer() {
    let Some(server) = relay_server(&["conformance__test_elicitation"]).await else {
        return;
    };
    let able = Client::new(Some(ElicitationAction::Accept));
    let dev = connect(&server, "dev", able.clone()).await;
    let done = call(&dev, "test_elicitation", json!({"message": "Who are you?"})).await;
    assert_eq!(done.is_error, Some(false), "{done:?}");
    assert!(text(&done).contains("action: accept"), "{}", text(&done));
    // R47 (issue 20, item 10): the question is the upstream server's, marked so by toolgate
    // before the server's own text, never taken for toolgate's approval question.
    let asked = able.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    assert_eq!(
        asked[0],
        format!(
            "{}\n\nWho are you?",
            toolgate_mcp::relay::relayed_header("conformance")
        )
    );
    assert!(!asked[0].starts_with(toolgate_mcp::relay::APPROVAL_HEADER));
    // A client that declared no elicitation is never asked: the server gets an error, and
    // its tool fails.
    let unable = Client::new(None);
    let dev = connect(&server, "dev", unable.clone()).await;
    let failed = call(&dev, "test_elicitation", json!({"message": "Again?"})).await;
    assert_eq!(failed.is_error, Some(true), "{failed:?}");
    assert!(
        text(&failed).contains("did not declare the elicitation capability"),
        "{}",
        text(&failed)
    );
    assert!(unable.asked.lock().unwrap().is_empty());
    assert_eq!(
        able.asked.lock().unwrap().len(),
        1,
        "the other session is not asked"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r41_own_wire_names_behind_a_prefixing_gateway_are_the_stripped_own_names() {
    // Our prefixing gateway lists the drift server's tools as `d-lookup`, …; with
    // `tool_prefix: "d-"` their own names are `lookup`, … (R41).
    let gateway = toolgate_mcp::McpServerConfig::stdio(
        "gw",
        env!("CARGO_BIN_EXE_toolgate-mcp-prefix-gateway"),
    )
    .unwrap()
    .args([
        "--prefix",
        "d-",
        "--",
        env!("CARGO_BIN_EXE_toolgate-mcp-drift-server"),
    ])
    .tool_prefix("d-");
    let text = r#"{"approval": {"channel": "elicitation"},
        "agents": [{"name": "dev", "allowed_tools": ["gw__lookup"]}]}"#;
    let handle = GovernanceHandle::new(load_str(text, Format::Json).unwrap());
    let config = ServeConfig {
        servers: vec![gateway],
        tokens: HashMap::new(),
        token_names: HashMap::new(),
        call_timeout: Duration::from_secs(20),
        wire_names: WireNames::Own,
        jwt: None,
        gateway: Default::default(),
        hooks: Vec::new(),
    };
    let server = GovernedServer::start(handle, &config, None).await.unwrap();
    let dev = connect(&server, "dev", Client::new(None)).await;
    assert_eq!(names(&dev.list_all_tools().await.unwrap()), ["lookup"]);
    let ran = call(&dev, "lookup", json!({"query": "p"})).await;
    assert_eq!(
        text_of(&ran),
        "found p",
        "sent under the listed name `d-lookup`"
    );
    // The listed (prefixed) name is not an own name.
    let unknown = call(&dev, "d-lookup", json!({"query": "p"})).await;
    assert_eq!(
        code(&unknown).as_deref(),
        Some("unknown_tool"),
        "{unknown:?}"
    );
}

/// Every audit record of `path` (one JSON object per line).
fn audit_records(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The approvers the audit records of `path` name.
fn approvers(path: &std::path::Path) -> Vec<String> {
    let mut found = Vec::new();
    fn walk(v: &Value, found: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(a)) = m.get("approver") {
                    found.push(a.clone());
                }
                m.values().for_each(|v| walk(v, found));
            }
            Value::Array(a) => a.iter().for_each(|v| walk(v, found)),
            _ => {}
        }
    }
    for r in audit_records(path) {
        walk(&r, &mut found);
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r47_an_inbox_routed_ask_is_held_for_the_approvers_even_when_the_client_would_accept() {
    // The attack of issue 20: an agent harness that declares elicitation and accepts every
    // question. Asks are routed to the inbox, so the client is never asked: the call is held
    // for the approvers, and nothing is sent.
    let dir = tempfile::tempdir().unwrap();
    let inbox = Inbox::new(
        SqliteInbox::open(dir.path().join("inbox.db"), SqliteOptions::default()).unwrap(),
    );
    let audit = dir.path().join("audit.jsonl");
    let extra = format!(
        r#", "audit": {{"file": {}}}"#,
        json!(audit.to_str().unwrap())
    );
    let server = server("inbox", Some(inbox.clone()), &extra).await;
    let harness = Client::new(Some(ElicitationAction::Accept));
    let asked = Arc::clone(&harness.asked);
    let dev = connect(&server, "dev", harness).await;
    let held = call(&dev, "drift__bare", json!({"amount": 1000})).await;
    assert_eq!(
        held.structured_content.as_ref().unwrap()["toolgate"]["outcome"],
        "held",
        "{held:?}"
    );
    assert!(
        asked.lock().unwrap().is_empty(),
        "the client was never asked"
    );
    assert_eq!(calls_received(&dev, "bare").await, 0, "nothing was sent");
    let pending = inbox.store().list(None).await.unwrap();
    assert_eq!(pending.len(), 1);
    assert!(
        approvers(&audit).is_empty(),
        "nobody approved: {:?}",
        approvers(&audit)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r47_each_agent_is_asked_only_through_the_channel_its_routing_names() {
    // The host routes to the inbox; `dev` alone is routed to its own client.
    let dir = tempfile::tempdir().unwrap();
    let inbox = Inbox::new(
        SqliteInbox::open(dir.path().join("inbox.db"), SqliteOptions::default()).unwrap(),
    );
    let text = r#"{"approval": {"channel": "inbox"},
        "servers": {"drift": {"trust_tool_annotations": true}},
        "behavior_gating": {"require_approval_for_non_read_only": true},
        "agents": [
            {"name": "dev", "allowed_tools": ["drift__bare", "drift__stats"], "approval": {"channel": "elicitation"}},
            {"name": "viewer", "allowed_tools": ["drift__bare", "drift__stats"]}
        ]}"#;
    let handle = GovernanceHandle::new(load_str(text, Format::Json).unwrap());
    let server = GovernedServer::start(handle, &serve_config(), Some(inbox.clone()))
        .await
        .unwrap();
    let dev_client = Client::new(Some(ElicitationAction::Accept));
    let dev_asked = Arc::clone(&dev_client.asked);
    let dev = connect(&server, "dev", dev_client).await;
    let viewer_client = Client::new(Some(ElicitationAction::Accept));
    let viewer_asked = Arc::clone(&viewer_client.asked);
    let viewer = connect(&server, "viewer", viewer_client).await;
    assert_eq!(
        text_of(&call(&dev, "drift__bare", json!({})).await),
        "bare ran"
    );
    assert_eq!(dev_asked.lock().unwrap().len(), 1);
    let held = call(&viewer, "drift__bare", json!({})).await;
    assert_eq!(
        held.structured_content.unwrap()["toolgate"]["outcome"],
        "held"
    );
    assert!(viewer_asked.lock().unwrap().is_empty());
    assert_eq!(
        calls_received(&viewer, "bare").await,
        1,
        "only dev's call ran"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r47_an_answer_by_elicitation_records_the_token_agent_and_session() {
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let extra = format!(
        r#", "audit": {{"file": {}}}"#,
        json!(audit.to_str().unwrap())
    );
    let server = server("elicitation", None, &extra).await;
    // Over stdio-like byte streams: the stdio client, with its session.
    let dev = connect(&server, "dev", Client::new(Some(ElicitationAction::Accept))).await;
    assert_eq!(
        text(&call(&dev, "drift__bare", json!({})).await),
        "bare ran"
    );
    // Over HTTP: the token's configured name.
    let (tx, rx) = tokio::sync::oneshot::channel();
    let s = server.clone();
    tokio::spawn(async move {
        s.serve_http("127.0.0.1:0".parse().unwrap(), None, |a| {
            let _ = tx.send(a);
        })
        .await
    });
    let addr = rx.await.unwrap();
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp"))
            .auth_header("dev-token"),
    );
    let http = Client::new(Some(ElicitationAction::Decline))
        .serve(transport)
        .await
        .unwrap();
    let refused = call(&http, "drift__bare", json!({"n": 2})).await;
    assert_eq!(code(&refused).as_deref(), Some("rejected"));
    let _ = http.cancel().await;
    let who = approvers(&audit);
    assert_eq!(who.len(), 2, "{who:?}");
    assert!(
        who[0].starts_with("elicitation: the stdio client (agent `dev`, session `mcp-"),
        "{who:?}"
    );
    assert!(
        who[1].starts_with("elicitation: token `dev laptop` (agent `dev`, session `mcp-"),
        "{who:?}"
    );
    assert!(
        who.iter().all(|w| w != "mcp-client-user"),
        "never a constant"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r47_an_interactive_route_does_not_start_mcp_serve() {
    // No terminal: `interactive` would have been answered by the client in its place.
    let text = format!(r#"{{"approval": {{"channel": "interactive"}}, {AGENTS}}}"#);
    let handle = GovernanceHandle::new(load_str(&text, Format::Json).unwrap());
    let err = GovernedServer::start(handle, &serve_config(), None)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("approval.channel"), "{err}");
    assert!(err.contains("`interactive`"), "{err}");
}

/// Connects a client speaking protocol 2026-07-28 (no `initialize`: `server/discover`, and
/// the capabilities in every request's `_meta`).
async fn connect_2026(
    server: &GovernedServer,
    agent: &str,
    client: Client,
) -> RunningService<RoleClient, Client> {
    use rmcp::model::ProtocolVersion;
    use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
    let (client_end, server_end) = tokio::io::duplex(256 * 1024);
    let server = server.clone();
    let agent = agent.to_owned();
    tokio::spawn(async move { server.serve_io(&agent, server_end).await });
    client
        .serve_with_lifecycle(
            client_end,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r47_a_2026_07_28_client_is_asked_by_input_required_and_its_answer_decides() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let extra = format!(
        r#", "audit": {{"file": {}}}"#,
        json!(audit.to_str().unwrap())
    );
    let server = server("elicitation", None, &extra).await;
    let yes = Client::new(Some(ElicitationAction::Accept));
    let asked = Arc::clone(&yes.asked);
    let dev = connect_2026(&server, "dev", yes).await;
    let ran = call(&dev, "drift__bare", json!({"why": "modern"})).await;
    assert_eq!(text(&ran), "bare ran", "{ran:?}");
    let messages = asked.lock().unwrap().clone();
    assert_eq!(messages.len(), 1, "asked once: {messages:?}");
    assert!(
        messages[0].starts_with("toolgate approval"),
        "{}",
        messages[0]
    );
    assert!(messages[0].contains("\"why\""), "{}", messages[0]);
    for (action, word) in [
        (ElicitationAction::Decline, "declined"),
        (ElicitationAction::Cancel, "cancelled"),
    ] {
        let dev = connect_2026(&server, "dev", Client::new(Some(action))).await;
        let refused = call(&dev, "drift__bare", json!({})).await;
        assert_eq!(code(&refused).as_deref(), Some("rejected"), "{refused:?}");
        assert!(text(&refused).contains(word), "{}", text(&refused));
    }
    // A 2026-07-28 client that declares no elicitation is not asked.
    let none = connect_2026(&server, "dev", Client::new(None)).await;
    let refused = call(&none, "drift__bare", json!({})).await;
    assert_eq!(code(&refused).as_deref(), Some("no_approval_channel"));
    assert_eq!(
        calls_received(&dev, "bare").await,
        1,
        "only the accepted call ran"
    );
    let who = approvers(&audit);
    assert!(
        who[0].starts_with("elicitation: the stdio client (agent `dev`, session `mcp-"),
        "{who:?}"
    );
}

/// Serves `server` over streamable HTTP on a free loopback port; its address.
async fn served_http(server: &GovernedServer) -> std::net::SocketAddr {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let s = server.clone();
    tokio::spawn(async move {
        s.serve_http("127.0.0.1:0".parse().unwrap(), None, |a| {
            let _ = tx.send(a);
        })
        .await
    });
    rx.await.unwrap()
}

/// A client speaking protocol 2026-07-28 over streamable HTTP with `token`.
async fn http_2026(
    addr: std::net::SocketAddr,
    token: &str,
    client: Client,
) -> RunningService<RoleClient, Client> {
    use rmcp::model::ProtocolVersion;
    use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp"))
            .auth_header(token),
    );
    client
        .serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .unwrap()
}

/// A retry of `tool` with `args` carrying `state` and the answer `action`.
fn retry(tool: &str, args: Value, state: &str, action: &str) -> CallToolRequestParams {
    let Value::Object(args) = args else { panic!() };
    let mut r = CallToolRequestParams::new(tool.to_owned()).with_arguments(args);
    r.request_state = Some(state.to_owned());
    r.input_responses = Some(std::collections::BTreeMap::from([(
        String::from(toolgate_mcp::serve::APPROVAL_INPUT_KEY),
        json!({ "action": action }),
    )]));
    r
}

/// Issue 35 item 7: stateless replicas. Two servers share one durable inbox; a 2026-07-28
/// client's question is asked by one and its retry answered by the other (no session, no
/// stickiness), once; a replayed, foreign or altered retry answers nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue35_r47_a_question_asked_by_one_replica_is_answered_by_another() {
    use rmcp::model::CallToolResponse;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.db");
    let replica = || async {
        let inbox = Inbox::new(SqliteInbox::open(&path, SqliteOptions::default()).unwrap());
        let server = server("elicitation", Some(inbox), "").await;
        let addr = served_http(&server).await;
        (server, addr)
    };
    let (_a, a) = replica().await;
    let (_b, b) = replica().await;
    let on_a = http_2026(a, "dev-token", Client::new(Some(ElicitationAction::Accept))).await;
    let on_b = http_2026(b, "dev-token", Client::new(Some(ElicitationAction::Accept))).await;
    let args = json!({"n": 35});
    let Value::Object(map) = args.clone() else {
        panic!()
    };
    let first = on_a
        .call_tool_once(CallToolRequestParams::new("drift__bare").with_arguments(map))
        .await
        .unwrap();
    let CallToolResponse::InputRequired(asked) = first else {
        panic!("a question, by InputRequiredResult: {first:?}")
    };
    let state = asked.request_state.clone().expect("a requestState");
    assert_eq!(calls_received(&on_a, "bare").await, 0, "nothing ran yet");
    // Another caller (another token) with the same state: nothing answered, and the
    // question is still open for its own caller.
    let viewer = http_2026(
        b,
        "viewer-token",
        Client::new(Some(ElicitationAction::Accept)),
    )
    .await;
    let foreign = viewer
        .call_tool_once(retry("drift__bare", args.clone(), &state, "accept"))
        .await
        .unwrap();
    let CallToolResponse::Complete(foreign) = foreign else {
        panic!("{foreign:?}")
    };
    assert_eq!(foreign.is_error, Some(true), "{foreign:?}");
    // Another input with the same state: nothing answered.
    let altered = on_b
        .call_tool_once(retry("drift__bare", json!({"n": 36}), &state, "accept"))
        .await
        .unwrap();
    let CallToolResponse::Complete(altered) = altered else {
        panic!("{altered:?}")
    };
    assert_eq!(code(&altered).as_deref(), Some("rejected"), "{altered:?}");
    // The retry reaches the other replica: answered, and the call runs there, once.
    let answered = on_b
        .call_tool_once(retry("drift__bare", args.clone(), &state, "accept"))
        .await
        .unwrap();
    let CallToolResponse::Complete(ran) = answered else {
        panic!("{answered:?}")
    };
    assert_eq!(text(&ran), "bare ran", "{ran:?}");
    assert_eq!(calls_received(&on_b, "bare").await, 1);
    // Replayed, on either replica: answered once.
    for client in [&on_a, &on_b] {
        let again = client
            .call_tool_once(retry("drift__bare", args.clone(), &state, "accept"))
            .await
            .unwrap();
        let CallToolResponse::Complete(again) = again else {
            panic!("{again:?}")
        };
        assert_eq!(code(&again).as_deref(), Some("rejected"), "{again:?}");
        assert!(text(&again).contains("answered already"), "{again:?}");
    }
    assert_eq!(calls_received(&on_a, "bare").await, 0);
    assert_eq!(calls_received(&on_b, "bare").await, 1, "sent once in all");
    // A decline crosses replicas the same way.
    let Value::Object(map) = json!({"n": 37}) else {
        panic!()
    };
    let CallToolResponse::InputRequired(asked) = on_b
        .call_tool_once(CallToolRequestParams::new("drift__bare").with_arguments(map))
        .await
        .unwrap()
    else {
        panic!("a question")
    };
    let state = asked.request_state.unwrap();
    let declined = on_a
        .call_tool_once(retry("drift__bare", json!({"n": 37}), &state, "decline"))
        .await
        .unwrap();
    let CallToolResponse::Complete(declined) = declined else {
        panic!("{declined:?}")
    };
    assert_eq!(code(&declined).as_deref(), Some("rejected"), "{declined:?}");
    assert!(text(&declined).contains("declined"), "{declined:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r47_a_forged_or_foreign_retry_answers_nothing() {
    let server = server("elicitation", None, "").await;
    let dev = connect_2026(&server, "dev", Client::new(None)).await;
    // A retry naming a state toolgate never issued: refused, nothing runs.
    let mut forged = CallToolRequestParams::new("drift__bare").with_arguments(Map::new());
    forged.request_state = Some(String::from("ia_00000000000000000000000000000000"));
    forged.input_responses = Some(std::collections::BTreeMap::from([(
        String::from(toolgate_mcp::serve::APPROVAL_INPUT_KEY),
        json!({"action": "accept"}),
    )]));
    let r = dev.call_tool_once(forged).await.unwrap();
    let rmcp::model::CallToolResponse::Complete(r) = r else {
        panic!("a tool result: {r:?}")
    };
    assert_eq!(code(&r).as_deref(), Some("rejected"), "{r:?}");
    assert_eq!(calls_received(&dev, "bare").await, 0);
}

/// One raw streamable HTTP POST: the whole response as text (status line, headers, body).
async fn raw_post(
    addr: std::net::SocketAddr,
    token: &str,
    session: Option<&str>,
    body: &str,
) -> String {
    raw_post_with(addr, token, session, "", body).await
}

async fn raw_post_with(
    addr: std::net::SocketAddr,
    token: &str,
    session: Option<&str>,
    extra_headers: &str,
    body: &str,
) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut session = session
        .map(|s| format!("Mcp-Session-Id: {s}\r\nMcp-Protocol-Version: 2025-06-18\r\n"))
        .unwrap_or_default();
    session.push_str(extra_headers);
    let req = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nAuthorization: Bearer {token}\r\n{session}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// Opens an HTTP session with `token`: its `Mcp-Session-Id`.
async fn open_session(addr: std::net::SocketAddr, token: &str) -> String {
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
    let response = raw_post(addr, token, None, init).await;
    let id = response
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("mcp-session-id")
                .then(|| v.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("a session id: {response}"));
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    raw_post(addr, token, Some(&id), initialized).await;
    id
}

const LIST: &str = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue20_an_http_session_answers_only_to_the_token_that_opened_it_and_a_reload_revokes_tokens()
 {
    let server = server("elicitation", None, "").await;
    let (tx, rx) = tokio::sync::oneshot::channel();
    let s = server.clone();
    tokio::spawn(async move {
        s.serve_http("127.0.0.1:0".parse().unwrap(), None, |a| {
            let _ = tx.send(a);
        })
        .await
    });
    let addr = rx.await.unwrap();
    let session = open_session(addr, "dev-token").await;
    let own = raw_post(addr, "dev-token", Some(&session), LIST).await;
    assert!(own.contains("drift__set_mode"), "{own}");
    // Another valid token on dev's session: answered as an unknown session (issue 34
    // item 1), nothing listed.
    let foreign = raw_post(addr, "viewer-token", Some(&session), LIST).await;
    assert!(
        foreign.starts_with("HTTP/1.1 404") && foreign.contains("Session not found"),
        "{foreign}"
    );
    assert!(!foreign.contains("drift__lookup"), "{foreign}");

    // A reload whose token list no longer has dev's token: the next request is 401, and the
    // session opened with it is closed to it.
    let text = format!(r#"{{"approval": {{"channel": "elicitation"}}, {AGENTS}}}"#);
    let mut config = serve_config();
    config.tokens.remove(&token_hash("dev-token"));
    server
        .reload(load_str(&text, Format::Json).unwrap(), &config)
        .await
        .unwrap();
    // A page of another site (DNS rebinding) is refused whatever it sends.
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
    let rebound = raw_post_with(
        addr,
        "viewer-token",
        None,
        "Origin: http://rebound.example\r\n",
        init,
    )
    .await;
    assert!(rebound.starts_with("HTTP/1.1 403"), "{rebound}");
    let own_origin = raw_post_with(
        addr,
        "viewer-token",
        None,
        &format!("Origin: http://127.0.0.1:{}\r\n", addr.port()),
        init,
    )
    .await;
    assert!(own_origin.starts_with("HTTP/1.1 200"), "{own_origin}");
    let revoked = raw_post(addr, "dev-token", Some(&session), LIST).await;
    assert!(revoked.starts_with("HTTP/1.1 401"), "{revoked}");
    assert!(http_status(addr, Some("dev-token")).await.contains("401"));
    assert!(
        http_status(addr, Some("viewer-token"))
            .await
            .contains("200")
    );
}

#[test]
fn r44_a_rate_limited_refusal_says_when_the_call_could_run_again() {
    let mut refusal = toolgate_core::Refusal::new(
        toolgate_core::RefusalCode::RateLimited,
        toolgate_core::Check::Quota,
        "ten refunds an hour",
    );
    refusal.retry_after_secs = Some(42);
    let r = toolgate_mcp::serve::call_result(toolgate_core::ToolResponse::Refused(refusal));
    let meta = &r.structured_content.unwrap()["toolgate"];
    assert_eq!(meta["code"], "rate_limited");
    assert_eq!(meta["retry_after_secs"], 42);
    let other = toolgate_mcp::serve::call_result(toolgate_core::ToolResponse::Refused(
        toolgate_core::Refusal::new(
            toolgate_core::RefusalCode::Denied,
            toolgate_core::Check::TenantPolicy,
            "no",
        ),
    ));
    assert!(
        other.structured_content.unwrap()["toolgate"]
            .get("retry_after_secs")
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r44_a_full_quota_is_a_rate_limited_tool_result_with_retry_after_secs() {
    let extra = r#", "policy": {"rules": [], "quotas": [{"tool": "lookup", "server": "drift", "max": 1, "window_secs": 3600, "reason": "one look-up an hour"}]}"#;
    let server = server("elicitation", None, extra).await;
    let dev = connect(&server, "dev", Client::new(None)).await;
    let ran = call(&dev, "drift__lookup", json!({"query": "a"})).await;
    assert_eq!(ran.is_error, Some(false), "{ran:?}");
    let limited = call(&dev, "drift__lookup", json!({"query": "b"})).await;
    assert_eq!(
        code(&limited).as_deref(),
        Some("rate_limited"),
        "{limited:?}"
    );
    let meta = &limited.structured_content.as_ref().unwrap()["toolgate"];
    let secs = meta["retry_after_secs"].as_u64().unwrap();
    assert!((3590..=3600).contains(&secs), "{meta}");
    assert!(
        text(&limited).contains("one look-up an hour"),
        "{}",
        text(&limited)
    );
    assert_eq!(
        calls_received(&dev, "lookup").await,
        1,
        "the refused call was never sent"
    );
}

/// Two integers past 64 bits that round to one double (R20).
const BIG_A: &str = "123456789012345678901234";
const BIG_B: &str = "123456789012345678901235";

/// What the rmcp client writes, with every JSON string `"big:<digits>"` turned into the
/// integer `<digits>`: a client whose JSON keeps big integers as written (Python's, the
/// TypeScript SDK's with `BigInt`), which rmcp's `Value` cannot be.
fn big_integers_as_written(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(at) = rest.find("\"big:") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 5..];
        let end = after.find('"').unwrap();
        out.push_str(&after[..end]);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

/// [`connect`], the client's messages rewritten by [`big_integers_as_written`] on their way
/// to the server's stdio transport.
async fn connect_writing_big_integers(
    server: &GovernedServer,
    agent: &str,
    client: Client,
) -> RunningService<RoleClient, Client> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let (client_end, middle_client) = tokio::io::duplex(256 * 1024);
    let (middle_server, server_end) = tokio::io::duplex(256 * 1024);
    let (from_client, mut to_client) = tokio::io::split(middle_client);
    let (mut from_server, mut to_server) = tokio::io::split(middle_server);
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(from_client).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let line = big_integers_as_written(&line) + "\n";
            if to_server.write_all(line.as_bytes()).await.is_err() {
                break;
            }
        }
    });
    tokio::spawn(async move { tokio::io::copy(&mut from_server, &mut to_client).await });
    let server = server.clone();
    let agent = agent.to_owned();
    tokio::spawn(async move { server.serve_io(&agent, server_end).await });
    client.serve(client_end).await.unwrap()
}

/// R20, R26 over stdio: a client writes an integer past 64 bits; toolgate reads it as
/// written, and since the upstream server could only be sent it rounded — another number than
/// the one decided and shown to a person — the call is refused `invalid_input` before anyone
/// is asked: nothing is held, nothing is sent, and the reason names the digits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r20_r26_an_integer_past_64_bits_is_refused_before_anyone_is_asked_over_stdio() {
    let dir = tempfile::tempdir().unwrap();
    let inbox = Inbox::new(
        SqliteInbox::open(dir.path().join("inbox.db"), SqliteOptions::default()).unwrap(),
    );
    let server = server("inbox", Some(inbox.clone()), "").await;
    let dev = connect_writing_big_integers(&server, "dev", Client::new(None)).await;
    for big in [BIG_A, BIG_B] {
        let refused = call(&dev, "drift__bare", json!({"n": format!("big:{big}")})).await;
        let meta = &refused.structured_content.as_ref().unwrap()["toolgate"];
        assert_eq!(meta["code"], "invalid_input", "{refused:?}");
        assert!(
            text(&refused).contains(big),
            "the reason names the digits: {refused:?}"
        );
    }
    assert!(
        inbox.store().list(None).await.unwrap().is_empty(),
        "nothing was held"
    );
    // An integer a JSON value holds exactly still goes through (asked, then held).
    let held = call(
        &dev,
        "drift__bare",
        json!({"n": format!("big:{}", u64::MAX)}),
    )
    .await;
    let meta = &held.structured_content.as_ref().unwrap()["toolgate"];
    assert_eq!(meta["outcome"], "held", "{held:?}");
    assert_eq!(calls_received(&dev, "bare").await, 0, "nothing was sent");
}

/// One POST to the streamable HTTP route: the status line and headers, and the JSON-RPC
/// messages of the body (plain JSON or server-sent events).
async fn http_post(
    addr: std::net::SocketAddr,
    token: &str,
    session: Option<&str>,
    body: &str,
) -> (String, Vec<Value>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let session = session
        .map(|s| format!("Mcp-Session-Id: {s}\r\nMcp-Protocol-Version: 2025-06-18\r\n"))
        .unwrap_or_default();
    let req = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nAuthorization: Bearer {token}\r\n{session}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    // An SSE response stays open after its answer: read until a JSON-RPC response arrives.
    let messages = loop {
        let n = tokio::time::timeout(Duration::from_secs(30), s.read(&mut chunk))
            .await
            .unwrap()
            .unwrap();
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).into_owned();
        let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        let msgs: Vec<Value> = body
            .lines()
            .filter_map(|l| serde_json::from_str(l.strip_prefix("data: ").unwrap_or(l)).ok())
            .collect();
        if n == 0
            || msgs
                .iter()
                .any(|m| m.get("result").is_some() || m.get("error").is_some())
        {
            break msgs;
        }
    };
    let text = String::from_utf8_lossy(&buf).into_owned();
    let head = text
        .split_once("\r\n\r\n")
        .map_or(text.as_str(), |(h, _)| h);
    (head.to_owned(), messages)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r20_r26_an_integer_past_64_bits_is_refused_before_anyone_is_asked_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let inbox = Inbox::new(
        SqliteInbox::open(dir.path().join("inbox.db"), SqliteOptions::default()).unwrap(),
    );
    let server = server("inbox", Some(inbox.clone()), "").await;
    let (tx, rx) = tokio::sync::oneshot::channel();
    let s = server.clone();
    tokio::spawn(async move {
        s.serve_http("127.0.0.1:0".parse().unwrap(), None, |a| {
            let _ = tx.send(a);
        })
        .await
    });
    let addr = rx.await.unwrap();
    let (head, _) = http_post(
        addr,
        "dev-token",
        None,
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#,
    )
    .await;
    let session = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("mcp-session-id")
                .then(|| v.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("no session id: {head}"));
    let (head, _) = http_post(
        addr,
        "dev-token",
        Some(&session),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 202"), "{head}");
    let call = |id: u32, n: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"drift__bare","arguments":{{"n":{n}}}}}}}"#
        )
    };
    let result = |messages: Vec<Value>| -> Value {
        messages
            .into_iter()
            .find_map(|m| m.get("result").cloned())
            .expect("a result")
    };
    for (id, big) in [(2, BIG_A), (3, BIG_B)] {
        let refused = result(
            http_post(addr, "dev-token", Some(&session), &call(id, big))
                .await
                .1,
        );
        assert_eq!(
            refused["structuredContent"]["toolgate"]["code"], "invalid_input",
            "{refused}"
        );
        assert!(
            refused["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains(big),
            "{refused}"
        );
    }
    assert!(
        inbox.store().list(None).await.unwrap().is_empty(),
        "nothing was held"
    );
}

/// One raw request to `addr`: its status line's code and the whole response.
async fn raw_http(
    addr: std::net::SocketAddr,
    method: &str,
    token: &str,
    session: Option<&str>,
    body: &str,
) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let session = session
        .map(|s| format!("Mcp-Session-Id: {s}\r\nMcp-Protocol-Version: 2025-06-18\r\n"))
        .unwrap_or_default();
    let req = format!(
        "{method} /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nAuthorization: Bearer {token}\r\n{session}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(3), s.read_to_end(&mut buf)).await;
    let text = String::from_utf8_lossy(&buf).to_string();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, text)
}

/// Issue 34 item 1: a session answers only to the principal that opened it. Another token's
/// holder who learns the id gets, for a request, a stream and a `DELETE`, what an unknown
/// session gets (404), and cannot take over a session that was initialized but not used;
/// the owner's session keeps working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue34_an_http_session_answers_only_to_the_principal_that_opened_it() {
    let server = server("elicitation", None, "").await;
    let (tx, rx) = tokio::sync::oneshot::channel();
    let s = server.clone();
    tokio::spawn(async move {
        s.serve_http("127.0.0.1:0".parse().unwrap(), None, |a| {
            let _ = tx.send(a);
        })
        .await
    });
    let addr = rx.await.unwrap();
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
    let (code, resp) = raw_http(addr, "POST", "dev-token", None, init).await;
    assert_eq!(code, 200, "{resp}");
    let id = resp
        .lines()
        .find_map(|l| {
            l.split_once(':')
                .filter(|(k, _)| k.eq_ignore_ascii_case("mcp-session-id"))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("no session id: {resp}"));
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let list = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
    // The other principal: the initialized notice (a take-over), a list, the stream, DELETE.
    for (method, body) in [
        ("POST", initialized),
        ("POST", list),
        ("GET", ""),
        ("DELETE", ""),
    ] {
        let (code, resp) = raw_http(addr, method, "viewer-token", Some(&id), body).await;
        assert_eq!(code, 404, "{method}: {resp}");
        assert!(resp.contains("Session not found"), "{method}: {resp}");
    }
    // The owner's session was not taken over, nor ended.
    let (code, resp) = raw_http(addr, "POST", "dev-token", Some(&id), initialized).await;
    assert!(code == 202 || code == 200, "{resp}");
    let (code, resp) = raw_http(addr, "POST", "dev-token", Some(&id), list).await;
    assert_eq!(code, 200, "{resp}");
    assert!(resp.contains("drift__lookup"), "{resp}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue34_malformed_params_of_a_served_method_are_invalid_params_not_an_unknown_method() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let server = server("none", None, "").await;
    let (client_end, server_end) = tokio::io::duplex(256 * 1024);
    tokio::spawn(async move { server.serve_io("dev", server_end).await });
    let (read, mut write) = tokio::io::split(client_end);
    let mut lines = BufReader::new(read).lines();
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
    write
        .write_all(format!("{init}\n").as_bytes())
        .await
        .unwrap();
    write
        .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")
        .await
        .unwrap();
    let sent = [
        (
            2,
            r#""method":"tools/call","params":{"name":5}"#,
            -32602,
            "name",
        ),
        (
            3,
            r#""method":"tools/call","params":{"name":"drift__lookup","arguments":[1]}"#,
            -32602,
            "tools/call",
        ),
        (4, r#""method":"tools/call""#, -32602, "`params` is missing"),
        (
            5,
            r#""method":"resources/read","params":{"url":"x"}"#,
            -32602,
            "uri",
        ),
        (6, r#""method":"prompts/get","params":{}"#, -32602, "name"),
        (
            7,
            r#""method":"no/such/method","params":{}"#,
            -32601,
            "no/such/method",
        ),
    ];
    for (id, rest, _, _) in sent {
        let line = format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},{rest}}}\n");
        write.write_all(line.as_bytes()).await.unwrap();
    }
    let mut answers: HashMap<i64, Value> = HashMap::new();
    while answers.len() < sent.len() + 1 {
        let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
            .await
            .expect("an answer in time")
            .unwrap()
            .expect("the server answers every request");
        let v: Value = serde_json::from_str(&line).unwrap();
        if let Some(id) = v.get("id").and_then(Value::as_i64) {
            answers.insert(id, v);
        }
    }
    for (id, _, code, says) in sent {
        let e = &answers[&id]["error"];
        assert_eq!(e["code"], code, "request {id}: {e}");
        let message = e["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "request {id}: {message}");
    }
}

/// Waits until `check` holds, polling every 50 ms for at most 10 s.
async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    for _ in 0..200 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("never: {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue35_a_cancelled_call_is_cancelled_upstream_and_recorded_cancelled() {
    use rmcp::model::{CallToolRequest, ClientRequest};
    use rmcp::service::PeerRequestOptions;
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let extra = format!(
        r#", "audit": {{"file": {}}}"#,
        json!(audit.to_str().unwrap())
    );
    let server = server("elicitation", None, &extra).await;
    let dev = connect(&server, "dev", Client::new(Some(ElicitationAction::Accept))).await;
    let Value::Object(args) = json!({"wait_ms": 30_000}) else {
        panic!()
    };
    // Approved, then sent: the upstream starts its 30-second call.
    let handle = dev
        .peer()
        .send_cancellable_request(
            ClientRequest::CallToolRequest(CallToolRequest::new(
                CallToolRequestParams::new("drift__bare").with_arguments(args),
            )),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    eventually("the upstream received the call", async || {
        calls_received(&dev, "bare").await == 1
    })
    .await;
    handle
        .cancel(Some(String::from("the user pressed stop")))
        .await
        .unwrap();
    // The cancellation reached the upstream: its handler stopped, long before 30 s.
    eventually("the upstream's call was cancelled", async || {
        calls_received(&dev, "bare cancelled").await == 1
    })
    .await;
    assert_eq!(calls_received(&dev, "bare finished").await, 0);
    // And the audit record of the call says it was cancelled.
    eventually("the call's audit record", async || {
        audit_records(&audit)
            .iter()
            .any(|r| r["tool"] == "drift__bare")
    })
    .await;
    let records = audit_records(&audit);
    let record = records.iter().find(|r| r["tool"] == "drift__bare").unwrap();
    assert_eq!(record["outcome"], "error", "{record}");
    assert!(
        record["error"]
            .as_str()
            .unwrap_or_default()
            .starts_with("cancelled"),
        "{record}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue35_r26_a_call_cancelled_while_its_person_is_asked_ends_the_wait_cancelled() {
    use rmcp::model::{CallToolRequest, ClientRequest};
    use rmcp::service::PeerRequestOptions;
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let extra = format!(
        r#", "audit": {{"file": {}}}"#,
        json!(audit.to_str().unwrap())
    );
    let server = server("elicitation", None, &extra).await;
    // A client whose user never answers.
    let slow =
        Client::new(Some(ElicitationAction::Accept)).answering_after(Duration::from_secs(60));
    let asked = Arc::clone(&slow.asked);
    let dev = connect(&server, "dev", slow).await;
    let Value::Object(args) = json!({}) else {
        panic!()
    };
    let handle = dev
        .peer()
        .send_cancellable_request(
            ClientRequest::CallToolRequest(CallToolRequest::new(
                CallToolRequestParams::new("drift__bare").with_arguments(args),
            )),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    eventually("the person was asked", async || {
        !asked.lock().unwrap().is_empty()
    })
    .await;
    handle.cancel(None).await.unwrap();
    eventually("the call's audit record", async || {
        audit_records(&audit)
            .iter()
            .any(|r| r["tool"] == "drift__bare")
    })
    .await;
    let records = audit_records(&audit);
    let record = records.iter().find(|r| r["tool"] == "drift__bare").unwrap();
    assert_eq!(record["approval"]["wait"], "cancelled", "{record}");
    assert_eq!(calls_received(&dev, "bare").await, 0, "nothing was sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue35_a_2026_07_28_client_listening_is_told_its_list_changed_after_a_reload() {
    use rmcp::model::{ServerNotification, SubscriptionFilter};
    let server = server("elicitation", None, "").await;
    let viewer = connect_2026(&server, "viewer", Client::new(None)).await;
    let dev = connect_2026(&server, "dev", Client::new(None)).await;
    let filter = SubscriptionFilter::builder().tools_list_changed().build();
    let mut viewer_stream = viewer.peer().listen(filter.clone()).await.unwrap();
    assert_eq!(
        viewer_stream.acknowledged().tools_list_changed,
        Some(true),
        "toolgate accepts what it advertises (before: -32601)"
    );
    let mut dev_stream = dev.peer().listen(filter).await.unwrap();
    // The viewer's list grows; dev's does not.
    let agents = AGENTS.replace(
        r#"{"name": "viewer", "allowed_tools": ["drift__lookup"]}"#,
        r#"{"name": "viewer", "allowed_tools": ["drift__lookup", "drift__stats"]}"#,
    );
    let text = format!(r#"{{"approval": {{"channel": "elicitation"}}, {agents}}}"#);
    server
        .reload(load_str(&text, Format::Json).unwrap(), &serve_config())
        .await
        .unwrap();
    let told = tokio::time::timeout(Duration::from_secs(10), viewer_stream.next())
        .await
        .expect("the viewer's stream is told")
        .unwrap();
    assert!(
        matches!(
            told,
            Some(ServerNotification::ToolListChangedNotification(_))
        ),
        "{told:?}"
    );
    assert_eq!(
        names(&viewer.list_all_tools().await.unwrap()),
        ["drift__lookup", "drift__stats"]
    );
    let quiet = tokio::time::timeout(Duration::from_millis(500), dev_stream.next()).await;
    assert!(quiet.is_err(), "dev's list did not change: {quiet:?}");
}

/// A decision service on loopback in OPA's data-API shape (issue 36 item 5): it keeps what
/// it was asked, says no to a `forbidden` query (with a reason), has no rule for an
/// `undefined` one, takes too long for a `slow` one, and rejects a result that shows a secret.
async fn decision_service() -> (String, Arc<Mutex<Vec<Value>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!(
        "http://{}/v1/data/toolgate/allow",
        listener.local_addr().unwrap()
    );
    let asked = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&asked);
    tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            let kept = Arc::clone(&kept);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0_u8; 8192];
                let body: Value = loop {
                    let Ok(n) = conn.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let t = String::from_utf8_lossy(&buf).into_owned();
                    if let Some(i) = t.find("\r\n\r\n")
                        && let Ok(v) = serde_json::from_str::<Value>(&t[i + 4..])
                    {
                        break v;
                    }
                };
                kept.lock().unwrap().push(body.clone());
                let input = &body["input"];
                let query = input["input"]["query"].as_str().unwrap_or_default();
                let answer = match (input["phase"].as_str(), query) {
                    (Some("before_call"), "forbidden") => {
                        json!({"result": {"allow": false, "reason": "forbidden queries stay here"}})
                    }
                    (Some("before_call"), "undefined") => json!({}),
                    (Some("before_call"), "slow") => {
                        tokio::time::sleep(Duration::from_secs(3)).await;
                        json!({"result": true})
                    }
                    (Some("after_call"), _) if input["output"].to_string().contains("secret") => {
                        json!({"result": false})
                    }
                    _ => json!({"result": true}),
                };
                let text = answer.to_string();
                let _ = conn
                    .write_all(
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                            text.len()
                        )
                        .as_bytes(),
                    )
                    .await;
            });
        }
    });
    (url, asked)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r32_mcp_serve_asks_the_configured_decision_services_and_only_tightens() {
    let (url, asked) = decision_service().await;
    let text_config = format!(
        r#"{{"approval": {{"channel": "elicitation"}}, {AGENTS},
            "hooks": [{{"url": "{url}", "phase": "before_call", "timeout_ms": 300}},
                      {{"url": "{url}", "phase": "after_call"}}]}}"#
    );
    let mut document: Value = serde_json::from_str(&text_config).unwrap();
    document["mcp"] = json!({"servers": {"drift": {"command": "drift"}}});
    let (_, read) = ServeConfig::split(document).unwrap();
    assert_eq!(read.hooks.len(), 2, "read from the top-level `hooks`");
    let handle = GovernanceHandle::new(load_str(&text_config, Format::Json).unwrap());
    let mut config = serve_config();
    config.hooks = read.hooks;
    let server = GovernedServer::start(handle, &config, None).await.unwrap();
    let dev = connect(&server, "dev", Client::new(None)).await;

    // Yes from both phases: the call runs as toolgate decided it.
    let ran = call(
        &dev,
        "drift__lookup",
        json!({"query": "k1", "api_key": "sk-live-0123456789"}),
    )
    .await;
    assert_eq!(ran.is_error, Some(false), "{ran:?}");
    assert_eq!(text(&ran), "found k1");
    {
        let asked = asked.lock().unwrap();
        let phases: Vec<&str> = asked
            .iter()
            .filter_map(|q| q["input"]["phase"].as_str())
            .collect();
        assert_eq!(phases, ["before_call", "after_call"]);
        let q = &asked[0]["input"];
        assert_eq!(
            (q["tool"].as_str(), q["agent"].as_str()),
            (Some("drift__lookup"), Some("dev"))
        );
        assert_eq!(q["input"]["query"], "k1");
        // Redacted as the audit record is: the secret never reaches the service.
        assert_ne!(q["input"]["api_key"], "sk-live-0123456789", "{q}");
        assert!(!asked[1].to_string().contains("sk-live-0123456789"));
        assert_eq!(asked[1]["input"]["outcome"], "completed");
    }
    // No, with a reason: cancelled before it is sent.
    let before = calls_received(&dev, "lookup").await;
    for (query, words) in [
        ("forbidden", "forbidden queries stay here"),
        ("undefined", "no `result`"),
        ("slow", "could not be asked"),
    ] {
        let r = call(&dev, "drift__lookup", json!({"query": query})).await;
        assert_eq!(r.is_error, Some(true), "{query}: {r:?}");
        assert!(text(&r).contains(words), "{query}: {}", text(&r));
    }
    // (`drift__stats` itself passes the services, which say yes.)
    assert_eq!(
        calls_received(&dev, "lookup").await,
        before,
        "none was sent"
    );
    // A result the after_call service rejects never reaches the model.
    let r = call(&dev, "drift__lookup", json!({"query": "secret"})).await;
    assert_eq!(r.is_error, Some(true), "{r:?}");
    assert!(!text(&r).contains("found secret"), "{}", text(&r));
    assert!(text(&r).contains("said no"), "{}", text(&r));
}

#[test]
fn r32_a_decision_service_that_is_not_fetchable_is_a_configuration_error() {
    let mut document = json!({"mcp": {"servers": {"drift": {"command": "drift"}}},
        "hooks": [{"url": "http://opa.example.com/v1/data/x", "phase": "before_call"}]});
    let e = ServeConfig::split(document.clone()).unwrap_err();
    let paths: Vec<&str> = e.errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["hooks[0].url"], "{e:?}");
    document["hooks"] = json!({"url": "x"});
    let e = ServeConfig::split(document).unwrap_err();
    assert_eq!(e.errors[0].path, "hooks", "{e:?}");
}
