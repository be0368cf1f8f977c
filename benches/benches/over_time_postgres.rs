//! The PostgreSQL quota counter's reservation per call (R44, issue 21): one send checked and
//! recorded atomically (`PostgresQuotaCounter::reserve`: one transaction, an advisory lock
//! per group, the window read, the send recorded and old sends pruned), for the 5 quota
//! groups the `over_time` bench's call falls in, on the server of `TOOLGATE_PG_URL`
//! (`eval "$(bash .ci/postgres.sh)"`; skipped, saying so, when it is unset). The figures in
//! benches/README.md are from a loopback server with fsync on.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use toolgate::AsyncQuotaCounter;
use toolgate_engine::quota::QuotaGroup;
use toolgate_inbox_postgres::{PostgresInbox, PostgresOptions, PostgresQuotaCounter};

const SCHEMA: &str = "tg_bench_quota";

fn over_time_postgres(c: &mut Criterion) {
    let Some(url) = std::env::var("TOOLGATE_PG_URL")
        .ok()
        .filter(|u| !u.trim().is_empty())
    else {
        eprintln!(
            "over_time_postgres skipped: TOOLGATE_PG_URL is unset (eval \"$(bash .ci/postgres.sh)\")"
        );
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let counter = rt.block_on(async {
        let inbox = PostgresInbox::connect(&url, PostgresOptions::default().schema(SCHEMA))
            .await
            .expect("the server answers");
        PostgresQuotaCounter::for_inbox(&inbox)
            .await
            .expect("the counter's table")
    });
    // The five groups of the `over_time` call (every tenth of 50 quotas covers it).
    let groups: Vec<QuotaGroup> = (0..5)
        .map(|i| QuotaGroup::new(format!("bench-{i}"), i, 1_000_000_000, 3_600_000))
        .collect();
    let one = &groups[..1];
    let mut g = c.benchmark_group("over_time_postgres");
    let mut t = 1_000u64;
    g.bench_function("reserve_postgres_1_group", |b| {
        b.iter(|| {
            t += 1;
            black_box(rt.block_on(counter.reserve(one, t)))
        })
    });
    g.bench_function("reserve_postgres_5_groups", |b| {
        b.iter(|| {
            t += 1;
            black_box(rt.block_on(counter.reserve(&groups, t)))
        })
    });
    g.finish();
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .expect("connects");
        tokio::spawn(conn);
        let _ = client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"))
            .await;
    });
}

criterion_group!(benches, over_time_postgres);
criterion_main!(benches);
