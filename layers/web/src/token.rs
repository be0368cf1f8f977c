//! Random tokens and their constant-time comparison.

pub(crate) fn random_hex(bytes: usize) -> String {
    // No randomness: fail closed with a value nobody can present (tokens are compared to
    // it, and an empty token never matches).
    toolgate_core::id::random_hex(bytes).unwrap_or_default()
}

/// Equality that takes the same time wherever the strings differ (for equal lengths).
pub(crate) fn same(a: &str, b: &str) -> bool {
    if a.is_empty() || a.len() != b.len() {
        return false;
    }
    a.bytes()
        .zip(b.bytes())
        .fold(0_u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}
