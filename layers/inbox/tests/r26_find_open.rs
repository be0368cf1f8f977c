//! `HeldCalls::find_open` (R26, R38) beyond the shared suite: the provided, scanning method
//! passes the same cases as the backends' indexed ones, and a SQLite inbox made before the
//! index of open calls gains it when opened.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::SqliteFixture;
use serde_json::json;
use toolgate_engine::policy::Policy;
use toolgate_inbox::{
    Answer, AnswerError, AnswerReceipt, BoxFuture, Claim, ClaimError, Claimed, CompleteError,
    Completion, HeldRecord, InboxError, InboxStore, NewHeldCall, PolicySaveError, SqliteInbox,
    SqliteOptions, State, StoredPolicy, Timestamp,
};
use toolgate_inbox::{HeldCalls, Nonces, OpenQuestions, StoredGrants, StoredPolicies};
use toolgate_inbox_suite::Fixture;

/// A store that keeps the trait's provided `find_open` (it overrides everything else, by
/// forwarding to a SQLite inbox) and counts the listings that method makes.
#[derive(Debug)]
struct Scanning {
    inner: Arc<dyn InboxStore>,
    lists: Arc<AtomicUsize>,
}

impl HeldCalls for Scanning {
    fn hold(&self, call: NewHeldCall) -> BoxFuture<'_, Result<(), InboxError>> {
        self.inner.hold(call)
    }

    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<HeldRecord>, InboxError>> {
        self.inner.get(id)
    }

    fn list(&self, state: Option<State>) -> BoxFuture<'_, Result<Vec<HeldRecord>, InboxError>> {
        self.lists.fetch_add(1, Ordering::SeqCst);
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
        self.inner.claim(id, claim)
    }

    fn complete<'a>(
        &'a self,
        id: &'a str,
        completion: Completion,
    ) -> BoxFuture<'a, Result<State, CompleteError>> {
        self.inner.complete(id, completion)
    }

    fn recover(&self) -> BoxFuture<'_, Result<Vec<String>, InboxError>> {
        self.inner.recover()
    }
}

impl StoredPolicies for Scanning {
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

/// Fresh SQLite inboxes behind [`Scanning`]; the `find_open` cases use nothing else.
struct ScanningFixture {
    sqlite: SqliteFixture,
    lists: Arc<AtomicUsize>,
}

impl Fixture for ScanningFixture {
    fn fresh(&self) -> BoxFuture<'_, Arc<dyn InboxStore>> {
        Box::pin(async move {
            let inner = self.sqlite.fresh().await;
            let store: Arc<dyn InboxStore> = Arc::new(Scanning {
                inner,
                lists: Arc::clone(&self.lists),
            });
            store
        })
    }
    fn reopen<'a>(&'a self, _: &'a Arc<dyn InboxStore>) -> BoxFuture<'a, Arc<dyn InboxStore>> {
        panic!("the find_open cases do not reopen a store")
    }
    fn corrupt_policy<'a>(&'a self, _: &'a Arc<dyn InboxStore>) -> BoxFuture<'a, ()> {
        panic!("the find_open cases do not touch the policy")
    }
    fn write_policy_body<'a>(
        &'a self,
        _: &'a Arc<dyn InboxStore>,
        _: &'a str,
    ) -> BoxFuture<'a, ()> {
        panic!("the find_open cases do not touch the policy")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r26_r38_the_provided_scanning_find_open_passes_the_suites_cases() {
    let fixture = ScanningFixture {
        sqlite: SqliteFixture::new(SqliteOptions::default()),
        lists: Arc::default(),
    };
    toolgate_inbox_suite::run_find_open(&fixture).await;
    assert!(
        fixture.lists.load(Ordering::SeqCst) > 0,
        "the provided method ran (it lists), not SQLite's own"
    );
}

#[tokio::test]
async fn r26_a_version_2_file_without_the_index_of_open_calls_gains_it_when_opened() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.db");
    let c = toolgate_inbox_suite::held(json!({"n": 1}), std::time::Duration::from_secs(60));
    {
        let store = SqliteInbox::open(&path, SqliteOptions::default()).unwrap();
        store.hold(c.clone()).await.unwrap();
    }
    let indexes = || {
        rusqlite::Connection::open(&path)
            .unwrap()
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'index' \
                 AND name = 'held_calls_open'",
                [],
                |r| r.get::<_, i64>(0),
            )
            .unwrap()
    };
    assert_eq!(indexes(), 1, "a new file has it");
    // As an older program of the same schema version left the file.
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("DROP INDEX held_calls_open")
        .unwrap();
    assert_eq!(indexes(), 0);
    let store = SqliteInbox::open(&path, SqliteOptions::default()).unwrap();
    assert_eq!(indexes(), 1, "opening adds it");
    let version: i64 = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 2, "an index is not a schema version");
    let found = store
        .find_open(&c.agent, &c.tool, &c.input_hash)
        .await
        .unwrap()
        .expect("the call held before");
    assert_eq!(found.call, c);
    drop(store);
    // Opening again is a no-op.
    drop(SqliteInbox::open(&path, SqliteOptions::default()).unwrap());
    assert_eq!(indexes(), 1);
}

// The rest of the store: the traits' defaults (this wrapper is about held calls).
impl OpenQuestions for Scanning {}
impl Nonces for Scanning {}
impl StoredGrants for Scanning {}
