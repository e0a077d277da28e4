//! `http/request` (today's dialect) against an HTTP server the test runs:
//! buffered and streamed bodies, redirects, timeouts, protected header
//! variables, the URL as sent, the bounds, and that nothing outlives the
//! connection.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use exec_server::server::{Config, HttpPolicy, HTTP_DELTA, MAX_HTTP_REQUESTS, MAX_REDIRECTS};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, Notify};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject as _;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::binary::{Binary, BIN};
use crate::support::{b64, unb64, within, Harness};

/// What the test's server saw of one request.
#[derive(Debug)]
struct Seen {
    line: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Seen {
    fn header(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// How the test's server answers.
enum Answer {
    /// These bytes, then close.
    Bytes(Vec<u8>),
    /// These bytes, then wait for `release`, then the rest.
    Held(Vec<u8>, Arc<Notify>, Vec<u8>),
    /// Nothing, until the client goes.
    Never,
}

/// A loopback HTTP/1.1 server: what it saw, how many connections it took,
/// and the request lines of connections the client closed.
struct TestServer {
    address: SocketAddr,
    seen: mpsc::UnboundedReceiver<Seen>,
    connections: Arc<AtomicUsize>,
    gone: mpsc::UnboundedReceiver<String>,
}

impl TestServer {
    async fn start(answer: impl Fn(&Seen) -> Answer + Send + Sync + 'static) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (seen_tx, seen) = mpsc::unbounded_channel();
        let (gone_tx, gone) = mpsc::unbounded_channel();
        let connections = Arc::new(AtomicUsize::new(0));
        let counted = connections.clone();
        let answer = Arc::new(answer);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                let (seen_tx, gone_tx, answer) = (seen_tx.clone(), gone_tx.clone(), answer.clone());
                tokio::spawn(async move {
                    let (reader, mut writer) = stream.into_split();
                    let mut reader = BufReader::new(reader);
                    let Some(request) = read_request(&mut reader).await else { return };
                    let line = request.line.clone();
                    let reply = answer(&request);
                    seen_tx.send(request).unwrap();
                    match reply {
                        Answer::Bytes(bytes) => {
                            let _ = writer.write_all(&bytes).await;
                            let _ = writer.shutdown().await;
                            return;
                        }
                        Answer::Held(first, release, rest) => {
                            if writer.write_all(&first).await.is_err() {
                                return;
                            }
                            tokio::select! {
                                () = release.notified() => {
                                    let _ = writer.write_all(&rest).await;
                                    let _ = writer.shutdown().await;
                                    return;
                                }
                                _ = reader.read_u8() => {}
                            }
                        }
                        Answer::Never => {
                            let _ = reader.read_u8().await;
                        }
                    }
                    // The client closed its end.
                    let _ = gone_tx.send(line);
                });
            }
        });
        TestServer { address, seen, connections, gone }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    async fn next_seen(&mut self) -> Seen {
        within("a request at the test's server", self.seen.recv()).await.unwrap()
    }
}

async fn read_request(reader: &mut BufReader<tokio::net::tcp::OwnedReadHalf>) -> Option<Seen> {
    let mut line = String::new();
    reader.read_line(&mut line).await.ok()?;
    let mut headers = Vec::new();
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).await.ok()?;
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':')?;
        headers.push((name.to_owned(), value.trim().to_owned()));
    }
    let length = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .map_or(0, |(_, v)| v.parse().unwrap());
    let mut body = vec![0; length];
    reader.read_exact(&mut body).await.ok()?;
    Some(Seen { line: line.trim_end().to_owned(), headers, body })
}

/// A whole response with `content-length` and `connection: close`.
fn response(status: &str, headers: &[(&str, &[u8])], body: &[u8]) -> Vec<u8> {
    let mut bytes = format!("HTTP/1.1 {status}\r\n").into_bytes();
    for (name, value) in headers {
        bytes.extend_from_slice(format!("{name}: ").as_bytes());
        bytes.extend_from_slice(value);
        bytes.extend_from_slice(b"\r\n");
    }
    let tail = format!("content-length: {}\r\nconnection: close\r\n\r\n", body.len());
    bytes.extend_from_slice(tail.as_bytes());
    bytes.extend_from_slice(body);
    bytes
}

fn ok(body: &str) -> Answer {
    Answer::Bytes(response("200 OK", &[], body.as_bytes()))
}

/// Params of a request named `id`.
fn request(id: &str, url: &str, extra: Value) -> Value {
    let mut params = json!({"method": "GET", "url": url, "requestId": id});
    params.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    params
}

#[tokio::test]
async fn a_buffered_request_sends_method_headers_and_body_and_answers_whole() {
    let mut server = TestServer::start(|_| {
        Answer::Bytes(response(
            "201 Created",
            &[
                ("X-MCP-Test", b"buffered"),
                ("x-twice", b"1"),
                ("x-twice", b"2"),
                ("x-latin", b"caf\xe9"),
            ],
            b"hello",
        ))
    })
    .await;
    let mut harness = Harness::ready().await;
    let params = request(
        "buffered-request",
        &server.url("/mcp?case=buffered"),
        json!({
            "method": "POST",
            "headers": [
                {"name": "authorization", "value": "Bearer token"},
                {"name": "x-repeat", "value": "a"},
                {"name": "x-repeat", "value": "b"},
            ],
            "bodyBase64": b64(b"request body"),
            "timeoutMs": null,
        }),
    );
    let result = harness.result("http/request", params).await;
    assert_eq!(
        result,
        json!({
            "status": 201,
            "headers": [
                {"name": "x-mcp-test", "value": "buffered"},
                {"name": "x-twice", "value": "1"},
                {"name": "x-twice", "value": "2"},
                {"name": "content-length", "value": "5"},
                {"name": "connection", "value": "close"},
            ],
            "bodyBase64": b64(b"hello"),
        })
    );
    let seen = server.next_seen().await;
    assert_eq!(seen.line, "POST /mcp?case=buffered HTTP/1.1");
    assert_eq!(seen.header("authorization"), ["Bearer token"]);
    assert_eq!(seen.header("x-repeat"), ["a", "b"]);
    assert_eq!(seen.header("host"), [server.address.to_string()]);
    assert_eq!(seen.body, b"request body");
}

#[tokio::test]
async fn the_fragment_is_never_sent() {
    let mut server = TestServer::start(|_| ok("")).await;
    let mut harness = Harness::ready().await;
    let url = server.url("/mcp?case=fragment#section");
    let result = harness.result("http/request", request("f", &url, json!({}))).await;
    assert_eq!(result["status"], 200);
    assert_eq!(server.next_seen().await.line, "GET /mcp?case=fragment HTTP/1.1");
}

#[tokio::test]
async fn a_streamed_body_comes_as_contiguous_deltas_after_the_response() {
    const SIZE: usize = 5 * 1024 * 1024;
    let body: Vec<u8> = (0..SIZE).map(|i| (i % 251) as u8).collect();
    let sent = body.clone();
    let server = TestServer::start(move |_| {
        Answer::Bytes(response("200 OK", &[("x-mcp-test", b"streamed")], &sent))
    })
    .await;
    let mut harness = Harness::ready().await;
    let params = request("stream-1", &server.url("/big"), json!({"streamResponse": true}));
    let id = harness.send_request("http/request", params).await;
    // The response is the first message about the request: before any delta.
    let first = harness.next().await;
    assert_eq!(first["id"], id, "the response must precede the deltas: {first}");
    assert_eq!(first["result"]["status"], 200);
    assert_eq!(first["result"]["bodyBase64"], "");
    assert_eq!(first["result"]["headers"][0], json!({"name": "x-mcp-test", "value": "streamed"}));
    let mut received = Vec::new();
    let mut seq = 0;
    let terminal = loop {
        let delta = harness.next().await;
        assert_eq!(delta["method"], "http/request/bodyDelta", "{delta}");
        let params = delta["params"].clone();
        seq += 1;
        assert_eq!(params["seq"], seq);
        assert_eq!(params["requestId"], "stream-1");
        if params["done"] == true {
            break params;
        }
        assert_eq!(params["error"], Value::Null);
        let bytes = unb64(&params["deltaBase64"]);
        assert!(!bytes.is_empty() && bytes.len() <= HTTP_DELTA, "delta of {} bytes", bytes.len());
        received.extend(bytes);
    };
    assert_eq!(
        terminal,
        json!({"requestId": "stream-1", "seq": seq, "deltaBase64": "", "done": true, "error": null})
    );
    assert!(seq > 5, "5 MiB in deltas of at most 1 MiB needs more than 5 (got {seq})");
    assert_eq!(received.len(), body.len());
    assert!(received == body, "the deltas concatenated differ from the body");
}

#[tokio::test]
async fn a_streamed_request_id_is_reserved_until_its_terminal_frame() {
    let release = Arc::new(Notify::new());
    let held = release.clone();
    let mut server = TestServer::start(move |seen| {
        if seen.line.starts_with("GET /held ") {
            let head = b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhello".to_vec();
            Answer::Held(head, held.clone(), b"world".to_vec())
        } else {
            ok("other")
        }
    })
    .await;
    let mut harness = Harness::ready().await;
    let stream = json!({"streamResponse": true});
    let result = harness
        .result("http/request", request("stream-dup", &server.url("/held"), stream.clone()))
        .await;
    assert_eq!(result["status"], 200);
    server.next_seen().await;
    let error = harness
        .error("http/request", request("stream-dup", &server.url("/x"), stream.clone()))
        .await;
    assert_eq!(
        error,
        json!({"code": -32602, "message": "http/request streamResponse requestId `stream-dup` is already active"})
    );
    // A buffered request reserves nothing, whatever its id.
    let other =
        harness.result("http/request", request("stream-dup", &server.url("/x"), json!({}))).await;
    assert_eq!(unb64(&other["bodyBase64"]), b"other");
    release.notify_one();
    let mut body = Vec::new();
    loop {
        let delta = harness
            .take("a delta of stream-dup", |m| m["method"] == "http/request/bodyDelta")
            .await;
        body.extend(unb64(&delta["params"]["deltaBase64"]));
        if delta["params"]["done"] == true {
            assert_eq!(delta["params"]["error"], Value::Null);
            break;
        }
    }
    assert_eq!(body, b"helloworld");
    // Free again once the terminal frame is out.
    let again =
        harness.result("http/request", request("stream-dup", &server.url("/x"), stream)).await;
    assert_eq!(again["status"], 200);
}

#[tokio::test]
async fn redirects_are_followed_or_returned_as_they_are() {
    let mut server = TestServer::start(|seen| match seen.line.split(' ').nth(1).unwrap() {
        "/start" => Answer::Bytes(response("302 Found", &[("location", b"/final")], b"redirect")),
        "/final" => Answer::Bytes(response("200 OK", &[("x-mcp-test", b"final")], b"final")),
        _ => ok("probe"),
    })
    .await;
    let mut harness = Harness::ready().await;
    let followed =
        harness.result("http/request", request("r1", &server.url("/start"), json!({}))).await;
    assert_eq!(followed["status"], 200);
    assert_eq!(followed["headers"][0], json!({"name": "x-mcp-test", "value": "final"}));
    assert_eq!(unb64(&followed["bodyBase64"]), b"final");
    assert_eq!(server.next_seen().await.line, "GET /start HTTP/1.1");
    assert_eq!(server.next_seen().await.line, "GET /final HTTP/1.1");

    let stop = json!({"redirectPolicy": "stop"});
    let stopped = harness.result("http/request", request("r2", &server.url("/start"), stop)).await;
    assert_eq!(stopped["status"], 302);
    assert_eq!(stopped["headers"][0], json!({"name": "location", "value": "/final"}));
    assert_eq!(unb64(&stopped["bodyBase64"]), b"redirect");
    assert_eq!(server.next_seen().await.line, "GET /start HTTP/1.1");
    // The next request the server sees is the probe: /final was never asked for.
    harness.result("http/request", request("r3", &server.url("/probe"), json!({}))).await;
    assert_eq!(server.next_seen().await.line, "GET /probe HTTP/1.1");
}

#[tokio::test]
async fn a_redirect_loop_ends_after_the_last_hop() {
    let mut server = TestServer::start(|_| {
        Answer::Bytes(response("307 Temporary Redirect", &[("location", b"/loop")], b""))
    })
    .await;
    let mut harness = Harness::ready().await;
    let url = server.url("/loop");
    let error = harness.error("http/request", request("l", &url, json!({"method": "POST"}))).await;
    let text =
        format!("http/request failed: too many redirects (more than {MAX_REDIRECTS}) from {url}");
    assert_eq!(error, json!({"code": -32603, "message": text}));
    for _ in 0..=MAX_REDIRECTS {
        // A 307 keeps the method.
        assert_eq!(server.next_seen().await.line, "POST /loop HTTP/1.1");
    }
    assert_eq!(server.connections.load(Ordering::SeqCst), MAX_REDIRECTS + 1);
}

#[tokio::test]
async fn requests_in_flight_are_bounded_per_connection() {
    let mut server = TestServer::start(|_| Answer::Never).await;
    let mut harness = Harness::ready().await;
    for n in 0..MAX_HTTP_REQUESTS {
        harness
            .send_request(
                "http/request",
                request(&format!("h{n}"), &server.url("/hang"), json!({})),
            )
            .await;
    }
    for _ in 0..MAX_HTTP_REQUESTS {
        server.next_seen().await;
    }
    let error =
        harness.error("http/request", request("over", &server.url("/hang"), json!({}))).await;
    let text = format!(
        "http/request refused: at most {MAX_HTTP_REQUESTS} requests may be in flight per connection (MAX_HTTP_REQUESTS)"
    );
    assert_eq!(error, json!({"code": -32600, "message": text}));
}

#[tokio::test]
async fn a_timeout_bounds_the_exchange_and_buffered_ids_can_repeat() {
    let mut server = TestServer::start(|_| Answer::Never).await;
    let mut harness = Harness::ready().await;
    for _ in 0..2 {
        let params = request("buffered-request", &server.url("/slow"), json!({"timeoutMs": 10}));
        let error = harness.error("http/request", params).await;
        assert_eq!(error["code"], -32603);
        assert_eq!(error["message"], "http/request failed: timed out after 10 ms (timeoutMs)");
        server.next_seen().await;
        // The server's connection was dropped with the request.
        assert_eq!(
            within("the timed-out connection to close", server.gone.recv()).await.unwrap(),
            "GET /slow HTTP/1.1"
        );
    }
}

#[tokio::test]
async fn a_protected_variable_is_refused_before_any_connection() {
    let mut server = TestServer::start(|_| ok("fine")).await;
    let mut harness = Harness::ready().await;
    let header =
        json!({"name": "authorization", "value": "Bearer ", "valueEnvVar": "OpenAI_Api_Key"});
    let params = request("p", &server.url("/secret"), json!({"headers": [header]}));
    let error = harness.error("http/request", params).await;
    assert_eq!(
        error,
        json!({"code": -32602, "message": "http/request header authorization cannot use executor environment variable OpenAI_Api_Key"})
    );
    let error = harness.error("http/request", request("p", "gopher://h/", json!({}))).await;
    assert_eq!(error["message"], "http/request only supports http and https URLs, got gopher");
    // No connection was opened by any refusal: the first one is this request's.
    harness.result("http/request", request("p", &server.url("/after"), json!({}))).await;
    assert_eq!(server.next_seen().await.line, "GET /after HTTP/1.1");
    assert_eq!(server.connections.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_unicode_host_is_sent_as_punycode() {
    // `*.localhost` is loopback (RFC 6761): the server connects without a lookup.
    let mut server = TestServer::start(|_| ok("")).await;
    let port = server.address.port();
    let mut harness = Harness::ready().await;
    let url = format!("http://München.localhost:{port}/");
    harness.result("http/request", request("u", &url, json!({}))).await;
    assert_eq!(
        server.next_seen().await.header("host"),
        [format!("xn--mnchen-3ya.localhost:{port}")]
    );
}

#[tokio::test]
async fn a_connection_that_ends_mid_stream_leaves_nothing_running() {
    let release = Arc::new(Notify::new());
    let held = release.clone();
    let mut server = TestServer::start(move |_| {
        let head = b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npart".to_vec();
        Answer::Held(head, held.clone(), Vec::new())
    })
    .await;
    let mut harness = Harness::ready().await;
    let params = request("s", &server.url("/endless"), json!({"streamResponse": true}));
    harness.result("http/request", params).await;
    let delta = harness.take("the first delta", |m| m["method"] == "http/request/bodyDelta").await;
    assert_eq!(unb64(&delta["params"]["deltaBase64"]), b"part");
    harness.close_input().await;
    // The stream ends with an error frame, and the server with the connection.
    let terminal = harness.take("the terminal frame", |m| m["params"]["done"] == true).await;
    assert_eq!(
        terminal["params"],
        json!({"requestId": "s", "seq": 2, "deltaBase64": "", "done": true, "error": "the connection is ending"})
    );
    within("the server to end", &mut harness.server).await.unwrap().unwrap();
    // The exchange's connection went with it.
    assert_eq!(
        within("the stream's connection to close", server.gone.recv()).await.unwrap(),
        "GET /endless HTTP/1.1"
    );
}

#[tokio::test]
async fn the_method_is_gated_listed_and_can_be_turned_off() {
    let mut fresh = Harness::new();
    let error = fresh.error("http/request", request("g", "http://127.0.0.1:1/", json!({}))).await;
    assert_eq!(
        error,
        json!({"code": -32600, "message": "client must call initialize before using http methods"})
    );
    let init = fresh.result("initialize", json!({"clientName": "it"})).await;
    let methods = init["capabilities"]["methods"].as_array().unwrap();
    assert!(methods.contains(&json!("http/request")), "{methods:?}");
    let notifications = init["capabilities"]["notifications"].as_array().unwrap();
    assert!(notifications.contains(&json!("http/request/bodyDelta")), "{notifications:?}");

    let config = Config { http_requests: HttpPolicy::None, ..Config::default() };
    let mut off = Harness::ready_with(config).await;
    let error = off.error("http/request", request("o", "http://127.0.0.1:1/", json!({}))).await;
    assert_eq!(error, json!({"code": -32600, "message": OFF}));
}

const OFF: &str =
    "http/request refused: http requests are off on this server (--http-requests none)";

#[tokio::test]
async fn the_binary_refuses_with_http_requests_none() {
    let mut server = Binary::ready(&["--http-requests", "none"]).await;
    let response =
        server.call("http/request", request("b", "http://127.0.0.1:1/", json!({}))).await;
    assert_eq!(response["error"], json!({"code": -32600, "message": OFF}));
}

/// The binary with `env` set (and `EXEC_SERVER_IT_UNSET` unset), after the handshake.
async fn binary_with_env(env: &[(&str, &str)]) -> Binary {
    let mut command = tokio::process::Command::new(*BIN);
    command.envs(env.iter().copied()).env_remove("EXEC_SERVER_IT_UNSET");
    let mut server = Binary::from_command(command);
    server.result("initialize", json!({"clientName": "it"})).await;
    server.send_line(r#"{"method":"initialized"}"#).await;
    server
}

#[tokio::test]
async fn header_variables_come_from_the_server_environment() {
    let mut http = TestServer::start(|_| ok("")).await;
    let env = [("EXEC_SERVER_IT_TOKEN", "executor-token"), ("EXEC_SERVER_IT_EMPTY", "")];
    let mut server = binary_with_env(&env).await;
    let header =
        |var: &str| json!({"name": "authorization", "value": "Bearer ", "valueEnvVar": var});
    let params =
        request("v", &http.url("/env"), json!({"headers": [header("EXEC_SERVER_IT_TOKEN")]}));
    assert_eq!(server.result("http/request", params).await["status"], 200);
    assert_eq!(http.next_seen().await.header("authorization"), ["Bearer executor-token"]);
    for (var, text) in [
        ("EXEC_SERVER_IT_UNSET", "http/request header authorization requires executor environment variable EXEC_SERVER_IT_UNSET"),
        ("EXEC_SERVER_IT_EMPTY", "http/request header authorization requires a non-empty executor environment variable EXEC_SERVER_IT_EMPTY"),
    ] {
        let params = request("v", &http.url("/env"), json!({"headers": [header(var)]}));
        let response = server.call("http/request", params).await;
        assert_eq!(response["error"], json!({"code": -32602, "message": text}));
    }
    assert_eq!(http.connections.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn https_is_verified_against_the_system_roots() {
    // The test's CA is the only root the binary trusts (rustls-native-certs reads SSL_CERT_FILE).
    let tls = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/tls");
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(format!("{tls}/localhost.pem"))
            .unwrap()
            .map(Result::unwrap)
            .collect();
    let key = PrivateKeyDer::from_pem_file(format!("{tls}/localhost.key")).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (lines_tx, mut lines) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (acceptor, lines_tx) = (acceptor.clone(), lines_tx.clone());
            tokio::spawn(async move {
                let Ok(stream) = acceptor.accept(stream).await else { return };
                let mut stream = BufReader::new(stream);
                let mut line = String::new();
                stream.read_line(&mut line).await.unwrap();
                lines_tx.send(line.trim_end().to_owned()).unwrap();
                loop {
                    let mut header = String::new();
                    stream.read_line(&mut header).await.unwrap();
                    if header.trim_end().is_empty() {
                        break;
                    }
                }
                stream.write_all(&response("200 OK", &[], b"secure")).await.unwrap();
                stream.shutdown().await.unwrap();
            });
        }
    });
    let mut server = binary_with_env(&[("SSL_CERT_FILE", &format!("{tls}/ca.pem"))]).await;
    let url = format!("https://localhost:{port}/tls?x=1");
    let result = server.result("http/request", request("t", &url, json!({}))).await;
    assert_eq!(result["status"], 200);
    assert_eq!(unb64(&result["bodyBase64"]), b"secure");
    assert_eq!(within("the TLS request", lines.recv()).await.unwrap(), "GET /tls?x=1 HTTP/1.1");
    // The certificate names localhost and 127.0.0.1, not other.localhost: refused.
    let url = format!("https://other.localhost:{port}/");
    let response = server.call("http/request", request("t", &url, json!({}))).await;
    assert_eq!(response["error"]["code"], -32603);
    let message = response["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("http/request failed: TLS handshake with other.localhost:"),
        "{message}"
    );
}
