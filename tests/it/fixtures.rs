//! Replays `fixtures/transcripts/*.jsonl` through the real binary, and runs the README demo.

use std::path::Path;
use std::process::Stdio;

use serde_json::Value;

use crate::binary::{Binary, BIN};
use crate::support::{scratch, unb64};
use crate::websocket::{WsPeer, WsServer};

/// `expected` matches `actual` when equal, where the string "<any>" matches anything.
fn matches(expected: &Value, actual: &Value) -> bool {
    match (expected, actual) {
        (Value::String(s), _) if s == "<any>" => true,
        (Value::Object(e), Value::Object(a)) => {
            e.len() == a.len() && e.iter().all(|(k, v)| a.get(k).is_some_and(|av| matches(v, av)))
        }
        (Value::Array(e), Value::Array(a)) => {
            e.len() == a.len() && e.iter().zip(a).all(|(ev, av)| matches(ev, av))
        }
        _ => expected == actual,
    }
}

/// How a transcript reaches the binary.
#[derive(Debug, Clone, Copy)]
enum Transport {
    Stdio,
    WebSocket,
}

/// One client connection of either transport.
enum Peer {
    Stdio(Binary),
    WebSocket(WsServer, Box<WsPeer>),
}

impl Peer {
    async fn start(transport: Transport) -> Peer {
        match transport {
            Transport::Stdio => Peer::Stdio(Binary::spawn(&[])),
            Transport::WebSocket => {
                let server = WsServer::start(&["--listen", "ws://127.0.0.1:0"]).await;
                let peer = WsPeer::connect(&server.url).await;
                Peer::WebSocket(server, Box::new(peer))
            }
        }
    }

    async fn send(&mut self, line: &str) {
        match self {
            Peer::Stdio(server) => server.send_line(line).await,
            Peer::WebSocket(_, peer) => peer.send_text(line).await,
        }
    }

    async fn next(&mut self) -> Option<Value> {
        match self {
            Peer::Stdio(server) => server.next().await,
            Peer::WebSocket(_, peer) => peer.next().await,
        }
    }

    /// Ends the session: the connection must close with nothing more sent,
    /// and the server must exit 0 (a listening server once told to stop).
    async fn finish(mut self, at: &str) {
        match &mut self {
            Peer::Stdio(server) => server.close_stdin(),
            Peer::WebSocket(_, peer) => peer.close().await,
        }
        assert_eq!(self.next().await, None, "{at}: unexpected extra output");
        let code = match &mut self {
            Peer::Stdio(server) => server.exit_code().await,
            Peer::WebSocket(server, _) => {
                server.signal(libc::SIGTERM);
                server.exit_code().await
            }
        };
        assert_eq!(code, Some(0), "{at}: exit status");
    }
}

/// The transcript's expected message as the transport words it.
fn worded_for(transport: Transport, expected: &str) -> String {
    match transport {
        Transport::Stdio => expected.to_owned(),
        Transport::WebSocket => expected.replace(
            "failed to parse JSON-RPC message: ",
            "failed to parse websocket JSON-RPC message from exec-server websocket: ",
        ),
    }
}

async fn replay(path: &Path, transport: Transport) {
    let name = path.file_stem().unwrap().to_string_lossy().into_owned();
    let dir = scratch(&format!("transcript-{name}-{transport:?}"));
    let text = std::fs::read_to_string(path)
        .unwrap()
        .replace("${URI}", &format!("file://{}", dir.display()))
        .replace("${DIR}", dir.to_str().unwrap());
    let mut peer = Peer::start(transport).await;
    for (number, line) in text.lines().enumerate() {
        let at = format!("{}:{} over {transport:?}", path.display(), number + 1);
        if let Some(sent) = line.strip_prefix("> ") {
            peer.send(sent).await;
        } else if let Some(expected) = line.strip_prefix("< ") {
            let expected: Value = serde_json::from_str(&worded_for(transport, expected))
                .unwrap_or_else(|e| panic!("{at}: {e}"));
            let actual = peer.next().await.unwrap_or_else(|| panic!("{at}: server closed"));
            assert!(matches(&expected, &actual), "{at}:\nexpected {expected}\n  actual {actual}");
        } else {
            assert!(line.is_empty() || line.starts_with('#'), "{at}: unknown line {line:?}");
        }
    }
    peer.finish(&format!("{} over {transport:?}", path.display())).await;
}

fn transcripts() -> Vec<std::path::PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/transcripts");
    let mut paths: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    paths.sort();
    assert!(paths.len() >= 4, "transcripts are missing: {paths:?}");
    paths
}

#[tokio::test]
async fn transcripts_replay_through_the_binary() {
    for path in transcripts() {
        replay(&path, Transport::Stdio).await;
    }
}

#[tokio::test]
async fn transcripts_replay_over_websocket() {
    for path in transcripts() {
        replay(&path, Transport::WebSocket).await;
    }
}

#[test]
fn the_matcher_can_fail() {
    let json = |s: &str| serde_json::from_str::<Value>(s).unwrap();
    assert!(matches(&json(r#"{"a":"<any>","b":[1]}"#), &json(r#"{"a":{"x":1},"b":[1]}"#)));
    assert!(!matches(&json(r#"{"a":1}"#), &json(r#"{"a":1,"b":2}"#)));
    assert!(!matches(&json(r#"[1,2]"#), &json(r#"[1]"#)));
    assert!(!matches(&json(r#"{"a":"x"}"#), &json(r#"{"a":"y"}"#)));
}

#[tokio::test]
async fn the_readme_demo_runs() {
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/demo.jsonl");
    let output = tokio::process::Command::new(*BIN)
        .args(["--on-eof", "wait"])
        .stdin(std::fs::File::open(demo).unwrap())
        .stderr(Stdio::inherit())
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    let messages: Vec<Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for id in 1..=9 {
        let response =
            messages.iter().find(|m| m["id"] == id).unwrap_or_else(|| panic!("no response {id}"));
        assert!(response.get("result").is_some(), "request {id} failed: {response}");
    }
    let response = |id: i64| messages.iter().find(|m| m["id"] == id).unwrap()["result"].clone();
    assert_eq!(unb64(&response(6)["dataBase64"]), b"hello from fs/writeFile\n");
    let output_of = |process: &str| -> Vec<u8> {
        messages
            .iter()
            .filter(|m| m["method"] == "process/output" && m["params"]["processId"] == process)
            .flat_map(|m| unb64(&m["params"]["chunk"]))
            .collect()
    };
    let exit_of = |process: &str| {
        messages
            .iter()
            .find(|m| m["method"] == "process/exited" && m["params"]["processId"] == process)
            .unwrap_or_else(|| panic!("{process} never exited"))["params"]["exitCode"]
            .clone()
    };
    let mut pipe =
        String::from_utf8(output_of("pipe")).unwrap().lines().map(String::from).collect::<Vec<_>>();
    pipe.sort();
    assert_eq!(pipe, vec!["hello from a pipe", "to stderr"]);
    assert_eq!(exit_of("pipe"), 3);
    assert!(String::from_utf8(output_of("term")).unwrap().starts_with("24 80\r\n/dev/pts/"));
    assert_eq!(exit_of("term"), 0);
}
