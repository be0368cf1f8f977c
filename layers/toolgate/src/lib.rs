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
//! Layer order is a security property: [`guide::layers`] gives the order every stack must
//! follow (the one [`ToolgateLayer`] builds), why, and how a call is decided once and sent
//! only with the gate's [`Permit`]. A refused call comes back as
//! [`ToolResponse::Refused`](core::ToolResponse::Refused) with its code and every reason,
//! and is never sent to the inner service.
//!
//! ## Guides
//!
//! [`guide::quick_start`] (a tower stack governed, and a stack of your own request type),
//! [`guide::layers`], [`guide::configuration`], [`guide::over_time`] (quotas, grants,
//! simulation), [`guide::decisions`] (where SPEC leaves room). Held calls, the approval page,
//! MCP and audit have their guides in `toolgate-inbox`, `toolgate-web`, `toolgate-mcp` and
//! `toolgate-otel`.
//!
//! ## Features
//!
//! | feature | adds |
//! |---|---|
//! | `yaml` | YAML configuration files (via `serde_norway`) |
//! | `full` | everything above |
#![forbid(unsafe_code)]

/// Guides: the chapters of the manual that are about this crate, every example compiled and
/// run as a doctest.
pub mod guide {
    #[doc = include_str!("../docs/quick-start.md")]
    pub mod quick_start {}
    #[doc = include_str!("../docs/layers.md")]
    pub mod layers {}
    #[doc = include_str!("../docs/configuration.md")]
    pub mod configuration {}
    #[doc = include_str!("../docs/over-time.md")]
    pub mod over_time {}
    #[doc = include_str!("../docs/composition.md")]
    pub mod composition {}
    #[doc = include_str!("../docs/decisions.md")]
    pub mod decisions {}
}

pub mod airgap;
pub mod approval;
pub mod audit;
mod binding;
pub mod confidentiality;
pub mod exposure;
mod filter;
pub mod future;
mod handle;
pub mod hosted;
pub mod permit;
pub mod redact;
pub mod scrub;
pub mod stack;

/// The vocabulary a governed stack is written in: the call, its agent and tools, what the
/// tool answered, and what was decided. Curated from the `toolgate-core` crate, which has
/// the rest (number and JSON readings, display helpers, decision records).
///
/// ```
/// use toolgate::core::{AgentRef, ToolCall, ToolOutput, ToolResponse};
/// let call = ToolCall::new(AgentRef::profile("support"), "lookup_order", serde_json::json!({"id": 7}));
/// assert_eq!(call.tool.display_name(), "lookup_order");
/// let done = ToolResponse::Completed(ToolOutput::new(serde_json::json!("shipped")));
/// assert!(matches!(done, ToolResponse::Completed(_)));
/// ```
pub mod core {
    pub use toolgate_core::{
        AgentRef, ApprovalMode, Ask, AskSource, CallId, CallOutcome, ChannelKind, Check, Decision,
        DecisionNote, DecisionSink, Delegation, Effect, ExecutionTarget, Extensions, Granted,
        HeldCall, InputEdit, Interaction, LabelSet, McpAnnotations, NetworkScope, Principal,
        Refusal, RefusalCode, RunContext, RunMode, ShadowNote, TargetSource, TargetSpec, ToolCall,
        ToolDeclaration, ToolIdentity, ToolKind, ToolOutput, ToolRef, ToolResponse, Turn, Verdict,
        WaitEnd,
    };
    pub use toolgate_core::{approval, audit_record};
}

/// What a stack is configured and decided with: the configuration and its reading, the
/// snapshot ([`Governance`](engine::Governance)), the stored policy, quotas and grants.
/// Curated from the `toolgate-engine` crate, which has the rest (the decision's
/// internals, replay, simulation, canonical forms, the hash chain).
///
/// ```
/// use toolgate::engine::config::{load_str, Format};
/// let gov = load_str(r#"{"tools": [{"kind": "http", "name": "refund_order", "approval": "require_approval"}],
///     "agents": [{"name": "support", "allowed_tools": ["refund_order"]}]}"#, Format::Json).unwrap();
/// assert_eq!(gov.expose("support").unwrap().tools.len(), 1);
/// ```
pub mod engine {
    pub use toolgate_engine::{
        AgentProfile, ConfigError, ConfigErrors, Exemption, ExposedTool, Exposure, Governance,
        GovernanceBuilder, HostSettings, Omission, OmittedTool, PolicyState, ServerSettings,
        UnknownAgent, Warning, config,
    };

    /// The tenant rule policy (R22): read, validated under the configuration's limits.
    pub mod policy {
        pub use toolgate_engine::policy::{Limits, Policy};
    }

    /// Counting sends over time (R21, R44): the counters a stack is given (and the seams to
    /// write one), and the clocks.
    pub mod quota {
        pub use toolgate_engine::quota::{
            AsyncQuotaCounter, Clock, LabelsFuture, ManualClock, MemoryQuotaCounter, Millis,
            NoSends, QuotaCounter, QuotaError, QuotaFull, QuotaGroup, ReserveFuture, SystemClock,
        };
    }

    /// Standing grants (R45): where they are kept.
    pub mod grant {
        pub use toolgate_engine::grant::{
            Grant, GrantStore, GrantStoreError, MemoryGrants, NoGrants, grants_from_json,
            parse_grants,
        };
    }

    /// The audit log's settings (R33).
    pub mod recording {
        pub use toolgate_engine::recording::{FlushPolicy, OnSinkFailure, RedactionSettings};
    }
}

pub use airgap::{AirGapFilter, AirGapLayer};
pub use confidentiality::{ConfidentialityFilter, ConfidentialityLayer};
pub use exposure::{ExposureFilter, ExposureLayer};
pub use filter::{CheckFilter, CheckFilterLayer, FilterCheck};

pub use future::{OnceResponse, ResponseFuture};
pub use handle::{
    AsyncQuotaCounter, GovernanceHandle, LabelsFuture, LabelsReadFuture, Ledger, Pinned,
    PinnedDecision, ReadSessionLabels, ReserveFuture, SessionLabelsLayer,
};
pub use permit::{Permit, RequirePermit, RequirePermitLayer};
pub use stack::{Toolgate, ToolgateBuilder, ToolgateLayer};
