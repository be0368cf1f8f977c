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
//! - **2026-07-28 and later** (no server-to-client requests, no sessions): the capability is
//!   read from the request's own `_meta` (`io.modelcontextprotocol/clientCapabilities`), and
//!   the question goes back as the call's `InputRequiredResult` (SEP-2322). Nothing waits:
//!   the call ends there, and the question is kept ([`QuestionBook`]) — in the durable inbox
//!   every replica shares when one is configured, else in this process — under a key bound
//!   to toolgate's unguessable `requestState`, the caller, the agent, the tool and the input.
//!   The client's retry (the same tool and input, that `requestState`, from the same caller),
//!   on whichever replica it reaches, takes the question once and is decided afresh, its
//!   answer standing for the question it was asked (R38: a new reason is a new question).
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
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use toolgate::approval::{
    ApprovalChannel, ApprovalOutcome, ApprovalRequest, BoxFuture, VerifiedOutcome,
};
use toolgate_core::ChannelKind;
use toolgate_core::number::NumberLiterals;
use toolgate_inbox::{InboxStore, OpenQuestion, Timestamp};

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
    /// R47: the verified `sub` and `iss` of the JWT the caller authenticated with, when it
    /// did (never read from anything the client says about itself): recorded as the
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
    /// 2026-07-28, the first request: the question is kept here for the request handler,
    /// which returns it as the call's `InputRequiredResult`; the call ends held. At most one
    /// question per call.
    Defer(Mutex<Option<Deferred>>),
    /// 2026-07-28, the retry: the answer its client brought to the question it was asked,
    /// and the reasons that question gave.
    Answered { answer: Answer, asked: Vec<String> },
}

/// The calling client, for the task that runs its call.
pub(super) struct Asker {
    pub(super) way: Way,
    pub(super) principal: Principal,
}

tokio::task_local! {
    pub(super) static ASKER: Arc<Asker>;
}

/// A question kept for the request handler (2026-07-28 clients): what the client's user reads,
/// and the reasons it gives.
pub(super) struct Deferred {
    pub(super) params: ElicitRequestParams,
    pub(super) asked: Vec<String>,
}

impl Asker {
    /// The question the call was asked, when it was deferred to the client.
    pub(super) fn deferred(&self) -> Option<Deferred> {
        match &self.way {
            Way::Defer(slot) => lock(slot).take(),
            _ => None,
        }
    }
}

/// What the client's retry said.
#[derive(Clone)]
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
            Way::Defer(slot) => {
                let mut slot = lock(slot);
                if slot.is_some() {
                    return ApprovalOutcome::Unroutable(String::from(
                        "a call is asked one question by elicitation, and this one was asked already",
                    ));
                }
                *slot = Some(Deferred {
                    params,
                    asked: request.reasons(),
                });
                ApprovalOutcome::Held {
                    interaction_id: request.interaction_id.clone(),
                }
            }
            Way::Answered { answer, asked } => {
                // R38: the answer stands only for the question it was asked.
                if let Some(new) = request.reasons().into_iter().find(|r| !asked.contains(r)) {
                    return ApprovalOutcome::Refused {
                        reason: format!(
                            "the decision changed since the client's user was asked: it now also asks \"{new}\", which the answer did not answer; call again to be asked"
                        ),
                    };
                }
                match answer.clone() {
                    Answer::Result(answer) => outcome(answer, &self.principal),
                    Answer::Unreadable(why) => ApprovalOutcome::Refused { reason: why },
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

    /// R47: an answer by elicitation is recorded with the verified principal of the
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

/// Where the questions 2026-07-28 clients took to their users are kept for their retries:
/// the durable inbox every replica shares, or this process's memory when there is none (one
/// process: a retry that reaches another is not answered).
pub(super) enum QuestionBook {
    Memory(Mutex<HashMap<String, OpenQuestion>>),
    Store(Arc<dyn InboxStore>),
}

/// What a kept question remembers, beside its key: the input exactly as asked about (every
/// number as written, R20) and the reasons the question gave.
#[derive(Serialize, Deserialize)]
struct Kept {
    input: String,
    asked: Vec<String>,
}

/// Who asks and what about: the caller's key, its agent, the tool and the input.
pub(super) struct Asked<'a> {
    pub(super) caller: &'a str,
    pub(super) agent: &'a str,
    pub(super) tool: &'a str,
    pub(super) input: &'a Value,
    pub(super) literals: &'a NumberLiterals,
}

impl Asked<'_> {
    /// The key the question about this call, asked under `state`, is kept by: a SHA-256 of the
    /// state, the caller, the agent, the tool and the input's canonical hash. The state itself
    /// is never kept, and a retry by another caller or about another call finds nothing.
    fn key(&self, state: &str) -> Option<String> {
        let input = toolgate_engine::canon::input_hash(self.input)?;
        let mut h = Sha256::new();
        for part in [state, self.caller, self.agent, self.tool, &input] {
            h.update(part.as_bytes());
            h.update([0]);
        }
        Some(format!("sha256:{}", toolgate_core::id::hex(&h.finalize())))
    }
}

impl QuestionBook {
    /// Keeps `question` about `call` until `expires_at`; gives back the unguessable state the
    /// client's retry must carry, or why it could not be kept (too many open, no randomness,
    /// the store failing): then the call is refused.
    pub(super) async fn open(
        &self,
        call: &Asked<'_>,
        asked: Vec<String>,
        expires_at: Timestamp,
    ) -> Result<String, String> {
        // Fail closed: with no randomness there is no unguessable state, so no question.
        let state = toolgate::approval::interaction_id()
            .ok_or_else(|| String::from("no unguessable state could be made for the question"))?;
        let key = call.key(&state).ok_or_else(|| {
            String::from("the input cannot be canonicalised, so no question can be bound to it")
        })?;
        let body = serde_json::to_string(&Kept {
            input: toolgate_core::number::to_text(call.input, call.literals),
            asked,
        })
        .map_err(|e| format!("the question could not be written: {e}"))?;
        let question = OpenQuestion {
            key,
            body,
            expires_at,
        };
        let now = Timestamp::now();
        let kept = match self {
            Self::Memory(open) => {
                let mut open = lock(open);
                open.retain(|_, q| !q.is_past(now));
                open.len() < MAX_OPEN_QUESTIONS
                    && open.insert(question.key.clone(), question).is_none()
            }
            Self::Store(store) => store
                .open_question(question, MAX_OPEN_QUESTIONS as u32, now)
                .await
                .map_err(|e| format!("the approval question could not be kept: {e}"))?,
        };
        if kept {
            Ok(state)
        } else {
            Err(String::from(
                "too many approval questions are open for their clients' answers; try again later",
            ))
        }
    }

    /// Takes the question the retry `call` answers under `state`, once, and reads the answer
    /// from the retry's `responses`: the way the retried call's gate is answered, or why the
    /// retry answers nothing.
    pub(super) async fn answer(
        &self,
        state: &str,
        call: &Asked<'_>,
        responses: Option<&InputResponses>,
    ) -> Result<Way, String> {
        let unknown = || {
            String::from(
                "no approval question of toolgate's is open under this `requestState` for this caller and call: it was answered already, it expired, it was never asked, or the retry is another call (another tool, input or caller); nothing was answered",
            )
        };
        let key = call.key(state).ok_or_else(unknown)?;
        let taken = match self {
            Self::Memory(open) => lock(open).remove(&key),
            Self::Store(store) => store
                .take_question(&key)
                .await
                .map_err(|e| format!("the approval question could not be read: {e}"))?,
        };
        let question = taken.ok_or_else(unknown)?;
        if question.is_past(Timestamp::now()) {
            return Err(String::from(
                "the approval question expired before the client's retry answered it; nothing was answered, and calling again asks anew",
            ));
        }
        let kept: Kept = serde_json::from_str(&question.body)
            .map_err(|e| format!("the kept approval question cannot be read: {e}"))?;
        // R35: the exact input asked about, every number as written.
        let same = toolgate_core::number::parse_with_literals(&kept.input).is_ok_and(|(v, l)| {
            toolgate_core::number::same_input(&v, &l, call.input, call.literals)
        });
        if !same {
            return Err(unknown());
        }
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
        Ok(Way::Answered {
            answer,
            asked: kept.asked,
        })
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
}
