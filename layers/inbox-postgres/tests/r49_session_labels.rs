//! A session's labels (R49, issue 37 item 2) in the shared inbox's PostgreSQL database: two
//! replicas (each its own `PostgresInbox` connections, counter, handle and stack) judge one
//! session by one history — the private read recorded through one, the untrusted read
//! through the other, the way out asked on either (seed 003, case 055) — an approved call is
//! judged again by the labels another replica recorded while it waited (R38), and the labels
//! are written in the reservation's transaction.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use common::*;
use serde_json::json;
use toolgate::{GovernanceHandle, SessionLabelsLayer, ToolgateLayer};
use toolgate_core::approval::{ApprovalChannel, ApprovalOutcome, ApprovalRequest, BoxFuture};
use toolgate_core::{AgentRef, ChannelKind, RefusalCode, ToolCall, ToolOutput, ToolResponse};
use toolgate_engine::config::{Format, load_str};
use toolgate_engine::labels::LabelSet;
use toolgate_engine::quota::{AsyncQuotaCounter, QuotaError, QuotaGroup};
use toolgate_inbox::{Inbox, State};
use toolgate_inbox_postgres::{PostgresInbox, PostgresQuotaCounter};
use tower::util::BoxCloneService;
use tower::{Layer, ServiceExt, service_fn};

/// Case 055's combination: private data and untrusted content read in one session, then a
/// way out is asked about.
const CONFIG: &str = r#"{
    "approval": {"channel": "inbox"},
    "tools": [{"kind": "http", "name": "read_mail", "labels": ["private"]},
              {"kind": "http", "name": "fetch_page", "labels": ["untrusted"]},
              {"kind": "http", "name": "post", "network": "egress"}],
    "agents": [{"name": "support", "allowed_tools": ["read_mail", "fetch_page", "post"]}],
    "policy": {"rules": [{"effect": "ask", "labels": ["egress"], "session_labels": ["private", "untrusted"],
                          "reason": "the session read private data and untrusted content"}]}
}"#;

type Stack = BoxCloneService<ToolCall, ToolResponse, Infallible>;

/// The tools' sends, by name, across both replicas.
type Sent = Arc<Mutex<Vec<String>>>;

/// One replica on `store`: its own counter and handle, the stack `toolgate mcp serve`
/// builds (the session's labels read first), asks going to `channel`.
async fn replica(
    store: &PostgresInbox,
    config: &str,
    channel: Arc<dyn ApprovalChannel>,
    sent: &Sent,
) -> Stack {
    let handle = GovernanceHandle::new(load_str(config, Format::Json).unwrap());
    handle.set_async_quota_counter(Arc::new(
        PostgresQuotaCounter::for_inbox(store).await.unwrap(),
    ));
    let sent = Arc::clone(sent);
    BoxCloneService::new(
        SessionLabelsLayer::new(handle.clone()).layer(
            ToolgateLayer::builder(handle)
                .shared_channel(channel)
                .build()
                .unwrap()
                .layer(service_fn(move |call: ToolCall| {
                    let sent = Arc::clone(&sent);
                    async move {
                        sent.lock().unwrap().push(call.tool.display_name());
                        Ok::<_, Infallible>(ToolResponse::Completed(ToolOutput::new(call.input)))
                    }
                })),
        ),
    )
}

/// `tool` called in `session` through `stack` (cloned at once: the future is `Send`).
fn run(
    stack: &Stack,
    tool: &str,
    session: Option<&str>,
) -> impl Future<Output = ToolResponse> + Send + 'static {
    let call = ToolCall::new(AgentRef::profile("support"), tool, json!({}));
    let call = match session {
        Some(s) => call.in_turn(s, "t1"),
        None => call,
    };
    let stack = stack.clone();
    async move { stack.oneshot(call).await.unwrap() }
}

fn completed(r: &ToolResponse) -> bool {
    matches!(r, ToolResponse::Completed(_))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r49_two_replicas_judge_one_session_by_one_history_and_ask_before_the_way_out() {
    let url = require_pg!();
    let schema = fresh_schema();
    let (a, b) = (
        connect(&url, &schema, "labels-a").await,
        connect(&url, &schema, "labels-b").await,
    );
    let sent = Sent::default();
    let channel = |store: &PostgresInbox| -> Arc<dyn ApprovalChannel> {
        Arc::new(Inbox::new(store.clone()).channel())
    };
    let one = replica(&a, CONFIG, channel(&a), &sent).await;
    let two = replica(&b, CONFIG, channel(&b), &sent).await;

    // The private read through one replica, the untrusted read through the other; the same
    // for the calls made in no session (one history); s2 reads private data only.
    for (stack, tool, session) in [
        (&one, "read_mail", Some("s1")),
        (&two, "fetch_page", Some("s1")),
        (&two, "read_mail", None),
        (&one, "fetch_page", None),
        (&two, "read_mail", Some("s2")),
    ] {
        let r = run(stack, tool, session).await;
        assert!(completed(&r), "{tool} in {session:?}: {r:?}");
    }
    // The way out is asked through either replica: held in the shared inbox, not sent.
    let inbox = Inbox::new(a.clone());
    for (stack, session) in [(&one, Some("s1")), (&two, Some("s1")), (&one, None)] {
        let ToolResponse::Held(held) = run(stack, "post", session).await else {
            panic!("{session:?} read private data and untrusted content: asked")
        };
        assert!(
            held.reasons
                .iter()
                .any(|r| r.contains("private data and untrusted content")),
            "{held:?}"
        );
        let record = inbox
            .store()
            .get(&held.interaction_id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(record.state, State::Pending);
        // Issue 37 item 3: the held call keeps what its session had done when asked (read
        // back from the database), for the card, the API and `inbox show`.
        assert_eq!(
            record.interaction().labels_line().as_deref(),
            Some("this session has read: private, untrusted; the tool carries: egress")
        );
    }
    // Calls in other sessions are judged by their own sends.
    for (stack, session) in [(&one, "s2"), (&two, "s3"), (&two, "null")] {
        let r = run(stack, "post", Some(session)).await;
        assert!(completed(&r), "{session}: {r:?}");
    }
    assert_eq!(
        sent.lock().unwrap().iter().filter(|t| *t == "post").count(),
        3
    );
    // One history in the database: each session's labels, keyed apart from the calls made
    // in no session.
    let raw = raw(&url, &schema).await;
    let rows: Vec<(String, String)> = raw
        .query(
            "SELECT session, label FROM session_labels ORDER BY session COLLATE \"C\", label COLLATE \"C\"",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let want: Vec<(String, String)> = [
        (r#""null""#, "egress"),
        (r#""s1""#, "private"),
        (r#""s1""#, "untrusted"),
        (r#""s2""#, "egress"),
        (r#""s2""#, "private"),
        (r#""s3""#, "egress"),
        ("null", "private"),
        ("null", "untrusted"),
    ]
    .iter()
    .map(|(s, l)| ((*s).to_owned(), (*l).to_owned()))
    .collect();
    assert_eq!(rows, want);
    drop_schemas(&url, &[schema]).await;
}

/// A channel that says when it was asked and approves once told to: the wait during which
/// another replica records labels.
#[derive(Debug)]
struct Waiting {
    asked: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    go: Mutex<Option<tokio::sync::oneshot::Receiver<()>>>,
}

impl ApprovalChannel for Waiting {
    fn kind(&self) -> ChannelKind {
        ChannelKind::Interactive
    }

    fn request(&self, _: ApprovalRequest) -> BoxFuture<ApprovalOutcome> {
        let asked = self.asked.lock().unwrap().take();
        let go = self.go.lock().unwrap().take();
        Box::pin(async move {
            if let Some(asked) = asked {
                let _ = asked.send(());
            }
            let approved = match go {
                Some(go) => go.await.is_ok(),
                None => false,
            };
            if approved {
                ApprovalOutcome::Approved {
                    approver: String::from("alice"),
                }
            } else {
                ApprovalOutcome::Expired
            }
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r49_r38_an_approved_call_is_judged_by_the_labels_another_replica_recorded_while_it_waited()
{
    let url = require_pg!();
    let schema = fresh_schema();
    let (a, b) = (
        connect(&url, &schema, "wait-a").await,
        connect(&url, &schema, "wait-b").await,
    );
    // Every post is asked; one leaving a session that read private data and untrusted
    // content is denied.
    let config = r#"{
        "approval": {"channel": "interactive"},
        "tools": [{"kind": "http", "name": "read_mail", "labels": ["private"]},
                  {"kind": "http", "name": "fetch_page", "labels": ["untrusted"]},
                  {"kind": "http", "name": "post", "network": "egress"}],
        "agents": [{"name": "support", "allowed_tools": ["read_mail", "fetch_page", "post"]}],
        "policy": {"rules": [{"effect": "ask", "tool": "post", "reason": "every post is asked"},
                             {"effect": "deny", "labels": ["egress"], "session_labels": ["private", "untrusted"],
                              "reason": "nothing leaves a session that read private data and untrusted content"}]}
    }"#;
    let (asked_tx, asked) = tokio::sync::oneshot::channel();
    let (go, go_rx) = tokio::sync::oneshot::channel();
    let waiting = Arc::new(Waiting {
        asked: Mutex::new(Some(asked_tx)),
        go: Mutex::new(Some(go_rx)),
    });
    let sent = Sent::default();
    let one = replica(&a, config, waiting, &sent).await;
    let approve_all: Arc<dyn ApprovalChannel> = Arc::new(toolgate_core::approval::FnChannel::new(
        ChannelKind::Interactive,
        |_| ApprovalOutcome::Approved {
            approver: String::from("bob"),
        },
    ));
    let two = replica(&b, config, approve_all, &sent).await;

    // The post waits for a person on one replica: the session has read nothing yet.
    let post = tokio::spawn(run(&one, "post", Some("s1")));
    asked.await.unwrap();
    // Meanwhile the session reads private data and untrusted content through the other.
    for tool in ["read_mail", "fetch_page"] {
        let r = run(&two, tool, Some("s1")).await;
        assert!(completed(&r), "{tool}: {r:?}");
    }
    go.send(()).unwrap();
    let r = post.await.unwrap();
    let ToolResponse::Refused(refusal) = &r else {
        panic!("approved, but the session's labels now deny it: {r:?}")
    };
    assert_eq!(refusal.code, RefusalCode::Denied, "{refusal:?}");
    assert!(
        refusal
            .reasons
            .iter()
            .any(|x| x.contains("nothing leaves a session")),
        "{refusal:?}"
    );
    assert_eq!(*sent.lock().unwrap(), ["read_mail", "fetch_page"]);
    drop_schemas(&url, &[schema]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r49_labels_are_written_in_the_reservations_transaction() {
    let url = require_pg!();
    let schema = fresh_schema();
    let store = connect(&url, &schema, "labels-tx").await;
    let counter = PostgresQuotaCounter::for_inbox(&store).await.unwrap();
    let other = PostgresQuotaCounter::for_inbox(&connect(&url, &schema, "labels-tx-2").await)
        .await
        .unwrap();
    let group = [QuotaGroup::new("posts", 0, 1, 60_000)];
    let (private, untrusted) = (LabelSet::of(["private"]), LabelSet::of(["untrusted"]));
    counter
        .reserve_labelled(&group, 1_000, Some("s1"), &private)
        .await
        .unwrap();
    assert_eq!(other.session_labels(Some("s1")).await.unwrap(), private);
    // A refused reservation records neither the send nor the labels.
    assert!(matches!(
        other
            .reserve_labelled(&group, 2_000, Some("s1"), &untrusted)
            .await,
        Err(QuotaError::Full(_))
    ));
    assert_eq!(counter.session_labels(Some("s1")).await.unwrap(), private);
    // A send in no quota group records its labels alone; the calls made in no session are
    // one history of their own.
    other
        .reserve_labelled(&[], 3_000, Some("s1"), &untrusted)
        .await
        .unwrap();
    other
        .reserve_labelled(&[], 3_000, None, &private)
        .await
        .unwrap();
    assert_eq!(
        counter.session_labels(Some("s1")).await.unwrap().to_vec(),
        ["private", "untrusted"]
    );
    assert_eq!(counter.session_labels(None).await.unwrap(), private);
    assert!(
        counter
            .session_labels(Some("null"))
            .await
            .unwrap()
            .is_empty()
    );
    let raw = raw(&url, &schema).await;
    let sends: i64 = raw
        .query_one("SELECT COUNT(*) FROM quota_sends", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(sends, 1, "one send recorded, the refused one not");
    drop_schemas(&url, &[schema]).await;
}
