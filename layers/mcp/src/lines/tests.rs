//! The transport against rmcp's own decoding and writing, and the child process's ends.

use super::child::EXIT_WAIT;
use super::*;
use tokio::io::AsyncReadExt;

/// What rmcp's own decoding makes of `line`.
fn rmcp_reads<T: serde::de::DeserializeOwned>(line: &str) -> T {
    serde_json::from_str(line).unwrap()
}

/// Two messages are the same: the same variants and fields (`Debug`), and the same JSON
/// written back (which carries what rmcp moved into the extensions, `_meta`).
fn assert_same<T: std::fmt::Debug + serde::Serialize>(got: &T, want: &T, what: &str) {
    assert_eq!(format!("{got:?}"), format!("{want:?}"), "{what}");
    assert_eq!(
        serde_json::to_value(got).unwrap(),
        serde_json::to_value(want).unwrap(),
        "{what}"
    );
}

#[cfg(feature = "serve")]
#[tokio::test]
async fn issue26_a_tools_call_request_reads_as_rmcps_own_decoding_reads_it() {
    use rmcp::RoleServer;
    let lines = [
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"everything__echo","arguments":{"message":"hi","n":12.5}}}"#,
        r#"{"jsonrpc":"2.0","id":"a-7","method":"tools/call","params":{"name":"t","arguments":{},"_meta":{"progressToken":"p1","x":[1,2]}}}"#,
        r#"{"method":"tools/call","params":{"name":"t"},"id":9,"jsonrpc":"2.0"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        // The params read directly: `_meta` (only) to the extensions, the rest as rmcp has
        // them; numbers, escapes, duplicate keys, unknown and null fields.
        r#"{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"_meta":{"progressToken":7},"name":"e\u0063ho","arguments":{"a":[1,-2,3.5e3,123456789012345678901234],"b":{"c":null},"a":"again"},"requestState":"s1","extra":true}}"#,
        r#"{"jsonrpc":"2.0","id":11,"method":"tools\/call","params":{"name":"t","arguments":null,"_meta":null,"requestState":null}}"#,
        r#" { "jsonrpc" : "2.0" , "id" : 12 , "method" : "tools/call" , "params" : { "name" : "t" , "arguments" : { } } , "result2" : 1 } "#,
        // A retry's answers: the general path.
        r#"{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":"t","inputResponses":{"q1":{"action":"accept","content":{"x":1}}},"requestState":"s"}}"#,
        // Last, no newline after it: still a message.
        r#"{"jsonrpc":"2.0","id":14,"method":"tools/call","params":{"name":"last"}}"#,
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let text = text.strip_suffix('\n').unwrap();
    let (client, server) = tokio::io::duplex(1 << 16);
    let (read, write) = tokio::io::split(server);
    let mut t = LineTransport::<RoleServer, _, _>::new(read, write);
    let mut client = client;
    client.write_all(text.as_bytes()).await.unwrap();
    drop(client);
    for line in lines {
        let got = t.receive().await.unwrap();
        let want: rmcp::model::ClientJsonRpcMessage = rmcp_reads(line);
        assert_same(&got, &want, line);
    }
    assert!(t.receive().await.is_none(), "the end of the stream");
    assert_eq!(
        t.fast, 7,
        "the `tools/call` requests by the fast path, bar the retry"
    );
}

#[tokio::test]
async fn issue26_a_result_to_a_sent_tools_call_reads_as_rmcps_own_decoding_reads_it() {
    use rmcp::model::{CallToolRequestParams, ServerJsonRpcMessage};
    let (ours, theirs) = tokio::io::duplex(1 << 16);
    let (read, write) = tokio::io::split(ours);
    let mut t = LineTransport::<RoleClient, _, _>::new(read, write);
    let (mut their_read, mut their_write) = tokio::io::split(theirs);
    for id in [3, 4] {
        let call = ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(
            CallToolRequestParams::new("echo"),
        ));
        t.send(JsonRpcMessage::request(call, RequestId::Number(id)))
            .await
            .unwrap();
    }
    let mut sent = vec![0u8; 4096];
    let n = their_read.read(&mut sent).await.unwrap();
    let sent = std::str::from_utf8(&sent[..n]).unwrap();
    assert_eq!(sent.lines().count(), 2, "one line per message: {sent}");
    assert!(sent.contains(r#""method":"tools/call""#), "{sent}");
    let lines = [
        // Answers to the two calls sent: the fast path.
        r#"{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"Echo: hi"}],"isError":false,"structuredContent":{"a":1}}}"#,
        r#"{"jsonrpc":"2.0","id":4,"result":{"content":[{"type":"image","data":"AA==","mimeType":"image/png"}],"_meta":{"k":"v"}}}"#,
        // Not a call this side sent: the general path (a list result).
        r#"{"jsonrpc":"2.0","id":5,"result":{"tools":[]}}"#,
        // A call answered twice: the second is not a sent call any more.
        r#"{"jsonrpc":"2.0","id":3,"result":{"content":[]}}"#,
        r#"{"jsonrpc":"2.0","id":6,"error":{"code":-32601,"message":"no such method"}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p","progress":1}}"#,
        r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#,
    ];
    let text: String = lines.iter().map(|l| format!("{l}\r\n")).collect();
    their_write
        .write_all(format!("\u{feff}{text}").as_bytes())
        .await
        .unwrap();
    // The end of the stream after the last line.
    drop((their_read, their_write));
    for line in lines {
        let got = t.receive().await.unwrap();
        let want: ServerJsonRpcMessage = rmcp_reads(line);
        assert_same(&got, &want, line);
    }
    assert!(t.receive().await.is_none());
    assert_eq!(
        t.fast, 2,
        "the two answers to the calls sent by the fast path"
    );
}

/// A `tools/call` written directly is byte for byte what rmcp writes.
#[test]
fn issue26_a_tools_call_sent_is_written_as_rmcp_writes_it() {
    use rmcp::model::{
        CallToolRequest, CallToolRequestParams, ClientJsonRpcMessage, MetaObject, ProgressToken,
        RequestMetaObject, RequestParamsMeta,
    };
    let args = |v: serde_json::Value| v.as_object().unwrap().clone();
    let mut calls = vec![
        CallToolRequest::new(CallToolRequestParams::new("echo")),
        CallToolRequest::new(
            CallToolRequestParams::new("e\"c\u{1}ho").with_arguments(args(
                serde_json::json!({"z": 1, "a": [1.5, -2, {"y": null, "b": "\u{7f}é"}], "m": "x"}),
            )),
        ),
        CallToolRequest::new(
            CallToolRequestParams::new("t")
                .with_arguments(args(serde_json::json!({})))
                .with_request_state("st"),
        ),
    ];
    // The progress token rmcp sets, in the extensions.
    let mut c = CallToolRequest::new(CallToolRequestParams::new("p"));
    c.extensions.insert(RequestMetaObject::default());
    c.extensions
        .get_mut::<RequestMetaObject>()
        .unwrap()
        .set_progress_token(ProgressToken(rmcp::model::NumberOrString::Number(3)));
    calls.push(c);
    // Written by rmcp: `_meta` to merge, a legacy meta object, input responses.
    let mut c = CallToolRequest::new(CallToolRequestParams::new("m"));
    c.params.set_meta(RequestMetaObject::default());
    calls.push(c);
    let mut c = CallToolRequest::new(CallToolRequestParams::new("l"));
    c.extensions.insert(MetaObject::default());
    calls.push(c);
    let fast = calls.iter().filter(|c| SentCall::of(c).is_some()).count();
    assert_eq!(
        fast, 4,
        "the four without `_meta` to merge written directly"
    );
    for (n, call) in calls.into_iter().enumerate() {
        for id in [
            RequestId::Number(i64::try_from(n).unwrap()),
            RequestId::String(format!("id-{n}").into()),
        ] {
            let message: ClientJsonRpcMessage =
                JsonRpcMessage::request(ClientRequest::CallToolRequest(call.clone()), id);
            let mut ours = Vec::new();
            RoleClient::write(&message, &mut ours).unwrap();
            let rmcps = serde_json::to_vec(&message).unwrap();
            assert_eq!(
                String::from_utf8(ours).unwrap(),
                String::from_utf8(rmcps).unwrap()
            );
        }
    }
}

#[tokio::test]
async fn issue26_bad_lines_are_dropped_or_answered_as_rmcps_transport_does() {
    use rmcp::model::ServerJsonRpcMessage;
    let (ours, theirs) = tokio::io::duplex(1 << 16);
    let (read, write) = tokio::io::split(ours);
    let mut t = LineTransport::<RoleClient, _, _>::new(read, write);
    t.max_line = 64;
    let (mut their_read, mut their_write) = tokio::io::split(theirs);
    let long = format!(
        r#"{{"jsonrpc":"2.0","id":1,"result":{{"x":"{}"}}}}"#,
        "y".repeat(100)
    );
    let text = [
        "not json at all",
        "",
        &long,
        r#"{"jsonrpc":"2.0","id":8,"method":"ping"}"#,
    ]
    .map(|l| format!("{l}\n"))
    .concat();
    their_write.write_all(text.as_bytes()).await.unwrap();
    let got = t.receive().await.unwrap();
    let want: ServerJsonRpcMessage = rmcp_reads(r#"{"jsonrpc":"2.0","id":8,"method":"ping"}"#);
    assert_same(&got, &want, "unparsable, empty and oversized lines skipped");
    // Well-formed JSON of no message's shape: `Invalid Request`, then the next message.
    their_write
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":9,\"result\":1,\"error\":2}\n{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"ping\"}\n")
        .await
        .unwrap();
    let got = t.receive().await.unwrap();
    assert!(matches!(got, JsonRpcMessage::Request(ref r) if r.id == RequestId::Number(10)));
    let mut reply = vec![0u8; 4096];
    let n = their_read.read(&mut reply).await.unwrap();
    let reply = std::str::from_utf8(&reply[..n]).unwrap();
    assert!(
        reply.contains(r#""code":-32600"#) && reply.ends_with('\n'),
        "{reply}"
    );
}

/// A shell server for the shutdown tests: `script` runs with its standard input piped.
#[cfg(unix)]
fn shell(script: &str) -> ChildTransport {
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c").arg(script).kill_on_drop(true);
    ChildTransport::spawn(&mut cmd).unwrap().0
}

#[cfg(unix)]
#[tokio::test]
async fn issue26_closing_a_stdio_server_that_ends_on_eof_waits_for_it_only() {
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("ended");
    let mut t = shell(&format!("cat >/dev/null; echo eof > '{}'", mark.display()));
    let started = std::time::Instant::now();
    t.close().await.unwrap();
    assert!(started.elapsed() < EXIT_WAIT, "{:?}", started.elapsed());
    assert_eq!(std::fs::read_to_string(&mark).unwrap(), "eof\n");
}

#[cfg(unix)]
#[tokio::test]
async fn issue26_a_stdio_server_that_ignores_eof_gets_sigterm_before_it_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("term");
    // Reads nothing, so the end of its input goes unseen; ends on SIGTERM, noting it.
    let mut t = shell(&format!(
        "trap 'echo term > \"{}\"; exit 0' TERM; while :; do sleep 0.05; done",
        mark.display()
    ));
    let started = std::time::Instant::now();
    t.close().await.unwrap();
    let took = started.elapsed();
    assert!(took >= EXIT_WAIT && took < 2 * EXIT_WAIT, "{took:?}");
    assert_eq!(
        std::fs::read_to_string(&mark).unwrap(),
        "term\n",
        "MCP stdio shutdown: SIGTERM before SIGKILL"
    );
}

#[cfg(unix)]
#[tokio::test]
async fn issue26_a_stdio_server_that_ignores_eof_and_sigterm_is_killed() {
    let mut t = shell("trap '' TERM; while :; do sleep 0.05; done");
    let started = std::time::Instant::now();
    t.close().await.unwrap();
    assert!(
        started.elapsed() >= 2 * EXIT_WAIT,
        "{:?}",
        started.elapsed()
    );
    assert!(
        t.child.try_wait().unwrap().is_some(),
        "the server is gone after close"
    );
}
