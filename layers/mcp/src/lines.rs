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

/// At most this many `tools/call` request ids are remembered while their response is awaited;
/// past it the oldest is forgotten (its response then takes the general path, still correct).
const MAX_OPEN_CALLS: usize = 4096;

/// The parts of a JSON-RPC message that say which it is; payloads unparsed.
#[derive(Deserialize)]
pub(crate) struct Envelope<'a> {
    #[serde(borrow)]
    jsonrpc: Option<Cow<'a, str>>,
    id: Option<RequestId>,
    #[serde(borrow)]
    method: Option<Cow<'a, str>>,
    /// Read by the server side (`tools/call`).
    #[cfg_attr(
        not(feature = "serve"),
        allow(dead_code, reason = "read only by `serve`'s number tap")
    )]
    #[serde(borrow)]
    params: Option<&'a RawValue>,
    #[serde(borrow)]
    result: Option<&'a RawValue>,
    #[serde(borrow)]
    error: Option<&'a RawValue>,
}

impl Envelope<'_> {
    /// The envelope of a JSON object (`None` for anything else: a derived `Deserialize` would
    /// also read a JSON array, by position), whatever its `jsonrpc`.
    fn read(line: &[u8]) -> Option<Envelope<'_>> {
        if line.trim_ascii_start().first() != Some(&b'{') {
            return None;
        }
        serde_json::from_slice(line).ok()
    }

    /// A JSON-RPC 2.0 message.
    fn version_2(&self) -> bool {
        self.jsonrpc.as_deref() == Some("2.0")
    }
}

/// The `tools/call` requests this side sent and whose response has not come yet.
#[derive(Debug, Default)]
pub(crate) struct OpenCalls(Mutex<VecDeque<RequestId>>);

impl OpenCalls {
    fn sent(&self, id: &RequestId) {
        let mut open = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if open.len() >= MAX_OPEN_CALLS {
            open.pop_front();
        }
        open.push_back(id.clone());
    }

    fn answered(&self, id: &RequestId) -> bool {
        let mut open = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match open.iter().position(|o| o == id) {
            Some(at) => {
                open.remove(at);
                true
            }
            None => false,
        }
    }
}

/// What the server side's transport shows each received line to: R20's number tap, handed
/// in by the server (the transport knows no server, only this seam).
#[cfg(feature = "serve")]
pub(crate) trait CallTap: Send + Sync {
    /// A line no envelope reads (a batch, …): the tap's own full reading.
    fn tap(&self, line: &[u8]);

    /// A `tools/call` request's id, with its `arguments` as written when the transport read
    /// its params (`Some`), and the params as they came (`params`), before the call is
    /// delivered.
    fn call(&self, id: &RequestId, arguments: Option<Option<&RawValue>>, params: Option<&RawValue>);
}

/// What a role decodes by method or id; everything else is rmcp's general decoding.
pub(crate) trait FastRole: ServiceRole {
    /// What the role's transport taps from the messages it receives (the server side: each
    /// `tools/call`'s number literals, R20).
    type Tap: Send + 'static;

    /// Notes a message this side sends (the client side: the ids of its `tools/call`s).
    fn sent(message: &TxJsonRpcMessage<Self>, open: &OpenCalls);

    /// Writes a message out as rmcp's `Serialize` writes it.
    fn write(message: &TxJsonRpcMessage<Self>, out: &mut Vec<u8>) -> serde_json::Result<()> {
        serde_json::to_writer(out, message)
    }

    /// The message, when it is one of the hot ones and reads as such; `envelope` is `None`
    /// when the line is no JSON object with a readable envelope. Every line goes through
    /// here first, so the tap sees each.
    fn fast(
        line: &[u8],
        envelope: Option<&Envelope<'_>>,
        open: &OpenCalls,
        tap: &Self::Tap,
    ) -> Option<RxJsonRpcMessage<Self>>;
}

impl FastRole for RoleClient {
    type Tap = ();

    fn sent(message: &TxJsonRpcMessage<Self>, open: &OpenCalls) {
        if let JsonRpcMessage::Request(r) = message
            && matches!(r.request, ClientRequest::CallToolRequest(_))
        {
            open.sent(&r.id);
        }
    }

    /// A `tools/call` request written directly, byte for byte as rmcp writes it (its
    /// `Request` serialization goes through a `serde_json::Value` of the params to merge the
    /// `_meta` maps); anything else, or a call whose `_meta` needs merging, by rmcp.
    fn write(message: &TxJsonRpcMessage<Self>, out: &mut Vec<u8>) -> serde_json::Result<()> {
        if let JsonRpcMessage::Request(r) = message
            && let ClientRequest::CallToolRequest(call) = &r.request
            && let Some(params) = SentCall::of(call)
        {
            let sent = SentRequest {
                jsonrpc: &r.jsonrpc,
                id: &r.id,
                method: &call.method,
                params,
            };
            return serde_json::to_writer(out, &sent);
        }
        serde_json::to_writer(out, message)
    }

    fn fast(
        _line: &[u8],
        envelope: Option<&Envelope<'_>>,
        open: &OpenCalls,
        _tap: &(),
    ) -> Option<RxJsonRpcMessage<Self>> {
        let envelope = envelope.filter(|e| e.version_2())?;
        let (None, Some(id), Some(result), None) = (
            envelope.method.as_ref(),
            envelope.id.as_ref(),
            envelope.result,
            envelope.error,
        ) else {
            return None;
        };
        if !open.answered(id) {
            return None;
        }
        let result: CallToolResult = serde_json::from_str(result.get()).ok()?;
        Some(JsonRpcMessage::response(
            rmcp::model::ServerResult::CallToolResult(result),
            id.clone(),
        ))
    }
}

#[cfg(feature = "serve")]
impl FastRole for rmcp::RoleServer {
    /// The session's R20 tap (`None`: a transport with none).
    type Tap = Option<Arc<dyn CallTap>>;

    fn sent(_message: &TxJsonRpcMessage<Self>, _open: &OpenCalls) {}

    fn fast(
        line: &[u8],
        envelope: Option<&Envelope<'_>>,
        _open: &OpenCalls,
        tap: &Self::Tap,
    ) -> Option<RxJsonRpcMessage<Self>> {
        let Some(envelope) = envelope else {
            // A batch, or anything else no envelope reads: the tap's own full reading.
            if let Some(tap) = tap {
                tap.tap(line);
            }
            return None;
        };
        let (Some("tools/call"), Some(id)) = (envelope.method.as_deref(), envelope.id.as_ref())
        else {
            return None;
        };
        let params = envelope.params.and_then(CallParams::read);
        if let Some(tap) = tap {
            // R20, before the call is delivered: its arguments as written, from the same
            // reading of the params as the call's.
            tap.call(id, params.as_ref().map(|p| p.arguments), envelope.params);
        }
        let (true, None, None) = (envelope.version_2(), envelope.result, envelope.error) else {
            return None;
        };
        let request = params?.request()?;
        Some(JsonRpcMessage::Request(rmcp::model::JsonRpcRequest::new(
            id.clone(),
            ClientRequest::CallToolRequest(request),
        )))
    }
}

/// A `tools/call` request's `params`, read as rmcp's `Request` deserialization reads them
/// (`serde_impl.rs`: a `_meta` map beside `CallToolRequestParams`' own fields); `arguments`
/// still unparsed, for the R20 tap.
#[cfg(feature = "serve")]
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CallParams<'a> {
    #[serde(rename = "_meta")]
    meta: Option<rmcp::model::JsonObject>,
    name: Option<String>,
    #[serde(borrow)]
    arguments: Option<&'a RawValue>,
    /// Present: the general path decodes the call (a retry's answers, rare).
    #[serde(borrow)]
    input_responses: Option<&'a RawValue>,
    request_state: Option<String>,
}

#[cfg(feature = "serve")]
impl<'a> CallParams<'a> {
    /// The params of a JSON object (a derived `Deserialize` would also read an array, which
    /// rmcp's flattened `params` refuses).
    fn read(params: &'a RawValue) -> Option<Self> {
        if !params.get().starts_with('{') {
            return None;
        }
        serde_json::from_str(params.get()).ok()
    }

    /// rmcp's `CallToolRequest`, when this side reads these params as rmcp does; `None` sends
    /// the message to the general path.
    fn request(self) -> Option<rmcp::model::CallToolRequest> {
        use rmcp::model::{CallToolRequest, CallToolRequestParams, JsonObject, RequestMetaObject};
        if self.input_responses.is_some() {
            return None;
        }
        let mut params = CallToolRequestParams::new(self.name?);
        params.arguments = match self.arguments {
            Some(raw) => Some(serde_json::from_str::<JsonObject>(raw.get()).ok()?),
            None => None,
        };
        params.request_state = self.request_state;
        let mut request = CallToolRequest::new(params);
        if let Some(meta) = self.meta {
            request.extensions.insert(RequestMetaObject::from(meta));
        }
        Some(request)
    }
}

/// A `tools/call` request as rmcp's `JsonRpcRequest<Request<…>>` serializes it: `jsonrpc`,
/// `id`, `method`, `params`.
#[derive(serde::Serialize)]
struct SentRequest<'a> {
    jsonrpc: &'a rmcp::model::JsonRpcVersion2_0,
    id: &'a RequestId,
    method: &'a rmcp::model::CallToolRequestMethod,
    params: SentCall<'a>,
}

/// A `tools/call`'s params as rmcp's `WithMeta` writes them: the `_meta` map first, then the
/// params' fields in the order of a `serde_json::Map` (sorted: no `preserve_order` in this
/// build; the test compares with rmcp's bytes).
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct SentCall<'a> {
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    meta: Option<&'a rmcp::model::JsonObject>,
    #[serde(skip_serializing_if = "Option::is_none")]
    arguments: Option<&'a rmcp::model::JsonObject>,
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    request_state: Option<&'a str>,
}

impl<'a> SentCall<'a> {
    /// The params of `call` when writing them needs no merging: no `_meta` in the params
    /// and no legacy `MetaObject` in the extensions (only the typed one rmcp puts the
    /// progress token in), and no `inputResponses` (whose fields rmcp writes re-sorted).
    fn of(call: &'a rmcp::model::CallToolRequest) -> Option<Self> {
        use rmcp::model::{MetaObject, RequestMetaObject};
        let p = &call.params;
        if p.meta.is_some()
            || p.input_responses.is_some()
            || call.extensions.get::<MetaObject>().is_some()
        {
            return None;
        }
        Some(Self {
            meta: call.extensions.get::<RequestMetaObject>().map(|m| &m.0.0),
            arguments: p.arguments.as_ref(),
            name: &p.name,
            request_state: p.request_state.as_deref(),
        })
    }
}

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
#[cfg(test)]
mod tests;

pub(crate) use child::ChildTransport;
