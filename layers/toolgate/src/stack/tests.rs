use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use toolgate_core::{AgentRef, Check, RefusalCode, ToolOutput};
use toolgate_engine::config::{Format, load_str};
use tower::{ServiceBuilder, ServiceExt, service_fn};

use super::*;
use crate::approval::{ApprovalOutcome, FnChannel, Hooks};
use crate::audit::MemorySink;
use crate::filter::FilterCheck;

const SSN: &str = "078-05-1120";

fn handle(extra: &str) -> GovernanceHandle {
    let config = format!(
        r#"{{ {extra}
                "air_gapped": true,
                "tools": [{{"kind": "http", "name": "lookup"}},
                          {{"kind": "http", "name": "refund", "approval": "require_approval"}},
                          {{"kind": "http", "name": "fetch", "network": "egress"}}],
                "agents": [{{"name": "dev", "allowed_tools": ["lookup", "refund", "fetch"]}}] }}"#
    );
    GovernanceHandle::new(load_str(&config, Format::Json).unwrap())
}

fn approver() -> FnChannel<impl Fn(&crate::approval::ApprovalRequest) -> ApprovalOutcome> {
    FnChannel::new(ChannelKind::Interactive, |_r| ApprovalOutcome::Approved {
        approver: "alice".into(),
    })
}

/// A tool that answers with the SSN it was given, and counts its calls.
fn tool(
    hits: Arc<AtomicUsize>,
) -> impl Service<ToolCall, Response = ToolResponse, Error = Infallible, Future = impl Send + 'static>
+ Clone
+ Send
+ 'static {
    service_fn(move |c: ToolCall| {
        hits.fetch_add(1, Ordering::SeqCst);
        async move {
            Ok::<_, Infallible>(ToolResponse::Completed(ToolOutput::new(json!({
                "customer": "Ada", "ssn": SSN, "echo": c.input,
            }))))
        }
    })
}

fn paths(e: &ConfigErrors) -> Vec<&str> {
    e.errors.iter().map(|e| e.path.as_str()).collect()
}

#[tokio::test]
async fn r33_the_redaction_section_reaches_the_audit_file_and_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("audit.jsonl");
    let extra = format!(
        r#""redaction": {{"keys": ["ssn"], "scrub_output": true}},
               "audit": {{"file": {}, "include_input": true, "include_output": true}},"#,
        Value::from(file.to_str().unwrap())
    );
    let governed = ToolgateLayer::builder(handle(&extra)).build().unwrap();
    assert!(governed.audits() && governed.scrubs_output());
    let hits = Arc::new(AtomicUsize::new(0));
    let stack = ServiceBuilder::new()
        .layer(governed)
        .service(tool(Arc::clone(&hits)));
    let dev = AgentRef::profile("dev");
    let out = stack
        .clone()
        .oneshot(ToolCall::new(dev.clone(), "lookup", json!({"ssn": SSN})))
        .await
        .unwrap();
    let ToolResponse::Completed(out) = out else {
        panic!("{out:?}")
    };
    assert_eq!(out.content["customer"], "Ada");
    assert!(!out.content.to_string().contains(SSN), "{}", out.content);
    // A refused call is audited too: audit is outside exposure.
    let refused = stack
        .oneshot(ToolCall::new(dev, "nope", json!({"ssn": SSN})))
        .await
        .unwrap();
    assert_eq!(refused.refusal().unwrap().code, RefusalCode::UnknownTool);
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(text.contains(r#""refusal":"unknown_tool""#), "{text}");
    assert!(text.contains(r#""output""#) && text.contains(r#""input""#));
    assert!(!text.contains(SSN), "{text}");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn r33_without_scrub_output_the_model_gets_the_tool_output() {
    let governed = ToolgateLayer::builder(handle(r#""redaction": {"keys": ["ssn"]},"#))
        .build()
        .unwrap();
    assert!(!governed.audits() && !governed.scrubs_output());
    let out = ServiceBuilder::new()
        .layer(governed)
        .service(tool(Arc::default()))
        .oneshot(ToolCall::new(AgentRef::profile("dev"), "lookup", json!({})))
        .await
        .unwrap();
    let ToolResponse::Completed(out) = out else {
        panic!("{out:?}")
    };
    assert_eq!(out.content["ssn"], SSN);
}

#[test]
fn r26_a_missing_or_wrong_channel_is_a_build_error_at_approval_channel() {
    let interactive = r#""approval": {"channel": "interactive"},"#;
    let e = ToolgateLayer::builder(handle(interactive))
        .build()
        .unwrap_err();
    assert_eq!(paths(&e), ["approval.channel"]);
    assert!(e.to_string().contains("no `interactive` channel"), "{e}");

    let inbox = r#""approval": {"channel": "inbox"},"#;
    let e = ToolgateLayer::builder(handle(inbox))
        .channel(approver())
        .build()
        .unwrap_err();
    assert_eq!(paths(&e), ["approval.channel", "approval.channel"]);
    assert!(
        e.to_string().contains("`inbox`") && e.to_string().contains("`interactive`"),
        "{e}"
    );

    // A channel nobody would ever be routed to is a mistake too.
    let e = ToolgateLayer::builder(handle(""))
        .channel(approver())
        .build()
        .unwrap_err();
    assert_eq!(paths(&e), ["approval.channel"]);

    assert!(
        ToolgateLayer::builder(handle(interactive))
            .channel(approver())
            .build()
            .is_ok()
    );
    assert!(ToolgateLayer::builder(handle("")).build().is_ok());
}

/// A channel that never answers.
#[derive(Debug)]
struct Silent(ChannelKind);

impl ApprovalChannel for Silent {
    fn kind(&self) -> ChannelKind {
        self.0
    }
    fn request(
        &self,
        _r: crate::approval::ApprovalRequest,
    ) -> crate::approval::BoxFuture<ApprovalOutcome> {
        Box::pin(std::future::pending())
    }
}

const PER_AGENT: &str = r#"{
        "approval": {"channel": "interactive"},
        "audit": {"include_input": false},
        "tools": [{"kind": "http", "name": "refund", "approval": "require_approval"}],
        "agents": [
            {"name": "dev", "allowed_tools": ["refund"]},
            {"name": "nightly", "allowed_tools": ["refund"],
             "approval": {"channel": "inbox", "timeout_secs": 30},
             "audit": {"include_input": true}},
            {"name": "nightly-sub", "parent": "nightly", "allowed_tools": ["refund"]}
        ]
    }"#;

fn counting(kind: ChannelKind, n: &Arc<AtomicUsize>) -> Arc<dyn ApprovalChannel> {
    let n = Arc::clone(n);
    Arc::new(FnChannel::new(kind, move |_r| {
        n.fetch_add(1, Ordering::SeqCst);
        ApprovalOutcome::Approved {
            approver: "alice".into(),
        }
    }))
}

#[tokio::test]
async fn r26_r39_per_agent_channels_route_each_agents_asks_to_its_own_channel() {
    let gov = GovernanceHandle::new(load_str(PER_AGENT, Format::Json).unwrap());
    let (terminal, inbox) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    // Without the inbox channel the build fails, naming the agent's setting.
    let e = ToolgateLayer::builder(gov.clone())
        .shared_channel(counting(ChannelKind::Interactive, &terminal))
        .build()
        .unwrap_err();
    assert_eq!(
        paths(&e),
        ["agents[1].approval.channel", "agents[2].approval.channel"]
    );
    let sink = Arc::new(MemorySink::new());
    let governed = ToolgateLayer::builder(gov)
        .shared_channel(counting(ChannelKind::Interactive, &terminal))
        .shared_channel(counting(ChannelKind::Inbox, &inbox))
        .shared_audit_sink(sink.clone())
        .build()
        .unwrap();
    let stack = ServiceBuilder::new()
        .layer(governed)
        .service(tool(Arc::default()));
    for (agent, to_terminal, to_inbox) in [("dev", 1, 0), ("nightly", 1, 1), ("nightly-sub", 1, 2)]
    {
        let r = stack
            .clone()
            .oneshot(ToolCall::new(
                AgentRef::profile(agent),
                "refund",
                json!({"order": agent}),
            ))
            .await
            .unwrap();
        assert!(matches!(r, ToolResponse::Completed(_)), "{agent}: {r:?}");
        assert_eq!(terminal.load(Ordering::SeqCst), to_terminal, "{agent}");
        assert_eq!(inbox.load(Ordering::SeqCst), to_inbox, "{agent}");
    }
    // Audit content per agent: `nightly` (and its subagent) record the input.
    let lines = sink.lines();
    assert!(!lines[0].contains(r#""input""#), "{}", lines[0]);
    assert!(lines[1].contains(r#""order":"nightly""#), "{}", lines[1]);
    assert!(
        lines[2].contains(r#""order":"nightly-sub""#),
        "{}",
        lines[2]
    );
}

#[tokio::test(start_paused = true)]
async fn r26_an_agents_approval_timeout_expires_its_wait() {
    let gov = GovernanceHandle::new(load_str(PER_AGENT, Format::Json).unwrap());
    let hits = Arc::new(AtomicUsize::new(0));
    let stack = ServiceBuilder::new()
        .layer(
            ToolgateLayer::builder(gov)
                .shared_channel(Arc::new(Silent(ChannelKind::Interactive)))
                .shared_channel(Arc::new(Silent(ChannelKind::Inbox)))
                .build()
                .unwrap(),
        )
        .service(tool(Arc::clone(&hits)));
    // `nightly` waits at most its 30 s (time is paused: the runtime skips ahead).
    let call = ToolCall::new(AgentRef::profile("nightly"), "refund", json!({}));
    let r = tokio::time::timeout(std::time::Duration::from_secs(3600), stack.oneshot(call))
        .await
        .expect("the agent's 30 s timeout ended the wait, not this test's hour")
        .unwrap();
    let refusal = r.refusal().expect("expired");
    assert_eq!(refusal.code, RefusalCode::Rejected);
    assert!(refusal.reasons[0].contains("expired"), "{refusal:?}");
    assert_eq!(hits.load(Ordering::SeqCst), 0);
}

#[test]
fn r33_an_audit_file_and_a_sink_in_code_is_a_build_error_at_audit_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a.jsonl");
    let extra = format!(
        r#""audit": {{"file": {}}},"#,
        Value::from(file.to_str().unwrap())
    );
    let e = ToolgateLayer::builder(handle(&extra))
        .audit_sink(MemorySink::new())
        .build()
        .unwrap_err();
    assert_eq!(paths(&e), ["audit.file"]);
    // An audit file that cannot be opened is an error, never a missing trail.
    let missing = dir.path().join("no/such/dir/a.jsonl");
    let extra = format!(
        r#""audit": {{"file": {}}},"#,
        Value::from(missing.to_str().unwrap())
    );
    let e = ToolgateLayer::builder(handle(&extra)).build().unwrap_err();
    assert_eq!(paths(&e), ["audit.file"]);
}

#[test]
fn from_path_loads_the_file_and_names_its_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("toolgate.json");
    std::fs::write(&path, r#"{"approval": {"channel": "interactive"}}"#).unwrap();
    let e = ToolgateLayer::from_path(&path)
        .unwrap()
        .build()
        .unwrap_err();
    assert_eq!(paths(&e), ["approval.channel"]);
    std::fs::write(&path, r#"{"approval": {"channel": "pigeon"}}"#).unwrap();
    let e = ToolgateLayer::from_path(&path).unwrap_err();
    assert_eq!(paths(&e), ["approval.channel"]);
}

/// A check in slot 3 that refuses inputs carrying `"bad"`, counting what it sees.
#[derive(Clone)]
struct Probe;

impl<S> Layer<S> for Probe {
    type Service = crate::filter::CheckFilter<S, ProbeCheck>;
    fn layer(&self, inner: S) -> Self::Service {
        crate::filter::CheckFilterLayer::<ProbeCheck>::new(GovernanceHandle::new(
            toolgate_engine::Governance::builder().build().unwrap(),
        ))
        .layer(inner)
    }
}

struct ProbeCheck;
static PROBED: AtomicUsize = AtomicUsize::new(0);

impl FilterCheck for ProbeCheck {
    const NAME: &'static str = "Probe";
    fn check(
        _g: &toolgate_engine::Governance,
        call: &ToolCall,
    ) -> Result<(), toolgate_core::Refusal> {
        PROBED.fetch_add(1, Ordering::SeqCst);
        if call.input.get("bad").is_some() {
            return Err(toolgate_core::Refusal::new(
                RefusalCode::InvalidInput,
                Check::InputBounds,
                "probe",
            ));
        }
        Ok(())
    }
}

#[tokio::test]
async fn r36_validate_input_refuses_after_audit_before_the_filters_and_any_ask() {
    let asked = Arc::new(AtomicUsize::new(0));
    let a = Arc::clone(&asked);
    let channel = FnChannel::new(ChannelKind::Interactive, move |_r| {
        a.fetch_add(1, Ordering::SeqCst);
        ApprovalOutcome::Approved {
            approver: "alice".into(),
        }
    });
    let sink = Arc::new(MemorySink::new());
    let governed = ToolgateLayer::builder(handle(r#""approval": {"channel": "interactive"},"#))
        .channel(channel)
        .shared_audit_sink(sink.clone())
        .hooks(Hooks::new())
        .build()
        .unwrap()
        .validate_input(Probe);
    let hits = Arc::new(AtomicUsize::new(0));
    let stack = ServiceBuilder::new()
        .layer(governed)
        .service(tool(Arc::clone(&hits)));
    let dev = AgentRef::profile("dev");
    let call = |tool: &str, input: Value| ToolCall::new(dev.clone(), tool, input);
    let before = PROBED.load(Ordering::SeqCst);
    // In front of the filters: its refusal comes first (R36's place in SPEC's order)…
    let r = stack
        .clone()
        .oneshot(call("fetch", json!({"bad": 1})))
        .await
        .unwrap();
    assert_eq!(r.refusal().unwrap().code, RefusalCode::InvalidInput);
    assert_eq!(PROBED.load(Ordering::SeqCst), before + 1);
    // … and every check still runs after it.
    let r = stack
        .clone()
        .oneshot(call("fetch", json!({})))
        .await
        .unwrap();
    assert_eq!(r.refusal().unwrap().code, RefusalCode::AirGapped);
    assert_eq!(PROBED.load(Ordering::SeqCst), before + 2);
    // The probe refuses before anybody is asked; the refusal is audited.
    let r = stack
        .clone()
        .oneshot(call("refund", json!({"bad": 1})))
        .await
        .unwrap();
    assert_eq!(r.refusal().unwrap().code, RefusalCode::InvalidInput);
    assert_eq!(asked.load(Ordering::SeqCst), 0);
    assert_eq!(hits.load(Ordering::SeqCst), 0);
    // A good call is asked about once and runs.
    let r = stack.oneshot(call("refund", json!({}))).await.unwrap();
    assert!(matches!(r, ToolResponse::Completed(_)), "{r:?}");
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    assert_eq!(
        sink.lines().len(),
        4,
        "every call audited, refused ones too"
    );
}

#[tokio::test]
async fn wrap_outside_sees_every_call_outside_audit() {
    let seen = Arc::new(AtomicUsize::new(0));
    let s = Arc::clone(&seen);
    let sink = Arc::new(MemorySink::new());
    let governed = ToolgateLayer::builder(handle(""))
        .shared_audit_sink(sink.clone())
        .build()
        .unwrap()
        .wrap_outside(tower::layer::layer_fn(move |inner| {
            let s = Arc::clone(&s);
            tower::util::MapRequest::new(inner, move |c: ToolCall| {
                // Outside audit: no decision sink has been put in the call yet.
                assert!(c.extensions.get::<toolgate_core::DecisionSink>().is_none());
                s.fetch_add(1, Ordering::SeqCst);
                c
            })
        }));
    let stack = ServiceBuilder::new()
        .layer(governed)
        .service(tool(Arc::default()));
    let dev = AgentRef::profile("dev");
    for name in ["lookup", "fetch", "nope"] {
        stack
            .clone()
            .oneshot(ToolCall::new(dev.clone(), name, json!({})))
            .await
            .unwrap();
    }
    assert_eq!(seen.load(Ordering::SeqCst), 3);
    assert_eq!(sink.lines().len(), 3);
}

#[tokio::test]
async fn r51_a_call_needing_two_approvals_is_never_sent_on_one_channels_single_answer() {
    let gov = handle(
        r#""approval": {"channel": "inbox"},
           "policy": {"rules": [{"effect": "ask", "tool": "lookup", "approvals": 2, "reason": "two people sign off"},
                                {"effect": "ask", "tool": "refund", "reason": "one person"}]},"#,
    );
    let (asked, hits) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let stack = ServiceBuilder::new()
        .layer(
            ToolgateLayer::builder(gov)
                .shared_channel(counting(ChannelKind::Inbox, &asked))
                .build()
                .unwrap(),
        )
        .service(tool(Arc::clone(&hits)));
    let call = |name: &str| ToolCall::new(AgentRef::profile("dev"), name, json!({}));
    // The channel would approve at once: one answer, where two are needed.
    let r = stack.clone().oneshot(call("lookup")).await.unwrap();
    let refusal = r.refusal().expect("refused");
    assert_eq!(refusal.code, RefusalCode::NoApprovalChannel, "{r:?}");
    assert!(
        refusal.reasons.iter().any(|w| w.contains("2 approvals")),
        "{refusal:?}"
    );
    assert_eq!(asked.load(Ordering::SeqCst), 0, "nobody was asked");
    assert_eq!(hits.load(Ordering::SeqCst), 0, "nothing was sent");
    // A call that needs one approval is asked and runs.
    let r = stack.oneshot(call("refund")).await.unwrap();
    assert!(matches!(r, ToolResponse::Completed(_)), "{r:?}");
    assert_eq!(
        (asked.load(Ordering::SeqCst), hits.load(Ordering::SeqCst)),
        (1, 1)
    );
}

#[tokio::test]
async fn r49_a_session_label_rule_reads_the_sessions_sends_and_the_record_says_which_labels() {
    let gov = GovernanceHandle::new(
        load_str(
            r#"{"tools": [{"kind": "http", "name": "read_mail", "labels": ["private"]},
                          {"kind": "http", "name": "post", "network": "egress"}],
                "agents": [{"name": "dev", "allowed_tools": ["read_mail", "post"]}],
                "policy": {"rules": [{"effect": "deny", "labels": ["egress"], "session_labels": ["private"],
                                      "reason": "private data stays in"}]}}"#,
            Format::Json,
        )
        .unwrap(),
    );
    let sink = Arc::new(MemorySink::new());
    let hits = Arc::new(AtomicUsize::new(0));
    let stack = ServiceBuilder::new()
        .layer(
            ToolgateLayer::builder(gov)
                .shared_audit_sink(sink.clone())
                .build()
                .unwrap(),
        )
        .service(tool(Arc::clone(&hits)));
    let call = |name: &str, session: &str| {
        ToolCall::new(AgentRef::profile("dev"), name, json!({}))
            .in_turn(session.to_owned(), String::from("t"))
    };
    // Another session's private read does not count in s1.
    for (name, session) in [("read_mail", "s0"), ("post", "s1"), ("read_mail", "s1")] {
        let r = stack.clone().oneshot(call(name, session)).await.unwrap();
        assert!(
            matches!(r, ToolResponse::Completed(_)),
            "{name} in {session}: {r:?}"
        );
    }
    let r = stack.oneshot(call("post", "s1")).await.unwrap();
    assert_eq!(
        r.refusal().map(|x| x.code),
        Some(RefusalCode::Denied),
        "{r:?}"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 3);
    let last: Value = serde_json::from_str(sink.lines().last().unwrap()).unwrap();
    assert_eq!(
        last["decision"]["labels"],
        json!({"tool": ["egress"], "session": ["egress", "private"]}),
        "the first post's send counted `egress` in s1: {last}"
    );
    let first_post: Value = serde_json::from_str(&sink.lines()[1]).unwrap();
    assert_eq!(first_post["decision"]["labels"]["session"], json!([]));
}
