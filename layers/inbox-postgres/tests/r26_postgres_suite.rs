//! The shared backend suite (R22, R26, R35) against PostgreSQL: every case on a fresh
//! schema of the server named by `TOOLGATE_PG_URL`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;

use common::PgFixture;
use toolgate_inbox_postgres::PostgresOptions;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn r26_r35_r22_postgres_passes_the_shared_suite() {
    let url = require_pg!();
    let fixture = PgFixture::new(url, PostgresOptions::default().instance("suite"));
    toolgate_inbox_suite::run_all(&fixture).await;
    fixture.cleanup().await;
}

#[tokio::test(flavor = "current_thread")]
async fn r26_postgres_passes_the_shared_suite_on_a_single_threaded_runtime_with_one_connection() {
    let url = require_pg!();
    // One pooled connection: racing answers and claims queue for it, and still have exactly
    // one winner.
    let fixture = PgFixture::new(
        url,
        PostgresOptions::default().instance("suite-1").pool_size(1),
    );
    toolgate_inbox_suite::run_all(&fixture).await;
    fixture.cleanup().await;
}
