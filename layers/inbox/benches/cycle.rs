//! Hold → approve → claim → done cycles on SQLite (issue 5's performance figure), side by
//! side with the bare four statements on one connection (the floor), with `synchronous`
//! NORMAL and FULL. Figures in `benches/README.md`.
//!
//! `cargo bench -p toolgate-inbox --bench cycle`

use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::json;
use toolgate_inbox::suite::held;
use toolgate_inbox::{
    Answer, Claim, Completion, InboxStore, Outcome, SqliteInbox, SqliteOptions, Synchronous,
};

fn one_cycle(rt: &tokio::runtime::Runtime, store: &SqliteInbox, i: u64) {
    let c = held(json!({"order": i}), Duration::from_secs(3600));
    let id = c.interaction_id.clone();
    let claim = Claim {
        input_hash: c.input_hash.clone(),
        definition_hash: c.definition_hash.clone(),
        token: "t".into(),
    };
    rt.block_on(async {
        store.hold(c).await.expect("hold");
        store
            .answer(&id, Answer::approve("k", "alice"))
            .await
            .expect("answer");
        store.claim(&id, claim).await.expect("claim");
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
            .expect("complete");
    });
}

fn bare_cycle(conn: &rusqlite::Connection, i: u64) {
    let id = format!("ia_bare_{i}");
    conn.prepare_cached(
        "INSERT INTO held_calls (interaction_id, call_id, tool, identities, definition_hash, \
         agent_profile, input_json, input_canonical, input_hash, reasons, run_mode, \
         run_background, created_at, expires_at, state, updated_at) \
         VALUES (?1, 'c', 't', '[]', 'd', 'a', '{}', '{}', 'h', '[]', 'use_agent_policy', 0, 1, 2, 'pending', 1)",
    )
    .and_then(|mut s| s.execute([&id]))
    .expect("insert");
    for sql in [
        "UPDATE held_calls SET state = 'approved' WHERE interaction_id = ?1 AND state = 'pending'",
        "UPDATE held_calls SET state = 'claimed' WHERE interaction_id = ?1 AND state = 'approved'",
        "UPDATE held_calls SET state = 'done' WHERE interaction_id = ?1 AND state = 'claimed'",
    ] {
        conn.prepare_cached(sql)
            .and_then(|mut s| s.execute([&id]))
            .expect("update");
    }
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut g = c.benchmark_group("inbox_cycle");
    g.throughput(Throughput::Elements(1));
    for (name, sync) in [("normal", Synchronous::Normal), ("full", Synchronous::Full)] {
        for inline in [false, true] {
            let store = SqliteInbox::open(
                dir.path().join(format!("{name}-{inline}.db")),
                SqliteOptions::default()
                    .synchronous(sync)
                    .run_inline(inline),
            )
            .expect("open");
            let mut i = 0u64;
            let label = if inline { "store_inline" } else { "store" };
            g.bench_function(format!("sqlite_{name}/{label}"), |b| {
                b.iter(|| {
                    i += 1;
                    one_cycle(&rt, &store, i);
                })
            });
        }
        let conn = rusqlite::Connection::open(dir.path().join(format!("bare-{name}.db")))
            .expect("open bare");
        conn.execute_batch(&format!(
            "PRAGMA journal_mode=WAL; PRAGMA synchronous={};",
            name.to_uppercase()
        ))
        .expect("pragmas");
        conn.execute_batch(toolgate_inbox::SCHEMA_V1)
            .expect("schema");
        let mut i = 0u64;
        g.bench_function(format!("sqlite_{name}/bare_four_statements"), |b| {
            b.iter(|| {
                i += 1;
                bare_cycle(&conn, i);
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = bench
}
criterion_main!(benches);
