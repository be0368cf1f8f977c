//! The conformance case of the replay guard (approval-page.md, "Answering from Slack"):
//! every backend's [`Nonces::take_nonce`](toolgate_inbox::Nonces::take_nonce) takes a nonce once across handles on one
//! inbox (replicas, a restarted process) until its window ends, and of racing takes exactly
//! one wins. Run by [`super::run_all`].
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
use toolgate_inbox::Timestamp;

/// The cases of this file (also run by [`super::run_all`]).
pub async fn run_nonce(fixture: &dyn Fixture) {
    eprintln!("suite: issue24_a_nonce_is_taken_once_across_handles_until_its_window_ends");
    issue24_a_nonce_is_taken_once_across_handles_until_its_window_ends(fixture).await;
}

pub async fn issue24_a_nonce_is_taken_once_across_handles_until_its_window_ends(
    fixture: &dyn Fixture,
) {
    let a = fixture.fresh().await;
    let b = fixture.reopen(&a).await;
    let now = Timestamp::now();
    let until = now.saturating_add(Duration::from_secs(600));
    let nonce = format!("slack:v0={}", new_id());
    assert!(
        a.take_nonce(&nonce, until, now).await.unwrap(),
        "the first take"
    );
    assert!(
        !b.take_nonce(&nonce, until, now).await.unwrap(),
        "another handle on the same inbox refuses the replay"
    );
    assert!(!a.take_nonce(&nonce, until, now).await.unwrap());
    // A restarted process (a new handle) still refuses it within the window.
    let c = fixture.reopen(&a).await;
    let later = now.saturating_add(Duration::from_secs(300));
    assert!(!c.take_nonce(&nonce, until, later).await.unwrap());
    // Another nonce is its own.
    let other = format!("slack:v0={}", new_id());
    assert!(b.take_nonce(&other, until, now).await.unwrap());
    // Past its window it is pruned, and taken anew (the signature check refuses such an old
    // request before it gets here; the guard need keep nothing longer).
    let after = until.saturating_add(Duration::from_secs(1));
    let next = after.saturating_add(Duration::from_secs(600));
    assert!(c.take_nonce(&nonce, next, after).await.unwrap());
    assert!(!a.take_nonce(&nonce, next, after).await.unwrap());
    // Racing takes of one nonce, on two handles: exactly one wins.
    for _ in 0..5 {
        let n = format!("slack:v0={}", new_id());
        let mut tasks = Vec::new();
        for i in 0..8 {
            let store = if i % 2 == 0 { a.clone() } else { b.clone() };
            let n = n.clone();
            tasks.push(tokio::spawn(async move {
                store.take_nonce(&n, until, now).await.unwrap()
            }));
        }
        let mut won = 0;
        for t in tasks {
            if t.await.unwrap() {
                won += 1;
            }
        }
        assert_eq!(won, 1, "exactly one take of a nonce wins");
    }
}
