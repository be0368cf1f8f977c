//! A terminal prompt: shows the tool, the full input and every reason, and reads `y` or
//! `n` from standard input. Anything but `y`/`yes` is a denial; no answer in time expires.

use std::io::{BufRead, Write};
use std::time::Duration;

use toolgate_core::ChannelKind;

use toolgate_core::approval::{ApprovalChannel, ApprovalOutcome, ApprovalRequest, BoxFuture};

/// The terminal prompt channel (used by the demo). Needs a Tokio runtime.
#[derive(Debug, Clone)]
pub struct TerminalChannel {
    approver: String,
    timeout: Duration,
}

impl TerminalChannel {
    /// A prompt answered as `approver`, expiring after `timeout`.
    pub fn new(approver: impl Into<String>, timeout: Duration) -> Self {
        Self {
            approver: approver.into(),
            timeout,
        }
    }
}

/// Reads one answer; `None` at end of input.
fn ask(question: &str) -> Option<bool> {
    let mut out = std::io::stderr().lock();
    let _ = write!(out, "{question}[y/N] ");
    let _ = out.flush();
    let mut line = String::new();
    match std::io::stdin().lock().read_line(&mut line) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(matches!(
            line.trim().to_ascii_lowercase().as_str(),
            "y" | "yes"
        )),
    }
}

impl ApprovalChannel for TerminalChannel {
    fn kind(&self) -> ChannelKind {
        ChannelKind::Interactive
    }

    fn request(&self, request: ApprovalRequest) -> BoxFuture<ApprovalOutcome> {
        let approver = self.approver.clone();
        let timeout = self.timeout;
        Box::pin(async move {
            let question = request.render();
            let read = tokio::task::spawn_blocking(move || ask(&question));
            match tokio::time::timeout(timeout, read).await {
                Ok(Ok(Some(true))) => ApprovalOutcome::Approved { approver },
                Ok(Ok(Some(false))) => ApprovalOutcome::Denied {
                    approver,
                    reason: Some(String::from("denied at the terminal prompt")),
                },
                Ok(Ok(None)) => ApprovalOutcome::Cancelled,
                Ok(Err(e)) => {
                    ApprovalOutcome::Unroutable(format!("the terminal prompt failed: {e}"))
                }
                Err(_) => ApprovalOutcome::Expired,
            }
        })
    }
}
