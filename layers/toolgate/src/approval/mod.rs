//! The approval gate (R14 step 7, R15–R17, R25–R26, R32, R35): one question per call,
//! routed to a person without ever failing open.
//!
//! The gate runs every check of R14 through the engine, so it is safe on its own; the
//! filter layers in front of it refuse earlier and cheaper. When something asks — the
//! agent's mode, a tenant rule, the behaviour posture, a hook — the gate asks **one**
//! question carrying every reason through its [`ApprovalChannel`], and sends the call only
//! on a person's approval, with the input they saw and the tool definition they saw (R35).
//! Timeouts, cancellations and unroutable requests refuse the call, each with its own
//! reason.
//!
//! An approved call is decided again right before it is sent, against the configuration in
//! force (the handle's current snapshot), R38: a refusal that arrived while the person was
//! deciding wins with its own code; a fresh decision asking for a reason the person was not
//! asked about ([`new_question`]) is refused `rejected` — an approval answers only the
//! question it was asked. A call carrying a [`ResumeTicket`] (the execution of a held call)
//! is always redeemed through a durable `inbox` channel, whose conditional claim makes the
//! send at-most-once, even when its fresh decision no longer asks.
//!
//! # Example
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use serde_json::json;
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//! use toolgate::GovernanceHandle;
//! use toolgate::approval::{ApprovalGateLayer, ApprovalOutcome, FnChannel};
//! use toolgate::core::{AgentRef, ChannelKind, RefusalCode, ToolCall, ToolOutput, ToolResponse};
//! use toolgate::engine::config::{load_str, Format};
//!
//! let gov = load_str(r#"{"approval": {"channel": "interactive"},
//!     "tools": [{"kind": "http", "name": "refund", "approval": "require_approval"}],
//!     "agents": [{"name": "support", "allowed_tools": ["refund"]}],
//!     "policy": {"rules": [{"effect": "deny", "tool": "refund", "when": {"amount": {"gt": 1000}}, "reason": "too large"}]}}"#,
//!     Format::Json).unwrap();
//! let approver = FnChannel::new(ChannelKind::Interactive, |_req| ApprovalOutcome::Approved { approver: "alice".into() });
//! let svc = ServiceBuilder::new()
//!     .layer(ApprovalGateLayer::new(GovernanceHandle::new(gov)).channel(approver))
//!     .service(service_fn(|_call: ToolCall| async {
//!         Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::new(json!("refunded"))))
//!     }));
//! let agent = AgentRef::profile("support");
//! let asked_and_approved = svc.clone().oneshot(ToolCall::new(agent.clone(), "refund", json!({"amount": 5}))).await.unwrap();
//! assert!(matches!(asked_and_approved, ToolResponse::Completed(_)));
//! let denied = svc.oneshot(ToolCall::new(agent, "refund", json!({"amount": 5000}))).await.unwrap();
//! assert_eq!(denied.refusal().unwrap().code, RefusalCode::Denied);
//! # }
//! ```

mod gate;
mod hooks;
mod interactive;
mod observe;
mod terminal;

pub use gate::{ApprovalGate, ApprovalGateLayer, GateFuture};
pub use hooks::{HookCall, HookFuture, Hooks, ToolHooks};
pub use interactive::{
    ApprovalAnswer, ApprovalAnswerError, InteractiveChannel, PendingApproval, PendingApprovals,
};
pub use toolgate_core::approval::{
    ApprovalChannel, ApprovalOutcome, ApprovalRequest, BoxFuture, FnChannel, ResumeTicket,
    VerifiedOutcome, interaction_id, new_question,
};

pub use observe::{WaitEnded, WaitObserver, WaitOutcome, WaitStarted};
pub use terminal::TerminalChannel;
