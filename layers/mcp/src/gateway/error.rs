//! Why connecting to, listing or registering a server failed.

use std::fmt;

use toolgate_engine::ConfigErrors;

/// Why connecting to, listing or registering a server failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum GatewayError {
    /// The server configuration cannot be used (a blank or duplicate id, a transport this
    /// call cannot start).
    Config(String),
    /// The server could not be started or reached, or did not complete the handshake.
    Connect {
        /// The server id.
        server: String,
        /// What went wrong.
        message: String,
    },
    /// The server's tool list could not be read.
    Listing {
        /// The server id.
        server: String,
        /// What went wrong.
        message: String,
    },
    /// The governance snapshot would not take the server (its trust setting conflicts with
    /// the configuration's, for one).
    Governance {
        /// The server id.
        server: String,
        /// The engine's errors.
        errors: ConfigErrors,
    },
    /// A secret of the server (an environment secret, a header) cannot be read: each error
    /// names the field (`servers.<id>.headers.Authorization`) and the problem, never the
    /// value.
    Secret {
        /// The server id.
        server: String,
        /// The errors, one per secret.
        errors: ConfigErrors,
    },
    /// No server with this id is connected.
    UnknownServer(String),
}

impl fmt::Display for GatewayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GatewayError::Config(m) => f.write_str(m),
            GatewayError::Connect { server, message } => {
                write!(f, "cannot connect to MCP server `{server}`: {message}")
            }
            GatewayError::Listing { server, message } => {
                write!(
                    f,
                    "cannot list the tools of MCP server `{server}`: {message}"
                )
            }
            GatewayError::Governance { server, errors } => {
                write!(
                    f,
                    "the governance configuration refuses MCP server `{server}`: {errors}"
                )
            }
            GatewayError::Secret { server, errors } => {
                write!(
                    f,
                    "cannot read the secrets of MCP server `{server}`: {errors}"
                )
            }
            GatewayError::UnknownServer(s) => write!(f, "no MCP server `{s}` is connected"),
        }
    }
}

impl std::error::Error for GatewayError {}
