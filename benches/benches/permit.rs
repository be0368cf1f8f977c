//! What binding a permit to a call's input costs (R38): the RFC 8785 + SHA-256 hash the
//! gate computes for every call it sends, against keeping the input and comparing it.
//!
//! `cargo bench -p toolgate-benches --bench permit`

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use toolgate_benches::call_input;
use toolgate_engine::canon;

fn bench(c: &mut Criterion) {
    let input = call_input();
    let mut group = c.benchmark_group("permit_binding");
    group.bench_function("canonical_sha256_input_hash", |b| {
        b.iter(|| black_box(canon::input_hash(black_box(&input))));
    });
    group.bench_function("clone_and_compare_input", |b| {
        b.iter(|| {
            let kept = black_box(&input).clone();
            black_box(kept == *black_box(&input))
        });
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
