//! R45 with grants stored in a SQLite inbox, through the governed stack (`ToolgateLayer`)
//! whose ledger reads them ([`StoredGrants::grant_store`]): a grant answers only asks — never
//! a `deny`, a full quota or `auto_reject_required` — spends a use only on a call that is
//! sent, and never changes what an agent is shown.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;
use toolgate::approval::{ApprovalOutcome, FnChannel};
use toolgate::{GovernanceHandle, ToolgateLayer};
use toolgate_core::{
    AgentRef, ChannelKind, RefusalCode, RunContext, RunMode, ToolCall, ToolOutput, ToolResponse,
};
use toolgate_engine::config::{Format, load_str};
use toolgate_engine::grant::parse_grants;
use toolgate_inbox::StoredGrants;
use toolgate_inbox::{SqliteInbox, SqliteOptions, Timestamp};
use tower::{ServiceBuilder, ServiceExt, service_fn};

const CONFIG: &str = r#"{
    "approval": {"channel": "interactive"},
    "tools": [{"kind": "http", "name": "lookup"},
              {"kind": "http", "name": "refund", "approval": "require_approval"},
              {"kind": "http", "name": "wipe", "approval": "require_approval"}],
    "agents": [{"name": "dev", "allowed_tools": ["lookup", "refund"]}],
    "policy": {"rules": [{"effect": "deny", "tool": "refund", "when": {"amount": {"gt": 100}},
                          "reason": "refunds over 100 need finance"}],
               "quotas": [{"tool": "refund", "max": 1, "window_secs": 3600, "reason": "one refund an hour"}]}
}"#;

type Svc = tower::util::BoxCloneService<ToolCall, ToolResponse, std::convert::Infallible>;

struct Harness {
    svc: Svc,
    handle: GovernanceHandle,
    store: SqliteInbox,
    asked: Arc<AtomicUsize>,
    sent: Arc<AtomicUsize>,
    _dir: tempfile::TempDir,
}

/// The stack over a fresh SQLite inbox holding one grant that answers every call of every
/// agent (`agent: *`, `tool: *`, no limit) — the widest grant there is.
async fn harness() -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteInbox::open(dir.path().join("inbox.db"), SqliteOptions::default()).unwrap();
    let wide = parse_grants(
        r#"[{"id": "everything", "agent": "*", "tool": "*", "expires_at": 9999999999999,
             "granted_by": "alice", "reason": "the widest grant"}]"#,
    )
    .unwrap();
    store.add_grant(&wide[0], Timestamp::now()).await.unwrap();
    let handle = GovernanceHandle::new(load_str(CONFIG, Format::Json).unwrap());
    handle.set_grants(store.grant_store().unwrap());
    let asked = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&asked);
    let channel = FnChannel::new(ChannelKind::Interactive, move |_r| {
        counted.fetch_add(1, Ordering::SeqCst);
        ApprovalOutcome::Denied {
            approver: "bob".into(),
            reason: None,
        }
    });
    let sent = Arc::new(AtomicUsize::new(0));
    let hits = Arc::clone(&sent);
    let svc = ServiceBuilder::new()
        .layer(
            ToolgateLayer::builder(handle.clone())
                .channel(channel)
                .build()
                .unwrap(),
        )
        .service(service_fn(move |_call: ToolCall| {
            hits.fetch_add(1, Ordering::SeqCst);
            async {
                Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::new(json!(
                    "ok"
                ))))
            }
        }));
    Harness {
        svc: tower::util::BoxCloneService::new(svc),
        handle,
        store,
        asked,
        sent,
        _dir: dir,
    }
}

impl Harness {
    async fn call(&self, call: ToolCall) -> ToolResponse {
        self.svc.clone().oneshot(call).await.unwrap()
    }

    async fn uses(&self) -> u64 {
        self.store.grants().await.unwrap()[0].uses
    }
}

fn refund(amount: u64) -> ToolCall {
    ToolCall::new(
        AgentRef::profile("dev"),
        "refund",
        json!({"amount": amount}),
    )
}

fn code(r: &ToolResponse) -> Option<RefusalCode> {
    match r {
        ToolResponse::Refused(r) => Some(r.code),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r45_a_stored_grant_never_loosens_a_deny_a_full_quota_or_auto_reject_required() {
    let h = harness().await;
    // A `deny` stands.
    let denied = h.call(refund(500)).await;
    assert_eq!(code(&denied), Some(RefusalCode::Denied), "{denied:?}");
    // `auto_reject_required` stands.
    let run = RunContext {
        mode: RunMode::AutoRejectRequired,
        background: false,
    };
    let rejected = h.call(refund(5).with_run(run)).await;
    assert_eq!(code(&rejected), Some(RefusalCode::Rejected), "{rejected:?}");
    assert_eq!(
        (h.sent.load(Ordering::SeqCst), h.uses().await),
        (0, 0),
        "nothing sent, nothing spent"
    );

    // The ask is answered by the grant: sent, one use spent, nobody asked.
    assert!(matches!(
        h.call(refund(5)).await,
        ToolResponse::Completed(_)
    ));
    assert_eq!(h.asked.load(Ordering::SeqCst), 0);
    assert_eq!((h.sent.load(Ordering::SeqCst), h.uses().await), (1, 1));

    // The quota is full now (one refund an hour): the grant does not make room.
    let limited = h.call(refund(6)).await;
    assert_eq!(
        code(&limited),
        Some(RefusalCode::RateLimited),
        "{limited:?}"
    );
    assert_eq!(
        (h.sent.load(Ordering::SeqCst), h.uses().await),
        (1, 1),
        "a refused call spends no use"
    );
    assert_eq!(
        h.asked.load(Ordering::SeqCst),
        0,
        "nobody is asked about a full quota"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r45_a_stored_grant_never_changes_what_an_agent_is_shown() {
    let h = harness().await;
    let shown = |h: &Harness| {
        let e = h.handle.load().expose("dev").unwrap();
        let mut names: Vec<(String, bool)> = e
            .tools
            .iter()
            .map(|t| (t.name.to_string(), t.wrapped))
            .collect();
        names.sort();
        (names, e.omitted.len())
    };
    let with_grant = shown(&h);
    h.handle
        .set_grants(Arc::new(toolgate_engine::grant::NoGrants));
    assert_eq!(
        shown(&h),
        with_grant,
        "R45: the same tools, wrapped alike, with or without grants"
    );
    assert!(
        !with_grant.0.iter().any(|(n, _)| n == "wipe"),
        "{with_grant:?}"
    );

    // A tool the agent may not use stays refused, the widest grant notwithstanding.
    h.handle.set_grants(h.store.grant_store().unwrap());
    let wipe = h
        .call(ToolCall::new(AgentRef::profile("dev"), "wipe", json!({})))
        .await;
    assert_eq!(code(&wipe), Some(RefusalCode::NotAllowed), "{wipe:?}");
    assert_eq!((h.sent.load(Ordering::SeqCst), h.uses().await), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r45_an_inbox_that_cannot_be_read_answers_no_ask() {
    let h = harness().await;
    // The inbox file goes away: the grant store fails, and the call is asked (fail
    // closed: a grant only ever loosens, so an unreadable store is no grant).
    std::fs::remove_file(h.store.path()).unwrap();
    let r = h.call(refund(5)).await;
    assert_eq!(
        code(&r),
        Some(RefusalCode::Rejected),
        "asked, and bob denied: {r:?}"
    );
    assert_eq!(h.asked.load(Ordering::SeqCst), 1);
    assert_eq!(h.sent.load(Ordering::SeqCst), 0);
    // A use that cannot be recorded is an error, which the engine turns into a refusal
    // (the call is not sent), never a send.
    use toolgate_engine::grant::GrantStore;
    assert!(
        h.store
            .grant_store()
            .unwrap()
            .record_use("everything", 1)
            .is_err()
    );
}
