//! # toolgate
//!
//! Tower middleware that governs the tool calls of AI agents. Wrap any tool-invoking
//! `tower::Service<ToolCall>` and every call is decided — it runs, it waits for a person,
//! or it is refused with a code and reasons — by one pure decision engine
//! ([`toolgate_engine`]) that also builds the list of tools the model is shown.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use serde_json::json;
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//! use toolgate::{AirGapLayer, ConfidentialityLayer, ExposureLayer, GovernanceHandle};
//! use toolgate::approval::ApprovalGateLayer;
//! use toolgate::core::{AgentRef, RefusalCode, ToolCall, ToolOutput, ToolResponse};
//! use toolgate::engine::config::{load_str, Format};
//!
//! let governance = load_str(r#"{
//!     "air_gapped": true,
//!     "tools": [{"toolset": "notes", "name": "read", "read_only": true},
//!               {"kind": "http", "name": "fetch", "network": "egress"}],
//!     "agents": [{"name": "dev", "allowed_tools": ["notes__read", "fetch"]}]
//! }"#, Format::Json).unwrap();
//! let handle = GovernanceHandle::new(governance);
//!
//! // Outermost first: exposure → confidentiality → air gap → approval gate → the tool.
//! let stack = ServiceBuilder::new()
//!     .layer(ExposureLayer::new(handle.clone()))
//!     .layer(ConfidentialityLayer::new(handle.clone()))
//!     .layer(AirGapLayer::new(handle.clone()))
//!     .layer(ApprovalGateLayer::new(handle.clone()))
//!     .service(service_fn(|call: ToolCall| async move {
//!         Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::new(json!(format!("ran {}", call.tool.display_name())))))
//!     }));
//!
//! let dev = AgentRef::profile("dev");
//! let ran = stack.clone().oneshot(ToolCall::new(dev.clone(), "notes__read", json!({}))).await.unwrap();
//! assert!(matches!(ran, ToolResponse::Completed(_)));
//! let refused = stack.oneshot(ToolCall::new(dev, "fetch", json!({}))).await.unwrap();
//! assert_eq!(refused.refusal().unwrap().code, RefusalCode::AirGapped);
//! # }
//! ```
//!
//! ## Ordering
//!
//! Layer order is a security property. Outermost first:
//!
//! ```text
//!  ┌ tool span (OpenTelemetry) ─────────────────────────────────────────┐
//!  │ ┌ exposure: unknown tool, input bounds (R36), allowed names ──────┐ │
//!  │ │ ┌ confidentiality (R7) ────────────────────────────────────────┐│ │
//!  │ │ │ ┌ air gap (R8) ────────────────────────────────────────────┐ ││ │
//!  │ │ │ │ ┌ approval gate: mode, tenant policy, posture, hooks ───┐ │ ││ │
//!  │ │ │ │ │ ┌ audit / redaction ─────────────────────────────────┐│ │ ││ │
//!  │ │ │ │ │ │                 the tool                           ││ │ ││ │
//! ```
//!
//! Exposure comes before approval so that nobody is ever asked about a call that would be
//! refused anyway; redaction comes before audit and spans so that no secret reaches a
//! record. Every layer pins the call to one configuration snapshot ([`GovernanceHandle`]),
//! so a policy replaced mid-call never splits a decision (R23). The approval gate runs every
//! check again (R14, R38): it is safe on its own, and the filters in front of it only
//! refuse earlier.
//!
//! ## Refusals are responses
//!
//! A refused call comes back as [`ToolResponse::Refused`](core::ToolResponse::Refused) with
//! its code, the check that decided and every reason — something the agent can hand its
//! model — and is never sent to the inner service. A layer that only decides never changes
//! the inner service's error type.
//!
//! ## Features
//!
//! | feature | adds |
//! |---|---|
//! | `yaml` | YAML configuration files (via `serde_norway`) |
//! | `full` | everything above |
#![forbid(unsafe_code)]
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]
#![cfg_attr(
    test,
    allow(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing
    )
)]

pub mod airgap;
pub mod approval;
pub mod audit;
pub mod confidentiality;
pub mod exposure;
mod filter;
mod future;
mod handle;
pub mod redact;
pub mod scrub;
pub mod stack;

pub use toolgate_core as core;
pub use toolgate_engine as engine;

pub use airgap::{AirGap, AirGapLayer};
pub use confidentiality::{Confidentiality, ConfidentialityLayer};
pub use exposure::{Exposure, ExposureLayer};
pub use filter::{Filter, FilterCheck, FilterLayer};
pub use future::ResponseFuture;
pub use handle::{GovernanceHandle, Pinned};
pub use stack::{Toolgate, ToolgateBuilder, ToolgateLayer};
