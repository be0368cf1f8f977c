//! Permits (R38): the tool side refuses what the approval gate did not pass.
//!
//! The [`ApprovalGate`](crate::approval::ApprovalGate) marks every call it sends with a
//! [`Permit`] — only the gate can mint one — bound to the stack whose gate passed the call
//! (its [`GovernanceHandle`]), the call's id and agent, the hash of its input and the
//! definition of the tool it was decided for. A tool service that checks the permit
//! ([`RequirePermitLayer`] in front of your own tool; `toolgate_mcp::McpToolService`
//! always) refuses, before anything is sent, a call that did not pass the gate of its own
//! stack: a stack assembled without the gate, a call only another stack's gate passed, a
//! call whose input, tool or agent was changed after the gate passed it, or a permit taken
//! from another call.
//!
//! A permit guards against a mis-assembled stack and against layers that rewrite calls;
//! it is not a cryptographic token against code in the same process, which could always
//! call the tool directly.
//!
//! # The input binding
//!
//! The permit binds the input by a keyed 128-bit hash (SipHash-1-3-128 of the input's JSON
//! tree, walked with no serialisation, under a key drawn at random once per process), not by
//! SHA-256: it is computed on every call the gate sends and again in front of the tool, so it
//! must cost far less than the decision it guards. That is enough against what a permit
//! guards against. The adversary is a layer between the gate and the tool rewriting the call;
//! it never sees the key (drawn from the operating system, kept in this process's memory
//! only, never written, logged or sent), and no hash made with it leaves the process: a
//! permit lives in the extensions of one in-process call. To pass a rewritten input it would
//! have to hit an unknown 128-bit value of a keyed pseudo-random function, online, with one
//! try per call — the use SipHash is designed for (Rust's `HashMap` keys are hashed with it
//! for the same reason). The offline collision search that SHA-256's collision resistance
//! answers needs the key, and code able to read the key could call the tool directly. The
//! encoding hashed is prefix-free, with numbers tagged by kind, so any change of the input —
//! even one RFC 8785 forgives (`1` written as `1.0`, a key reordered where the map keeps
//! order) — gives another binding.
//!
//! Hashes that leave the process stay SHA-256: the RFC 8785 input hash of the inbox and of
//! audit records and the R35 hashes shown to approvers ([`toolgate_engine::canon`]).
//!
//! # Example
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use serde_json::json;
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//! use toolgate::GovernanceHandle;
//! use toolgate::approval::ApprovalGateLayer;
//! use toolgate::permit::RequirePermitLayer;
//! use toolgate::core::{AgentRef, RefusalCode, ToolCall, ToolOutput, ToolResponse};
//! use toolgate::engine::config::{load_str, Format};
//!
//! let handle = GovernanceHandle::new(load_str(r#"{"tools": [{"kind": "http", "name": "lookup"}],
//!     "agents": [{"name": "dev", "allowed_tools": ["lookup"]}]}"#, Format::Json).unwrap());
//! let tool = ServiceBuilder::new()
//!     .layer(RequirePermitLayer::new(handle.clone()))
//!     .service(service_fn(|_c: ToolCall| async {
//!         Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::new(json!("ok"))))
//!     }));
//! let call = || ToolCall::new(AgentRef::profile("dev"), "lookup", json!({}));
//!
//! // Without the gate in front, nothing runs.
//! let refused = tool.clone().oneshot(call()).await.unwrap();
//! assert_eq!(refused.refusal().unwrap().code, RefusalCode::Rejected);
//! // Through the gate, the allowed call runs.
//! let gated = ApprovalGateLayer::new(handle).layer(tool);
//! # use tower::Layer;
//! assert!(matches!(gated.oneshot(call()).await.unwrap(), ToolResponse::Completed(_)));
//! # }
//! ```

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use toolgate_core::{AgentRef, CallId, Check, Refusal, RefusalCode, ToolCall, ToolResponse};
use toolgate_engine::catalog::Entry;
use toolgate_engine::{Governance, canon};
use tower_layer::Layer;
use tower_service::Service;

use crate::binding::{self, Binding};
use crate::future::ResponseFuture;
use crate::handle::{GovernanceHandle, PinnedDecision};

/// The approval gate's mark on a call it sends (R38): bound to the stack of the gate (its
/// handle, clones included), the call's id and agent (and subagent), its input hash and the
/// definition of its tool (R35) in the snapshot the gate passed it by. Only the gate mints
/// permits: there is no public constructor.
///
/// ```compile_fail,E0451
/// // A permit cannot be made outside toolgate.
/// let forged = toolgate::permit::Permit {
///     handle: 1, call_id: todo!(), input_hash: todo!(), snapshot: todo!(), entry: 0,
/// };
/// ```
#[derive(Debug)]
pub struct Permit {
    /// The id of the handle whose gate minted it ([`GovernanceHandle`]).
    handle: u64,
    call_id: CallId,
    /// The keyed binding of the input the gate passed (see the module's notes).
    input_hash: Binding,
    /// The snapshot the gate passed the call by, and the tool's entry in it (its position in
    /// the catalog: no name copied): the definition is hashed only when a verifier holds
    /// another snapshot (cheap on the common path).
    snapshot: Snapshot,
    entry: usize,
}

/// The snapshot a permit was minted by, and the agent it was minted for: held through the
/// call's pinned decision when the gate had one (no clone of the snapshot's shared count,
/// nor of the agent, on the call path).
#[derive(Debug)]
enum Snapshot {
    Own(Arc<Governance>, AgentRef),
    Pinned(PinnedDecision),
}

impl Snapshot {
    /// The agent the call was passed for.
    fn agent(&self) -> &AgentRef {
        match self {
            Snapshot::Own(_, agent) => agent,
            Snapshot::Pinned(d) => d.agent_ref(),
        }
    }
}

impl std::ops::Deref for Snapshot {
    type Target = Governance;

    fn deref(&self) -> &Governance {
        match self {
            Snapshot::Own(g, _) => g,
            Snapshot::Pinned(d) => d.governance(),
        }
    }
}

fn refused(why: String) -> Refusal {
    Refusal::new(RefusalCode::Rejected, Check::Permit, why)
}

impl Permit {
    /// Marks `call` as passed by the gate of `handle` for `tool` as `snapshot` defines it;
    /// `Err` when the input cannot be canonicalised (nothing can be bound to it, so the call
    /// must not be sent).
    pub(crate) fn attach(
        call: &mut ToolCall,
        handle: &GovernanceHandle,
        snapshot: &Arc<Governance>,
        entry: &Entry,
    ) -> Result<(), Refusal> {
        let input_hash = Some(binding::input(&call.input));
        let snapshot = Snapshot::Own(Arc::clone(snapshot), call.agent.clone());
        Self::mint(call, handle, snapshot, entry, input_hash)
    }

    /// [`Permit::attach`] for the gate's pinned decision (made about this call: its agent
    /// is the call's), with the input's binding the caller has just computed of
    /// `call.input` itself (the gate's pin check): the input is hashed once per call, and
    /// the snapshot and agent are held through the decision.
    pub(crate) fn attach_bound(
        call: &mut ToolCall,
        handle: &GovernanceHandle,
        pinned: &PinnedDecision,
        entry: &Entry,
        input_hash: Option<Binding>,
    ) -> Result<(), Refusal> {
        Self::mint(
            call,
            handle,
            Snapshot::Pinned(pinned.clone()),
            entry,
            input_hash,
        )
    }

    fn mint(
        call: &mut ToolCall,
        handle: &GovernanceHandle,
        snapshot: Snapshot,
        entry: &Entry,
        input_hash: Option<Binding>,
    ) -> Result<(), Refusal> {
        let Some(input_hash) = input_hash else {
            return Err(refused(String::from(
                "the input cannot be serialised, so no permit can be bound to it",
            )));
        };
        let Some(entry) = snapshot.catalog().index_of(entry) else {
            return Err(refused(format!(
                "`{}` is not an entry of the snapshot the call was decided by (internal), so no permit can be minted",
                entry.name
            )));
        };
        let permit = Permit {
            handle: handle.id(),
            call_id: call.id.clone(),
            input_hash,
            snapshot,
            entry,
        };
        call.extensions.insert(permit);
        Ok(())
    }

    /// The binding of the input the gate passed, as `siphash13-128:<hex>`: the keyed hash of
    /// the module's notes, comparable only within this process (its key is drawn per
    /// process) and not the RFC 8785 SHA-256 that audit records and the inbox carry.
    pub fn input_hash(&self) -> String {
        self.input_hash.to_text()
    }

    /// The definition hash of the tool the gate decided the call for (R35), or `None` if
    /// its snapshot does not hold the tool (never, for a permit the gate minted).
    pub fn definition_hash(&self) -> Option<String> {
        self.snapshot
            .catalog()
            .entries()
            .get(self.entry)
            .map(canon::entry_definition_hash)
    }

    /// Whether `call` carries a permit that admits it to the tool `entry` as defined now in
    /// the stack of `handle`: minted by the approval gate of that stack (`handle` or a clone
    /// of it), for this call and its agent, for exactly this input, under the same
    /// definition (R35, R38) — [`Permit::verify_call`], then
    /// [`Permit::verify_definition`]. The refusal says what was missing or different.
    pub fn verify_entry(
        call: &ToolCall,
        handle: &GovernanceHandle,
        entry: &Entry,
    ) -> Result<(), Refusal> {
        Self::verify_call(call, handle)?.verify_definition(call, entry)
    }

    /// The permit on `call`, when it was minted by the approval gate of the stack of
    /// `handle` (or a clone of it) for this call (its id), its agent and subagent, and
    /// exactly its input (R38); else the refusal saying what was missing or different. The
    /// tool's definition is checked apart ([`Permit::verify_definition`]).
    pub fn verify_call<'c>(
        call: &'c ToolCall,
        handle: &GovernanceHandle,
    ) -> Result<&'c Permit, Refusal> {
        let name = || call.tool.display_name();
        let Some(permit) = call.extensions.get::<Permit>() else {
            return Err(refused(format!(
                "the call to `{}` carries no permit from an approval gate, so it is not sent (R38: the tool side refuses what the gate did not pass)",
                name()
            )));
        };
        if permit.handle != handle.id() {
            return Err(refused(format!(
                "the permit on the call to `{}` was minted by the approval gate of another stack (another governance handle), so it is not sent (R38: a tool sends only what its own stack's gate passed)",
                name()
            )));
        }
        if permit.call_id != call.id {
            return Err(refused(format!(
                "the permit on the call to `{}` was minted for another call",
                name()
            )));
        }
        if *permit.snapshot.agent() != call.agent {
            return Err(refused(format!(
                "the agent of the call to `{}` differs from the agent the approval gate passed it for",
                name()
            )));
        }
        if binding::input(&call.input) != permit.input_hash {
            return Err(refused(format!(
                "the input of the call to `{}` differs from the input the approval gate passed",
                name()
            )));
        }
        Ok(permit)
    }

    /// Whether the gate passed `call` (this permit's call, [`Permit::verify_call`]) under
    /// the definition `entry` has now (R35); else a `definition_changed` refusal.
    pub fn verify_definition(&self, call: &ToolCall, entry: &Entry) -> Result<(), Refusal> {
        let same = match self.snapshot.catalog().entries().get(self.entry) {
            // The same entry of the same snapshot: the same definition, nothing to hash.
            Some(passed) if std::ptr::eq(passed, entry) => true,
            Some(passed) => {
                canon::entry_definition_hash(passed) == canon::entry_definition_hash(entry)
            }
            None => false,
        };
        if !same {
            return Err(Refusal::new(
                RefusalCode::Rejected,
                Check::DefinitionChanged,
                format!(
                    "the definition of `{}` differs from the one the approval gate decided the call for (R35)",
                    call.tool.display_name()
                ),
            ));
        }
        Ok(())
    }
}

/// Layer of [`RequirePermit`]: put it right in front of your own tool service so that a
/// call reaches the tool only with a valid [`Permit`] from an approval gate.
#[derive(Debug, Clone)]
#[must_use]
pub struct RequirePermitLayer {
    handle: GovernanceHandle,
}

impl RequirePermitLayer {
    /// Checks permits against the tool definitions in the newest snapshot of `handle`
    /// (the handle the gate decides by).
    pub fn new(handle: GovernanceHandle) -> Self {
        Self { handle }
    }
}

impl<S> Layer<S> for RequirePermitLayer {
    type Service = RequirePermit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequirePermit {
            inner,
            handle: self.handle.clone(),
        }
    }
}

/// Refuses every call without a valid [`Permit`] (`rejected`, never sent); forwards the
/// rest.
#[derive(Clone)]
pub struct RequirePermit<S> {
    inner: S,
    handle: GovernanceHandle,
}

impl<S: fmt::Debug> fmt::Debug for RequirePermit<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequirePermit")
            .field("inner", &self.inner)
            .field("handle", &self.handle)
            .finish()
    }
}

impl<S> RequirePermit<S> {
    crate::inner_service_accessors!(inner: S);
}

impl<S> Service<ToolCall> for RequirePermit<S>
where
    S: Service<ToolCall, Response = ToolResponse>,
{
    type Response = ToolResponse;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, call: ToolCall) -> Self::Future {
        let now = self.handle.load();
        let checked = now
            .lookup(&call.tool)
            .and_then(|entry| Permit::verify_entry(&call, &self.handle, entry));
        match checked {
            Ok(()) => ResponseFuture::inner(self.inner.call(call)),
            // INVARIANT: a call without a valid permit is never sent to the inner service.
            Err(refusal) => ResponseFuture::refused(ToolResponse::Refused(refusal)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde_json::json;
    use toolgate_core::{AgentRef, ChannelKind, ToolOutput};
    use toolgate_engine::config::{Format, load_str};
    use tower::{ServiceBuilder, ServiceExt, service_fn};

    use super::*;
    use crate::approval::{ApprovalGateLayer, ApprovalOutcome, FnChannel};

    fn handle() -> GovernanceHandle {
        GovernanceHandle::new(
            load_str(
                r#"{"approval": {"channel": "interactive"},
                    "tools": [{"kind": "http", "name": "lookup"},
                              {"kind": "http", "name": "refund", "approval": "require_approval"}],
                    "agents": [{"name": "dev", "allowed_tools": ["lookup", "refund"]}]}"#,
                Format::Json,
            )
            .unwrap(),
        )
    }

    fn counted(
        hits: &Arc<AtomicUsize>,
    ) -> impl Service<
        ToolCall,
        Response = ToolResponse,
        Error = Infallible,
        Future = impl Send + 'static,
    > + Clone
    + Send
    + 'static {
        let hits = Arc::clone(hits);
        service_fn(move |_c: ToolCall| {
            hits.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, Infallible>(ToolResponse::Completed(ToolOutput::default())) }
        })
    }

    fn call(tool: &str, input: serde_json::Value) -> ToolCall {
        ToolCall::new(AgentRef::profile("dev"), tool, input)
    }

    #[tokio::test]
    async fn r38_without_the_gate_require_permit_refuses_every_call() {
        let hits = Arc::new(AtomicUsize::new(0));
        let tool = RequirePermitLayer::new(handle()).layer(counted(&hits));
        for (name, check) in [
            ("lookup", Check::Permit),
            ("refund", Check::Permit),
            ("nope", Check::UnknownTool),
        ] {
            let r = tool
                .clone()
                .oneshot(call(name, json!({"a": 1})))
                .await
                .unwrap();
            let refusal = r.refusal().expect("refused");
            assert_eq!(refusal.decided_by, check, "{name}: {r:?}");
        }
        assert_eq!(hits.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn r38_with_the_gate_allowed_calls_run_on_both_paths() {
        let h = handle();
        let hits = Arc::new(AtomicUsize::new(0));
        let person = FnChannel::new(ChannelKind::Interactive, |_r| ApprovalOutcome::Approved {
            approver: "alice".into(),
        });
        let stack = ServiceBuilder::new()
            .layer(ApprovalGateLayer::new(h.clone()).channel(person))
            .layer(RequirePermitLayer::new(h))
            .service(counted(&hits));
        let ran = stack
            .clone()
            .oneshot(call("lookup", json!({})))
            .await
            .unwrap();
        assert!(matches!(ran, ToolResponse::Completed(_)), "{ran:?}");
        let asked = stack
            .oneshot(call("refund", json!({"n": 1})))
            .await
            .unwrap();
        assert!(matches!(asked, ToolResponse::Completed(_)), "{asked:?}");
        assert_eq!(hits.load(Ordering::SeqCst), 2);
    }

    /// Rewrites the input after the gate passed the call.
    #[derive(Clone)]
    struct Rewrite<S>(S);

    impl<S: Service<ToolCall>> Service<ToolCall> for Rewrite<S> {
        type Response = S::Response;
        type Error = S::Error;
        type Future = S::Future;
        fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
            self.0.poll_ready(cx)
        }
        fn call(&mut self, mut call: ToolCall) -> S::Future {
            call.input = json!({"amount": 1_000_000});
            self.0.call(call)
        }
    }

    #[tokio::test]
    async fn r38_a_permit_for_one_input_does_not_pass_another_input() {
        let h = handle();
        let hits = Arc::new(AtomicUsize::new(0));
        let stack = ApprovalGateLayer::new(h.clone()).layer(Rewrite(
            RequirePermitLayer::new(h.clone()).layer(counted(&hits)),
        ));
        let r = stack
            .oneshot(call("lookup", json!({"amount": 1})))
            .await
            .unwrap();
        let refusal = r.refusal().expect("refused");
        assert!(refusal.reasons[0].contains("input"), "{refusal:?}");
        assert_eq!(hits.load(Ordering::SeqCst), 0);

        // A permit moved to another call (same tool, same input) is refused as well.
        let mut first = call("lookup", json!({}));
        let g = h.load();
        Permit::attach(&mut first, &h, &g, g.catalog().get("lookup").unwrap()).unwrap();
        let permit = first.extensions.remove::<Permit>().unwrap();
        let mut second = call("lookup", json!({}));
        second.extensions.insert(permit);
        let r = RequirePermitLayer::new(h)
            .layer(counted(&hits))
            .oneshot(second)
            .await
            .unwrap();
        assert!(
            r.refusal().unwrap().reasons[0].contains("another call"),
            "{r:?}"
        );
        assert_eq!(hits.load(Ordering::SeqCst), 0);
    }

    /// Changes the call after the gate passed it, as `change` says.
    #[derive(Clone)]
    struct Change<S> {
        inner: S,
        change: Arc<dyn Fn(&mut ToolCall) + Send + Sync>,
    }

    impl<S: Service<ToolCall>> Service<ToolCall> for Change<S> {
        type Response = S::Response;
        type Error = S::Error;
        type Future = S::Future;
        fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
            self.inner.poll_ready(cx)
        }
        fn call(&mut self, mut call: ToolCall) -> S::Future {
            (self.change)(&mut call);
            self.inner.call(call)
        }
    }

    use proptest::prelude::Strategy as _;

    fn json_value() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        use serde_json::Value;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<u64>().prop_map(|n| json!(n)),
            any::<i64>().prop_map(|n| json!(n)),
            (-1e9f64..1e9).prop_map(|f| json!(f)),
            "[a-z0-9 ]{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 40, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::btree_map("[a-d]{0,3}", inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// One change a layer between the gate and the tool could make.
    #[derive(Debug, Clone)]
    enum Edit {
        Nothing,
        /// The input replaced by another value.
        Input(serde_json::Value),
        /// One more member in the input object.
        Member(String, serde_json::Value),
        /// Every number of the input written as a float (`1` → `1.0`).
        Floats,
        /// The tool renamed (to the other tool of the catalog, or to an unknown one).
        Tool(String),
    }

    fn floats(v: &mut serde_json::Value) {
        use serde_json::Value;
        match v {
            Value::Number(n) => {
                if let Some(f) = n.as_f64().filter(|_| !n.is_f64()) {
                    *v = json!(f);
                }
            }
            Value::Array(items) => items.iter_mut().for_each(floats),
            Value::Object(m) => m.values_mut().for_each(floats),
            _ => {}
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
        /// R38: any change of the call's input or tool name made between the gate and the
        /// tool is refused in front of the tool (the keyed input binding and the permit's
        /// entry); the call reaches the tool only when nothing changed.
        #[test]
        fn r38_any_rewrite_between_gate_and_tool_is_refused(
            base in proptest::collection::btree_map("[a-d]{1,3}", json_value(), 0..5),
            rewrite in proptest::prop_oneof![
                proptest::strategy::Just(Edit::Nothing),
                json_value().prop_map(Edit::Input),
                ("[e-h]{1,3}", json_value()).prop_map(|(k, v)| Edit::Member(k, v)),
                proptest::strategy::Just(Edit::Floats),
                proptest::prop_oneof![
                    proptest::strategy::Just("refund".to_owned()),
                    "[a-z]{1,8}",
                ].prop_map(Edit::Tool),
            ],
        ) {
            let input = serde_json::Value::Object(base.into_iter().collect());
            let mut rewritten = ToolCall::new(AgentRef::profile("dev"), "lookup", input.clone());
            let change = rewrite.clone();
            let apply = move |call: &mut ToolCall| match &change {
                Edit::Nothing => {}
                Edit::Input(v) => call.input = v.clone(),
                Edit::Member(k, v) => {
                    if let Some(m) = call.input.as_object_mut() {
                        m.insert(k.clone(), v.clone());
                    }
                }
                Edit::Floats => floats(&mut call.input),
                Edit::Tool(name) => call.tool = toolgate_core::ToolRef::Name(name.clone()),
            };
            apply(&mut rewritten);
            let apply_again = apply.clone();
            let changed = rewritten.tool != toolgate_core::ToolRef::Name("lookup".into())
                || rewritten.input != input
                || serde_json::to_vec(&rewritten.input).ok() != serde_json::to_vec(&input).ok();
            let h = handle();
            let hits = Arc::new(AtomicUsize::new(0));
            let stack = ApprovalGateLayer::new(h.clone()).layer(Change {
                inner: RequirePermitLayer::new(h).layer(counted(&hits)),
                change: Arc::new(apply),
            });
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            let r = rt
                .block_on(stack.oneshot(ToolCall::new(
                    AgentRef::profile("dev"),
                    "lookup",
                    input.clone(),
                )))
                .unwrap();
            let ran = hits.load(Ordering::SeqCst) == 1;
            proptest::prop_assert_eq!(ran, !changed, "{:?}: {:?}", rewrite, r);
            proptest::prop_assert_eq!(matches!(r, ToolResponse::Completed(_)), !changed);

            // The same through the composite, whose gate reads the decision its own exposure
            // filter sealed (no comparison of input hashes there): a rewrite after the gate
            // is caught all the same.
            let h = GovernanceHandle::new(
                load_str(
                    r#"{"tools": [{"kind": "http", "name": "lookup"}, {"kind": "http", "name": "refund"}],
                        "agents": [{"name": "dev", "allowed_tools": ["lookup", "refund"]}]}"#,
                    Format::Json,
                )
                .unwrap(),
            );
            let hits = Arc::new(AtomicUsize::new(0));
            let stack = crate::ToolgateLayer::builder(h.clone())
                .build()
                .unwrap()
                .layer(Change {
                    inner: RequirePermitLayer::new(h).layer(counted(&hits)),
                    change: Arc::new(apply_again),
                });
            let r = rt
                .block_on(stack.oneshot(ToolCall::new(AgentRef::profile("dev"), "lookup", input)))
                .unwrap();
            let ran = hits.load(Ordering::SeqCst) == 1;
            proptest::prop_assert_eq!(ran, !changed, "composite, {:?}: {:?}", rewrite, r);
        }
    }

    #[tokio::test]
    async fn r35_a_permit_under_another_definition_does_not_pass() {
        let h = handle();
        let hits = Arc::new(AtomicUsize::new(0));
        // A permit minted by a snapshot where `lookup` was defined otherwise.
        let before = load_str(
            r#"{"tools": [{"kind": "http", "name": "lookup", "description": "old"}],
                "agents": [{"name": "dev", "allowed_tools": ["lookup"]}]}"#,
            Format::Json,
        )
        .unwrap();
        let mut c = call("lookup", json!({}));
        let before = Arc::new(before);
        Permit::attach(&mut c, &h, &before, before.catalog().get("lookup").unwrap()).unwrap();
        let r = RequirePermitLayer::new(h)
            .layer(counted(&hits))
            .oneshot(c)
            .await
            .unwrap();
        assert!(
            r.refusal().unwrap().reasons[0].contains("definition"),
            "{r:?}"
        );
        assert_eq!(r.refusal().unwrap().decided_by, Check::DefinitionChanged);
        assert_eq!(hits.load(Ordering::SeqCst), 0);
    }
}
