//! The quota reservation (R44: check and record, atomically) from two OS processes at once
//! against one store, against one process alone (issue 21): per-call latency, combined
//! throughput, and the exactness check — two processes racing for a quota of `max: 37` put
//! exactly 37 sends in its window, never 38.
//!
//! Not a criterion bench: each figure needs several processes. The harness starts copies
//! of itself as workers (`TG_QUOTA_WORKER=1`), each opening its own counter on the store,
//! waiting for a `go` line on its standard input so both start together, reserving, and
//! printing its latencies as one JSON line.
//!
//! ```sh
//! cargo bench -p toolgate-benches --bench quota_processes                 # SQLite only
//! eval "$(bash .ci/postgres.sh)"; cargo bench -p toolgate-benches --bench quota_processes  # + PostgreSQL
//! ```
//!
//! `TG_QUOTA_CALLS` sets the reservations per worker (default 400 for SQLite, 200 for
//! PostgreSQL). Every reservation is the `over_time` call's: five quota groups (a shared
//! group key per quota, as two replicas serving one agent share them), a window of an hour.

use std::io::{BufRead, Write};
use std::process::{Command, Stdio};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use toolgate_engine::quota::{QuotaCounter, QuotaError, QuotaGroup};

const GROUPS: usize = 5;
const EXACT_MAX: u64 = 37;
const EXACT_TRIES: usize = 100;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn groups(prefix: &str, max: u64) -> Vec<QuotaGroup> {
    (0..GROUPS)
        .map(|i| QuotaGroup::new(format!("{prefix}-{i}"), i, max, 3_600_000))
        .collect()
}

/// One worker: open the store, say `ready`, wait for `go`, reserve `calls` times, print the
/// latencies (µs) and how many were refused.
fn worker() {
    let store = std::env::var("TG_QW_STORE").expect("TG_QW_STORE");
    let mut prefix = std::env::var("TG_QW_PREFIX").expect("TG_QW_PREFIX");
    if std::env::var_os("TG_QW_OWN").is_some() {
        // Groups of its own (another agent's calls): no lock shared with the other worker.
        prefix = format!("{prefix}-{}", std::process::id());
    }
    let calls: usize = std::env::var("TG_QW_CALLS")
        .expect("TG_QW_CALLS")
        .parse()
        .expect("a count");
    let max: u64 = std::env::var("TG_QW_MAX")
        .expect("TG_QW_MAX")
        .parse()
        .expect("a max");
    let groups = groups(&prefix, max);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let reserve: Box<dyn FnMut() -> Result<(), QuotaError>> = if store == "postgres" {
        use toolgate::AsyncQuotaCounter;
        let url = std::env::var("TOOLGATE_PG_URL").expect("TOOLGATE_PG_URL");
        let counter = rt.block_on(async {
            let inbox = toolgate_inbox_postgres::PostgresInbox::connect(
                &url,
                toolgate_inbox_postgres::PostgresOptions::default().schema("tg_bench_qproc"),
            )
            .await
            .expect("the server answers");
            toolgate_inbox_postgres::PostgresQuotaCounter::for_inbox(&inbox)
                .await
                .expect("the counter's table")
        });
        let groups = groups.clone();
        Box::new(move || rt.block_on(counter.reserve(&groups, now_ms())))
    } else {
        let counter = toolgate_inbox::SqliteQuotaCounter::open(&store).expect("opens");
        let groups = groups.clone();
        Box::new(move || counter.reserve(&groups, now_ms()))
    };
    let mut reserve = reserve;
    let mut out = std::io::stdout();
    writeln!(out, "ready").expect("stdout");
    out.flush().expect("stdout");
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).expect("stdin");
    let mut lat = Vec::with_capacity(calls);
    let (mut sent, mut full, mut other) = (0u64, 0u64, 0u64);
    let started = Instant::now();
    for _ in 0..calls {
        let t = Instant::now();
        match reserve() {
            Ok(()) => sent += 1,
            Err(QuotaError::Full(_)) => full += 1,
            Err(QuotaError::Unavailable(why)) => {
                other += 1;
                eprintln!("worker: {why}");
            }
        }
        lat.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let wall = started.elapsed().as_secs_f64();
    println!(
        "{}",
        json!({"lat_us": lat, "sent": sent, "full": full, "unavailable": other, "wall_s": wall})
    );
}

/// Starts `n` workers on `store` with the same groups, lets them go at once, and returns
/// their reports and the wall time from `go` to the last report.
fn run(
    store: &str,
    prefix: &str,
    n: usize,
    calls: usize,
    max: u64,
    own: bool,
) -> (Vec<Value>, f64) {
    let exe = std::env::current_exe().expect("the harness's path");
    let mut children: Vec<_> = (0..n)
        .map(|_| {
            Command::new(&exe)
                .env("TG_QUOTA_WORKER", "1")
                .env("TG_QW_STORE", store)
                .env("TG_QW_PREFIX", prefix)
                .env("TG_QW_CALLS", calls.to_string())
                .env("TG_QW_MAX", max.to_string())
                .env(if own { "TG_QW_OWN" } else { "TG_QW_SHARED" }, "1")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("a worker starts")
        })
        .collect();
    let mut readers: Vec<_> = children
        .iter_mut()
        .map(|c| std::io::BufReader::new(c.stdout.take().expect("piped")))
        .collect();
    for r in &mut readers {
        let mut line = String::new();
        r.read_line(&mut line).expect("ready");
        assert_eq!(line.trim(), "ready", "a worker failed to open the store");
    }
    let started = Instant::now();
    for c in &mut children {
        let stdin = c.stdin.as_mut().expect("piped");
        writeln!(stdin, "go").expect("go");
        stdin.flush().expect("go");
    }
    let reports: Vec<Value> = readers
        .iter_mut()
        .map(|r| {
            let mut line = String::new();
            r.read_line(&mut line).expect("a report");
            serde_json::from_str(&line).expect("a JSON report")
        })
        .collect();
    let wall = started.elapsed().as_secs_f64();
    for mut c in children {
        assert!(c.wait().expect("exits").success());
    }
    (reports, wall)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let at = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

fn summary(reports: &[Value], wall: f64) -> (f64, f64, f64, u64) {
    let mut lat: Vec<f64> = reports
        .iter()
        .flat_map(|r| r["lat_us"].as_array().cloned().unwrap_or_default())
        .filter_map(|v| v.as_f64())
        .collect();
    lat.sort_by(f64::total_cmp);
    let sent: u64 = reports
        .iter()
        .map(|r| r["sent"].as_u64().unwrap_or(0))
        .sum();
    let unavailable: u64 = reports
        .iter()
        .map(|r| r["unavailable"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(unavailable, 0, "no reservation may fail on the store");
    (
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        lat.len() as f64 / wall,
        sent,
    )
}

fn measure(name: &str, store: &str, calls: usize) {
    let tag = format!("{}-{}", std::process::id(), now_ms());
    println!("## {name}: {calls} reservations per worker, {GROUPS} groups each");
    println!("| processes | groups | median per call | p99 per call | combined throughput |");
    println!("|---|---|---|---|---|");
    let mut one = 0.0;
    for (n, own) in [(1usize, false), (2, false), (2, true)] {
        let (reports, wall) = run(
            store,
            &format!("tp{n}{own}-{tag}"),
            n,
            calls,
            1_000_000_000,
            own,
        );
        let (p50, p99, rate, sent) = summary(&reports, wall);
        assert_eq!(
            sent as usize,
            n * calls,
            "a quota with room sends every call"
        );
        if n == 1 {
            one = rate;
        }
        let groups = if own { "each its own" } else { "the same five" };
        println!(
            "| {n} | {groups} | {:.0} µs | {:.0} µs | {:.0}/s ({:.2}× one process) |",
            p50,
            p99,
            rate,
            rate / one
        );
    }
    // Exactness: two processes race for 37 sends, 100 tries each.
    let (reports, _) = run(
        store,
        &format!("exact-{tag}"),
        2,
        EXACT_TRIES,
        EXACT_MAX,
        false,
    );
    let sent: u64 = reports
        .iter()
        .map(|r| r["sent"].as_u64().unwrap_or(0))
        .sum();
    let full: u64 = reports
        .iter()
        .map(|r| r["full"].as_u64().unwrap_or(0))
        .sum();
    println!(
        "exactness: 2 processes × {EXACT_TRIES} tries at max {EXACT_MAX}: {sent} sent ({} and {}), {full} refused rate_limited",
        reports[0]["sent"], reports[1]["sent"]
    );
    assert_eq!(
        sent, EXACT_MAX,
        "exactly max sends in the window, never more"
    );
    assert_eq!(full as usize, 2 * EXACT_TRIES - EXACT_MAX as usize);
    println!();
}

fn main() {
    if std::env::var_os("TG_QUOTA_WORKER").is_some() {
        worker();
        return;
    }
    // `cargo bench` passes `--bench` (and a filter, when given); neither is read here.
    let calls = |default: usize| {
        std::env::var("TG_QUOTA_CALLS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let dir = std::env::temp_dir().join(format!("toolgate-bench-qproc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary folder");
    let db = dir.join("quota.db");
    let path = db.to_str().expect("a UTF-8 path").to_owned();
    measure("SQLite (WAL, synchronous FULL)", &path, calls(400));
    let _ = std::fs::remove_dir_all(&dir);
    if std::env::var("TOOLGATE_PG_URL").is_ok_and(|u| !u.trim().is_empty()) {
        measure("PostgreSQL (loopback, fsync on)", "postgres", calls(200));
    } else {
        println!("PostgreSQL skipped: TOOLGATE_PG_URL is unset (eval \"$(bash .ci/postgres.sh)\")");
    }
}
