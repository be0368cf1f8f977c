//! A pin is about one call (R14, R23, R38): a pin kept from one call and put on another —
//! after a reload that denies the tool — is ignored, and the other call is decided by the
//! snapshot in force. It never gets the old snapshot's decision, and the tool never runs.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;
use toolgate::approval::ApprovalGateLayer;
use toolgate::{ExposureLayer, GovernanceHandle, Pinned};
use toolgate_core::{AgentRef, CallId, RefusalCode, ToolCall, ToolOutput, ToolResponse};
use toolgate_engine::PolicyState;
use toolgate_engine::config::{Format, load_str};
use toolgate_engine::policy::{Limits, Policy};
use tower::{Layer, ServiceExt, service_fn};

const CONFIG: &str = r#"{
    "tools": [{"kind": "http", "name": "lookup"}, {"kind": "http", "name": "refund"}],
    "agents": [{"name": "dev", "allowed_tools": ["lookup", "refund"]}]
}"#;

fn handle() -> GovernanceHandle {
    GovernanceHandle::new(load_str(CONFIG, Format::Json).unwrap())
}

fn deny_everything(h: &GovernanceHandle) {
    let deny = Policy::from_json_str(
        r#"{"rules": [{"effect": "deny", "reason": "reloaded: nothing runs"}]}"#,
        &Limits::default(),
    )
    .unwrap();
    h.replace_policy(PolicyState::readable(deny)).unwrap();
}

fn dev(tool: &str, input: serde_json::Value) -> ToolCall {
    ToolCall::new(AgentRef::profile("dev"), tool, input)
}

/// The gate (and, with `exposure`, the exposure filter in front of it) over a tool that
/// counts the calls it runs.
async fn send(
    h: &GovernanceHandle,
    exposure: bool,
    hits: &Arc<AtomicUsize>,
    call: ToolCall,
) -> ToolResponse {
    let ran = Arc::clone(hits);
    let tool = service_fn(move |_c: ToolCall| {
        ran.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, Infallible>(ToolResponse::Completed(ToolOutput::new(json!("ok")))) }
    });
    let gated = ApprovalGateLayer::new(h.clone()).layer(tool);
    if exposure {
        ExposureLayer::new(h.clone())
            .layer(gated)
            .oneshot(call)
            .await
            .unwrap()
    } else {
        gated.oneshot(call).await.unwrap()
    }
}

/// A pin taken off call A: decided (as the first deciding layer leaves it) or only pinned.
fn kept_pin(h: &GovernanceHandle, decided: bool, a: &mut ToolCall) -> Pinned {
    if decided {
        assert!(h.decide(a).decision().runs(), "A runs before the reload");
    } else {
        h.pin(a);
    }
    a.extensions.remove::<Pinned>().unwrap()
}

#[tokio::test(flavor = "current_thread")]
async fn r23_r38_a_pin_kept_from_one_call_does_not_decide_another_after_a_reload() {
    for decided in [true, false] {
        for exposure in [false, true] {
            // B: the same tool and input as A (another id), or another tool and input.
            for (tool, input) in [("lookup", json!({})), ("refund", json!({"amount": 5}))] {
                let case = format!("decided {decided}, exposure {exposure}, B calls `{tool}`");
                let h = handle();
                let hits = Arc::new(AtomicUsize::new(0));
                let mut a = dev("lookup", json!({}));
                let pin = kept_pin(&h, decided, &mut a);
                deny_everything(&h);

                let mut b = dev(tool, input);
                b.extensions.insert(pin);
                let r = send(&h, exposure, &hits, b).await;
                let refusal = r.refusal().unwrap_or_else(|| panic!("{case}: {r:?}"));
                assert_eq!(refusal.code, RefusalCode::Denied, "{case}: {r:?}");
                assert!(
                    refusal.reasons.iter().any(|x| x.contains("reloaded")),
                    "{case}: decided by the snapshot in force: {r:?}"
                );
                assert_eq!(hits.load(Ordering::SeqCst), 0, "{case}: the tool never ran");
            }
        }
    }
}

#[tokio::test(flavor = "current_thread")]
async fn r23_r38_a_pin_put_on_a_call_reusing_its_id_with_other_contents_is_ignored() {
    // The thief also copies A's id onto B: B's contents differ, so the pin is not about it.
    for decided in [true, false] {
        let h = handle();
        let hits = Arc::new(AtomicUsize::new(0));
        let mut a = dev("lookup", json!({})).with_id(CallId::new("call-a"));
        let pin = kept_pin(&h, decided, &mut a);
        deny_everything(&h);

        let mut b = dev("refund", json!({"amount": 5})).with_id(CallId::new("call-a"));
        b.extensions.insert(pin);
        let r = send(&h, false, &hits, b).await;
        assert_eq!(
            r.refusal().map(|r| r.code),
            Some(RefusalCode::Denied),
            "decided {decided}: {r:?}"
        );
        assert_eq!(hits.load(Ordering::SeqCst), 0, "the tool never ran");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn r23_a_call_keeps_its_own_pin_across_a_reload() {
    // What the binding must not break: the call the pin was made for is still decided by
    // its snapshot when the configuration is replaced mid-call.
    let h = handle();
    let hits = Arc::new(AtomicUsize::new(0));
    let mut a = dev("lookup", json!({}));
    assert!(h.decide(&mut a).decision().runs());
    deny_everything(&h);
    let r = send(&h, true, &hits, a).await;
    assert!(matches!(r, ToolResponse::Completed(_)), "{r:?}");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}
