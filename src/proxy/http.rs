//! The HTTP door: `CONNECT host:port` (answered 200, then spliced) and plain
//! requests in absolute form (`GET http://host/path`), sent on in origin
//! form with `Connection: close`, so one connection carries one request to
//! the one host decided. A refusal is a 403 whose one-line body names the
//! host and the reason; a failed dial a 502.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::gate::{Gate, Refused};

/// The longest request head taken.
const MAX_HEAD: usize = 64 * 1024;
/// One read of the head.
const CHUNK: usize = 4096;
/// How long the head may take to arrive.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// What a request asks of the proxy.
#[derive(Debug, PartialEq, Eq)]
enum Asked {
    /// `CONNECT host:port`.
    Tunnel { host: String, port: u16 },
    /// A plain request: its head rewritten for the origin server.
    Forward { host: String, port: u16, head: Vec<u8> },
}

pub(super) async fn serve(mut stream: TcpStream, gate: &Gate) {
    // The head's buffer is held in the server's room while it is read.
    let Some(_held) = gate.hold(MAX_HEAD + CHUNK) else {
        let full = "exec-server refused the request: the server holds all the buffered bytes it may (--max-retained-bytes)";
        return respond(&mut stream, 403, full).await;
    };
    let mut buffer = Vec::with_capacity(CHUNK);
    let head_end =
        match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut stream, &mut buffer)).await {
            Ok(Ok(Some(end))) => end,
            Ok(Ok(None)) => {
                return respond(&mut stream, 431, "the request head is longer than 64 KiB").await
            }
            Ok(Err(_)) | Err(_) => return,
        };
    let asked = match parse(&buffer[..head_end]) {
        Ok(asked) => asked,
        Err(reason) => return respond(&mut stream, 400, reason).await,
    };
    let rest = &buffer[head_end..];
    let (host, port) = match &asked {
        Asked::Tunnel { host, port } | Asked::Forward { host, port, .. } => (host.clone(), *port),
    };
    let shown = crate::dial::shown(&host, port);
    let admitted = match gate.admit(&host, port).await {
        Ok(admitted) => admitted,
        Err(Refused::Policy(reason)) => {
            return respond(&mut stream, 403, &format!("exec-server refused {shown}: {reason}"))
                .await
        }
        Err(Refused::Dial(error)) => {
            let text = format!("exec-server cannot connect to {shown}: {error}");
            return respond(&mut stream, 502, &text).await;
        }
        Err(Refused::Malformed(reason)) => {
            return respond(&mut stream, 400, &format!("exec-server refused the request: {reason}"))
                .await
        }
    };
    match asked {
        Asked::Tunnel { .. } => {
            let established = b"HTTP/1.1 200 Connection established\r\n\r\n";
            if stream.write_all(established).await.is_ok() {
                super::splice::splice(stream, admitted, rest).await;
            }
        }
        Asked::Forward { mut head, .. } => {
            head.extend_from_slice(rest);
            super::splice::splice(stream, admitted, &head).await;
        }
    }
}

/// Reads until the blank line that ends the head: its end, or `None` when
/// it is longer than [`MAX_HEAD`]. Bytes past it stay in `buffer`.
async fn read_head(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> std::io::Result<Option<usize>> {
    let mut chunk = [0u8; CHUNK];
    loop {
        if let Some(at) = memchr::memmem::find(buffer, b"\r\n\r\n") {
            return Ok(Some(at + 4));
        }
        if buffer.len() > MAX_HEAD {
            return Ok(None);
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
}

/// The request line and headers: what is asked, or why it cannot be.
fn parse(head: &[u8]) -> Result<Asked, &'static str> {
    let text = std::str::from_utf8(head).map_err(|_| "the request head is not UTF-8")?;
    let mut lines = text.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("a malformed request line");
    };
    if !version.starts_with("HTTP/1.") {
        return Err("only HTTP/1.x is proxied");
    }
    if method == "CONNECT" {
        let (host, port) = authority(target, None).ok_or("CONNECT needs host:port")?;
        return Ok(Asked::Tunnel { host, port });
    }
    let rest = target
        .strip_prefix("http://")
        .ok_or("a plain request needs an absolute http:// URL (use CONNECT for https)")?;
    let (authority_text, path) = match rest.find(['/', '?']) {
        Some(at) => (&rest[..at], &rest[at..]),
        None => (rest, "/"),
    };
    let path = if path.starts_with('?') { format!("/{path}") } else { path.to_owned() };
    let (host, port) = authority(authority_text, Some(80)).ok_or("a malformed host in the URL")?;
    // The Host header is the URL's authority, the host decided (a
    // different one from the program is dropped).
    let mut out = format!("{method} {path} {version}\r\nHost: {authority_text}\r\n");
    for header in lines.filter(|l| !l.is_empty()) {
        let name = header.split(':').next().unwrap_or_default().trim().to_ascii_lowercase();
        if matches!(
            name.as_str(),
            "proxy-connection" | "proxy-authorization" | "connection" | "keep-alive" | "host"
        ) {
            continue;
        }
        out.push_str(header);
        out.push_str("\r\n");
    }
    out.push_str("Connection: close\r\n\r\n");
    Ok(Asked::Forward { host, port, head: out.into_bytes() })
}

/// `host:port` (`[v6]:port`), the port optional when `default` is given;
/// `userinfo@` is refused.
fn authority(text: &str, default: Option<u16>) -> Option<(String, u16)> {
    if text.contains('@') || text.is_empty() {
        return None;
    }
    let (host, port) = if let Some(v6) = text.strip_prefix('[') {
        let end = v6.find(']')?;
        let port = v6[end + 1..].strip_prefix(':');
        (v6[..end].to_owned(), port)
    } else {
        match text.rsplit_once(':') {
            Some((host, port)) => (host.to_owned(), Some(port)),
            None => (text.to_owned(), None),
        }
    };
    let port = match port {
        Some(port) => port.parse::<u16>().ok().filter(|p| *p != 0)?,
        None => default?,
    };
    (!host.is_empty()).then_some((host, port))
}

/// A response of its own, one line of text, and the end of the connection.
async fn respond(stream: &mut TcpStream, status: u16, text: &str) {
    let reason = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        431 => "Request Header Fields Too Large",
        _ => "Bad Gateway",
    };
    let body = format!("{text}\n");
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_and_absolute_requests_are_parsed() {
        assert_eq!(
            parse(b"CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n"),
            Ok(Asked::Tunnel { host: "pypi.org".into(), port: 443 })
        );
        assert_eq!(
            parse(b"CONNECT [::1]:8443 HTTP/1.1\r\n\r\n"),
            Ok(Asked::Tunnel { host: "::1".into(), port: 8443 })
        );
        let head = b"GET http://example.com:8080/a?b HTTP/1.1\r\nHost: example.com:8080\r\nProxy-Connection: keep-alive\r\nAccept: */*\r\n\r\n";
        assert_eq!(
            parse(head),
            Ok(Asked::Forward {
                host: "example.com".into(),
                port: 8080,
                head: b"GET /a?b HTTP/1.1\r\nHost: example.com:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n".to_vec(),
            })
        );
        assert_eq!(
            parse(b"GET http://example.com HTTP/1.0\r\n\r\n"),
            Ok(Asked::Forward {
                host: "example.com".into(),
                port: 80,
                head: b"GET / HTTP/1.0\r\nHost: example.com\r\nConnection: close\r\n\r\n".to_vec(),
            })
        );
    }

    #[test]
    fn the_host_header_is_the_decided_host() {
        let head = b"GET http://allowed.test/x HTTP/1.1\r\nHost: evil.test\r\nhost: other\r\n\r\n";
        let Ok(Asked::Forward { head, .. }) = parse(head) else { panic!("not forwarded") };
        assert_eq!(head, b"GET /x HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n");
    }

    #[test]
    fn what_cannot_be_proxied_is_named() {
        assert_eq!(
            parse(b"GET /index.html HTTP/1.1\r\n\r\n"),
            Err("a plain request needs an absolute http:// URL (use CONNECT for https)")
        );
        assert_eq!(parse(b"CONNECT pypi.org HTTP/1.1\r\n\r\n"), Err("CONNECT needs host:port"));
        assert_eq!(
            parse(b"GET http://u@evil/ HTTP/1.1\r\n\r\n"),
            Err("a malformed host in the URL")
        );
        assert_eq!(parse(b"GET http://h:0/ HTTP/1.1\r\n\r\n"), Err("a malformed host in the URL"));
        assert_eq!(parse(b"BREW\r\n\r\n"), Err("a malformed request line"));
        assert_eq!(parse(b"GET http://h/ HTTP/2\r\n\r\n"), Err("only HTTP/1.x is proxied"));
    }
}
