//! The exposure filter (R14 steps 1–2 and R36): an unknown tool, an input over the bounds,
//! or a tool outside the agent's allowed names is refused before anything else reads it.
//!
//! # Example
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use serde_json::json;
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//! use toolgate::{ExposureLayer, GovernanceHandle};
//! use toolgate::core::{AgentRef, RefusalCode, ToolCall, ToolOutput, ToolResponse};
//! use toolgate::engine::config::{load_str, Format};
//!
//! let gov = load_str(r#"{"tools": [{"kind": "http", "name": "lookup"}, {"kind": "http", "name": "wipe"}],
//!                        "agents": [{"name": "dev", "allowed_tools": ["lookup"]}]}"#, Format::Json).unwrap();
//! let svc = ServiceBuilder::new()
//!     .layer(ExposureLayer::new(GovernanceHandle::new(gov)))
//!     .service(service_fn(|_call: ToolCall| async {
//!         Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::new(json!("ok"))))
//!     }));
//!
//! let ran = svc.clone().oneshot(ToolCall::new(AgentRef::profile("dev"), "lookup", json!({}))).await.unwrap();
//! assert!(matches!(ran, ToolResponse::Completed(_)));
//! let refused = svc.oneshot(ToolCall::new(AgentRef::profile("dev"), "wipe", json!({}))).await.unwrap();
//! assert_eq!(refused.refusal().unwrap().code, RefusalCode::NotAllowed);
//! # }
//! ```

use toolgate_core::number::NumberLiterals;
use toolgate_core::{Check, Refusal, ToolCall};
use toolgate_engine::Governance;

use crate::filter::{CheckFilter, CheckFilterLayer, FilterCheck};

/// The exposure filter's check: R14 step 1, R36, step 2.
#[derive(Debug, Clone, Copy)]
pub struct ExposureCheck;

impl FilterCheck for ExposureCheck {
    const DECIDES_THROUGH: Option<Check> = Some(Check::Allowed);
    const NAME: &'static str = "Exposure";

    fn check(governance: &Governance, call: &ToolCall) -> Result<(), Refusal> {
        let entry = governance.lookup(&call.tool)?;
        governance.check_input_exact(&call.input, NumberLiterals::of(call))?;
        governance.check_allowed(&call.agent, entry).map(|_| ())
    }
}

/// Layer of the exposure filter.
pub type ExposureLayer = CheckFilterLayer<ExposureCheck>;
/// The exposure filter service.
pub type ExposureFilter<S> = CheckFilter<S, ExposureCheck>;
