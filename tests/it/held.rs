//! Every byte held for a client is charged until it is written: clients that
//! never read their answers (stdio, WebSocket) keep the server within
//! `--max-retained-bytes` plus a named slack, and others are still served.

use std::net::SocketAddr;

use futures_util::SinkExt;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message as Frame;

use crate::binary::Binary;
use crate::support::{peak_rss_kib, scratch, unb64, within};
use crate::websocket::{WsPeer, WsServer};

/// The server-wide room these tests give the server (`--max-retained-bytes`).
/// A 30 MiB body is charged 70 MiB while its answer is made (the bytes and
/// their base64), then 40 MiB until it is written: one answer at a time fits.
const ROOM: usize = 96 * 1024 * 1024;
/// What the server may hold beyond the room, in KiB: its code, runtime and
/// heap (about 12 MiB), the freed heap the allocator keeps before it trims
/// (`M_TRIM_THRESHOLD`, 32 MiB), and the read buffers of 48 HTTP
/// connections and 4 WebSockets, with a little to spare.
const SLACK_KIB: u64 = 64 * 1024;
/// The body of each answer.
const BODY: usize = 30 * 1024 * 1024;
/// What one connection may hold of the room (CONNECTION_HTTP_BYTES).
const SHARE: usize = 80 * 1024 * 1024;

/// The answer to a request for `/small`.
const SMALL: &str = "HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nsmall";

/// A loopback HTTP server that answers every request with a [`BODY`]-byte
/// body and reports on `done` when it has written it (or the client went).
async fn body_server() -> (SocketAddr, mpsc::UnboundedReceiver<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (done_tx, done) = mpsc::unbounded_channel();
    let mut answer =
        format!("HTTP/1.1 200 OK\r\ncontent-length: {BODY}\r\nconnection: close\r\n\r\n")
            .into_bytes();
    answer.extend(std::iter::repeat_n(b'h', BODY));
    let answer = std::sync::Arc::new(answer);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (done_tx, answer) = (done_tx.clone(), answer.clone());
            tokio::spawn(async move {
                let (reader, mut writer) = stream.into_split();
                let mut reader = BufReader::new(reader);
                let mut line = String::new();
                let _ = reader.read_line(&mut line).await;
                let small = line.contains("/small");
                while reader.read_line(&mut line).await.is_ok_and(|n| n > 0)
                    && !line.ends_with("\r\n\r\n")
                {}
                if small {
                    let _ = writer.write_all(SMALL.as_bytes()).await;
                } else {
                    let _ = writer.write_all(&answer).await;
                }
                let _ = writer.shutdown().await;
                let _ = done_tx.send(());
            });
        }
    });
    (address, done)
}

fn request(id: i64, address: SocketAddr) -> String {
    json!({"id": id, "method": "http/request", "params": {
        "method": "GET", "url": format!("http://{address}/body"), "requestId": format!("r{id}"),
    }})
    .to_string()
}

/// Each answer is the whole body, or the refusal that names the room.
fn check_answer(answer: &Value) -> bool {
    if let Some(result) = answer.get("result") {
        assert_eq!(result["status"], 200);
        assert_eq!(unb64(&result["bodyBase64"]), vec![b'h'; BODY]);
        return true;
    }
    assert_eq!(
        answer["error"],
        json!({"code": -32603, "message": format!(
            "failed to read http/request response body: the server's room for held bytes is full (--max-retained-bytes {ROOM}, at most {SHARE} per connection) until answers already made are read; retry later or set streamResponse"
        )}),
    );
    false
}

/// A WebSocket client that takes frames and messages of up to 64 MiB.
async fn large_frames(url: &str) -> WsPeer {
    let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
        .max_frame_size(Some(64 << 20))
        .max_message_size(Some(64 << 20));
    let connect = tokio_tungstenite::connect_async_with_config(url, Some(config), false);
    let (ws, _) = within("a WebSocket connection", connect).await.unwrap();
    WsPeer { ws }
}

/// `count` peers that each send `request(id)` for every id in `ids` and then
/// read nothing.
async fn peers_that_never_read(
    url: &str,
    count: usize,
    ids: std::ops::Range<i64>,
    request: impl Fn(i64) -> String,
) -> Vec<WsPeer> {
    let mut peers = Vec::new();
    for _ in 0..count {
        let mut peer = large_frames(url).await;
        peer.handshake().await;
        for id in ids.clone() {
            peer.ws.feed(Frame::text(request(id))).await.unwrap();
        }
        peer.ws.flush().await.unwrap();
        peers.push(peer);
    }
    peers
}

async fn wait_done(done: &mut mpsc::UnboundedReceiver<()>, count: usize) {
    for _ in 0..count {
        within("the HTTP server's answers written or dropped", done.recv()).await.unwrap();
    }
}

#[tokio::test]
async fn a_stdio_client_that_never_reads_keeps_the_server_within_the_room() {
    let (address, mut done) = body_server().await;
    let room = ROOM.to_string();
    let mut server = Binary::ready(&["--max-retained-bytes", &room]).await;
    for id in 100..116 {
        server.send_line(&request(id, address)).await;
    }
    wait_done(&mut done, 16).await;
    let peak = peak_rss_kib(server.child.id().unwrap());
    assert!(
        peak <= (ROOM / 1024) as u64 + SLACK_KIB,
        "peak RSS {peak} KiB is over the room ({} KiB) and the slack ({SLACK_KIB} KiB)",
        ROOM / 1024
    );
    // Once read, every answer is whole or refused by name; and it serves on.
    let mut whole = 0;
    for _ in 0..16 {
        let answer = within("an answer", server.next()).await.unwrap();
        whole += usize::from(check_answer(&answer));
    }
    assert!(whole >= 1, "no answer was whole");
    let answer = server
        .call(
            "http/request",
            json!({
                "method": "GET", "url": format!("http://{address}/again"), "requestId": "again",
            }),
        )
        .await;
    assert!(check_answer(&answer), "{answer}");
}

#[tokio::test]
async fn websocket_clients_that_never_read_keep_the_server_within_the_room() {
    let (address, mut done) = body_server().await;
    let room = ROOM.to_string();
    let server =
        WsServer::start(&["--listen", "ws://127.0.0.1:0", "--max-retained-bytes", &room]).await;
    let stuck = peers_that_never_read(&server.url, 3, 100..116, |id| request(id, address)).await;
    wait_done(&mut done, 48).await;
    // A fresh client is served while the others still read nothing.
    let mut fresh = WsPeer::connect(&server.url).await;
    fresh.handshake().await;
    let small = json!({"id": 1, "method": "http/request", "params": {
        "method": "GET", "url": format!("http://{address}/small"), "requestId": "small",
    }});
    fresh.send_text(&small.to_string()).await;
    let answer = fresh.next().await.unwrap();
    assert_eq!(answer["result"]["bodyBase64"], "c21hbGw=", "{answer}");
    let peak = peak_rss_kib(server.child.id().unwrap());
    assert!(
        peak <= (ROOM / 1024) as u64 + SLACK_KIB,
        "peak RSS {peak} KiB is over the room ({} KiB) and the slack ({SLACK_KIB} KiB)",
        ROOM / 1024
    );
    // Now they read (with room for a 40 MiB frame), and every answer comes.
    for mut peer in stuck {
        let config = *peer.ws.get_config();
        assert!(config.max_frame_size.is_none_or(|max| max >= 48 << 20), "{config:?}");
        for _ in 0..16 {
            check_answer(&peer.next().await.unwrap());
        }
    }
}

#[tokio::test]
async fn fs_read_file_answers_take_their_turn_in_the_room() {
    let dir = scratch("held-read-file");
    let file = dir.join("big");
    std::fs::write(&file, vec![b'f'; BODY]).unwrap();
    let room = ROOM.to_string();
    let mut server = Binary::ready(&["--max-retained-bytes", &room]).await;
    for id in 100..116 {
        let line = json!({"id": id, "method": "fs/readFile", "params": {"path": file}});
        server.send_line(&line.to_string()).await;
    }
    // The first answers fill the room; the rest wait for it. Reading them
    // all lets each go in turn, and the server never held more than the room.
    for _ in 0..16 {
        let answer = within("a readFile answer", server.next()).await.unwrap();
        assert_eq!(unb64(&answer["result"]["dataBase64"]).len(), BODY);
    }
    let peak = peak_rss_kib(server.child.id().unwrap());
    assert!(
        peak <= (ROOM / 1024) as u64 + SLACK_KIB,
        "peak RSS {peak} KiB is over the room ({} KiB) and the slack ({SLACK_KIB} KiB)",
        ROOM / 1024
    );
}

#[tokio::test]
async fn a_streamed_body_to_a_late_reader_holds_its_buffer_and_flows_on() {
    const STREAMED: usize = 128 * 1024 * 1024;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let written = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (pushed_tx, mut pushed) = mpsc::unbounded_channel();
    let count = written.clone();
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let (reader, mut writer) = stream.into_split();
        let mut reader = BufReader::new(reader);
        let mut line = String::new();
        while reader.read_line(&mut line).await.is_ok_and(|n| n > 0) && !line.ends_with("\r\n\r\n")
        {
        }
        let head =
            format!("HTTP/1.1 200 OK\r\ncontent-length: {STREAMED}\r\nconnection: close\r\n\r\n");
        writer.write_all(head.as_bytes()).await.unwrap();
        let block = vec![b's'; 64 * 1024];
        let mut told = false;
        while count.load(std::sync::atomic::Ordering::Relaxed) < STREAMED {
            if writer.write_all(&block).await.is_err() {
                return;
            }
            let total = count.fetch_add(block.len(), std::sync::atomic::Ordering::Relaxed);
            if !told && total >= 4 << 20 {
                told = true;
                let _ = pushed_tx.send(());
            }
        }
    });
    let mut server = Binary::ready(&[]).await;
    let params = json!({"method": "GET", "url": format!("http://{address}/big"),
        "requestId": "late", "streamResponse": true});
    server
        .send_line(&json!({"id": 1, "method": "http/request", "params": params}).to_string())
        .await;
    // The server has taken 4 MiB from the remote side while this client read nothing.
    within("4 MiB pushed by the remote side", pushed.recv()).await.unwrap();
    let (mut received, mut next_seq, mut ended) = (0, 1, false);
    while !ended {
        let message = within("a delta", server.next()).await.unwrap();
        if message.get("id").is_some() {
            assert_eq!(message["result"]["status"], 200, "{message}");
            continue;
        }
        assert_eq!(message["method"], "http/request/bodyDelta", "{message}");
        assert_eq!(message["params"]["seq"], next_seq);
        next_seq += 1;
        let chunk = unb64(&message["params"]["deltaBase64"]);
        assert!(chunk.iter().all(|b| *b == b's'));
        received += chunk.len();
        ended = message["params"]["done"] == true;
    }
    assert_eq!(received, STREAMED);
    let peak = peak_rss_kib(server.child.id().unwrap());
    assert!(peak < 48 * 1024, "the server's peak RSS was {peak} KiB");
}

/// Connections that ask for large files and never read their answers hold at
/// most a share of the room each: with five of them (more than the room has
/// shares for), another connection's small read and listing are still
/// answered at once (they waited behind those answers before).
#[tokio::test]
async fn connections_that_never_read_their_files_hold_up_no_other_connections_calls() {
    let dir = scratch("held-fs-share");
    // Four files, so that four calls run at once (calls on one path keep
    // their order): the first holds room, the others wait for it.
    let bigs: Vec<_> = (0..4).map(|n| dir.join(format!("big{n}"))).collect();
    for big in &bigs {
        std::fs::write(big, vec![b'f'; BODY]).unwrap();
    }
    let small = dir.join("small");
    std::fs::write(&small, "small").unwrap();
    let room = ROOM.to_string();
    let server =
        WsServer::start(&["--listen", "ws://127.0.0.1:0", "--max-retained-bytes", &room]).await;
    let read = |id: i64| {
        let big = &bigs[id as usize % 4];
        json!({"id": id, "method": "fs/readFile", "params": {"path": big}}).to_string()
    };
    let stalled = peers_that_never_read(&server.url, 5, 100..120, read).await;
    // The first answer is being made (its file read, its 40 MiB line
    // growing): the other calls wait (before: in the room's queue, where
    // every other connection's call then waited behind them).
    let pid = server.child.id().unwrap();
    crate::support::poll_proc("the stalled connection's first answer", || {
        (crate::support::rss_kib(pid) >= 40 * 1024).then_some(())
    })
    .await;
    let mut other = WsPeer::connect(&server.url).await;
    other.handshake().await;
    let calls = [
        ("fs/readFile", json!({"path": small})),
        ("fs/readDirectory", json!({"path": dir})),
        ("fs/readFile", json!({"path": small})),
    ];
    let mut answers = Vec::new();
    for (id, (method, params)) in (1..).zip(calls) {
        let line = json!({"id": id, "method": method, "params": params});
        other.send_text(&line.to_string()).await;
        let answer = tokio::time::timeout(std::time::Duration::from_secs(5), other.next())
            .await
            .unwrap_or_else(|_| panic!("{method} waited behind the other connection's answers"));
        answers.push(answer.unwrap());
    }
    let entry = |name: &str| json!({"fileName": name, "isDirectory": false, "isFile": true});
    let entries =
        json!([entry("big0"), entry("big1"), entry("big2"), entry("big3"), entry("small")]);
    assert_eq!(
        answers,
        [
            json!({"id": 1, "result": {"dataBase64": "c21hbGw="}}),
            json!({"id": 2, "result": {"entries": entries}}),
            json!({"id": 3, "result": {"dataBase64": "c21hbGw="}}),
        ]
    );
    drop(stalled);
}
