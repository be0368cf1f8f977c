//! Fixtures shared by the Postgres inbox's integration tests: the server from
//! `TOOLGATE_PG_URL`, a fresh schema per store, and a real toolgate stack over a counting tool.
#![allow(
    dead_code,
    unreachable_pub,
    missing_docs,
    reason = "a kit shared by test files: each uses its own part"
)]

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio_postgres::NoTls;
use toolgate::approval::ApprovalGateLayer;
use toolgate::{AirGapLayer, ConfidentialityLayer, ExposureLayer, GovernanceHandle};
use toolgate_core::{AgentRef, CallId, ToolCall, ToolOutput, ToolResponse};
use toolgate_engine::Governance;
use toolgate_engine::config::{Format, load_str};
use toolgate_inbox::{BoxFuture, Inbox, InboxStore};
use toolgate_inbox_postgres::{PostgresInbox, PostgresOptions};
use toolgate_inbox_suite::Fixture;
use tower::util::BoxCloneService;
use tower::{ServiceBuilder, ServiceExt, service_fn};

/// The server's URL, from `TOOLGATE_PG_URL`. When it is unset and PostgreSQL's server is
/// installed, the throwaway loopback server of `.ci/postgres.sh` is started (once per test
/// process, as `.ci/run` does). Otherwise: under CI (`CI` set) the test fails, since CI must
/// run against a real server; elsewhere it prints, loudly, why it is skipped.
pub fn pg_url(module: &str) -> Option<String> {
    // The test harness names each test's thread after the test.
    let current = std::thread::current();
    let test = current.name().filter(|n| *n != "main").unwrap_or(module);
    let url = std::env::var("TOOLGATE_PG_URL")
        .ok()
        .filter(|u| !u.trim().is_empty())
        .or_else(|| started_server("TOOLGATE_PG_URL"));
    match url {
        Some(url) => Some(url),
        _ if std::env::var_os("CI").is_some() => panic!(
            "{test}: TOOLGATE_PG_URL is unset under CI; the Postgres inbox tests must run against \
             a real server there: run `eval \"$(bash .ci/postgres.sh)\"` before `cargo test`"
        ),
        _ => {
            // Straight to the process's stderr, past the test harness's capture, so the
            // reason shows in a plain `cargo test` run.
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "skipped {test}: TOOLGATE_PG_URL is unset (start a throwaway server with \
                 `eval \"$(bash .ci/postgres.sh)\"`, then run the tests again)"
            );
            None
        }
    }
}

/// The same server over TLS (`sslmode=verify-full` against `.ci/postgres.sh`'s test CA),
/// from `TOOLGATE_PG_TLS_URL`, found, started or skipped as [`pg_url`].
pub fn pg_tls_url(module: &str) -> Option<String> {
    let current = std::thread::current();
    let test = current.name().filter(|n| *n != "main").unwrap_or(module);
    let url = std::env::var("TOOLGATE_PG_TLS_URL")
        .ok()
        .filter(|u| !u.trim().is_empty())
        .or_else(|| {
            // A server started by this process (TOOLGATE_PG_URL unset) or an older shell's
            // (TOOLGATE_PG_URL set, the TLS one not): the script says both.
            started_server("TOOLGATE_PG_TLS_URL")
        });
    match url {
        Some(url) => Some(url),
        _ if std::env::var_os("CI").is_some() => panic!(
            "{test}: TOOLGATE_PG_TLS_URL is unset under CI; the Postgres inbox's TLS tests must run \
             against a real server there: run `eval \"$(bash .ci/postgres.sh)\"` before `cargo test`"
        ),
        _ => {
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "skipped {test}: TOOLGATE_PG_TLS_URL is unset (start a throwaway server with \
                 `eval \"$(bash .ci/postgres.sh)\"`, then run the tests again)"
            );
            None
        }
    }
}

/// `let url = require_pg_tls!();` — returns from the test when it is skipped.
#[macro_export]
macro_rules! require_pg_tls {
    () => {
        match common::pg_tls_url(module_path!()) {
            Some(url) => url,
            None => return,
        }
    };
}

/// Starts (or reuses) `.ci/postgres.sh`'s server when PostgreSQL's server binaries are
/// installed, and returns the URL it exports as `name`; never installs anything from a
/// plain `cargo test`.
fn started_server(name: &str) -> Option<String> {
    static EXPORTS: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let exports = EXPORTS.get_or_init(|| {
        let installed = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .flatten()
            .any(|v| v.path().join("bin/postgres").exists());
        if !installed {
            return None;
        }
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.ci/postgres.sh");
        let out = std::process::Command::new("bash")
            .arg(&script)
            .output()
            .ok()?;
        if !out.status.success() {
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "could not start the throwaway PostgreSQL server: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            return None;
        }
        Some(String::from_utf8_lossy(&out.stdout).into_owned())
    });
    let prefix = format!("export {name}=");
    exports
        .as_deref()?
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .map(|u| u.trim().trim_matches('\'').to_owned())
}

/// `let url = require_pg!();` — returns from the test when it is skipped.
#[macro_export]
macro_rules! require_pg {
    () => {
        match common::pg_url(module_path!()) {
            Some(url) => url,
            None => return,
        }
    };
}

/// A schema name no other test uses.
pub fn fresh_schema() -> String {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).unwrap();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("tg_t_{hex}")
}

/// A plain connection to the server, for looking and tampering behind the inbox's back.
pub async fn raw(url: &str, schema: &str) -> tokio_postgres::Client {
    let mut config: tokio_postgres::Config = url.parse().unwrap();
    config.options(format!("-c search_path={schema}"));
    let (client, connection) = config.connect(NoTls).await.unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// Drops test schemas (best effort).
pub async fn drop_schemas(url: &str, schemas: &[String]) {
    let client = raw(url, "public").await;
    for s in schemas {
        let _ = client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {s} CASCADE"))
            .await;
    }
}

pub async fn connect(url: &str, schema: &str, instance: &str) -> PostgresInbox {
    PostgresInbox::connect(url, options(schema, instance))
        .await
        .unwrap()
}

pub fn options(schema: &str, instance: &str) -> PostgresOptions {
    PostgresOptions::default()
        .schema(schema)
        .instance(instance)
        .lock_timeout(std::time::Duration::from_secs(30))
}

/// Fresh schemas, one per store, on the server at `url`.
pub struct PgFixture {
    pub url: String,
    pub options: PostgresOptions,
    opened: Mutex<Vec<(Arc<dyn InboxStore>, String)>>,
}

impl PgFixture {
    pub fn new(url: String, options: PostgresOptions) -> Self {
        Self {
            url,
            options,
            opened: Mutex::new(Vec::new()),
        }
    }

    fn schema_of(&self, store: &Arc<dyn InboxStore>) -> String {
        let opened = self.opened.lock().unwrap();
        opened
            .iter()
            .find(|(s, _)| Arc::ptr_eq(s, store))
            .map(|(_, schema)| schema.clone())
            .expect("a store this fixture opened")
    }

    async fn open(&self, schema: String) -> Arc<dyn InboxStore> {
        let store: Arc<dyn InboxStore> = Arc::new(
            PostgresInbox::connect(&self.url, self.options.clone().schema(schema.clone()))
                .await
                .unwrap(),
        );
        self.opened
            .lock()
            .unwrap()
            .push((Arc::clone(&store), schema));
        store
    }

    /// Drops every schema this fixture made.
    pub async fn cleanup(&self) {
        let mut schemas: Vec<String> = {
            let mut opened = self.opened.lock().unwrap();
            opened.drain(..).map(|(_, s)| s).collect()
        };
        schemas.dedup();
        drop_schemas(&self.url, &schemas).await;
    }
}

impl Fixture for PgFixture {
    fn fresh(&self) -> BoxFuture<'_, Arc<dyn InboxStore>> {
        Box::pin(self.open(fresh_schema()))
    }

    fn reopen<'a>(&'a self, store: &'a Arc<dyn InboxStore>) -> BoxFuture<'a, Arc<dyn InboxStore>> {
        Box::pin(async move {
            let schema = self.schema_of(store);
            self.open(schema).await
        })
    }

    fn corrupt_policy<'a>(&'a self, store: &'a Arc<dyn InboxStore>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let schema = self.schema_of(store);
            let client = raw(&self.url, &schema).await;
            let n = client
                .execute(
                    "UPDATE stored_policy SET body = '{\"rules\": [{\"effect\": \"sometimes\"' WHERE id = 1",
                    &[],
                )
                .await
                .unwrap();
            assert_eq!(n, 1, "there was a stored policy to corrupt");
        })
    }

    fn write_policy_body<'a>(
        &'a self,
        store: &'a Arc<dyn InboxStore>,
        body: &'a str,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let schema = self.schema_of(store);
            let client = raw(&self.url, &schema).await;
            client
                .execute(
                    "INSERT INTO stored_policy (id, body, updated_at) VALUES (1, $1, '2020-01-01T00:00:00.000000Z') \
                     ON CONFLICT (id) DO UPDATE SET body = excluded.body",
                    &[&body],
                )
                .await
                .unwrap();
        })
    }
}

// ----- a real toolgate stack over a counting tool -----

/// `refund` and `payout` ask (agent level, and a tenant rule for `refund`); `lookup` never
/// asks.
pub fn governance() -> Governance {
    let config = json!({
        "approval": {"channel": "inbox"},
        "tools": [
            {"kind": "http", "name": "refund", "approval": "require_approval", "description": "Refund an order"},
            {"kind": "http", "name": "payout", "approval": "require_approval"},
            {"kind": "http", "name": "lookup", "read_only": true}
        ],
        "agents": [
            {"name": "support", "allowed_tools": ["refund", "payout", "lookup"]}
        ],
        "policy": {"rules": [{"effect": "ask", "tool": "refund", "reason": "refunds need a person"}]}
    });
    load_str(&config.to_string(), Format::Json).unwrap()
}

/// What the tool received.
#[derive(Debug, Clone, PartialEq)]
pub struct Received {
    pub call_id: CallId,
    pub tool: String,
    pub input: Value,
}

/// The tool behind a stack: counts invocations and records what it received.
#[derive(Debug, Clone, Default)]
pub struct Tool {
    pub runs: Arc<AtomicUsize>,
    pub received: Arc<Mutex<Vec<Received>>>,
}

impl Tool {
    pub fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }

    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

pub type Stack = BoxCloneService<ToolCall, ToolResponse, Infallible>;

/// The whole stack, outermost first: exposure → confidentiality → air gap → approval gate
/// (with the inbox channel) → the tool.
pub fn stack(handle: &GovernanceHandle, inbox: &Inbox, tool: &Tool) -> Stack {
    let tool = tool.clone();
    let svc = ServiceBuilder::new()
        .layer(ExposureLayer::new(handle.clone()))
        .layer(ConfidentialityLayer::new(handle.clone()))
        .layer(AirGapLayer::new(handle.clone()))
        .layer(ApprovalGateLayer::new(handle.clone()).channel(inbox.channel()))
        .service(service_fn(move |call: ToolCall| {
            tool.runs.fetch_add(1, Ordering::SeqCst);
            tool.received.lock().unwrap().push(Received {
                call_id: call.id.clone(),
                tool: call.tool.display_name(),
                input: call.input.clone(),
            });
            std::future::ready(Ok::<_, Infallible>(ToolResponse::Completed(
                ToolOutput::new(json!({"refunded": call.input})),
            )))
        }));
    BoxCloneService::new(svc)
}

pub async fn send(stack: &Stack, call: ToolCall) -> ToolResponse {
    match stack.clone().oneshot(call).await {
        Ok(r) => r,
        Err(never) => match never {},
    }
}

pub fn support() -> AgentRef {
    AgentRef::profile("support")
}

/// Sends `call` and expects it held; returns the interaction id.
pub async fn held(stack: &Stack, call: ToolCall) -> String {
    match send(stack, call).await {
        ToolResponse::Held(h) => {
            assert!(!h.reasons.is_empty(), "a held call says why");
            h.interaction_id
        }
        other => panic!("expected a held call, got {other:?}"),
    }
}
