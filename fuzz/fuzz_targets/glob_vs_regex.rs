//! `Glob` (R19, R2) against a regex oracle. The input is split at its first NUL byte into a
//! pattern and a name. The oracle escapes every character but `*` (which becomes `.*`),
//! anchors the whole, and matches case-sensitively with `(?s)` over both sides
//! ASCII-lower-cased: R2 folds ASCII only, so `É` and `é` stay different.
#![no_main]

use libfuzzer_sys::fuzz_target;
use regex::RegexBuilder;
use toolgate_engine::policy::Glob;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Some((pattern, name)) = text.split_once('\0') else {
        return;
    };
    let mut re = String::from(r"(?s)\A");
    for c in pattern.to_ascii_lowercase().chars() {
        if c == '*' {
            re.push_str(".*");
        } else {
            re.push_str(&regex::escape(c.encode_utf8(&mut [0; 4])));
        }
    }
    re.push_str(r"\z");
    // A pattern too large for the oracle's compiled-size limit is skipped, not judged.
    let Ok(oracle) = RegexBuilder::new(&re).size_limit(64 << 20).build() else {
        return;
    };
    let want = oracle.is_match(&name.to_ascii_lowercase());
    let got = Glob::new(pattern).matches(name);
    assert_eq!(got, want, "pattern {pattern:?} name {name:?}");
});
