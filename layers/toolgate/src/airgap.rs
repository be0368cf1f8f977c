//! The air-gap egress filter (R8, R14 step 4): on an air-gapped host a tool whose effective
//! network scope is `egress` is refused (an MCP tool's `openWorldHint` tightens the scope;
//! the operator's `network_override` decides outright). Like the other filters it reads the
//! call's one decision and refuses a call refused at this step or an earlier one of R14.
//!
//! # Example
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use serde_json::json;
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//! use toolgate::{AirGapLayer, GovernanceHandle};
//! use toolgate::core::{AgentRef, RefusalCode, ToolCall, ToolOutput, ToolResponse};
//! use toolgate::engine::config::{load_str, Format};
//!
//! let gov = load_str(r#"{"air_gapped": true,
//!                        "tools": [{"kind": "http", "name": "fetch", "network": "egress"},
//!                                  {"toolset": "calc", "name": "add"}],
//!                        "agents": [{"name": "dev", "allowed_tools": ["fetch", "calc__add"]}]}"#, Format::Json).unwrap();
//! let svc = ServiceBuilder::new()
//!     .layer(AirGapLayer::new(GovernanceHandle::new(gov)))
//!     .service(service_fn(|_call: ToolCall| async {
//!         Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::new(json!(3))))
//!     }));
//! let agent = AgentRef::profile("dev");
//! let ran = svc.clone().oneshot(ToolCall::new(agent.clone(), "calc__add", json!({}))).await.unwrap();
//! assert!(matches!(ran, ToolResponse::Completed(_)));
//! let refused = svc.oneshot(ToolCall::new(agent, "fetch", json!({}))).await.unwrap();
//! assert_eq!(refused.refusal().unwrap().code, RefusalCode::AirGapped);
//! # }
//! ```

use toolgate_core::{Check, Refusal, ToolCall};
use toolgate_engine::Governance;

use crate::filter::{CheckFilter, CheckFilterLayer, FilterCheck};

/// The air-gap filter's check: R8.
#[derive(Debug, Clone, Copy)]
pub struct AirGapCheck;

impl FilterCheck for AirGapCheck {
    const DECIDES_THROUGH: Option<Check> = Some(Check::AirGap);
    const NAME: &'static str = "AirGap";

    fn check(governance: &Governance, call: &ToolCall) -> Result<(), Refusal> {
        let entry = governance.lookup(&call.tool)?;
        governance.check_air_gap(entry)
    }
}

/// Layer of the air-gap filter.
pub type AirGapLayer = CheckFilterLayer<AirGapCheck>;
/// The air-gap filter service.
pub type AirGapFilter<S> = CheckFilter<S, AirGapCheck>;
