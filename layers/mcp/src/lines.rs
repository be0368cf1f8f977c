//! A newline-delimited JSON-RPC transport of our own: rmcp's stdio framing, with the hot
//! messages decoded by their method or request id instead of by trying rmcp's untagged
//! enums in turn.
//!
//! rmcp decodes every message as `JsonRpcMessage<Req, Resp, Not>`: the whole message is
//! buffered into serde's `Content`, then each variant of the untagged enums is tried until one
//! fits. A `tools/call` request is the 14th of `ClientRequest`'s variants and a tool result the
//! 16th of `ServerResult`'s, and each failed try builds and formats a `serde_json::Error`
//! (≈ 47 % of the proxy's instructions per call before this transport). Here:
//!
//! - one pass reads the message's envelope (`jsonrpc`, `id`, `method`, and whether `result` or
//!   `error` is there; the payloads stay unparsed, borrowed);
//! - a **`tools/call` request** (the server side) has its `params` decoded directly (the
//!   envelope pass leaves them unparsed) as rmcp's `Request` deserialization reads them: the
//!   `_meta` map into the request's extensions as a `RequestMetaObject` (so the progress token
//!   is where rmcp puts it), `name`, `arguments`, `requestState` into `CallToolRequestParams`;
//!   the same pass gives the R20 tap (`serve::written`) the raw `arguments` for their number
//!   literals, so the line is read once, not three times;
//! - a **response to a `tools/call` this side sent** (the client side; the request ids are
//!   recorded as they are sent) has its `result` decoded as `CallToolResult` and wrapped as the
//!   `CallToolResult` variant, the only one `Peer::call_tool` accepts for a complete result. A
//!   result that is not a `CallToolResult` (a task, an input-required result) takes the
//!   general path;
//! - **everything else**, and any message the fast path cannot read, goes through rmcp's
//!   general decoding exactly as rmcp's own stdio transport does (a UTF-8 byte order mark
//!   skipped; non-standard notifications ignored; unparsable JSON dropped; well-formed JSON of
//!   the wrong shape answered with `Invalid Request`).
//!
//! So what the service sees is what rmcp's transport would give it, for every message; only
//! the order of the tries differs. Lines are bounded as in rmcp (16 MiB by default); the read
//! buffer is kept and reused. A message sent is written out when it is handed over, so the
//! future rmcp spawns to send it is small (its bytes, not the message).

use std::borrow::Cow;
use std::collections::VecDeque;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use rmcp::model::{CallToolResult, ClientRequest, ErrorData, JsonRpcMessage, RequestId};
use rmcp::service::{RoleClient, RxJsonRpcMessage, ServiceRole, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};

/// The longest line read, as rmcp's `DEFAULT_MAX_LINE_LENGTH`.
pub(crate) const MAX_LINE: usize = 16 * 1024 * 1024;

struct Writer<W> {
    io: Option<W>,
}

/// The transport: newline-delimited JSON-RPC over a byte stream pair, for either role.
pub(crate) struct LineTransport<Role: FastRole, R, W> {
    read: BufReader<R>,
    line: Vec<u8>,
    max_line: usize,
    /// The current line passed `max_line`: skipped to its end.
    discarding: bool,
    write: Arc<tokio::sync::Mutex<Writer<W>>>,
    open: Arc<OpenCalls>,
    tap: Role::Tap,
    /// A well-formed message of the wrong shape came: answer `Invalid Request` first.
    invalid_request: bool,
    /// How many messages the fast path read (the tests check it is taken).
    fast: u64,
    _role: PhantomData<fn() -> Role>,
}

impl<Role: FastRole, R, W> std::fmt::Debug for LineTransport<Role, R, W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LineTransport").finish_non_exhaustive()
    }
}

enum Line {
    Read,
    Oversized,
    End,
}

impl<Role, R, W> LineTransport<Role, R, W>
where
    Role: FastRole,
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    /// A transport reading messages from `read` and writing them to `write`.
    pub(crate) fn new(read: R, write: W) -> Self
    where
        Role::Tap: Default,
    {
        Self::tapped(read, write, Role::Tap::default())
    }

    /// [`LineTransport::new`], each received line shown to `tap` (R20).
    pub(crate) fn tapped(read: R, write: W, tap: Role::Tap) -> Self {
        Self {
            read: BufReader::new(read),
            line: Vec::new(),
            max_line: MAX_LINE,
            discarding: false,
            write: Arc::new(tokio::sync::Mutex::new(Writer { io: Some(write) })),
            open: Arc::default(),
            tap,
            invalid_request: false,
            fast: 0,
            _role: PhantomData,
        }
    }

    /// One line into `self.line`, never past `max_line` (cancel-safe: a partial line stays
    /// in `self.line` for the next call, as in rmcp's transport).
    async fn read_line(&mut self) -> std::io::Result<Line> {
        loop {
            let available = self.read.fill_buf().await?;
            if available.is_empty() {
                // The end: a last line without its newline is still a message (rmcp's
                // `decode_eof`); the next call sees the end again, with the line cleared.
                if !self.line.is_empty() && !self.discarding {
                    return Ok(Line::Read);
                }
                self.discarding = false;
                return Ok(Line::End);
            }
            let newline = memchr_newline(available);
            let take = newline.map_or(available.len(), |at| at + 1);
            let mut done = None;
            if self.discarding {
                if newline.is_some() {
                    self.discarding = false;
                }
            } else if self.line.len().saturating_add(take) > self.max_line {
                self.line.clear();
                self.discarding = newline.is_none();
                done = Some(Line::Oversized);
            } else {
                self.line
                    .extend_from_slice(available.get(..take).unwrap_or_default());
                if newline.is_some() {
                    done = Some(Line::Read);
                }
            }
            self.read.consume(take);
            if let Some(done) = done {
                return Ok(done);
            }
        }
    }

    /// The message on the line just read (`Ok(None)`: nothing to deliver).
    fn decode(&mut self) -> Option<RxJsonRpcMessage<Role>> {
        let line = self.line.strip_suffix(b"\n").unwrap_or(&self.line);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        if line.is_empty() {
            return None;
        }
        let envelope = Envelope::read(line);
        if let Some(message) = Role::fast(line, envelope.as_ref(), &self.open, &self.tap) {
            self.fast += 1;
            return Some(message);
        }
        match general::<RxJsonRpcMessage<Role>>(line) {
            General::Message(m) => Some(m),
            General::Ignored => None,
            General::InvalidRequest => {
                self.invalid_request = true;
                None
            }
        }
    }
}

fn memchr_newline(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|b| *b == b'\n')
}

enum General<T> {
    Message(T),
    Ignored,
    InvalidRequest,
}

/// rmcp's own decoding of a line (`try_parse_with_compatibility` and its caller in
/// `AsyncRwTransport::receive`).
fn general<T: serde::de::DeserializeOwned>(line: &[u8]) -> General<T> {
    let error = match serde_json::from_slice::<T>(line) {
        Ok(m) => return General::Message(m),
        Err(e) => e,
    };
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(line)
        && let Some(method) = value.get("method").and_then(serde_json::Value::as_str)
        && ignored_notification(&value, method)
    {
        return General::Ignored;
    }
    match error.classify() {
        serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
            tracing::debug!("ignoring an unparsable incoming message: {error}");
            General::Ignored
        }
        serde_json::error::Category::Data | serde_json::error::Category::Io => {
            tracing::debug!("protocol error on an incoming message: {error}");
            General::InvalidRequest
        }
    }
}

/// rmcp's `should_ignore_notification`: a notification whose method is not a standard MCP
/// one, and any non-standard `notifications/…` message.
fn ignored_notification(value: &serde_json::Value, method: &str) -> bool {
    let notification = value.get("id").is_none();
    if notification && !standard_method(method) {
        return true;
    }
    method.starts_with("notifications/") && !standard_notification(method)
}

fn standard_method(method: &str) -> bool {
    matches!(
        method,
        "initialize"
            | "ping"
            | "server/discover"
            | "prompts/get"
            | "prompts/list"
            | "resources/list"
            | "resources/read"
            | "resources/subscribe"
            | "resources/unsubscribe"
            | "resources/templates/list"
            | "subscriptions/listen"
            | "tools/call"
            | "tools/list"
            | "completion/complete"
            | "elicitation/create"
            | "logging/setLevel"
            | "roots/list"
            | "sampling/createMessage"
    ) || standard_notification(method)
}

fn standard_notification(method: &str) -> bool {
    matches!(
        method,
        "notifications/cancelled"
            | "notifications/initialized"
            | "notifications/message"
            | "notifications/progress"
            | "notifications/prompts/list_changed"
            | "notifications/resources/list_changed"
            | "notifications/resources/updated"
            | "notifications/roots/list_changed"
            | "notifications/subscriptions/acknowledged"
            | "notifications/tools/list_changed"
    )
}

impl<Role, R, W> Transport<Role> for LineTransport<Role, R, W>
where
    Role: FastRole,
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<Role>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        Role::sent(&item, &self.open);
        // Written out now, so the future rmcp spawns to send it holds bytes, not the message:
        // a message is kilobytes (the largest variant of rmcp's enums), and tokio copies a
        // spawned future several times (≈ 40 % of the proxy's instructions were those
        // copies).
        let mut bytes = Vec::with_capacity(256);
        let written = Role::write(&item, &mut bytes).map_err(std::io::Error::other);
        drop(item);
        bytes.push(b'\n');
        let write = Arc::clone(&self.write);
        async move {
            written?;
            let mut w = write.lock().await;
            let Some(io) = w.io.as_mut() else {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::NotConnected,
                    "the transport is closed",
                ));
            };
            io.write_all(&bytes).await?;
            io.flush().await
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<Role>> {
        loop {
            if self.invalid_request {
                let reply = TxJsonRpcMessage::<Role>::error(
                    ErrorData::invalid_request("Invalid request", None),
                    None,
                );
                if self.send(reply).await.is_err() {
                    return None;
                }
                self.invalid_request = false;
            }
            match self.read_line().await {
                Ok(Line::Read) => {}
                Ok(Line::Oversized) => {
                    tracing::error!(
                        max_line_length = self.max_line,
                        "an incoming message exceeded the maximum line length, discarding it"
                    );
                    continue;
                }
                Ok(Line::End) => return None,
                Err(e) => {
                    tracing::error!("error reading from the stream: {e}");
                    return None;
                }
            }
            let message = self.decode();
            self.line.clear();
            if self.line.capacity() > 1 << 20 {
                self.line = Vec::new();
            }
            if let Some(m) = message {
                return Some(m);
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        let mut w = self.write.lock().await;
        if let Some(mut io) = w.io.take() {
            let _ = io.shutdown().await;
        }
        Ok(())
    }
}

mod child;
mod fast;
#[cfg(test)]
mod tests;

pub(crate) use child::ChildTransport;
#[cfg(feature = "serve")]
pub(crate) use fast::CallTap;
#[cfg(test)]
use fast::SentCall;
pub(crate) use fast::{Envelope, FastRole, OpenCalls};
