//! Faults to survive (R26): a process killed with SIGKILL after the claim and before the
//! result is recorded; a corrupt database file; a locked database file.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::*;
use serde_json::json;
use toolgate::GovernanceHandle;
use toolgate_core::{RefusalCode, ToolCall, ToolResponse};
use toolgate_inbox::HeldCalls;
use toolgate_inbox::{
    Answer, AnswerError, Inbox, InboxErrorKind, ResumeError, SqliteInbox, SqliteOptions, State,
};

const CHILD_ENV: &str = "TOOLGATE_INBOX_FAULT_CHILD";
const CHILD_TEST: &str = "sigkill_child_claims_and_hangs";

/// Not a test on its own: the child process of
/// `r26_a_sender_killed_after_the_claim_leaves_the_call_unknown_and_sent_at_most_once`.
/// Without its environment variable it returns at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_child_claims_and_hangs() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut parts = spec.splitn(3, '\n');
    let (db, marker, id) = (
        PathBuf::from(parts.next().unwrap()),
        PathBuf::from(parts.next().unwrap()),
        parts.next().unwrap().to_owned(),
    );
    let handle = GovernanceHandle::new(governance());
    let inbox = Inbox::new(SqliteInbox::open(&db, SqliteOptions::default()).unwrap());
    // The tool appends to the marker file, then hangs: the parent kills us before the
    // result can be recorded.
    let svc = tower::ServiceBuilder::new()
        .layer(toolgate::approval::ApprovalGateLayer::new(handle.clone()).channel(inbox.channel()))
        .service(tower::service_fn(move |call: ToolCall| {
            let marker = marker.clone();
            async move {
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&marker)
                    .unwrap();
                writeln!(f, "invoked {}", call.input).unwrap();
                f.sync_all().unwrap();
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok::<_, std::convert::Infallible>(ToolResponse::Completed(
                    toolgate_core::ToolOutput::new(json!("never recorded")),
                ))
            }
        }));
    let _ = inbox.resume(&id, svc).await;
    unreachable!("the parent kills this process while the tool hangs");
}

fn marker_lines(marker: &Path) -> Vec<String> {
    std::fs::read_to_string(marker)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r26_a_sender_killed_after_the_claim_leaves_the_call_unknown_and_sent_at_most_once() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("inbox.db");
    let marker = dir.path().join("tool-invocations.txt");
    let handle = GovernanceHandle::new(governance());
    let tool = Tool::default();
    let inbox = Inbox::new(sqlite(&db));
    let s = stack(&handle, &inbox, &tool);
    let victim = held(
        &s,
        ToolCall::new(support(), "refund", json!({"order": "kill-me"})),
    )
    .await;
    let pending = held(
        &s,
        ToolCall::new(support(), "refund", json!({"order": "pending"})),
    )
    .await;
    let waiting = held(
        &s,
        ToolCall::new(support(), "payout", json!({"order": "waiting"})),
    )
    .await;
    for id in [&victim, &waiting] {
        inbox
            .store()
            .answer(id, Answer::approve(format!("k-{id}"), "alice"))
            .await
            .unwrap();
    }
    let before = inbox.store().list(None).await.unwrap();
    drop((s, inbox));

    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([CHILD_TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(
            CHILD_ENV,
            format!("{}\n{}\n{victim}", db.display(), marker.display()),
        )
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while marker_lines(&marker).is_empty() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the child exited before invoking the tool: {status}");
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the child never invoked the tool"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // SIGKILL, as `kill -9` sends it (std's `Child::kill` sends the same signal, for a
    // machine without the `kill` program).
    match Command::new("kill")
        .args(["-9", &child.id().to_string()])
        .status()
    {
        Ok(s) => assert!(s.success(), "kill -9 failed: {s}"),
        Err(_) => child.kill().unwrap(),
    }
    let status = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        status.signal(),
        Some(9),
        "the child died of SIGKILL: {status}"
    );

    // "Restart": a new process opens the same file.
    let restarted = Inbox::new(sqlite(&db));
    assert_eq!(
        restarted.store().get(&victim).await.unwrap().unwrap().state,
        State::Claimed,
        "the claim was committed before the tool was invoked"
    );
    let unknown = restarted.store().recover().await.unwrap();
    assert_eq!(unknown, vec![victim.clone()]);
    let after = restarted.store().list(None).await.unwrap();
    for (b, a) in before.iter().zip(&after) {
        if a.id() == victim {
            assert_eq!(
                a.state,
                State::Unknown,
                "R26: claimed when the process died → unknown"
            );
            assert_eq!(a.call, b.call);
            assert!(a.result.is_none());
        } else {
            assert_eq!(a, b, "R26: nothing else changed");
        }
    }
    assert_eq!(before.len(), after.len());

    // Never sent again automatically, nor by hand.
    let tool2 = Tool::default();
    let s2 = stack(&handle, &restarted, &tool2);
    match restarted.resume(&victim, s2.clone()).await {
        Err(ResumeError::NotApproved {
            state: State::Unknown,
            ..
        }) => {}
        other => panic!("an unknown call must not be resent: {other:?}"),
    }
    assert_eq!(tool2.runs.load(Ordering::SeqCst), 0);
    assert_eq!(
        marker_lines(&marker),
        vec![String::from(r#"invoked {"order":"kill-me"}"#)],
        "R26: the tool was invoked at most once"
    );
    // The rest of the inbox still works.
    let r = restarted.resume(&waiting, s2.clone()).await.unwrap();
    assert_eq!(r.recorded, Some(State::Done));
    assert_eq!(
        restarted
            .store()
            .get(&pending)
            .await
            .unwrap()
            .unwrap()
            .state,
        State::Pending
    );
}

fn refusal(r: &ToolResponse) -> &toolgate_core::Refusal {
    r.refusal()
        .unwrap_or_else(|| panic!("expected a refusal, got {r:?}"))
}

#[tokio::test]
async fn r26_a_corrupt_inbox_file_is_a_clear_error_calls_are_refused_and_nothing_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("inbox.db");
    let handle = GovernanceHandle::new(governance());
    let tool = Tool::default();
    let inbox = Inbox::new(sqlite(&db));
    let s = stack(&handle, &inbox, &tool);
    let id = held(
        &s,
        ToolCall::new(support(), "refund", json!({"order": "kept"})),
    )
    .await;
    let kept = inbox.store().get(&id).await.unwrap().unwrap();
    drop((s, inbox)); // the last connection closes: the WAL is checkpointed into the file
    let original = std::fs::read(&db).unwrap();

    // Garbage over the first page (the header and the schema).
    let mut damaged = original.clone();
    for (i, b) in damaged.iter_mut().take(4096).enumerate() {
        *b = (i as u8).wrapping_mul(31).wrapping_add(7);
    }
    std::fs::write(&db, &damaged).unwrap();

    // Opening says so clearly, naming the file, and leaves it as it is.
    let e = SqliteInbox::open(&db, SqliteOptions::default()).unwrap_err();
    assert_eq!(e.kind(), InboxErrorKind::Corrupt, "{e}");
    assert!(e.to_string().contains(&db.display().to_string()), "{e}");
    assert!(e.to_string().contains("not a database"), "{e}");
    assert_eq!(
        std::fs::read(&db).unwrap(),
        damaged,
        "the file was not changed"
    );

    // A service started on it anyway (lazily opened) refuses asked calls, fail closed …
    let lazy = Inbox::new(SqliteInbox::open_lazy(&db, SqliteOptions::default()));
    let s = stack(&handle, &lazy, &tool);
    let r = send(
        &s,
        ToolCall::new(support(), "refund", json!({"order": "new"})),
    )
    .await;
    let refusal = refusal(&r);
    assert_eq!(refusal.code, RefusalCode::NoApprovalChannel);
    assert!(refusal.reasons[0].contains("not a database"), "{refusal:?}");
    // … and answers, and resumes, refuse too …
    let e = lazy
        .store()
        .answer(&id, Answer::approve("k", "alice"))
        .await
        .unwrap_err();
    assert!(
        matches!(e, AnswerError::Store(ref s) if s.kind() == InboxErrorKind::Corrupt),
        "{e:?}"
    );
    assert!(matches!(
        lazy.resume(&id, s.clone()).await,
        Err(ResumeError::Store(_))
    ));
    // … while calls that ask nobody still run.
    let r = send(&s, ToolCall::new(support(), "lookup", json!({}))).await;
    assert!(matches!(r, ToolResponse::Completed(_)), "{r:?}");
    assert_eq!(tool.runs(), 1);
    assert_eq!(
        std::fs::read(&db).unwrap(),
        damaged,
        "nothing overwrote the file"
    );

    // Nothing lost: once the file is repaired (restored), the same handle picks it up and
    // the held call is there exactly as it was.
    std::fs::write(&db, &original).unwrap();
    let back = lazy.store().get(&id).await.unwrap().unwrap();
    assert_eq!(back, kept);
    let again = held(
        &s,
        ToolCall::new(support(), "refund", json!({"order": "new"})),
    )
    .await;
    assert_ne!(again, id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r26_a_locked_inbox_file_is_a_clear_error_calls_are_refused_and_nothing_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("inbox.db");
    let handle = GovernanceHandle::new(governance());
    let tool = Tool::default();
    let options = SqliteOptions::default().busy_timeout(Duration::from_millis(200));
    let inbox = Inbox::new(SqliteInbox::open(&db, options).unwrap());
    let s = stack(&handle, &inbox, &tool);
    let pending = held(&s, ToolCall::new(support(), "refund", json!({"order": 1}))).await;
    let approved = held(&s, ToolCall::new(support(), "refund", json!({"order": 2}))).await;
    inbox
        .store()
        .answer(&approved, Answer::approve("k", "alice"))
        .await
        .unwrap();
    let before = inbox.store().list(None).await.unwrap();

    // Another connection holds an exclusive lock.
    let other = rusqlite::Connection::open(&db).unwrap();
    other.execute_batch("BEGIN EXCLUSIVE").unwrap();

    let started = Instant::now();
    let r = send(&s, ToolCall::new(support(), "refund", json!({"order": 3}))).await;
    let refusal = refusal(&r);
    assert_eq!(refusal.code, RefusalCode::NoApprovalChannel);
    assert!(
        refusal.reasons[0].contains("is locked by another connection"),
        "{refusal:?}"
    );
    assert!(
        refusal.reasons[0].contains(&db.display().to_string()),
        "{refusal:?}"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "it waited the busy timeout"
    );
    let e = inbox
        .store()
        .answer(&pending, Answer::approve("k2", "bob"))
        .await
        .unwrap_err();
    assert!(
        matches!(e, AnswerError::Store(ref s) if s.kind() == InboxErrorKind::Busy),
        "{e:?}"
    );
    // The approved call cannot be claimed: refused, not sent, still approved.
    let resumed = inbox.resume(&approved, s.clone()).await.unwrap();
    assert_eq!(
        resumed.response.refusal().unwrap().code,
        RefusalCode::NoApprovalChannel
    );
    assert_eq!(resumed.recorded, None);
    assert_eq!(
        resumed.record_error.map(|e| e.kind()),
        Some(InboxErrorKind::Busy),
        "the resume says it could not write"
    );
    assert_eq!(tool.runs(), 0);

    other.execute_batch("ROLLBACK").unwrap();
    drop(other);

    // Nothing lost, nothing changed; everything works again.
    assert_eq!(inbox.store().list(None).await.unwrap(), before);
    let resumed = inbox.resume(&approved, s.clone()).await.unwrap();
    assert_eq!(resumed.recorded, Some(State::Done));
    assert_eq!(tool.runs(), 1);
    let _ = held(&s, ToolCall::new(support(), "refund", json!({"order": 3}))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r26_an_inbox_file_in_exclusive_locking_mode_is_refused_even_for_reads() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("inbox.db");
    let options = SqliteOptions::default().busy_timeout(Duration::from_millis(100));
    let inbox = Inbox::new(SqliteInbox::open(&db, options.clone()).unwrap());
    let handle = GovernanceHandle::new(governance());
    let tool = Tool::default();
    let s = stack(&handle, &inbox, &tool);
    let id = held(&s, ToolCall::new(support(), "refund", json!({}))).await;
    drop((s, inbox));

    let other = rusqlite::Connection::open(&db).unwrap();
    other
        .execute_batch("PRAGMA locking_mode = EXCLUSIVE; BEGIN EXCLUSIVE; COMMIT;")
        .unwrap();
    let e = SqliteInbox::open(&db, options.clone()).unwrap_err();
    assert_eq!(e.kind(), InboxErrorKind::Busy, "{e}");
    drop(other);
    let inbox = SqliteInbox::open(&db, options).unwrap();
    assert_eq!(inbox.get(&id).await.unwrap().unwrap().state, State::Pending);
}

/// Issue 12: inside a runtime an operation first runs on the calling thread with no busy
/// timeout; meeting another connection's lock, it must start again on the blocking pool and
/// wait (the configured busy timeout), not fail, and change nothing twice.
#[tokio::test(flavor = "current_thread")]
async fn r26_an_operation_that_meets_a_lock_waits_for_it_then_runs_once() {
    use toolgate_inbox_suite::held as new_held;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("inbox.db");
    let store = SqliteInbox::open(
        &db,
        SqliteOptions::default().busy_timeout(Duration::from_secs(60)),
    )
    .unwrap();
    let call = new_held(json!({"order": 7}), Duration::from_secs(3600));
    let id = call.interaction_id.clone();
    store.hold(call).await.unwrap();

    let other = rusqlite::Connection::open(&db).unwrap();
    other.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let (locked_tx, locked_rx) = std::sync::mpsc::channel::<()>();
    let releaser = std::thread::spawn(move || {
        // Released once the answer below has been started (and found the lock).
        locked_rx.recv().unwrap();
        std::thread::sleep(Duration::from_millis(200));
        other.execute_batch("ROLLBACK").unwrap();
    });
    let answering = store.answer(&id, Answer::approve("k", "alice"));
    locked_tx.send(()).unwrap();
    let receipt = answering.await.unwrap();
    releaser.join().unwrap();
    assert!(receipt.approved && !receipt.replayed, "{receipt:?}");
    let record = store.get(&id).await.unwrap().unwrap();
    assert_eq!(record.state, State::Approved);
    assert_eq!(record.approver.as_deref(), Some("alice"));
}
