//! The error of one server's configuration: its path and what is wrong (shared by the
//! server configuration and its OAuth client credentials).

use std::fmt;

/// A server configuration that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Where the problem is (`servers.<id>.url`, …).
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

impl std::error::Error for ConfigError {}
