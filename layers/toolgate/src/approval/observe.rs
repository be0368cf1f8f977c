//! Watching approval waits: the gate tells a [`WaitObserver`] when a call starts waiting
//! for a person and when that wait ends, and how — for metrics (`toolgate_otel`'s
//! `ApprovalMetrics`) without this crate depending on a telemetry library.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use toolgate_core::ChannelKind;

use toolgate_core::approval::ApprovalOutcome;

/// A call started waiting for a person.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct WaitStarted {
    /// The kind of channel the question went to.
    pub channel: ChannelKind,
}

/// How a wait for a person ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WaitOutcome {
    /// A person approved.
    Approved,
    /// A person denied.
    Denied,
    /// Nobody answered in time (the channel's or the agent's timeout).
    Expired,
    /// The wait was cancelled: by the channel, or the call's future was dropped.
    Cancelled,
    /// The call was held for a later answer (a durable inbox).
    Held,
    /// The channel could not route the question.
    Unroutable,
    /// The channel refused the question (an error of the channel).
    ChannelRefused,
}

impl WaitOutcome {
    /// The outcome of a channel's answer.
    pub fn of(outcome: &ApprovalOutcome) -> Self {
        match outcome {
            ApprovalOutcome::Approved { .. } => Self::Approved,
            ApprovalOutcome::Denied { .. } => Self::Denied,
            ApprovalOutcome::Expired => Self::Expired,
            ApprovalOutcome::Cancelled => Self::Cancelled,
            ApprovalOutcome::Held { .. } => Self::Held,
            ApprovalOutcome::Unroutable(_) => Self::Unroutable,
            ApprovalOutcome::Refused { .. } => Self::ChannelRefused,
        }
    }

    /// The metric attribute value: `approved`, `denied`, `expired`, `cancelled`, `held`,
    /// `unroutable`, `channel_refused`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Approved => "approved",
            Self::Denied => "denied",
            Self::Expired => "expired",
            Self::Cancelled => "cancelled",
            Self::Held => "held",
            Self::Unroutable => "unroutable",
            Self::ChannelRefused => "channel_refused",
        }
    }
}

/// A wait for a person ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct WaitEnded {
    /// The kind of channel the question went to.
    pub channel: ChannelKind,
    /// How it ended.
    pub outcome: WaitOutcome,
    /// How long the call waited (the runtime's clock: paused time in tests).
    pub waited: Duration,
}

/// Told about every wait for a person the gate starts: exactly one
/// [`wait_ended`](WaitObserver::wait_ended) follows each
/// [`wait_started`](WaitObserver::wait_started), also when the call's future is dropped
/// mid-wait (`cancelled`). Called on the call's task: keep it cheap and never block.
pub trait WaitObserver: Send + Sync + 'static {
    /// A call started waiting.
    fn wait_started(&self, wait: &WaitStarted) {
        let _ = wait;
    }

    /// A wait ended.
    fn wait_ended(&self, wait: &WaitEnded) {
        let _ = wait;
    }
}

/// One wait being watched: reports its end once, `cancelled` if dropped first.
pub(crate) struct WaitWatch {
    observer: Option<Arc<dyn WaitObserver>>,
    channel: ChannelKind,
    started: tokio::time::Instant,
}

impl fmt::Debug for WaitWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WaitWatch")
            .field("channel", &self.channel)
            .finish_non_exhaustive()
    }
}

impl WaitWatch {
    pub(crate) fn start(observer: Option<Arc<dyn WaitObserver>>, channel: ChannelKind) -> Self {
        if let Some(o) = &observer {
            o.wait_started(&WaitStarted { channel });
        }
        Self {
            observer,
            channel,
            started: tokio::time::Instant::now(),
        }
    }

    pub(crate) fn end(mut self, outcome: WaitOutcome) {
        self.report(outcome);
    }

    fn report(&mut self, outcome: WaitOutcome) {
        if let Some(o) = self.observer.take() {
            o.wait_ended(&WaitEnded {
                channel: self.channel,
                outcome,
                waited: self.started.elapsed(),
            });
        }
    }
}

impl Drop for WaitWatch {
    fn drop(&mut self) {
        // The call's future was dropped mid-wait.
        self.report(WaitOutcome::Cancelled);
    }
}
