//! `Glob` (R19, R2) against a regex oracle. The input is split at its first NUL byte into a
//! pattern and a name. The oracle escapes every character but `*` (which becomes `.*`),
//! anchors the whole, and matches case-sensitively with `(?s)` over both sides
//! ASCII-lower-cased: R2 folds ASCII only, so `É` and `é` stay different.
//!
//! The oracle runs over bytes with Unicode off (`(?s-u)`, each character escaped byte by
//! byte): a Unicode `.` compiles to a large UTF-8 automaton, which made this target ten times
//! slower. For valid UTF-8 on both sides the two agree: a literal's first byte is never a
//! continuation byte, so it can only match where a character starts.
#![no_main]

use std::fmt::Write as _;

use libfuzzer_sys::fuzz_target;
use regex::bytes::RegexBuilder;
use toolgate_engine::policy::Glob;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Some((pattern, name)) = text.split_once('\0') else {
        return;
    };
    // Short inputs find every disagreement a long one would, and keep the oracle's regex
    // compilation (the slow part under the sanitizer) cheap.
    if pattern.len() > 64 || name.len() > 256 {
        return;
    }
    let mut re = String::from(r"(?s-u)\A");
    for c in pattern.to_ascii_lowercase().chars() {
        if c == '*' {
            re.push_str(".*");
        } else {
            for b in c.encode_utf8(&mut [0; 4]).bytes() {
                let _ = write!(re, r"\x{b:02x}");
            }
        }
    }
    re.push_str(r"\z");
    let oracle = match RegexBuilder::new(&re)
        .unicode(false)
        .size_limit(64 << 20)
        .build()
    {
        Ok(oracle) => oracle,
        Err(e) => panic!("the oracle's own regex {re:?} does not compile: {e}"),
    };
    let want = oracle.is_match(name.to_ascii_lowercase().as_bytes());
    let got = Glob::new(pattern).matches(name);
    assert_eq!(got, want, "pattern {pattern:?} name {name:?}");
});
