//! WebSocket frames (RFC 6455) on an upgraded connection, server side.
//!
//! The reader assembles messages frame by frame and never holds more than
//! `--max-message-bytes` of one: a message past the limit is skipped as its
//! bytes arrive, then reported. What a message holds is charged as it
//! arrives, never as a header claims: the first [`OWN_SHARE`] bytes to the
//! connection's own share, the rest step by step to the server-wide
//! [`MessageBudget`] (given back when the message has been decoded). A
//! message that waits [`BUDGET_WAIT`] for room is discarded and reported; a
//! frame that stops arriving for [`STALL_TIMEOUT`] closes the connection.
//! The writer sends unmasked frames.

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
    /// A message skipped because the shared budget stayed full.
    Starved,
    /// A ping, to be answered with this payload.
    Ping(Vec<u8>),
    /// A pong: the peer answered a ping (it is alive).
    Pong,
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

/// Bytes of a message each connection holds outside the shared budget: small
/// messages and pings never wait for room that other connections hold.
pub(crate) const OWN_SHARE: usize = 1 << 20;
/// How long a message waits for room in the shared budget before it is
/// discarded (and its sender told); only its own connection waits.
pub(crate) const BUDGET_WAIT: std::time::Duration = std::time::Duration::from_secs(5);
/// How long a frame (or a message's next frame) may stop arriving before
/// the connection is closed.
pub(crate) const STALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);
/// The most bytes read (and charged) in one step.
const STEP: usize = 64 * 1024;

/// Why the frames of a message are being skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Skipping {
    No,
    /// Over `--max-message-bytes`.
    TooLong,
    /// The shared budget stayed full for [`BUDGET_WAIT`].
    Starved,
}

/// How a frame's payload arrived.
enum Arrival {
    Whole,
    /// The peer closed the stream mid-frame.
    Ended,
    /// The budget had no room; this many bytes of the frame are still unread.
    Starved(u64),
}

/// Reads frames from the peer.
pub(super) struct Reader<R> {
    io: R,
    buffer: Vec<u8>,
    start: usize,
    limit: usize,
    budget: MessageBudget,
    /// The message being assembled (text?, bytes, share of the shared budget), across control frames.
    message: Option<(bool, Vec<u8>, Option<OwnedSemaphorePermit>)>,
    /// Whether (and why) the message under way is being skipped.
    skipping: Skipping,
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
        Reader {
            io,
            buffer: leftover,
            start: 0,
            limit,
            budget,
            message: None,
            skipping: Skipping::No,
        }
    }

    /// The next event; `None` when the peer closed the stream.
    pub(super) async fn next(&mut self) -> io::Result<Option<Event>> {
        loop {
            let Some(header) = self.header().await? else { return Ok(None) };
            let skipping = self.skipping != Skipping::No;
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
                        _ => return Ok(Some(Event::Pong)),
                    }
                }
                OP_TEXT | OP_BINARY if self.message.is_none() && !skipping => {
                    self.message = Some((header.opcode == OP_TEXT, Vec::new(), None));
                }
                OP_CONTINUATION if self.message.is_some() || skipping => {}
                _ => {
                    return Ok(Some(Event::Broken {
                        code: CLOSE_PROTOCOL,
                        reason: "an unexpected frame opcode",
                    }));
                }
            }
            let held = self.message.as_ref().map_or(0, |(_, bytes, _)| bytes.len() as u64);
            if !skipping && held.saturating_add(header.len) > self.limit as u64 {
                self.skipping = Skipping::TooLong;
            }
            if self.skipping != Skipping::No {
                if let Some(event) = self.skip_frame(header.len, header.fin).await? {
                    return Ok(event);
                }
                continue;
            }
            let Some((text, mut bytes, mut permit)) = self.message.take() else { continue };
            match self.charged_payload(&header, &mut bytes, &mut permit).await? {
                Arrival::Whole => {}
                Arrival::Ended => return Ok(None),
                Arrival::Starved(left) => {
                    self.skipping = Skipping::Starved;
                    if let Some(event) = self.skip_frame(left, header.fin).await? {
                        return Ok(event);
                    }
                    continue;
                }
            }
            if header.fin {
                return Ok(Some(Event::Message { text, bytes, _held: permit }));
            }
            self.message = Some((text, bytes, permit));
        }
    }

    /// Skips `len` bytes of a message that is being dropped: `Some(None)` at
    /// end of stream, `Some(Some(event))` after its last frame, `None` to read on.
    async fn skip_frame(&mut self, len: u64, fin: bool) -> io::Result<Option<Option<Event>>> {
        self.message = None;
        if !self.skip(len).await? {
            return Ok(Some(None));
        }
        if fin {
            let why = std::mem::replace(&mut self.skipping, Skipping::No);
            return Ok(Some(Some(match why {
                Skipping::Starved => Event::Starved,
                Skipping::TooLong | Skipping::No => Event::TooLong,
            })));
        }
        Ok(None)
    }

    /// Appends a data frame's payload, unmasked, to `bytes` as it arrives,
    /// charging what the message holds beyond [`OWN_SHARE`] to the shared
    /// budget step by step (waiting at most [`BUDGET_WAIT`] for room).
    async fn charged_payload(
        &mut self,
        header: &Header,
        bytes: &mut Vec<u8>,
        permit: &mut Option<OwnedSemaphorePermit>,
    ) -> io::Result<Arrival> {
        let mut got: u64 = 0;
        while got < header.len {
            if self.start == self.buffer.len() && !self.refill(true).await? {
                return Ok(Arrival::Ended);
            }
            let buffered = (self.buffer.len() - self.start) as u64;
            let take = buffered.min(header.len - got).min(STEP as u64) as usize;
            let needed = (bytes.len() + take).saturating_sub(OWN_SHARE);
            let have = permit.as_ref().map_or(0, |p| p.num_permits());
            if needed > have {
                let Some(share) = self.take_budget(needed - have).await else {
                    bytes.clear();
                    *permit = None;
                    return Ok(Arrival::Starved(header.len - got));
                };
                match permit.as_mut() {
                    Some(permit) => permit.merge(share),
                    None => *permit = Some(share),
                }
            }
            let from = bytes.len();
            bytes.extend_from_slice(&self.buffer[self.start..self.start + take]);
            for (i, byte) in bytes[from..].iter_mut().enumerate() {
                *byte ^= header.mask[(got as usize + i) % 4];
            }
            self.start += take;
            got += take as u64;
        }
        Ok(Arrival::Whole)
    }

    /// `bytes` of the shared budget, waited for at most [`BUDGET_WAIT`].
    async fn take_budget(&self, bytes: usize) -> Option<OwnedSemaphorePermit> {
        let bytes = u32::try_from(bytes).ok()?;
        let semaphore = self.budget.0.clone();
        tokio::time::timeout(BUDGET_WAIT, semaphore.acquire_many_owned(bytes)).await.ok()?.ok()
    }

    /// Reads more input into the buffer (up to [`STEP`] bytes); false at end
    /// of stream. `mid_frame`: the peer owes bytes, and a pause past
    /// [`STALL_TIMEOUT`] is an error.
    async fn refill(&mut self, mid_frame: bool) -> io::Result<bool> {
        if self.start > 0 {
            self.buffer.drain(..self.start);
            self.start = 0;
        }
        let held = self.buffer.len();
        self.buffer.resize(held + STEP, 0);
        let read = self.io.read(&mut self.buffer[held..]);
        let result = if mid_frame || self.message.is_some() {
            match tokio::time::timeout(STALL_TIMEOUT, read).await {
                Ok(result) => result,
                Err(_) => Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("a frame stopped arriving for {STALL_TIMEOUT:?}"),
                )),
            }
        } else {
            read.await
        };
        let got = match result {
            Ok(got) => got,
            Err(error) => {
                self.buffer.truncate(held);
                return Err(error);
            }
        };
        self.buffer.truncate(held + got);
        Ok(got > 0)
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

    /// A control frame's payload (at most 125 bytes), unmasked.
    async fn payload(&mut self, header: &Header) -> io::Result<Option<Vec<u8>>> {
        let len = usize::try_from(header.len).map_err(io::Error::other)?;
        if !self.fill_mid_frame(len).await? {
            return Ok(None);
        }
        let mut payload = self.buffer[self.start..self.start + len].to_vec();
        self.start += len;
        for (i, byte) in payload.iter_mut().enumerate() {
            *byte ^= header.mask[i % 4];
        }
        Ok(Some(payload))
    }

    /// Discards `len` bytes of payload as they arrive; false at end of stream.
    async fn skip(&mut self, len: u64) -> io::Result<bool> {
        let mut left = len;
        loop {
            let buffered = ((self.buffer.len() - self.start) as u64).min(left);
            self.start += buffered as usize;
            left -= buffered;
            if left == 0 {
                return Ok(true);
            }
            if !self.refill(true).await? {
                return Ok(false);
            }
        }
    }

    /// Makes at least `n` bytes available from `start`; false at end of
    /// stream. Waiting for the first byte of a frame is idle time; once a
    /// frame has begun, its bytes must keep coming.
    async fn fill(&mut self, n: usize) -> io::Result<bool> {
        while self.buffer.len() - self.start < n {
            let begun = self.buffer.len() > self.start;
            if !self.refill(begun).await? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// [`Self::fill`] inside a frame.
    async fn fill_mid_frame(&mut self, n: usize) -> io::Result<bool> {
        while self.buffer.len() - self.start < n {
            if !self.refill(true).await? {
                return Ok(false);
            }
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
                Event::Starved => "starved".to_owned(),
                Event::Ping(payload) => format!("ping:{}", String::from_utf8_lossy(&payload)),
                Event::Pong => "pong".to_owned(),
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
