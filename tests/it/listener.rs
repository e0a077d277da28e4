//! Who may drive a listening server: loopback peers by uid, tokens (capability
//! and signed), processes in the server's own sandboxes, floods of idle and
//! trickling sockets, frames that claim more than they send, stored argv, and
//! socket directories behind planted links. Hostile peers run as uid 65534
//! through `setpriv` (the tests run as root here and in CI).

use std::path::{Path, PathBuf};
use std::process::Stdio;

use exec_server::{Client, ClientOptions, Sandbox, StartParams};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::binary::{Binary, BIN};
use crate::sandbox::NOBODY;
use crate::support::{root_or_skip, scratch, within};
use crate::websocket::WsServer;

/// The hostile (or plain) peer, standard-library Python.
const PEER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/ws_peer.py");
/// Debian's Python, which uid 65534 can run (a pyenv shim under /root cannot).
const PYTHON: &str = "/usr/bin/python3";

/// `ws_peer.py ARGS`, as uid 65534 when `nobody`.
fn peer_command(nobody: bool, args: &[&str]) -> tokio::process::Command {
    let mut command = if nobody {
        crate::support::as_nobody(PYTHON)
    } else {
        tokio::process::Command::new(PYTHON)
    };
    command.arg(PEER).args(args).stdin(Stdio::piped()).kill_on_drop(true);
    command
}

/// The lines `ws_peer.py drive` prints: the status line, then the refusal's
/// body or the replies.
async fn drive(nobody: bool, url: &str, token: &str, touch: Option<&Path>) -> Vec<String> {
    let mut args = vec!["drive", url, token];
    let touch = touch.map(|p| p.to_str().unwrap().to_owned());
    args.extend(touch.as_deref());
    let output = within("the peer's exchange", peer_command(nobody, &args).output()).await.unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap().lines().map(str::to_owned).collect()
}

/// A directory anyone may write in, so a process of any uid could make the marker.
fn open_dir(name: &str) -> PathBuf {
    let dir = scratch(name);
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    dir
}

fn refusal_for(uid: u32) -> String {
    // SAFETY: geteuid cannot fail.
    let owner = unsafe { libc::geteuid() };
    format!("connection refused: the peer runs as uid {uid}, and this server serves only uid {owner} without a token (403)")
}

#[tokio::test]
async fn another_uid_on_loopback_is_refused_before_the_upgrade_and_runs_nothing() {
    if !root_or_skip("another uid's connection") {
        return;
    }
    for listen in ["ws://127.0.0.1:0", "ws://[::1]:0"] {
        let server = WsServer::start(&["--listen", listen]).await;
        let dir = open_dir("listener-other-uid");
        let marker = dir.join("marker");
        let lines = drive(true, &server.url, "-", Some(&marker)).await;
        assert_eq!(lines, ["HTTP/1.1 403 Forbidden".to_owned(), refusal_for(NOBODY)], "{listen}");
        assert!(!marker.exists(), "{listen}: a refused peer ran a process");
        // The owner, through the same peer program, gets in and runs it.
        let lines = drive(false, &server.url, "-", Some(&marker)).await;
        assert_eq!(lines[0], "HTTP/1.1 101 Switching Protocols", "{listen}");
        assert!(lines[2].starts_with(r#"{"id":2,"result":{"processId":"t""#), "{lines:?}");
        assert!(lines[3].contains(r#""method":"process/exited""#), "{lines:?}");
        assert!(marker.exists(), "the owner's process ran");
    }
}

#[tokio::test]
async fn a_server_run_by_nobody_refuses_root() {
    if !root_or_skip("a server of uid 65534") {
        return;
    }
    let mut child = crate::support::as_nobody(*BIN)
        .args(["--listen", "ws://127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let url = within("the listening URL", stdout.next_line()).await.unwrap().unwrap();
    let lines = drive(false, &url, "-", None).await;
    let expected = format!(
        "connection refused: the peer runs as uid 0, and this server serves only uid {NOBODY} without a token (403)"
    );
    assert_eq!(lines, ["HTTP/1.1 403 Forbidden".to_owned(), expected]);
    let lines = drive(true, &url, "-", None).await;
    assert_eq!(lines[0], "HTTP/1.1 101 Switching Protocols");
}

/// A token file of mode 0600 holding `token` and a newline.
/// How a connection from inside a networked sandbox to this host ends.
const REFUSED: &str = "ConnectionRefusedError: [Errno 111] Connection refused\n";

fn token_file(dir: &Path, token: &str) -> PathBuf {
    let path = dir.join("token");
    std::fs::write(&path, format!("{token}\n")).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    path
}

#[tokio::test]
async fn a_sandboxed_process_cannot_drive_its_own_server_even_with_the_token() {
    let dir = open_dir("listener-sandboxed");
    let (inside, outside) = (dir.join("inside"), dir.join("outside"));
    std::fs::create_dir_all(&inside).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let token = token_file(&dir, "sandbox-can-read-this");
    let no_token = ["--listen", "ws://127.0.0.1:0"];
    let with_token: [&str; 6] = [
        "--listen",
        "ws://127.0.0.1:0",
        "--ws-auth",
        "capability-token",
        "--ws-token-file",
        token.to_str().unwrap(),
    ];
    for (args, secret) in [(&no_token[..], "-"), (&with_token[..], "sandbox-can-read-this")] {
        let server = WsServer::start(args).await;
        let options = ClientOptions {
            bearer_token: (secret != "-").then(|| secret.to_owned()),
            ..ClientOptions::default()
        };
        let client = Client::connect_ws(&server.url, options).await.unwrap();
        let escaped = outside.join("escaped");
        let argv = [PYTHON, PEER, "drive", &server.url, secret, escaped.to_str().unwrap()];
        let sandbox = Sandbox::restricted([&inside]).network(true);
        let params = StartParams::new("boxed", argv, &inside).sandbox(sandbox);
        let mut boxed = client.start(params).await.unwrap();
        let (output, status) = within("the sandboxed peer", boxed.output_to_end()).await.unwrap();
        // Its loopback is its own: the server's listener is not there.
        let output = String::from_utf8_lossy(&output);
        assert!(output.ends_with(REFUSED), "{output}");
        assert_eq!(status.code, 1);
        assert!(!escaped.exists(), "a sandboxed process started an unsandboxed one");
        // Its socket handed on in flight (SCM_RIGHTS over a socketpair), which
        // once raced the server's search for who holds it: no connection either.
        let hidden =
            [PYTHON, PEER, "drive-inflight", &server.url, secret, escaped.to_str().unwrap()];
        let sandbox = Sandbox::restricted([&inside]).network(true);
        let params = StartParams::new("hidden", hidden, &inside).sandbox(sandbox);
        let mut hiding = client.start(params).await.unwrap();
        let (output, _) = within("the hiding peer", hiding.output_to_end()).await.unwrap();
        let output = String::from_utf8_lossy(&output);
        assert!(output.ends_with(REFUSED), "{output}");
        assert!(!escaped.exists(), "a hidden socket started an unsandboxed process");
        // The same program outside the sandbox, as the same uid, is served.
        let params = StartParams::new("free", argv, &inside);
        let mut free = client.start(params).await.unwrap();
        let (output, _) = within("the unsandboxed peer", free.output_to_end()).await.unwrap();
        let output = String::from_utf8_lossy(&output);
        assert!(output.starts_with("HTTP/1.1 101 Switching Protocols\n"), "{output}");
        assert!(escaped.exists(), "{output}");
        std::fs::remove_file(&escaped).unwrap();
    }
}

#[tokio::test]
async fn capability_tokens_from_a_file_or_a_digest_admit_any_uid_and_nothing_else() {
    let dir = scratch("listener-capability");
    let file = token_file(&dir, "s3cret-token");
    // printf s3cret-token | sha256sum
    let digest = "a81e611a041b13f078bf8ebe5dab4d4fd63fcc5594661c918bec093a2f416a7e";
    let by_file = ["--ws-auth", "capability-token", "--ws-token-file", file.to_str().unwrap()];
    let by_digest = ["--ws-auth", "capability-token", "--ws-token-sha256", digest];
    let alias = ["--token-file", file.to_str().unwrap(), "", ""];
    for flags in [&by_file, &by_digest, &alias] {
        let mut args = vec!["--listen", "ws://127.0.0.1:0"];
        args.extend(flags.iter().filter(|f| !f.is_empty()));
        let server = WsServer::start(&args).await;
        let nobody = root_or_skip("a token presented by another uid");
        let lines = drive(nobody, &server.url, "s3cret-token", None).await;
        assert_eq!(lines[0], "HTTP/1.1 101 Switching Protocols", "{flags:?}");
        for wrong in ["s3cret-tokeN", "-"] {
            let lines = drive(false, &server.url, wrong, None).await;
            let why = if wrong == "-" {
                "a bearer token is required (401)"
            } else {
                "the bearer token is not valid (401)"
            };
            assert_eq!(lines, ["HTTP/1.1 401 Unauthorized", why], "{flags:?}");
        }
    }
    // Refused: a file others may read, token flags without a WebSocket listener.
    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let output = std::process::Command::new(*BIN)
        .args(["--listen", "ws://127.0.0.1:0"])
        .args(by_file)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        format!(
            "exec-server: --ws-token-file {}: the file is readable by others (mode 644); make it 0600\n",
            file.display()
        )
    );
    // A token no header can carry (HTTP trims white space) is refused at start.
    let spaced = dir.join("spaced");
    std::fs::write(&spaced, " s3cret-token \n").unwrap();
    std::fs::set_permissions(&spaced, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let output = std::process::Command::new(*BIN)
        .args(["--listen", "ws://127.0.0.1:0", "--token-file", spaced.to_str().unwrap()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        format!(
            "exec-server: --ws-token-file {}: the secret begins or ends with white space, which a bearer token cannot carry\n",
            spaced.display()
        )
    );
    let output =
        std::process::Command::new(*BIN).args(by_digest).stdin(Stdio::null()).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        "exec-server: the --ws-auth and token flags configure a WebSocket listener; --listen stdio has none\n"
    );
}

#[tokio::test]
async fn signed_bearer_tokens_are_checked_for_signature_time_issuer_and_audience() {
    let dir = scratch("listener-signed");
    let secret = token_file(&dir, SECRET);
    let server = WsServer::start(&[
        "--listen",
        "ws://127.0.0.1:0",
        "--ws-auth",
        "signed-bearer-token",
        "--ws-shared-secret-file",
        secret.to_str().unwrap(),
        "--ws-issuer",
        "issuer-1",
        "--ws-audience",
        "exec-server",
    ])
    .await;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let sign =
        |claims: serde_json::Value, key: &[u8]| exec_server::server::sign_hs256(&claims, key);
    let good = json!({"exp": now + 300, "iss": "issuer-1", "aud": "exec-server"});
    let cases = [
        (sign(good.clone(), SECRET.as_bytes()), "HTTP/1.1 101 Switching Protocols", None),
        (
            sign(
                json!({"exp": now - 120, "iss": "issuer-1", "aud": "exec-server"}),
                SECRET.as_bytes(),
            ),
            "HTTP/1.1 401 Unauthorized",
            Some("the bearer token has expired (401)"),
        ),
        (
            sign(
                json!({"exp": now + 300, "nbf": now + 120, "iss": "issuer-1", "aud": "exec-server"}),
                SECRET.as_bytes(),
            ),
            "HTTP/1.1 401 Unauthorized",
            Some("the bearer token is not valid yet (nbf) (401)"),
        ),
        (
            sign(json!({"exp": now + 300, "iss": "issuer-1", "aud": "other"}), SECRET.as_bytes()),
            "HTTP/1.1 401 Unauthorized",
            Some("the bearer token's audience (aud) is not this server (401)"),
        ),
        (
            sign(good.clone(), b"wrong-secret"),
            "HTTP/1.1 401 Unauthorized",
            Some("the bearer token's signature is not valid (401)"),
        ),
    ];
    for (token, status, why) in cases {
        let lines = drive(false, &server.url, &token, None).await;
        assert_eq!(lines[0], status, "{token}");
        if let Some(why) = why {
            assert_eq!(lines[1], why, "{token}");
        }
    }
    // Strictly as RFC 7515/7519 say: each of these is refused, with why.
    let header = r#"{"alg":"HS256","typ":"JWT"}"#;
    let claims = format!(r#"{{"exp":{},"iss":"issuer-1","aud":"exec-server"}}"#, now + 300);
    let strict = [
        (
            raw_hs256(r#"{"alg":"HS256","crit":["b64"],"b64":false}"#, &claims),
            "the bearer token's header has crit (no extension is supported) (401)",
        ),
        (
            raw_hs256(r#"{"alg":"HS256","alg":"HS256"}"#, &claims),
            "the bearer token's header names a member twice (401)",
        ),
        (
            raw_hs256(
                header,
                &format!(
                    r#"{{"exp":{},"exp":{},"iss":"issuer-1","aud":"exec-server"}}"#,
                    now - 3600,
                    now + 300
                ),
            ),
            "the bearer token's claims name a member twice (401)",
        ),
        (
            raw_hs256(header, r#"{"exp":9007199254740993,"iss":"issuer-1","aud":"exec-server"}"#),
            "the bearer token's exp is not a whole number of seconds in 0..=2^53 (401)",
        ),
        (
            raw_hs256(
                header,
                &format!(r#"{{"exp":{}.0,"iss":"issuer-1","aud":"exec-server"}}"#, now + 300),
            ),
            "the bearer token's exp is not a whole number of seconds in 0..=2^53 (401)",
        ),
        (
            raw_hs256(
                header,
                &format!(
                    r#"{{"exp":{},"nbf":-1,"iss":"issuer-1","aud":"exec-server"}}"#,
                    now + 300
                ),
            ),
            "the bearer token's nbf is not a whole number of seconds in 0..=2^53 (401)",
        ),
        (
            raw_hs256(
                header,
                &format!(
                    r#"{{"exp":{},"iat":1.5e9,"iss":"issuer-1","aud":"exec-server"}}"#,
                    now + 300
                ),
            ),
            "the bearer token's iat is not a whole number of seconds in 0..=2^53 (401)",
        ),
    ];
    for (token, why) in strict {
        let lines = drive(false, &server.url, &token, None).await;
        assert_eq!(lines[0], "HTTP/1.1 401 Unauthorized", "{token}");
        assert_eq!(lines[1], why, "{token}");
    }
    // The same claims, strictly formed, are served.
    let lines = drive(false, &server.url, &raw_hs256(header, &claims), None).await;
    assert_eq!(lines[0], "HTTP/1.1 101 Switching Protocols");
    // The client half presents it too.
    let options = ClientOptions {
        bearer_token: Some(sign(good, SECRET.as_bytes())),
        ..ClientOptions::default()
    };
    let client = Client::connect_ws(&server.url, options).await.unwrap();
    assert!(client.list(exec_server::protocol::Empty {}).await.unwrap().processes.is_empty());
}

/// The shared secret of the signed-token tests: 32 bytes at least (RFC 7518 §3.2).
const SECRET: &str = "a-shared-secret-of-forty-bytes-in-all!!!";

/// An HS256 JWT of a header and claims given as JSON text, as written.
fn raw_hs256(header: &str, claims: &str) -> String {
    use base64::Engine;
    use hmac::Mac;
    let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let signed = format!("{}.{}", engine.encode(header), engine.encode(claims));
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(signed.as_bytes());
    format!("{signed}.{}", engine.encode(mac.finalize().into_bytes()))
}

#[test]
fn a_shared_secret_shorter_than_32_bytes_is_refused_at_start() {
    let dir = scratch("listener-short-secret");
    for short in ["x", "thirty-one-bytes-of-a-secret!!!"] {
        let secret = token_file(&dir, short);
        let output = std::process::Command::new(*BIN)
            .args(["--listen", "ws://127.0.0.1:0", "--ws-auth", "signed-bearer-token"])
            .arg("--ws-shared-secret-file")
            .arg(&secret)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2));
        assert_eq!(
            String::from_utf8_lossy(&output.stderr),
            format!(
                "exec-server: --ws-shared-secret-file {}: the secret is {} bytes; an HS256 key needs at least 32 (256 bits, RFC 7518 section 3.2)\n",
                secret.display(),
                short.len()
            )
        );
    }
}

/// The head of the server's answer to an upgrade with `extra` header lines.
async fn upgrade_head(url: &str, extra: &str) -> String {
    let address = url.strip_prefix("ws://").unwrap();
    let mut stream = TcpStream::connect(address).await.unwrap();
    let request = format!(
        "GET / HTTP/1.1\r\nHost: {address}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut reader = BufReader::new(stream);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        within("the upgrade answer", reader.read_line(&mut line)).await.unwrap();
        if line == "\r\n" || line.is_empty() {
            return head;
        }
        head.push_str(&line);
    }
}

#[tokio::test]
async fn the_request_id_is_echoed_in_the_upgrade_answer() {
    let server = WsServer::start(&["--listen", "ws://127.0.0.1:0"]).await;
    let head = upgrade_head(&server.url, "X-Request-Id: trace-7f3a\r\n").await;
    let lines: Vec<&str> = head.lines().collect();
    assert_eq!(lines[0], "HTTP/1.1 101 Switching Protocols");
    assert!(lines.contains(&"x-request-id: trace-7f3a"), "{head}");
}

#[tokio::test]
async fn the_owner_is_served_through_a_flood_of_idle_and_trickling_sockets() {
    let nobody = root_or_skip("a flood from another uid");
    let dir = scratch("listener-flood");
    let file = token_file(&dir, "flood-token");
    let plain: &[&str] = &["--listen", "ws://127.0.0.1:0"];
    let token: &[&str] = &["--listen", "ws://127.0.0.1:0", "--token-file", file.to_str().unwrap()];
    for (args, bearer) in [(plain, None), (token, Some("flood-token"))] {
        let server = WsServer::start(args).await;
        // Another uid (or, with a token, anyone without it): 1100 idle, 300 trickling.
        let mut flood =
            peer_command(nobody || bearer.is_some(), &["flood", &server.url, "1100", "300"])
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
        let mut lines = BufReader::new(flood.stdout.take().unwrap()).lines();
        let ready = within("the flood", lines.next_line()).await.unwrap().unwrap();
        assert!(ready.starts_with("ready "), "{ready}");
        for round in 0..2 {
            let options = ClientOptions {
                bearer_token: bearer.map(str::to_owned),
                ..ClientOptions::default()
            };
            let client = within("the owner's handshake", Client::connect_ws(&server.url, options))
                .await
                .unwrap();
            let list = client.list(exec_server::protocol::Empty {}).await.unwrap();
            assert!(list.processes.is_empty(), "round {round}");
        }
        drop(flood.stdin.take());
        let refused = within("the flood's count", lines.next_line()).await.unwrap().unwrap();
        if bearer.is_none() && nobody {
            // Every one of them was refused at once, by uid.
            assert_eq!(ready, "ready 0");
            assert_eq!(refused, "refused 1400");
        }
        let _ = flood.wait().await;
    }
}

#[tokio::test]
async fn frames_that_claim_64_mib_and_send_nothing_stall_no_one() {
    let server = WsServer::start(&["--listen", "ws://127.0.0.1:0"]).await;
    let address = server.url.strip_prefix("ws://").unwrap().to_owned();
    let mut holders = Vec::new();
    for trickle in [false, false, true, true] {
        let (mut ws, _) = tokio_tungstenite::client_async(
            server.url.as_str(),
            TcpStream::connect(&address).await.unwrap(),
        )
        .await
        .unwrap();
        // A masked text frame header claiming 64 MiB, then (for two) 512 KiB of it.
        let mut raw = vec![0x81u8, 0x80 | 127];
        raw.extend_from_slice(&(64u64 << 20).to_be_bytes());
        raw.extend_from_slice(&[0, 0, 0, 0]);
        let stream = ws.get_mut();
        stream.write_all(&raw).await.unwrap();
        if trickle {
            stream.write_all(&vec![b' '; 512 << 10]).await.unwrap();
        }
        holders.push(ws);
    }
    let client = Client::connect_ws(&server.url, ClientOptions::default()).await.unwrap();
    for round in 0..20 {
        let list = within(
            "a round trip beside the held frames",
            client.list(exec_server::protocol::Empty {}),
        )
        .await
        .unwrap();
        assert!(list.processes.is_empty(), "round {round}");
    }
    drop(holders);
}

#[tokio::test]
async fn stored_argv_counts_against_the_retained_budget() {
    let mut server = Binary::ready(&[]).await;
    // 18 arguments of 100 KiB: 1.8 MiB of argv per start.
    let big = "x".repeat(100 << 10);
    let mut refused = 0;
    let mut first_refusal = None;
    for n in 0..200 {
        let mut argv = vec!["true".to_owned()];
        argv.extend(std::iter::repeat_n(big.clone(), 18));
        let params = json!({"processId": format!("p{n}"), "argv": argv, "cwd": "/tmp", "env": {"PATH": "/usr/bin:/bin"}});
        let reply = server.call("process/start", params).await;
        if let Some(message) = reply["error"]["message"].as_str() {
            refused += 1;
            first_refusal.get_or_insert_with(|| message.to_owned());
        }
    }
    let message = first_refusal.expect("some start was refused");
    assert!(
        message.starts_with("process/start refused: its argv, env and cwd take 1844"),
        "{message}"
    );
    assert!(message.contains("on this connection (of 33554432)"), "{message}");
    // 32 MiB hold at most 17 such commands: the rest were refused.
    assert!(refused >= 200 - 18, "{refused} refused");
    let rss = crate::support::peak_rss_kib(server.child.id().unwrap());
    assert!(rss < 160 * 1024, "peak RSS {rss} KiB");
}

#[tokio::test]
async fn a_link_planted_on_the_socket_path_creates_nothing_at_its_target() {
    if !root_or_skip("a link planted by another uid") {
        return;
    }
    // A world-writable directory (not sticky), where uid 65534 plants a link
    // to a directory of root's.
    let shared = open_dir("listener-planted");
    let target = scratch("listener-planted-target");
    let link = shared.join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let c_link = std::ffi::CString::new(link.to_str().unwrap()).unwrap();
    // SAFETY: lchown of a link this test made.
    assert_eq!(unsafe { libc::lchown(c_link.as_ptr(), NOBODY, NOBODY) }, 0);
    let socket = link.join("sub/deeper/daemon.sock");
    let listen = format!("unix:{}", socket.display());
    for args in
        [vec!["--listen", listen.as_str()], vec!["--connect", listen.as_str(), "--spawn-daemon"]]
    {
        let output =
            std::process::Command::new(*BIN).args(&args).stdin(Stdio::null()).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        // The first hop another user could change is the shared directory itself.
        let expected = format!(
            "the socket's directory {} lies in {}, which another user could change (uid 0, mode 777)",
            link.join("sub/deeper").display(),
            shared.display()
        );
        assert!(stderr.contains(&expected), "{args:?}: {stderr}");
        assert!(
            !target.join("sub").exists(),
            "{args:?}: a directory appeared at the link's target"
        );
    }
}

#[tokio::test]
async fn a_launcher_starts_a_listening_server_with_a_token_and_connects_with_it() {
    let dir = scratch("listener-launcher");
    let file = token_file(&dir, "launch-token");
    let command = exec_server::LaunchCommand::new(*BIN)
        .arg("--ws-auth")
        .arg("capability-token")
        .arg("--ws-token-file")
        .arg(file.to_str().unwrap());
    let refused = exec_server::Launcher::spawn_listening(command.clone(), ClientOptions::default())
        .await
        .err()
        .expect("no token, no connection");
    assert!(refused.to_string().contains("401"), "{refused}");
    let options =
        ClientOptions { bearer_token: Some("launch-token".into()), ..ClientOptions::default() };
    let launcher = exec_server::Launcher::spawn_listening(command, options).await.unwrap();
    let list = launcher.client().list(exec_server::protocol::Empty {}).await.unwrap();
    assert!(list.processes.is_empty());
}

#[tokio::test]
async fn the_client_presents_the_codex_connection_token_variable() {
    let dir = scratch("listener-env-token");
    let token = token_file(&dir, "from-the-environment");
    let server = capability_server(&token).await;
    // In a child of this test binary: the variable is set for it alone.
    for (value, expected) in [
        ("from-the-environment", "CHILD: served".to_owned()),
        ("bad token", "CHILD: CODEX_EXEC_SERVER_CONNECTION_TOKEN is invalid: a bearer token is visible ASCII without spaces".to_owned()),
        ("", "CHILD: CODEX_EXEC_SERVER_CONNECTION_TOKEN is invalid: it is empty".to_owned()),
        ("wrong-token", format!("CHILD: cannot connect to {}: HTTP error: 401 Unauthorized", server.url)),
    ] {
        let output = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "listener::connection_token_child", "--nocapture", "--test-threads=1"])
            .env(exec_server::CONNECTION_TOKEN_ENV, value)
            .env("EXEC_SERVER_IT_TOKEN_URL", &server.url)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        let line =
            stderr.lines().find_map(|l| l.find("CHILD: ").map(|at| &l[at..])).unwrap_or_default();
        assert_eq!(line, expected, "{stderr}");
    }
}

/// A loopback listener that takes the capability token in `file`.
async fn capability_server(file: &Path) -> WsServer {
    let file = file.to_str().unwrap();
    WsServer::start(&[
        "--listen",
        "ws://127.0.0.1:0",
        "--ws-auth",
        "capability-token",
        "--ws-token-file",
        file,
    ])
    .await
}

/// The child of the test above (does nothing unless it set the URL).
#[tokio::test]
async fn connection_token_child() {
    let Ok(url) = std::env::var("EXEC_SERVER_IT_TOKEN_URL") else { return };
    match Client::connect_ws(&url, ClientOptions::default()).await {
        Ok(client) => {
            client.list(exec_server::protocol::Empty {}).await.unwrap();
            eprintln!("CHILD: served");
        }
        Err(error) => eprintln!("CHILD: {error}"),
    }
}

#[tokio::test]
async fn two_authorization_headers_are_refused_whatever_their_order() {
    let dir = scratch("listener-two-auth");
    let token = token_file(&dir, "the-one-token");
    let server = capability_server(&token).await;
    for extra in [
        "Authorization: Bearer the-one-token\r\nAuthorization: Bearer junk\r\n",
        "Authorization: Bearer junk\r\nAuthorization: Bearer the-one-token\r\n",
    ] {
        let head = upgrade_head(&server.url, extra).await;
        assert!(head.starts_with("HTTP/1.1 401 Unauthorized\r\n"), "{head}");
    }
    let head = upgrade_head(&server.url, "Authorization: Bearer the-one-token\r\n").await;
    assert!(head.starts_with("HTTP/1.1 101 Switching Protocols\r\n"), "{head}");
}
