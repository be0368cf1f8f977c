//! The policy preview's fixture (R46), shared by the page and browser tests: a page whose
//! configuration writes an audit file, with calls recorded in it by the composite stack.

use std::convert::Infallible;

use serde_json::json;
use toolgate::ToolgateLayer;
use toolgate_core::{AgentRef, ToolCall, ToolOutput, ToolResponse};
use tower::{ServiceBuilder, ServiceExt, service_fn};

use crate::common::{Server, governance_tweaked, start_gov};

/// A page whose configuration writes an audit file, with 6 look-ups and 2 held refunds
/// recorded in it by the composite stack.
pub(crate) async fn recorded() -> (Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let gov = governance_tweaked("token", |c| {
        c["audit"] = json!({"file": audit, "include_input": true});
    });
    let s = start_gov(gov, std::time::Duration::from_millis(100)).await;
    let stack = ServiceBuilder::new()
        .layer(
            ToolgateLayer::builder(s.handle.clone())
                .channel(s.inbox.channel())
                .build()
                .unwrap(),
        )
        .service(service_fn(|_c: ToolCall| async {
            Ok::<_, Infallible>(ToolResponse::Completed(ToolOutput::new(json!("ok"))))
        }));
    let support = AgentRef::profile("support");
    for q in 0..6 {
        let r = stack
            .clone()
            .oneshot(ToolCall::new(support.clone(), "lookup", json!({"q": q})))
            .await
            .unwrap();
        assert!(matches!(r, ToolResponse::Completed(_)), "{r:?}");
    }
    for amount in [50, 500] {
        let r = stack
            .clone()
            .oneshot(ToolCall::new(
                support.clone(),
                "refund",
                json!({"amount": amount}),
            ))
            .await
            .unwrap();
        assert!(matches!(r, ToolResponse::Held(_)), "{r:?}");
    }
    let lines = std::fs::read_to_string(&audit).unwrap();
    assert_eq!(lines.lines().count(), 8, "{lines}");
    (s, dir)
}
