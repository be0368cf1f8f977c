//! Hold → approve → claim → done cycles on SQLite (issues 5 and 12), side by side with the
//! floor: the same four statements the store issues, as four autocommit transactions on one
//! connection of a file with the same schema (`bare_four_statements`), with `synchronous`
//! NORMAL and FULL. The held call is built outside the timed region on both sides. Figures
//! in `benches/README.md`.
//!
//! `cargo bench -p toolgate-inbox --bench cycle`
//!
//! With `INBOX_CYCLES=N` in the environment the binary instead runs N cycles of each
//! variant (NORMAL only) outside criterion and prints wall and CPU time per cycle, so that
//! `strace -f -c` can count the system calls of a known number of cycles:
//! `INBOX_CYCLES=3000 INBOX_VARIANT=store strace -f -c target/release/deps/cycle-…`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a bench: a failed setup stops it"
)]

use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion, Throughput, criterion_group};
use serde_json::json;
use toolgate_inbox::HeldCalls;
use toolgate_inbox::{
    Answer, Claim, Completion, NewHeldCall, Outcome, SqliteInbox, SqliteOptions, Synchronous,
};

/// A held call as the gate holds one: `payments__refund` for order `i`. Built here, not from
/// the store's test kit (`suite`): a shipped crate's bench never links its test kit.
fn new_call(i: u64) -> NewHeldCall {
    use std::sync::Arc;
    use toolgate_core::{AgentRef, Ask, AskSource, CallId, RunContext, ToolIdentity};
    let input = json!({"order": i});
    let request = toolgate_core::approval::ApprovalRequest {
        interaction_id: toolgate_core::id::random_id("ia_").expect("randomness"),
        call_id: CallId::new("call-bench"),
        tool: "payments__refund".into(),
        identities: vec![ToolIdentity::mcp("payments", "refund")],
        agent: AgentRef::profile("support"),
        input_hash: toolgate_engine::canon::input_hash(&input).expect("canonical"),
        input: Arc::new(input),
        literals: Default::default(),
        definition_hash: "sha256:definition-v1".into(),
        asks: vec![Ask::new(AskSource::PolicyRule(0), "refunds need a person")],
        run: RunContext::default(),
        turn: None,
        ticket: None,
        target: None,
        approvals: 1,
        labels: None,
    };
    NewHeldCall::from_request(
        &request,
        toolgate_inbox::Timestamp::now(),
        Duration::from_secs(3600),
    )
    .expect("a holdable call")
}

fn one_cycle(rt: &tokio::runtime::Runtime, store: &SqliteInbox, c: NewHeldCall) {
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

/// The four statements the store runs for one cycle, with the same parameters, each its
/// own autocommit transaction: what a plain script does.
fn bare_cycle(conn: &rusqlite::Connection, c: &NewHeldCall) {
    use rusqlite::params;
    let now = c.created_at.as_millis();
    conn.prepare_cached(
        "INSERT INTO held_calls (interaction_id, call_id, tool, identities, definition_hash, \
         agent_profile, agent_subagent, input_json, input_canonical, input_hash, reasons, \
         run_mode, run_background, created_at, expires_at, state, updated_at, session_id, \
         turn_id) VALUES (?1, ?2, ?3, '[]', ?4, ?5, NULL, ?6, ?7, ?8, '[]', \
         'use_agent_policy', 0, ?9, ?10, 'pending', ?9, NULL, NULL)",
    )
    .and_then(|mut s| {
        s.execute(params![
            c.interaction_id,
            c.call_id,
            c.tool,
            c.definition_hash,
            c.agent.profile,
            c.input_json,
            c.input_canonical,
            c.input_hash,
            now,
            c.expires_at.as_millis(),
        ])
    })
    .expect("insert");
    conn.prepare_cached(
        "UPDATE held_calls SET state = 'approved', approver = 'alice', answer_key = 'k', \
         answer_approve = 1, answer_reason = NULL, answered_at = ?2, updated_at = ?2 \
         WHERE interaction_id = ?1 AND state = 'pending' AND expires_at > ?2",
    )
    .and_then(|mut s| s.execute(params![c.interaction_id, now]))
    .expect("approve");
    let approver: String = conn
        .prepare_cached(
            "UPDATE held_calls SET state = 'claimed', claim_token = 't', claimed_by = 'default', \
             claimed_at = ?2, updated_at = ?2 WHERE interaction_id = ?1 AND state = 'approved' \
             AND input_hash = ?3 AND definition_hash = ?4 RETURNING approver",
        )
        .and_then(|mut s| {
            s.query_row(
                params![c.interaction_id, now, c.input_hash, c.definition_hash],
                |r| r.get(0),
            )
        })
        .expect("claim");
    assert_eq!(approver, "alice");
    let done = conn
        .prepare_cached(
            "UPDATE held_calls SET state = 'done', result_json = ?3, finished_at = ?2, \
             updated_at = ?2 WHERE interaction_id = ?1 AND state = 'claimed' AND claim_token = 't'",
        )
        .and_then(|mut s| s.execute(params![c.interaction_id, now, r#"{"ok":true}"#]))
        .expect("done");
    assert_eq!(done, 1);
}

/// A connection to a file created by the store (same schema, same indexes), set up as a
/// script would: WAL and the given `synchronous`.
fn bare_conn(path: &Path, sync: &str) -> rusqlite::Connection {
    drop(SqliteInbox::open(path, SqliteOptions::default()).expect("create"));
    let conn = rusqlite::Connection::open(path).expect("open bare");
    conn.execute_batch(&format!(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous={sync};"
    ))
    .expect("pragmas");
    conn
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime();
    let mut g = c.benchmark_group("inbox_cycle");
    g.throughput(Throughput::Elements(1));
    for (name, sync) in [("normal", Synchronous::Normal), ("full", Synchronous::Full)] {
        let mut i = 0u64;
        for inline in [false, true] {
            let store = SqliteInbox::open(
                dir.path().join(format!("{name}-{inline}.db")),
                SqliteOptions::default()
                    .synchronous(sync)
                    .run_inline(inline),
            )
            .expect("open");
            let label = if inline { "store_inline" } else { "store" };
            g.bench_function(format!("sqlite_{name}/{label}"), |b| {
                b.iter_batched(
                    || {
                        i += 1;
                        new_call(i)
                    },
                    |c| one_cycle(&rt, &store, c),
                    BatchSize::SmallInput,
                )
            });
        }
        let conn = bare_conn(
            &dir.path().join(format!("bare-{name}.db")),
            &name.to_uppercase(),
        );
        g.bench_function(format!("sqlite_{name}/bare_four_statements"), |b| {
            b.iter_batched(
                || {
                    i += 1;
                    new_call(i)
                },
                |c| bare_cycle(&conn, &c),
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

/// CPU time of this process so far (user + system), from `/proc/self/stat`; zero where
/// that file does not exist.
fn cpu_time() -> Duration {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return Duration::ZERO;
    };
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i).and_then(|f| f.parse::<u64>().ok()))
        .sum();
    // USER_HZ is 100 on every Linux this runs on.
    Duration::from_millis(ticks * 10)
}

fn fixed_count(n: u64) {
    let variant = std::env::var("INBOX_VARIANT").unwrap_or_default();
    let dir = tempfile::tempdir().expect("tempdir");
    let calls: Vec<NewHeldCall> = (0..n).map(new_call).collect();
    let (wall, cpu) = (Instant::now(), cpu_time());
    match variant.as_str() {
        "bare" => {
            let conn = bare_conn(&dir.path().join("bare.db"), "NORMAL");
            calls.iter().for_each(|c| bare_cycle(&conn, c));
        }
        "store" | "store_inline" => {
            let rt = runtime();
            let store = SqliteInbox::open(
                dir.path().join("store.db"),
                SqliteOptions::default().run_inline(variant == "store_inline"),
            )
            .expect("open");
            calls.into_iter().for_each(|c| one_cycle(&rt, &store, c));
        }
        other => panic!("INBOX_VARIANT must be bare, store or store_inline, not `{other}`"),
    }
    let (wall, cpu) = (wall.elapsed(), cpu_time().saturating_sub(cpu));
    println!(
        "{variant}: {n} cycles, wall {wall:?} ({:.0} cycles/s), cpu {cpu:?} ({:.0} cycles/s of CPU)",
        n as f64 / wall.as_secs_f64(),
        n as f64 / cpu.as_secs_f64().max(1e-9),
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = bench
}

fn main() {
    if let Some(n) = std::env::var("INBOX_CYCLES")
        .ok()
        .and_then(|n| n.parse().ok())
    {
        fixed_count(n);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
