//! MCP servers of toolgate's own, for its tests and demos (never shipped):
//!
//! - [`drift_server`]: an MCP server whose tools change on demand (a "rug pull" on
//!   request), in-process or as the `toolgate-mcp-drift-server` binary over stdio or
//!   streamable HTTP on loopback;
//! - [`prefix_gateway`]: an MCP gateway that lists another stdio server's tools with a
//!   prefix and forwards calls without it (SPEC R41), as the `toolgate-mcp-prefix-gateway`
//!   binary.
//!
//! The crate's `tests/` are `toolgate-mcp`'s integration tests: they start these binaries
//! as upstream servers.
#![forbid(unsafe_code)]

/// Serves one client with an rmcp server until the client goes away; transport errors
/// become `std::io::Error`s.
macro_rules! serve_until_closed {
    ($server:expr, $transport:expr) => {{
        let running = $server
            .serve($transport)
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        running
            .waiting()
            .await
            .map(|_| ())
            .map_err(|e| std::io::Error::other(e.to_string()))
    }};
}

pub mod drift_server;
pub mod prefix_gateway;
