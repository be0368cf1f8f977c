//! toolgate's pure decision engine.
//!
//! Everything here is synchronous and does no I/O, with two exceptions at the edge, both
//! named for what they read: [`config::load_path`] reads the one configuration file you
//! name (blocking, once), and [`chain::verify_chain`] reads the audit file from the reader
//! you pass. Deciding ([`Governance::decide`], [`Governance::expose`]) never does. Here: the
//! catalog and behaviour registry ([`catalog`]), the tenant rule policy ([`policy`]),
//! configuration ([`config`]) and the one decision function ([`Governance::decide`]), with
//! exposure ([`Governance::expose`]) built from the same checks. The tower layers of the
//! `toolgate` crate and the `toolgate` command call this code; no check is written twice.
//!
//! ```
//! use serde_json::json;
//! use toolgate_core::{AgentRef, RefusalCode, ToolRef, Verdict, RunContext};
//! use toolgate_engine::{config::{self, Format}, CallInput, CallView};
//!
//! let gov = config::load_str(r#"{
//!     "approval": {"channel": "interactive"},
//!     "tools": [{"kind": "http", "name": "refund_order"}, {"kind": "http", "name": "lookup"}],
//!     "agents": [{"name": "support", "allowed_tools": ["refund_order"]}],
//!     "policy": {"rules": [{"effect": "ask", "tool": "refund_*", "reason": "Refunds need a person"}]}
//! }"#, Format::Json).unwrap();
//!
//! let agent = AgentRef::profile("support");
//! let input = json!({"amount": 10});
//! let call = |name: &str| ToolRef::Name(name.into());
//! let refund = call("refund_order");
//! let d = gov.decide(CallView { tool: &refund, agent: &agent, input: CallInput::Value(&input), run: RunContext::default() });
//! assert_eq!(d.verdict, Verdict::Ask { channel: toolgate_core::ChannelKind::Interactive });
//! assert_eq!(d.reasons, ["Refunds need a person"]);
//!
//! let lookup = call("lookup");
//! let d = gov.decide(CallView { tool: &lookup, agent: &agent, input: CallInput::Value(&input), run: RunContext::default() });
//! assert_eq!(d.verdict, Verdict::Refused(RefusalCode::NotAllowed));
//! ```
#![forbid(unsafe_code)]

pub mod approvers;
pub mod ask;
pub mod canon;
pub mod catalog;
pub mod chain;
pub mod config;
mod decide;
mod error;
mod exposure;
mod governance;
pub mod grant;
pub mod labels;
pub mod policy;
mod print;
pub mod quota;
mod quota_cover;
pub mod recording;
pub mod replay;
pub mod simulate;

/// The old path of [`recording`] (the `audit` and `redaction` settings), kept so
/// code written against it still compiles.
#[doc(hidden)]
pub use recording as observe;

/// The exact reading of a call's input and its numbers: in `toolgate_core` (the approval
/// contract, `toolgate_core::approval`, carries them), here under their old paths.
pub use toolgate_core::{json, number};

pub use decide::{CallInput, CallView, Decided, History};
pub use error::{ConfigError, ConfigErrors, Warning};
pub use exposure::{ExposedTool, Exposure, Omission, OmittedTool, UnknownAgent};
pub use governance::{
    AgentProfile, Exemption, Governance, GovernanceBuilder, HostSettings, PolicyState,
    PolicyTarget, ResolvedAgent, RoutedChannel, ServerSettings, SubagentError,
};
