//! Held calls for this crate's own unit tests (`cfg(test)` only: never built into the
//! library). The conformance suite every store runs is the `toolgate-inbox-suite` crate; a
//! unit test inside this crate cannot use it (it links its own copy of this crate).

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use toolgate_core::approval::ApprovalRequest;
use toolgate_core::{AgentRef, Ask, AskSource, CallId, RunContext, RunMode, ToolIdentity, Turn};

use crate::model::{NewHeldCall, Timestamp};

/// A held call of `payments__refund` with `input`, created now, expiring after `ttl`, that
/// needs `approvals` approvals (R51).
pub(crate) fn held_needing(approvals: u8, input: Value, ttl: Duration) -> NewHeldCall {
    let request = ApprovalRequest {
        interaction_id: toolgate_core::id::random_id("ia_").unwrap(),
        call_id: CallId::new("call-unit-1"),
        tool: "payments__refund".into(),
        identities: vec![ToolIdentity::mcp("payments", "refund")],
        agent: AgentRef::subagent("support", "sub-7"),
        input_hash: toolgate_engine::canon::input_hash(&input).unwrap(),
        input: Arc::new(input),
        literals: Default::default(),
        definition_hash: "sha256:definition-v1".into(),
        asks: vec![Ask::new(AskSource::PolicyRule(2), "refunds need a person")],
        run: RunContext {
            mode: RunMode::UseAgentPolicy,
            background: true,
        },
        turn: Some(Turn::new("session-unit", "turn-1")),
        ticket: None,
        target: None,
        approvals,
        labels: None,
    };
    NewHeldCall::from_request(&request, Timestamp::now(), ttl).unwrap()
}

/// A held call needing one approval ([`held_needing`]).
pub(crate) fn held(input: Value, ttl: Duration) -> NewHeldCall {
    held_needing(1, input, ttl)
}
