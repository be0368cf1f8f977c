//! Reloading under load (SPEC R22, R23): a policy or a whole configuration replaced while
//! calls are in flight never splits a decision. Every call is decided wholly by the old or
//! wholly by the new snapshot — the one the first toolgate layer pinned — and a refused
//! replacement keeps the old policy in force.
//!
//! The expected outcome of every call under each snapshot is computed up front with the
//! pure engine (`Governance::decide`); each outcome seen through the stack must be exactly
//! one of them, reasons included, so a decision that read a little of each would show.
//! The one composition allowed is R38's: a call asked about (and approved) under one
//! snapshot is checked again right before it is sent, by the snapshot then in force, whose
//! refusal wins — each half still one snapshot's whole decision.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use toolgate::approval::{ApprovalGateLayer, ApprovalOutcome, FnChannel};
use toolgate::{AirGapLayer, ConfidentialityLayer, ExposureLayer, GovernanceHandle};
use toolgate_core::{
    AgentRef, CallId, ChannelKind, Refusal, RefusalCode, RunContext, ToolCall, ToolOutput, ToolRef,
    ToolResponse, Verdict,
};
use toolgate_engine::config::{Format, load_str};
use toolgate_engine::policy::{Limits, Policy};
use toolgate_engine::{CallInput, CallView, Governance, PolicyState};
use tower::{Service, ServiceBuilder, ServiceExt, service_fn};

// ---------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------

fn load(config: &Value) -> Governance {
    load_str(&config.to_string(), Format::Json)
        .unwrap_or_else(|e| panic!("the fixture configuration must load: {e}"))
}

fn policy(json: &Value) -> PolicyState {
    PolicyState::readable(
        Policy::from_json(json, &Limits::default())
            .unwrap_or_else(|e| panic!("the fixture policy must be valid: {e}")),
    )
}

fn shop() -> Governance {
    load(&json!({
        "approval": {"channel": "interactive"},
        "tools": [
            {"kind": "http", "name": "refund_order"},
            {"kind": "http", "name": "refund_all"},
            {"kind": "http", "name": "lookup"},
            {"server": "shop", "name": "cancel_order", "annotations": {"openWorldHint": false}}
        ],
        "agents": [{"name": "support",
                    "allowed_tools": ["refund_order", "refund_all", "lookup", "shop__cancel_order"]}]
    }))
}

/// P1 denies refunds and lets every cancel through.
fn p1() -> PolicyState {
    policy(&json!({"rules": [
        {"effect": "deny", "tool": "refund_*", "reason": "P1: refunds are closed"},
        {"effect": "allow", "tool": "cancel_order"}
    ]}))
}

/// P2 asks a person about refunds and denies large cancels (`when`).
fn p2() -> PolicyState {
    policy(&json!({"rules": [
        {"effect": "ask", "tool": "refund_*", "reason": "P2: a person checks refunds"},
        {"effect": "deny", "tool": "cancel_order", "when": {"amount": {"gt": 100}},
         "reason": "P2: large cancels are denied"}
    ]}))
}

/// The calls of the load test: each is decided differently by P1 and P2, or the same.
fn shop_calls() -> Vec<(&'static str, Value)> {
    vec![
        ("refund_order", json!({"order": 1})),
        ("refund_all", json!({"amount": 5})),
        ("lookup", json!({})),
        ("shop__cancel_order", json!({"amount": 500})),
        ("shop__cancel_order", json!({"amount": 5})),
    ]
}

/// What a call came to, as the agent sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    /// Refused, with the whole refusal.
    Refused(Refusal),
    /// The tool ran; `question` holds the reasons of the one question asked first, if any.
    Ran { question: Option<Vec<String>> },
    /// R38: asked (with `question`'s reasons) and approved under one snapshot, then refused
    /// right before sending by the snapshot in force then (`refusal`, without the note that
    /// says a person had approved). Each half is one snapshot's whole decision.
    ApprovedThenRefused {
        question: Vec<String>,
        refusal: Refusal,
    },
}

/// Whether `got` is R38's composition of the two snapshots' whole decisions: asked under
/// one, refused by the other when the approved call was about to be sent.
fn approved_then_refused(got: &Outcome, first: &Outcome, second: &Outcome) -> bool {
    let Outcome::ApprovedThenRefused { question, refusal } = got else {
        return false;
    };
    let asked = |o: &Outcome| matches!(o, Outcome::Ran { question: Some(q) } if q == question);
    let refused = |o: &Outcome| matches!(o, Outcome::Refused(r) if r == refusal);
    (asked(first) && refused(second)) || (asked(second) && refused(first))
}

fn expected(gov: &Governance, agent: &str, tool: &str, input: &Value) -> Outcome {
    let tool = ToolRef::Name(tool.to_owned());
    let agent = AgentRef::profile(agent);
    let d = gov.decide(CallView {
        tool: &tool,
        agent: &agent,
        input: CallInput::Value(input),
        run: RunContext::default(),
    });
    match d.verdict {
        Verdict::Refused(_) => Outcome::Refused(d.refusal().expect("a refusal")),
        Verdict::Run { .. } => Outcome::Ran { question: None },
        Verdict::Ask { .. } => Outcome::Ran {
            question: Some(d.reasons),
        },
    }
}

/// Questions asked, by call id.
type Questions = Arc<Mutex<HashMap<CallId, Vec<String>>>>;

/// The full stack over a tool that echoes, with an approving channel that records every
/// question by call id. `between` runs between the exposure layer and the rest.
fn stack<F>(
    handle: &GovernanceHandle,
    between: F,
) -> (
    impl Service<ToolCall, Response = ToolResponse, Error = Infallible, Future: Send + 'static>
    + Clone
    + Send
    + 'static,
    Questions,
)
where
    F: Fn(ToolCall) -> ToolCall + Clone + Send + Sync + 'static,
{
    let questions: Questions = Arc::default();
    let q = Arc::clone(&questions);
    let channel = FnChannel::new(ChannelKind::Interactive, move |req| {
        q.lock().unwrap().insert(req.call_id.clone(), req.reasons());
        ApprovalOutcome::Approved {
            approver: String::from("alice"),
        }
    });
    let svc = ServiceBuilder::new()
        .layer(ExposureLayer::new(handle.clone()))
        .map_request(between)
        .layer(ConfidentialityLayer::new(handle.clone()))
        .layer(AirGapLayer::new(handle.clone()))
        .layer(ApprovalGateLayer::new(handle.clone()).channel(channel))
        .service(service_fn(|c: ToolCall| async move {
            Ok::<_, Infallible>(ToolResponse::Completed(ToolOutput::new(c.input)))
        }));
    (svc, questions)
}

fn identity(c: ToolCall) -> ToolCall {
    c
}

async fn send<S>(svc: S, questions: &Questions, agent: &str, tool: &str, input: &Value) -> Outcome
where
    S: Service<ToolCall, Response = ToolResponse, Error = Infallible>,
{
    let call = ToolCall::new(AgentRef::profile(agent), tool, input.clone());
    let id = call.id.clone();
    let response = svc.oneshot(call).await.unwrap_or_else(|e| match e {});
    let question = questions.lock().unwrap().remove(&id);
    match response {
        ToolResponse::Refused(r) => match question {
            None => Outcome::Refused(r),
            Some(question) => {
                // R38: only a refusal made after the approval, by the configuration in force.
                let mut refusal = r;
                let note = refusal.reasons.pop().unwrap_or_default();
                assert!(
                    note.contains("approved by alice")
                        && note.contains("refusal that arrives during the wait wins"),
                    "asked about a call that was then refused, without R38's re-check: {note:?}"
                );
                Outcome::ApprovedThenRefused { question, refusal }
            }
        },
        ToolResponse::Completed(out) => {
            assert_eq!(&out.content, input, "the tool got the input unchanged");
            Outcome::Ran { question }
        }
        other => panic!("unexpected response {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------
// R23 under load
// ---------------------------------------------------------------------------------------

/// Alternates `swap(true)` / `swap(false)` while `calls` run on every worker, until each
/// call whose outcomes differ has been seen under both snapshots. Every outcome must be
/// one of the two expected ones.
async fn hammer(
    handle: GovernanceHandle,
    swap: impl Fn(&GovernanceHandle, bool) + Send + 'static,
    agent: &'static str,
    calls: Vec<(&'static str, Value, Outcome, Outcome)>,
) {
    let distinguishing: Vec<usize> = calls
        .iter()
        .enumerate()
        .filter(|(_, c)| c.2 != c.3)
        .map(|(i, _)| i)
        .collect();
    assert!(
        !distinguishing.is_empty(),
        "the two snapshots must differ somewhere"
    );
    let calls = Arc::new(calls);
    let seen: Arc<Vec<[AtomicUsize; 2]>> =
        Arc::new((0..calls.len()).map(|_| Default::default()).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicUsize::new(0));

    let swapper = {
        let (handle, stop, swaps) = (handle.clone(), Arc::clone(&stop), Arc::clone(&swaps));
        tokio::spawn(async move {
            let mut first = true;
            while !stop.load(Ordering::SeqCst) {
                swap(&handle, first);
                first = !first;
                swaps.fetch_add(1, Ordering::SeqCst);
                tokio::task::yield_now().await;
            }
        })
    };

    let (svc, questions) = stack(&handle, identity);
    let done = {
        let (seen, distinguishing) = (Arc::clone(&seen), distinguishing.clone());
        move || {
            distinguishing.iter().all(|&i| {
                seen[i][0].load(Ordering::SeqCst) > 0 && seen[i][1].load(Ordering::SeqCst) > 0
            })
        }
    };
    let mut workers = Vec::new();
    for w in 0..8usize {
        let (svc, questions, calls, seen, done) = (
            svc.clone(),
            Arc::clone(&questions),
            Arc::clone(&calls),
            Arc::clone(&seen),
            done.clone(),
        );
        workers.push(tokio::spawn(async move {
            let mut n = 0usize;
            while n < 200 || (!done() && n < 100_000) {
                let i = (n + w) % calls.len();
                let (tool, input, under_first, under_second) = &calls[i];
                let got = send(svc.clone(), &questions, agent, tool, input).await;
                if &got == under_first {
                    seen[i][0].fetch_add(1, Ordering::SeqCst);
                }
                if &got == under_second {
                    seen[i][1].fetch_add(1, Ordering::SeqCst);
                }
                assert!(
                    &got == under_first
                        || &got == under_second
                        || approved_then_refused(&got, under_first, under_second),
                    "R23: `{tool}` {input} was decided by neither snapshot:\n got {got:?}\n first {under_first:?}\n second {under_second:?}"
                );
                n += 1;
                tokio::task::yield_now().await;
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    stop.store(true, Ordering::SeqCst);
    swapper.await.unwrap();
    assert!(
        done(),
        "every differing call was seen under both snapshots (swaps: {})",
        swaps.load(Ordering::SeqCst)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r23_replace_policy_under_load_decides_each_call_by_one_policy() {
    let base = shop();
    let under_p1 = base.with_policy(p1()).unwrap();
    let under_p2 = base.with_policy(p2()).unwrap();
    let calls: Vec<_> = shop_calls()
        .into_iter()
        .map(|(tool, input)| {
            let a = expected(&under_p1, "support", tool, &input);
            let b = expected(&under_p2, "support", tool, &input);
            (tool, input, a, b)
        })
        .collect();
    // The fixtures decide as documented: refunds denied by P1, asked by P2; a large cancel
    // allowed by P1, denied by P2; the rest the same.
    assert!(matches!(&calls[0].2, Outcome::Refused(r) if r.code == RefusalCode::Denied));
    assert!(
        matches!(&calls[0].3, Outcome::Ran { question: Some(q) } if q == &["P2: a person checks refunds"])
    );
    assert_eq!(calls[3].2, Outcome::Ran { question: None });
    assert!(
        matches!(&calls[3].3, Outcome::Refused(r) if r.reasons == ["P2: large cancels are denied"])
    );
    assert_eq!(calls[2].2, calls[2].3);

    let handle = GovernanceHandle::new(under_p1);
    hammer(
        handle,
        |h, first| {
            h.replace_policy(if first { p1() } else { p2() })
                .expect("both policies are valid");
        },
        "support",
        calls,
    )
    .await;
}

/// Two whole snapshots that refuse the same call at different layers, so a call that read
/// one layer's answer from each would come out as neither: under A, `x` is not allowed
/// (step 2) and the agent is confidential; under B, `x` is allowed, the agent is not
/// confidential, and the host is air-gapped (step 4). Read half from each — exposure from
/// B, confidentiality from A — and `x` would be refused `confidential`.
fn snapshots() -> (Governance, Governance) {
    let tools = json!([
        {"kind": "http", "name": "x", "confidential": true, "network": "egress"},
        {"kind": "http", "name": "y"}
    ]);
    let a = load(&json!({
        "approval": {"channel": "interactive"},
        "air_gapped": false,
        "tools": tools,
        "agents": [{"name": "dev", "confidential": true, "allowed_tools": ["y"]}],
        "policy": {"rules": [{"effect": "ask", "tool": "y", "reason": "A asks about y"}]}
    }));
    let b = load(&json!({
        "approval": {"channel": "interactive"},
        "air_gapped": true,
        "tools": tools,
        "agents": [{"name": "dev", "confidential": false, "allowed_tools": ["x"]}]
    }));
    (a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r23_store_under_load_decides_each_call_by_one_snapshot() {
    let (a, b) = snapshots();
    let calls: Vec<_> = [("x", json!({})), ("y", json!({"n": 1}))]
        .into_iter()
        .map(|(tool, input)| {
            let under_a = expected(&a, "dev", tool, &input);
            let under_b = expected(&b, "dev", tool, &input);
            (tool, input, under_a, under_b)
        })
        .collect();
    let code = |o: &Outcome| match o {
        Outcome::Refused(r) | Outcome::ApprovedThenRefused { refusal: r, .. } => Some(r.code),
        Outcome::Ran { .. } => None,
    };
    assert_eq!(code(&calls[0].2), Some(RefusalCode::NotAllowed));
    assert_eq!(code(&calls[0].3), Some(RefusalCode::AirGapped));
    assert!(matches!(&calls[1].2, Outcome::Ran { question: Some(q) } if q == &["A asks about y"]));
    assert_eq!(code(&calls[1].3), Some(RefusalCode::NotAllowed));

    let handle = GovernanceHandle::new(a.clone());
    hammer(
        handle,
        move |h, first| h.store(if first { a.clone() } else { b.clone() }),
        "dev",
        calls,
    )
    .await;
}

// ---------------------------------------------------------------------------------------
// R23: a call is pinned to one snapshot by the first layer it meets
// ---------------------------------------------------------------------------------------

/// A layer between exposure and the rest that replaces the handle's snapshot mid-call.
fn replace_with(
    handle: &GovernanceHandle,
    next: Governance,
) -> impl Fn(ToolCall) -> ToolCall + Clone + Send + Sync + 'static {
    let handle = handle.clone();
    move |c: ToolCall| {
        handle.store(next.clone());
        c
    }
}

#[tokio::test]
async fn r23_call_pinned_by_outer_layer_is_decided_by_that_snapshot_at_the_gate() {
    let base = shop();
    let under_p1 = base.with_policy(p1()).unwrap();
    let under_p2 = base.with_policy(p2()).unwrap();
    let input = json!({"order": 7});
    let deny = expected(&under_p1, "support", "refund_order", &input);
    let ask = expected(&under_p2, "support", "refund_order", &input);
    assert_ne!(deny, ask);

    // Pinned to P1 by exposure; P2 is stored before the gate decides: P1 decides.
    let handle = GovernanceHandle::new(under_p1.clone());
    let (svc, questions) = stack(&handle, replace_with(&handle, under_p2.clone()));
    let got = send(svc.clone(), &questions, "support", "refund_order", &input).await;
    assert_eq!(got, deny, "decided wholly by the snapshot pinned at entry");
    assert!(
        matches!(handle.load().policy(), PolicyState::Readable(p) if p.rules().len() == 2 && p.rules()[0].reason() == Some("P2: a person checks refunds")),
        "the replacement did happen mid-call"
    );
    // The next call enters under P2.
    let got = send(svc, &questions, "support", "refund_order", &input).await;
    assert_eq!(got, ask);

    // And the other way round: pinned to P2 (ask, approved), P1 stored mid-call. The
    // question is asked with P2's reasons only; then, right before the approved call is
    // sent, P1 — the configuration in force — refuses it, and its refusal wins (R38).
    let handle = GovernanceHandle::new(under_p2);
    let (svc, questions) = stack(&handle, replace_with(&handle, under_p1));
    let got = send(svc, &questions, "support", "refund_order", &input).await;
    let (
        Outcome::Ran {
            question: Some(question),
        },
        Outcome::Refused(refusal),
    ) = (ask, deny)
    else {
        panic!("P2 asks and P1 denies");
    };
    assert_eq!(got, Outcome::ApprovedThenRefused { question, refusal });
}

#[tokio::test]
async fn r23_call_pinned_by_outer_layer_is_decided_by_that_snapshot_in_every_filter() {
    let (a, b) = snapshots();
    let x = json!({});
    let under_b = expected(&b, "dev", "x", &x);
    assert!(matches!(&under_b, Outcome::Refused(r) if r.code == RefusalCode::AirGapped));

    // Enters under B (exposure passes `x`); A is stored before confidentiality runs. Had
    // confidentiality read A, `x` would be refused `confidential`.
    let handle = GovernanceHandle::new(b.clone());
    let (svc, questions) = stack(&handle, replace_with(&handle, a.clone()));
    let got = send(svc, &questions, "dev", "x", &x).await;
    assert_eq!(got, under_b);

    // Control: the same replacement *in front of* every layer changes the outcome to A's,
    // so the layer above really replaces the snapshot.
    let handle = GovernanceHandle::new(b);
    let (svc, questions) = stack(&handle, identity);
    let swap_first = {
        let h = handle.clone();
        tower::util::MapRequest::new(svc, move |c: ToolCall| {
            h.store(a.clone());
            c
        })
    };
    let got = send(swap_first, &questions, "dev", "x", &x).await;
    assert!(
        matches!(&got, Outcome::Refused(r) if r.code == RefusalCode::NotAllowed),
        "{got:?}"
    );
}

#[tokio::test]
async fn r23_gate_alone_pins_too() {
    // A call that already carries a snapshot pinned by an outer toolgate layer of the same
    // handle is decided by it even by a gate used on its own. (A pin can be made only by
    // toolgate, and only a layer of the handle that made it reads it.)
    let base = shop();
    let under_p1 = base.with_policy(p1()).unwrap();
    let under_p2 = base.with_policy(p2()).unwrap();
    let input = json!({});
    let handle = GovernanceHandle::new(under_p1.clone());
    let mut call = ToolCall::new(AgentRef::profile("support"), "refund_all", input.clone());
    let pinned = handle.pin(&mut call);
    assert!(Arc::ptr_eq(&pinned, &handle.load()));
    handle.store(under_p2);
    let gate = ServiceBuilder::new()
        .layer(ApprovalGateLayer::new(handle))
        .service(service_fn(|_c: ToolCall| async {
            Ok::<_, Infallible>(ToolResponse::Completed(ToolOutput::new(json!("ran"))))
        }));
    let got = gate.oneshot(call).await.unwrap();
    let want = expected(&under_p1, "support", "refund_all", &input);
    assert_eq!(got.refusal().cloned().map(Outcome::Refused), Some(want));
}

// ---------------------------------------------------------------------------------------
// R22: a refused replacement keeps the old policy
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn r22_refused_replace_policy_keeps_the_old_policy() {
    // The governor is disarmed: only an empty policy may be set (R15).
    let gov = load(&json!({
        "enforce_tool_invocation": false,
        "tools": [{"kind": "http", "name": "refund_order"}],
        "agents": [{"name": "support", "allowed_tools": ["refund_order"]}]
    }));
    let handle = GovernanceHandle::new(gov);
    let before = handle.load();
    let (svc, questions) = stack(&handle, identity);
    let input = json!({"amount": 5});
    assert_eq!(
        send(svc.clone(), &questions, "support", "refund_order", &input).await,
        Outcome::Ran { question: None }
    );

    let err = handle
        .replace_policy(p1())
        .expect_err("R15: a non-empty policy with the governor disarmed is refused");
    assert_eq!(err.errors[0].path, "policy", "{err}");
    assert!(
        Arc::ptr_eq(&before, &handle.load()),
        "R22: the refused update left the snapshot untouched"
    );
    assert_eq!(
        send(svc.clone(), &questions, "support", "refund_order", &input).await,
        Outcome::Ran { question: None },
        "the old (empty) policy is still in force"
    );

    // An empty policy is accepted, and replaces the snapshot.
    handle.replace_policy(PolicyState::default()).unwrap();
    assert!(!Arc::ptr_eq(&before, &handle.load()));
}

#[tokio::test]
async fn r22_refused_update_keeps_the_previous_policy_in_force() {
    let handle = GovernanceHandle::new(shop());
    handle.replace_policy(p1()).unwrap();
    let (svc, questions) = stack(&handle, identity);
    let input = json!({});
    let under_p1 = expected(&handle.load(), "support", "refund_order", &input);
    assert!(matches!(&under_p1, Outcome::Refused(r) if r.reasons == ["P1: refunds are closed"]));

    // An invalid update (R22: unknown effect, a `tool` with `__`) never becomes a policy…
    for bad in [
        json!({"rules": [{"effect": "maybe", "tool": "refund_*"}]}),
        json!({"rules": [{"effect": "allow", "tool": "shop__cancel_order"}]}),
    ] {
        assert!(
            Policy::from_json(&bad, &Limits::default()).is_err(),
            "{bad}"
        );
    }
    // …so the handle still decides by P1.
    assert_eq!(
        send(svc.clone(), &questions, "support", "refund_order", &input).await,
        under_p1
    );

    // A stored policy that cannot be read refuses mcp/http calls until a valid one replaces
    // it (R22); the valid replacement takes over at once.
    handle
        .replace_policy(PolicyState::Unreadable(String::from("truncated file")))
        .unwrap();
    let got = send(svc.clone(), &questions, "support", "lookup", &input).await;
    assert!(
        matches!(&got, Outcome::Refused(r) if r.code == RefusalCode::PolicyUnreadable),
        "{got:?}"
    );
    handle.replace_policy(p2()).unwrap();
    assert_eq!(
        send(svc, &questions, "support", "lookup", &input).await,
        Outcome::Ran { question: None }
    );
}

/// `GovernanceHandle::replace_policy` must answer for what it did: `Err` means the old
/// policy is still in force (R22). Here one thread flips the snapshot between a disarmed
/// configuration (which refuses a non-empty policy, R15) and an armed one, while another
/// replaces the policy with a fresh one each time and, on `Err`, checks that its policy did
/// not become the one in force.
///
/// Regression guard for a race in `replace_policy`: it calls `ArcSwap::rcu` with a closure
/// that records an error in a captured `Option` but never clears it. When a first attempt
/// sees the disarmed snapshot (error recorded) and a concurrent `store` makes the CAS
/// retry against the armed one, the retry succeeds and installs the new policy — and the
/// stale error is still returned.
#[test]
fn r22_replace_policy_err_means_the_new_policy_is_not_in_force() {
    let tools = json!([{"kind": "http", "name": "refund_order"}]);
    let agents = json!([{"name": "support", "allowed_tools": ["refund_order"]}]);
    let armed = load(&json!({"tools": tools, "agents": agents}));
    let disarmed =
        load(&json!({"enforce_tool_invocation": false, "tools": tools, "agents": agents}));
    let handle = GovernanceHandle::new(armed.clone());
    let stop = Arc::new(AtomicBool::new(false));
    let flipper = {
        let (handle, stop) = (handle.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let spin = || {
                let t = std::time::Instant::now();
                while t.elapsed() < std::time::Duration::from_micros(20) {
                    std::hint::spin_loop();
                }
            };
            while !stop.load(Ordering::SeqCst) {
                handle.store(disarmed.clone());
                spin();
                handle.store(armed.clone());
                spin();
            }
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    let mut found = None;
    let mut attempts = 0u64;
    while found.is_none() && std::time::Instant::now() < deadline {
        attempts += 1;
        let reason = format!("update {attempts}");
        let next = policy(&json!({"rules": [{"effect": "deny", "reason": reason}]}));
        if handle.replace_policy(next).is_err() {
            let now = handle.load();
            let in_force = matches!(
                now.policy(),
                PolicyState::Readable(p) if p.rules().first().and_then(|r| r.reason()) == Some(reason.as_str())
            );
            if in_force {
                found = Some(reason);
            }
        }
    }
    stop.store(true, Ordering::SeqCst);
    flipper.join().unwrap();
    assert_eq!(
        found, None,
        "replace_policy returned Err, yet its policy is in force (after {attempts} attempts)"
    );
}
