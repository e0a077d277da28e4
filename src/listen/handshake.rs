//! The HTTP side of a WebSocket connection: reading the upgrade request
//! (bounded in size; the caller bounds it in time), deciding, and answering:
//! 101 for an upgrade, 200 for `GET /readyz`, and for every refusal an HTTP
//! status with a line of text (400, 401, 403, 426, 503).

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;

use super::auth::Auth;

/// The longest request head accepted.
const MAX_HEAD: usize = 16 * 1024;

/// What became of the request.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Upgraded (101 sent); the bytes read after the head belong to the first frames.
    Upgraded {
        /// Bytes read after the head.
        leftover: Vec<u8>,
        /// The request's `x-request-id`, if it had a printable one.
        request_id: Option<String>,
    },
    /// Answered with a status and closed: a refusal, or `GET /readyz`.
    Answered {
        /// The status sent.
        status: u16,
        /// The request's `x-request-id`, if it had a printable one.
        request_id: Option<String>,
    },
    /// The peer closed before sending a whole head.
    Gone,
}

/// Reads the request, answers it, and says what happened. `admit` is asked
/// last, just before the 101: whether a connection slot is free (else 503).
pub(super) async fn handshake<S>(
    stream: &mut S,
    auth: &Auth,
    admit: impl FnOnce() -> bool,
) -> io::Result<Outcome>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut head = Vec::with_capacity(1024);
    let end = loop {
        if let Some(at) = find(&head, b"\r\n\r\n") {
            break at + 4;
        }
        // Bare line feeds are tolerated (RFC 9112 allows it of a recipient).
        if let Some(at) = find(&head, b"\n\n") {
            break at + 2;
        }
        if head.len() >= MAX_HEAD {
            let text = format!("the request head is over {MAX_HEAD} bytes");
            return refuse(stream, 400, &text, "", None).await;
        }
        let mut chunk = [0u8; 2048];
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(Outcome::Gone);
        }
        head.extend_from_slice(&chunk[..n]);
    };
    let leftover = head.split_off(end);
    let Ok(text) = std::str::from_utf8(&head) else {
        return refuse(stream, 400, "the request head is not UTF-8", "", None).await;
    };
    let request = match Request::parse(text) {
        Ok(request) => request,
        Err(problem) => return refuse(stream, 400, problem, "", None).await,
    };
    let request_id = request.header("x-request-id").filter(|id| printable(id)).map(str::to_owned);
    let echo = request_id.as_ref().map(|id| format!("x-request-id: {id}\r\n")).unwrap_or_default();
    let echo = echo.as_str();
    if request.method == "GET" && request.path == "/readyz" {
        let answer = format!("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\nConnection: close\r\n{echo}\r\nok\n");
        stream.write_all(answer.as_bytes()).await?;
        let _ = stream.shutdown().await;
        return Ok(Outcome::Answered { status: 200, request_id });
    }
    if request.header("origin").is_some() {
        return refuse(stream, 403, "requests from web pages are refused", echo, request_id).await;
    }
    let twice =
        request.headers.iter().filter(|(n, _)| n.eq_ignore_ascii_case("authorization")).count() > 1;
    let checked = if twice && auth.needs_token() {
        // Readers differ on which of two counts: neither does.
        Err("the request carries more than one Authorization header")
    } else {
        auth.check(request.header("authorization"))
    };
    if let Err(why) = checked {
        // The reason, never the token.
        tracing::info!(reason = why, "refused an upgrade: 401");
        let challenge = format!("WWW-Authenticate: Bearer\r\n{echo}");
        return refuse(stream, 401, why, &challenge, request_id).await;
    }
    if request.method != "GET" {
        return refuse(stream, 400, "a WebSocket upgrade is a GET request", echo, request_id).await;
    }
    let upgrade = request.header("upgrade").is_some_and(|v| has_token(v, "websocket"));
    let connection = request.header("connection").is_some_and(|v| has_token(v, "upgrade"));
    if !upgrade || !connection {
        let offer = format!("Upgrade: websocket\r\nConnection: Upgrade\r\n{echo}");
        let text = "this server speaks WebSocket only: send an upgrade request";
        return refuse(stream, 426, text, &offer, request_id).await;
    }
    if request.header("sec-websocket-version") != Some("13") {
        let offer = format!("Sec-WebSocket-Version: 13\r\n{echo}");
        return refuse(stream, 426, "only WebSocket version 13 is spoken", &offer, request_id)
            .await;
    }
    let Some(key) = request.header("sec-websocket-key") else {
        return refuse(stream, 400, "the upgrade has no Sec-WebSocket-Key", echo, request_id).await;
    };
    let nonce = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, key);
    if request.count("sec-websocket-key") > 1 || nonce.map_or(true, |n| n.len() != 16) {
        let text = "Sec-WebSocket-Key must be one base64-encoded 16-byte nonce";
        return refuse(stream, 400, text, echo, request_id).await;
    }
    if !admit() {
        let text = "the server has too many connections";
        return refuse(stream, 503, text, &format!("Retry-After: 1\r\n{echo}"), request_id).await;
    }
    let accept = derive_accept_key(key.as_bytes());
    let response = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n{echo}\r\n"
    );
    stream.write_all(response.as_bytes()).await?;
    stream.flush().await?;
    Ok(Outcome::Upgraded { leftover, request_id })
}

/// The parts of a request head the decision needs.
struct Request<'a> {
    method: &'a str,
    path: &'a str,
    headers: Vec<(&'a str, &'a str)>,
}

impl<'a> Request<'a> {
    fn parse(head: &'a str) -> Result<Request<'a>, &'static str> {
        if head.contains('\0') {
            return Err("the request head holds a NUL byte");
        }
        let mut lines = head.split('\n').map(|line| line.strip_suffix('\r').unwrap_or(line));
        let first = lines.next().unwrap_or("");
        let mut parts = first.split(' ');
        let (Some(method), Some(path), Some(version)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err("the request line is malformed");
        };
        if !version.starts_with("HTTP/1.") || parts.next().is_some() {
            return Err("the request line is malformed");
        }
        if version == "HTTP/1.0" {
            return Err("a WebSocket upgrade needs HTTP/1.1");
        }
        let mut headers = Vec::new();
        for line in lines.filter(|line| !line.is_empty()) {
            let Some((name, value)) = line.split_once(':') else {
                return Err("a header line has no colon");
            };
            headers.push((name.trim(), value.trim()));
        }
        Ok(Request { method, path, headers })
    }

    fn count(&self, name: &str) -> usize {
        self.headers.iter().filter(|(n, _)| n.eq_ignore_ascii_case(name)).count()
    }

    fn header(&self, name: &str) -> Option<&'a str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| *v)
    }
}

/// Whether a comma-separated header value holds `token` (any case).
fn has_token(value: &str, token: &str) -> bool {
    value.split(',').any(|part| part.trim().eq_ignore_ascii_case(token))
}

async fn refuse<S>(
    stream: &mut S,
    status: u16,
    text: &str,
    extra: &str,
    request_id: Option<String>,
) -> io::Result<Outcome>
where
    S: AsyncWrite + Unpin,
{
    stream.write_all(answer(status, text, extra).as_bytes()).await?;
    let _ = stream.shutdown().await;
    Ok(Outcome::Answered { status, request_id })
}

/// An HTTP answer of `status` whose body is the line `text (status)`;
/// `extra` holds header lines, each ending in CRLF.
pub(super) fn answer(status: u16, text: &str, extra: &str) -> String {
    let reason = match status {
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        426 => "Upgrade Required",
        503 => "Service Unavailable",
        _ => "Error",
    };
    let body = format!("{text} ({status})\n");
    format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n{extra}\r\n{body}",
        body.len()
    )
}

/// Whether a header value may be echoed: visible ASCII, at most 200 bytes.
fn printable(value: &str) -> bool {
    !value.is_empty() && value.len() <= 200 && value.bytes().all(|b| b.is_ascii_graphic())
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|window| window == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn answer(request: &str, token: Option<&str>) -> (Outcome, String) {
        let (mut client, mut server) = tokio::io::duplex(64 * 1024);
        client.write_all(request.as_bytes()).await.unwrap();
        let auth = token.map_or(Auth::OwnerOnly, Auth::capability);
        let outcome = handshake(&mut server, &auth, || true).await.unwrap();
        drop(server);
        let mut response = String::new();
        client.read_to_string(&mut response).await.unwrap();
        (outcome, response.lines().next().unwrap_or("").to_owned())
    }

    const UPGRADE: &str = "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n";

    #[tokio::test]
    async fn every_refusal_has_a_status() {
        let cases = [
            (format!("{UPGRADE}\r\n{{\"first\":1}}"), None, "HTTP/1.1 101 Switching Protocols"),
            (format!("{UPGRADE}Origin: http://evil\r\n\r\n"), None, "HTTP/1.1 403 Forbidden"),
            (format!("{UPGRADE}\r\n"), Some("t"), "HTTP/1.1 401 Unauthorized"),
            (
                format!("{UPGRADE}Authorization: Bearer t\r\n\r\n"),
                Some("t"),
                "HTTP/1.1 101 Switching Protocols",
            ),
            ("GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_owned(), None, "HTTP/1.1 426 Upgrade Required"),
            (
                UPGRADE.replace("Version: 13", "Version: 8") + "\r\n",
                None,
                "HTTP/1.1 426 Upgrade Required",
            ),
            (
                UPGRADE.replace("Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n", "") + "\r\n",
                None,
                "HTTP/1.1 400 Bad Request",
            ),
            ("POST / HTTP/1.1\r\n\r\n".to_owned(), None, "HTTP/1.1 400 Bad Request"),
            ("nonsense\r\n\r\n".to_owned(), None, "HTTP/1.1 400 Bad Request"),
            ("GET /readyz HTTP/1.1\n\n".to_owned(), None, "HTTP/1.1 200 OK"),
            (UPGRADE.replace("\r\n", "\n") + "\n", None, "HTTP/1.1 101 Switching Protocols"),
            (
                UPGRADE.replace("dGhlIHNhbXBsZSBub25jZQ==", "x") + "\r\n",
                None,
                "HTTP/1.1 400 Bad Request",
            ),
            (
                format!("{UPGRADE}Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"),
                None,
                "HTTP/1.1 400 Bad Request",
            ),
            (UPGRADE.replace("HTTP/1.1", "HTTP/1.0") + "\r\n", None, "HTTP/1.1 400 Bad Request"),
            ("GET /readyz HTTP/1.1\r\n\r\n".to_owned(), None, "HTTP/1.1 200 OK"),
            (
                format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(MAX_HEAD)),
                None,
                "HTTP/1.1 400 Bad Request",
            ),
        ];
        for (request, token, status) in cases {
            let (_, line) = answer(&request, token).await;
            assert_eq!(line, status, "{request:.80}");
        }
        let (outcome, _) = answer(&format!("{UPGRADE}\r\n{{\"first\":1}}"), None).await;
        let leftover = b"{\"first\":1}".to_vec();
        assert_eq!(outcome, Outcome::Upgraded { leftover, request_id: None });
    }

    #[tokio::test]
    async fn the_request_id_is_echoed_and_a_full_server_answers_503() {
        let request = format!("{UPGRADE}X-Request-Id: abc-123\r\n\r\n");
        let (mut client, mut server) = tokio::io::duplex(64 * 1024);
        client.write_all(request.as_bytes()).await.unwrap();
        let outcome = handshake(&mut server, &Auth::OwnerOnly, || true).await.unwrap();
        let leftover = Vec::new();
        assert_eq!(outcome, Outcome::Upgraded { leftover, request_id: Some("abc-123".into()) });
        drop(server);
        let mut response = String::new();
        client.read_to_string(&mut response).await.unwrap();
        assert!(response.contains("\r\nx-request-id: abc-123\r\n"), "{response}");

        let (mut client, mut server) = tokio::io::duplex(64 * 1024);
        client.write_all(request.as_bytes()).await.unwrap();
        let outcome = handshake(&mut server, &Auth::OwnerOnly, || false).await.unwrap();
        assert_eq!(outcome, Outcome::Answered { status: 503, request_id: Some("abc-123".into()) });
        let injected = format!("{UPGRADE}X-Request-Id: a\rb\r\n\r\n");
        let (mut client, mut server) = tokio::io::duplex(64 * 1024);
        client.write_all(injected.as_bytes()).await.unwrap();
        let outcome = handshake(&mut server, &Auth::OwnerOnly, || true).await.unwrap();
        assert_eq!(outcome, Outcome::Upgraded { leftover: Vec::new(), request_id: None });
    }
}
