//! The audit chain (R33), `toolgate audit verify FILE`: arbitrary bytes as a JSONL audit file
//! never make `verify_chain` panic, and a chain that `link` itself wrote from records the
//! fuzzer chose always verifies, with its record count.
//!
//! The second half reads the input as a JSON array of objects (anything else skips it); each
//! object is linked in turn, starting from the genesis link.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use toolgate_engine::chain::{GENESIS, link, verify_chain};

fuzz_target!(|data: &[u8]| {
    // Any bytes, valid UTF-8 or not, as a file.
    let _ = verify_chain(data);

    let Ok(Value::Array(items)) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let mut prev = GENESIS.to_owned();
    let mut lines = Vec::new();
    for (i, item) in items.into_iter().enumerate() {
        let Value::Object(record) = item else {
            return;
        };
        let Ok((line, hash)) = link(record, i as u64 + 1, &prev) else {
            return;
        };
        prev = hash;
        lines.push(line);
    }
    let file = lines.join("\n");
    match verify_chain(file.as_bytes()) {
        Ok(n) => assert_eq!(
            n,
            lines.len(),
            "verify counted {n} of {} records",
            lines.len()
        ),
        Err(e) => panic!("a chain written by `link` does not verify: {e}\n{file}"),
    }
});
