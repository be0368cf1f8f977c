//! The in-process binding of a call to what a toolgate layer decided about it (R14, R38): a
//! keyed 128-bit hash (SipHash-1-3-128 under a key drawn at random once per process) of the
//! call's input, walked as a JSON tree.
//!
//! # Why a keyed hash is enough here, and SHA-256 stays elsewhere
//!
//! What this binding guards against is a layer *between* the approval gate and the tool that
//! rewrites the call (a mis-assembled stack, a buggy or hostile middleware rewriting the
//! input, the tool or the agent after the gate passed it), and a pin or permit carried over to
//! a call it was not made for. Such a layer sees the call and the permit, never the key: the
//! key is drawn from the operating system once per process, lives only in this process's
//! memory, is never written, logged, sent or shown, and no hash made with it leaves the
//! process (permits and pins are extension values of one in-process call). The adversary
//! therefore cannot compute a single hash of its own: finding a rewritten input with the
//! same binding means guessing a 128-bit value of a pseudo-random function under an unknown
//! key, online, one try per call. SipHash is designed for exactly that use (a PRF for short
//! inputs under a secret key, against an adversary who chooses inputs but cannot see the key)
//! and is the hash behind Rust's own `HashMap` for this reason; its 1-3 variant is the one
//! `std` uses. An offline collision search, the attack SHA-256's collision resistance answers,
//! needs the key, and code that could read the key could as well call the tool directly (a
//! permit was never a token against code in the same process, see [`crate::permit`]).
//!
//! Where a hash *does* leave the process — the inbox's and audit records' input hashes, the
//! R35 hashes shown to approvers and compared when they answer — it must be checkable by
//! others and stable across processes, so those stay SHA-256 of RFC 8785
//! ([`toolgate_engine::canon::input_hash`]), untouched by this module.
//!
//! # What is hashed
//!
//! The input is walked once, with no serialisation and no allocation, in the order
//! `serde_json` iterates it (the order it would be written in). Every value is written with
//! a one-byte tag of its kind, strings and containers with their length first (LEB128), numbers as
//! their exact representation (an unsigned integer, a negative integer and a float are tagged
//! apart, a float by its bits): the encoding is prefix-free, so two different values
//! (`Value`'s `!=`, and more: `1` and `1.0`, `0.0` and `-0.0`) never give the same bytes, and
//! only a collision of the keyed hash could give them the same binding.

use std::hash::Hasher as _;
use std::sync::OnceLock;

use serde_json::Value;
use siphasher::sip128::{Hasher128, SipHasher13};

/// A keyed 128-bit hash binding a call's input to a decision,
/// comparable only within this process (see the module's notes).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Binding(u128);

impl std::fmt::Debug for Binding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the value: nothing of it need be shown, even in a debug print.
        f.write_str("Binding(..)")
    }
}

impl Binding {
    /// `siphash13-128:<hex>`, for [`crate::permit::Permit::input_hash`].
    pub(crate) fn to_text(self) -> String {
        let mut out = String::with_capacity(14 + 32);
        out.push_str("siphash13-128:");
        toolgate_core::id::push_hex(&mut out, &self.0.to_be_bytes());
        out
    }
}

/// The process's key: 128 random bits from the operating system, drawn once.
fn key() -> (u64, u64) {
    static KEY: OnceLock<(u64, u64)> = OnceLock::new();
    *KEY.get_or_init(|| {
        let mut bytes = [0u8; 16];
        if getrandom::fill(&mut bytes).is_err() {
            // No OS randomness: std's hash keys (themselves from the OS, or from the
            // process's own entropy where it has none) mixed in. Secret all the same.
            use std::hash::BuildHasher;
            let state = std::collections::hash_map::RandomState::new();
            let a = state.hash_one(0x746f_6f6c_6761_7465_u64);
            let b = state.hash_one(a);
            bytes[..8].copy_from_slice(&a.to_le_bytes());
            bytes[8..].copy_from_slice(&b.to_le_bytes());
        }
        let (lo, hi) = bytes.split_at(8);
        let word = |s: &[u8]| {
            let mut w = [0u8; 8];
            w.copy_from_slice(s);
            u64::from_le_bytes(w)
        };
        (word(lo), word(hi))
    })
}

/// The bytes to hash, gathered in a buffer on the stack and hashed a buffer at a time (the
/// hasher's per-write cost is paid once per 256 bytes, not per token).
struct Feed {
    h: SipHasher13,
    buf: [u8; FEED],
    len: usize,
}

const FEED: usize = 256;

impl Feed {
    fn new(domain: u8) -> Self {
        let (k0, k1) = key();
        let mut feed = Feed {
            h: SipHasher13::new_with_keys(k0, k1),
            buf: [0; FEED],
            len: 0,
        };
        // What is bound (the input; other kinds may follow) is the first byte.
        feed.put(&[domain]);
        feed
    }

    fn drain(&mut self) {
        self.h.write(self.buf.get(..self.len).unwrap_or_default());
        self.len = 0;
    }

    fn put(&mut self, bytes: &[u8]) {
        if self.len + bytes.len() > FEED {
            self.drain();
        }
        match self.buf.get_mut(self.len..self.len + bytes.len()) {
            Some(room) => {
                room.copy_from_slice(bytes);
                self.len += bytes.len();
            }
            // Longer than the buffer (drained above): hashed as it is.
            None => self.h.write(bytes),
        }
    }

    fn tag(&mut self, tag: u8) {
        self.put(&[tag]);
    }

    /// A tag, then a length in LEB128 (self-delimiting, so the encoding stays prefix-free).
    fn tag_len(&mut self, tag: u8, n: usize) {
        if n < 0x80 {
            // The common case, one write.
            self.put(&[tag, n as u8]);
            return;
        }
        let mut out = [0u8; 11];
        let mut n = n;
        let mut i = 1;
        if let Some(t) = out.first_mut() {
            *t = tag;
        }
        while let Some(b) = out.get_mut(i) {
            let low = (n & 0x7f) as u8;
            n >>= 7;
            i += 1;
            if n == 0 {
                *b = low;
                break;
            }
            *b = low | 0x80;
        }
        self.put(out.get(..i).unwrap_or_default());
    }

    /// A tag, then 8 bytes.
    fn word(&mut self, tag: u8, w: u64) {
        let b = w.to_le_bytes();
        self.put(&[tag, b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
    }

    /// A tag, the text's length, the text.
    fn text(&mut self, tag: u8, s: &str) {
        self.tag_len(tag, s.len());
        self.put(s.as_bytes());
    }

    fn finish(mut self) -> Binding {
        self.drain();
        Binding(self.h.finish128().as_u128())
    }
}

/// The binding of a call's input: equal for equal inputs, different (but for a collision of
/// the keyed hash) for any change, even one RFC 8785 would forgive.
pub(crate) fn input(value: &Value) -> Binding {
    let mut feed = Feed::new(b'I');
    walk(&mut feed, value);
    feed.finish()
}

fn walk(f: &mut Feed, value: &Value) {
    match value {
        Value::Null => f.tag(b'n'),
        Value::Bool(false) => f.tag(b'f'),
        Value::Bool(true) => f.tag(b't'),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                f.word(b'u', u);
            } else if let Some(i) = n.as_i64() {
                f.word(b'i', i as u64);
            } else if let Some(x) = n.as_f64() {
                f.word(b'd', x.to_bits());
            } else {
                // Not reached without serde_json's `arbitrary_precision`: the number as written.
                f.text(b'x', &n.to_string());
            }
        }
        Value::String(s) => {
            f.text(b's', s);
        }
        Value::Array(items) => {
            f.tag_len(b'a', items.len());
            for item in items {
                walk(f, item);
            }
        }
        Value::Object(map) => {
            f.tag_len(b'o', map.len());
            for (k, v) in map {
                f.text(b'k', k);
                walk(f, v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::input;

    fn leaf() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<u64>().prop_map(|n| json!(n)),
            any::<i64>().prop_map(|n| json!(n)),
            (-1e6f64..1e6).prop_map(|f| json!(f)),
            "[a-c]{0,4}".prop_map(Value::String),
        ]
    }

    fn value() -> impl Strategy<Value = Value> {
        leaf().prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-c]{0,3}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// R38: the binding tells apart every two inputs that differ (as values, or as
        /// written: `1` and `1.0`), and gives equal inputs equal bindings.
        #[test]
        fn r38_two_inputs_have_one_binding_only_when_equal(a in value(), b in value()) {
            // Equal as values and as written (`0.0` and `-0.0` are equal values).
            let same = a == b && serde_json::to_vec(&a).ok() == serde_json::to_vec(&b).ok();
            prop_assert_eq!(input(&a) == input(&b), same, "{} / {}", a, b);
            prop_assert_eq!(input(&a), input(&a.clone()));
        }
    }

    #[test]
    fn r38_the_binding_sees_changes_canonicalisation_forgives() {
        assert_ne!(input(&json!({"a": 1})), input(&json!({"a": 1.0})));
        assert_ne!(input(&json!({"a": 0.0})), input(&json!({"a": -0.0})));
        assert_ne!(input(&json!(["ab", "c"])), input(&json!(["a", "bc"])));
        assert_ne!(input(&json!({"ab": "c"})), input(&json!({"a": "bc"})));
        assert_ne!(input(&json!([[]])), input(&json!([[], []])));
        assert_ne!(input(&json!({})), input(&json!([])));
        assert_ne!(input(&json!(null)), input(&json!(false)));
    }

    /// Lengths past one LEB128 byte (128, 16,384) and strings longer than the buffer.
    #[test]
    fn r38_the_binding_sees_long_strings_and_containers() {
        for n in [
            127usize, 128, 129, 255, 256, 257, 300, 16_383, 16_384, 16_385,
        ] {
            let s = json!("x".repeat(n));
            assert_eq!(input(&s), input(&s.clone()), "{n}");
            assert_ne!(input(&s), input(&json!("x".repeat(n + 1))), "{n}");
            let mut longer = "x".repeat(n);
            longer.push('y');
            assert_ne!(
                input(&json!([longer, 1])),
                input(&json!(["x".repeat(n), 1])),
                "{n}"
            );
            let a: Vec<u64> = (0..n as u64).collect();
            let mut b = a.clone();
            b.push(0);
            assert_ne!(input(&json!(a)), input(&json!(b)), "{n}");
        }
    }
}
