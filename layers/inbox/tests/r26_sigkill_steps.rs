//! R26: a process killed with SIGKILL at each step of a resume — before the claim, after
//! the claim, while the tool runs, after the tool ran, after the result was written — and
//! restarted: the call is sent at most once and ends `done`, `failed` or `unknown` (or, when
//! nothing was claimed yet, is still `approved` and is sent once by the next resume); it is
//! never sent again automatically. Each step is killed on both paths a resumed call can
//! take at the gate (R38): its fresh decision still asks, or it now runs without asking.
//!
//! The child process is this test binary run again with `TOOLGATE_INBOX_STEP_CHILD` set; it
//! resumes one held call through a store that stops for good at the named step (after
//! writing `at STEP` to a file the parent watches), and the parent kills it there.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::*;
use serde_json::json;
use toolgate::GovernanceHandle;
use toolgate_engine::policy::Policy;
use toolgate_inbox::{
    Answer, AnswerError, AnswerReceipt, BoxFuture, Claim, ClaimError, Claimed, CompleteError,
    Completion, HeldRecord, Inbox, InboxError, NewHeldCall, PolicySaveError, ResumeError,
    SqliteInbox, SqliteOptions, State, StoredPolicy, Timestamp,
};
use toolgate_inbox::{HeldCalls, Nonces, OpenQuestions, StoredGrants, StoredPolicies};

const CHILD_ENV: &str = "TOOLGATE_INBOX_STEP_CHILD";
const CHILD_TEST: &str = "sigkill_step_child";

/// Where the child stops.
const STEPS: [&str; 5] = [
    "before_claim",
    "after_claim",
    "in_tool",
    "after_tool",
    "after_result",
];

/// A SQLite inbox that stops for good at one step of a resume, saying so in `steps`.
#[derive(Debug)]
struct StopAt {
    inner: SqliteInbox,
    step: String,
    steps: PathBuf,
}

impl StopAt {
    async fn stop_if(&self, step: &str) {
        if self.step == step {
            append_line(&self.steps, &format!("at {step}"));
            std::future::pending::<()>().await;
        }
    }
}

impl HeldCalls for StopAt {
    fn hold(&self, call: NewHeldCall) -> BoxFuture<'_, Result<(), InboxError>> {
        self.inner.hold(call)
    }

    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<HeldRecord>, InboxError>> {
        self.inner.get(id)
    }

    fn list(&self, state: Option<State>) -> BoxFuture<'_, Result<Vec<HeldRecord>, InboxError>> {
        self.inner.list(state)
    }

    fn session_calls<'a>(
        &'a self,
        session: &'a str,
        turn: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<HeldRecord>, InboxError>> {
        self.inner.session_calls(session, turn)
    }

    fn cancel_turn<'a>(
        &'a self,
        session: &'a str,
        turn: &'a str,
    ) -> BoxFuture<'a, Result<Vec<String>, InboxError>> {
        self.inner.cancel_turn(session, turn)
    }

    fn answer<'a>(
        &'a self,
        id: &'a str,
        answer: Answer,
    ) -> BoxFuture<'a, Result<AnswerReceipt, AnswerError>> {
        self.inner.answer(id, answer)
    }

    fn cancel<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), AnswerError>> {
        self.inner.cancel(id)
    }

    fn expire_due(&self, now: Timestamp) -> BoxFuture<'_, Result<Vec<String>, InboxError>> {
        self.inner.expire_due(now)
    }

    fn claim<'a>(
        &'a self,
        id: &'a str,
        claim: Claim,
    ) -> BoxFuture<'a, Result<Claimed, ClaimError>> {
        Box::pin(async move {
            self.stop_if("before_claim").await;
            let won = self.inner.claim(id, claim).await;
            self.stop_if("after_claim").await;
            won
        })
    }

    fn complete<'a>(
        &'a self,
        id: &'a str,
        completion: Completion,
    ) -> BoxFuture<'a, Result<State, CompleteError>> {
        Box::pin(async move {
            self.stop_if("after_tool").await;
            let recorded = self.inner.complete(id, completion).await;
            self.stop_if("after_result").await;
            recorded
        })
    }

    fn recover(&self) -> BoxFuture<'_, Result<Vec<String>, InboxError>> {
        self.inner.recover()
    }
}

impl StoredPolicies for StopAt {
    fn get_policy(&self) -> BoxFuture<'_, Result<Option<StoredPolicy>, InboxError>> {
        self.inner.get_policy()
    }

    fn put_policy<'a>(
        &'a self,
        policy: &'a Policy,
    ) -> BoxFuture<'a, Result<StoredPolicy, InboxError>> {
        self.inner.put_policy(policy)
    }

    fn put_policy_if_unchanged<'a>(
        &'a self,
        expected_updated_at: Option<&'a str>,
        policy: &'a Policy,
    ) -> BoxFuture<'a, Result<StoredPolicy, PolicySaveError>> {
        self.inner
            .put_policy_if_unchanged(expected_updated_at, policy)
    }
}

/// Not a test on its own: the child process of `r26_a_resume_killed_at_each_step_…`.
/// Without its environment variable it returns at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_step_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let parts: Vec<&str> = spec.split('\n').collect();
    let (db, steps, marker, id, step, relaxed) = (
        PathBuf::from(parts[0]),
        PathBuf::from(parts[1]),
        PathBuf::from(parts[2]),
        parts[3],
        parts[4],
        parts[5] == "runs",
    );
    let handle = GovernanceHandle::new(Relaxed::Policy.governance(relaxed));
    let store = StopAt {
        inner: SqliteInbox::open(&db, SqliteOptions::default()).unwrap(),
        step: step.to_owned(),
        steps,
    };
    let inbox = Inbox::new(store);
    let s = file_stack(&handle, &inbox, marker, step == "in_tool");
    let _ = inbox.resume(id, s).await;
    panic!("the child was not stopped at `{step}`");
}

fn invocations(marker: &Path) -> usize {
    lines(marker)
        .iter()
        .filter(|l| l.starts_with("invoked "))
        .count()
}

/// Holds and approves a call, kills a resume of it at `step`, restarts, and checks.
async fn killed_at(step: &str, path: &str) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("inbox.db");
    let steps = dir.path().join("steps.txt");
    let marker = dir.path().join("invocations.txt");
    let v = Relaxed::Policy;
    let handle = GovernanceHandle::new(v.governance(false));
    let inbox = Inbox::new(sqlite(&db));
    let tool = Tool::default();
    let s = stack(&handle, &inbox, &tool);
    let input = json!({"order": format!("{step}-{path}")});
    let id = held(&s, v.call(input.clone())).await;
    inbox
        .store()
        .answer(&id, Answer::approve("k", "alice"))
        .await
        .unwrap();
    drop((s, inbox));

    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([CHILD_TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(
            CHILD_ENV,
            format!(
                "{}\n{}\n{}\n{id}\n{step}\n{path}",
                db.display(),
                steps.display(),
                marker.display()
            ),
        )
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    if step == "in_tool" {
        wait_for_line(&marker, &format!("invoked {input}"), &mut child);
    } else {
        wait_for_line(&steps, &format!("at {step}"), &mut child);
    }
    sigkill(&mut child);
    let sent_before_restart = invocations(&marker);
    let expected_sent = usize::from(!matches!(step, "before_claim" | "after_claim"));
    assert_eq!(
        sent_before_restart, expected_sent,
        "{step}/{path}: the tool ran {sent_before_restart} times before the kill"
    );

    // Restart: a new process opens the same file and recovers.
    let restarted = Inbox::new(sqlite(&db));
    let recovered = restarted.store().recover().await.unwrap();
    let rec = restarted.store().get(&id).await.unwrap().unwrap();
    let what = format!("{step}/{path}: state `{}`", rec.state);
    match step {
        "before_claim" => {
            assert!(recovered.is_empty(), "{what}");
            assert_eq!(rec.state, State::Approved, "nothing was claimed: {what}");
        }
        "after_claim" | "in_tool" | "after_tool" => {
            assert_eq!(recovered, vec![id.clone()], "{what}");
            assert_eq!(
                rec.state,
                State::Unknown,
                "R26: claimed when the process died → unknown: {what}"
            );
            assert!(rec.result.is_none(), "{what}");
        }
        "after_result" => {
            assert!(recovered.is_empty(), "{what}");
            assert_eq!(rec.state, State::Done, "{what}");
            assert_eq!(rec.result.as_ref().unwrap()["outcome"], "completed");
        }
        other => panic!("no step `{other}`"),
    }
    assert!(
        matches!(
            rec.state,
            State::Approved | State::Done | State::Failed | State::Unknown
        ),
        "{what}"
    );

    // Restarting sent nothing: no call goes out without someone resuming it.
    assert_eq!(invocations(&marker), sent_before_restart, "{what}");
    assert!(restarted.store().recover().await.unwrap().is_empty());

    // A resume by hand after the restart: only a call nothing had claimed is sent (once).
    let s2 = file_stack(
        &GovernanceHandle::new(v.governance(path == "runs")),
        &restarted,
        marker.clone(),
        false,
    );
    let again = restarted.resume(&id, s2.clone()).await;
    if step == "before_claim" {
        let r = again.unwrap();
        assert_eq!(r.recorded, Some(State::Done), "{what}");
    } else {
        match again {
            Err(ResumeError::NotApproved { .. }) => {}
            other => panic!("{what}: must not be sent again: {other:?}"),
        }
    }
    match restarted.resume(&id, s2).await {
        Err(ResumeError::NotApproved { .. }) => {}
        other => panic!("{what}: never sent twice: {other:?}"),
    }
    assert!(
        invocations(&marker) <= 1,
        "{what}: R26: the call was sent at most once: {:?}",
        lines(&marker)
    );
    let end = restarted.store().get(&id).await.unwrap().unwrap().state;
    assert!(
        matches!(end, State::Done | State::Failed | State::Unknown),
        "{step}/{path}: ends `{end}`"
    );
}

async fn every_step(path: &str) {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    for step in STEPS {
        killed_at(step, path).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r26_a_resume_killed_at_each_step_is_sent_at_most_once_and_never_again_automatically() {
    every_step("asks").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r38_a_resume_that_now_runs_killed_at_each_step_is_sent_at_most_once_and_never_again_automatically()
 {
    every_step("runs").await;
}

// The rest of the store: the traits' defaults (this wrapper is about held calls).
impl OpenQuestions for StopAt {}
impl Nonces for StopAt {}
impl StoredGrants for StopAt {}
