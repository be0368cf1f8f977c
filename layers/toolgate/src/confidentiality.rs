//! The confidentiality filter (R7, R14 step 3): a confidential agent never calls a tool
//! withheld from confidential work. It reads the call's one decision (made by the first
//! layer of its handle, or by itself when used alone) and refuses a call refused at this
//! step or an earlier one of R14 — an unknown tool, an input over the bounds, a tool the
//! agent is not allowed — with that step's code: the check cannot be made, so it fails
//! closed.
//!
//! # Example
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use serde_json::json;
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//! use toolgate::{ConfidentialityLayer, GovernanceHandle};
//! use toolgate::core::{AgentRef, RefusalCode, ToolCall, ToolOutput, ToolResponse};
//! use toolgate::engine::config::{load_str, Format};
//!
//! let gov = load_str(r#"{"tools": [{"toolset": "memory", "name": "save", "confidential": true},
//!                                  {"toolset": "memory", "name": "read"}],
//!                        "agents": [{"name": "private", "confidential": true,
//!                                    "allowed_tools": ["memory__save", "memory__read"]}]}"#, Format::Json).unwrap();
//! let svc = ServiceBuilder::new()
//!     .layer(ConfidentialityLayer::new(GovernanceHandle::new(gov)))
//!     .service(service_fn(|_call: ToolCall| async {
//!         Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::new(json!("ok"))))
//!     }));
//! let agent = AgentRef::profile("private");
//! let ran = svc.clone().oneshot(ToolCall::new(agent.clone(), "memory__read", json!({}))).await.unwrap();
//! assert!(matches!(ran, ToolResponse::Completed(_)));
//! let refused = svc.oneshot(ToolCall::new(agent, "memory__save", json!({}))).await.unwrap();
//! assert_eq!(refused.refusal().unwrap().code, RefusalCode::Confidential);
//! # }
//! ```

use toolgate_core::{Check, Refusal, RefusalCode, ToolCall};
use toolgate_engine::Governance;

use crate::filter::{CheckFilter, CheckFilterLayer, FilterCheck};

/// The confidentiality filter's check: R7.
#[derive(Debug, Clone, Copy)]
pub struct ConfidentialityCheck;

impl FilterCheck for ConfidentialityCheck {
    const DECIDES_THROUGH: Option<Check> = Some(Check::Confidentiality);
    const NAME: &'static str = "Confidentiality";

    fn check(governance: &Governance, call: &ToolCall) -> Result<(), Refusal> {
        let entry = governance.lookup(&call.tool)?;
        let agent = governance.agent(&call.agent.profile).ok_or_else(|| {
            Refusal::new(
                RefusalCode::NotAllowed,
                Check::Allowed,
                format!("no agent profile is named `{}`", call.agent.profile),
            )
        })?;
        governance.check_confidential(agent, entry)
    }
}

/// Layer of the confidentiality filter.
pub type ConfidentialityLayer = CheckFilterLayer<ConfidentialityCheck>;
/// The confidentiality filter service.
pub type ConfidentialityFilter<S> = CheckFilter<S, ConfidentialityCheck>;
