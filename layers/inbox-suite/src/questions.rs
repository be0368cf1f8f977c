//! The conformance case of open approval questions (R47, protocol 2026-07-28): every
//! backend's [`OpenQuestions::open_question`](toolgate_inbox::OpenQuestions::open_question) keeps a question for any handle on the inbox (a
//! replica, a restarted process), [`OpenQuestions::take_question`](toolgate_inbox::OpenQuestions::take_question) gives it out once, of racing
//! takes exactly one wins, and no more than the cap are kept. Run by [`super::run_all`].
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    reason = "a conformance suite: a broken promise of the store fails the case that found it"
)]

use std::time::Duration;

use super::{Fixture, new_id};
use toolgate_inbox::{OpenQuestion, Timestamp};

/// The cases of this file (also run by [`super::run_all`]).
pub async fn run_questions(fixture: &dyn Fixture) {
    eprintln!("suite: r47_an_open_question_is_taken_once_by_any_handle_and_the_cap_holds");
    r47_an_open_question_is_taken_once_by_any_handle_and_the_cap_holds(fixture).await;
}

fn question(expires_at: Timestamp) -> OpenQuestion {
    OpenQuestion {
        key: format!("sha256:{}", new_id()),
        body: String::from(r#"{"tool": "github__create_issue", "input": "{\"n\":1}"}"#),
        expires_at,
    }
}

pub async fn r47_an_open_question_is_taken_once_by_any_handle_and_the_cap_holds(
    fixture: &dyn Fixture,
) {
    let a = fixture.fresh().await;
    let b = fixture.reopen(&a).await;
    let now = Timestamp::now();
    let until = now.saturating_add(Duration::from_secs(600));
    let q = question(until);
    assert!(a.open_question(q.clone(), 10, now).await.unwrap(), "kept");
    // Another handle (a replica) takes it, once, body and expiry as opened.
    assert_eq!(b.take_question(&q.key).await.unwrap(), Some(q.clone()));
    assert_eq!(
        a.take_question(&q.key).await.unwrap(),
        None,
        "R47: a question is answered once"
    );
    assert_eq!(b.take_question("sha256:never").await.unwrap(), None);
    // A restarted process (a new handle) finds what was opened before it.
    let kept = question(until);
    a.open_question(kept.clone(), 10, now).await.unwrap();
    let c = fixture.reopen(&a).await;
    assert_eq!(c.take_question(&kept.key).await.unwrap(), Some(kept));
    // A question past its expiry is given back (the caller says so), or pruned by the next
    // open; either way never answerable as open.
    let past = question(now.saturating_add(Duration::from_millis(1)));
    a.open_question(past.clone(), 10, now).await.unwrap();
    let later = now.saturating_add(Duration::from_secs(1));
    let taken = b.take_question(&past.key).await.unwrap().unwrap();
    assert!(taken.is_past(later));
    let pruned = question(now.saturating_add(Duration::from_millis(1)));
    a.open_question(pruned.clone(), 10, now).await.unwrap();
    a.open_question(question(until), 10, later).await.unwrap();
    assert_eq!(
        b.take_question(&pruned.key).await.unwrap(),
        None,
        "pruned once past its expiry"
    );
    // The cap: no more than `at_most` open at once, across handles.
    let d = fixture.fresh().await;
    let e = fixture.reopen(&d).await;
    let mut opened = Vec::new();
    for i in 0..3 {
        let q = question(until);
        let store = if i % 2 == 0 { &d } else { &e };
        assert!(store.open_question(q.clone(), 3, now).await.unwrap());
        opened.push(q);
    }
    assert!(
        !e.open_question(question(until), 3, now).await.unwrap(),
        "past the cap nothing is kept"
    );
    d.take_question(&opened[0].key).await.unwrap().unwrap();
    assert!(e.open_question(question(until), 3, now).await.unwrap());
    // Racing takes of one question, on two handles: exactly one gets it.
    for _ in 0..5 {
        let q = question(until);
        d.open_question(q.clone(), 100, now).await.unwrap();
        let mut tasks = Vec::new();
        for i in 0..8 {
            let store = if i % 2 == 0 { d.clone() } else { e.clone() };
            let key = q.key.clone();
            tasks.push(tokio::spawn(async move {
                store.take_question(&key).await.unwrap().is_some()
            }));
        }
        let mut got = 0;
        for t in tasks {
            got += usize::from(t.await.unwrap());
        }
        assert_eq!(got, 1, "R47: of racing takes exactly one gets the question");
    }
}
