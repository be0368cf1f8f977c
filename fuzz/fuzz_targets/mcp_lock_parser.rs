//! The definition lock (issue 23), `toolgate.lock`: arbitrary bytes as a lock file never make
//! `Lockfile::parse` panic; a lock that parses writes back (`to_json`) to text that parses to
//! the same lock, and every difference between it and itself is none.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolgate_mcp::lock::Lockfile;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(lock) = Lockfile::parse(text) else {
        return;
    };
    let again = Lockfile::parse(&lock.to_json())
        .unwrap_or_else(|e| panic!("a lock's own text does not parse: {e}"));
    assert_eq!(again, lock, "a lock does not read back from its own text");
    assert!(lock.diff(&again).is_empty(), "a lock differs from itself");
});
