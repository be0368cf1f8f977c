//! The shared backend suite (R22, R26, R35) against embedded SQLite, with `synchronous`
//! `NORMAL` (the default) and `FULL`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;

use common::SqliteFixture;
use toolgate_inbox::{SqliteOptions, Synchronous};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn r26_r35_r22_sqlite_passes_the_shared_suite() {
    let fixture = SqliteFixture::new(SqliteOptions::default());
    toolgate_inbox_suite::run_all(&fixture).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn r26_r35_r22_sqlite_with_synchronous_full_passes_the_shared_suite() {
    let fixture = SqliteFixture::new(SqliteOptions::default().synchronous(Synchronous::Full));
    toolgate_inbox_suite::run_all(&fixture).await;
}

#[tokio::test(flavor = "current_thread")]
async fn r26_sqlite_passes_the_shared_suite_on_a_single_threaded_runtime() {
    let fixture = SqliteFixture::new(SqliteOptions::default());
    toolgate_inbox_suite::run_all(&fixture).await;
}
