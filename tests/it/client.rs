//! The client library against the in-process server, and against a scripted fake server.

use std::path::PathBuf;
use std::time::Duration;

use exec_server::protocol::*;
use exec_server::server::Config;
use exec_server::*;
use serde_json::{json, Value};
use tokio::io::{
    AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines, ReadHalf, WriteHalf,
};

use crate::support::{b64, scratch, within};

fn params(id: &str, argv: &[&str]) -> StartParams {
    StartParams::new(id, argv.iter().copied(), "/tmp")
}

#[tokio::test]
async fn handshake_exposes_capabilities() {
    let client = Client::in_process(Config::default()).await.unwrap();
    let capabilities = client.capabilities();
    assert_eq!(capabilities.methods.len(), 36);
    assert_eq!(capabilities.methods.last().map(String::as_str), Some("http/request"));
    assert!(capabilities.methods.contains(&"fs/rename".to_owned()));
    assert!(capabilities.methods.contains(&"fs/watch".to_owned()));
    assert_eq!(
        capabilities.notifications,
        [
            "process/output",
            "process/exited",
            "process/closed",
            "fs/changed",
            "tunnel/data",
            "tunnel/closed",
            "ports/changed",
            "http/request/bodyDelta",
            "fs/missingChanged",
            "network/connection"
        ]
    );
    let info = client.server_info().server_info.clone().unwrap();
    assert_eq!(info.name, "exec-server");
}

#[tokio::test]
async fn process_methods_through_handles() {
    let client = Client::in_process(Config::default()).await.unwrap();
    let mut echo = client
        .start(params("echo", &["sh", "-c", "echo one; echo two >&2; exit 5"]))
        .await
        .unwrap();
    let mut seen = Vec::new();
    while let Some(chunk) = within("echo output", echo.next_output()).await.unwrap() {
        seen.push((chunk.seq, chunk.stream, chunk.bytes));
    }
    seen.sort();
    assert_eq!(seen.len(), 2);
    assert_eq!(echo.wait().await.unwrap(), ExitStatus { code: 5, signal: None, limit: None });
    let read = echo.read(0).await.unwrap();
    assert_eq!(read.chunks.len(), 2);
    assert!(read.exited);

    let mut cat = client.start(params("cat", &["cat"]).with_stdin()).await.unwrap();
    cat.write(b"abc").await.unwrap();
    cat.close_stdin().await.unwrap();
    assert_eq!(
        within("cat", cat.output_to_end()).await.unwrap(),
        (b"abc".to_vec(), ExitStatus { code: 0, signal: None, limit: None })
    );

    let mut tty = client
        .start(params("tty", &["sh", "-c", "read x; stty size"]).with_tty(10, 20))
        .await
        .unwrap();
    tty.resize(30, 90).await.unwrap();
    tty.write(b"\n").await.unwrap();
    let (output, _) = within("tty", tty.output_to_end()).await.unwrap();
    assert!(String::from_utf8_lossy(&output).ends_with("30 90\r\n"), "{output:?}");

    let mut sleeper = client.start(params("sleep", &["sleep", "30"])).await.unwrap();
    assert!(sleeper.signal("SIGUSR1").await.unwrap());
    assert_eq!(
        within("sleep", sleeper.wait()).await.unwrap(),
        ExitStatus { code: 138, signal: Some("SIGUSR1".into()), limit: None }
    );
    assert!(!sleeper.terminate(None).await.unwrap());

    let mut graceful = client.start(params("graceful", &["sleep", "30"])).await.unwrap();
    assert!(graceful.terminate(Some(Duration::from_secs(5))).await.unwrap());
    assert_eq!(
        within("graceful", graceful.wait()).await.unwrap().signal.as_deref(),
        Some("SIGTERM")
    );

    let list = client.list(Empty {}).await.unwrap();
    let ids: Vec<&str> = list.processes.iter().map(|p| p.process_id.as_str()).collect();
    assert_eq!(ids, ["cat", "echo", "graceful", "sleep", "tty"]);
}

#[tokio::test]
async fn raw_calls_and_typed_errors() {
    let client = Client::in_process(Config::default()).await.unwrap();
    let error = client.start(params("bad", &[])).await.unwrap_err();
    assert_eq!(error.rpc().unwrap(), &ErrorObject::invalid_params("argv must not be empty"));
    let started = client.start(params("x", &["sleep", "30"])).await.unwrap();
    let duplicate = client.start(params("x", &["true"])).await.unwrap_err();
    assert_eq!(duplicate.rpc().unwrap().message, "process x already exists");
    let read = client.read(ReadParams::new("x").wait_ms(10)).await.unwrap();
    assert_eq!((read.chunks.len(), read.next_seq, read.exited), (0, 1, false));
    let write = WriteParams::new("x", b"x".to_vec());
    assert_eq!(
        client.write(write).await.unwrap_err().rpc().unwrap().message,
        "stdin is closed for process x"
    );
    let resize = ResizeParams::new("x", 1, 1);
    assert_eq!(
        client.resize(resize).await.unwrap_err().rpc().unwrap().message,
        "process x is not a tty"
    );
    let signal = SignalParams::new("x", "SIGKILL");
    assert!(client.signal(signal).await.unwrap().running);
    drop(started);
    let terminate = TerminateParams::new("ghost");
    assert!(!client.terminate(terminate).await.unwrap().running);
}

#[tokio::test]
async fn fs_methods_and_not_found_errors() {
    let dir = scratch("client-fs");
    let client = Client::in_process(Config::default()).await.unwrap();
    let file = dir.join("d/f");
    let mkdir = CreateDirectoryParams::new(dir.join("d"));
    client.create_directory(mkdir).await.unwrap();
    let write = WriteFileParams::new(file.clone(), b"hello");
    client.write_file(write).await.unwrap();
    let read = client.read_file(ReadFileParams::new(file.clone()).range(1, 3)).await.unwrap();
    assert_eq!(read.data_base64.0, b"ell");
    assert_eq!(client.get_metadata(PathParams::new(file.clone())).await.unwrap().size, 5);
    let listing = client.read_directory(PathParams::new(dir.join("d"))).await.unwrap();
    let listed: Vec<_> = listing
        .entries
        .iter()
        .map(|e| (e.file_name.as_str(), e.is_directory, e.is_file, e.file_name_base64.is_none()))
        .collect();
    assert_eq!(listed, [("f", false, true, true)]);
    let copy = CopyParams::new(file.clone(), dir.join("g"), false);
    client.copy(copy).await.unwrap();
    let rename = RenameParams::new(dir.join("g"), dir.join("h"));
    client.rename(rename).await.unwrap();
    client
        .remove({
            let mut remove = RemoveParams::new(dir.join("h"));
            remove.force = Some(false);
            remove
        })
        .await
        .unwrap();
    let missing = client.read_file(ReadFileParams::new(dir.join("h"))).await.unwrap_err();
    assert!(missing.is_not_found(), "{missing}");
    assert_eq!(
        missing.rpc().unwrap().data,
        Some(json!({"kind": "notFound", "path": dir.join("h")}))
    );
}

#[tokio::test]
async fn a_path_json_cannot_carry_travels_as_base64() {
    use std::os::unix::ffi::OsStrExt;
    let client = Client::in_process(Config::default()).await.unwrap();
    let path = PathBuf::from(std::ffi::OsStr::from_bytes(b"/tmp/not-utf8-\xff"));
    let error = client.get_metadata(PathParams::new(path)).await.unwrap_err();
    assert_eq!(
        error.rpc().unwrap().data,
        Some(json!({"kind": "notFound", "path": "/tmp/not-utf8-\u{fffd}"}))
    );
    assert!(client.list(Empty {}).await.is_ok());
}

#[tokio::test]
async fn the_event_stream_sees_every_notification() {
    let client = Client::in_process(Config::default()).await.unwrap();
    let mut events = client.events();
    let _process = client.start(params("e", &["printf", "x"])).await.unwrap();
    let mut seen = Vec::new();
    while !matches!(seen.last(), Some(Event::Closed { .. })) {
        seen.push(within("events", events.next()).await.unwrap());
    }
    let output = OutputChunk { seq: 1, stream: Stream::Stdout, bytes: b"x".to_vec() };
    assert_eq!(
        seen,
        [
            Event::Output { process_id: "e".into(), chunk: output },
            Event::Exited {
                process_id: "e".into(),
                seq: 1,
                status: ExitStatus { code: 0, signal: None, limit: None }
            },
            Event::Closed { process_id: "e".into(), seq: 1 },
        ]
    );
}

#[tokio::test]
async fn kill_on_drop_is_opt_in() {
    let client = Client::in_process(Config::default()).await.unwrap();
    let kept = client.start(params("kept", &["sleep", "30"])).await.unwrap();
    let mut killed = client.start(params("killed", &["sleep", "30"])).await.unwrap();
    killed.kill_on_drop(true);
    let mut events = client.events();
    drop(kept);
    drop(killed);
    loop {
        let event = within("the killed process to exit", events.next()).await.unwrap();
        if let Event::Exited { process_id, .. } = event {
            assert_eq!(process_id, "killed");
            break;
        }
    }
    let list = client.list(Empty {}).await.unwrap();
    let kept = list.processes.iter().find(|p| p.process_id == "kept").unwrap();
    assert!(kept.running);
}

#[tokio::test]
async fn a_handle_that_falls_behind_catches_up_without_loss_or_repeats() {
    let client = Client::in_process(Config::default()).await.unwrap();
    // Many small writes, read only after the process is done: more chunks than the handle queues.
    let script = "i=1; while [ $i -le 3000 ]; do echo $i; i=$((i+1)); done";
    let mut process = client.start(params("many", &["sh", "-c", script])).await.unwrap();
    within("exit", process.wait()).await.unwrap();
    let mut text = Vec::new();
    let mut last = 0;
    while let Some(chunk) = within("output", process.next_output()).await.unwrap() {
        assert_eq!(chunk.seq, last + 1, "seqs come in order without gaps");
        last = chunk.seq;
        text.extend(chunk.bytes);
    }
    let want: String = (1..=3000).map(|i| format!("{i}\n")).collect();
    assert_eq!(String::from_utf8(text).unwrap(), want);
}

/// A scripted server on the other end of a duplex pipe.
struct Fake {
    lines: Lines<BufReader<ReadHalf<DuplexStream>>>,
    writer: WriteHalf<DuplexStream>,
}

impl Fake {
    /// Starts connecting a client and answers its `initialize` with `result`.
    async fn handshake(result: Value) -> (tokio::task::JoinHandle<Result<Client, Error>>, Fake) {
        let (client_io, server_io) = tokio::io::duplex(1 << 16);
        let (client_read, client_write) = tokio::io::split(client_io);
        let (server_read, server_write) = tokio::io::split(server_io);
        let mut fake = Fake { lines: BufReader::new(server_read).lines(), writer: server_write };
        let connecting = tokio::spawn(Client::connect(client_read, client_write));
        let init = fake.request().await;
        assert_eq!(init["method"], "initialize");
        fake.send(json!({"id": init["id"], "result": result})).await;
        (connecting, fake)
    }

    /// A connected client, after a Part A handshake.
    async fn connect() -> (Client, Fake) {
        let (connecting, mut fake) =
            Fake::handshake(json!({"protocolVersion": "exec-server.v0"})).await;
        assert_eq!(fake.request().await, json!({"method": "initialized", "params": {}}));
        (connecting.await.unwrap().unwrap(), fake)
    }

    /// Lets `client` start process `id`, answering the request.
    async fn start(&mut self, client: &Client, id: &str) -> Process {
        let start = tokio::spawn({
            let client = client.clone();
            let params = params(id, &["anything"]);
            async move { client.start(params).await }
        });
        let request = self.request().await;
        assert_eq!(request["method"], "process/start");
        self.send(json!({"id": request["id"], "result": {"processId": id}})).await;
        start.await.unwrap().unwrap()
    }

    async fn request(&mut self) -> Value {
        let line = within("a line from the client", self.lines.next_line()).await.unwrap().unwrap();
        serde_json::from_str(&line).unwrap()
    }

    async fn send(&mut self, message: Value) {
        self.send_raw(&message.to_string()).await;
    }

    async fn send_raw(&mut self, line: &str) {
        self.writer.write_all(format!("{line}\n").as_bytes()).await.unwrap();
    }
}

#[tokio::test]
async fn fake_server_error_replies_reach_the_caller() {
    let (client, mut fake) = Fake::connect().await;
    assert_eq!(client.capabilities(), Capabilities::default(), "a Part A server has none");
    let call = tokio::spawn({
        let client = client.clone();
        async move { client.list(Empty {}).await }
    });
    let request = fake.request().await;
    fake.send(json!({"id": request["id"], "error": {"code": -32600, "message": "nope", "data": {"kind": "other"}}})).await;
    let error = call.await.unwrap().unwrap_err();
    assert_eq!(
        error.rpc().unwrap(),
        &ErrorObject::invalid_request("nope").with_data(json!({"kind": "other"}))
    );
    assert_eq!(error.io_kind(), Some("other"));
}

#[tokio::test]
async fn fake_server_out_of_order_responses_unknown_notifications_and_malformed_lines() {
    let (client, mut fake) = Fake::connect().await;
    let first = tokio::spawn({
        let client = client.clone();
        async move { client.get_metadata(PathParams::new("/a")).await }
    });
    let a = fake.request().await;
    let second = tokio::spawn({
        let client = client.clone();
        async move { client.get_metadata(PathParams::new("/b")).await }
    });
    let b = fake.request().await;
    let meta = |size: u64| json!({"isDirectory": false, "isFile": true, "createdAtMs": 0, "modifiedAtMs": 0, "size": size});
    fake.send_raw("this is not json").await;
    fake.send(json!({"method": "something/new", "params": {"x": 1}})).await;
    fake.send(json!({"id": 12345, "result": {}})).await;
    fake.send(json!({"id": b["id"], "result": meta(2)})).await;
    fake.send(json!({"id": a["id"], "result": meta(1)})).await;
    assert_eq!(first.await.unwrap().unwrap().size, 1);
    assert_eq!(second.await.unwrap().unwrap().size, 2);
    // A result of the wrong shape is a protocol error, not a panic.
    let third = tokio::spawn({
        let client = client.clone();
        async move { client.list(Empty {}).await }
    });
    let c = fake.request().await;
    fake.send(json!({"id": c["id"], "result": {"processes": "many"}})).await;
    assert!(matches!(third.await.unwrap(), Err(Error::Protocol(_))));
}

#[tokio::test]
async fn fake_server_closing_mid_call_fails_everything_at_once() {
    let (client, mut fake) = Fake::connect().await;
    let mut process = fake.start(&client, "p").await;
    let pending = tokio::spawn({
        let client = client.clone();
        async move { client.list(Empty {}).await }
    });
    fake.request().await;
    drop(fake);
    assert!(matches!(
        within("the pending call to fail", pending).await.unwrap(),
        Err(Error::Closed)
    ));
    assert!(matches!(within("wait to fail", process.wait()).await, Err(Error::Closed)));
    assert!(matches!(process.next_output().await, Err(Error::Closed)));
    within("closed", client.closed()).await;
    assert!(matches!(client.list(Empty {}).await, Err(Error::Closed)));
}

#[tokio::test]
async fn fake_server_gap_is_filled_with_a_read() {
    let (client, mut fake) = Fake::connect().await;
    let mut process = fake.start(&client, "g").await;
    let output = |seq: u64, text: &str| json!({"method": "process/output", "params": {"processId": "g", "seq": seq, "stream": "stdout", "chunk": b64(text.as_bytes())}});
    fake.send(output(1, "a")).await;
    fake.send(output(3, "c")).await;
    fake.send(output(3, "c")).await;
    let first = within("chunk 1", process.next_output()).await.unwrap().unwrap();
    assert_eq!((first.seq, first.bytes), (1, b"a".to_vec()));
    let reading = tokio::spawn(async move {
        let mut chunks = Vec::new();
        while let Some(chunk) = process.next_output().await.unwrap() {
            chunks.push((chunk.seq, String::from_utf8(chunk.bytes).unwrap()));
        }
        chunks
    });
    let read = fake.request().await;
    assert_eq!(read["method"], "process/read");
    assert_eq!(read["params"], json!({"processId": "g", "afterSeq": 1}));
    fake.send(json!({"id": read["id"], "result": {"chunks": [
        {"seq": 2, "stream": "stdout", "chunk": b64(b"b")},
        {"seq": 3, "stream": "stdout", "chunk": b64(b"c")},
    ], "nextSeq": 4, "exited": false, "exitCode": null}}))
        .await;
    fake.send(
        json!({"method": "process/exited", "params": {"processId": "g", "seq": 3, "exitCode": 0}}),
    )
    .await;
    fake.send(json!({"method": "process/closed", "params": {"processId": "g", "seq": 3}})).await;
    let chunks = within("the rest of the output", reading).await.unwrap();
    assert_eq!(chunks, vec![(2, "b".to_owned()), (3, "c".to_owned())]);
}

#[tokio::test]
async fn handshake_timeout_and_wrong_version() {
    let (client_io, server_io) = tokio::io::duplex(1 << 16);
    let (read, write) = tokio::io::split(client_io);
    let options = ClientOptions {
        client_name: "t".into(),
        handshake_timeout: Duration::from_millis(50),
        ..ClientOptions::default()
    };
    let error = Client::connect_with(read, write, options).await.err().unwrap();
    assert_eq!(error.to_string(), "timed out after 50ms waiting for the initialize response");
    drop(server_io);

    let (connecting, _fake) = Fake::handshake(json!({"protocolVersion": "exec-server.v9"})).await;
    let error = connecting.await.unwrap().err().unwrap();
    assert_eq!(
        error.to_string(),
        "protocol violation: server speaks exec-server.v9, not exec-server.v0"
    );
}

#[tokio::test]
async fn fake_part_a_server_without_seqs_or_closed() {
    let (client, mut fake) = Fake::connect().await;
    let mut process = fake.start(&client, "a").await;
    for text in ["one", "two"] {
        let params = json!({"processId": "a", "stream": "stdout", "chunk": b64(text.as_bytes())});
        fake.send(json!({"method": "process/output", "params": params})).await;
    }
    fake.send(json!({"method": "process/exited", "params": {"processId": "a", "exitCode": 3}}))
        .await;
    let mut chunks = Vec::new();
    while let Some(chunk) = within("Part A output", process.next_output()).await.unwrap() {
        chunks.push((chunk.seq, String::from_utf8(chunk.bytes).unwrap()));
    }
    assert_eq!(chunks, vec![(1, "one".to_owned()), (2, "two".to_owned())]);
    assert_eq!(process.wait().await.unwrap(), ExitStatus { code: 3, signal: None, limit: None });
}

#[tokio::test]
async fn a_refused_duplicate_start_leaves_the_live_handle_working() {
    let client = Client::in_process(Config::default()).await.unwrap();
    let mut first = client.start(params("x", &["cat"]).with_stdin()).await.unwrap();
    let duplicate = client.start(params("x", &["true"])).await.unwrap_err();
    assert_eq!(duplicate.rpc().unwrap().message, "process x already exists");
    first.write(b"still routed\n").await.unwrap();
    first.close_stdin().await.unwrap();
    let (output, status) = first.output_to_end().await.unwrap();
    assert_eq!((output.as_slice(), status.code), (&b"still routed\n"[..], 0));
}

#[tokio::test]
async fn kill_on_drop_is_delivered_even_when_the_queue_is_full() {
    let (client, mut fake) = Fake::connect().await;
    let mut doomed = fake.start(&client, "doomed").await;
    doomed.kill_on_drop(true);
    // The fake stops reading: calls pile up in the pipe and the client's queue.
    let mut calls = Vec::new();
    for _ in 0..3000 {
        let client = client.clone();
        calls.push(tokio::spawn(async move { client.list(Empty {}).await }));
    }
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    drop(doomed);
    let terminate = within("the terminate of the dropped handle", async {
        loop {
            let request = fake.request().await;
            if request["method"] == "process/terminate" {
                return request;
            }
        }
    })
    .await;
    assert_eq!(terminate["params"], json!({"processId": "doomed"}));
}

#[tokio::test]
async fn a_subscriber_that_falls_behind_is_told_it_lagged() {
    let (client, mut fake) = Fake::connect().await;
    let mut events = client.events();
    for n in 0..300 {
        fake.send(json!({"method": "something/new", "params": {"n": n}})).await;
    }
    // A response after them: once it arrives, every notification was routed.
    let call = tokio::spawn({
        let client = client.clone();
        async move { client.list(Empty {}).await }
    });
    let request = fake.request().await;
    fake.send(json!({"id": request["id"], "result": {"processes": []}})).await;
    call.await.unwrap().unwrap();
    assert_eq!(events.next().await, Some(Event::Lagged { skipped: 44 }));
    match events.next().await {
        Some(Event::Unknown(notification)) => assert_eq!(notification.params, json!({"n": 44})),
        other => panic!("expected the 45th notification, got {other:?}"),
    }
}
