//! Tunnels (PROTOCOL.md, Tunnels): the wire shapes over `server::run`, flow
//! control and bounds through the real binary, and forwards through the
//! client with real HTTP servers and `curl`, over stdio, WebSocket and the
//! Unix-socket daemon.

use std::net::SocketAddr;
use std::path::Path;

use exec_server::server::{Config, TunnelPolicy, TUNNEL_WINDOW};
use exec_server::{Client, ClientOptions, LaunchCommand, Launcher, StartParams};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::binary::{Binary, BIN};
use crate::support::{b64, peak_rss_kib, peer_pid, scratch, start_params, unb64, within, Harness};

/// A loopback listener that echoes each connection until its EOF, then closes it.
async fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut reader, mut writer) = stream.split();
                let _ = tokio::io::copy(&mut reader, &mut writer).await;
                let _ = writer.shutdown().await;
            });
        }
    });
    address
}

/// A loopback port nothing listens on.
async fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap().port()
}

/// The `tunnel/data` chunks of `id` up to its `tunnel/closed`: bytes and the close.
async fn read_tunnel(harness: &mut Harness, id: &str) -> (Vec<u8>, Value) {
    let mut bytes = Vec::new();
    let mut seq = 0;
    loop {
        let message = harness
            .take(&format!("a notification of tunnel {id}"), |m| m["params"]["tunnelId"] == id)
            .await;
        if message["method"] == "tunnel/closed" {
            return (bytes, message["params"].clone());
        }
        seq += 1;
        assert_eq!(message["method"], "tunnel/data");
        assert_eq!(message["params"]["seq"], seq);
        bytes.extend(unb64(&message["params"]["chunk"]));
    }
}

#[tokio::test]
async fn a_tunnel_carries_bytes_both_ways_and_ends_with_one_closed() {
    let echo = echo_server().await;
    let mut harness = Harness::ready().await;
    let open = json!({"tunnelId": "t1", "host": "127.0.0.1", "port": echo.port()});
    assert_eq!(harness.result("tunnel/open", open.clone()).await, json!({}));
    let write = json!({"tunnelId": "t1", "chunk": b64(b"hello "), "closeWrite": false});
    assert_eq!(harness.result("tunnel/write", write).await, json!({}));
    let write = json!({"tunnelId": "t1", "chunk": b64(b"tunnel"), "closeWrite": true});
    assert_eq!(harness.result("tunnel/write", write).await, json!({}));
    let (bytes, closed) = read_tunnel(&mut harness, "t1").await;
    assert_eq!(bytes, b"hello tunnel");
    assert_eq!(closed, json!({"tunnelId": "t1", "reason": "eof"}));
    // Over: the id is free again, and the old one unknown.
    let write = json!({"tunnelId": "t1", "chunk": b64(b"late")});
    let error = harness.error("tunnel/write", write).await;
    assert_eq!(error, json!({"code": -32600, "message": "unknown tunnel t1"}));
    assert_eq!(harness.result("tunnel/open", open).await, json!({}));
    let error = harness
        .error("tunnel/open", json!({"tunnelId": "t1", "host": "localhost", "port": echo.port()}))
        .await;
    assert_eq!(error, json!({"code": -32600, "message": "tunnel t1 already exists"}));
    assert_eq!(harness.result("tunnel/close", json!({"tunnelId": "t1"})).await, json!({}));
    let error = harness.error("tunnel/close", json!({"tunnelId": "t1"})).await;
    assert_eq!(error, json!({"code": -32600, "message": "unknown tunnel t1"}));
}

#[tokio::test]
async fn writes_sent_before_the_connect_wait_for_it_and_are_listed_methods() {
    let echo = echo_server().await;
    let mut harness = Harness::new();
    let init = harness.result("initialize", json!({"clientName": "t"})).await;
    let listed = |key: &str| init["capabilities"][key].as_array().unwrap().clone();
    for method in ["tunnel/open", "tunnel/write", "tunnel/close", "ports/list", "ports/watch"] {
        assert!(listed("methods").contains(&json!(method)), "{method}");
    }
    for notification in ["tunnel/data", "tunnel/closed", "ports/changed"] {
        assert!(listed("notifications").contains(&json!(notification)), "{notification}");
    }
    let error =
        harness.error("tunnel/open", json!({"tunnelId": "x", "host": "::1", "port": 1})).await;
    assert_eq!(error["message"], "client must send initialized before using tunnel methods");
    harness.send_line(r#"{"method":"initialized"}"#).await;
    // Pipelined: open, two writes and a half-close before any reply.
    let open = json!({"tunnelId": "p", "host": "127.0.0.1", "port": echo.port()});
    let ids = [
        harness.send_request("tunnel/open", open).await,
        harness.send_request("tunnel/write", json!({"tunnelId": "p", "chunk": b64(b"a")})).await,
        harness
            .send_request(
                "tunnel/write",
                json!({"tunnelId": "p", "chunk": b64(b"b"), "closeWrite": true}),
            )
            .await,
    ];
    for id in ids {
        assert_eq!(harness.response(id).await, json!({"id": id, "result": {}}));
    }
    let (bytes, closed) = read_tunnel(&mut harness, "p").await;
    assert_eq!((bytes.as_slice(), closed["reason"].clone()), (&b"ab"[..], json!("eof")));
}

#[tokio::test]
async fn refusals_name_the_address_and_the_flag() {
    let mut harness = Harness::ready().await;
    let port = closed_port().await;
    let error = harness
        .error("tunnel/open", json!({"tunnelId": "r", "host": "127.0.0.1", "port": port}))
        .await;
    assert_eq!(
        error,
        json!({"code": -32603,
               "message": format!("cannot open tunnel r to 127.0.0.1:{port}: Connection refused (os error 111)"),
               "data": {"kind": "connectionRefused", "address": format!("127.0.0.1:{port}")}})
    );
    let error = harness
        .error("tunnel/open", json!({"tunnelId": "n", "host": "10.0.0.1", "port": 80}))
        .await;
    assert_eq!(
        error,
        json!({"code": -32600, "message": "tunnel to 10.0.0.1:80 refused: only loopback addresses (127.0.0.0/8, ::1, localhost) may be reached (--tunnels loopback; --tunnels any allows every address)"})
    );
    // 0.0.0.0 reaches this host on Linux: not a loopback address all the same.
    let error =
        harness.error("tunnel/open", json!({"tunnelId": "z", "host": "0.0.0.0", "port": 80})).await;
    assert_eq!(error["code"], -32600);
    let error =
        harness.error("tunnel/open", json!({"tunnelId": "", "host": "::1", "port": 1})).await;
    assert_eq!(error, json!({"code": -32602, "message": "tunnelId must be 1 to 256 bytes, not 0"}));
    let error =
        harness.error("tunnel/open", json!({"tunnelId": "q", "host": "::1", "port": 70000})).await;
    assert_eq!(error["code"], -32602);
    assert!(
        error["message"].as_str().unwrap().starts_with("invalid params for tunnel/open: "),
        "{error}"
    );
    // Writes sent before a refused connect fail with it, each answered.
    let open = json!({"tunnelId": "w", "host": "127.0.0.1", "port": port});
    let ids = [
        harness.send_request("tunnel/open", open).await,
        harness.send_request("tunnel/write", json!({"tunnelId": "w", "chunk": b64(b"x")})).await,
    ];
    assert_eq!(harness.response(ids[0]).await["error"]["code"], -32603);
    assert_eq!(
        harness.response(ids[1]).await["error"],
        json!({"code": -32600, "message": "tunnel w was not written: it did not open"})
    );
    // No tunnel was left behind by any refusal.
    let error = harness.error("tunnel/close", json!({"tunnelId": "r"})).await;
    assert_eq!(error["message"], "unknown tunnel r");

    let config = Config { tunnels: TunnelPolicy::None, ..Config::default() };
    let mut off = Harness::ready_with(config).await;
    let error = off.error("tunnel/open", json!({"tunnelId": "o", "host": "::1", "port": 1})).await;
    assert_eq!(
        error,
        json!({"code": -32600, "message": "tunnel to [::1]:1 refused: tunnels are off on this server (--tunnels none)"})
    );
}

#[tokio::test]
async fn any_policy_reaches_other_addresses_and_looks_names_up() {
    // 127.0.0.2 is loopback; a name other than localhost needs --tunnels any.
    let echo = echo_server().await;
    let config = Config { tunnels: TunnelPolicy::Any, ..Config::default() };
    let mut harness = Harness::ready_with(config).await;
    let open = json!({"tunnelId": "n", "host": "localhost.", "port": echo.port()});
    assert_eq!(harness.result("tunnel/open", open).await, json!({}));
    let error = harness
        .error("tunnel/open", json!({"tunnelId": "m", "host": "no-such-host.invalid", "port": 80}))
        .await;
    assert_eq!(error["data"]["kind"], "notFound", "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .starts_with("cannot open tunnel m to no-such-host.invalid:80: "),
        "{error}"
    );
}

/// A listener whose one connection gets `bytes` written to it as fast as it
/// takes them; returns its address and a count of the bytes written so far.
async fn flooder(bytes: usize) -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let written = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = written.clone();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let block = vec![b'x'; 64 * 1024];
        let mut left = bytes;
        while left > 0 {
            let n = block.len().min(left);
            if stream.write_all(&block[..n]).await.is_err() {
                return;
            }
            left -= n;
            count.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        }
    });
    (address, written)
}

#[tokio::test]
async fn a_tunnel_whose_client_stops_reading_holds_its_window_and_stalls_nothing_else() {
    let (flood, written) = flooder(256 * 1024 * 1024).await;
    let echo = echo_server().await;
    let mut server = Binary::ready(&[]).await;
    let open = json!({"tunnelId": "slow", "host": "127.0.0.1", "port": flood.port()});
    server.result("tunnel/open", open).await;
    // Exactly the window arrives, then nothing until acknowledged.
    let mut slow = 0;
    let mut next_seq = 1;
    while slow < TUNNEL_WINDOW {
        let message = server.next().await.unwrap();
        assert_eq!(message["method"], "tunnel/data", "{message}");
        assert_eq!(message["params"]["seq"], next_seq);
        next_seq += 1;
        slow += unb64(&message["params"]["chunk"]).len();
    }
    assert_eq!(slow, TUNNEL_WINDOW);
    // Another tunnel and a process are served meanwhile, in order.
    let open = json!({"tunnelId": "fast", "host": "127.0.0.1", "port": echo.port()});
    let id_open = 100;
    server
        .send_line(&json!({"id": id_open, "method": "tunnel/open", "params": open}).to_string())
        .await;
    let write = json!({"tunnelId": "fast", "chunk": b64(b"ping"), "closeWrite": true});
    server
        .send_line(&json!({"id": 101, "method": "tunnel/write", "params": write}).to_string())
        .await;
    let start = start_params("p", &["echo", "still flowing"], json!({}));
    server
        .send_line(&json!({"id": 102, "method": "process/start", "params": start}).to_string())
        .await;
    let (mut echoed, mut output, mut fast_closed, mut process_closed) =
        (Vec::new(), Vec::new(), false, false);
    while !(fast_closed && process_closed) {
        let message = server.next().await.unwrap();
        let params = &message["params"];
        match message["method"].as_str() {
            Some("tunnel/data") => {
                assert_eq!(params["tunnelId"], "fast", "the stalled tunnel sent past its window");
                echoed.extend(unb64(&params["chunk"]));
            }
            Some("tunnel/closed") => {
                assert_eq!(params, &json!({"tunnelId": "fast", "reason": "eof"}));
                fast_closed = true;
            }
            Some("process/output") => output.extend(unb64(&params["chunk"])),
            Some("process/closed") => process_closed = true,
            _ => {}
        }
    }
    assert_eq!((echoed.as_slice(), output.as_slice()), (&b"ping"[..], &b"still flowing\n"[..]));
    // The server held its window, not what the remote side had to send.
    let pushed = written.load(std::sync::atomic::Ordering::Relaxed);
    assert!(pushed < 64 * 1024 * 1024, "the remote side pushed {pushed} bytes");
    let peak = peak_rss_kib(server.child.id().unwrap());
    assert!(peak < 48 * 1024, "the server's peak RSS was {peak} KiB");
    // Acknowledged, it flows again, numbered on.
    let ack =
        json!({"method": "tunnel/ack", "params": {"tunnelId": "slow", "bytes": TUNNEL_WINDOW}});
    server.send_line(&ack.to_string()).await;
    let message = server.next().await.unwrap();
    assert_eq!(
        (message["method"].clone(), message["params"]["seq"].clone()),
        (json!("tunnel/data"), json!(next_seq))
    );
}

#[tokio::test]
async fn a_reset_on_the_remote_side_reaches_the_local_side() {
    // The remote side accepts, then resets the connection.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let mut stream = stream;
            let mut byte = [0u8; 1];
            let _ = stream.read(&mut byte).await;
            stream.set_zero_linger().unwrap();
            drop(stream);
        }
    });
    let launcher = Launcher::spawn(LaunchCommand::new(*BIN)).await.unwrap();
    let client = launcher.client();
    // Through a Tunnel: the read fails with a reset.
    let mut tunnel = client.open_tunnel("127.0.0.1", port).await.unwrap();
    tunnel.write_all(b"x").await.unwrap();
    tunnel.flush().await.unwrap();
    let mut buffer = Vec::new();
    let error = within("the reset", tunnel.read_to_end(&mut buffer)).await.unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::ConnectionReset, "{error}");
    // Through a forward: the local socket is reset.
    let forward = client.forward("127.0.0.1:0", "127.0.0.1", port).await.unwrap();
    let mut local = tokio::net::TcpStream::connect(forward.local_addr()).await.unwrap();
    local.write_all(b"x").await.unwrap();
    let error = within("the reset", local.read_to_end(&mut buffer)).await.unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::ConnectionReset, "{error}");
    assert!(buffer.is_empty());
    // Refused and non-loopback, through the client.
    let port = closed_port().await;
    let error = client.open_tunnel("127.0.0.1", port).await.unwrap_err().to_string();
    assert!(
        error.contains(&format!("to 127.0.0.1:{port}: Connection refused (os error 111)")),
        "{error}"
    );
    let error = client.open_tunnel("192.0.2.1", 80).await.unwrap_err().to_string();
    assert!(error.contains("only loopback addresses"), "{error}");
}

/// Starts `python3 -m http.server` serving `dir` through `client`, and waits
/// for its port to appear among the session's listening ports.
async fn web_server(client: &Client, dir: &Path) -> u16 {
    let mut ports = client.watch_ports().await.unwrap();
    let dir = dir.to_str().unwrap();
    let argv = ["python3", "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory", dir];
    let process = client.start(StartParams::new("web", argv, "/")).await.unwrap();
    drop(process);
    within("the web server's port", async {
        loop {
            let changed = ports.next().await.expect("the watch ended");
            if let Some(port) = changed.opened.iter().find(|p| p.process_id == "web") {
                return port.port;
            }
        }
    })
    .await
}

/// 50 MiB of varied bytes in `dir/big.bin`.
fn big_file(dir: &Path) -> Vec<u8> {
    let bytes: Vec<u8> =
        (0..50 * 1024 * 1024u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    std::fs::write(dir.join("big.bin"), &bytes).unwrap();
    bytes
}

/// `curl` of `url` into a file; returns its bytes.
async fn curl(url: &str, into: &Path) -> Vec<u8> {
    let status = within(
        "curl",
        tokio::process::Command::new("curl")
            .args(["-sS", "--fail", "-o"])
            .arg(into)
            .arg(url)
            .status(),
    )
    .await
    .expect("curl runs (apt-get install curl)");
    assert!(status.success(), "curl {url}: {status}");
    std::fs::read(into).unwrap()
}

/// Serves 50 MiB through a forward over `client`: curl gets identical bytes.
async fn fifty_mib_through(client: &Client, name: &str) {
    let dir = scratch(name);
    let expected = big_file(&dir);
    let port = web_server(client, &dir).await;
    let forward = client.forward("127.0.0.1:0", "127.0.0.1", port).await.unwrap();
    let url = format!("http://{}/big.bin", forward.local_addr());
    let got = curl(&url, &dir.join("got.bin")).await;
    assert_eq!(got.len(), expected.len());
    assert!(got == expected, "the bytes differ");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn fifty_mib_through_a_forward_over_stdio() {
    let launcher = Launcher::spawn(LaunchCommand::new(*BIN)).await.unwrap();
    fifty_mib_through(launcher.client(), "forward-stdio").await;
}

#[tokio::test]
async fn fifty_mib_through_a_forward_over_websocket() {
    let launcher = Launcher::spawn_listening(LaunchCommand::new(*BIN), ClientOptions::default())
        .await
        .unwrap();
    fifty_mib_through(launcher.client(), "forward-ws").await;
}

#[tokio::test]
async fn fifty_mib_through_a_forward_over_the_unix_daemon() {
    let dir = scratch("forward-daemon");
    let path = dir.join("sock").join("daemon.sock");
    let url = format!("unix:{}", path.display());
    let command = LaunchCommand::new(*BIN).arg("--connect").arg(url).arg("--spawn-daemon");
    let launcher = Launcher::spawn(command).await.unwrap();
    let daemon = peer_pid(&path);
    fifty_mib_through(launcher.client(), "forward-daemon-files").await;
    drop(launcher);
    // SAFETY: kill(2) of the daemon this test started.
    unsafe { libc::kill(daemon as libc::pid_t, libc::SIGKILL) };
}

/// A loopback HTTP/1.0 server of the test's own (a deep accept queue, unlike
/// `http.server`'s 5): `GET /N` answers `file N` a thousand times.
async fn numbered_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if stream.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head);
                let n = head.split_whitespace().nth(1).unwrap_or("/").trim_start_matches('/');
                let body = format!("file {n}\n").repeat(1000);
                let response = format!("HTTP/1.0 200 OK\r\n\r\n{body}");
                let _ = stream.write_all(response.as_bytes()).await;
            });
        }
    });
    port
}

#[tokio::test]
async fn a_hundred_concurrent_connections_through_one_forward_all_complete() {
    let launcher = Launcher::spawn(LaunchCommand::new(*BIN)).await.unwrap();
    let client = launcher.client();
    let port = numbered_server().await;
    let forward = client.forward("127.0.0.1:0", "127.0.0.1", port).await.unwrap();
    let local = forward.local_addr();
    let mut gets = tokio::task::JoinSet::new();
    for i in 0..100 {
        gets.spawn(async move {
            let mut stream = tokio::net::TcpStream::connect(local).await.unwrap();
            let request = format!("GET /{i} HTTP/1.0\r\nHost: localhost\r\n\r\n");
            stream.write_all(request.as_bytes()).await.unwrap();
            let mut response = Vec::new();
            stream.read_to_end(&mut response).await.unwrap();
            (i, response)
        });
    }
    let mut done = 0;
    while let Some(joined) = within("the hundred GETs", gets.join_next()).await {
        let (i, response) = joined.unwrap();
        let expected = format!("HTTP/1.0 200 OK\r\n\r\n{}", format!("file {i}\n").repeat(1000));
        assert!(response == expected.as_bytes(), "GET {i}: a wrong response");
        done += 1;
    }
    assert_eq!(done, 100);
}

#[tokio::test]
async fn writes_past_the_tunnels_buffer_are_refused_and_every_write_is_answered() {
    // The remote side accepts and never reads: the kernel's buffers fill, then ours.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (held_tx, held_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let _ = held_rx.await;
        drop(stream);
    });
    let mut harness = Harness::ready().await;
    let open = json!({"tunnelId": "full", "host": "127.0.0.1", "port": port});
    harness.result("tunnel/open", open).await;
    let chunk = b64(&vec![7u8; 512 * 1024]);
    let mut ids = Vec::new();
    for _ in 0..96 {
        let write = json!({"tunnelId": "full", "chunk": chunk});
        ids.push(harness.send_request("tunnel/write", write).await);
    }
    let refusal = |reply: &Value| {
        let message = reply["error"]["message"].as_str().unwrap_or_default().to_owned();
        message.starts_with("tunnel full's write buffer is full: ")
            && message.ends_with(&format!(" bytes wait for 127.0.0.1:{port} to take them (each write counts 4096 more), and at most 1048576 may; wait for the replies to earlier writes"))
            && reply["error"]["code"] == -32600
    };
    // Refused writes are answered at once, accepted ones once the kernel took them.
    let first = harness.take("a refused write", |m| m.get("id").is_some() && refusal(m)).await;
    assert!(ids.contains(&first["id"].as_i64().unwrap()));
    // Empty writes count too (4096 each): they cannot pile up without bound.
    let mut empties = Vec::new();
    for _ in 0..300 {
        empties.push(
            harness.send_request("tunnel/write", json!({"tunnelId": "full", "chunk": ""})).await,
        );
    }
    let mut refused_empty = 0;
    while refused_empty < 300 - 256 {
        let reply = harness
            .take("a refused empty write", |m| {
                m["id"].as_i64().is_some_and(|id| empties.contains(&id)) && refusal(m)
            })
            .await;
        assert!(empties.contains(&reply["id"].as_i64().unwrap()));
        refused_empty += 1;
    }
    ids.extend(empties);
    // The remote side goes: every write is answered, none left hanging.
    held_tx.send(()).unwrap();
    let mut answered = 1 + refused_empty;
    while answered < ids.len() {
        let reply = harness.take("a write's reply", |m| m.get("id").is_some()).await;
        let message = reply["error"]["message"].as_str().unwrap_or_default();
        assert!(
            reply.get("result") == Some(&json!({}))
                || refusal(&reply)
                || message == "tunnel full was not written: it ended"
                // Read by the server after the tunnel ended.
                || message == "unknown tunnel full"
                || message
                    .starts_with(&format!("cannot write to tunnel full (127.0.0.1:{port}): ")),
            "{reply}"
        );
        answered += 1;
    }
    let (_, closed) = read_tunnel(&mut harness, "full").await;
    assert!(["reset", "eof"].contains(&closed["reason"].as_str().unwrap()), "{closed}");
}

#[tokio::test]
async fn a_small_server_room_still_carries_a_tunnel() {
    // A room smaller than one full chunk's line: chunks shrink to fit, nothing waits forever.
    let (flood, _) = flooder(2 * 1024 * 1024).await;
    let config = Config { max_retained_bytes: 100_000, ..Config::default() };
    let mut harness = Harness::ready_with(config).await;
    let open = json!({"tunnelId": "small", "host": "127.0.0.1", "port": flood.port()});
    harness.result("tunnel/open", open).await;
    let (mut received, mut next_seq) = (0, 1);
    while received < 2 * 1024 * 1024 {
        let message = harness.take("tunnel data", |m| m["params"]["tunnelId"] == "small").await;
        assert_eq!(message["method"], "tunnel/data", "{message}");
        assert_eq!(message["params"]["seq"], next_seq);
        next_seq += 1;
        let bytes = unb64(&message["params"]["chunk"]).len();
        received += bytes;
        let ack = json!({"method": "tunnel/ack", "params": {"tunnelId": "small", "bytes": bytes}});
        harness.send(ack).await;
    }
    assert_eq!(received, 2 * 1024 * 1024);
}

#[tokio::test]
async fn tunnels_dropped_or_cancelled_at_once_are_closed_and_free_their_slots() {
    let echo = echo_server().await;
    let launcher = Launcher::spawn(LaunchCommand::new(*BIN)).await.unwrap();
    let client = launcher.client();
    // More than the server's 256 per connection, each dropped right after it opened.
    for _ in 0..300 {
        drop(within("an open", client.open_tunnel("127.0.0.1", echo.port())).await.unwrap());
    }
    // And as many opens cancelled before their reply.
    for _ in 0..300 {
        let open = client.open_tunnel("127.0.0.1", echo.port());
        let _ = tokio::time::timeout(std::time::Duration::from_micros(1), open).await;
    }
    let mut tunnel =
        within("an open after them", client.open_tunnel("127.0.0.1", echo.port())).await.unwrap();
    tunnel.write_all(b"still").await.unwrap();
    tunnel.shutdown().await.unwrap();
    let mut back = Vec::new();
    within("the echo", tunnel.read_to_end(&mut back)).await.unwrap();
    assert_eq!(back, b"still");
}
