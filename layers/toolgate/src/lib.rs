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
//! use toolgate::{GovernanceHandle, ToolgateLayer};
//! use toolgate::approval::{ApprovalOutcome, FnChannel};
//! use toolgate::core::{AgentRef, ChannelKind, RefusalCode, ToolCall, ToolOutput, ToolResponse};
//! use toolgate::engine::config::{load_str, Format};
//!
//! let governance = load_str(r#"{
//!     "air_gapped": true,
//!     "approval": {"channel": "interactive"},
//!     "redaction": {"keys": ["ssn"], "scrub_output": true},
//!     "tools": [{"toolset": "notes", "name": "read", "read_only": true},
//!               {"kind": "http", "name": "fetch", "network": "egress"}],
//!     "agents": [{"name": "dev", "allowed_tools": ["notes__read", "fetch"]}]
//! }"#, Format::Json).unwrap();
//! let person = FnChannel::new(ChannelKind::Interactive, |_question| ApprovalOutcome::Approved { approver: "alice".into() });
//!
//! // The whole stack in the security order; a missing or wrong channel fails here.
//! let governed = ToolgateLayer::builder(GovernanceHandle::new(governance))
//!     .channel(person)
//!     .build()
//!     .unwrap();
//! let stack = ServiceBuilder::new()
//!     .layer(governed)
//!     .service(service_fn(|call: ToolCall| async move {
//!         Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::new(
//!             json!({"ran": call.tool.display_name(), "ssn": "078-05-1120"}))))
//!     }));
//!
//! let dev = AgentRef::profile("dev");
//! let ran = stack.clone().oneshot(ToolCall::new(dev.clone(), "notes__read", json!({}))).await.unwrap();
//! let ToolResponse::Completed(out) = ran else { panic!("{ran:?}") };
//! assert_eq!(out.content["ran"], "notes__read");
//! assert_ne!(out.content["ssn"], "078-05-1120"); // `redaction` applied to what the model gets
//! let refused = stack.oneshot(ToolCall::new(dev, "fetch", json!({}))).await.unwrap();
//! assert_eq!(refused.refusal().unwrap().code, RefusalCode::AirGapped);
//! # }
//! ```
//!
//! ## Ordering
//!
//! Layer order is a security property. [`ToolgateLayer`] builds this order (see
//! [`stack`]); the parts stay public for people who compose by hand, and a hand-built stack
//! must follow it:
//!
//! ```text
//!  call ──► outermost first                                                     SPEC
//!   1 tool span        toolgate-otel (optional): every call, redacted             R34
//!   2 audit            one record per call, refused ones too, redacted            R33
//!   3 validate_input   optional: e.g. MCP input schema (after unknown_tool)       R36
//!   4 exposure         unknown tool, input bounds, allowed names                  R6 R14 R36
//!   5 confidentiality  confidential work keeps to confidential tools              R7
//!   6 air gap          no egress on an air-gapped host                            R8
//!   7 approval gate    every check again; mode, policy, posture, hooks, one ask   R9–R32 R35
//!   8 scrub output     `redaction.scrub_output`: what the model receives          R33
//!   9 the tool
//! ```
//!
//! Audit (and the span) come before every deciding layer so that refused calls are
//! recorded too; exposure comes before approval so that nobody is ever asked about a call
//! that would be refused anyway; every record and span is redacted by the one redactor
//! the configuration's `redaction` section builds, and scrubbing sits right outside the
//! tool so that every layer and the model see the scrubbed result.
//!
//! **Decided once.** The first toolgate layer a call meets decides it — one `decide`, one
//! input-bounds walk, one look-up of the tool and of the agent — and pins the decision with
//! its snapshot ([`Pinned`], [`PinnedDecision`]); every later layer of the same
//! [`GovernanceHandle`] reads it, so a policy replaced mid-call never splits a decision
//! (R23). Each layer used alone still decides for itself; a layer of another handle never
//! reads the pin. The approval gate decides again only after a person's approval, on the
//! configuration then in force (R38). A pin is read only while it is about the call: a
//! layer between two toolgate layers that changed the call's tool, agent, run settings or
//! (at the gate) input makes it stale, and the call is decided again (R14, R38; see
//! [`GovernanceHandle::decide`]).
//! Every call the gate sends carries its [`Permit`] (R38), bound to the call, its input and
//! the tool's definition: [`RequirePermitLayer`] in front of your own tool (and
//! `toolgate_mcp::McpToolService` always) refuses a call that did not pass a gate.
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
pub mod future;
mod handle;
pub mod permit;
pub mod redact;
pub mod scrub;
pub mod stack;

pub use toolgate_core as core;
pub use toolgate_engine as engine;

pub use airgap::{AirGapFilter, AirGapLayer};
pub use confidentiality::{ConfidentialityFilter, ConfidentialityLayer};
pub use exposure::{ExposureFilter, ExposureLayer};
pub use filter::{CheckFilter, CheckFilterLayer, FilterCheck};

/// Renamed [`ExposureFilter`]: `Exposure` is also the engine's list of exposed tools.
#[deprecated(note = "renamed `ExposureFilter` (`toolgate_engine::Exposure` is the tool list)")]
pub type Exposure<S> = ExposureFilter<S>;
/// Renamed [`ConfidentialityFilter`].
#[deprecated(note = "renamed `ConfidentialityFilter`")]
pub type Confidentiality<S> = ConfidentialityFilter<S>;
/// Renamed [`AirGapFilter`].
#[deprecated(note = "renamed `AirGapFilter`")]
pub type AirGap<S> = AirGapFilter<S>;
/// Renamed [`CheckFilter`]: `Filter` is also `tower::filter::Filter`.
#[deprecated(note = "renamed `CheckFilter` (no clash with `tower::filter::Filter`)")]
pub type Filter<S, C> = CheckFilter<S, C>;
/// Renamed [`CheckFilterLayer`].
#[deprecated(note = "renamed `CheckFilterLayer` (no clash with `tower::filter::FilterLayer`)")]
pub type FilterLayer<C> = CheckFilterLayer<C>;
pub use future::{OnceResponse, ResponseFuture};
pub use handle::{
    AsyncQuotaCounter, GovernanceHandle, Ledger, Pinned, PinnedDecision, ReserveFuture,
};
pub use permit::{Permit, RequirePermit, RequirePermitLayer};
pub use stack::{Toolgate, ToolgateBuilder, ToolgateLayer};
