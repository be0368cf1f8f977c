//! The downstream half of the relay (`crate::relay`): while a governed call runs, what its
//! upstream server sends for it — progress, log messages, sampling and elicitation requests
//! — is delivered to the client that made the call, from within the call's own handler (so
//! streamable HTTP puts it on that request's stream where the transport can).
//!
//! Only a call the governed stack let through is ever registered upstream, so nothing here
//! runs for a refused or held call.

// Sampling and logging are deprecated by SEP-2577 in rmcp, and still what the clients of the
// protocol versions toolgate speaks expect: relaying them is the point of this module.
#![allow(
    deprecated,
    reason = "logging and sampling (SEP-2577): relayed from the upstream servers during a call"
)]

use std::future::Future;
use std::sync::Mutex;

use rmcp::model::{
    ElicitRequestParams, LoggingLevel, LoggingMessageNotificationParam, ProgressToken,
    SetLevelRequestParams,
};
use rmcp::service::ElicitationMode;
use rmcp::{ErrorData, Peer, RoleServer, ServiceError};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::relay::Relayed;

/// Runs `run` (the governed call) and delivers what its server sends meanwhile to `peer`:
/// progress under the client's own `token` (none asked for: none is sent), log messages at or
/// above the session's `level`, requests only when the client declared the capability.
pub(super) async fn drive<T>(
    run: impl Future<Output = T>,
    mut rx: UnboundedReceiver<Relayed>,
    peer: &Peer<RoleServer>,
    token: Option<ProgressToken>,
    level: &Mutex<Option<LoggingLevel>>,
) -> T {
    let mut run = std::pin::pin!(run);
    let out = loop {
        tokio::select! {
            biased;
            Some(what) = rx.recv() => deliver(what, peer, token.as_ref(), level).await,
            out = &mut run => break out,
        }
    };
    // The call's result waited until what its server sent before it was routed here
    // (`crate::arrivals`): all of it is in the channel now, sent before the result.
    while let Ok(what) = rx.try_recv() {
        deliver(what, peer, token.as_ref(), level).await;
    }
    out
}

/// A session's `logging/setLevel`: relayed log messages below it are not sent.
pub(super) type LogFloor = Mutex<Option<LoggingLevel>>;

/// `logging/setLevel`.
pub(super) fn set_floor(floor: &LogFloor, request: SetLevelRequestParams) {
    *lock(floor) = Some(request.level);
}

/// The severity order of `logging/setLevel` (RFC 5424).
fn rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn error_data(e: ServiceError) -> ErrorData {
    match e {
        ServiceError::McpError(data) => data,
        other => ErrorData::internal_error(
            format!("the client that made the call could not be asked: {other}"),
            None,
        ),
    }
}

async fn deliver(
    what: Relayed,
    peer: &Peer<RoleServer>,
    token: Option<&ProgressToken>,
    level: &Mutex<Option<LoggingLevel>>,
) {
    match what {
        Relayed::Progress(mut p) => {
            if let Some(token) = token {
                p.progress_token = token.clone();
                let _ = peer.notify_progress(p).await;
            }
        }
        Relayed::Log(p) => {
            if should_log(&p, *lock(level)) {
                let _ = peer.notify_logging_message(p).await;
            }
        }
        Relayed::Sampling(params, answer) => {
            let declared = peer
                .peer_info()
                .is_some_and(|i| i.capabilities.sampling.is_some());
            let result = if declared {
                peer.create_message(params).await.map_err(error_data)
            } else {
                Err(ErrorData::invalid_request(
                    "the MCP client that made this call did not declare the sampling capability",
                    None,
                ))
            };
            let _ = answer.send(result);
        }
        Relayed::Elicitation(params, answer) => {
            let mode = match &params {
                ElicitRequestParams::UrlElicitationParams { .. } => ElicitationMode::Url,
                _ => ElicitationMode::Form,
            };
            let result = if peer.supported_elicitation_modes().contains(&mode) {
                peer.create_elicitation(params).await.map_err(error_data)
            } else {
                Err(ErrorData::invalid_request(
                    "the MCP client that made this call did not declare the elicitation capability (for this mode)",
                    None,
                ))
            };
            let _ = answer.send(result);
        }
    }
}

fn should_log(p: &LoggingMessageNotificationParam, floor: Option<LoggingLevel>) -> bool {
    floor.is_none_or(|f| rank(p.level) >= rank(f))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_below_the_level_set_is_not_sent() {
        let msg = |level| LoggingMessageNotificationParam::new(level, serde_json::json!("x"));
        assert!(should_log(&msg(LoggingLevel::Debug), None));
        assert!(!should_log(
            &msg(LoggingLevel::Info),
            Some(LoggingLevel::Warning)
        ));
        assert!(should_log(
            &msg(LoggingLevel::Error),
            Some(LoggingLevel::Warning)
        ));
    }
}
