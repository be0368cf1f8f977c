//! The schema is created on connect, idempotently, even by instances starting together; a
//! newer schema or tables that are not an inbox are refused and left unchanged; a server
//! that cannot be reached is a clear error that never shows the password.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;

use common::*;
use toolgate_inbox::{HeldCalls, StoredPolicies};
use toolgate_inbox::{InboxErrorKind, State};
use toolgate_inbox_postgres::{PostgresInbox, PostgresOptions, SCHEMA_VERSION};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn instances_starting_together_create_the_schema_once() {
    let url = require_pg!();
    let schema = fresh_schema();
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let (url, schema) = (url.clone(), schema.clone());
            tokio::spawn(async move {
                PostgresInbox::connect(&url, options(&schema, &format!("gate-{i}"))).await
            })
        })
        .collect();
    for t in tasks {
        let store = t.await.unwrap().unwrap();
        assert_eq!(store.schema(), schema);
        assert_eq!(store.channel(), format!("toolgate_inbox.{schema}"));
    }
    let client = raw(&url, &schema).await;
    let version: String = client
        .query_one(
            "SELECT value FROM toolgate_inbox_meta WHERE key = 'schema_version'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, SCHEMA_VERSION.to_string());
    let rows: i64 = client
        .query_one("SELECT count(*) FROM toolgate_inbox_meta", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        rows, 4,
        "application, schema_version, notify_channel, created_at"
    );
    // Connecting again changes nothing and sees the same inbox.
    let again = connect(&url, &schema, "gate-9").await;
    assert!(again.list(Some(State::Pending)).await.unwrap().is_empty());
    drop_schemas(&url, &[schema]).await;
}

#[tokio::test]
async fn a_newer_schema_version_is_refused_and_left_unchanged() {
    let url = require_pg!();
    let schema = fresh_schema();
    drop(connect(&url, &schema, "gate").await);
    let client = raw(&url, &schema).await;
    client
        .batch_execute("UPDATE toolgate_inbox_meta SET value = '3' WHERE key = 'schema_version'")
        .await
        .unwrap();
    let e = PostgresInbox::connect(&url, options(&schema, "gate"))
        .await
        .unwrap_err();
    eprintln!("{e}");
    assert_eq!(e.kind(), InboxErrorKind::Schema, "{e}");
    assert!(
        e.message()
            .contains("schema version 3, newer than this program's 2"),
        "{e}"
    );
    let version: String = client
        .query_one(
            "SELECT value FROM toolgate_inbox_meta WHERE key = 'schema_version'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, "3", "left unchanged");
    drop_schemas(&url, &[schema]).await;
}

#[tokio::test]
async fn tables_that_are_not_an_inbox_are_refused_and_left_unchanged() {
    let url = require_pg!();
    let schema = fresh_schema();
    let client = raw(&url, "public").await;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {schema}; CREATE TABLE {schema}.held_calls (id INT); \
             INSERT INTO {schema}.held_calls VALUES (7)"
        ))
        .await
        .unwrap();
    let e = PostgresInbox::connect(&url, options(&schema, "gate"))
        .await
        .unwrap_err();
    eprintln!("{e}");
    assert_eq!(e.kind(), InboxErrorKind::Schema, "{e}");
    assert!(e.message().contains("not a toolgate inbox"), "{e}");
    let n: i32 = client
        .query_one(&format!("SELECT id FROM {schema}.held_calls"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 7);
    let meta: bool = client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_tables WHERE schemaname = $1 AND tablename = 'toolgate_inbox_meta')",
            &[&schema],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!meta, "nothing was created");
    drop_schemas(&url, &[schema]).await;
}

#[tokio::test]
async fn a_server_that_cannot_be_reached_is_a_clear_error_without_the_password() {
    // Loopback only: a port nothing listens on (a listener bound and closed at once).
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("postgres://alice:s3cret@127.0.0.1:{port}/inbox");
    let e = PostgresInbox::connect(
        &url,
        PostgresOptions::default().connect_timeout(std::time::Duration::from_secs(2)),
    )
    .await
    .unwrap_err();
    eprintln!("{e}");
    assert_eq!(e.kind(), InboxErrorKind::Unavailable, "{e}");
    assert!(
        e.message().contains(&format!("`127.0.0.1:{port}/inbox`")),
        "{e}"
    );
    assert!(!e.message().contains("s3cret"), "{e}");
    let e = PostgresInbox::connect("postgres://[not a url", PostgresOptions::default())
        .await
        .unwrap_err();
    assert!(
        e.message()
            .starts_with("the inbox database URL cannot be read"),
        "{e}"
    );
    let e = PostgresInbox::connect(&url, PostgresOptions::default().schema("No Way"))
        .await
        .unwrap_err();
    assert!(e.message().contains("`No Way`"), "{e}");
}

#[tokio::test]
async fn a_database_that_is_not_there_is_unavailable() {
    let url = require_pg!();
    let config: tokio_postgres::Config = url.parse().unwrap();
    let host = match &config.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(h) => h.clone(),
        #[cfg(unix)]
        tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let user = config.get_user().unwrap_or("postgres");
    let missing = format!("postgres://{user}@{host}:{port}/toolgate_no_such_database");
    let e = PostgresInbox::connect(&missing, PostgresOptions::default())
        .await
        .unwrap_err();
    eprintln!("{e}");
    assert_eq!(e.kind(), InboxErrorKind::Unavailable, "{e}");
    assert!(e.message().contains("toolgate_no_such_database"), "{e}");
}

#[tokio::test]
async fn r43_a_version_1_inbox_is_upgraded_in_place_with_sessions_and_turns() {
    let url = require_pg!();
    let schema = fresh_schema();
    drop(connect(&url, &schema, "gate").await);
    // Make it a version-1 inbox holding one call, as an older program left it.
    let client = raw(&url, &schema).await;
    client
        .batch_execute(
            "DROP INDEX held_calls_by_session; \
             ALTER TABLE held_calls DROP COLUMN session_id, DROP COLUMN turn_id; \
             UPDATE toolgate_inbox_meta SET value = '1' WHERE key = 'schema_version'; \
             INSERT INTO held_calls (interaction_id, call_id, tool, identities, definition_hash, \
             agent_profile, input_json, input_canonical, input_hash, reasons, run_mode, \
             run_background, created_at, expires_at, state, updated_at) VALUES ('ia_old', 'c1', \
             'refund', '[{\"kind\":\"http\",\"source\":\"\",\"name\":\"refund\"}]', 'sha256:d', \
             'support', '{}', '{}', 'sha256:i', '[{\"source\":\"agent\",\"reason\":\"r\"}]', \
             'use_agent_policy', false, 1, 9999999999999, 'pending', 1)",
        )
        .await
        .unwrap();
    let store = connect(&url, &schema, "gate").await;
    let old = store.get("ia_old").await.unwrap().unwrap();
    assert_eq!(
        old.state,
        State::Pending,
        "the held call survives the upgrade"
    );
    assert_eq!(old.call.turn, None);
    let version: String = client
        .query_one(
            "SELECT value FROM toolgate_inbox_meta WHERE key = 'schema_version'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, "2");
    assert!(
        has_open_index(&client, &schema).await,
        "the upgrade adds the index of open calls"
    );
    let mut c = toolgate_inbox_suite::held(
        serde_json::json!({"n": 1}),
        std::time::Duration::from_secs(60),
    );
    c.turn = Some(toolgate_core::Turn::new("s", "t"));
    store.hold(c.clone()).await.unwrap();
    assert_eq!(store.pending("s").await.unwrap()[0].call, c);
    drop_schemas(&url, &[schema]).await;
}

fn settings(gov: &toolgate_engine::Governance) -> toolgate_inbox::InboxSettings {
    toolgate_inbox::InboxSettings::read(gov).unwrap().unwrap()
}

#[tokio::test]
async fn r26_the_configurations_inbox_section_connects_with_its_ttl() {
    let url = require_pg!();
    let schema = fresh_schema();
    let gov = toolgate_engine::config::load_str(
        &serde_json::json!({"inbox": {"postgres": url, "ttl": "90m"}}).to_string(),
        toolgate_engine::config::Format::Json,
    )
    .unwrap();
    let inbox = PostgresInbox::connect_configured(&settings(&gov), options(&schema, "gate"))
        .await
        .unwrap();
    assert_eq!(inbox.ttl(), std::time::Duration::from_secs(90 * 60));
    assert!(inbox.store().list(None).await.unwrap().is_empty());
    let sqlite = toolgate_engine::config::load_str(
        r#"{"inbox": {"sqlite": "x.db"}}"#,
        toolgate_engine::config::Format::Json,
    )
    .unwrap();
    let e = PostgresInbox::connect_configured(&settings(&sqlite), options(&schema, "gate"))
        .await
        .unwrap_err();
    assert!(e.message().contains("SQLite"), "{e}");
    drop_schemas(&url, &[schema]).await;
}

async fn has_open_index(client: &tokio_postgres::Client, schema: &str) -> bool {
    client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_indexes WHERE schemaname = $1 \
             AND indexname = 'held_calls_open')",
            &[&schema],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn r26_r38_an_inbox_without_the_index_of_open_calls_gains_it_and_find_open_reads_it() {
    let url = require_pg!();
    let schema = fresh_schema();
    drop(connect(&url, &schema, "gate").await);
    let client = raw(&url, &schema).await;
    assert!(has_open_index(&client, &schema).await, "a new inbox has it");
    // An inbox made before the index, as an older program left it (still version 2).
    client
        .batch_execute("DROP INDEX held_calls_open")
        .await
        .unwrap();
    // One pooled connection: the statistics of its index scans are the ones read below.
    let store = PostgresInbox::connect(&url, options(&schema, "gate").pool_size(1))
        .await
        .unwrap();
    assert!(
        has_open_index(&client, &schema).await,
        "connecting adds the missing index"
    );
    let version: String = client
        .query_one(
            "SELECT value FROM toolgate_inbox_meta WHERE key = 'schema_version'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, "2", "an index is not a schema version");
    // Many finished calls and other agents' open ones; then the planner's statistics.
    client
        .batch_execute(
            "INSERT INTO held_calls (interaction_id, call_id, tool, identities, definition_hash, \
             agent_profile, input_json, input_canonical, input_hash, reasons, run_mode, \
             run_background, created_at, expires_at, state, updated_at) \
             SELECT 'ia_seed_' || i, 'c', 'payments__refund', '[]', 'sha256:d', \
             CASE WHEN i % 10 = 0 THEN 'agent-' || i ELSE 'support' END, '{}', '{}', \
             'sha256:seed-' || (i % 500), '[]', 'use_agent_policy', false, i, 9999999999999, \
             CASE WHEN i % 10 = 0 THEN 'pending' ELSE 'done' END, i \
             FROM generate_series(1, 20000) AS i; \
             ANALYZE held_calls",
        )
        .await
        .unwrap();
    let scans = || async {
        client
            .batch_execute("SELECT pg_stat_clear_snapshot()")
            .await
            .unwrap();
        client
            .query_one(
                "SELECT COALESCE(sum(idx_scan), 0)::bigint FROM pg_stat_user_indexes \
                 WHERE schemaname = $1 AND indexrelname = 'held_calls_open'",
                &[&schema],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
    };
    let before = scans().await;
    let c = toolgate_inbox_suite::held(
        serde_json::json!({"order": 7}),
        std::time::Duration::from_secs(60),
    );
    store.hold(c.clone()).await.unwrap();
    let found = store
        .find_open(&c.agent, "PAYMENTS__refund", &c.input_hash)
        .await
        .unwrap()
        .expect("the held call");
    assert_eq!(found.call, c);
    // A backend publishes its statistics when it goes idle at least a second after it last
    // did: the store's connection is kept busy with reads outside `held_calls` until then.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while scans().await <= before {
        assert!(
            std::time::Instant::now() < deadline,
            "find_open did not read held_calls_open (no index scan counted)"
        );
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        store.get_policy().await.unwrap();
    }
    drop_schemas(&url, &[schema]).await;
}
