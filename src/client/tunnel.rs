//! The client half of tunnels: [`Tunnel`], a byte stream to a host:port on
//! the server's side, and the pump that moves a local stream's bytes through one.
//!
//! Remote bytes (`tunnel/data`) are queued per tunnel by the reader task,
//! never waiting (the server sends at most its window unacknowledged, and a
//! server that sends more loses the tunnel); the pump writes them to the
//! local side and acknowledges each chunk once written. Local bytes go out as
//! `tunnel/write` requests sent in order, with at most the server's write
//! buffer in flight.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream, ReadBuf};
use tokio::sync::{mpsc, watch};

use super::{lock, Client};
use crate::error::Error;
use crate::protocol::*;

/// The server's window (`TUNNEL_WINDOW`): what it sends unacknowledged.
const WINDOW: usize = 1024 * 1024;
/// The server's write buffer per tunnel (`TUNNEL_WRITE_BUFFER`): what may be in flight.
const WRITE_BUFFER: usize = 1024 * 1024;
/// Largest `tunnel/write` chunk.
const WRITE_CHUNK: usize = 128 * 1024;
/// The server's limit of tunnels per connection (`MAX_TUNNELS`): a client
/// opens at most this many at once.
pub(crate) const MAX_TUNNELS: usize = 256;

/// What the reader task hands a tunnel.
pub(crate) enum TunnelMsg {
    Data(Vec<u8>),
    Closed(TunnelEnd, Option<String>),
}

struct TunnelRoute {
    messages: mpsc::UnboundedSender<TunnelMsg>,
    /// Bytes queued and not yet written to the local side.
    queued: Arc<AtomicUsize>,
}

/// The tunnels of a connection, by id.
#[derive(Default)]
pub(crate) struct TunnelRoutes {
    routes: HashMap<String, TunnelRoute>,
}

impl TunnelRoutes {
    /// Routes `tunnel/data` and `tunnel/closed`.
    pub(crate) fn deliver(&mut self, method: &str, params: &serde_json::Value) {
        if method == TunnelData::NAME {
            // By reference: the chunk is decoded straight from the message.
            let id = params.get("tunnelId").and_then(serde_json::Value::as_str);
            let chunk = params.get("chunk").and_then(serde_json::Value::as_str);
            let (Some(id), Some(chunk)) = (id, chunk) else {
                tracing::warn!("malformed tunnel/data");
                return;
            };
            if !self.routes.contains_key(id) {
                return;
            }
            let Ok(Base64(bytes)) = Base64::decode(chunk) else {
                tracing::warn!(tunnel = %id, "tunnel/data with a chunk that is not base64");
                return;
            };
            self.push(id, bytes);
        } else if method == TunnelClosed::NAME {
            let Ok(closed) = serde_json::from_value::<TunnelClosedParams>(params.clone()) else {
                tracing::warn!("malformed tunnel/closed");
                return;
            };
            if let Some(route) = self.routes.remove(&closed.tunnel_id) {
                let _ = route.messages.send(TunnelMsg::Closed(closed.reason, closed.message));
            }
        }
    }

    /// A `tunnel/data` line in the server's own form (as `encode_tunnel_data`
    /// writes it), routed without building a JSON value; false (nothing
    /// done) for any other line, which then takes the general path.
    pub(crate) fn deliver_line(&mut self, line: &[u8]) -> bool {
        let Some((id, chunk)) = parse_data_line(line) else { return false };
        if !self.routes.contains_key(id) {
            return true;
        }
        let Ok(bytes) = crate::protocol::Base64::decode_ascii(chunk) else { return false };
        self.push(id, bytes);
        true
    }

    /// Queues `bytes` for tunnel `id`'s pump; a server that sends past its
    /// window loses the tunnel.
    fn push(&mut self, id: &str, bytes: Vec<u8>) {
        let Some(route) = self.routes.get(id) else { return };
        let size = bytes.len();
        if route.queued.fetch_add(size, Ordering::Relaxed) + size > WINDOW {
            tracing::warn!(tunnel = %id, "the server sent past its window; dropping the tunnel");
            self.routes.remove(id);
            return;
        }
        let _ = route.messages.send(TunnelMsg::Data(bytes));
    }

    /// The connection is gone: every tunnel ends (their pumps see no close).
    pub(crate) fn clear(&mut self) {
        self.routes.clear();
    }
}

/// `{"method":"tunnel/data","params":{"tunnelId":"ID","seq":N,"chunk":"B64"}}`
/// with a plain id (no escapes or control characters): the id and the chunk's text.
fn parse_data_line(line: &[u8]) -> Option<(&str, &[u8])> {
    let prefix = br#"{"method":"tunnel/data","params":{"tunnelId":""#;
    let (id, _seq, rest) = super::fast_line::id_and_seq(line, prefix)?;
    let chunk = rest.strip_prefix(br#","chunk":""#)?.strip_suffix(br#""}}"#)?;
    Some((id, chunk))
}

/// An open tunnel as its pump sees it. Dropped before its pump ends it,
/// the tunnel is closed on the server (its guard).
pub(crate) struct Opened {
    guard: CloseOnDrop,
    messages: mpsc::UnboundedReceiver<TunnelMsg>,
    queued: Arc<AtomicUsize>,
}

/// How a pumped tunnel ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ending {
    /// Both sides finished, or the remote side did.
    Done,
    /// The remote side reset it.
    Reset(String),
    /// It failed: the connection was lost, a write failed, the local side broke.
    Failed(String),
}

impl Client {
    /// Opens a tunnel to `host:port` on the server's side (`tunnel/open`).
    /// Waits for one of the [`MAX_TUNNELS`] slots of this client when all
    /// are taken (so a busy forward queues instead of being refused).
    pub(crate) async fn open_tunnel_raw(&self, host: &str, port: u16) -> Result<Opened, Error> {
        let slot = self
            .shared()
            .tunnel_slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| self.shared().closed_error())?;
        let id = format!("tunnel-{}", self.shared().next_tunnel());
        let (messages_tx, messages) = mpsc::unbounded_channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let route = TunnelRoute { messages: messages_tx, queued: queued.clone() };
        lock(&self.shared().tunnels).routes.insert(id.clone(), route);
        // From here a drop (a cancelled open too) closes the tunnel and frees its slot.
        let mut guard = CloseOnDrop { client: self.clone(), id, armed: true, _slot: slot };
        let params = TunnelOpenParams::new(guard.id.clone(), host, port);
        if let Err(error) = self.call::<TunnelOpen>(&params).await {
            // Nothing opened: nothing to close.
            guard.armed = false;
            return Err(error);
        }
        Ok(Opened { guard, messages, queued })
    }

    /// Opens a tunnel to `host:port`, connected from the server's side: the
    /// bytes written to it reach that port, and what it sends back is read
    /// from it. Only loopback addresses are reachable unless the server was
    /// started with `--tunnels any`.
    pub async fn open_tunnel(&self, host: &str, port: u16) -> Result<Tunnel, Error> {
        let opened = self.open_tunnel_raw(host, port).await?;
        let (local, mut remote) = tokio::io::duplex(WINDOW);
        let (end_tx, end) = watch::channel(None);
        let task = tokio::spawn(async move {
            let ending = opened.pump(&mut remote).await;
            // Known before the reader sees the end of file.
            let _ = end_tx.send(Some(ending));
            drop(remote);
        });
        Ok(Tunnel { io: local, end, task })
    }
}

impl Opened {
    /// Moves bytes between `local` and the tunnel until both directions are
    /// done or one fails; the tunnel is closed on the server when this ends
    /// (or is dropped) before the remote side did.
    pub(crate) async fn pump<S: AsyncRead + AsyncWrite>(self, local: S) -> Ending {
        let Opened { mut guard, mut messages, queued } = self;
        let (client, id) = (guard.client.clone(), guard.id.clone());
        let (mut reader, mut writer) = tokio::io::split(local);
        let down = async {
            while let Some(message) = messages.recv().await {
                match message {
                    TunnelMsg::Data(bytes) => {
                        if let Err(error) = writer.write_all(&bytes).await {
                            return Ending::Failed(format!("the local side broke: {error}"));
                        }
                        queued.fetch_sub(bytes.len(), Ordering::Relaxed);
                        client.notify::<TunnelAck>(&TunnelAckParams::new(
                            id.clone(),
                            bytes.len() as u64,
                        ));
                    }
                    TunnelMsg::Closed(reason, message) => {
                        return match reason {
                            TunnelEnd::Eof => {
                                let _ = writer.shutdown().await;
                                Ending::Done
                            }
                            TunnelEnd::Reset => Ending::Reset(message.unwrap_or_default()),
                            TunnelEnd::Error => Ending::Failed(message.unwrap_or_default()),
                        };
                    }
                }
            }
            Ending::Failed(client.shared().closed_error().to_string())
        };
        let up = up(&client, &id, &mut reader);
        tokio::pin!(down, up);
        let ending = tokio::select! {
            ending = &mut down => ending,
            sent = &mut up => match sent {
                // Sent to the end: the remote side still answers.
                Ok(()) => down.await,
                Err(error) => Ending::Failed(error),
            },
        };
        // The remote side ended it: nothing to close.
        guard.armed = !matches!(ending, Ending::Done | Ending::Reset(_));
        ending
    }
}

/// Sends what `reader` gives as `tunnel/write`s, in order, at most
/// [`WRITE_BUFFER`] bytes unanswered; at its end, half-closes the tunnel.
async fn up<R: AsyncRead + Unpin>(client: &Client, id: &str, reader: &mut R) -> Result<(), String> {
    let mut in_flight = VecDeque::new();
    let mut bytes_in_flight = 0;
    let mut buffer = vec![0u8; WRITE_CHUNK];
    loop {
        while bytes_in_flight + WRITE_CHUNK > WRITE_BUFFER {
            let Some((reply, size)) = in_flight.pop_front() else { break };
            answered(reply).await?;
            bytes_in_flight -= size;
        }
        let n = reader.read(&mut buffer).await.map_err(|e| format!("the local side broke: {e}"))?;
        let params = TunnelWriteParams::new(id, buffer[..n].to_vec(), n == 0);
        let reply = client.send_call::<TunnelWrite>(&params).await.map_err(|e| e.to_string())?;
        in_flight.push_back((reply, n));
        bytes_in_flight += n;
        if n == 0 {
            break;
        }
    }
    for (reply, _) in in_flight {
        answered(reply).await?;
    }
    Ok(())
}

async fn answered(reply: super::PendingReply) -> Result<(), String> {
    match reply.await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(error)) => Err(error.message),
        Err(_) => Err("the connection was lost".to_owned()),
    }
}

/// Closes the tunnel on the server unless it ended there, forgets its
/// route, and gives its slot back.
struct CloseOnDrop {
    client: Client,
    id: String,
    armed: bool,
    _slot: tokio::sync::OwnedSemaphorePermit,
}

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        lock(&self.client.shared().tunnels).routes.remove(&self.id);
        if self.armed && !self.client.is_closed() {
            self.client.send_and_forget::<TunnelClose>(&TunnelIdParams::new(self.id.clone()));
        }
    }
}

/// A byte stream through a tunnel, from [`Client::open_tunnel`]. Reading
/// returns what the remote side sent, then end-of-file when it finished (an
/// error when it reset the connection); writing sends to it, and shutting
/// down half-closes it. Dropping it closes the tunnel.
#[derive(Debug)]
pub struct Tunnel {
    io: DuplexStream,
    end: watch::Receiver<Option<Ending>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Tunnel {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl AsyncRead for Tunnel {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.io).poll_read(cx, buf) {
            // End of file: say how the tunnel ended, if it did not end well.
            Poll::Ready(Ok(())) if buf.filled().len() == before && buf.remaining() > 0 => {
                match self.end.borrow().clone() {
                    Some(Ending::Reset(message)) => {
                        Poll::Ready(Err(io::Error::new(io::ErrorKind::ConnectionReset, message)))
                    }
                    Some(Ending::Failed(message)) => Poll::Ready(Err(io::Error::other(message))),
                    _ => Poll::Ready(Ok(())),
                }
            }
            other => other,
        }
    }
}

impl AsyncWrite for Tunnel {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::parse_data_line;

    #[test]
    fn only_the_servers_own_form_takes_the_fast_path() {
        let line =
            br#"{"method":"tunnel/data","params":{"tunnelId":"t-1","seq":12,"chunk":"aGk="}}"#;
        assert_eq!(parse_data_line(line), Some(("t-1", &b"aGk="[..])));
        for other in [
            &br#"{"method":"tunnel/data","params":{"tunnelId":"t\"1","seq":1,"chunk":"aGk="}}"#[..],
            br#"{"method":"tunnel/data","params":{"seq":1,"tunnelId":"t","chunk":"aGk="}}"#,
            br#"{"method":"tunnel/data","params":{"tunnelId":"t","seq":,"chunk":"aGk="}}"#,
            br#"{"method":"tunnel/data","params":{"tunnelId":"t","seq":07,"chunk":"aGk="}}"#,
            br#"{"method":"tunnel/data","params":{"tunnelId":"t","seq":1,"chunk":"aGk="}} "#,
        ] {
            assert_eq!(parse_data_line(other), None, "{}", String::from_utf8_lossy(other));
        }
    }
}
