//! The order of what an upstream server sends during a call, kept across rmcp's tasks.
//!
//! A server sends a call's last progress notification or log message just before its
//! result, and on the wire they arrive in that order. rmcp hands each notification to the
//! client handler on a task of its own, and the result straight to the waiting request, so
//! the result may overtake the notifications sent before it — and a client stops listening
//! for a request's progress once it has the result. So each connection counts the
//! notifications it relays as the transport reads them ([`Counted`]) and as the handler has
//! routed them ([`Arrivals::handled`]); a call that has its result waits
//! ([`Arrivals::settled`]) until every relayed notification read so far is routed to its
//! call's relay. No timing is guessed: the wait ends when the count is reached.

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rmcp::RoleClient;
use rmcp::model::{GetMeta, JsonRpcMessage, ServerNotification};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::sync::Notify;

/// The longest a call waits for the notifications read before its result to be routed: a
/// handler that never runs (a runtime shutting down) must not hold a result for ever.
const AT_MOST: Duration = Duration::from_secs(2);

/// The relayed notifications one connection has read and routed.
#[derive(Debug, Default)]
pub(crate) struct Arrivals {
    read: AtomicU64,
    routed: AtomicU64,
    changed: Notify,
}

impl Arrivals {
    /// A relayed notification was handed to its call's relay (or dropped as no call's).
    pub(crate) fn handled(&self) {
        self.routed.fetch_add(1, Ordering::AcqRel);
        self.changed.notify_waiters();
    }

    /// Waits until every relayed notification read so far has been routed.
    pub(crate) async fn settled(&self) {
        let target = self.read.load(Ordering::Acquire);
        if self.routed.load(Ordering::Acquire) >= target {
            return;
        }
        let wait = async {
            loop {
                let changed = self.changed.notified();
                if self.routed.load(Ordering::Acquire) >= target {
                    return;
                }
                changed.await;
            }
        };
        if tokio::time::timeout(AT_MOST, wait).await.is_err() {
            tracing::warn!(
                target: "toolgate_mcp::relay",
                "notifications read before a call's result were not routed within {AT_MOST:?}; the result is answered without them"
            );
        }
    }

    fn read_one(&self) {
        self.read.fetch_add(1, Ordering::AcqRel);
    }
}

/// Whether `message` is a notification the handler routes to a call's relay (progress or
/// a log message) and counts as [`Arrivals::handled`]: rmcp gives one that belongs to a
/// subscription to the subscription instead, so it is not counted.
fn relayed(message: &RxJsonRpcMessage<RoleClient>) -> bool {
    let JsonRpcMessage::Notification(n) = message else {
        return false;
    };
    #[allow(deprecated, reason = "log messages (SEP-2577) are still relayed")]
    let kind = matches!(
        n.notification,
        ServerNotification::ProgressNotification(_)
            | ServerNotification::LoggingMessageNotification(_)
    );
    kind && n.notification.get_meta().subscription_id().is_none()
}

/// A client transport that counts the relayed notifications it reads (see the module).
pub(crate) struct Counted<T> {
    inner: T,
    arrivals: Arc<Arrivals>,
}

impl<T> Counted<T> {
    pub(crate) fn new(inner: T, arrivals: Arc<Arrivals>) -> Self {
        Self { inner, arrivals }
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Counted<T> {
    type Error = T::Error;

    fn name() -> Cow<'static, str> {
        T::name()
    }

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let message = self.inner.receive().await?;
        if relayed(&message) {
            self.arrivals.read_one();
        }
        Some(message)
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_wait_ends_when_every_notification_read_is_routed() {
        let arrivals = Arc::new(Arrivals::default());
        arrivals.read_one();
        arrivals.read_one();
        let waiting = tokio::spawn({
            let a = Arc::clone(&arrivals);
            async move { a.settled().await }
        });
        tokio::task::yield_now().await;
        arrivals.handled();
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "one of two routed: still waiting");
        arrivals.handled();
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("settled once both are routed")
            .expect("no panic");
    }

    #[tokio::test]
    async fn nothing_read_nothing_waited() {
        let arrivals = Arrivals::default();
        tokio::time::timeout(Duration::from_millis(50), arrivals.settled())
            .await
            .expect("no wait when nothing is outstanding");
    }
}
