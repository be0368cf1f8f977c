//! The SQLite quota counter (R44): exact across processes sharing one file.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::process::Command;
use std::sync::Arc;

use toolgate_engine::quota::{QuotaCounter, QuotaError, QuotaGroup};
use toolgate_inbox::SqliteQuotaCounter;

const WORKER: &str = "TOOLGATE_QUOTA_WORKER_DB";
const MAX: u64 = 37;
const PROCESSES: usize = 4;
const CALLS: usize = 50;

fn group() -> [QuotaGroup; 1] {
    [QuotaGroup::new("refunds[\"support\"]", 0, MAX, 3_600_000)]
}

/// Run as a worker process (by the test below): `CALLS` concurrent reservations on the file
/// the environment names, printing how many were granted.
#[test]
fn worker() {
    let Some(path) = std::env::var_os(WORKER) else {
        return;
    };
    let shared = Arc::new(SqliteQuotaCounter::open(&path).unwrap());
    let threads: Vec<_> = (0..CALLS)
        .map(|i| {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || {
                // Half the threads share one connection, half open their own: the lock that
                // makes it exact is SQLite's, across connections and processes.
                let own = (i % 2 == 0).then(|| SqliteQuotaCounter::open(counter_path()).unwrap());
                let counter: &SqliteQuotaCounter = own.as_ref().unwrap_or(&shared);
                match counter.reserve(&group(), 1_000) {
                    Ok(()) => 1,
                    Err(QuotaError::Full(_)) => 0,
                    Err(e) => panic!("the counter must answer: {e}"),
                }
            })
        })
        .collect();
    let granted: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    println!("\nGRANTED {granted}");
}

fn counter_path() -> std::path::PathBuf {
    std::env::var_os(WORKER).unwrap().into()
}

#[test]
fn r44_four_processes_of_fifty_concurrent_calls_never_send_more_than_max() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("quota.db");
    SqliteQuotaCounter::open(&db).unwrap();
    let me = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..PROCESSES)
        .map(|_| {
            Command::new(&me)
                .args(["--exact", "worker", "--nocapture", "--test-threads", "1"])
                .env(WORKER, &db)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut total = 0;
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        let granted: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix("GRANTED "))
            .unwrap_or_else(|| panic!("a worker's count: {text}"))
            .trim()
            .parse()
            .unwrap();
        total += granted;
    }
    assert_eq!(total, MAX, "exactly max sends in the window, never more");
    let counter = SqliteQuotaCounter::open(&db).unwrap();
    assert_eq!(
        counter
            .sends_in_window(&group()[0].key, 3_600_000, 1_000)
            .unwrap(),
        MAX
    );
    // Full for the rest of the window; open again once the window has passed, the old sends
    // pruned.
    let Err(QuotaError::Full(full)) = counter.reserve(&group(), 2_000) else {
        panic!("the quota is full")
    };
    assert_eq!(full.retry_after_secs(), 3_599);
    counter.reserve(&group(), 3_601_000).unwrap();
    assert_eq!(
        counter
            .sends_in_window(&group()[0].key, 3_600_000, 3_601_000)
            .unwrap(),
        1
    );
}

#[test]
fn r44_a_check_records_nothing_and_a_counter_that_cannot_be_opened_fails_closed() {
    let dir = tempfile::tempdir().unwrap();
    let counter = SqliteQuotaCounter::open(dir.path().join("q.db")).unwrap();
    let one = [QuotaGroup::new("k", 0, 1, 10_000)];
    counter.check(&one, 0).unwrap();
    counter.check(&one, 0).unwrap();
    counter.reserve(&one, 0).unwrap();
    assert!(matches!(
        counter.check(&one, 5_000),
        Err(QuotaError::Full(_))
    ));
    // The window's edge: a send at t is in the window at now when now - W < t <= now.
    counter.check(&one, 10_000).unwrap();
    let missing = dir.path().join("no-such-dir").join("q.db");
    assert!(matches!(
        SqliteQuotaCounter::open(missing),
        Err(QuotaError::Unavailable(_))
    ));
}
