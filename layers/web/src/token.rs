//! Random tokens and their constant-time comparison.

pub(crate) fn random_hex(bytes: usize) -> String {
    // No randomness: fail closed with a value nobody can present (tokens are compared to
    // it, and an empty token never matches).
    toolgate_core::id::random_hex(bytes).unwrap_or_default()
}

/// Equality that takes the same time wherever the strings differ (for equal lengths), by
/// `subtle`'s constant-time comparison; an empty string never matches.
pub(crate) fn same(a: &str, b: &str) -> bool {
    use subtle::ConstantTimeEq as _;
    !a.is_empty() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}
