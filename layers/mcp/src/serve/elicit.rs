//! The `elicitation` approval channel (R47): the MCP client that made the call asks its own
//! user.
//!
//! Whoever controls the agent's client answers such a question — an auto-approving harness,
//! or a model that answers elicitations, approves its own calls — so this channel serves only
//! the asks the operator routed to `elicitation` (`approval.channel`, or an agent's own),
//! never an ask routed to `inbox` or `interactive`. Every answer is recorded with the
//! principal that gave it ([`Principal`]): the bearer token's name (or the first digits of
//! its hash), the agent and the session — never a constant.
//!
//! How the client is asked depends on the protocol version its request speaks:
//!
//! - **before 2026-07-28** (sessions opened by `initialize`): a server-to-client
//!   `elicitation/create` request while the call waits, when the client declared the
//!   capability (form mode) at `initialize`;
//! - **2026-07-28 and later** (no server-to-client requests): the capability is read from the
//!   request's own `_meta` (`io.modelcontextprotocol/clientCapabilities`), and the question
//!   goes back as the call's `InputRequiredResult` (SEP-2322): the governed call keeps waiting
//!   in the gate while the client asks its user, and the client's retry — the same tool, the
//!   same input, toolgate's unguessable `requestState`, from the same caller — carries the
//!   answer to it and receives the call's result ([`OpenQuestions`]).
//!
//! A question toolgate asks opens with [`APPROVAL_HEADER`] and carries [`APPROVAL_META`]; a
//! question an upstream server asks during a call is relayed with its server's name first
//! (`crate::relay`), so the two cannot be taken for each other.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use rmcp::model::{
    ClientCapabilities, ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationSchema, InputRequest, InputRequests, InputRequiredResult, InputResponses,
    RequestMetaObject,
};
use rmcp::service::RequestContext;
use rmcp::{Peer, RoleServer};
use serde_json::Value;
use tokio::sync::oneshot;
use toolgate::approval::{
    ApprovalChannel, ApprovalOutcome, ApprovalRequest, BoxFuture, VerifiedOutcome,
};
use toolgate_core::{ChannelKind, ToolResponse};

use super::lock;
use crate::relay::{APPROVAL_HEADER, APPROVAL_META};

/// The key of toolgate's question in an `InputRequiredResult`'s `inputRequests`.
pub const APPROVAL_INPUT_KEY: &str = "toolgate_approval";

/// The most questions open at once for retries (2026-07-28 clients); past it an ask is
/// refused, never queued without bound.
pub(super) const MAX_OPEN_QUESTIONS: usize = 4096;

/// How long a question stays open for the client's retry when the agent's own approval
/// timeout does not end the wait first: then it is closed, and the call ends `cancelled`.
pub(super) const QUESTION_OPEN_AT_MOST: std::time::Duration = std::time::Duration::from_secs(900);

/// Who answers an elicitation: the caller's credential, its agent and its session (R47).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Principal {
    /// How the client authenticated: `token `laptop``, `token sha256:0123abcd4567`, `the
    /// stdio client`, or `an unauthenticated loopback client`.
    pub(super) credential: String,
    /// The agent profile the request speaks for.
    pub(super) agent: String,
    /// The downstream session (R43).
    pub(super) session: String,
    /// Issue 22: the verified `sub` and `iss` of the JWT the caller authenticated with, when
    /// it did (never read from anything the client says about itself): recorded as the
    /// answering principal of an answer given by elicitation.
    pub(super) verified: Option<toolgate_core::Principal>,
}

impl Principal {
    /// The approver an answer is recorded with.
    pub(super) fn approver(&self) -> String {
        format!(
            "elicitation: {} (agent `{}`, session `{}`)",
            self.credential, self.agent, self.session
        )
    }
}

/// How the client that made this request can be asked.
pub(super) enum Way {
    /// It did not declare elicitation (form mode).
    Cannot,
    /// A server-to-client `elicitation/create` request.
    Request(Peer<RoleServer>),
    /// The question goes to the request handler, which returns it as the call's
    /// `InputRequiredResult`; at most one question per call.
    InputRequired(Mutex<Option<oneshot::Sender<Question>>>),
}

/// The calling client, for the task that runs its call.
pub(super) struct Asker {
    pub(super) way: Way,
    pub(super) principal: Principal,
}

tokio::task_local! {
    pub(super) static ASKER: Arc<Asker>;
}

/// A question handed to the request handler (2026-07-28 clients), with where its answer goes.
pub(super) struct Question {
    pub(super) params: ElicitRequestParams,
    pub(super) answer: oneshot::Sender<Answer>,
}

/// What the client's retry said.
pub(super) enum Answer {
    /// The client's elicitation result.
    Result(ElicitResult),
    /// The retry came without a readable answer to toolgate's question.
    Unreadable(String),
}

/// Does the client declare form-mode elicitation for this request? Read as its protocol
/// version declares it: the request's own `_meta` capabilities (2026-07-28), else the ones it
/// declared at `initialize`. An elicitation capability naming neither mode means form
/// (2025-06-18).
pub(super) fn declares_form(caps: Option<&ClientCapabilities>) -> bool {
    caps.and_then(|c| c.elicitation.as_ref())
        .is_some_and(|e| e.form.is_some() || e.url.is_none())
}

/// Does this request speak a protocol version without server-to-client requests
/// (2026-07-28 or later)?
pub(super) fn input_required_era(ctx: &RequestContext<RoleServer>) -> bool {
    const FIRST: &str = "2026-07-28";
    let requested = ctx.meta.protocol_version();
    let negotiated = ctx.peer.peer_info().map(|i| i.protocol_version.clone());
    requested
        .or(negotiated)
        .is_some_and(|v| v.as_str() >= FIRST)
}

/// The question toolgate asks, as the client's user reads it.
fn question(request: &ApprovalRequest) -> ElicitRequestParams {
    let message = format!(
        "{APPROVAL_HEADER}\n\n{}\n\nAccept to run this call once; decline to refuse it.",
        request.render()
    );
    let mut meta = RequestMetaObject::new();
    meta.0.0.insert(
        APPROVAL_META.to_owned(),
        serde_json::json!({"interaction_id": request.interaction_id}),
    );
    ElicitRequestParams::FormElicitationParams {
        meta: Some(meta),
        message,
        requested_schema: ElicitationSchema::new(BTreeMap::new()),
    }
}

fn outcome(answer: ElicitResult, principal: &Principal) -> ApprovalOutcome {
    let approver = principal.approver();
    match answer.action {
        ElicitationAction::Accept => ApprovalOutcome::Approved { approver },
        ElicitationAction::Decline => ApprovalOutcome::Denied {
            approver,
            reason: Some(String::from("declined in the MCP client")),
        },
        ElicitationAction::Cancel => ApprovalOutcome::Denied {
            approver,
            reason: Some(String::from(
                "cancelled in the MCP client (the question was dismissed)",
            )),
        },
        _ => ApprovalOutcome::Refused {
            reason: String::from(
                "the MCP client answered the elicitation with an action toolgate does not know",
            ),
        },
    }
}

impl Asker {
    async fn ask(&self, request: ApprovalRequest) -> ApprovalOutcome {
        let params = question(&request);
        match &self.way {
            Way::Cannot => ApprovalOutcome::Unroutable(String::from(
                "this agent's asks are routed to `elicitation`, and the MCP client that made the call did not declare the elicitation capability (form mode)",
            )),
            Way::Request(peer) => match peer.create_elicitation(params).await {
                Ok(answer) => outcome(answer, &self.principal),
                Err(e) => ApprovalOutcome::Unroutable(format!(
                    "the MCP client could not be asked by elicitation: {e}"
                )),
            },
            Way::InputRequired(slot) => {
                let Some(to_handler) = lock(slot).take() else {
                    return ApprovalOutcome::Unroutable(String::from(
                        "a call is asked one question by elicitation, and this one was asked already",
                    ));
                };
                let (tx, rx) = oneshot::channel();
                if to_handler.send(Question { params, answer: tx }).is_err() {
                    return ApprovalOutcome::Cancelled;
                }
                match rx.await {
                    Ok(Answer::Result(answer)) => outcome(answer, &self.principal),
                    Ok(Answer::Unreadable(why)) => ApprovalOutcome::Refused { reason: why },
                    // The question was dropped unanswered: the server is going away.
                    Err(_) => ApprovalOutcome::Cancelled,
                }
            }
        }
    }
}

/// The channel the gate asks for the `elicitation` kind: the calling client, through the
/// [`Asker`] of the task that runs its call. No asker (a call that did not come from a
/// downstream client) is unroutable, never an approval; a resume ticket is the durable
/// inbox's to redeem, never a client's to answer.
#[derive(Debug, Default)]
pub(super) struct ElicitationChannel;

impl ApprovalChannel for ElicitationChannel {
    fn kind(&self) -> ChannelKind {
        ChannelKind::Elicitation
    }

    fn request(&self, request: ApprovalRequest) -> BoxFuture<ApprovalOutcome> {
        let answered = self.request_verified(request);
        Box::pin(async move { answered.await.outcome })
    }

    /// Issue 22: an answer by elicitation is recorded with the verified principal of the
    /// session's JWT (`sub`, `iss`) when the caller authenticated with one; a static-token,
    /// stdio or unauthenticated caller's answer has none. Only beside a person's answer
    /// (approved or denied).
    fn request_verified(&self, request: ApprovalRequest) -> BoxFuture<VerifiedOutcome> {
        let unanswered = |outcome| {
            Box::pin(std::future::ready(VerifiedOutcome {
                outcome,
                answered_by: None,
            }))
        };
        if request.ticket.is_some() {
            return unanswered(ApprovalOutcome::Refused {
                reason: String::from(
                    "a resumed held call is redeemed by the durable inbox, never answered by elicitation",
                ),
            });
        }
        match ASKER.try_with(Arc::clone) {
            Ok(asker) => Box::pin(async move {
                let outcome = asker.ask(request).await;
                let answered_by = match &outcome {
                    ApprovalOutcome::Approved { .. } | ApprovalOutcome::Denied { .. } => {
                        asker.principal.verified.clone()
                    }
                    _ => None,
                };
                VerifiedOutcome {
                    outcome,
                    answered_by,
                }
            }),
            Err(_) => unanswered(ApprovalOutcome::Unroutable(String::from(
                "the call did not come from an MCP client that could be asked",
            ))),
        }
    }
}

/// A question a 2026-07-28 client took away to its user; its retry answers it.
pub(super) struct Open {
    /// The key the retry must come with (`Caller::key`).
    pub(super) caller: String,
    pub(super) agent: String,
    pub(super) tool: String,
    pub(super) input: Value,
    pub(super) answer: oneshot::Sender<Answer>,
    pub(super) done: oneshot::Receiver<ToolResponse>,
}

/// The questions open for a retry, by their unguessable `requestState`.
#[derive(Default)]
pub(super) struct OpenQuestions {
    open: Mutex<HashMap<String, Open>>,
}

/// Why a retry was not taken as the answer to an open question.
pub(super) enum RetryRefused {
    /// No open question has this state (never issued, answered already, or ended).
    Unknown,
    /// The retry is not the call the question was about, or comes from another caller.
    Mismatch,
}

impl OpenQuestions {
    /// Keeps a question open under a new unguessable state. Given back when it cannot be:
    /// too many are open, or no randomness could be had for the state (boxed: the rare
    /// path, and it keeps the `Result` small).
    pub(super) fn open(&self, question: Open) -> Result<String, Box<Open>> {
        let mut open = lock(&self.open);
        // A question whose call has ended (the gate's wait expired) is gone.
        open.retain(|_, q| !q.answer.is_closed());
        if open.len() >= MAX_OPEN_QUESTIONS {
            return Err(Box::new(question));
        }
        // Fail closed: with no randomness there is no unguessable state, so no question.
        let Some(state) = toolgate::approval::interaction_id() else {
            return Err(Box::new(question));
        };
        open.insert(state.clone(), question);
        Ok(state)
    }

    /// Closes the question open under `state`, if it still is (its wait is over: the gate
    /// reads the dropped question as a cancellation).
    pub(super) fn close(&self, state: &str) {
        lock(&self.open).remove(state);
    }

    /// Takes the retry's answer to the question open under `state` and gives back where the
    /// call's result comes. The retry must come from the caller the question was asked of,
    /// for the same agent, tool and input.
    pub(super) fn answer(
        &self,
        state: &str,
        (caller, agent, tool, input): (&str, &str, &str, &Value),
        responses: Option<&InputResponses>,
    ) -> Result<oneshot::Receiver<ToolResponse>, RetryRefused> {
        let mut open = lock(&self.open);
        let Some(q) = open.get(state) else {
            return Err(RetryRefused::Unknown);
        };
        if q.caller != caller || q.agent != agent || q.tool != tool || &q.input != input {
            return Err(RetryRefused::Mismatch);
        }
        let Some(q) = open.remove(state) else {
            return Err(RetryRefused::Unknown);
        };
        drop(open);
        let answer = match responses.and_then(|r| r.get(APPROVAL_INPUT_KEY)) {
            None => Answer::Unreadable(String::from(
                "the client's retry carried no answer to toolgate's approval question",
            )),
            Some(v) => match serde_json::from_value::<ElicitResult>(v.clone()) {
                Ok(r) => Answer::Result(r),
                Err(e) => Answer::Unreadable(format!(
                    "the client's answer to toolgate's approval question could not be read: {e}"
                )),
            },
        };
        // The gate may have stopped waiting meanwhile (expired): its own ending stands.
        let _ = q.answer.send(answer);
        Ok(q.done)
    }
}

/// The `InputRequiredResult` that carries `params` to the client under `state`.
pub(super) fn input_required(params: ElicitRequestParams, state: String) -> InputRequiredResult {
    let mut requests = InputRequests::new();
    requests.insert(
        APPROVAL_INPUT_KEY.to_owned(),
        InputRequest::Elicitation(ElicitRequest::new(params)),
    );
    InputRequiredResult::new(Some(requests), Some(state))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{ElicitationCapability, FormElicitationCapability, UrlElicitationCapability};

    #[test]
    fn r47_elicitation_is_declared_as_each_protocol_version_declares_it() {
        let with = |e: Option<ElicitationCapability>| {
            let mut c = ClientCapabilities::default();
            c.elicitation = e;
            c
        };
        assert!(!declares_form(None));
        assert!(!declares_form(Some(&with(None))));
        // 2025-06-18: `elicitation: {}` is form mode.
        assert!(declares_form(Some(&with(Some(
            ElicitationCapability::default()
        )))));
        let mut form = ElicitationCapability::default();
        form.form = Some(FormElicitationCapability::default());
        assert!(declares_form(Some(&with(Some(form)))));
        let mut url = ElicitationCapability::default();
        url.url = Some(UrlElicitationCapability::default());
        assert!(!declares_form(Some(&with(Some(url)))), "url mode only");
    }

    #[test]
    fn r47_an_answer_names_the_token_agent_and_session_never_a_constant() {
        let p = Principal {
            credential: String::from("token `laptop`"),
            agent: String::from("support"),
            session: String::from("mcp-1-2-3"),
            verified: None,
        };
        let ApprovalOutcome::Approved { approver } =
            outcome(ElicitResult::new(ElicitationAction::Accept), &p)
        else {
            panic!("accept approves");
        };
        assert_eq!(
            approver,
            "elicitation: token `laptop` (agent `support`, session `mcp-1-2-3`)"
        );
    }

    #[tokio::test]
    async fn r47_a_retry_answers_only_the_question_of_its_own_caller_and_call() {
        let qs = OpenQuestions::default();
        let (tx, mut rx) = oneshot::channel();
        let (done_tx, done_rx) = oneshot::channel();
        let input = serde_json::json!({"amount": 5});
        let state = qs
            .open(Open {
                caller: "tok-a".into(),
                agent: "support".into(),
                tool: "bank__transfer".into(),
                input: input.clone(),
                answer: tx,
                done: done_rx,
            })
            .ok()
            .unwrap();
        let accept = InputResponses::from([(
            APPROVAL_INPUT_KEY.to_owned(),
            serde_json::json!({"action": "accept"}),
        )]);
        // Another caller, another input, another tool, a guessed state: refused, still open.
        for who in [
            ("tok-b", "support", "bank__transfer", &input),
            (
                "tok-a",
                "support",
                "bank__transfer",
                &serde_json::json!({"amount": 6}),
            ),
            ("tok-a", "support", "bank__other", &input),
        ] {
            assert!(matches!(
                qs.answer(&state, who, Some(&accept)),
                Err(RetryRefused::Mismatch)
            ));
        }
        assert!(matches!(
            qs.answer(
                "guessed",
                ("tok-a", "support", "bank__transfer", &input),
                Some(&accept)
            ),
            Err(RetryRefused::Unknown)
        ));
        assert!(rx.try_recv().is_err(), "nothing answered yet");
        let done = qs
            .answer(
                &state,
                ("tok-a", "support", "bank__transfer", &input),
                Some(&accept),
            )
            .ok()
            .unwrap();
        assert!(
            matches!(rx.try_recv(), Ok(Answer::Result(r)) if r.action == ElicitationAction::Accept)
        );
        // Answered once: the same state again is unknown.
        assert!(matches!(
            qs.answer(
                &state,
                ("tok-a", "support", "bank__transfer", &input),
                Some(&accept)
            ),
            Err(RetryRefused::Unknown)
        ));
        drop(done_tx);
        assert!(done.await.is_err());
    }
}
