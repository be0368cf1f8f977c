//! Numbers as written (issue 9, findings 5 and 6): integers past 64 bits compare by their
//! digits in `when` tests (R20), and the input size bound counts each number as written
//! (R36, SPEC §8), in `decide` over CALL text and in a real tower stack.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use toolgate::approval::ApprovalGateLayer;
use toolgate::{ExposureLayer, GovernanceHandle};
use toolgate_core::number::parse_with_literals;
use toolgate_core::{
    AgentRef, Decision, RefusalCode, RunContext, ToolCall, ToolOutput, ToolRef, ToolResponse,
    Verdict,
};
use toolgate_engine::config::{Format, load_str};
use toolgate_engine::{CallInput, CallView, Governance};
use tower::{ServiceBuilder, ServiceExt, service_fn};

/// A configuration whose policy text carries integer literals past 64 bits.
fn config(max_input_bytes: usize) -> String {
    format!(
        r#"{{
        "limits": {{"max_input_bytes": {max_input_bytes}}},
        "tools": [{{"kind": "http", "name": "refund"}}, {{"kind": "http", "name": "transfer"}},
                  {{"kind": "http", "name": "echo"}}],
        "agents": [{{"name": "dev", "allowed_tools": ["refund", "transfer", "echo"]}}],
        "policy": {{"default": "deny", "rules": [
            {{"effect": "deny", "tool": "refund", "when": {{"amount": {{"gt": 18446744073709551616}}}}}},
            {{"effect": "allow", "tool": "refund"}},
            {{"effect": "allow", "tool": "transfer", "when": {{"amount": {{"equals": 18446744073709551617}}}}}},
            {{"effect": "allow", "tool": "transfer", "when": {{"account": {{"in": [-340282366920938463463374607431768211457, 7]}}}}}},
            {{"effect": "allow", "tool": "echo"}}
        ]}}
    }}"#
    )
}

fn gov(max_input_bytes: usize) -> Governance {
    load_str(&config(max_input_bytes), Format::Json).expect("the configuration loads")
}

fn decide_text(gov: &Governance, tool: &str, input: &str) -> Decision {
    let tool = ToolRef::Name(tool.to_owned());
    let agent = AgentRef::profile("dev");
    gov.decide(CallView {
        tool: &tool,
        agent: &agent,
        input: CallInput::Text(input),
        run: RunContext::default(),
    })
}

fn runs(d: &Decision) -> bool {
    matches!(d.verdict, Verdict::Run { .. })
}

fn code(d: &Decision) -> Option<RefusalCode> {
    d.refusal().map(|r| r.code)
}

#[test]
fn r20_integers_past_64_bits_compare_by_their_digits_in_decide() {
    let g = gov(1 << 20);
    // `deny when amount gt 2^64`: 2^64 + 1 is greater, though both round to the same double.
    let d = decide_text(&g, "refund", r#"{"amount": 18446744073709551617}"#);
    assert_eq!(code(&d), Some(RefusalCode::Denied), "{d:?}");
    assert!(runs(&decide_text(
        &g,
        "refund",
        r#"{"amount": 18446744073709551616}"#
    )));
    assert!(runs(&decide_text(
        &g,
        "refund",
        r#"{"amount": 18446744073709551615}"#
    )));
    // `equals` and `in` under `default: deny` never over-match.
    assert!(runs(&decide_text(
        &g,
        "transfer",
        r#"{"amount": 18446744073709551617}"#
    )));
    for near in [
        "18446744073709551616",
        "18446744073709551618",
        "1.8446744073709552e19",
    ] {
        let d = decide_text(&g, "transfer", &format!(r#"{{"amount": {near}}}"#));
        assert_eq!(code(&d), Some(RefusalCode::Denied), "{near}: {d:?}");
    }
    assert!(runs(&decide_text(
        &g,
        "transfer",
        r#"{"account": -340282366920938463463374607431768211457}"#
    )));
    let d = decide_text(
        &g,
        "transfer",
        r#"{"account": -340282366920938463463374607431768211456}"#,
    );
    assert_eq!(code(&d), Some(RefusalCode::Denied), "{d:?}");
}

#[test]
fn r36_the_size_bound_counts_numbers_as_written_in_decide() {
    // `{"x":10000000000000000000000}` is 29 bytes compact; its double prints as `1e22`.
    let text = r#"{"x":10000000000000000000000}"#;
    assert_eq!(text.len(), 29);
    let d = decide_text(&gov(20), "echo", text);
    assert_eq!(code(&d), Some(RefusalCode::InvalidInput), "{d:?}");
    assert!(
        runs(&decide_text(&gov(29), "echo", text)),
        "exactly at the bound runs"
    );
    assert_eq!(
        code(&decide_text(&gov(28), "echo", text)),
        Some(RefusalCode::InvalidInput)
    );
    // Whitespace is not counted; a long fraction is counted as written.
    assert!(runs(&decide_text(
        &gov(29),
        "echo",
        r#"{ "x" : 10000000000000000000000 }"#
    )));
    let long = format!(r#"{{"x":0.{}1}}"#, "0".repeat(100));
    assert_eq!(
        code(&decide_text(&gov(100), "echo", &long)),
        Some(RefusalCode::InvalidInput)
    );
}

type Svc = tower::util::BoxCloneService<ToolCall, ToolResponse, std::convert::Infallible>;

fn stack(max_input_bytes: usize, sent: Arc<AtomicUsize>) -> Svc {
    let handle = GovernanceHandle::new(gov(max_input_bytes));
    let svc = ServiceBuilder::new()
        .layer(ExposureLayer::new(handle.clone()))
        .layer(ApprovalGateLayer::new(handle))
        .service(service_fn(move |call: ToolCall| {
            sent.fetch_add(1, Ordering::SeqCst);
            async move {
                Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::new(
                    call.input,
                )))
            }
        }));
    tower::util::BoxCloneService::new(svc)
}

/// A call parsed from the model's text, keeping its literals.
fn call_from_text(tool: &str, text: &str) -> ToolCall {
    let (input, literals) = parse_with_literals(text).expect("JSON");
    let mut call = ToolCall::new(AgentRef::profile("dev"), tool, input);
    call.extensions.insert(literals);
    call
}

async fn send(svc: &Svc, call: ToolCall) -> ToolResponse {
    svc.clone().oneshot(call).await.expect("infallible")
}

#[tokio::test]
async fn r20_r36_the_stack_reads_numbers_as_written() {
    let sent = Arc::new(AtomicUsize::new(0));
    let svc = stack(20, sent.clone());
    let resp = send(
        &svc,
        call_from_text("echo", r#"{"x":10000000000000000000000}"#),
    )
    .await;
    assert_eq!(
        resp.refusal().map(|r| r.code),
        Some(RefusalCode::InvalidInput),
        "{resp:?}"
    );
    let svc = stack(1 << 20, sent.clone());
    let resp = send(
        &svc,
        call_from_text("refund", r#"{"amount":18446744073709551617}"#),
    )
    .await;
    assert_eq!(
        resp.refusal().map(|r| r.code),
        Some(RefusalCode::Denied),
        "{resp:?}"
    );
    let resp = send(
        &svc,
        call_from_text("transfer", r#"{"amount":18446744073709551616}"#),
    )
    .await;
    assert_eq!(
        resp.refusal().map(|r| r.code),
        Some(RefusalCode::Denied),
        "{resp:?}"
    );
    assert_eq!(sent.load(Ordering::SeqCst), 0, "no refused call was sent");
    let resp = send(
        &svc,
        call_from_text("transfer", r#"{"amount":18446744073709551617}"#),
    )
    .await;
    assert!(matches!(resp, ToolResponse::Completed(_)), "{resp:?}");
    assert_eq!(sent.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn r20_a_call_built_from_a_value_is_decided_on_the_number_it_carries() {
    // Without literals the value holds the nearest double (2^64), which is also what the
    // tool is sent: it is not greater than 2^64 and not 2^64 + 1.
    let sent = Arc::new(AtomicUsize::new(0));
    let svc = stack(1 << 20, sent.clone());
    let rounded: Value = serde_json::from_str(r#"{"amount":18446744073709551617}"#).unwrap();
    assert_eq!(rounded, json!({"amount": 18446744073709551616.0}));
    let resp = send(
        &svc,
        ToolCall::new(AgentRef::profile("dev"), "refund", rounded.clone()),
    )
    .await;
    assert!(matches!(resp, ToolResponse::Completed(_)), "{resp:?}");
    let resp = send(
        &svc,
        ToolCall::new(AgentRef::profile("dev"), "transfer", rounded),
    )
    .await;
    assert_eq!(
        resp.refusal().map(|r| r.code),
        Some(RefusalCode::Denied),
        "{resp:?}"
    );
    // Literals that no longer describe the value are ignored: the value decides.
    let mut call = call_from_text("refund", r#"{"amount":18446744073709551617}"#);
    call.input = json!({"amount": 5});
    assert!(matches!(send(&svc, call).await, ToolResponse::Completed(_)));
}
