//! # toolgate-mcp
//!
//! Govern the tools of MCP servers nobody on the team wrote (seed 003, SPEC R3, R8,
//! R27–R31, R35, R36, R38), over the official Rust MCP SDK ([`rmcp`]).
//!
//! - **Discovery** ([`McpGateway::connect`]): starts a stdio server or reaches a
//!   streamable HTTP one, lists every tool (following `nextCursor`, within bounds) and
//!   registers each in the governance snapshot with the **configured server id** as its
//!   source (never the name the server gives itself), its description, input schema and
//!   annotations as advertised. Discovery is the only moment annotations exist: they are
//!   kept, and the posture's trust rule (R28–R31) and the air gap (R8, `openWorldHint`)
//!   read them from there.
//! - **Drift**: on `notifications/tools/list_changed`, and on an optional periodic re-list,
//!   the tools are listed again and every change is registered as a revision by its own
//!   source (believed both ways, R29), traced, sent to [`McpGateway::subscribe`]rs as a
//!   [`DriftEvent`] (added, removed, changed with old and new hashes) and written to an
//!   audit sink. A changed definition is decided afresh, and an approval given under the
//!   old one is refused when the call is about to be sent (R35). rmcp's response cache is
//!   turned off: every listing is the server's word now.
//! - **Service** ([`McpToolService`]): a `tower::Service<ToolCall>` sending `tools/call`
//!   to the right server with the tool's name as the server listed it; `content` → `ToolOutput::content`,
//!   `structuredContent` → `ToolOutput::structured`, `isError: true` →
//!   [`ToolResponse::Failed`](toolgate_core::ToolResponse::Failed). A name the server never
//!   listed is refused before any message is sent.
//! - **Input validation** ([`SchemaValidationLayer`]): the tool's advertised `inputSchema`
//!   (R36, `invalid_input`), with the `jsonschema` crate.
//!
//! The model is shown qualified names (`server__tool`, R1): [`McpGateway::model_tools`].
//!
//! **Gateway prefixes** (R41, seed 002): a server reached through an MCP gateway that lists
//! each tool as a prefix plus its own name (`github-create_issue`) sets
//! [`McpServerConfig::tool_prefix`] (or `servers.<id>.tool_prefix` in the configuration —
//! once; both set and different fails connecting). Its tools are governed by their own
//! names (`create_issue`, `github__create_issue`) and called under the listed name.
//!
//! ## Example
//!
//! ```no_run
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use serde_json::json;
//! use tower::{ServiceBuilder, ServiceExt};
//! use toolgate_core::{AgentRef, ToolCall};
//! use toolgate_engine::{AgentProfile, Governance};
//! use toolgate::{GovernanceHandle, ToolgateLayer};
//! use toolgate_mcp::{McpGateway, McpServerConfig, SchemaValidationLayer};
//!
//! let handle = GovernanceHandle::new(
//!     Governance::builder()
//!         .require_approval_for_non_read_only(true)
//!         .agent(AgentProfile::new("dev").allow(["fs__read_text_file", "fs__write_file"]))
//!         .build()?,
//! );
//! let gateway = McpGateway::new(handle.clone());
//! gateway
//!     .connect(
//!         McpServerConfig::stdio("fs", "node")?
//!             .args(["node_modules/@modelcontextprotocol/server-filesystem/dist/index.js", "/srv/docs"])
//!             .trust_tool_annotations(true),
//!     )
//!     .await?;
//!
//! for tool in gateway.model_tools("dev")? {
//!     println!("{} (wrapped: {})", tool.name, tool.wrapped);
//! }
//!
//! // The whole stack (toolgate's composite), schema validation in its input slot.
//! let governed = ToolgateLayer::builder(handle.clone())
//!     .build()?
//!     .validate_input(SchemaValidationLayer::new(handle.clone()));
//! let stack = ServiceBuilder::new().layer(governed).service(gateway.service());
//! let read = ToolCall::new(AgentRef::profile("dev"), "fs__read_text_file", json!({"path": "/srv/docs/a.txt"}));
//! println!("{}", stack.oneshot(read).await?.model_text());
//! # Ok(()) }
//! ```
//!
//! ## Ordering
//!
//! Outermost first, as `toolgate::ToolgateLayer` builds it. Schema validation goes in its
//! `validate_input` slot, in front of exposure, so that the refusal codes come in SPEC
//! order (`unknown_tool`, then `invalid_input`, then `not_allowed`, …) and nobody is asked
//! to approve an input the tool would reject; it validates by the call's pinned snapshot,
//! so it may also sit right outside the MCP service. Either way a call refused
//! `invalid_input` never reaches the server. (The whole order: [`toolgate::guide::layers`].)
//!
//! [`McpToolService`] sends only calls the approval gate passed (R38): each carries the
//! gate's [`Permit`](toolgate::Permit), bound to the call, its input and the tool's
//! definition; a call without one — a stack assembled without the gate — is refused and
//! never sent.
//!
//! [`McpToolService`] checks on its own that the tool is listed now and that the
//! definition the call was decided by (the pinned snapshot's record) is the one the
//! server lists now; the approval gate checks the same for approved calls against the
//! newest snapshot (R35). Between a server changing a tool and the gateway re-listing it,
//! nobody can know; that window is as short as the server's `list_changed` (or the
//! periodic re-list) makes it.
//!
//! ## Known limits
//!
//! - A removed tool stays in the snapshot, denied (the engine's builder cannot drop a
//!   declaration): no agent is shown it and every call is refused.
//! - Only `http://` for streamable HTTP: this crate carries no TLS stack.
//!
//! ## Features
//!
//! | feature | adds |
//! |---|---|
//! | `http` (default) | streamable HTTP servers |
//! | `serve` | `serve`: toolgate as an MCP server in front of the configured servers (`toolgate mcp serve`): stdio or streamable HTTP downstream, asks by elicitation or the durable inbox |
#![forbid(unsafe_code)]

/// Serves one client with an rmcp server until the client goes away; transport errors
/// become `std::io::Error`s.
#[cfg(feature = "serve")]
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

/// Guides: the chapters of the manual about this crate, every example compiled and run as
/// a doctest.
pub mod guide {
    #[doc = include_str!("../docs/gateway.md")]
    pub mod gateway {}
    #[doc = include_str!("../docs/serve.md")]
    pub mod serve {}
}

mod arrivals;
mod config;
mod config_error;
mod declare;
mod drift;
#[cfg(feature = "http")]
mod exchange;
mod gateway;
#[cfg(feature = "serve")]
pub mod hooks;
mod lines;
pub mod lock;
mod oauth;
pub mod relay;
mod routes;
pub mod scan;
mod schema;
mod secret;
#[cfg(feature = "serve")]
pub mod serve;
mod service;
#[cfg(feature = "http")]
mod token_endpoint;

pub use oauth::{
    ClientAuth, OAuthClientCredentials, SubjectToken, SubjectTokenType, TokenExchange,
};
pub use rmcp;
pub use secret::{Secret, SecretError, SecretSource};

pub use config::{
    ConfigError, DEFAULT_INHERITED_ENV, DEFAULT_MAX_PAGES, DEFAULT_MAX_TOOLS,
    DEFAULT_REQUEST_TIMEOUT, McpServerConfig,
};
pub use drift::{Aspect, DriftEvent, DriftOutcome, DriftTrigger, ToolChange};
pub use gateway::{
    ContentEvent, GatewayError, McpGateway, McpGatewayBuilder, ModelTool, model_tools,
};
pub use schema::{SchemaFuture, SchemaValidation, SchemaValidationLayer};
pub use service::{McpCallError, McpFuture, McpToolService};
