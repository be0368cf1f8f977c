//! Rough throughput of one hold → approve → claim → done cycle (the four state changes),
//! through the store API, on SQLite with `synchronous` NORMAL and FULL. Not a criterion bench
//! (that lives under `benches/`); run with
//! `cargo test --release -p toolgate-inbox --test cycle_timing -- --ignored --nocapture`.

mod common;

use std::time::{Duration, Instant};

use serde_json::json;
use toolgate_inbox::suite::held;
use toolgate_inbox::{
    Answer, Claim, Completion, InboxStore, Outcome, SqliteInbox, SqliteOptions, Synchronous,
};

async fn cycles(store: &SqliteInbox, n: usize) -> f64 {
    let calls: Vec<_> = (0..n)
        .map(|i| held(json!({"order": i}), Duration::from_secs(3600)))
        .collect();
    let started = Instant::now();
    for c in calls {
        let id = c.interaction_id.clone();
        let claim = Claim {
            input_hash: c.input_hash.clone(),
            definition_hash: c.definition_hash.clone(),
            token: "t".into(),
        };
        store.hold(c).await.unwrap();
        store
            .answer(&id, Answer::approve("k", "alice"))
            .await
            .unwrap();
        store.claim(&id, claim).await.unwrap();
        store
            .complete(
                &id,
                Completion {
                    outcome: Outcome::Done,
                    result: json!({"ok": true}),
                    token: "t".into(),
                },
            )
            .await
            .unwrap();
    }
    n as f64 / started.elapsed().as_secs_f64()
}

/// The floor: the same four statements on a bare connection, no transactions around them
/// beyond autocommit, no checks.
fn bare(path: &std::path::Path, sync: &str, n: usize) -> f64 {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(&format!(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous={sync};"
    ))
    .unwrap();
    conn.execute_batch(toolgate_inbox::SCHEMA_V1).unwrap();
    let calls: Vec<_> = (0..n)
        .map(|i| held(json!({"order": i}), Duration::from_secs(3600)))
        .collect();
    let started = Instant::now();
    for c in calls {
        conn.prepare_cached(
            "INSERT INTO held_calls (interaction_id, call_id, tool, identities, definition_hash, \
             agent_profile, input_json, input_canonical, input_hash, reasons, run_mode, \
             run_background, created_at, expires_at, state, updated_at) \
             VALUES (?1, 'c', 't', '[]', 'd', 'a', ?2, ?2, 'h', '[]', 'use_agent_policy', 0, 1, 2, 'pending', 1)",
        )
        .unwrap()
        .execute(rusqlite::params![c.interaction_id, c.input_json])
        .unwrap();
        for sql in [
            "UPDATE held_calls SET state = 'approved' WHERE interaction_id = ?1 AND state = 'pending'",
            "UPDATE held_calls SET state = 'claimed' WHERE interaction_id = ?1 AND state = 'approved'",
            "UPDATE held_calls SET state = 'done' WHERE interaction_id = ?1 AND state = 'claimed'",
        ] {
            assert_eq!(
                conn.prepare_cached(sql)
                    .unwrap()
                    .execute([&c.interaction_id])
                    .unwrap(),
                1
            );
        }
    }
    n as f64 / started.elapsed().as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a timing, not a check: run by hand in release mode"]
async fn cycle_timing() {
    let dir = tempfile::tempdir().unwrap();
    for (name, sync, n) in [
        ("NORMAL", Synchronous::Normal, 5000),
        ("FULL", Synchronous::Full, 1000),
    ] {
        let store = SqliteInbox::open(
            dir.path().join(format!("{name}.db")),
            SqliteOptions::default().synchronous(sync),
        )
        .unwrap();
        let _ = cycles(&store, 200).await; // warm up
        let rate = cycles(&store, n).await;
        // The same file with operations run inline: what the hop to the blocking pool costs.
        let inline_store = SqliteInbox::open(
            dir.path().join(format!("{name}.db")),
            SqliteOptions::default().synchronous(sync).run_inline(true),
        )
        .unwrap();
        let inline = cycles(&inline_store, n).await;
        let floor = bare(&dir.path().join(format!("bare-{name}.db")), name, n);
        eprintln!(
            "synchronous={name}: {rate:.0} cycles/s through the store ({inline:.0} inline); bare floor {floor:.0} cycles/s ({n} cycles, 4 state changes each)"
        );
    }
}
