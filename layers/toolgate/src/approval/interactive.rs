//! The in-process interactive channel: the host application receives a stream of pending
//! questions and answers them; a question nobody answers in time expires (R26).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use toolgate_core::ChannelKind;

use toolgate_core::approval::{ApprovalChannel, ApprovalOutcome, ApprovalRequest, BoxFuture};

/// A person's answer to one question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalAnswer {
    /// Approve that one call.
    Approve {
        /// Who approves.
        approver: String,
    },
    /// Deny it.
    Deny {
        /// Who denies.
        approver: String,
        /// Why.
        reason: Option<String>,
    },
}

/// Why an answer was not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalAnswerError {
    /// The id was never issued, or its wait already ended (answered, expired, cancelled).
    NotPending(String),
}

impl fmt::Display for ApprovalAnswerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApprovalAnswerError::NotPending(id) => write!(
                f,
                "no question `{id}` is waiting: it was never issued, or it was already answered, expired or cancelled"
            ),
        }
    }
}

impl std::error::Error for ApprovalAnswerError {}

#[derive(Debug)]
struct Shared {
    pending: Mutex<HashMap<String, oneshot::Sender<ApprovalAnswer>>>,
    queue: mpsc::UnboundedSender<PendingApproval>,
    timeout: Duration,
}

impl Shared {
    fn take(&self, id: &str) -> Option<oneshot::Sender<ApprovalAnswer>> {
        // A poisoned lock means a panic elsewhere; answer nothing rather than guess.
        self.pending.lock().ok()?.remove(id)
    }
}

/// The in-process interactive channel.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use std::time::Duration;
/// use toolgate::approval::{ApprovalChannel, ApprovalOutcome, InteractiveChannel};
/// # use toolgate::approval::ApprovalRequest;
/// # use toolgate::core::{AgentRef, CallId, RunContext};
/// let (channel, mut questions) = InteractiveChannel::new(Duration::from_secs(60));
/// # let request = ApprovalRequest { interaction_id: "ia_1".into(), call_id: CallId::new("c"), tool: "refund".into(),
/// #   identities: vec![], agent: AgentRef::profile("a"), input: Default::default(), literals: Default::default(), input_hash: String::new(),
/// #   definition_hash: String::new(), asks: vec![], run: RunContext::default(), turn: None, ticket: None, target: None, approvals: 1, labels: None };
/// let waiting = tokio::spawn(channel.request(request));
/// let question = questions.recv().await.unwrap();
/// assert_eq!(question.request().tool, "refund");
/// question.approve("alice").unwrap();
/// assert_eq!(waiting.await.unwrap(), ApprovalOutcome::Approved { approver: "alice".into() });
/// assert!(channel.answer("ia_1", toolgate::approval::ApprovalAnswer::Approve { approver: "bob".into() }).is_err());
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct InteractiveChannel {
    shared: Arc<Shared>,
}

/// The host's end: pending questions, in the order they were asked.
#[derive(Debug)]
pub struct PendingApprovals {
    queue: mpsc::UnboundedReceiver<PendingApproval>,
}

impl PendingApprovals {
    /// The next question; `None` once the channel is gone.
    pub async fn recv(&mut self) -> Option<PendingApproval> {
        self.queue.recv().await
    }
}

/// One question waiting for an answer.
#[derive(Debug)]
pub struct PendingApproval {
    request: ApprovalRequest,
    shared: Arc<Shared>,
}

impl PendingApproval {
    /// The question: tool, full input, every reason.
    pub fn request(&self) -> &ApprovalRequest {
        &self.request
    }

    /// Approves this one call.
    pub fn approve(self, approver: impl Into<String>) -> Result<(), ApprovalAnswerError> {
        self::answer(
            &self.shared,
            &self.request.interaction_id,
            ApprovalAnswer::Approve {
                approver: approver.into(),
            },
        )
    }

    /// Denies it.
    pub fn deny(
        self,
        approver: impl Into<String>,
        reason: Option<String>,
    ) -> Result<(), ApprovalAnswerError> {
        self::answer(
            &self.shared,
            &self.request.interaction_id,
            ApprovalAnswer::Deny {
                approver: approver.into(),
                reason,
            },
        )
    }
}

impl Drop for PendingApproval {
    /// A question dropped without an answer is withdrawn: the wait ends `Cancelled`.
    fn drop(&mut self) {
        let _ = self.shared.take(&self.request.interaction_id);
    }
}

fn answer(shared: &Shared, id: &str, answer: ApprovalAnswer) -> Result<(), ApprovalAnswerError> {
    let tx = shared
        .take(id)
        .ok_or_else(|| ApprovalAnswerError::NotPending(id.to_owned()))?;
    tx.send(answer)
        .map_err(|_| ApprovalAnswerError::NotPending(id.to_owned()))
}

/// Removes a question from the pending map when its wait ends, however it ends (a dropped
/// gate future included), so a late answer is refused.
struct Withdraw {
    shared: Arc<Shared>,
    id: String,
}

impl Drop for Withdraw {
    fn drop(&mut self) {
        let _ = self.shared.take(&self.id);
    }
}

impl InteractiveChannel {
    /// A channel whose questions expire after `timeout`, and the host's end of it.
    pub fn new(timeout: Duration) -> (Self, PendingApprovals) {
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            pending: Mutex::new(HashMap::new()),
            queue: tx,
            timeout,
        });
        (Self { shared }, PendingApprovals { queue: rx })
    }

    /// Answers a question by id. An id this channel did not issue, or whose wait ended, is
    /// refused (R26).
    pub fn answer(
        &self,
        interaction_id: &str,
        answer: ApprovalAnswer,
    ) -> Result<(), ApprovalAnswerError> {
        self::answer(&self.shared, interaction_id, answer)
    }

    /// The ids of the questions now waiting.
    pub fn pending_ids(&self) -> Vec<String> {
        self.shared
            .pending
            .lock()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    }
}

impl ApprovalChannel for InteractiveChannel {
    fn kind(&self) -> ChannelKind {
        ChannelKind::Interactive
    }

    fn request(&self, request: ApprovalRequest) -> BoxFuture<ApprovalOutcome> {
        let shared = Arc::clone(&self.shared);
        Box::pin(async move {
            let id = request.interaction_id.clone();
            let (tx, rx) = oneshot::channel();
            match shared.pending.lock() {
                Ok(mut map) => {
                    if map.contains_key(&id) {
                        return ApprovalOutcome::Unroutable(format!(
                            "interaction `{id}` is already waiting"
                        ));
                    }
                    map.insert(id.clone(), tx);
                }
                Err(_) => {
                    return ApprovalOutcome::Unroutable(String::from(
                        "the interactive channel's state is unusable",
                    ));
                }
            }
            let _withdraw = Withdraw {
                shared: Arc::clone(&shared),
                id: id.clone(),
            };
            let pending = PendingApproval {
                request,
                shared: Arc::clone(&shared),
            };
            if shared.queue.send(pending).is_err() {
                return ApprovalOutcome::Unroutable(String::from(
                    "nobody is receiving the interactive channel's questions",
                ));
            }
            match tokio::time::timeout(shared.timeout, rx).await {
                Ok(Ok(ApprovalAnswer::Approve { approver })) => {
                    ApprovalOutcome::Approved { approver }
                }
                Ok(Ok(ApprovalAnswer::Deny { approver, reason })) => {
                    ApprovalOutcome::Denied { approver, reason }
                }
                // The host dropped the question without answering.
                Ok(Err(_)) => ApprovalOutcome::Cancelled,
                Err(_) => ApprovalOutcome::Expired,
            }
        })
    }
}
