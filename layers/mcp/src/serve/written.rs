//! Numbers as written over MCP (R20): the `tools/call` arguments' number literals, read from
//! the JSON-RPC message text before rmcp parses it.
//!
//! rmcp hands the handler `arguments` as a `serde_json::Value`, in which an integer past
//! 64 bits is the nearest double (`123456789012345678901234` and `…235` are one value).
//! serde_json's `arbitrary_precision` would keep them, but it changes `Value` for every crate
//! in the build (and breaks rmcp's untagged enums). So the transports tap the text: the stdio
//! transport (`crate::lines`) in the same pass that decodes each newline-delimited message
//! ([`Written::record_call`]; [`Written::tap`] for a line its envelope pass cannot read), the
//! streamable HTTP route each request body ([`Written::tap`]), and for every `tools/call` the
//! raw `params.arguments` is scanned ([`NumberLiterals::scan`]) and kept by JSON-RPC request
//! id until the handler takes it. The handler puts the literals in the call's extensions,
//! where the engine (`when` tests), the inbox (what it stores and shows) and redemption (the
//! exact input) read them.
//!
//! Fail closed: every `tools/call` the tap saw has an entry (none too when no number needs
//! its literal), so a call whose entry is missing (evicted past [`MAX_OPEN`], a message past
//! [`MAX_MESSAGE`], or the stdio transport's line bound) or whose id was reused while another
//! call with it was open is refused, never decided on rounded numbers.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use rmcp::model::RequestId;
use serde::Deserialize;
use serde_json::value::RawValue;
use toolgate_core::number::NumberLiterals;

/// At most this many `tools/call` entries wait for their handler per tap; past it the
/// oldest is dropped (and its call refused).
pub(super) const MAX_OPEN: usize = 4096;

/// The longest message the stdio tap reads (and the largest HTTP body accepted): 64 MiB.
pub(super) const MAX_MESSAGE: usize = 64 * 1024 * 1024;

enum Entry {
    Literals(NumberLiterals),
    /// A second `tools/call` came with an id whose first was still open.
    Twice,
}

/// What the tap kept about one request.
#[derive(Debug)]
pub(crate) enum Found {
    /// The arguments' literals (empty when no number needs one).
    Literals(NumberLiterals),
    /// The tap never saw this call, or dropped it.
    Missing,
    /// Two open calls came with this id.
    Twice,
}

impl Found {
    /// The literals, or the reason the call is refused.
    pub(crate) fn literals(self) -> Result<NumberLiterals, &'static str> {
        match self {
            Found::Literals(l) => Ok(l),
            Found::Missing => Err(
                "toolgate could not keep this call's arguments as written (R20: its message was too large, or too many calls were waiting), so it is refused rather than decided on rounded numbers; try again",
            ),
            Found::Twice => Err(
                "another `tools/call` with this JSON-RPC request id was still open: each open request needs its own id, so both are refused",
            ),
        }
    }
}

/// The ids are the client's own, at most [`MAX_OPEN`] per session: foldhash (a random seed
/// per map) rather than SipHash.
#[derive(Default)]
struct Open {
    entries: HashMap<RequestId, Entry, foldhash::fast::RandomState>,
    order: VecDeque<RequestId>,
}

/// The `tools/call` literals a tap has read and no handler has taken yet, by request id.
#[derive(Default)]
pub(crate) struct Written {
    open: Mutex<Open>,
}

impl std::fmt::Debug for Written {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Written").finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct Message<'a> {
    id: Option<RequestId>,
    method: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow)]
    params: Option<Params<'a>>,
}

#[derive(Deserialize)]
struct Params<'a> {
    #[serde(borrow)]
    arguments: Option<&'a RawValue>,
}

/// The raw `arguments` of a `tools/call` whose `params` are `params` (as the message's
/// envelope read them), for [`Written::record_call`]; `None` when the tap keeps nothing for
/// it ([`Written::tap`] reads such a message and its params as nothing).
fn arguments(params: Option<&RawValue>) -> Option<Option<&RawValue>> {
    match params {
        None => Some(None),
        Some(raw) => serde_json::from_str::<Option<Params<'_>>>(raw.get())
            .ok()
            .map(|p| p.and_then(|p| p.arguments)),
    }
}

/// The transport's seam (`crate::lines::CallTap`): the transport reads lines, this keeps
/// their numbers.
impl crate::lines::CallTap for Written {
    fn tap(&self, line: &[u8]) {
        Written::tap(self, line);
    }

    fn call(
        &self,
        id: &RequestId,
        arguments: Option<Option<&RawValue>>,
        params: Option<&RawValue>,
    ) {
        if let Some(arguments) = arguments.or_else(|| self::arguments(params)) {
            self.record_call(id, arguments);
        }
    }
}

impl Written {
    /// Reads one JSON-RPC message (or batch) as the transport received it and keeps the
    /// literals of each `tools/call` in it. Anything that is not such a message is left to
    /// rmcp, which answers it.
    pub(crate) fn tap(&self, text: &[u8]) {
        let Ok(text) = std::str::from_utf8(text) else {
            return;
        };
        let trimmed = text.trim_start();
        if trimmed.starts_with('[') {
            if let Ok(batch) = serde_json::from_str::<Vec<&RawValue>>(trimmed) {
                for m in batch {
                    self.tap_one(m.get());
                }
            }
        } else {
            self.tap_one(trimmed);
        }
    }

    fn tap_one(&self, text: &str) {
        let Ok(m) = serde_json::from_str::<Message<'_>>(text) else {
            return;
        };
        let (Some(id), Some("tools/call")) = (m.id, m.method.as_deref()) else {
            return;
        };
        self.record_call(&id, m.params.and_then(|p| p.arguments));
    }

    /// Keeps the literals of the `tools/call` with id `id` whose raw `arguments` are
    /// `arguments` (read by the transport's own pass over the message).
    pub(crate) fn record_call(&self, id: &RequestId, arguments: Option<&RawValue>) {
        let literals = arguments
            .map(|raw| NumberLiterals::scan(raw.get()))
            .unwrap_or_default();
        self.record(id, literals);
    }

    fn record(&self, id: &RequestId, literals: NumberLiterals) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = open.entries.get_mut(id) {
            *e = Entry::Twice;
            return;
        }
        while open.entries.len() >= MAX_OPEN {
            let Some(oldest) = open.order.pop_front() else {
                break;
            };
            open.entries.remove(&oldest);
        }
        open.entries.insert(id.clone(), Entry::Literals(literals));
        open.order.push_back(id.clone());
    }

    /// Takes what the tap kept about request `id` (once: the entry is gone after).
    pub(crate) fn take(&self, id: &RequestId) -> Found {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let Some(entry) = open.entries.remove(id) else {
            return Found::Missing;
        };
        if let Some(at) = open.order.iter().position(|o| o == id) {
            open.order.remove(at);
        }
        match entry {
            Entry::Literals(l) => Found::Literals(l),
            Entry::Twice => Found::Twice,
        }
    }
}

#[cfg(test)]
mod tests {
    /// The R20 tap of the stdio transport keeps what the full reading of each line
    /// (`Written::tap`, the HTTP route's) keeps, for every line: calls, batches, odd shapes.
    #[tokio::test]
    async fn r20_the_transports_tap_keeps_what_the_full_reading_keeps() {
        use crate::lines::LineTransport;
        use rmcp::RoleServer;
        use rmcp::transport::Transport as _;
        use tokio::io::AsyncWriteExt as _;
        let lines = [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"n":123456789012345678901234,"m":[1.50,18446744073709551616]}}}"#,
            r#"{"jsonrpc":"2.0","id":"two","method":"tools/call","params":{"name":"t","arguments":{"n":1}}}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"arguments":{"n":123456789012345678901234}}}"#,
            r#"[{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"t","arguments":{"n":123456789012345678901235}}}]"#,
            // Shapes rmcp refuses: the tap keeps (or not) what the full reading keeps.
            r#"{"jsonrpc":"1.0","id":5,"method":"tools/call","params":{"name":"t","arguments":{"n":123456789012345678901236}}}"#,
            r#"{"jsonrpc":"2.0","jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"t","arguments":{"n":123456789012345678901237}}}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":[{"n":123456789012345678901238}]}"#,
            r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":"p"}"#,
            r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":5,"arguments":{"n":123456789012345678901239}}}"#,
            r#"{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"t","arguments":"a 123456789012345678901240"}}"#,
            r#"{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"t","arguments":{"n":1},"arguments":{}}}"#,
            r#"{"jsonrpc":"2.0","id":12,"method":"tools/call","params":null}"#,
            r#"{"jsonrpc":"2.0","id":13,"method":"tools/call"}"#,
            r#"["2.0",14,"tools/call"]"#,
            r#"{"jsonrpc":"2.0","id":15,"method":"tools/call","params":{"name":"t","inputResponses":{},"arguments":{"n":123456789012345678901241}}}"#,
            // A reused open id: both refused.
            r#"{"jsonrpc":"2.0","id":16,"method":"tools/call","params":{"name":"t"}}"#,
            r#"{"jsonrpc":"2.0","id":16,"method":"tools/call","params":{"name":"t"}}"#,
            "not json",
        ];
        let full = Written::default();
        for line in lines {
            full.tap(line.as_bytes());
        }
        let tapped = std::sync::Arc::new(Written::default());
        let text: String = lines.iter().map(|l| format!("{l}\r\n")).collect();
        let (client, server) = tokio::io::duplex(1 << 16);
        let (read, write) = tokio::io::split(server);
        let mut t = LineTransport::<RoleServer, _, _>::tapped(
            read,
            write,
            Some(std::sync::Arc::clone(&tapped) as std::sync::Arc<dyn crate::lines::CallTap>),
        );
        let (_client_read, mut client_write) = tokio::io::split(client);
        client_write.write_all(text.as_bytes()).await.unwrap();
        client_write.shutdown().await.unwrap();
        let mut delivered = 0;
        while t.receive().await.is_some() {
            delivered += 1;
        }
        assert!(delivered >= 4, "{delivered}");
        let ids = (1..=16)
            .map(RequestId::Number)
            .chain([RequestId::String("two".into())]);
        for id in ids {
            let (want, got) = (full.take(&id), tapped.take(&id));
            let same = match (&got, &want) {
                (Found::Literals(a), Found::Literals(b)) => a == b,
                (Found::Missing, Found::Missing) | (Found::Twice, Found::Twice) => true,
                _ => false,
            };
            assert!(same, "{id:?}: {got:?}, the full reading {want:?}");
            match id {
                RequestId::Number(1 | 4) => {
                    assert!(matches!(got, Found::Literals(l) if !l.is_empty()), "{id:?}");
                }
                RequestId::Number(3) => assert!(matches!(got, Found::Missing)),
                RequestId::Number(16) => assert!(matches!(got, Found::Twice)),
                _ => {}
            }
        }
    }

    use super::*;

    fn id(n: i64) -> RequestId {
        RequestId::Number(n)
    }

    #[test]
    fn r20_the_tap_keeps_each_calls_literals_by_request_id() {
        let written = Written::default();
        for line in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"n":123456789012345678901234}}}"#,
            r#"{"jsonrpc":"2.0","id":"two","method":"tools/call","params":{"name":"t","arguments":{"n":1}}}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#,
            r#"[{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"t","arguments":{"n":123456789012345678901235}}}]"#,
        ] {
            written.tap(line.as_bytes());
        }
        let one = written.take(&id(1)).literals().unwrap();
        let four = written.take(&id(4)).literals().unwrap();
        assert!(!one.is_empty() && !four.is_empty());
        assert_ne!(one, four, "two integers past 64 bits are two literals");
        let two = written
            .take(&RequestId::String("two".into()))
            .literals()
            .unwrap();
        assert!(two.is_empty(), "no number needs its literal");
        assert!(matches!(written.take(&id(3)), Found::Missing), "not a call");
        assert!(matches!(written.take(&id(1)), Found::Missing), "taken once");
    }

    #[test]
    fn r20_a_reused_open_id_and_an_evicted_call_are_refused() {
        let written = Written::default();
        let call = |n: i64| {
            format!(r#"{{"jsonrpc":"2.0","id":{n},"method":"tools/call","params":{{"name":"t"}}}}"#)
        };
        written.tap(call(1).as_bytes());
        written.tap(call(1).as_bytes());
        assert!(matches!(written.take(&id(1)), Found::Twice));
        for n in 0..=i64::try_from(MAX_OPEN).unwrap() {
            written.tap(call(n + 10).as_bytes());
        }
        assert!(matches!(written.take(&id(10)), Found::Missing), "evicted");
        assert!(written.take(&id(11)).literals().is_ok());
    }
}
