//! `toolgate policy simulate` over 100,000 recorded calls (R46, issue 21): the replay of an
//! audit log under the policy in force and a proposed one (`toolgate_engine::replay`, what
//! the CLI and the page's policy tab run), on audit records shaped as the audit layer writes
//! them (identities, decision, approval, hashes; about 800 bytes each, inputs recorded). Both
//! policies carry a quota, so the replay keeps a history of sends per policy. Target: ≤ 2 s.
//!
//! The log is chained as a chaining sink writes it (`toolgate_engine::chain::link`), so the
//! replay verifies it first, as it does any chained log; `replay_100000_unchained` replays the
//! same records without their chain (no verification: reading and deciding only).
//!
//! With `TOOLGATE_SIM_FIXTURE_DIR=DIR` it also writes the configuration, the proposed policy
//! and the audit log there, for timing `toolgate policy simulate` as a whole process.

use std::fmt::Write as _;
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use toolgate_engine::chain::{GENESIS, link};
use toolgate_engine::config::{Format, load_str};
use toolgate_engine::policy::{Limits, Policy};
use toolgate_engine::{PolicyState, replay};

/// The calls replayed.
pub const RECORDS: usize = 100_000;

const CONFIG: &str = r#"{
    "approval": {"channel": "inbox"},
    "tools": [{"kind": "http", "name": "lookup", "read_only": true},
              {"kind": "http", "name": "refund", "approval": "require_approval"},
              {"kind": "mcp", "server": "github", "name": "create_issue"},
              {"kind": "mcp", "server": "github", "name": "delete_repo"}],
    "agents": [{"name": "support", "allowed_tools": ["lookup", "refund", "github__create_issue"]},
               {"name": "ops", "allowed_tools": ["lookup", "github__*"]}],
    "policy": {"rules": [{"effect": "deny", "server": "github", "tool": "delete_*"},
                         {"effect": "ask", "tool": "refund", "when": {"amount": {"gt": 100}}}],
               "quotas": [{"tool": "lookup", "max": 50, "window_secs": 60, "per": ["agent"]}]}
}"#;

const PROPOSED: &str = r#"{"rules": [
    {"effect": "deny", "server": "github"},
    {"effect": "deny", "tool": "refund", "when": {"amount": {"gt": 400}}},
    {"effect": "ask", "tool": "lookup", "when": {"q": {"matches": "^secret"}}}
], "quotas": [{"tool": "lookup", "max": 20, "window_secs": 60, "per": ["agent"]}]}"#;

/// An audit log of `n` records, 60 ms apart, as the audit layer writes them: chained, each
/// line its record's canonical form.
pub fn audit_log(n: usize) -> String {
    let mut out = String::with_capacity(n * 1000);
    let mut prev = GENESIS.to_owned();
    for (i, line) in records(n).lines().enumerate() {
        let record: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(line).expect("a record");
        let (line, hash) = link(record, i as u64 + 1, &prev).expect("links");
        out.push_str(&line);
        out.push('\n');
        prev = hash;
    }
    out
}

/// The records of [`audit_log`] without their chain.
pub fn records(n: usize) -> String {
    let tools = [
        ("lookup", "http", "", "lookup"),
        ("refund", "http", "", "refund"),
        ("github__create_issue", "mcp", "github", "create_issue"),
        ("github__delete_repo", "mcp", "github", "delete_repo"),
    ];
    let mut out = String::with_capacity(n * 900);
    let start = 1_893_456_000_000u64; // 2030-01-01T00:00:00Z
    for i in 0..n {
        let (tool, kind, source, name) = tools[i % 7 % 4];
        let agent = if i % 3 == 0 { "ops" } else { "support" };
        let ms = start + 60 * i as u64;
        let time = rfc3339(ms);
        let input = match tool {
            "lookup" => format!(
                r#"{{"q":"{}order {i}"}}"#,
                if i % 11 == 0 { "secret " } else { "" }
            ),
            "refund" => format!(r#"{{"order":"A-{i}","amount":{}}}"#, (i * 37) % 700),
            _ => format!(r#"{{"title":"Issue {i}","body":"Crash on start, seen {i} times"}}"#),
        };
        let wait = if tool == "refund" {
            if i % 5 == 0 { "denied" } else { "approved" }
        } else {
            "not_asked"
        };
        let _ = writeln!(
            out,
            r#"{{"time":"{time}","call_id":"call-{i:08}","tool":"{tool}","identities":[{{"kind":"{kind}","source":"{source}","name":"{name}","network_declared":"none","network_effective":"none"}}],"agent":"{agent}","subagent":null,"input_hash":"sha256:{h3:064x}","input":{input},"decision":{{"outcome":"run","check":"passed","refusal":null,"rule":null,"matched_rules":[],"reasons":[],"asks":[],"retry_after_secs":null,"granted":null}},"approval":{{"wait":"{wait}","approver":"alice","interaction_id":null}},"outcome":"completed","duration_ms":0.412}}"#,
            h3 = i * 7,
        );
    }
    out
}

/// RFC 3339 with milliseconds, UTC, from Unix milliseconds (no date library in the bench).
fn rfc3339(ms: u64) -> String {
    let mut s = String::with_capacity(24);
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil(days as i64);
    let _ = write!(
        s,
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    );
    s
}

/// Days since 1970-01-01 to (year, month, day) (Howard Hinnant's algorithm).
fn civil(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn policy_simulate(c: &mut Criterion) {
    let current = load_str(CONFIG, Format::Json).expect("loads");
    let proposed = current
        .with_policy(PolicyState::readable(
            Policy::from_json_str(PROPOSED, &Limits::default()).expect("the proposed policy"),
        ))
        .expect("applies");
    let audit = audit_log(RECORDS);
    // The same files for timing the CLI as a whole process (benches/README.md).
    if let Ok(dir) = std::env::var("TOOLGATE_SIM_FIXTURE_DIR") {
        let dir = std::path::Path::new(&dir);
        std::fs::create_dir_all(dir).expect("the fixture directory");
        std::fs::write(dir.join("toolgate.json"), CONFIG).expect("writes");
        std::fs::write(dir.join("proposed.json"), PROPOSED).expect("writes");
        std::fs::write(dir.join("audit.jsonl"), &audit).expect("writes");
    }
    let report = replay::replay(&current, &proposed, &audit, None).expect("replays");
    assert_eq!(report.replayed, RECORDS);
    assert!(report.changed.len() > RECORDS / 4, "{}", report.sentence());
    eprintln!(
        "{} MB of audit log; {}",
        audit.len() / 1_000_000,
        report.sentence()
    );
    let mut g = c.benchmark_group("policy_simulate");
    g.sample_size(10);
    g.bench_function("replay_100000_recorded_calls", |b| {
        b.iter(|| {
            black_box(
                replay::replay(&current, &proposed, black_box(&audit), None).expect("replays"),
            )
        })
    });
    let unchained = records(RECORDS);
    g.bench_function("replay_100000_unchained", |b| {
        b.iter(|| {
            black_box(
                replay::replay(&current, &proposed, black_box(&unchained), None).expect("replays"),
            )
        })
    });
    g.finish();
}

criterion_group!(benches, policy_simulate);
criterion_main!(benches);
