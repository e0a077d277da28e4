//! Bounds under load, through the real binary: a listener that cannot be spun
//! or starved, memory that stays within its budgets, descriptors that fit the
//! process limit, pipelined calls that wait instead of failing, clear errors.
//! Each asserts a bound (CPU ticks, log bytes, RSS, counts), not a timing.

use std::process::Stdio;

use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::binary::{Binary, BIN};
use crate::support::{peak_rss_kib, rss_kib, scratch, start_params, within};
use crate::websocket::WsPeer;

/// A `--listen` server run through `prlimit`, its stderr in a file.
struct Listening {
    child: tokio::process::Child,
    url: String,
    stderr: std::path::PathBuf,
}

impl Listening {
    async fn start(nofile: &str, args: &[&str]) -> Listening {
        // A directory of its own: scratch() empties one that another test may hold.
        let stderr = scratch(&format!("bounds-stderr-{}", rand_tag())).join("stderr");
        let mut child = tokio::process::Command::new("prlimit")
            .arg(format!("--nofile={nofile}"))
            .arg(*BIN)
            .args(["--listen", "ws://127.0.0.1:0"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        let url = within("the listening URL", stdout.next_line()).await.unwrap().unwrap();
        tokio::spawn(async move { while let Ok(Some(_)) = stdout.next_line().await {} });
        Listening { child, url, stderr }
    }

    fn pid(&self) -> u32 {
        self.child.id().unwrap()
    }

    fn address(&self) -> &str {
        self.url.strip_prefix("ws://").unwrap()
    }

    fn stderr_bytes(&self) -> u64 {
        std::fs::metadata(&self.stderr).unwrap().len()
    }
}

fn rand_tag() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.finish()
}

/// CPU time of `pid` so far, in clock ticks (utime + stime).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit(") ").next().unwrap().split(' ').collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// An upgrade request by hand, on a stream the caller keeps.
async fn upgrade(address: &str) -> TcpStream {
    let mut stream = TcpStream::connect(address).await.unwrap();
    let request = format!(
        "GET / HTTP/1.1\r\nHost: {address}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    stream
}

async fn status_line(stream: &mut TcpStream) -> String {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    within("an HTTP status line", reader.read_line(&mut line)).await.unwrap();
    line.trim_end().to_owned()
}

/// At 64 descriptors, 100 idle connections: the accept loop pauses instead of
/// spinning and logs a line now and then, not per failure.
#[tokio::test]
async fn an_fd_starved_listener_stays_idle() {
    let server = Listening::start("64:64", &[]).await;
    let logged_before = server.stderr_bytes();
    let mut idle = Vec::new();
    for _ in 0..100 {
        idle.push(std::net::TcpStream::connect(server.address()).unwrap());
    }
    // The listener meets EMFILE on its way through the backlog (pausing each
    // time); the probe, queued last, is answered once every connection before
    // it was handled: the ones that fit wait for their upgrade, the rest got
    // 503 (so does the probe, unless the first ones met their handshake
    // timeout of 10 s before it and left room; or 403 when no descriptor was
    // left to check that no sandbox holds its peer: refusal fails closed).
    let mut probe = upgrade(server.address()).await;
    let status = status_line(&mut probe).await;
    assert!(
        [
            "HTTP/1.1 503 Service Unavailable",
            "HTTP/1.1 101 Switching Protocols",
            "HTTP/1.1 403 Forbidden"
        ]
        .contains(&status.as_str()),
        "{status}"
    );
    let logged = server.stderr_bytes() - logged_before;
    assert!(logged <= 1024, "the listener logged {logged} bytes for 101 starved connections");
    let (ticks, logged) = (cpu_ticks(server.pid()), server.stderr_bytes());
    // A measurement window, not a synchronisation: nothing is awaited in it.
    std::thread::sleep(std::time::Duration::from_secs(2));
    let (ticks, logged) = (cpu_ticks(server.pid()) - ticks, server.stderr_bytes() - logged);
    // 100 ticks are one second of CPU; spinning used all 200 of the window.
    assert!(ticks <= 20, "the listener used {ticks} ticks of CPU in 2 s");
    assert!(logged <= 1024, "the listener logged {logged} bytes in 2 s");
    drop(idle);
}

#[tokio::test]
async fn a_slow_upgrade_is_closed_by_the_handshake_timeout() {
    let server = Listening::start("4096:4096", &[]).await;
    let mut slow = TcpStream::connect(server.address()).await.unwrap();
    slow.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").await.unwrap();
    // The rest never comes: the server closes the connection after HANDSHAKE_TIMEOUT (10 s).
    let mut rest = Vec::new();
    let read = within("the server to close a slow upgrade", slow.read_to_end(&mut rest)).await;
    assert_eq!((read.unwrap(), rest), (0, Vec::new()));
}

#[tokio::test]
async fn beyond_max_connections_an_upgrade_gets_503_at_once() {
    let server = Listening::start("4096:4096", &["--max-connections", "2"]).await;
    let first = WsPeer::connect(&server.url).await;
    let second = WsPeer::connect(&server.url).await;
    let mut third = upgrade(server.address()).await;
    assert_eq!(status_line(&mut third).await, "HTTP/1.1 503 Service Unavailable");
    drop((first, second));
    // A refused upgrade of another kind gets its status too.
    let mut plain = TcpStream::connect(server.address()).await.unwrap();
    // Two connections may still be counted while they end; wait for a status either way.
    plain.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let status = status_line(&mut plain).await;
    assert!(
        ["HTTP/1.1 426 Upgrade Required", "HTTP/1.1 503 Service Unavailable"]
            .contains(&status.as_str()),
        "{status}"
    );
}

/// A frame far over the limit is skipped as it arrives: id -1, the connection stays.
#[tokio::test]
async fn an_oversized_frame_gets_an_error_and_the_connection_stays() {
    let server = Listening::start("4096:4096", &["--max-message-bytes", "1024"]).await;
    let mut peer = WsPeer::connect(&server.url).await;
    peer.handshake().await;
    let before = rss_kib(server.pid());
    peer.send_text(&format!(r#"{{"pad":"{}"}}"#, "x".repeat(16 << 20))).await;
    assert_eq!(
        peer.next().await.unwrap(),
        json!({"id": -1, "error": {"code": -32600, "message": "message is longer than the limit of 1024 bytes (--max-message-bytes); it was discarded"}})
    );
    peer.send_text(r#"{"id":7,"method":"process/list","params":{}}"#).await;
    assert_eq!(peer.next().await.unwrap(), json!({"id": 7, "result": {"processes": []}}));
    let grown = rss_kib(server.pid()).saturating_sub(before);
    assert!(grown < 4 * 1024, "a 16 MiB frame over a 1 KiB limit grew the server by {grown} KiB");
}

/// Six processes printing one byte at a time: retention counts each chunk's
/// overhead, so a process keeps about 8,000 one-byte chunks, not a million.
#[tokio::test]
async fn one_byte_drippers_are_charged_per_chunk() {
    let mut server = Binary::ready(&[]).await;
    // 200,000 single-byte writes each: more chunks than a payload-counted
    // mebibyte of retention would ever drop.
    let drip = "import os\nfor _ in range(200000): os.write(1, b'x')";
    // Sent at once and read as they come: an exit before the last start's
    // reply must not be skipped over.
    for n in 0..6 {
        let params = start_params(&format!("d{n}"), &["python3", "-c", drip], json!({}));
        server
            .send_line(
                &json!({"id": 100 + n, "method": "process/start", "params": params}).to_string(),
            )
            .await;
    }
    let mut exited = 0;
    while exited < 6 {
        let message = server.next().await.unwrap();
        assert!(message.get("error").is_none(), "{message}");
        if message["method"] == "process/exited" {
            exited += 1;
        }
    }
    for n in 0..6 {
        let read = server.result("process/read", json!({"processId": format!("d{n}")})).await;
        let chunks = read["chunks"].as_array().unwrap();
        let payload: usize = chunks.iter().map(|c| crate::support::unb64(&c["chunk"]).len()).sum();
        // Charged: payload + 128 per chunk, within 1 MiB.
        assert!(
            payload + 128 * chunks.len() <= 1 << 20,
            "d{n}: {} chunks, {payload} bytes",
            chunks.len()
        );
    }
    let rss = rss_kib(server.child.id().unwrap());
    assert!(rss < 48 * 1024, "server RSS {rss} KiB");
}

/// Exited processes' output counts against the connection's budget (64 MiB):
/// 150 MiB of output from processes started back to back, two at a time.
#[tokio::test]
async fn exited_output_counts_against_the_connection_budget() {
    let mut server = Binary::ready(&["--max-processes", "2"]).await;
    let pid = server.child.id().unwrap();
    for n in 0..150 {
        let id = format!("h{n}");
        server
            .result(
                "process/start",
                start_params(&id, &["head", "-c", "1048576", "/dev/zero"], json!({})),
            )
            .await;
        server.notification("process/exited", &id).await;
    }
    let rss = rss_kib(pid);
    assert!(rss < 110 * 1024, "server RSS {rss} KiB after 150 MiB of output");
    // The oldest exited output went first; the newest is all there.
    let first = server.result("process/read", json!({"processId": "h0"})).await;
    assert_eq!(first["chunks"], json!([]));
    let last = server.result("process/read", json!({"processId": "h149"})).await;
    let chunks = last["chunks"].as_array().unwrap();
    let newest = chunks.last().unwrap()["seq"].as_u64().unwrap();
    assert_eq!(last["nextSeq"].as_u64(), Some(newest + 1));
    let kept: usize = chunks.iter().map(|c| crate::support::unb64(&c["chunk"]).len()).sum();
    assert!(kept > 900 * 1024, "the newest process kept only {kept} bytes");
}

/// Four connections: the server-wide budget holds across them.
#[tokio::test]
async fn the_server_wide_retention_budget_holds_across_connections() {
    let server = Listening::start("4096:4096", &["--max-retained-bytes", "16777216"]).await;
    let mut peers = Vec::new();
    for _ in 0..4 {
        let mut peer = WsPeer::connect(&server.url).await;
        peer.handshake().await;
        peers.push(peer);
    }
    const PER_CONNECTION: usize = 24;
    for (c, peer) in peers.iter_mut().enumerate() {
        for n in 0..PER_CONNECTION {
            let params = start_params(
                &format!("c{c}-{n}"),
                &["head", "-c", "1048576", "/dev/zero"],
                json!({}),
            );
            peer.send_text(
                &json!({"id": n, "method": "process/start", "params": params}).to_string(),
            )
            .await;
        }
        let mut exited = 0;
        while exited < PER_CONNECTION {
            let message = peer.next().await.unwrap();
            if message["method"] == "process/exited" {
                exited += 1;
            }
        }
    }
    let rss = rss_kib(server.pid());
    // 96 MiB was printed (each connection under its own 64 MiB budget); 16 MiB
    // may be kept in all, plus the server itself and its threads.
    assert!(rss < 60 * 1024, "server RSS {rss} KiB");
}

#[tokio::test]
async fn a_long_process_id_is_refused() {
    let mut server = Binary::ready(&[]).await;
    let id = "p".repeat(300);
    let reply = server.call("process/start", start_params(&id, &["true"], json!({}))).await;
    assert_eq!(
        reply["error"],
        json!({"code": -32602, "message": format!("processId is too long: 300 bytes (starting {:?}), and the limit is 256", "p".repeat(32))})
    );
    let reply = server.call("process/read", json!({"processId": id})).await;
    assert_eq!(reply["error"]["code"], -32602);
}

/// 25,000 pipelined getMetadata calls, sent before any reply is read: all answered.
#[tokio::test]
async fn pipelined_fs_calls_wait_instead_of_failing() {
    let dir = scratch("pipelined");
    let mut server = Binary::ready(&[]).await;
    let mut batch = String::new();
    for n in 0..25_000 {
        let path = dir.join(format!("f{}", n % 10));
        batch.push_str(
            &json!({"id": 100 + n, "method": "fs/getMetadata", "params": {"path": path}})
                .to_string(),
        );
        batch.push('\n');
    }
    for n in 0..10 {
        std::fs::write(dir.join(format!("f{n}")), "x").unwrap();
    }
    let writer = server.take_stdin();
    let sending = tokio::spawn(async move {
        let mut writer = writer;
        writer.write_all(batch.as_bytes()).await.unwrap();
        writer
    });
    let mut answered = 0;
    while answered < 25_000 {
        let reply = server.next().await.unwrap();
        assert!(reply.get("error").is_none(), "{reply}");
        assert_eq!(reply["result"]["isFile"], true);
        answered += 1;
    }
    within("the sender", sending).await.unwrap();
}

/// At the common soft limit of 1024 descriptors, 1000 processes start (the
/// binary raises its soft limit to the hard one).
#[tokio::test]
async fn a_thousand_processes_start_under_a_soft_limit_of_1024() {
    // Soft 1024, the hard limit as it is (raising it needs CAP_SYS_RESOURCE).
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into `limit`.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) }, 0);
    assert!(
        limit.rlim_max >= 4200,
        "the hard descriptor limit {} is too low for this test",
        limit.rlim_max
    );
    let mut command = tokio::process::Command::new("prlimit");
    command.arg(format!("--nofile=1024:{}", limit.rlim_max)).arg(*BIN).stderr(Stdio::inherit());
    let mut server = Binary::from_command(command);
    server.result("initialize", json!({"clientName": "many"})).await;
    server.send_line(r#"{"method":"initialized"}"#).await;
    for n in 0..1000 {
        let reply = server
            .call("process/start", start_params(&format!("s{n}"), &["sleep", "100"], json!({})))
            .await;
        assert!(reply.get("error").is_none(), "start {n}: {reply}");
    }
    let list = server.result("process/list", json!({})).await;
    assert_eq!(list["processes"].as_array().unwrap().len(), 1000);
}

#[tokio::test]
async fn errors_say_what_was_wrong() {
    let mut server = Binary::ready(&[]).await;
    server.result("process/start", start_params("cat", &["cat"], json!({"pipeStdin": true}))).await;
    let big = crate::support::b64(&vec![b'x'; 9 << 20]);
    let reply = server.call("process/write", json!({"processId": "cat", "chunk": big})).await;
    assert_eq!(
        reply["error"],
        json!({"code": -32600, "message": "the chunk for process cat is too large: 9437184 bytes, and at most 8388608 bytes of stdin can wait; send it in pieces"})
    );
    let reply = server
        .call("process/start", start_params("nul", &["sh", "-c", "a\u{0}b"], json!({})))
        .await;
    assert_eq!(reply["error"], json!({"code": -32602, "message": "argv[2] holds a NUL byte"}));
    server.send_line(r#"{"id":18446744073709551615,"method":"process/list","params":{}}"#).await;
    let line = server.next().await.unwrap();
    assert_eq!(line["id"].as_u64(), Some(u64::MAX));
    assert!(line["result"]["processes"].is_array());
}

/// Replies the client does not read hold their slots: 40 reads of 16 MiB
/// sent at once keep the server near four replies, not forty.
#[tokio::test]
async fn unread_fs_replies_hold_back_the_calls_behind_them() {
    let dir = scratch("unread-replies");
    let file = dir.join("big");
    std::fs::write(&file, vec![b'x'; 16 << 20]).unwrap();
    let mut server = Binary::ready(&[]).await;
    let pid = server.child.id().unwrap();
    let mut batch = String::new();
    for n in 0..40 {
        batch.push_str(
            &json!({"id": 1000 + n, "method": "fs/readFile", "params": {"path": file}}).to_string(),
        );
        batch.push('\n');
    }
    let mut stdin = server.take_stdin();
    let sending = tokio::spawn(async move {
        stdin.write_all(batch.as_bytes()).await.unwrap();
        stdin
    });
    // A measurement window: the server may read and answer as much as it can.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let peak = crate::support::peak_rss_kib(pid);
    for _ in 0..40 {
        assert!(server.next().await.unwrap()["result"]["dataBase64"].is_string());
    }
    within("the sender", sending).await.unwrap();
    // Forty replies would be 850 MiB; four running and the outbox stay far below.
    assert!(peak < 300 * 1024, "peak RSS {peak} KiB with 40 unread 16 MiB replies");
}

#[tokio::test]
async fn exited_processes_are_bounded_in_number() {
    let mut server = Binary::ready(&["--max-processes", "2"]).await;
    for n in 0..1200 {
        let id = format!("t{n}");
        server.result("process/start", start_params(&id, &["true"], json!({}))).await;
        server.notification("process/closed", &id).await;
    }
    let list = server.result("process/list", json!({})).await;
    let count = list["processes"].as_array().unwrap().len();
    assert!((1000..=1024).contains(&count), "{count} exited processes are remembered");
    let first = server.call("process/read", json!({"processId": "t0"})).await;
    assert_eq!(first["error"], json!({"code": -32600, "message": "unknown process id t0"}));
    let reply = server.call("process/terminate", json!({"processId": "x".repeat(300)})).await;
    assert_eq!(reply["error"]["code"], -32602);
    let nul =
        json!({"processId": "n", "argv": ["true"], "cwd": "/tm\u{0}p", "env": {}, "tty": false});
    assert_eq!(
        server.call("process/start", nul).await["error"],
        json!({"code": -32602, "message": "cwd holds a NUL byte"})
    );
}

/// A stream of starts, each writing 1 MiB that is read to the end, two at a
/// time, keeps the server near the connection's retention budget (64 MiB)
/// however many have exited: the exited ones' task cells go when they close,
/// and the holes their dropped output leaves in the heap are given back.
/// (Here the peak is 84 MiB; before, it crept up with every start: 89 MiB
/// after 1200, 90 to 92 after 2000.)
#[tokio::test]
async fn a_stream_of_exits_keeps_the_server_near_its_retention_budget() {
    /// The connection's retention (64 MiB) and what the server holds
    /// besides: code, runtime, the lines in flight, free heap below the trim.
    const PEAK_KIB: u64 = (64 + 26) << 10;
    const STARTS: usize = 1200;
    let mut server = Binary::ready(&["--max-processes", "2"]).await;
    let (mut started, mut running, mut closed) = (0, 0, 0);
    while closed < STARTS {
        while running < 2 && started < STARTS {
            let id = format!("p{started}");
            let params = start_params(&id, &["head", "-c", "1048576", "/dev/zero"], json!({}));
            let line = json!({"id": started + 10, "method": "process/start", "params": params});
            server.send_line(&line.to_string()).await;
            (started, running) = (started + 1, running + 1);
        }
        let message = within("the next message", server.next()).await.unwrap();
        assert!(message.get("error").is_none(), "{message}");
        if message["method"] == "process/closed" {
            (closed, running) = (closed + 1, running - 1);
        }
    }
    let list = server.result("process/list", json!({})).await;
    assert_eq!(list["processes"].as_array().unwrap().len(), 1024);
    let peak = peak_rss_kib(server.child.id().unwrap());
    assert!(peak <= PEAK_KIB, "peak RSS {peak} KiB is over {PEAK_KIB} KiB");
}
