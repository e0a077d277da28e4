//! Lifecycle, envelope and error replies (Part A.1, A.2) over duplex pipes.

use exec_server::server::Config;
use serde_json::json;

use crate::support::Harness;

#[tokio::test]
async fn handshake_reports_version_server_info_and_capabilities() {
    let mut h = Harness::new();
    let mut result = h.result("initialize", json!({"clientName": "it"})).await;
    // A fresh session's id: an opaque string, here a version 4 UUID.
    let session = result.as_object_mut().unwrap().remove("sessionId").unwrap();
    assert_eq!(session.as_str().map(|id| (id.len(), &id[14..15])), Some((36, "4")));
    // What environment/info answers, for today's dialect.
    let info = result.as_object_mut().unwrap().remove("environmentInfo").unwrap();
    assert_eq!(info["platformOs"], "linux");
    assert_eq!(
        result,
        json!({
            "protocolVersion": "exec-server.v0",
            "serverInfo": {"name": "exec-server", "version": env!("CARGO_PKG_VERSION")},
            "capabilities": {
                "methods": [
                    "initialize", "process/start", "process/read", "process/write",
                    "process/terminate", "process/signal", "process/resize", "process/list",
                    "fs/readFile", "fs/writeFile", "fs/createDirectory", "fs/getMetadata",
                    "fs/readDirectory", "fs/remove", "fs/copy", "fs/rename", "fs/watch", "fs/unwatch",
                    "fs/watchMissing",
                    "environment/info", "environmentConfig/read", "environment/status", "fs/canonicalize", "fs/walk",
                    "fs/open", "fs/readBlock", "fs/writeBlock", "fs/close", "session/end",
                    "tunnel/open", "tunnel/write", "tunnel/close",
                    "ports/list", "ports/watch", "ports/unwatch", "http/request"
                ],
                "notifications": [
                    "process/output", "process/exited", "process/closed", "fs/changed",
                    "tunnel/data", "tunnel/closed", "ports/changed", "http/request/bodyDelta",
                    "fs/missingChanged", "network/connection"
                ],
                "features": [
                    "fs/pathBase64", "fs/followSymlinks", "fs/atomicWrite",
                    "fs/regularFilesOnly", "fs/confinedTrees", "process/sandbox",
                    "process/sandboxNetworkPolicy"
                ]
            }
        })
    );
}

#[tokio::test]
async fn requests_before_the_handshake_fail_with_exact_messages() {
    let mut h = Harness::new();
    let err = h.error("process/list", json!({})).await;
    assert_eq!(
        err,
        json!({"code": -32600, "message": "client must call initialize before using exec methods"})
    );
    let err = h.error("fs/readFile", json!({"path": "/etc/hostname"})).await;
    assert_eq!(
        err,
        json!({"code": -32600, "message": "client must call initialize before using filesystem methods"})
    );
    // initialized before initialize is ignored.
    h.send(json!({"method": "initialized"})).await;
    h.result("initialize", json!({"clientName": "it"})).await;
    let err = h.error("process/list", json!({})).await;
    assert_eq!(
        err,
        json!({"code": -32600, "message": "client must send initialized before using exec methods"})
    );
    let err = h.error("fs/getMetadata", json!({"path": "/"})).await;
    assert_eq!(
        err,
        json!({"code": -32600, "message": "client must send initialized before using filesystem methods"})
    );
    h.send(json!({"method": "initialized"})).await;
    assert_eq!(h.result("process/list", json!({})).await, json!({"processes": []}));
    let err = h.error("initialize", json!({"clientName": "again"})).await;
    assert_eq!(
        err,
        json!({"code": -32600, "message": "initialize may only be sent once per connection"})
    );
}

#[tokio::test]
async fn malformed_lines_get_id_minus_one_and_the_connection_stays() {
    let mut h = Harness::ready().await;
    let cases: &[(&[u8], &str)] = &[
        (b"not json", "failed to parse JSON-RPC message: expected ident at line 1 column 2"),
        (b"[1,2,3]", "failed to parse JSON-RPC message: expected a JSON object, got an array"),
        (b"42", "failed to parse JSON-RPC message: expected a JSON object, got a number"),
        (b"\"hi\"", "failed to parse JSON-RPC message: expected a JSON object, got a string"),
        (
            b"{\"id\":1,\"method\":\"x\xff\"}",
            "failed to parse JSON-RPC message: invalid UTF-8 at byte 19",
        ),
        (
            br#"{"id":null,"method":"process/list"}"#,
            "failed to parse JSON-RPC message: id must be an integer or a string, got null",
        ),
        (
            br#"{"id":{"a":1},"method":"process/list"}"#,
            "failed to parse JSON-RPC message: id must be an integer or a string, got an object",
        ),
        (br#"{"method":"process/list"}"#, "process/list is a request and needs an id"),
        (
            br#"{"id":5}"#,
            "failed to parse JSON-RPC message: a message needs a method, a result or an error",
        ),
        (
            b"{\"id\":1,\"method\":\"process/list\"",
            "failed to parse JSON-RPC message: EOF while parsing an object at line 1 column 31",
        ),
    ];
    for (line, message) in cases {
        h.send_line("").await; // blank lines are skipped
        h.send_bytes(&[*line, b"\n"].concat()).await;
        let reply = h.next().await;
        assert_eq!(
            reply,
            json!({"id": -1, "error": {"code": -32600, "message": message}}),
            "for line {:?}",
            String::from_utf8_lossy(line)
        );
    }
    assert_eq!(h.result("process/list", json!(null)).await, json!({"processes": []}));
}

#[tokio::test]
async fn unknown_methods_and_bad_params() {
    let mut h = Harness::ready().await;
    assert_eq!(
        h.error("process/explode", json!({})).await,
        json!({"code": -32601, "message": "unknown method process/explode"})
    );
    assert_eq!(
        h.error("process/start", json!({"processId": "p"})).await,
        json!({"code": -32602, "message": "invalid params for process/start: missing field `argv`"})
    );
    assert_eq!(
        h.error("process/read", json!({"processId": 7})).await,
        json!({"code": -32602, "message": "invalid params for process/read: invalid type: integer `7`, expected a string"})
    );
    assert_eq!(
        h.error("fs/readFile", json!([1])).await,
        json!({"code": -32602, "message": "invalid params for fs/readFile: expected an object, got an array"})
    );
    assert_eq!(
        h.error("process/write", json!({"processId": "p", "chunk": "%%%"})).await,
        json!({"code": -32602, "message": "invalid params for process/write: invalid base64: Invalid symbol 37, offset 0."})
    );
    // String ids are echoed as strings.
    h.send(json!({"id": "abc", "method": "process/list"})).await;
    assert_eq!(h.next().await, json!({"id": "abc", "result": {"processes": []}}));
}

#[tokio::test]
async fn unknown_notifications_and_stray_responses_are_ignored() {
    let mut h = Harness::ready().await;
    h.send(json!({"method": "something/else", "params": {"x": 1}})).await;
    h.send(json!({"method": "initialized"})).await;
    h.send(json!({"id": 99, "result": {}})).await;
    h.send(json!({"jsonrpc": "2.0", "id": 7, "method": "process/list"})).await;
    assert_eq!(h.next().await, json!({"id": 7, "result": {"processes": []}}));
}

#[tokio::test]
async fn a_line_over_the_limit_is_discarded_and_the_connection_stays() {
    let config = Config { max_message_bytes: 100, ..Config::default() };
    let mut h = Harness::ready_with(config).await;
    let long =
        format!(r#"{{"id":1,"method":"process/list","params":{{"pad":"{}"}}}}"#, "x".repeat(200));
    h.send_line(&long).await;
    assert_eq!(
        h.next().await,
        json!({"id": -1, "error": {"code": -32600, "message": "message is longer than the limit of 100 bytes (--max-message-bytes); it was discarded"}})
    );
    assert_eq!(h.result("process/list", json!({})).await, json!({"processes": []}));
}

#[tokio::test]
async fn end_of_input_ends_the_server_cleanly() {
    let mut h = Harness::ready().await;
    h.close_input().await;
    crate::support::within("the server to return", &mut h.server).await.unwrap().unwrap();
}

/// A small deterministic generator (xorshift) for junk input.
struct Junk(u64);

impl Junk {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[(self.next() % items.len() as u64) as usize]
    }

    fn line(&mut self) -> Vec<u8> {
        let values = [
            "null",
            "1",
            "-1",
            "1.5",
            "\"s\"",
            "[]",
            "{}",
            "true",
            "\"\u{1F600}\"",
            "18446744073709551616",
        ];
        let methods = [
            "process/read",
            "process/write",
            "process/signal",
            "process/terminate",
            "process/resize",
            "process/list",
            "initialize",
            "nope",
            "",
        ];
        let keys = [
            "processId",
            "afterSeq",
            "maxBytes",
            "waitMs",
            "chunk",
            "signal",
            "rows",
            "cols",
            "graceMs",
            "closeStdin",
        ];
        match self.next() % 4 {
            0 => (0..self.next() % 64)
                .map(|_| (self.next() % 256) as u8)
                .filter(|&b| b != b'\n')
                .collect(),
            1 => {
                let mut params = Vec::new();
                for _ in 0..self.next() % 4 {
                    params.push(format!("\"{}\":{}", self.pick(&keys), self.pick(&values)));
                }
                let id = self.pick(&values);
                let method = self.pick(&methods);
                format!(r#"{{"id":{id},"method":"{method}","params":{{{}}}}}"#, params.join(","))
                    .into_bytes()
            }
            2 => {
                let id = self.pick(&values);
                let params = self.pick(&values);
                format!(r#"{{"id":{id},"method":"{}","params":{params}}}"#, self.pick(&methods))
                    .into_bytes()
            }
            _ => {
                let valid =
                    br#"{"id":1,"method":"process/read","params":{"processId":"x","waitMs":1}}"#;
                let cut = (self.next() % valid.len() as u64) as usize;
                valid[..cut].to_vec()
            }
        }
    }
}

#[tokio::test]
async fn junk_input_never_stops_the_server() {
    let mut h = Harness::ready().await;
    let mut junk = Junk(0x2545_F491_4F6C_DD1D);
    let mut replied = 0;
    for round in 0..20 {
        let mut expected = 0;
        for _ in 0..100 {
            let mut line = junk.line();
            expected += replies_expected(&line);
            line.push(b'\n');
            h.send_bytes(&line).await;
        }
        let id = format!("probe-{round}");
        h.send(json!({"id": id, "method": "process/list"})).await;
        // No process exists, so every reply comes at once, before the probe's.
        let mut replies = Vec::new();
        let reply = loop {
            let message = h.next().await;
            if message["id"] == id.as_str() {
                break message;
            }
            replies.push(message);
        };
        assert_eq!(replies.len(), expected, "round {round}: {replies:?}");
        for reply in &replies {
            let answered = reply.get("error").is_some() ^ reply.get("result").is_some();
            assert!(answered && reply.get("method").is_none(), "{reply}");
        }
        replied += replies.len();
        assert!(reply.get("result").is_some(), "{reply}");
        assert!(!h.server.is_finished(), "the server stopped");
    }
    assert!(replied > 1000, "the junk was too tame: {replied} replies");
}

/// How many replies a junk line must get: none for a blank line, a response or
/// a notification the server ignores; exactly one for anything else.
fn replies_expected(line: &[u8]) -> usize {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return 0;
    }
    let Ok(serde_json::Value::Object(object)) = serde_json::from_slice(line) else { return 1 };
    let method = object.get("method").and_then(serde_json::Value::as_str);
    match (object.contains_key("id"), method) {
        (false, Some(method)) if !exec_server::protocol::METHODS.contains(&method) => 0,
        (true, None) if object.contains_key("result") ^ object.contains_key("error") => 0,
        _ => 1,
    }
}
