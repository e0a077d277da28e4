//! `--listen ws://IP:PORT`: JSON-RPC over WebSocket, one session per connection.
//!
//! Each connection gets its own handshake, process table and loop
//! ([`crate::server`]'s `serve`), exactly as a stdio session. A reader task
//! turns frames into messages and a writer task lines into text frames and
//! pings the peer every 30 s; a peer silent for a whole ping period is dropped.
//! Upgrades carrying an `Origin` header are refused (403): a web page must
//! never drive the server. With a token, every upgrade must carry
//! `Authorization: Bearer TOKEN` (else 401).

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::{header, StatusCode};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message as Frame;
use tokio_tungstenite::WebSocketStream;

use crate::fs::Roots;
use crate::server::{serve, Channels, Config, OnEof};
use crate::transport::Incoming;

/// How often the server pings each peer; a peer silent for a whole period is dropped.
pub const PING_INTERVAL: Duration = Duration::from_secs(30);
/// The WebSocket wording of a parse error, before the parser's detail.
const FRAME_ERROR: &str = "failed to parse websocket JSON-RPC message from exec-server websocket: ";
/// How long connections get to end after SIGTERM before the server exits anyway.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// What a listening server needs besides its socket.
#[derive(Debug, Clone)]
pub struct ListenOptions {
    /// Settings of every connection (`on_eof` is always kill).
    pub config: Config,
    /// The bearer token every upgrade must carry, if any.
    pub token: Option<String>,
    /// How often each peer is pinged ([`PING_INTERVAL`] in the binary).
    pub ping_interval: Duration,
}

/// Serves WebSocket connections on `listener` until `shutdown` completes, then
/// kills every connection's processes and returns.
pub async fn listen<S>(listener: TcpListener, options: ListenOptions, shutdown: S) -> io::Result<()>
where
    S: std::future::Future<Output = ()>,
{
    // Resolved once: a bad root fails at start, and connections share the descriptors.
    let roots = Arc::new(Roots::new(&options.config.roots)?);
    let options = Arc::new(options);
    let (stop, stopped) = watch::channel(false);
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let connection = connection(stream, peer, options.clone(), roots.clone(), stopped.clone());
                    connections.spawn(connection);
                }
                Err(error) => tracing::warn!(%error, "accepting a connection failed"),
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            () = &mut shutdown => break,
        }
    }
    tracing::info!(connections = connections.len(), "shutting down every connection");
    let _ = stop.send(true);
    let ended = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while connections.join_next().await.is_some() {}
    });
    if ended.await.is_err() {
        tracing::warn!("connections did not end in time; leaving them");
    }
    Ok(())
}

// The handshake callback's error type is tungstenite's own HTTP response.
#[allow(clippy::result_large_err)]
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    options: Arc<ListenOptions>,
    roots: Arc<Roots>,
    mut stopped: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    drop_dead_peers(&stream);
    let limit = options.config.max_message_bytes;
    // The hard cap lets a frame a little over the limit be refused politely;
    // far beyond it, tungstenite drops the connection.
    let hard_cap = limit.saturating_mul(2).max(1 << 20);
    let ws_config =
        WebSocketConfig::default().max_message_size(Some(hard_cap)).max_frame_size(Some(hard_cap));
    let token = options.token.clone();
    let check = move |request: &Request, response: Response| authorize(request, response, &token);
    let ws = match tokio_tungstenite::accept_hdr_async_with_config(stream, check, Some(ws_config))
        .await
    {
        Ok(ws) => ws,
        Err(error) => {
            tracing::info!(%peer, %error, "refused a WebSocket upgrade");
            return;
        }
    };
    tracing::info!(%peer, "connection opened");
    let channels = bridge(ws, limit, options.ping_interval);
    let config = Config { on_eof: OnEof::Kill, ..options.config.clone() };
    let shutdown = async move {
        let _ = stopped.wait_for(|stop| *stop).await;
    };
    if let Err(error) = serve(channels, roots, &config, shutdown).await {
        tracing::info!(%peer, %error, "connection ended with an error");
    }
    tracing::info!(%peer, "connection closed");
}

/// Lets the kernel end a connection whose peer vanished without a word (keepalive
/// probes after 30 s idle, and data unacknowledged for 60 s), which a writer
/// blocked on a full send buffer could not notice by pinging.
fn drop_dead_peers(stream: &TcpStream) {
    use std::os::fd::AsRawFd;
    let fd = stream.as_raw_fd();
    let options: [(libc::c_int, libc::c_int, libc::c_int); 5] = [
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1),
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, 30),
        (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, 10),
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 3),
        (libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT, 60_000),
    ];
    for (level, name, value) in options {
        // SAFETY: setsockopt reads one c_int from `value` for the socket we own.
        unsafe {
            libc::setsockopt(
                fd,
                level,
                name,
                std::ptr::addr_of!(value).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
    }
}

/// Refuses browsers (Origin: 403) and, with a token, upgrades without it (401).
/// The shape of the result is tungstenite's handshake callback.
#[allow(clippy::result_large_err)]
fn authorize(
    request: &Request,
    response: Response,
    token: &Option<String>,
) -> Result<Response, ErrorResponse> {
    if request.headers().contains_key(header::ORIGIN) {
        return Err(refusal(StatusCode::FORBIDDEN, "requests from web pages are refused"));
    }
    if let Some(token) = token {
        let presented = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "))
            .unwrap_or("");
        if !same_secret(presented.as_bytes(), token.as_bytes()) {
            return Err(refusal(StatusCode::UNAUTHORIZED, "a valid bearer token is required"));
        }
    }
    Ok(response)
}

fn refusal(status: StatusCode, text: &str) -> ErrorResponse {
    let mut response = ErrorResponse::new(Some(text.to_owned()));
    *response.status_mut() = status;
    response
}

/// Compares two secrets in time that depends only on their lengths.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The reader and writer tasks of one WebSocket, as the loop's channels.
fn bridge(ws: WebSocketStream<TcpStream>, limit: usize, ping_interval: Duration) -> Channels {
    let (mut sink, mut stream) = ws.split();
    let (incoming_tx, incoming) = mpsc::channel(2);
    let (outgoing, mut lines) = mpsc::channel::<String>(4);
    let heard = Arc::new(AtomicBool::new(true));
    let heard_by_reader = heard.clone();
    // Set when a text frame was not UTF-8: the close then says 1007 (RFC 6455).
    let invalid = Arc::new(AtomicBool::new(false));
    let invalid_by_reader = invalid.clone();
    let reader = tokio::spawn(async move {
        while let Some(frame) = stream.next().await {
            heard_by_reader.store(true, Ordering::Relaxed);
            let bytes = match frame {
                Ok(Frame::Text(text)) => text.as_bytes().to_vec(),
                Ok(Frame::Binary(bytes)) => bytes.to_vec(),
                Ok(Frame::Close(_)) => break,
                Ok(_) => continue,
                Err(error) => {
                    if matches!(error, tokio_tungstenite::tungstenite::Error::Utf8(_)) {
                        invalid_by_reader.store(true, Ordering::Relaxed);
                    }
                    tracing::info!(%error, "WebSocket read failed; closing");
                    break;
                }
            };
            let message = if bytes.len() > limit {
                Incoming::TooLong { limit }
            } else {
                Incoming::decode(&bytes, FRAME_ERROR)
            };
            if incoming_tx.send(message).await.is_err() {
                break;
            }
        }
    });
    let writer = tokio::spawn(async move {
        let mut ping = tokio::time::interval(ping_interval);
        ping.tick().await;
        // A peer that takes our frames is alive even if its pong waits behind them.
        let mut delivered = false;
        loop {
            tokio::select! {
                line = lines.recv() => match line {
                    Some(line) => {
                        sink.send(Frame::text(line)).await.map_err(io::Error::other)?;
                        delivered = true;
                    }
                    None => break,
                },
                _ = ping.tick() => {
                    let progressed = std::mem::take(&mut delivered);
                    if !heard.swap(false, Ordering::Relaxed) && !progressed {
                        tracing::info!("the peer answered no ping for {ping_interval:?}; closing");
                        return Err(io::Error::new(io::ErrorKind::TimedOut, "peer went silent"));
                    }
                    sink.send(Frame::Ping(Default::default())).await.map_err(io::Error::other)?;
                }
            }
        }
        if invalid.load(Ordering::Relaxed) {
            let close = CloseFrame {
                code: CloseCode::Invalid,
                reason: "a text frame was not UTF-8".into(),
            };
            let _ = sink.send(Frame::Close(Some(close))).await;
        }
        let _ = sink.close().await;
        Ok(())
    });
    // A close frame ends the reader after the frames before it are taken.
    let (_, input_ended) = oneshot::channel();
    Channels { incoming, outgoing, reader, writer, input_ended }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_compare_by_content_and_length() {
        assert!(same_secret(b"s3cret", b"s3cret"));
        assert!(!same_secret(b"s3cret", b"s3creT"));
        assert!(!same_secret(b"s3cret", b"s3cret!"));
        assert!(!same_secret(b"", b"x"));
    }
}
