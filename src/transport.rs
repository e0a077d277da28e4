//! Newline-delimited framing: a reader task that owns the input and a writer task that owns the output.

use std::io;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::protocol::Message;

/// One unit for the server loop: a decoded message (parsing happens in the
/// reader task, off the loop) or a line that was too long.
#[derive(Debug)]
#[cfg_attr(not(feature = "server"), allow(dead_code))]
pub(crate) enum Incoming {
    /// A line (or WebSocket frame) decoded into a message, and its length in bytes.
    Message(Message, usize),
    /// One that is not a message: the error text for the reply (id -1, -32600).
    Malformed(String),
    /// One longer than the limit; its bytes were discarded.
    TooLong { limit: usize },
}

#[cfg_attr(not(feature = "server"), allow(dead_code))]
impl Incoming {
    /// Decodes one line or frame; `context` prefixes a parse error's detail
    /// (the wording differs between stdio and WebSocket).
    pub(crate) fn decode(bytes: &[u8], context: &str) -> Incoming {
        match Message::decode(bytes) {
            Ok(message) => Incoming::Message(message, bytes.len()),
            Err(error) => Incoming::Malformed(format!("{context}{}", error.detail())),
        }
    }
}

/// The read buffer for input lines: as large as the stdio pipes (see
/// `stdio`), so a line of megabytes takes a few reads instead of hundreds.
pub(crate) const INPUT_BUFFER: usize = 256 << 10;

/// The largest line buffer kept for the next line: room for an 8 MiB file as
/// base64 (the size clients send files in), not for every outlier.
#[cfg_attr(not(feature = "server"), allow(dead_code))]
const KEPT_LINE: usize = 16 << 20;

/// The stdio wording of a parse error, before the detail.
#[cfg_attr(not(feature = "server"), allow(dead_code))]
pub(crate) const LINE_ERROR: &str = "failed to parse JSON-RPC message: ";

/// Reads the next non-blank line into `line` (its capacity is reused): `Some(true)`
/// for a line, `Some(false)` for one over `limit` (discarded), `None` at end of input.
pub(crate) async fn read_line_into<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    limit: usize,
    line: &mut Vec<u8>,
) -> io::Result<Option<bool>> {
    loop {
        line.clear();
        let mut too_long = false;
        let mut saw_any = false;
        loop {
            let available = reader.fill_buf().await?;
            if available.is_empty() {
                if !saw_any {
                    return Ok(None);
                }
                break;
            }
            saw_any = true;
            let (taken, done) = match memchr::memchr(b'\n', available) {
                Some(at) => (at, true),
                None => (available.len(), false),
            };
            if !too_long {
                if line.len() + taken > limit {
                    too_long = true;
                    *line = Vec::new();
                } else {
                    line.extend_from_slice(&available[..taken]);
                }
            }
            reader.consume(if done { taken + 1 } else { taken });
            if done {
                break;
            }
        }
        if too_long {
            return Ok(Some(false));
        }
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        return Ok(Some(true));
    }
}

/// One line as [`for_each_line`] hands it on.
pub(crate) enum ReadLine<'a> {
    /// A non-blank line, without its `\n` (or `\r\n`).
    Line(&'a [u8]),
    /// A line over the limit, discarded.
    TooLong,
}

/// Hands every non-blank line of `reader` to `each` until the input ends,
/// as [`read_line_into`] reads them; a line that lies whole in the reader's
/// buffer is handed on where it lies, without a copy (only a line that spans
/// two reads is gathered in a buffer of its own).
pub(crate) async fn for_each_line<R, F>(reader: &mut R, limit: usize, mut each: F) -> io::Result<()>
where
    R: AsyncBufRead + Unpin,
    F: FnMut(ReadLine<'_>),
{
    // The start of a line that spans reads, and whether one is under way.
    let mut gathered = Vec::new();
    let mut spanning = false;
    let mut too_long = false;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            if spanning {
                hand_on(&mut each, &gathered, too_long);
            }
            return Ok(());
        }
        let Some(at) = memchr::memchr(b'\n', available) else {
            let taken = available.len();
            if !too_long && gathered.len() + taken > limit {
                too_long = true;
                gathered = Vec::new();
            }
            if !too_long {
                gathered.extend_from_slice(available);
            }
            spanning = true;
            reader.consume(taken);
            continue;
        };
        if spanning {
            if !too_long && gathered.len() + at > limit {
                too_long = true;
            }
            if !too_long {
                gathered.extend_from_slice(&available[..at]);
            }
            hand_on(&mut each, &gathered, too_long);
            spanning = false;
            too_long = false;
            gathered.clear();
            if gathered.capacity() > INPUT_BUFFER {
                gathered = Vec::new();
            }
        } else {
            hand_on(&mut each, &available[..at], at > limit);
        }
        reader.consume(at + 1);
    }
}

fn hand_on<F: FnMut(ReadLine<'_>)>(each: &mut F, line: &[u8], too_long: bool) {
    if too_long {
        return each(ReadLine::TooLong);
    }
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if !line.iter().all(u8::is_ascii_whitespace) {
        each(ReadLine::Line(line));
    }
}

/// Spawns the task that owns `reader`, decodes each line and feeds the
/// messages into a bounded channel. The channel closes at end of input; a read
/// error is logged and ends it too.
#[cfg_attr(not(feature = "server"), allow(dead_code))]
pub(crate) fn spawn_reader<R>(
    mut reader: R,
    limit: usize,
) -> (mpsc::Receiver<Incoming>, JoinHandle<()>, oneshot::Receiver<()>)
where
    R: AsyncBufRead + Unpin + Send + 'static,
{
    // Lines can be tens of MiB: read ahead only two, the pipe holds the rest.
    let (tx, rx) = mpsc::channel(2);
    let (ended_tx, ended) = oneshot::channel();
    let mut ended_tx = Some(ended_tx);
    let task = tokio::spawn(async move {
        // One buffer for every line (a fresh one costs a page fault per 4 KiB).
        let mut line = Vec::new();
        loop {
            let incoming = match read_line_into(&mut reader, limit, &mut line).await {
                Ok(Some(true)) => Ok(Some(Incoming::decode(&line, LINE_ERROR))),
                Ok(Some(false)) => Ok(Some(Incoming::TooLong { limit })),
                Ok(None) => Ok(None),
                Err(error) => Err(error),
            };
            release_if_idle(&mut line);
            match incoming {
                Ok(Some(incoming)) => {
                    let Some(permit) = reserve_watching_end(&tx, &mut reader, &mut ended_tx).await
                    else {
                        break;
                    };
                    permit.send(incoming);
                }
                Ok(None) => break,
                Err(error) => {
                    tracing::warn!(%error, "reading input failed; treating it as end of input");
                    break;
                }
            }
        }
        // The loop may not be taking input (see `reserve_watching_end`).
        if let Some(ended) = ended_tx.take() {
            let _ = ended.send(());
        }
    });
    (rx, task, ended)
}

/// Waits for room in the channel (the loop takes no input while its replies
/// wait for a client that does not read) and meanwhile looks at the input:
/// when nothing more is buffered and it has ended, `ended` says so at once, so
/// that EOF still kills a connection's processes (`--on-eof kill`) while the
/// line in hand waits. Lines still buffered end the look (the EOF is then
/// seen when they have been taken); nothing is consumed.
#[cfg_attr(not(feature = "server"), allow(dead_code))]
async fn reserve_watching_end<'a, R: AsyncBufRead + Unpin>(
    tx: &'a mpsc::Sender<Incoming>,
    reader: &mut R,
    ended: &mut Option<oneshot::Sender<()>>,
) -> Option<mpsc::Permit<'a, Incoming>> {
    let reserve = tx.reserve();
    tokio::pin!(reserve);
    let mut watching = ended.is_some();
    loop {
        tokio::select! {
            permit = &mut reserve => return permit.ok(),
            at_end = reader.fill_buf(), if watching => {
                watching = false;
                if at_end.map_or(true, |available| available.is_empty()) {
                    if let Some(ended) = ended.take() {
                        let _ = ended.send(());
                    }
                }
            }
        }
    }
}

/// Lets go of a large line buffer once a line much smaller than it came:
/// a run of large messages reuses one buffer, and a server back to small
/// messages does not keep the memory of its largest.
/// One over [`KEPT_LINE`] is let go at once.
/// The run is over then, so the heap's free memory goes back to the system too.
#[cfg_attr(not(feature = "server"), allow(dead_code))]
fn release_if_idle(line: &mut Vec<u8>) {
    let capacity = line.capacity();
    if capacity > KEPT_LINE || (capacity > INPUT_BUFFER && line.len() < capacity / 8) {
        *line = Vec::new();
        give_back_memory();
    }
}

/// Returns the heap's free memory to the system (glibc keeps up to 32 MiB of
/// it for reuse in the binary, see `cli`); a no-op elsewhere.
#[cfg_attr(not(feature = "server"), allow(dead_code))]
pub(crate) fn give_back_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only gives free pages back; it touches no live allocation.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// One encoded message on its way to the writer, with the bytes it holds in
/// the server-wide room: the charge is given back when the line is dropped,
/// which the writer does once the line is written (or the output is gone).
#[derive(Default)]
pub(crate) struct Line {
    text: String,
    #[cfg(feature = "server")]
    _held: Option<crate::hold::Held>,
}

#[cfg_attr(not(feature = "server"), allow(dead_code))]
impl Line {
    /// A line whose memory `held` charges until it is written.
    #[cfg(feature = "server")]
    pub(crate) fn charged(text: String, held: Option<crate::hold::Held>) -> Line {
        Line { text, _held: held }
    }

    /// The encoded message, without its newline.
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// Its length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.text.len()
    }
}

/// A line this large gives the heap's free memory back when it is dropped:
/// what held it must not stay resident once its charge is released.
const LARGE_LINE: usize = 1024 * 1024;

impl Drop for Line {
    fn drop(&mut self) {
        if self.text.capacity() >= LARGE_LINE {
            drop(std::mem::take(&mut self.text));
            give_back_memory();
        }
    }
}

impl From<String> for Line {
    fn from(text: String) -> Line {
        Line {
            text,
            #[cfg(feature = "server")]
            _held: None,
        }
    }
}

impl std::ops::Deref for Line {
    type Target = str;

    fn deref(&self) -> &str {
        &self.text
    }
}

impl PartialEq<String> for Line {
    fn eq(&self, other: &String) -> bool {
        self.text == *other
    }
}

impl PartialEq<&str> for Line {
    fn eq(&self, other: &&str) -> bool {
        self.text == *other
    }
}

impl std::fmt::Debug for Line {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// What the writer task takes: a line's text, to which it appends `\n`.
pub(crate) trait WireLine: Send + 'static {
    /// The text, to which the writer appends `\n` in place.
    fn text_mut(&mut self) -> &mut String;
}

impl WireLine for String {
    fn text_mut(&mut self) -> &mut String {
        self
    }
}

impl WireLine for Line {
    fn text_mut(&mut self) -> &mut String {
        &mut self.text
    }
}

/// Lines queued for a writer task, the server's (stdio, Unix socket,
/// WebSocket) and the Client's alike. Two: one being written while the next
/// waits; a server's replies wait in its bounded outbox, counted in bytes,
/// and every line here is memory beyond that bound (four held 0.17 MiB
/// more of a stream's peak). A Client's callers wait for room in turn.
pub(crate) const WRITER_QUEUE: usize = 2;

/// Spawns the task that owns `writer`: it writes each line with `\n` and
/// flushes whenever its queue is empty, so no message waits in a buffer.
/// A line (and its charge) is dropped once written. It ends when every
/// sender is dropped, after flushing.
pub(crate) fn spawn_writer<W, L>(mut writer: W) -> (mpsc::Sender<L>, JoinHandle<io::Result<()>>)
where
    W: AsyncWrite + Unpin + Send + 'static,
    L: WireLine,
{
    let (tx, mut rx) = mpsc::channel::<L>(WRITER_QUEUE);
    let task = tokio::spawn(async move {
        while let Some(line) = rx.recv().await {
            write_line(&mut writer, line).await?;
            while let Ok(line) = rx.try_recv() {
                write_line(&mut writer, line).await?;
            }
            writer.flush().await?;
        }
        writer.flush().await?;
        writer.shutdown().await
    });
    (tx, task)
}

/// Writes `line` and its `\n` in one write (the large lines are made with
/// room for it), so a reader is woken once per line.
async fn write_line<W: AsyncWrite + Unpin, L: WireLine>(
    writer: &mut W,
    mut line: L,
) -> io::Result<()> {
    let text = line.text_mut();
    text.push('\n');
    writer.write_all(text.as_bytes()).await
}

/// A random session id in the form of a version 4 UUID.
pub(crate) fn new_id() -> String {
    let mut bytes = [0u8; 16];
    let mut filled = 0;
    // getrandom(2) on Linux; elsewhere (the client half on macOS or
    // Windows) std's randomly keyed hasher below.
    #[cfg(not(target_os = "linux"))]
    let filled_by_os = false;
    #[cfg(target_os = "linux")]
    let filled_by_os = true;
    while filled < bytes.len() {
        let got = if filled_by_os { getrandom(&mut bytes[filled..]) } else { 0 };
        if got < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        if got <= 0 {
            // No entropy source (cannot happen on Linux ≥ 3.17): fall back on
            // std's randomly keyed hasher, which still differs per process.
            let fallback = std::hash::BuildHasher::hash_one(
                &std::collections::hash_map::RandomState::new(),
                std::time::SystemTime::now(),
            );
            bytes[filled..]
                .iter_mut()
                .zip(fallback.to_le_bytes().iter().cycle())
                .for_each(|(byte, random)| *byte = *random);
            break;
        }
        filled += got as usize;
    }
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..])
}

#[cfg(target_os = "linux")]
fn getrandom(bytes: &mut [u8]) -> isize {
    // SAFETY: getrandom writes at most the given length into the buffer.
    unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) }
}

#[cfg(not(target_os = "linux"))]
fn getrandom(_bytes: &mut [u8]) -> isize {
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One unit read from the input.
    #[derive(Debug, PartialEq, Eq)]
    enum Frame {
        /// A non-blank line without its `\n` or `\r\n`.
        Line(Vec<u8>),
        /// A line longer than the limit; its bytes were discarded.
        TooLong { limit: usize },
    }

    /// Reads the next frame (a line, or the note that one was too long); `Ok(None)` at end of input. Blank lines are skipped.
    /// A last line without `\n` still counts as a line.
    async fn read_frame<R: AsyncBufRead + Unpin>(
        reader: &mut R,
        limit: usize,
    ) -> io::Result<Option<Frame>> {
        let mut line = Vec::new();
        Ok(read_line_into(reader, limit, &mut line).await?.map(|fits| match fits {
            true => Frame::Line(line),
            false => Frame::TooLong { limit },
        }))
    }

    async fn frames(input: &[u8], limit: usize) -> Vec<Frame> {
        // A tiny buffer exercises lines split across reads.
        let mut reader = tokio::io::BufReader::with_capacity(4, input);
        let mut out = Vec::new();
        while let Some(frame) = read_frame(&mut reader, limit).await.unwrap() {
            out.push(frame);
        }
        out
    }

    fn line(text: &str) -> Frame {
        Frame::Line(text.as_bytes().to_vec())
    }

    #[tokio::test]
    async fn splits_lines_and_strips_crlf() {
        assert_eq!(
            frames(b"{\"a\":1}\r\n{\"b\":2}\n", 100).await,
            vec![line("{\"a\":1}"), line("{\"b\":2}")]
        );
    }

    #[tokio::test]
    async fn skips_blank_lines_and_keeps_an_unterminated_last_line() {
        assert_eq!(frames(b"\n\r\n  \n{}\n\n[1]", 100).await, vec![line("{}"), line("[1]")]);
    }

    #[tokio::test]
    async fn long_lines_are_discarded_and_reading_goes_on() {
        assert_eq!(
            frames(b"0123456789abc\n{}\n0123456789", 10).await,
            vec![Frame::TooLong { limit: 10 }, line("{}"), line("0123456789")]
        );
    }

    /// The frames [`for_each_line`] hands on, read through a buffer of `capacity`.
    async fn handed_on(input: &[u8], limit: usize, capacity: usize) -> Vec<Frame> {
        each_line(&mut tokio::io::BufReader::with_capacity(capacity, input), limit).await
    }

    /// The frames [`for_each_line`] hands on from `reader`.
    async fn each_line<R: AsyncBufRead + Unpin>(reader: &mut R, limit: usize) -> Vec<Frame> {
        let mut out = Vec::new();
        for_each_line(reader, limit, |read| {
            out.push(match read {
                ReadLine::Line(line) => Frame::Line(line.to_vec()),
                ReadLine::TooLong => Frame::TooLong { limit },
            })
        })
        .await
        .unwrap();
        out
    }

    #[tokio::test]
    async fn lines_handed_on_in_place_are_the_lines_read() {
        let inputs: [&[u8]; 6] = [
            b"{\"a\":1}\r\n{\"b\":2}\n",
            b"\n\r\n  \n{}\n\n[1]",
            b"0123456789abc\n{}\n0123456789",
            b"0123456789a",
            b"0123456789\r\n\r\n\r",
            b"",
        ];
        for input in inputs {
            let expected = frames(input, 10).await;
            // Buffers that hold whole lines, split them, or end inside `\r\n`.
            for capacity in [1, 2, 3, 4, 5, 7, 11, 12, 13, 64] {
                assert_eq!(
                    handed_on(input, 10, capacity).await,
                    expected,
                    "{:?} through a buffer of {capacity}",
                    String::from_utf8_lossy(input)
                );
            }
        }
    }

    /// Input handed out in short reads of the given sizes, in turn.
    struct Trickle {
        input: Vec<u8>,
        at: usize,
        sizes: Vec<usize>,
        turn: usize,
    }

    impl tokio::io::AsyncRead for Trickle {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            let me = &mut *self;
            let size = me.sizes[me.turn % me.sizes.len()];
            me.turn += 1;
            let n = size.min(buf.remaining()).min(me.input.len() - me.at);
            buf.put_slice(&me.input[me.at..me.at + n]);
            me.at += n;
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn random_input_in_short_reads_hands_on_the_lines_read() {
        // xorshift64: the same inputs on every run.
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move |below: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            usize::try_from(state % below).unwrap()
        };
        let alphabet = b"\n\r \t{}a\x00\xff\x0b";
        for _ in 0..20_000 {
            let input: Vec<u8> =
                (0..next(60)).map(|_| alphabet[next(alphabet.len() as u64)]).collect();
            let (limit, capacity) = (next(12), 1 + next(16));
            let sizes: Vec<usize> = (0..4).map(|_| 1 + next(9)).collect();
            let trickle = || Trickle { input: input.clone(), at: 0, sizes: sizes.clone(), turn: 0 };
            let mut reader = tokio::io::BufReader::with_capacity(capacity, trickle());
            let mut expected = Vec::new();
            while let Some(frame) = read_frame(&mut reader, limit).await.unwrap() {
                expected.push(frame);
            }
            let mut reader = tokio::io::BufReader::with_capacity(capacity, trickle());
            let got = each_line(&mut reader, limit).await;
            assert_eq!(
                got, expected,
                "{input:?}, limit {limit}, buffer {capacity}, reads {sizes:?}"
            );
        }
    }

    #[tokio::test]
    async fn empty_input_is_eof() {
        assert_eq!(frames(b"", 10).await, vec![]);
    }

    #[tokio::test]
    async fn writer_flushes_a_line_without_waiting_for_more() {
        let (client, server) = tokio::io::duplex(1024);
        // A buffered writer: without the flush, the line would sit in its buffer.
        let (tx, _task) = spawn_writer::<_, String>(tokio::io::BufWriter::new(server));
        tx.send("{\"id\":1}".into()).await.unwrap();
        let mut lines = tokio::io::BufReader::new(client).lines();
        let line = tokio::time::timeout(std::time::Duration::from_secs(10), lines.next_line());
        assert_eq!(line.await.unwrap().unwrap().as_deref(), Some("{\"id\":1}"));
        drop(tx);
    }

    #[tokio::test]
    async fn writer_writes_every_line_in_order() {
        let (client, server) = tokio::io::duplex(1024);
        let (tx, task) = spawn_writer::<_, String>(server);
        tx.send("{\"id\":1}".into()).await.unwrap();
        tx.send("{\"id\":2}".into()).await.unwrap();
        drop(tx);
        task.await.unwrap().unwrap();
        let mut text = String::new();
        let mut client = client;
        tokio::io::AsyncReadExt::read_to_string(&mut client, &mut text).await.unwrap();
        assert_eq!(text, "{\"id\":1}\n{\"id\":2}\n");
    }
}
