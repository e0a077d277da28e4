//! Sessions that survive a dropped connection (PROTOCOL.md, Sessions): the
//! real binary over real WebSocket and Unix-socket connections, the `--connect`
//! bridge, and the client's own resume.

use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use exec_server::{Client, ClientOptions, Error, StartParams};
use serde_json::{json, Value};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::binary::{Binary, BIN};
use crate::support::{
    b64, is_dead, peer_pid, root_or_skip, scratch, start_params, unb64, wait_dead, within, Harness,
};
use crate::websocket::{WsPeer, WsServer};

/// Starts `sh -c script` as process `tree` (request id 2) on `peer`; the
/// pid it prints first, `what` for the wait.
async fn start_printing_pid(peer: &mut WsPeer, script: &str, what: &str) -> u32 {
    let start = json!({"id": 2, "method": "process/start", "params": start_params("tree", &["sh", "-c", script], json!({}))});
    peer.send_text(&start.to_string()).await;
    let output = next_matching(peer, what, |m| m["method"] == "process/output").await;
    String::from_utf8(unb64(&output["params"]["chunk"])).unwrap().trim().parse().unwrap()
}

/// Cuts a WebSocket peer's TCP connection without a close frame.
fn cut(peer: &WsPeer) {
    let tokio_tungstenite::MaybeTlsStream::Plain(stream) = peer.ws.get_ref() else {
        panic!("a plain TCP stream")
    };
    // SAFETY: shutdown(2) of a socket this test owns.
    assert_eq!(unsafe { libc::shutdown(stream.as_raw_fd(), libc::SHUT_RDWR) }, 0);
}

/// `initialize` (resuming `resume` if given) on a raw peer: the whole reply.
async fn initialize(peer: &mut WsPeer, resume: Option<&str>) -> Value {
    let mut params = json!({"clientName": "sessions", "resumable": true});
    if let Some(id) = resume {
        params["resumeSessionId"] = json!(id);
    }
    peer.send_text(&json!({"id": 1, "method": "initialize", "params": params}).to_string()).await;
    peer.next().await.unwrap()
}

/// A fresh session on a raw peer; returns its id.
async fn open_session(peer: &mut WsPeer) -> String {
    let reply = initialize(peer, None).await;
    peer.send_text(r#"{"method":"initialized"}"#).await;
    reply["result"]["sessionId"].as_str().unwrap().to_owned()
}

/// Resumes `session` over a new WebSocket connection to `url`: its peer and
/// the `initialize` reply. While the server has not noticed that the old
/// connection is gone it answers -32010; then a new connection tries again.
async fn resume_ws(url: &str, session: &str) -> (WsPeer, Value) {
    loop {
        let mut peer = WsPeer::connect(url).await;
        let reply = initialize(&mut peer, Some(session)).await;
        if reply["error"]["code"] != -32010 {
            return (peer, reply);
        }
    }
}

/// [`resume_ws`] through a new `--connect` bridge to the daemon at `path`.
async fn resume_bridge(path: &Path, session: &str) -> (Binary, Value) {
    loop {
        let mut next = bridge(path, &[]);
        let params = json!({"clientName": "bridge", "resumeSessionId": session});
        let reply = next.call("initialize", params).await;
        if reply["error"]["code"] != -32010 {
            return (next, reply);
        }
    }
}

/// Runs `program` (the binary, or `setpriv` before it) with `args` and no
/// stdin, and asserts that it exits 1 saying `message` on stderr.
fn refused_at_start(program: &str, args: &[&str], message: &str) {
    let output =
        std::process::Command::new(program).args(args).stdin(Stdio::null()).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(message), "{stderr}");
}

/// The next message on `peer` that `matches`, skipping others.
async fn next_matching(peer: &mut WsPeer, what: &str, matches: impl Fn(&Value) -> bool) -> Value {
    loop {
        let message = peer.next().await.unwrap_or_else(|| panic!("closed before {what}"));
        if matches(&message) {
            return message;
        }
    }
}

#[tokio::test]
async fn a_resumed_websocket_session_keeps_its_process_seq_and_writes() {
    let server = WsServer::start(&["--listen", "ws://127.0.0.1:0"]).await;
    let mut first = WsPeer::connect(&server.url).await;
    let session = open_session(&mut first).await;
    assert_eq!(session.len(), 36);
    let script = "echo one; read line; echo \"got $line\"; exit 4";
    let start = json!({"id": 2, "method": "process/start", "params": start_params("p", &["sh", "-c", script], json!({"pipeStdin": true}))});
    first.send_text(&start.to_string()).await;
    let output =
        next_matching(&mut first, "the first output", |m| m["method"] == "process/output").await;
    assert_eq!(
        (output["params"]["seq"].clone(), unb64(&output["params"]["chunk"])),
        (json!(1), b"one\n".to_vec())
    );
    cut(&first);
    // The process keeps running while detached; a new connection resumes it.
    let (mut second, reply) = resume_ws(&server.url, &session).await;
    assert_eq!(reply["result"]["sessionId"], json!(session));
    second.send_text(r#"{"method":"initialized"}"#).await;
    let write = |id: i64| {
        json!({"id": id, "method": "process/write", "params": {"processId": "p", "chunk": b64(b"x\n"), "writeId": "w-1"}}).to_string()
    };
    second.send_text(&write(3)).await;
    assert_eq!(
        next_matching(&mut second, "write 3", |m| m["id"] == 3).await["result"],
        json!({"accepted": true, "status": "accepted"})
    );
    // A retried write is acknowledged and not applied twice.
    second.send_text(&write(4)).await;
    assert_eq!(
        next_matching(&mut second, "write 4", |m| m["id"] == 4).await["result"],
        json!({"accepted": true, "status": "accepted"})
    );
    let mut chunks = Vec::new();
    let mut after = 1;
    let result = loop {
        let read = json!({"id": 5, "method": "process/read", "params": {"processId": "p", "afterSeq": after, "waitMs": 10000}});
        second.send_text(&read.to_string()).await;
        let result =
            next_matching(&mut second, "the read", |m| m["id"] == 5).await["result"].clone();
        chunks.extend(
            result["chunks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| (c["seq"].clone(), unb64(&c["chunk"]))),
        );
        after = result["nextSeq"].as_u64().unwrap() - 1;
        if result["exited"] == true {
            break result;
        }
    };
    assert_eq!(chunks, vec![(json!(2), b"got x\n".to_vec())]);
    assert_eq!((result["nextSeq"].clone(), result["exitCode"].clone()), (json!(3), json!(4)));
}

#[tokio::test]
async fn resuming_an_attached_or_unknown_session_gets_the_exact_errors() {
    let server = WsServer::start(&["--listen", "ws://127.0.0.1:0"]).await;
    let mut first = WsPeer::connect(&server.url).await;
    let session = open_session(&mut first).await;
    let mut second = WsPeer::connect(&server.url).await;
    assert_eq!(
        initialize(&mut second, Some(&session)).await,
        json!({"id": 1, "error": {"code": -32010, "message": format!("session {session} is already attached to another connection")}})
    );
    // A refused resume leaves the connection uninitialized: it may try again.
    assert_eq!(
        initialize(&mut second, Some("no-such-session")).await,
        json!({"id": 1, "error": {"code": -32600, "message": "unknown session id no-such-session"}})
    );
    let fresh = initialize(&mut second, None).await;
    assert_ne!(fresh["result"]["sessionId"], json!(session));
}

#[tokio::test]
async fn over_stdio_no_session_can_be_resumed() {
    let mut h = Harness::new();
    let error = h.error("initialize", json!({"clientName": "it", "resumeSessionId": "abc"})).await;
    assert_eq!(error, json!({"code": -32600, "message": "unknown session id abc"}));
}

#[tokio::test]
async fn an_unresumed_session_is_ended_with_its_grandchildren_after_the_ttl() {
    let server = WsServer::start(&["--listen", "ws://127.0.0.1:0", "--session-ttl", "300ms"]).await;
    let mut peer = WsPeer::connect(&server.url).await;
    let session = open_session(&mut peer).await;
    let grandchild =
        start_printing_pid(&mut peer, "sleep 1000 & echo $!; wait", "the grandchild's pid").await;
    peer.send_text(r#"{"id":3,"method":"process/list","params":{}}"#).await;
    let list = next_matching(&mut peer, "the list", |m| m["id"] == 3).await;
    let child = list["result"]["processes"][0]["pid"].as_u64().unwrap() as u32;
    cut(&peer);
    wait_dead(child).await;
    wait_dead(grandchild).await;
    // Ended, not merely detached: it can no longer be resumed.
    let mut late = WsPeer::connect(&server.url).await;
    assert_eq!(
        initialize(&mut late, Some(&session)).await["error"]["message"],
        json!(format!("unknown session id {session}"))
    );
}

/// A TCP relay whose connections the test can cut at once, without close frames.
struct Relay {
    url: String,
    cut: watch::Sender<u64>,
}

impl Relay {
    async fn start(target: &str) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("ws://{}", listener.local_addr().unwrap());
        let target = target.strip_prefix("ws://").unwrap().to_owned();
        let (cut, cuts) = watch::channel(0u64);
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let outbound = TcpStream::connect(&target).await.unwrap();
                let mut cuts = cuts.clone();
                cuts.mark_unchanged();
                tokio::spawn(async move {
                    let (mut a_read, mut a_write) = inbound.into_split();
                    let (mut b_read, mut b_write) = outbound.into_split();
                    tokio::select! {
                        _ = tokio::io::copy(&mut a_read, &mut b_write) => {}
                        _ = tokio::io::copy(&mut b_read, &mut a_write) => {}
                        _ = cuts.changed() => {}
                    }
                    // Dropping the halves resets nothing gracefully: no close frame crosses.
                });
            }
        });
        Relay { url, cut }
    }

    fn cut(&self) {
        self.cut.send_modify(|n| *n += 1);
    }
}

#[tokio::test]
async fn a_client_resumes_through_a_cut_and_its_handle_sees_every_byte_once_then_the_exit() {
    let server = WsServer::start(&["--listen", "ws://127.0.0.1:0"]).await;
    let relay = Relay::start(&server.url).await;
    let client = Client::connect_ws(&relay.url, ClientOptions::default()).await.unwrap();
    let script = "i=0; while [ $i -lt 300 ]; do echo line$i; i=$((i+1)); sleep 0.002; done; exit 7";
    let mut process = client.start(StartParams::new("p", ["sh", "-c", script], "/")).await.unwrap();
    let mut output = Vec::new();
    while !String::from_utf8_lossy(&output).contains("line20\n") {
        output.extend(within("early output", process.next_output()).await.unwrap().unwrap().bytes);
    }
    relay.cut();
    let (rest, status) = within("the rest of the output", process.output_to_end()).await.unwrap();
    output.extend(rest);
    let expected: String = (0..300).map(|i| format!("line{i}\n")).collect();
    assert_eq!(String::from_utf8(output).unwrap(), expected);
    assert_eq!(status.code, 7);
    // The client goes on working on the resumed session.
    let list = client.list(Default::default()).await.unwrap();
    assert_eq!(list.processes.len(), 1);
}

#[tokio::test]
async fn a_client_whose_session_cannot_be_resumed_gets_one_clear_error() {
    let mut server = WsServer::start(&["--listen", "ws://127.0.0.1:0"]).await;
    let relay = Relay::start(&server.url).await;
    let options = ClientOptions {
        resume_within: std::time::Duration::from_secs(3),
        ..ClientOptions::default()
    };
    let client = Client::connect_ws(&relay.url, options).await.unwrap();
    let mut process = client.start(StartParams::new("p", ["sleep", "1000"], "/")).await.unwrap();
    // The server goes away for good: a restarted one would not know the session either.
    server.signal(libc::SIGKILL);
    server.exit_code().await;
    relay.cut();
    let error = within("the handle's error", process.wait()).await.unwrap_err();
    assert!(matches!(error, Error::SessionLost(_)), "{error:?}");
    let message = error.to_string();
    assert!(message.starts_with("exec-server session lost: session "), "{message}");
    assert!(matches!(client.list(Default::default()).await, Err(Error::SessionLost(_))));
}

/// A private directory for a daemon's socket (the daemon creates it 0700).
fn socket_path(name: &str) -> PathBuf {
    scratch(&format!("daemon-{name}")).join("run").join("d.sock")
}

/// Kills the daemon at `path` when dropped (a failing test leaves none behind).
struct Daemon(u32);

impl Drop for Daemon {
    fn drop(&mut self) {
        // SAFETY: kill(2) of the daemon this test started.
        unsafe { libc::kill(self.0 as libc::pid_t, libc::SIGKILL) };
    }
}

/// A `--connect --spawn-daemon` bridge to `path`, with the daemon flags `extra`.
fn bridge(path: &Path, extra: &[&str]) -> Binary {
    let url = format!("unix:{}", path.display());
    let mut args = vec!["--connect", &url, "--spawn-daemon"];
    args.extend_from_slice(extra);
    Binary::spawn(&args)
}

#[tokio::test]
async fn a_killed_bridge_is_followed_by_one_that_resumes_and_a_sigkilled_daemon_takes_its_sessions_down(
) {
    let path = socket_path("bridge");
    let mut first = bridge(&path, &["--session-ttl", "60s"]);
    let reply =
        first.result("initialize", json!({"clientName": "bridge", "resumable": true})).await;
    let session = reply["sessionId"].as_str().unwrap().to_owned();
    let daemon = Daemon(peer_pid(&path));
    // Private: the directory is 0700, the socket 0600.
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!((mode(path.parent().unwrap()), mode(&path)), (0o700, 0o600));
    first.send_line(r#"{"method":"initialized"}"#).await;
    let script = "sleep 1000 & echo $!; wait";
    first.call("process/start", start_params("tree", &["sh", "-c", script], json!({}))).await;
    let output = first.notification("process/output", "tree").await;
    let grandchild: u32 =
        String::from_utf8(unb64(&output["chunk"])).unwrap().trim().parse().unwrap();
    first.child.start_kill().unwrap();
    first.child.wait().await.unwrap();
    let (mut second, resumed) = resume_bridge(&path, &session).await;
    assert_eq!(resumed["result"]["sessionId"], json!(session));
    second.send_line(r#"{"method":"initialized"}"#).await;
    let list = second.result("process/list", json!({})).await;
    assert_eq!(list["processes"][0]["processId"], "tree");
    let child = list["processes"][0]["pid"].as_u64().unwrap() as u32;
    assert!(!is_dead(grandchild));
    second.child.start_kill().unwrap();
    second.child.wait().await.unwrap();
    // Detached again, with a minute to go: a SIGKILLed daemon still takes it down.
    // SAFETY: kill(2) of the daemon this test started.
    assert_eq!(unsafe { libc::kill(daemon.0 as libc::pid_t, libc::SIGKILL) }, 0);
    wait_dead(daemon.0).await;
    wait_dead(child).await;
    wait_dead(grandchild).await;
}

#[tokio::test]
async fn a_daemon_refuses_another_user_and_a_public_directory() {
    if !root_or_skip("cannot connect as another user") {
        return;
    }
    let path = socket_path("peer");
    let mut owner = bridge(&path, &[]);
    owner.result("initialize", json!({"clientName": "owner"})).await;
    let _daemon = Daemon(peer_pid(&path));
    // Open the way on purpose, so that only the peer check stands between.
    std::fs::set_permissions(path.parent().unwrap(), std::fs::Permissions::from_mode(0o711))
        .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    // A raw connection as nobody: the daemon answers one refusal line and closes.
    let connect = format!(
        "import socket; s = socket.socket(socket.AF_UNIX); s.connect({path:?}); s.sendall(b'{{}}\\n'); print(s.makefile().read(), end='')",
        path = path.display().to_string()
    );
    let raw = std::process::Command::new("setpriv")
        .args([
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            "/usr/bin/python3",
            "-c",
            &connect,
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&raw.stdout),
        "{\"id\":-1,\"error\":{\"code\":-32600,\"message\":\"connection refused: the peer runs as uid 65534, and this server serves only uid 0\"}}\n",
        "{}",
        String::from_utf8_lossy(&raw.stderr)
    );
    // nobody's bridge refuses, for its part, a socket in a directory it does not own.
    let url = format!("unix:{}", path.display());
    let nobody = ["--reuid=nobody", "--regid=nogroup", "--clear-groups", *BIN, "--connect", &url];
    let directory = path.parent().unwrap().display();
    refused_at_start(
        "setpriv",
        &nobody,
        &format!("the socket's directory {directory} must belong to uid 65534"),
    );
    // A directory others may enter is refused at start.
    let public = scratch("daemon-public");
    std::fs::set_permissions(&public, std::fs::Permissions::from_mode(0o755)).unwrap();
    let listen = format!("unix:{}/d.sock", public.display());
    refused_at_start(*BIN, &["--listen", &listen], &format!("the socket's directory {} must belong to uid 0 and be private (mode 0700); it is uid 0, mode 755", public.display()));
}

#[tokio::test]
async fn a_second_daemon_on_the_same_path_is_refused_and_an_idle_one_exits() {
    let path = socket_path("idle");
    let url = format!("unix:{}", path.display());
    let mut first = tokio::process::Command::new(*BIN)
        .args(["--listen", &url, "--idle-exit", "300ms"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut announced = String::new();
    let mut stdout = first.stdout.take().unwrap();
    while !announced.ends_with('\n') {
        let mut byte = [0u8; 1];
        within("the announced URL", stdout.read_exact(&mut byte)).await.unwrap();
        announced.push(byte[0] as char);
    }
    assert_eq!(announced, format!("{url}\n"));
    let taken = format!("another exec-server already listens on {}", path.display());
    refused_at_start(*BIN, &["--listen", &url], &taken);
    // No connection and no session: it exits by itself, and its socket goes.
    let status = within("the idle daemon to exit", first.wait()).await.unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(!path.exists());
}

#[tokio::test]
async fn a_retried_write_id_is_applied_once() {
    let mut h = Harness::ready().await;
    h.start_with("cat", &["cat"], json!({"pipeStdin": true})).await;
    for (id, bytes) in [("a", "one "), ("a", "one "), ("b", "two"), ("a", "one ")] {
        let result = h
            .result(
                "process/write",
                json!({"processId": "cat", "chunk": b64(bytes.as_bytes()), "writeId": id}),
            )
            .await;
        assert_eq!(result, json!({"accepted": true, "status": "accepted"}));
    }
    let error =
        h.error("process/write", json!({"processId": "cat", "chunk": "", "writeId": ""})).await;
    assert_eq!(error, json!({"code": -32602, "message": "writeId for process cat is empty"}));
    h.result(
        "process/write",
        json!({"processId": "cat", "chunk": "", "closeStdin": true, "writeId": "c"}),
    )
    .await;
    let (output, exit) = h.output_and_exit("cat").await;
    assert_eq!(
        (String::from_utf8(output).unwrap(), exit["exitCode"].clone()),
        ("one two".to_owned(), json!(0))
    );
}

#[tokio::test]
async fn a_stream_client_and_bridge_start_and_answer_by_hand() {
    // The bridge is a plain pipe: one line in, one line out, then EOF detaches.
    let path = socket_path("hand");
    let mut bridge = bridge(&path, &[]);
    let _daemon_guard = {
        let reply =
            bridge.result("initialize", json!({"clientName": "hand", "resumable": true})).await;
        assert!(reply["sessionId"].is_string());
        Daemon(peer_pid(&path))
    };
    bridge.close_stdin();
    assert_eq!(bridge.next().await, None);
    assert_eq!(bridge.exit_code().await, Some(0));
}

#[tokio::test]
async fn a_bridge_refuses_a_directory_another_user_controls_and_writes_no_log_there() {
    if !root_or_skip("cannot plant files as another user") {
        return;
    }
    let dir = scratch("daemon-planted").join("planted");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    // SAFETY: chown of a directory this test created.
    let c_dir = std::ffi::CString::new(dir.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::chown(c_dir.as_ptr(), 65534, 65534) }, 0);
    let victim = scratch("daemon-planted-victim").join("created-by-nobody");
    std::os::unix::fs::symlink(&victim, dir.join("d.sock.log")).unwrap();
    let url = format!("unix:{}/d.sock", dir.display());
    let owner = format!("the socket's directory {} must belong to uid 0", dir.display());
    refused_at_start(*BIN, &["--connect", &url, "--spawn-daemon"], &owner);
    assert!(!victim.exists(), "the planted log link was followed");
}

#[tokio::test]
async fn lines_piped_through_a_bridge_are_all_answered_before_it_detaches() {
    let path = socket_path("piped");
    let dir = scratch("daemon-piped-files");
    let file = dir.join("written");
    let lines = [
        json!({"id": 1, "method": "initialize", "params": {"clientName": "pipe", "resumable": true}}),
        json!({"method": "initialized"}),
        json!({"id": 2, "method": "fs/writeFile", "params": {"path": file, "dataBase64": b64(b"piped")}}),
        json!({"id": 3, "method": "process/start", "params": start_params("s", &["sleep", "77"], json!({}))}),
        json!({"id": 4, "method": "process/list", "params": {}}),
    ];
    let mut bridge = bridge(&path, &[]);
    for line in &lines {
        bridge.send_line(&line.to_string()).await;
    }
    bridge.close_stdin();
    let mut ids = Vec::new();
    while let Some(message) = bridge.next().await {
        assert!(message.get("error").is_none(), "{message}");
        ids.push(message["id"].as_i64().unwrap());
    }
    let _daemon_guard = Daemon(peer_pid(&path));
    ids.sort();
    assert_eq!(ids, [1, 2, 3, 4]);
    assert_eq!(std::fs::read(&file).unwrap(), b"piped");
}

#[tokio::test]
async fn a_session_ending_kills_descendants_that_left_its_sessions() {
    let server = WsServer::start(&["--listen", "ws://127.0.0.1:0", "--session-ttl", "200ms"]).await;
    let mut peer = WsPeer::connect(&server.url).await;
    open_session(&mut peer).await;
    let escaped =
        start_printing_pid(&mut peer, "setsid sleep 1000 & echo $!; wait", "the escaped pid").await;
    cut(&peer);
    wait_dead(escaped).await;
}

/// `session/end` (with the default ttl, longer than any wait here): the
/// tree goes at once, setsid'd descendants included, the connection closes
/// after the reply, and the id is forgotten.
#[tokio::test]
async fn a_session_ended_by_its_client_goes_at_once_and_cannot_be_resumed() {
    let server = WsServer::start(&["--listen", "ws://127.0.0.1:0"]).await;
    let mut peer = WsPeer::connect(&server.url).await;
    let session = open_session(&mut peer).await;
    let script = "sleep 1000 & echo $!; setsid sleep 1000 & echo $!; wait";
    let start = json!({"id": 2, "method": "process/start", "params": start_params("tree", &["sh", "-c", script], json!({}))});
    peer.send_text(&start.to_string()).await;
    let mut printed = String::new();
    while printed.lines().count() < 2 {
        let output =
            next_matching(&mut peer, "the two pids", |m| m["method"] == "process/output").await;
        printed.push_str(&String::from_utf8(unb64(&output["params"]["chunk"])).unwrap());
    }
    let pids: Vec<u32> = printed.lines().map(|line| line.parse().unwrap()).collect();
    peer.send_text(r#"{"id":3,"method":"process/list","params":{}}"#).await;
    let list = next_matching(&mut peer, "the list", |m| m["id"] == 3).await;
    let child = list["result"]["processes"][0]["pid"].as_u64().unwrap() as u32;
    peer.send_text(r#"{"id":4,"method":"session/end","params":{}}"#).await;
    assert_eq!(
        next_matching(&mut peer, "the end", |m| m["id"] == 4).await,
        json!({"id": 4, "result": {}})
    );
    for pid in [child, pids[0], pids[1]] {
        wait_dead(pid).await;
    }
    // The connection closes: only the exit and close of the process may come before.
    while let Some(message) = peer.next().await {
        assert!(
            ["process/exited", "process/closed"].contains(&message["method"].as_str().unwrap()),
            "{message}"
        );
    }
    let mut late = WsPeer::connect(&server.url).await;
    assert_eq!(
        initialize(&mut late, Some(&session)).await["error"]["message"],
        json!(format!("unknown session id {session}"))
    );
}

/// A hundred families, each a live parent and a child that left with
/// setsid: `session/end` leaves none of them alive, or stopped.
#[tokio::test]
async fn session_end_takes_every_family_of_a_large_session() {
    let server = WsServer::start(&["--listen", "ws://127.0.0.1:0"]).await;
    let mut peer = WsPeer::connect(&server.url).await;
    open_session(&mut peer).await;
    let script = "setsid sleep 1900 & echo $!; exec sleep 1901";
    for n in 0..100 {
        let params = start_params(&format!("f{n}"), &["sh", "-c", script], json!({}));
        let start = json!({"id": 1000 + n, "method": "process/start", "params": params});
        peer.send_text(&start.to_string()).await;
    }
    let mut pids = Vec::new();
    while pids.len() < 100 {
        let output =
            next_matching(&mut peer, "the escaped pids", |m| m["method"] == "process/output").await;
        let text = String::from_utf8(unb64(&output["params"]["chunk"])).unwrap();
        pids.extend(text.lines().map(|line| line.parse::<u32>().unwrap()));
    }
    peer.send_text(r#"{"id":3,"method":"process/list","params":{}}"#).await;
    let list = next_matching(&mut peer, "the list", |m| m["id"] == 3).await;
    let leaders = list["result"]["processes"].as_array().unwrap();
    pids.extend(leaders.iter().map(|p| p["pid"].as_u64().unwrap() as u32));
    assert_eq!(pids.len(), 200);
    peer.send_text(r#"{"id":4,"method":"session/end","params":{}}"#).await;
    next_matching(&mut peer, "the end", |m| m["id"] == 4).await;
    for pid in pids {
        wait_dead(pid).await;
    }
}

/// A session whose process exited (its pid reaped) must not reach, through
/// that number, the process of another session that was given it.
#[tokio::test]
async fn a_reused_pid_of_another_session_is_not_swept() {
    if !root_or_skip("steering pids through /proc/sys/kernel/ns_last_pid") {
        return;
    }
    let server = WsServer::start(&["--listen", "ws://127.0.0.1:0"]).await;
    let mut a = WsPeer::connect(&server.url).await;
    open_session(&mut a).await;
    let mut b = WsPeer::connect(&server.url).await;
    open_session(&mut b).await;
    let a_sleep = json!({"id": 2, "method": "process/start", "params": start_params("keep", &["sleep", "1000"], json!({}))});
    a.send_text(&a_sleep.to_string()).await;
    next_matching(&mut a, "a's sleep", |m| m["id"] == 2).await;
    // Other processes of the machine may take the number first: try again until B gets it.
    let mut attempt = 0;
    let (reused, victim, victim_id) = loop {
        attempt += 1;
        assert!(attempt <= 50, "B never got the pid A's process had");
        let id = format!("gone{attempt}");
        let start = json!({"id": 10, "method": "process/start", "params": start_params(&id, &["true"], json!({}))});
        a.send_text(&start.to_string()).await;
        next_matching(&mut a, "a's start", |m| m["id"] == 10).await;
        let exited = next_matching(&mut a, "a's exit", |m| {
            m["method"] == "process/closed" && m["params"]["processId"] == id.as_str()
        })
        .await;
        assert_eq!(exited["params"]["processId"], json!(id));
        a.send_text(r#"{"id":11,"method":"process/list","params":{}}"#).await;
        let list = next_matching(&mut a, "a's list", |m| m["id"] == 11).await;
        let gone = list["result"]["processes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["processId"] == id.as_str())
            .unwrap()["pid"]
            .as_u64()
            .unwrap() as u32;
        // Start times have a granularity of one clock tick: a number handed
        // out again within the tick of the reap (only a root steering the
        // allocator can) counts as the old session's. Wait for the clock.
        wait_for_ticks(2);
        std::fs::write("/proc/sys/kernel/ns_last_pid", (gone - 1).to_string()).unwrap();
        let victim = format!("victim{attempt}");
        let answer = ["sh", "-c", "read x; echo alive"];
        let params = start_params(&victim, &answer, json!({"pipeStdin": true}));
        let start = json!({"id": 20, "method": "process/start", "params": params});
        b.send_text(&start.to_string()).await;
        next_matching(&mut b, "b's start", |m| m["id"] == 20).await;
        b.send_text(r#"{"id":21,"method":"process/list","params":{}}"#).await;
        let list = next_matching(&mut b, "b's list", |m| m["id"] == 21).await;
        let got = list["result"]["processes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["processId"] == victim.as_str())
            .unwrap()["pid"]
            .as_u64()
            .unwrap() as u32;
        if got == gone {
            break (id, got, victim);
        }
    };
    // A terminates its exited process (a sweep of its old session), then ends itself.
    let terminate =
        json!({"id": 30, "method": "process/terminate", "params": {"processId": reused}});
    a.send_text(&terminate.to_string()).await;
    assert_eq!(
        next_matching(&mut a, "the terminate", |m| m["id"] == 30).await["result"],
        json!({"running": false})
    );
    a.send_text(r#"{"id":31,"method":"session/end","params":{}}"#).await;
    next_matching(&mut a, "a's end", |m| m["id"] == 31).await;
    while a.next().await.is_some() {}
    // B's process is alive, and says so.
    let write = json!({"id": 40, "method": "process/write", "params": {"processId": victim_id, "chunk": b64(b"x\n")}});
    b.send_text(&write.to_string()).await;
    let reply = next_matching(&mut b, "b's write", |m| m["id"] == 40).await;
    assert_eq!(
        reply["result"]["accepted"],
        json!(true),
        "B's process {victim} was killed: {reply}"
    );
    let output = next_matching(&mut b, "b's process answering", |m| {
        m["method"] == "process/output" && m["params"]["processId"] == victim_id.as_str()
    })
    .await;
    assert_eq!(unb64(&output["params"]["chunk"]), b"alive\n");
}

/// Returns once the clock `/proc` start times use has moved on by `ticks`.
fn wait_for_ticks(ticks: u64) {
    let now = || {
        let mut time = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: clock_gettime writes only to `time`.
        unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut time) };
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
        (time.tv_sec as u64 * 1_000_000_000 + time.tv_nsec as u64) / (1_000_000_000 / hz)
    };
    let start = now();
    // A clock moving on has no event to wait for: it is polled.
    while now() < start + ticks {
        std::thread::yield_now();
    }
}

#[tokio::test]
async fn a_resume_with_takeover_closes_a_dead_connection_still_attached() {
    let server = WsServer::start(&["--listen", "ws://127.0.0.1:0"]).await;
    let mut stale = WsPeer::connect(&server.url).await;
    let session = open_session(&mut stale).await;
    // `stale` stays open (a link that died without the server noticing).
    let mut fresh = WsPeer::connect(&server.url).await;
    let takeover = json!({"id": 1, "method": "initialize", "params": {"clientName": "again", "resumeSessionId": session, "takeover": true}});
    fresh.send_text(&takeover.to_string()).await;
    assert_eq!(fresh.next().await.unwrap()["error"]["code"], -32010);
    // The stale connection is closed by the server...
    assert_eq!(stale.next().await, None);
    // ...and a retry resumes.
    let (_retry, reply) = resume_ws(&server.url, &session).await;
    assert_eq!(reply["result"]["sessionId"], json!(session));
}

#[tokio::test]
async fn detached_sessions_leave_room_for_connections_and_second_daemons_find_the_live_socket() {
    let path = socket_path("room");
    let url = format!("unix:{}", path.display());
    let mut first = bridge(&path, &["--max-connections", "1"]);
    let session = first
        .result("initialize", json!({"clientName": "room", "resumable": true}))
        .await["sessionId"]
        .clone();
    let _daemon = Daemon(peer_pid(&path));
    first.send_line(r#"{"method":"initialized"}"#).await;
    first.call("process/start", start_params("s", &["sleep", "100"], json!({}))).await;
    first.child.start_kill().unwrap();
    first.child.wait().await.unwrap();
    // With one connection allowed, the detached session does not hold it.
    let (_next, reply) = resume_bridge(&path, session.as_str().unwrap()).await;
    assert_eq!(reply["result"]["sessionId"], session);
    // A lock file gone (a cleaner) does not let a second daemon steal the socket.
    std::fs::remove_file(format!("{}.lock", path.display())).unwrap();
    let taken = format!("another exec-server already listens on {}", path.display());
    refused_at_start(*BIN, &["--listen", &url], &taken);
    assert!(path.exists());
}

#[tokio::test]
async fn an_exit_while_detached_stays_readable_past_the_id_reservation() {
    use exec_server::server::{self, Config, ListenOptions};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", listener.local_addr().unwrap());
    // Ids of closed processes are forgotten after 300 ms, when nobody holds them.
    let reservation = std::time::Duration::from_millis(300);
    let config = Config { id_reservation: reservation, ..Config::default() };
    let options = ListenOptions { config, ..ListenOptions::default() };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let listening = tokio::spawn(server::listen(listener, options, async {
        let _ = stopped.await;
    }));
    let mut peer = WsPeer::connect(&url).await;
    let session = open_session(&mut peer).await;
    let start = json!({"id": 2, "method": "process/start", "params": start_params("p", &["sh", "-c", "read x; echo late; exit 7"], json!({"pipeStdin": true}))});
    peer.send_text(&start.to_string()).await;
    next_matching(&mut peer, "the start", |m| m["id"] == 2).await;
    peer.send_text(r#"{"id":3,"method":"process/list","params":{}}"#).await;
    let pid = next_matching(&mut peer, "the list", |m| m["id"] == 3).await["result"]["processes"][0]
        ["pid"]
        .as_u64()
        .unwrap() as u32;
    // Detached, the process gets its input (from a write sent just before the cut) and exits.
    let write = json!({"id": 4, "method": "process/write", "params": {"processId": "p", "chunk": b64(b"go\n"), "closeStdin": true}});
    peer.send_text(&write.to_string()).await;
    next_matching(&mut peer, "the write", |m| m["id"] == 4).await;
    cut(&peer);
    wait_dead(pid).await;
    // Not a synchronisation: the reservation must have passed while detached.
    tokio::time::sleep(reservation * 2).await;
    let (mut back, _) = resume_ws(&url, &session).await;
    back.send_text(r#"{"method":"initialized"}"#).await;
    let read = json!({"id": 5, "method": "process/read", "params": {"processId": "p", "afterSeq": 0, "waitMs": 10000}});
    let result = loop {
        back.send_text(&read.to_string()).await;
        let reply = next_matching(&mut back, "the read", |m| m["id"] == 5).await;
        assert!(reply.get("error").is_none(), "the exited process was forgotten: {reply}");
        if reply["result"]["exited"] == true {
            break reply["result"].clone();
        }
    };
    assert_eq!(
        (unb64(&result["chunks"][0]["chunk"]), result["exitCode"].clone()),
        (b"late\n".to_vec(), json!(7))
    );
    drop(back);
    let _ = stop.send(());
    crate::support::within("the listener to stop", listening).await.unwrap().unwrap();
}

#[tokio::test]
async fn tunnels_end_with_their_connection_and_a_forward_keeps_listening_through_a_resume() {
    use tokio::io::AsyncWriteExt;
    // An echo server that says when a connection's EOF came.
    let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let echo_port = echo.local_addr().unwrap().port();
    let (eofs, mut eof) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = echo.accept().await {
            let eofs = eofs.clone();
            tokio::spawn(async move {
                let (mut reader, mut writer) = stream.split();
                let _ = tokio::io::copy(&mut reader, &mut writer).await;
                let _ = eofs.send(());
            });
        }
    });
    let server = WsServer::start(&["--listen", "ws://127.0.0.1:0"]).await;
    let relay = Relay::start(&server.url).await;
    let client = Client::connect_ws(&relay.url, ClientOptions::default()).await.unwrap();
    let forward = client.forward("127.0.0.1:0", "127.0.0.1", echo_port).await.unwrap();
    let local = forward.local_addr();
    let echoed = |word: &'static str| async move {
        let mut local = TcpStream::connect(local).await.unwrap();
        local.write_all(word.as_bytes()).await.unwrap();
        let mut back = vec![0u8; word.len()];
        local.read_exact(&mut back).await.unwrap();
        assert_eq!(back, word.as_bytes());
        local
    };
    let mut first = within("an echo through the forward", echoed("one")).await;
    // The connection drops: its tunnel is closed on the server's side, and the local side ends.
    relay.cut();
    within("the tunnel's remote side to see EOF", eof.recv()).await.unwrap();
    let mut rest = Vec::new();
    let _ = within("the local side to end", first.read_to_end(&mut rest)).await;
    assert!(rest.is_empty());
    // The session resumes; the forward still listens and tunnels on the new connection.
    let second = within("an echo after the resume", echoed("two")).await;
    drop(second);
    within("the second tunnel's EOF", eof.recv()).await.unwrap();
}
