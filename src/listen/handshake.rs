//! The HTTP side of a WebSocket connection: reading the upgrade request
//! (bounded in size; the caller bounds it in time), deciding, and answering:
//! 101 for an upgrade, 200 for `GET /readyz`, and for every refusal an HTTP
//! status with a line of text (400, 401, 403, 426, 503).

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;

/// The longest request head accepted.
const MAX_HEAD: usize = 16 * 1024;

/// What became of the request.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Upgraded (101 sent); the bytes read after the head belong to the first frames.
    Upgraded { leftover: Vec<u8> },
    /// Answered with a status and closed: a refusal, or `GET /readyz`.
    Answered(u16),
    /// The peer closed before sending a whole head.
    Gone,
}

/// The 503 a connection over `--max-connections` gets, written without reading its request.
pub(super) const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 42\r\nConnection: close\r\nRetry-After: 1\r\n\r\nthe server has too many connections (503)\n";

/// Reads the request, answers it, and says what happened.
pub(super) async fn handshake<S>(stream: &mut S, token: Option<&str>) -> io::Result<Outcome>
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
            return refuse(stream, 400, &text, "").await;
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
        return refuse(stream, 400, "the request head is not UTF-8", "").await;
    };
    let request = match Request::parse(text) {
        Ok(request) => request,
        Err(problem) => return refuse(stream, 400, problem, "").await,
    };
    if request.method == "GET" && request.path == "/readyz" {
        stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n").await?;
        let _ = stream.shutdown().await;
        return Ok(Outcome::Answered(200));
    }
    if request.header("origin").is_some() {
        return refuse(stream, 403, "requests from web pages are refused", "").await;
    }
    if let Some(token) = token {
        let presented = request
            .header("authorization")
            .and_then(|value| value.strip_prefix("Bearer "))
            .unwrap_or("");
        if !same_secret(presented.as_bytes(), token.as_bytes()) {
            let challenge = "WWW-Authenticate: Bearer\r\n";
            return refuse(stream, 401, "a valid bearer token is required", challenge).await;
        }
    }
    if request.method != "GET" {
        return refuse(stream, 400, "a WebSocket upgrade is a GET request", "").await;
    }
    let upgrade = request.header("upgrade").is_some_and(|v| has_token(v, "websocket"));
    let connection = request.header("connection").is_some_and(|v| has_token(v, "upgrade"));
    if !upgrade || !connection {
        let offer = "Upgrade: websocket\r\nConnection: Upgrade\r\n";
        return refuse(
            stream,
            426,
            "this server speaks WebSocket only: send an upgrade request",
            offer,
        )
        .await;
    }
    if request.header("sec-websocket-version") != Some("13") {
        let offer = "Sec-WebSocket-Version: 13\r\n";
        return refuse(stream, 426, "only WebSocket version 13 is spoken", offer).await;
    }
    let Some(key) = request.header("sec-websocket-key") else {
        return refuse(stream, 400, "the upgrade has no Sec-WebSocket-Key", "").await;
    };
    let nonce = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, key);
    if request.count("sec-websocket-key") > 1 || nonce.map_or(true, |n| n.len() != 16) {
        let text = "Sec-WebSocket-Key must be one base64-encoded 16-byte nonce";
        return refuse(stream, 400, text, "").await;
    }
    let accept = derive_accept_key(key.as_bytes());
    let response = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n"
    );
    stream.write_all(response.as_bytes()).await?;
    stream.flush().await?;
    Ok(Outcome::Upgraded { leftover })
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

async fn refuse<S>(stream: &mut S, status: u16, text: &str, extra: &str) -> io::Result<Outcome>
where
    S: AsyncWrite + Unpin,
{
    let reason = match status {
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        426 => "Upgrade Required",
        503 => "Service Unavailable",
        _ => "Error",
    };
    let body = format!("{text} ({status})\n");
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n{extra}\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    let _ = stream.shutdown().await;
    Ok(Outcome::Answered(status))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|window| window == needle)
}

/// Compares two secrets in time that depends only on their lengths.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn answer(request: &str, token: Option<&str>) -> (Outcome, String) {
        let (mut client, mut server) = tokio::io::duplex(64 * 1024);
        client.write_all(request.as_bytes()).await.unwrap();
        let outcome = handshake(&mut server, token).await.unwrap();
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
        assert_eq!(outcome, Outcome::Upgraded { leftover: b"{\"first\":1}".to_vec() });
    }

    #[test]
    fn the_busy_answer_says_its_length() {
        let text = std::str::from_utf8(BUSY).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("Content-Length: {}", body.len())), "{head}");
    }

    #[test]
    fn secrets_compare_by_content_and_length() {
        assert!(same_secret(b"s3cret", b"s3cret"));
        assert!(!same_secret(b"s3cret", b"s3creT"));
        assert!(!same_secret(b"s3cret", b"s3cret!"));
        assert!(!same_secret(b"", b"x"));
    }
}
