//! Lower-case hex and unguessable ids: one writer of hex and one maker of random ids for every
//! crate (interaction ids, claims, grant ids, session and CSRF tokens, hashes as text).

/// Appends `bytes` to `out` as lower-case hex, two digits a byte.
///
/// ```
/// let mut s = String::from("sha256:");
/// toolgate_core::id::push_hex(&mut s, &[0x00, 0xab, 0x7f]);
/// assert_eq!(s, "sha256:00ab7f");
/// ```
pub fn push_hex(out: &mut String, bytes: &[u8]) {
    out.reserve(bytes.len() * 2);
    for &b in bytes {
        for nibble in [b >> 4, b & 0xf] {
            out.push(char::from_digit(u32::from(nibble), 16).unwrap_or('0'));
        }
    }
}

/// `bytes` as lower-case hex.
///
/// ```
/// assert_eq!(toolgate_core::id::hex(b"\x01\xff"), "01ff");
/// ```
pub fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    push_hex(&mut out, bytes);
    out
}

/// `bytes` random bytes from the operating system's generator, as hex; `None` when it gives
/// none (callers fail closed: no id, no token).
///
/// ```
/// let t = toolgate_core::id::random_hex(32).unwrap();
/// assert_eq!(t.len(), 64);
/// assert_ne!(t, toolgate_core::id::random_hex(32).unwrap());
/// ```
pub fn random_hex(bytes: usize) -> Option<String> {
    let mut buf = vec![0_u8; bytes];
    getrandom::fill(&mut buf).ok()?;
    Some(hex(&buf))
}

/// A fresh unguessable id: `prefix` and 128 random bits in hex (`ia_…`, `claim_…`, `gr_…`);
/// `None` when the operating system gives no randomness.
///
/// ```
/// let id = toolgate_core::id::random_id("ia_").unwrap();
/// assert!(id.starts_with("ia_") && id.len() == 3 + 32);
/// ```
pub fn random_id(prefix: &str) -> Option<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).ok()?;
    let mut s = String::with_capacity(prefix.len() + 32);
    s.push_str(prefix);
    push_hex(&mut s, &bytes);
    Some(s)
}
