//! WebSocket frames (RFC 6455) on an upgraded connection, server side.
//!
//! The reader assembles messages frame by frame and never holds more than
//! `--max-message-bytes` of one: a message past the limit is skipped as its
//! bytes arrive, then reported. Before it reads a data frame's payload it
//! takes that many bytes from the server-wide [`MessageBudget`], so all
//! connections together buffer at most the budget, and gives them back when
//! the message has been decoded. The writer sends unmasked frames.

use std::io;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Bytes of incoming messages that all connections together may hold.
#[derive(Debug, Clone)]
pub(crate) struct MessageBudget(Arc<Semaphore>);

impl MessageBudget {
    /// A budget of `bytes` (at least one message of `max_message` bytes fits).
    pub(crate) fn new(bytes: usize, max_message: usize) -> MessageBudget {
        let bytes = bytes.max(max_message).min(Semaphore::MAX_PERMITS);
        MessageBudget(Arc::new(Semaphore::new(bytes)))
    }
}

/// What the reader found.
#[derive(Debug)]
pub(super) enum Event {
    /// A whole message and its share of the budget (released on drop).
    Message { text: bool, bytes: Vec<u8>, _held: Option<OwnedSemaphorePermit> },
    /// A message over the limit, skipped.
    TooLong,
    /// A ping, to be answered with this payload.
    Ping(Vec<u8>),
    /// The peer's close frame, with its code if any.
    Close(Option<u16>),
    /// A frame that breaks the protocol; the connection closes with `code`.
    Broken { code: u16, reason: &'static str },
}

/// The close codes used.
pub(super) const CLOSE_NORMAL: u16 = 1000;
pub(super) const CLOSE_PROTOCOL: u16 = 1002;
pub(super) const CLOSE_INVALID: u16 = 1007;

const OP_CONTINUATION: u8 = 0;
pub(super) const OP_TEXT: u8 = 1;
const OP_BINARY: u8 = 2;
pub(super) const OP_CLOSE: u8 = 8;
pub(super) const OP_PING: u8 = 9;
pub(super) const OP_PONG: u8 = 10;

/// Reads frames from the peer.
pub(super) struct Reader<R> {
    io: R,
    buffer: Vec<u8>,
    start: usize,
    limit: usize,
    budget: MessageBudget,
    /// The message being assembled (text?, bytes, budget share), across control frames.
    message: Option<(bool, Vec<u8>, Option<OwnedSemaphorePermit>)>,
    /// The message under way is over the limit: its frames are skipped.
    skipping: bool,
}

struct Header {
    fin: bool,
    opcode: u8,
    len: u64,
    mask: [u8; 4],
}

impl<R: AsyncRead + Unpin> Reader<R> {
    /// A reader of `io`, starting with bytes already read after the handshake.
    pub(super) fn new(io: R, leftover: Vec<u8>, limit: usize, budget: MessageBudget) -> Reader<R> {
        Reader { io, buffer: leftover, start: 0, limit, budget, message: None, skipping: false }
    }

    /// The next event; `None` when the peer closed the stream.
    pub(super) async fn next(&mut self) -> io::Result<Option<Event>> {
        loop {
            let Some(header) = self.header().await? else { return Ok(None) };
            match header.opcode {
                OP_CLOSE | OP_PING | OP_PONG => {
                    if !header.fin || header.len > 125 {
                        return Ok(Some(Event::Broken {
                            code: CLOSE_PROTOCOL,
                            reason: "a control frame over 125 bytes or fragmented",
                        }));
                    }
                    let Some(payload) = self.payload(&header).await? else { return Ok(None) };
                    match header.opcode {
                        OP_CLOSE => return Ok(Some(close_event(&payload))),
                        OP_PING => return Ok(Some(Event::Ping(payload))),
                        _ => continue,
                    }
                }
                OP_TEXT | OP_BINARY if self.message.is_none() && !self.skipping => {
                    self.message = Some((header.opcode == OP_TEXT, Vec::new(), None));
                }
                OP_CONTINUATION if self.message.is_some() || self.skipping => {}
                _ => {
                    return Ok(Some(Event::Broken {
                        code: CLOSE_PROTOCOL,
                        reason: "an unexpected frame opcode",
                    }));
                }
            }
            let held = self.message.as_ref().map_or(0, |(_, bytes, _)| bytes.len() as u64);
            if self.skipping || held.saturating_add(header.len) > self.limit as u64 {
                if let Some(event) = self.skip_frame(&header).await? {
                    return Ok(event);
                }
                continue;
            }
            let Some((text, mut bytes, mut permit)) = self.message.take() else { continue };
            let share = self.take_budget(header.len as usize, permit.is_some()).await;
            match (share, permit.as_mut()) {
                (Some(share), Some(permit)) => permit.merge(share),
                (Some(share), None) => permit = Some(share),
                // A continuation the budget cannot hold now: skipped, not waited for
                // (waiting while holding a share could deadlock connections).
                (None, _) => {
                    if let Some(event) = self.skip_frame(&header).await? {
                        return Ok(event);
                    }
                    continue;
                }
            }
            let Some(payload) = self.payload(&header).await? else { return Ok(None) };
            bytes.extend_from_slice(&payload);
            if header.fin {
                return Ok(Some(Event::Message { text, bytes, _held: permit }));
            }
            self.message = Some((text, bytes, permit));
        }
    }

    /// Skips a frame of a message that is being dropped: `Some(None)` at end
    /// of stream, `Some(TooLong)` after its last frame, `None` to read on.
    async fn skip_frame(&mut self, header: &Header) -> io::Result<Option<Option<Event>>> {
        self.skipping = true;
        self.message = None;
        if !self.skip(header.len).await? {
            return Ok(Some(None));
        }
        if header.fin {
            self.skipping = false;
            return Ok(Some(Some(Event::TooLong)));
        }
        Ok(None)
    }

    /// `bytes` of the budget: waited for at the start of a message, tried
    /// only for a continuation.
    async fn take_budget(&self, bytes: usize, continuing: bool) -> Option<OwnedSemaphorePermit> {
        let bytes = u32::try_from(bytes).ok()?;
        let semaphore = self.budget.0.clone();
        if continuing {
            semaphore.try_acquire_many_owned(bytes).ok()
        } else {
            semaphore.acquire_many_owned(bytes).await.ok()
        }
    }

    async fn header(&mut self) -> io::Result<Option<Header>> {
        if !self.fill(2).await? {
            return Ok(None);
        }
        let (b0, b1) = (self.buffer[self.start], self.buffer[self.start + 1]);
        let extended = match b1 & 0x7f {
            126 => 2,
            127 => 8,
            _ => 0,
        };
        let masked = b1 & 0x80 != 0;
        let size = 2 + extended + if masked { 4 } else { 0 };
        if !self.fill(size).await? {
            return Ok(None);
        }
        let at = self.start + 2;
        let len = match extended {
            2 => u64::from(u16::from_be_bytes([self.buffer[at], self.buffer[at + 1]])),
            8 => u64::from_be_bytes(self.buffer[at..at + 8].try_into().expect("8 bytes")),
            _ => u64::from(b1 & 0x7f),
        };
        let mut mask = [0u8; 4];
        if masked {
            mask.copy_from_slice(&self.buffer[at + extended..at + extended + 4]);
        }
        self.start += size;
        if !masked || b0 & 0x70 != 0 {
            // Clients must mask, and no extension was agreed: refuse the frame.
            return Ok(Some(Header { fin: true, opcode: 0xff, len: 0, mask }));
        }
        Ok(Some(Header { fin: b0 & 0x80 != 0, opcode: b0 & 0x0f, len, mask }))
    }

    /// A frame's payload, unmasked (its length is within the limit or 125).
    async fn payload(&mut self, header: &Header) -> io::Result<Option<Vec<u8>>> {
        let len = usize::try_from(header.len).map_err(io::Error::other)?;
        let mut payload = Vec::with_capacity(len);
        let available = (self.buffer.len() - self.start).min(len);
        payload.extend_from_slice(&self.buffer[self.start..self.start + available]);
        self.start += available;
        if payload.len() < len {
            let mut rest = (&mut self.io).take((len - payload.len()) as u64);
            rest.read_to_end(&mut payload).await?;
            if payload.len() < len {
                return Ok(None);
            }
        }
        for (i, byte) in payload.iter_mut().enumerate() {
            *byte ^= header.mask[i % 4];
        }
        Ok(Some(payload))
    }

    /// Discards `len` bytes of payload as they arrive; false at end of stream.
    async fn skip(&mut self, len: u64) -> io::Result<bool> {
        let buffered = ((self.buffer.len() - self.start) as u64).min(len);
        self.start += buffered as usize;
        let mut left = len - buffered;
        let mut sink = [0u8; 16 * 1024];
        while left > 0 {
            let want = left.min(sink.len() as u64) as usize;
            let n = self.io.read(&mut sink[..want]).await?;
            if n == 0 {
                return Ok(false);
            }
            left -= n as u64;
        }
        Ok(true)
    }

    /// Makes at least `n` bytes available from `start`; false at end of stream.
    async fn fill(&mut self, n: usize) -> io::Result<bool> {
        if self.start > 0 && self.start == self.buffer.len() {
            self.buffer.clear();
            self.start = 0;
        }
        while self.buffer.len() - self.start < n {
            if self.start > 0 {
                self.buffer.drain(..self.start);
                self.start = 0;
            }
            let mut chunk = [0u8; 4096];
            let got = self.io.read(&mut chunk).await?;
            if got == 0 {
                return Ok(false);
            }
            self.buffer.extend_from_slice(&chunk[..got]);
        }
        Ok(true)
    }
}

/// A close frame's meaning: its code, or a broken protocol (RFC 6455 7.4).
fn close_event(payload: &[u8]) -> Event {
    match payload {
        [] => Event::Close(None),
        [_] => Event::Broken { code: CLOSE_PROTOCOL, reason: "a close frame of one byte" },
        [high, low, reason @ ..] => {
            let code = u16::from_be_bytes([*high, *low]);
            let valid = matches!(code, 1000..=1003 | 1007..=1011 | 3000..=4999);
            if !valid {
                Event::Broken { code: CLOSE_PROTOCOL, reason: "a close code that may not be sent" }
            } else if std::str::from_utf8(reason).is_err() {
                Event::Broken { code: CLOSE_INVALID, reason: "a close reason that is not UTF-8" }
            } else {
                Event::Close(Some(code))
            }
        }
    }
}

/// Writes one unmasked frame (not flushed).
pub(super) async fn write_frame<W: AsyncWrite + Unpin>(
    writer: &mut W,
    opcode: u8,
    payload: &[u8],
) -> io::Result<()> {
    let mut header = Vec::with_capacity(10);
    header.push(0x80 | opcode);
    match payload.len() {
        len if len < 126 => header.push(len as u8),
        len if len <= usize::from(u16::MAX) => {
            header.push(126);
            header.extend_from_slice(&(len as u16).to_be_bytes());
        }
        len => {
            header.push(127);
            header.extend_from_slice(&(len as u64).to_be_bytes());
        }
    }
    writer.write_all(&header).await?;
    writer.write_all(payload).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn masked(opcode: u8, fin: bool, payload: &[u8]) -> Vec<u8> {
        let mask = [1u8, 2, 3, 4];
        let mut frame = vec![if fin { 0x80 } else { 0 } | opcode];
        match payload.len() {
            len if len < 126 => frame.push(0x80 | len as u8),
            len => {
                frame.push(0x80 | 126);
                frame.extend_from_slice(&(len as u16).to_be_bytes());
            }
        }
        frame.extend_from_slice(&mask);
        frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        frame
    }

    async fn events(input: Vec<u8>, limit: usize) -> Vec<String> {
        let budget = MessageBudget::new(1 << 20, limit);
        let mut reader = Reader::new(&input[..], Vec::new(), limit, budget);
        let mut seen = Vec::new();
        while let Some(event) = reader.next().await.unwrap() {
            seen.push(match event {
                Event::Message { text, bytes, .. } => format!(
                    "{}:{}",
                    if text { "text" } else { "binary" },
                    String::from_utf8_lossy(&bytes)
                ),
                Event::TooLong => "too long".to_owned(),
                Event::Ping(payload) => format!("ping:{}", String::from_utf8_lossy(&payload)),
                Event::Close(code) => format!("close:{code:?}"),
                Event::Broken { code, .. } => format!("broken:{code}"),
            });
        }
        seen
    }

    #[tokio::test]
    async fn messages_fragments_controls_and_the_limit() {
        let mut input = masked(OP_TEXT, true, b"{\"a\":1}");
        input.extend(masked(OP_BINARY, false, b"hel"));
        input.extend(masked(OP_PING, true, b"p"));
        input.extend(masked(OP_CONTINUATION, true, b"lo"));
        input.extend(masked(OP_TEXT, true, &[b'x'; 300]));
        input.extend(masked(OP_TEXT, false, &[b'y'; 60]));
        input.extend(masked(OP_CONTINUATION, true, &[b'y'; 60]));
        input.extend(masked(OP_TEXT, true, b"after"));
        input.extend(masked(OP_CLOSE, true, &1000u16.to_be_bytes()));
        assert_eq!(
            events(input, 100).await,
            [
                "text:{\"a\":1}",
                "ping:p",
                "binary:hello",
                "too long",
                "too long",
                "text:after",
                "close:Some(1000)"
            ]
        );
    }

    #[tokio::test]
    async fn unmasked_frames_and_stray_continuations_break_the_protocol() {
        assert_eq!(events(vec![0x81, 0x01, b'x'], 100).await[0], "broken:1002");
        assert_eq!(events(masked(OP_CONTINUATION, true, b"x"), 100).await[0], "broken:1002");
    }
}
