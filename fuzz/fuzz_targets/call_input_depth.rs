//! Raw JSON text as a call's input (R36, SPEC §8): `raw_depth` never panics on any text,
//! and when serde_json parses the text (default recursion limit) it equals the plain
//! recursive depth of the parsed value: each object or array adds one level, a scalar none.
//! `value_depth` must agree too, capped at its limit plus one.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use toolgate_engine::json::{raw_depth, value_depth};

fn depth(v: &Value) -> usize {
    match v {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let raw = raw_depth(text);
    let Ok(value) = serde_json::from_str::<Value>(text) else {
        return;
    };
    let want = depth(&value);
    assert_eq!(raw, want, "raw_depth disagrees on {text:?}");
    for limit in [0, 1, 2, 64] {
        assert_eq!(
            value_depth(&value, limit),
            want.min(limit + 1),
            "value_depth({limit}) on {text:?}"
        );
    }
});
