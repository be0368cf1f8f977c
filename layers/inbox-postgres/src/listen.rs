//! Waking waiters: the inbox's triggers `NOTIFY` every state change and every policy
//! replacement on the inbox's channel; one connection per [`crate::PostgresInbox`] `LISTEN`s
//! and fans the notices out to [`Subscription`]s.

use std::time::Duration;

use tokio::sync::{broadcast, oneshot};
use tokio::task::JoinHandle;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{AsyncMessage, Client, Config, NoTls, Socket};
use toolgate_inbox::{InboxError, InboxErrorKind, State};

use crate::error;
use crate::schema::quote_ident;
use crate::tls::{Connector, Prepared};

/// How many notices a slow subscriber may fall behind before it is told it missed some.
const CAPACITY: usize = 1024;

/// A change the inbox announced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// A held call entered `state` (held, answered, expired, cancelled, claimed, recorded or
    /// recovered), by any instance or any other writer.
    State {
        /// The held call.
        interaction_id: String,
        /// Its new state.
        state: State,
    },
    /// The stored policy was put (or its row rewritten).
    Policy {
        /// The stored `updatedAt`.
        updated_at: String,
    },
    /// Notices may have been lost: the listening connection was lost and is back, or this
    /// subscriber fell behind. Look again at whatever you wait for.
    Missed,
}

impl Notice {
    /// Reads a notification's payload: `<state> <interaction id>` or `policy <updatedAt>`.
    fn parse(payload: &str) -> Option<Self> {
        let (head, rest) = payload.split_once(' ')?;
        if head == "policy" {
            return Some(Notice::Policy {
                updated_at: rest.to_owned(),
            });
        }
        State::parse(head).map(|state| Notice::State {
            interaction_id: rest.to_owned(),
            state,
        })
    }
}

/// A stream of [`Notice`]s from one inbox, from [`crate::PostgresInbox::subscribe`].
///
/// Every change committed after `subscribe` returned is announced (or, when notices were
/// lost, a [`Notice::Missed`] follows).
#[derive(Debug)]
pub struct Subscription {
    rx: broadcast::Receiver<Notice>,
}

impl Subscription {
    /// The next notice; `None` once the inbox is gone.
    pub async fn next(&mut self) -> Option<Notice> {
        match self.rx.recv().await {
            Ok(notice) => Some(notice),
            Err(broadcast::error::RecvError::Lagged(_)) => Some(Notice::Missed),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }
}

/// The listening connection's task and the fan-out.
#[derive(Debug)]
pub(crate) struct Listener {
    tx: broadcast::Sender<Notice>,
    task: JoinHandle<()>,
}

impl Listener {
    /// Connects, `LISTEN`s on `channel`, and keeps doing so (reconnecting every `retry`)
    /// until dropped. Returns once the first `LISTEN` is in force, or with the reason it
    /// could not be.
    pub(crate) async fn start(
        how: Prepared,
        channel: String,
        server: String,
        retry: Duration,
    ) -> Result<Self, InboxError> {
        let (tx, _) = broadcast::channel(CAPACITY);
        let (ready_tx, ready_rx) = oneshot::channel();
        let task = tokio::spawn(run(how, channel, server, tx.clone(), ready_tx, retry));
        match ready_rx.await {
            Ok(Ok(())) => Ok(Self { tx, task }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(InboxError::new(
                InboxErrorKind::Backend,
                "the inbox's listening task ended before it listened",
            )),
        }
    }

    pub(crate) fn subscribe(&self) -> Subscription {
        Subscription {
            rx: self.tx.subscribe(),
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        // Dropping the task's client closes the listening connection.
        self.task.abort();
    }
}

async fn run(
    how: Prepared,
    channel: String,
    server: String,
    tx: broadcast::Sender<Notice>,
    ready: oneshot::Sender<Result<(), InboxError>>,
    retry: Duration,
) {
    let mut ready = Some(ready);
    loop {
        let config = &how.config;
        let once = match &how.connector {
            Connector::Plain => listen_once(config, NoTls, &channel, &server, &tx).await,
            Connector::Tls(tls) => listen_once(config, tls.clone(), &channel, &server, &tx).await,
        }
        .map_err(|e| how.transport.explain(e));
        match once {
            Ok((client, driver)) => {
                match ready.take() {
                    Some(ready) => {
                        let _ = ready.send(Ok(()));
                    }
                    None => {
                        tracing::info!(server, channel, "the inbox is listening again");
                        let _ = tx.send(Notice::Missed);
                    }
                }
                let _ = driver.await;
                drop(client);
                tracing::warn!(
                    server,
                    channel,
                    "the inbox's listening connection was lost; reconnecting"
                );
            }
            Err(e) => {
                if let Some(ready) = ready.take() {
                    let _ = ready.send(Err(e));
                    return;
                }
                tracing::warn!(server, error = %e, "the inbox's listening connection cannot reconnect yet");
            }
        }
        tokio::time::sleep(retry).await;
    }
}

/// One listening connection: its client (dropping it closes the connection) and the task
/// that drives the connection and forwards notifications until it closes.
async fn listen_once<T>(
    config: &Config,
    tls: T,
    channel: &str,
    server: &str,
    tx: &broadcast::Sender<Notice>,
) -> Result<(Client, JoinHandle<()>), InboxError>
where
    T: MakeTlsConnect<Socket>,
    T::Stream: Send + 'static,
    T::TlsConnect: Send,
    <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
{
    let (client, mut connection) = config
        .connect(tls)
        .await
        .map_err(|e| error::db(server, &e))?;
    let forward = tx.clone();
    let server_name = server.to_owned();
    let driver = tokio::spawn(async move {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(n))) => {
                    if let Some(notice) = Notice::parse(n.payload()) {
                        // No subscriber is not an error.
                        let _ = forward.send(notice);
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    tracing::warn!(server = server_name, error = %error::describe(&e), "the inbox's listening connection failed");
                    return;
                }
                None => return,
            }
        }
    });
    client
        .batch_execute(&format!("LISTEN {}", quote_ident(channel)))
        .await
        .map_err(|e| error::db(server, &e))?;
    Ok((client, driver))
}

/// Whether a call in `from` can still come to be in `to`.
pub(crate) fn can_reach(from: State, to: State) -> bool {
    from == to
        || match from {
            State::Pending => to != State::Pending,
            State::Approved => matches!(
                to,
                State::Claimed | State::Done | State::Failed | State::Unknown
            ),
            State::Claimed => matches!(to, State::Done | State::Failed | State::Unknown),
            _ => false,
        }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_parse() {
        assert_eq!(
            Notice::parse("approved ia_0123"),
            Some(Notice::State {
                interaction_id: "ia_0123".into(),
                state: State::Approved
            })
        );
        assert_eq!(
            Notice::parse("policy 2030-01-01T00:00:00.000001Z"),
            Some(Notice::Policy {
                updated_at: "2030-01-01T00:00:00.000001Z".into()
            })
        );
        assert_eq!(Notice::parse("sideways ia_1"), None);
        assert_eq!(Notice::parse("approved"), None);
    }

    #[test]
    fn reachability_follows_the_state_machine() {
        use State::*;
        assert!(can_reach(Pending, Approved) && can_reach(Pending, Done));
        assert!(can_reach(Approved, Done) && !can_reach(Approved, Denied));
        assert!(!can_reach(Claimed, Approved) && can_reach(Claimed, Unknown));
        assert!(!can_reach(Approved, Pending));
        for s in State::ALL {
            assert!(can_reach(s, s));
            if s.is_final() {
                assert!(State::ALL.iter().all(|&t| t == s || !can_reach(s, t)));
            }
        }
    }
}
