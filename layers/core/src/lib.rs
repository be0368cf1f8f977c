//! The shared types of toolgate: the currency every layer speaks.
//!
//! - [`ToolCall`] and [`ToolResponse`]: what flows through a `tower::Service` stack.
//! - [`Refusal`] and [`RefusalCode`]: a refused call, exactly as SPEC §7 names it.
//! - [`names`]: qualified (wire) names, R1–R3.
//! - [`ToolDeclaration`], [`ToolIdentity`]: what a source says about a tool, R4–R5.
//! - [`Decision`]: which check decided, and why.
//! - [`display`]: text a person reads, with every hidden character shown marked.
//! - [`audit_record`]: the audit record (R33) the audit layer writes and replay reads.
//! - [`approval`]: the asynchronous approval contract (R17, R26): the question, the answer,
//!   the channel.
//! - [`number`] and [`json`]: a call's input read exactly — numbers as written (R20), its
//!   depth and compact length (SPEC §8).
//! - [`outbound`]: which addresses credentials are fetched from (`https://`, or plain
//!   `http://` to a loopback host only).
//!
//! ```
//! use toolgate_core::{names, Check, Refusal, RefusalCode, ToolResponse};
//! assert_eq!(names::mcp_name("github", "create_issue").unwrap(), "github__create_issue");
//! let refused = ToolResponse::Refused(Refusal::new(RefusalCode::NotAllowed, Check::Allowed, "not allowed"));
//! assert_eq!(refused.refusal().unwrap().code.as_str(), "not_allowed");
//! ```
#![forbid(unsafe_code)]

pub mod approval;
pub mod audit_record;
mod call;
mod decision;
mod decl;
pub mod display;
mod edit;
pub mod id;
mod interaction;
pub mod json;
pub mod labels;
pub mod names;
pub mod number;
pub mod outbound;
mod record;
mod response;
mod target;

pub use call::{AgentRef, CallId, Extensions, RunContext, RunMode, ToolCall, ToolRef, Turn};
pub use decision::{
    Ask, AskSource, CallOutcome, ChannelKind, Check, Decision, Effect, Granted, LabelsRead,
    MatchedRule, Refusal, RefusalCode, Verdict,
};
pub use decl::{
    ApprovalMode, McpAnnotations, NetworkScope, ToolDeclaration, ToolIdentity, ToolKind,
};
pub use edit::InputEdit;
pub use interaction::Interaction;
pub use labels::LabelSet;
pub use record::{DecisionNote, DecisionSink, Delegation, Principal, ShadowNote, WaitEnd};
pub use response::{HeldCall, ToolOutput, ToolResponse};
pub use target::{ExecutionTarget, TargetSource, TargetSourceError, TargetSpec};
