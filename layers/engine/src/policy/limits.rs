//! Limits on policies and call inputs (R22, R36, R37; SPEC §7 `limits`).

/// The `regex` crate's default compiled-size limit, R37's bound unless the config sets a
/// smaller one.
pub const DEFAULT_REGEX_SIZE_LIMIT: usize = 10 * (1 << 20);

/// Limits on policies and call inputs (R22, R36, R37; SPEC §7 `limits`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// At most this many rules (`tool_rules`, 200).
    pub tool_rules: usize,
    /// A selector or `when` path is at most this many characters (`tool_rule_field_chars`, 200).
    pub tool_rule_field_chars: usize,
    /// A `reason` or `matches` is at most this many characters (`tool_rule_text_chars`, 500).
    pub tool_rule_text_chars: usize,
    /// A call's input is at most this many bytes, compact (`max_input_bytes`, 1 MiB).
    pub max_input_bytes: usize,
    /// A call's input nests at most this deep (`max_input_depth`, 64).
    pub max_input_depth: usize,
    /// A `matches` expression compiles to at most this many bytes (`regex_size_limit`).
    pub regex_size_limit: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            tool_rules: 200,
            tool_rule_field_chars: 200,
            tool_rule_text_chars: 500,
            max_input_bytes: 1 << 20,
            max_input_depth: 64,
            regex_size_limit: DEFAULT_REGEX_SIZE_LIMIT,
        }
    }
}

/// The deepest `max_input_depth` a configuration may set: inputs are parsed and compared
/// recursively once they are proved no deeper than the bound, so the bound itself is bounded.
pub const MAX_INPUT_DEPTH_CEILING: usize = 1024;
