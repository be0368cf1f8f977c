//! Memory per rule (issue 12): the heap bytes a compiled tenant policy of 10 … 20,000 rules
//! of the fixture's mix keeps alive, counted by a global allocator that tallies every
//! allocation, reallocation and free (`stats_alloc`), and the same for the whole snapshot
//! (`Governance`, catalog of 151 tools included), beside the parsed policy JSON (each rule
//! keeps its own JSON object for `to_json`). Prints one line per size; no timing. Then the
//! same per tool: a snapshot of 10,000 MCP tools (the exposure bench's catalog), and what
//! one agent's cached exposure of it adds.
//!
//! Run: `cargo bench -p toolgate-benches --bench memory`.

use std::alloc::System;
use std::hint::black_box;

use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use toolgate_benches::{SIZES, catalog, governance, policy, policy_json};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Net heap bytes still held after `make` returns, with its result kept alive.
fn retained<T>(make: impl FnOnce() -> T) -> (usize, T) {
    let region = Region::new(GLOBAL);
    let value = black_box(make());
    let c = region.change();
    let net = c.bytes_allocated as isize - c.bytes_deallocated as isize + c.bytes_reallocated;
    (usize::try_from(net).unwrap_or(0), value)
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is ignored: this prints every size.
    println!(
        "rules | Policy bytes | per rule | Governance bytes | per rule | policy JSON per rule"
    );
    for n in SIZES {
        // The policy's JSON as parsed (each compiled rule keeps its own object, `Rule::source`).
        let (j_bytes, j) = retained(|| policy_json(n));
        drop(j);
        let (p_bytes, p) = retained(|| policy(n));
        drop(p);
        let (g_bytes, g) = retained(|| governance(n));
        drop(g);
        println!(
            "{n} | {p_bytes} | {} | {g_bytes} | {} | {}",
            p_bytes / n,
            g_bytes / n,
            j_bytes / n
        );
    }
    let tools = 10_000;
    let (t_bytes, g) = retained(|| catalog(tools));
    let (e_bytes, e) = retained(|| g.exposure("support"));
    drop(e);
    drop(g);
    println!("tools | Governance bytes | per tool | cached exposure bytes | per tool");
    println!(
        "{tools} | {t_bytes} | {} | {e_bytes} | {}",
        t_bytes / tools,
        e_bytes / tools
    );
}
