//! `--listen ws://`: the real binary over real WebSocket connections.

use std::process::Stdio;

use exec_server::{Client, ClientOptions, StartParams};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::Child;
use tokio_tungstenite::tungstenite::Message as Frame;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::binary::BIN;
use crate::support::{is_dead, scratch, wait_dead, within};

/// A `--listen` server started by a test, killed if the test fails.
pub struct WsServer {
    pub child: Child,
    pub url: String,
    pub first_stderr_line: String,
}

impl WsServer {
    pub async fn start(args: &[&str]) -> WsServer {
        WsServer::start_with(args, &[], Stdio::null()).await
    }

    /// With extra environment and the given stdin (a pipe stays in `child.stdin`).
    pub async fn start_with(args: &[&str], env: &[(&str, &str)], stdin: Stdio) -> WsServer {
        let mut child = tokio::process::Command::new(*BIN)
            .args(args)
            .envs(env.iter().copied())
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        let url = within("the listening URL", stdout.next_line()).await.unwrap().unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
        let first = within("the first stderr line", stderr.next_line()).await.unwrap().unwrap();
        // Keep draining stderr so logs never block the server.
        tokio::spawn(async move { while let Ok(Some(_)) = stderr.next_line().await {} });
        tokio::spawn(async move { while let Ok(Some(_)) = stdout.next_line().await {} });
        WsServer { child, url, first_stderr_line: first }
    }

    pub fn signal(&self, signal: libc::c_int) {
        // SAFETY: plain kill(2) of the server this test spawned.
        assert_eq!(unsafe { libc::kill(self.child.id().unwrap() as libc::pid_t, signal) }, 0);
    }

    pub async fn exit_code(&mut self) -> Option<i32> {
        within("the listening server to exit", self.child.wait()).await.unwrap().code()
    }
}

/// A raw WebSocket peer: frames in, JSON out.
pub struct WsPeer {
    pub ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
}

impl WsPeer {
    pub async fn connect(url: &str) -> WsPeer {
        let (ws, _) =
            within("a WebSocket connection", tokio_tungstenite::connect_async(url)).await.unwrap();
        WsPeer { ws }
    }

    pub async fn send_text(&mut self, text: &str) {
        self.ws.send(Frame::text(text)).await.unwrap();
    }

    pub async fn send_binary(&mut self, bytes: &[u8]) {
        self.ws.send(Frame::binary(bytes.to_vec())).await.unwrap();
    }

    /// The next JSON message, or `None` once the server closed the connection.
    pub async fn next(&mut self) -> Option<Value> {
        loop {
            match within("a frame from the server", self.ws.next()).await {
                Some(Ok(Frame::Text(text))) => return Some(serde_json::from_str(&text).unwrap()),
                Some(Ok(Frame::Close(_))) | None | Some(Err(_)) => return None,
                Some(Ok(_)) => continue,
            }
        }
    }

    pub async fn close(&mut self) {
        let _ = self.ws.close(None).await;
    }

    pub async fn handshake(&mut self) {
        self.send_text(r#"{"id":0,"method":"initialize","params":{"clientName":"ws-test"}}"#).await;
        assert_eq!(self.next().await.unwrap()["result"]["protocolVersion"], "exec-server.v0");
        self.send_text(r#"{"method":"initialized"}"#).await;
    }
}

/// The HTTP status line the server answers to a hand-written upgrade request.
async fn upgrade_status(url: &str, extra_headers: &str) -> String {
    let address = url.strip_prefix("ws://").unwrap();
    let mut stream = TcpStream::connect(address).await.unwrap();
    let request = format!(
        "GET / HTTP/1.1\r\nHost: {address}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{extra_headers}\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut status = String::new();
    let mut reader = BufReader::new(stream);
    within("the upgrade response", reader.read_line(&mut status)).await.unwrap();
    status.trim_end().to_owned()
}

async fn pid_of(client: &Client, id: &str) -> u32 {
    let list = client.list(exec_server::protocol::Empty {}).await.unwrap();
    list.processes.iter().find(|p| p.process_id == id).unwrap().pid
}

#[tokio::test]
async fn announces_its_url_on_stdout_and_first_on_stderr() {
    let server = WsServer::start(&["--listen", "ws://127.0.0.1:0"]).await;
    assert!(server.url.starts_with("ws://127.0.0.1:"), "{}", server.url);
    assert_ne!(server.url, "ws://127.0.0.1:0");
    assert_eq!(server.first_stderr_line, format!("exec-server listening on {}", server.url));
}

#[tokio::test]
async fn connections_are_independent_and_a_disconnect_ends_only_its_session_after_the_ttl() {
    let mut server =
        WsServer::start(&["--listen", "ws://127.0.0.1:0", "--session-ttl", "300ms"]).await;
    let first = Client::connect_ws(&server.url, ClientOptions::default()).await.unwrap();
    let second = Client::connect_ws(&server.url, ClientOptions::default()).await.unwrap();
    // The same process id on both: each connection has its own table.
    first.start(StartParams::new("s", ["sleep", "100"], "/")).await.unwrap();
    second.start(StartParams::new("s", ["sleep", "100"], "/")).await.unwrap();
    let (first_pid, second_pid) = (pid_of(&first, "s").await, pid_of(&second, "s").await);
    assert_ne!(first_pid, second_pid);
    drop(first);
    wait_dead(first_pid).await;
    assert!(!is_dead(second_pid), "the other connection's process died too");
    let mut echo = second.start(StartParams::new("e", ["echo", "still"], "/")).await.unwrap();
    let (output, _) = echo.output_to_end().await.unwrap();
    assert_eq!(output, b"still\n");
    server.signal(libc::SIGTERM);
    assert_eq!(server.exit_code().await, Some(0));
    wait_dead(second_pid).await;
}

#[tokio::test]
async fn bad_frames_are_answered_and_the_connection_stays() {
    let server =
        WsServer::start(&["--listen", "ws://127.0.0.1:0", "--max-message-bytes", "200"]).await;
    let mut peer = WsPeer::connect(&server.url).await;
    peer.handshake().await;
    peer.send_text("not json").await;
    assert_eq!(
        peer.next().await.unwrap(),
        json!({"id": -1, "error": {"code": -32600, "message": "failed to parse websocket JSON-RPC message from exec-server websocket: expected ident at line 1 column 2"}})
    );
    peer.send_binary(br#"{"id":5,"method":"process/list","params":{}}"#).await;
    assert_eq!(peer.next().await.unwrap(), json!({"id": 5, "result": {"processes": []}}));
    peer.send_binary(&[0xff, 0xfe]).await;
    let error = peer.next().await.unwrap();
    assert_eq!(error["id"], -1);
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message
            .starts_with("failed to parse websocket JSON-RPC message from exec-server websocket: "),
        "{message}"
    );
    peer.send_text(&format!(r#"{{"pad":"{}"}}"#, "x".repeat(300))).await;
    assert_eq!(
        peer.next().await.unwrap(),
        json!({"id": -1, "error": {"code": -32600, "message": "message is longer than the limit of 200 bytes (--max-message-bytes); it was discarded"}})
    );
    peer.send_text(r#"{"id":6,"method":"process/list","params":{}}"#).await;
    assert_eq!(peer.next().await.unwrap(), json!({"id": 6, "result": {"processes": []}}));
}

#[tokio::test]
async fn web_pages_are_refused() {
    let server = WsServer::start(&["--listen", "ws://127.0.0.1:0"]).await;
    let status = upgrade_status(&server.url, "Origin: http://evil.example\r\n").await;
    assert_eq!(status, "HTTP/1.1 403 Forbidden");
    assert_eq!(upgrade_status(&server.url, "").await, "HTTP/1.1 101 Switching Protocols");
}

#[tokio::test]
async fn off_loopback_needs_a_token_and_checks_it() {
    let output = tokio::process::Command::new(*BIN)
        .args(["--listen", "ws://0.0.0.0:0"])
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        "exec-server: --listen ws://0.0.0.0:0: a non-loopback address needs --ws-auth (or --token-file; clients then send Authorization: Bearer TOKEN)\n"
    );
    assert!(output.stdout.is_empty());

    let dir = scratch("ws-token");
    let token_file = dir.join("token");
    std::fs::write(&token_file, "s3cret-token\n").unwrap();
    std::fs::set_permissions(&token_file, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .unwrap();
    let server = WsServer::start(&[
        "--listen",
        "ws://0.0.0.0:0",
        "--token-file",
        token_file.to_str().unwrap(),
    ])
    .await;
    let port = server.url.rsplit(':').next().unwrap();
    let url = format!("ws://127.0.0.1:{port}");
    assert_eq!(upgrade_status(&url, "").await, "HTTP/1.1 401 Unauthorized");
    let wrong = "Authorization: Bearer s3cret-tokeN\r\n";
    assert_eq!(upgrade_status(&url, wrong).await, "HTTP/1.1 401 Unauthorized");
    let refused = Client::connect_ws(&url, ClientOptions::default()).await.err().unwrap();
    assert!(refused.to_string().contains("401"), "{refused}");
    let options =
        ClientOptions { bearer_token: Some("s3cret-token".into()), ..ClientOptions::default() };
    let client = Client::connect_ws(&url, options).await.unwrap();
    assert!(client.list(exec_server::protocol::Empty {}).await.unwrap().processes.is_empty());
}

#[tokio::test]
async fn a_text_frame_that_is_not_utf8_fails_the_connection_with_1007() {
    use tokio_tungstenite::tungstenite::protocol::frame::coding::{CloseCode, Data, OpCode};
    use tokio_tungstenite::tungstenite::protocol::frame::Frame as RawFrame;
    let server = WsServer::start(&["--listen", "ws://127.0.0.1:0"]).await;
    let mut peer = WsPeer::connect(&server.url).await;
    peer.handshake().await;
    let raw = RawFrame::message(b"{\"id\":3}\xff".to_vec(), OpCode::Data(Data::Text), true);
    peer.ws.send(Frame::Frame(raw)).await.unwrap();
    let close = loop {
        match within("the close frame", peer.ws.next()).await {
            Some(Ok(Frame::Close(close))) => break close,
            Some(Ok(_)) => continue,
            other => panic!("expected a close frame, got {other:?}"),
        }
    };
    assert_eq!(close.map(|c| c.code), Some(CloseCode::Invalid));
}

/// An in-process listener that pings every 200 ms (and keeps a detached
/// session `ttl_ms`, when given): its URL, its stop, and its task.
async fn listen_pinging_every_200ms(
    ttl_ms: Option<u64>,
) -> (String, tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<std::io::Result<()>>) {
    use exec_server::server::{self, Config, ListenOptions};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", listener.local_addr().unwrap());
    let defaults = ListenOptions::default();
    let options = ListenOptions {
        config: Config::default(),
        ping_interval: std::time::Duration::from_millis(200),
        session_ttl: ttl_ms.map_or(defaults.session_ttl, std::time::Duration::from_millis),
        ..defaults
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let listening = tokio::spawn(server::listen(listener, options, async {
        let _ = stopped.await;
    }));
    (url, stop, listening)
}

#[tokio::test]
async fn a_peer_that_goes_silent_is_dropped_and_its_session_ends_after_the_ttl() {
    let (url, stop, listening) = listen_pinging_every_200ms(Some(200)).await;
    let mut peer = WsPeer::connect(&url).await;
    peer.handshake().await;
    let start = json!({"id": 1, "method": "process/start", "params": crate::support::start_params("s", &["sleep", "100"], json!({}))});
    peer.send_text(&start.to_string()).await;
    assert_eq!(peer.next().await.unwrap()["id"], 1);
    peer.send_text(r#"{"id":2,"method":"process/list","params":{}}"#).await;
    let list = peer.next().await.unwrap();
    let pid = list["result"]["processes"][0]["pid"].as_u64().unwrap() as u32;
    // From now on the peer neither reads nor answers pings: after a silent
    // ping period the server drops it, its session detaches, and once the
    // ttl passes unresumed its process dies.
    wait_dead(pid).await;
    drop(peer);
    let _ = stop.send(());
    within("the listener to stop", listening).await.unwrap().unwrap();
}

#[tokio::test]
async fn an_idle_peer_that_answers_pings_stays_connected() {
    let (url, stop, listening) = listen_pinging_every_200ms(None).await;
    let mut peer = WsPeer::connect(&url).await;
    peer.handshake().await;
    // Idle for seven ping periods: the client reads (so it answers every
    // ping, as browsers and Node's WebSocket do) and sends nothing.
    let idle_until = tokio::time::Instant::now() + std::time::Duration::from_millis(1400);
    let mut pings = 0;
    loop {
        match tokio::time::timeout_at(idle_until, peer.ws.next()).await {
            Err(_) => break,
            Ok(Some(Ok(Frame::Ping(_)))) => pings += 1,
            Ok(other) => panic!("the server sent {other:?} to an idle peer"),
        }
    }
    assert!(pings >= 5, "{pings} pings in seven periods");
    peer.send_text(r#"{"id":2,"method":"process/list","params":{}}"#).await;
    assert_eq!(peer.next().await.unwrap()["result"], json!({"processes": []}));
    drop(peer);
    let _ = stop.send(());
    within("the listener to stop", listening).await.unwrap().unwrap();
}

/// Part A for exec-server.v0 clients: a start that asks for no sandbox answers
/// exactly `{"processId"}`, and closing the WebSocket kills what it started
/// unless the client said it resumes.
#[tokio::test]
async fn a_v0_client_gets_part_a_answers_and_its_close_kills() {
    let server = WsServer::start(&["--listen", "ws://127.0.0.1:0"]).await;
    let mut pids = Vec::new();
    for resumable in [false, true] {
        let mut peer = WsPeer::connect(&server.url).await;
        let params = if resumable {
            json!({"clientName": "v1", "resumable": true})
        } else {
            json!({"clientName": "v0"})
        };
        peer.send_text(&json!({"id": 1, "method": "initialize", "params": params}).to_string())
            .await;
        assert_eq!(peer.next().await.unwrap()["result"]["protocolVersion"], "exec-server.v0");
        peer.send_text(r#"{"method":"initialized"}"#).await;
        for (id, sandbox) in [("plain", None), ("none", Some(json!({"mode": "none"})))] {
            let mut params = json!({"processId": id, "argv": ["sleep", "60"], "cwd": "/tmp", "env": {}, "tty": false});
            if let Some(sandbox) = sandbox {
                params["sandbox"] = sandbox;
            }
            let start = json!({"id": 2, "method": "process/start", "params": params});
            peer.send_text(&start.to_string()).await;
            assert_eq!(peer.next().await.unwrap(), json!({"id": 2, "result": {"processId": id}}));
        }
        peer.send_text(r#"{"id":3,"method":"process/list","params":{}}"#).await;
        let list = peer.next().await.unwrap();
        let pid = list["result"]["processes"][0]["pid"].as_u64().unwrap() as u32;
        peer.close().await;
        pids.push(pid);
    }
    // The v0 client's processes die with its connection...
    wait_dead(pids[0]).await;
    // ...the resuming client's wait for it (until --session-ttl).
    assert!(!is_dead(pids[1]), "a resumable session's process died at the close");
}
