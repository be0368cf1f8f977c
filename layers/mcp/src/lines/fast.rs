//! The fast decoding of the line transport (see the parent module): a message's envelope
//! read in one pass, a `tools/call` request's parameters decoded directly (with the R20 tap
//! handed the raw `arguments` through [`CallTap`]), and the response to a `tools/call` this
//! side sent decoded as the one result type rmcp accepts for it. Knows no server.

use super::*;

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
    pub(super) fn read(line: &[u8]) -> Option<Envelope<'_>> {
        if line.trim_ascii_start().first() != Some(&b'{') {
            return None;
        }
        serde_json::from_slice(line).ok()
    }

    /// A JSON-RPC 2.0 message.
    pub(super) fn version_2(&self) -> bool {
        self.jsonrpc.as_deref() == Some("2.0")
    }
}

/// The `tools/call` requests this side sent and whose response has not come yet.
#[derive(Debug, Default)]
pub(crate) struct OpenCalls(Mutex<VecDeque<RequestId>>);

impl OpenCalls {
    pub(super) fn sent(&self, id: &RequestId) {
        let mut open = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if open.len() >= MAX_OPEN_CALLS {
            open.pop_front();
        }
        open.push_back(id.clone());
    }

    pub(super) fn answered(&self, id: &RequestId) -> bool {
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
pub(super) struct SentCall<'a> {
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
    pub(super) fn of(call: &'a rmcp::model::CallToolRequest) -> Option<Self> {
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
