//! Raw JSON text as a call's input (R36, SPEC §8): `raw_depth` never panics on any text,
//! and when serde_json parses the text (default recursion limit) it equals the plain
//! recursive depth of the parsed value: each object or array adds one level, a scalar none.
//! `value_depth` must agree too, capped at its limit plus one.
//!
//! One exception, found by this target: text with a duplicate key (`{"a": {}, "a": 9}`)
//! parses to a value that keeps only the last one, so the value is shallower than the text.
//! `raw_depth` measures the text, which is the stricter bound (a nesting the value dropped
//! still counts), so there it may exceed the value's depth — never fall short of it — and
//! the text must be one the strict parser refuses for its duplicate key.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use toolgate_core::json::{parse_strict_json, raw_depth, value_depth};

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
    if raw != want {
        assert!(raw > want, "raw_depth is below the value's depth on {text:?}");
        assert!(
            parse_strict_json(text).is_err(),
            "raw_depth disagrees on {text:?}, which has no duplicate key"
        );
    }
    for limit in [0, 1, 2, 64] {
        assert_eq!(
            value_depth(&value, limit),
            want.min(limit + 1),
            "value_depth({limit}) on {text:?}"
        );
    }
});
