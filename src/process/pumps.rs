//! The tasks of one process: output readers, the stdin writer and the exit watcher.
//!
//! They all live in the process's `JoinSet`, run on the reactor (pipes and the
//! pty master alike are non-blocking; no thread per process), and talk to the
//! server loop only through the bounded event channel, so a slow client applies
//! backpressure.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use portable_pty::MasterPty;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, Interest};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use super::signal::ExitInfo;
use super::spawn::{wait_exit, ChildIo};
use super::wide_pipe::Slot;
use crate::protocol::Stream;

/// Largest output chunk: one read of a (grown) pipe or a terminal.
pub(super) const READ_BUFFER: usize = 64 * 1024;
/// Bytes of stdin queued per process before `process/write` is refused: 8 MiB.
pub(crate) const STDIN_LIMIT: usize = 8 * 1024 * 1024;
/// What each queued write counts on top of its bytes (so empty writes are bounded too).
const STDIN_OVERHEAD: usize = 64;

/// What a process's tasks report to the loop. `serial` names the process.
#[derive(Debug)]
pub(crate) enum ProcEvent {
    /// Output; `_budget` holds its bytes' share of [`OUTPUT_BUDGET`] until the event is dropped.
    Output {
        serial: u64,
        stream: Stream,
        bytes: Vec<u8>,
        _budget: OwnedSemaphorePermit,
    },
    StreamEnd {
        serial: u64,
    },
    Exited {
        serial: u64,
        exit: io::Result<ExitInfo>,
    },
    /// What a sandbox's proxy reports.
    Network {
        serial: u64,
        report: crate::proxy::Report,
    },
}

/// Bytes of output on their way to the loop, for all of a connection's
/// processes: the queue of events is bounded in bytes, not in events, so a
/// stream holds little memory while exits and stream ends of a fan-out of
/// processes never wait behind it (a queue of 4 events cost the 200-at-once
/// start 10 %; one of 8 cost the streaming server 0.4 MiB). Two reads: one
/// on its way while the loop encodes the other (four held 128 KiB more at
/// a stream's peak, for no faster stream).
pub(super) const OUTPUT_BUDGET: usize = 2 * READ_BUFFER;

/// The pumps' end of a connection's process events.
#[derive(Clone, Debug)]
pub(crate) struct EventSender {
    events: mpsc::Sender<ProcEvent>,
    budget: Arc<Semaphore>,
}

impl EventSender {
    pub(crate) fn new(events: mpsc::Sender<ProcEvent>) -> EventSender {
        EventSender { events, budget: Arc::new(Semaphore::new(OUTPUT_BUDGET)) }
    }

    /// Sends output once its bytes fit in the budget; false when the loop is gone.
    pub(super) async fn output(&self, serial: u64, stream: Stream, bytes: Vec<u8>) -> bool {
        // A read is at most READ_BUFFER bytes, well inside the budget; the
        // cap only keeps an impossible larger one from waiting forever.
        let share = u32::try_from(bytes.len().min(OUTPUT_BUDGET)).unwrap_or(0);
        let Ok(budget) = self.budget.clone().acquire_many_owned(share).await else { return false };
        self.events.send(ProcEvent::Output { serial, stream, bytes, _budget: budget }).await.is_ok()
    }

    /// Sends any other event; false when the loop is gone.
    pub(super) async fn send(&self, event: ProcEvent) -> bool {
        self.events.send(event).await.is_ok()
    }
}

/// One queued stdin operation: write `bytes`, then close when `close`.
#[derive(Debug)]
pub(crate) struct StdinOp {
    pub(crate) bytes: Vec<u8>,
    pub(crate) close: bool,
}

/// Why a stdin write was refused.
#[derive(Debug)]
pub(crate) enum StdinError {
    /// The writer task is gone (the process closed its stdin).
    Closed,
    /// The chunk alone is over [`STDIN_LIMIT`]; holds its size.
    TooLarge(usize),
    /// Queuing it would pass [`STDIN_LIMIT`]; holds the bytes already queued.
    Full(usize),
}

/// The loop's end of a process's stdin: a queue bounded in bytes.
#[derive(Debug)]
pub(crate) struct StdinQueue {
    ops: mpsc::UnboundedSender<StdinOp>,
    queued: Arc<AtomicUsize>,
    /// A duplicate of a pipe's write end, polled to learn that nobody reads it
    /// any more (dropped with the queue, so closing stdin still delivers EOF).
    probe: Option<OwnedFd>,
}

impl StdinQueue {
    fn new(probe: Option<OwnedFd>) -> (StdinQueue, StdinFeed) {
        let (ops, rx) = mpsc::unbounded_channel();
        let queued = Arc::new(AtomicUsize::new(0));
        (StdinQueue { ops, queued: queued.clone(), probe }, StdinFeed { ops: rx, queued })
    }

    /// Queues `op` unless nobody reads the pipe any more, or it would pass the byte limit.
    pub(crate) fn push(&self, op: StdinOp) -> Result<(), StdinError> {
        if self.probe.as_ref().is_some_and(reader_gone) {
            return Err(StdinError::Closed);
        }
        let weight = op.bytes.len() + STDIN_OVERHEAD;
        if weight > STDIN_LIMIT {
            return Err(StdinError::TooLarge(op.bytes.len()));
        }
        let queued = self.queued.load(Ordering::Acquire);
        if queued + weight > STDIN_LIMIT {
            return Err(StdinError::Full(queued));
        }
        self.queued.fetch_add(weight, Ordering::AcqRel);
        self.ops.send(op).map_err(|_| StdinError::Closed)
    }
}

/// Whether the read end of the pipe `fd` writes to is closed (poll reports
/// POLLERR at once; never blocks).
fn reader_gone(fd: &OwnedFd) -> bool {
    let mut poll = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLOUT, revents: 0 };
    // SAFETY: one valid pollfd, a zero timeout.
    let ready = unsafe { libc::poll(&mut poll, 1, 0) };
    ready > 0 && poll.revents & libc::POLLERR != 0
}

/// The writer task's end of a [`StdinQueue`].
struct StdinFeed {
    ops: mpsc::UnboundedReceiver<StdinOp>,
    queued: Arc<AtomicUsize>,
}

impl StdinFeed {
    async fn next(&mut self) -> Option<StdinOp> {
        self.ops.recv().await
    }

    fn done(&self, op: &StdinOp) {
        self.queued.fetch_sub(op.bytes.len() + STDIN_OVERHEAD, Ordering::AcqRel);
    }
}

/// The handles the loop keeps after the tasks are started.
pub(crate) struct Handles {
    pub(crate) stdin: Option<StdinQueue>,
    pub(crate) master: Option<Box<dyn MasterPty + Send>>,
    pub(crate) open_streams: u8,
}

/// Starts every task of a freshly spawned process inside `tasks`.
pub(crate) fn start(
    serial: u64,
    pid: u32,
    pidfd: OwnedFd,
    io: ChildIo,
    events: &EventSender,
    tasks: &mut JoinSet<()>,
) -> io::Result<Handles> {
    let handles = match io {
        ChildIo::Pipes { stdin, stdout, stderr, wide } => {
            let stdout = tokio::process::ChildStdout::from_std(stdout)?;
            let stderr = tokio::process::ChildStderr::from_std(stderr)?;
            tasks.spawn(read_pipe(serial, Stream::Stdout, stdout, wide, events.clone()));
            tasks.spawn(read_pipe(serial, Stream::Stderr, stderr, None, events.clone()));
            let stdin = match stdin {
                Some(stdin) => {
                    let probe = std::os::fd::AsFd::as_fd(&stdin).try_clone_to_owned()?;
                    let stdin = tokio::process::ChildStdin::from_std(stdin)?;
                    let (queue, feed) = StdinQueue::new(Some(probe));
                    tasks.spawn(write_pipe(stdin, feed));
                    Some(queue)
                }
                None => None,
            };
            Handles { stdin, master: None, open_streams: 2 }
        }
        ChildIo::Pty { master } => {
            // A plain dup of the master, non-blocking and driven by the reactor
            // (portable-pty's own reader and writer block, and its writer sends
            // "\n^D" when dropped).
            let fd = dup_master(master.as_ref())?;
            // SAFETY: the OwnedFd stays open and is not replaced while the AsyncFd owns it.
            let terminal = Arc::new(unsafe {
                AsyncFd::register_with_interest(fd, Interest::READABLE | Interest::WRITABLE)
            }?);
            tasks.spawn(read_pty(serial, terminal.clone(), events.clone()));
            let (queue, feed) = StdinQueue::new(None);
            tasks.spawn(write_pty(terminal, feed));
            Handles { stdin: Some(queue), master: Some(master), open_streams: 1 }
        }
    };
    let exits = events.clone();
    tasks.spawn(async move {
        let exit = wait_exit(pid, pidfd).await;
        exits.send(ProcEvent::Exited { serial, exit }).await;
    });
    Ok(handles)
}

/// A non-blocking duplicate of the pty master. The flag is shared with the
/// master's own descriptor, which is only used for resizes.
fn dup_master(master: &dyn MasterPty) -> io::Result<OwnedFd> {
    let fd = master
        .as_raw_fd()
        .ok_or_else(|| io::Error::other("the pseudo-terminal master has no descriptor"))?;
    // SAFETY: the master owns `fd` and outlives this call; the dup is ours.
    let owned = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }.try_clone_to_owned()?;
    // SAFETY: fcntl on a descriptor we own.
    let flags = unsafe { libc::fcntl(owned.as_raw_fd(), libc::F_GETFL) };
    // SAFETY: as above; O_NONBLOCK only changes how reads and writes wait.
    if flags == -1
        || unsafe { libc::fcntl(owned.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) } == -1
    {
        return Err(io::Error::last_os_error());
    }
    Ok(owned)
}

/// A read at least this large is handed on in the buffer it was read into (a
/// stream's full reads: no copy); a smaller one is copied out at its size, so
/// retained output never holds much more memory than its bytes.
pub(super) const HAND_OVER: usize = READ_BUFFER / 4 * 3;

/// The bytes just read into `buffer` (emptied for the next read): the buffer
/// itself for a large read, a copy for a small one.
pub(super) fn take_read(buffer: &mut Vec<u8>) -> Vec<u8> {
    let bytes = if buffer.len() >= HAND_OVER {
        std::mem::replace(buffer, Vec::with_capacity(READ_BUFFER))
    } else {
        buffer.clone()
    };
    buffer.clear();
    bytes
}

/// Reads `pipe` to its end; `wide`, the slot of a grown pipe, goes back
/// with the pipe, before the end is reported.
async fn read_pipe<R: AsyncRead + Unpin>(
    serial: u64,
    stream: Stream,
    mut pipe: R,
    wide: Option<Slot>,
    events: EventSender,
) {
    // Not zeroed: a process that prints nothing touches none of its pages.
    let mut buffer = Vec::with_capacity(READ_BUFFER);
    loop {
        match pipe.read_buf(&mut buffer).await {
            Ok(0) => break,
            Ok(_) => {
                if !events.output(serial, stream, take_read(&mut buffer)).await {
                    return;
                }
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => {
                tracing::warn!(serial, ?stream, %error, "reading process output failed");
                break;
            }
        }
    }
    drop((pipe, wide));
    events.send(ProcEvent::StreamEnd { serial }).await;
}

async fn write_pipe(mut stdin: tokio::process::ChildStdin, mut feed: StdinFeed) {
    while let Some(op) = feed.next().await {
        let written = stdin.write_all(&op.bytes).await;
        feed.done(&op);
        if let Err(error) = written {
            tracing::debug!(%error, "writing to process stdin failed; closing it");
            return;
        }
        if op.close {
            return;
        }
    }
}

async fn read_pty(serial: u64, terminal: Arc<AsyncFd<OwnedFd>>, events: EventSender) {
    let mut buffer = Vec::with_capacity(READ_BUFFER);
    loop {
        let Ok(mut ready) = terminal.readable().await else { break };
        let read = ready.try_io(|fd| {
            let spare = buffer.spare_capacity_mut();
            // SAFETY: read(2) writes at most `spare.len()` bytes into the
            // buffer's unused capacity.
            let n = unsafe { libc::read(fd.as_raw_fd(), spare.as_mut_ptr().cast(), spare.len()) };
            usize::try_from(n).map_err(|_| io::Error::last_os_error())
        });
        match read {
            Err(_would_block) => continue,
            Ok(Ok(0)) => break,
            Ok(Ok(n)) => {
                // SAFETY: read(2) initialised the first `n` bytes of the spare capacity.
                unsafe { buffer.set_len(n) };
                if !events.output(serial, Stream::Pty, take_read(&mut buffer)).await {
                    return;
                }
            }
            Ok(Err(error)) if error.kind() == io::ErrorKind::Interrupted => continue,
            // EIO: every process holding the terminal is gone.
            Ok(Err(_)) => break,
        }
    }
    events.send(ProcEvent::StreamEnd { serial }).await;
}

async fn write_pty(terminal: Arc<AsyncFd<OwnedFd>>, mut feed: StdinFeed) {
    while let Some(op) = feed.next().await {
        let written = write_all_nonblocking(&terminal, &op.bytes).await;
        feed.done(&op);
        if let Err(error) = written {
            tracing::debug!(%error, "writing to terminal failed");
            return;
        }
    }
}

async fn write_all_nonblocking(terminal: &AsyncFd<OwnedFd>, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        let mut ready = terminal.writable().await?;
        let written = ready.try_io(|fd| {
            // SAFETY: `bytes` is valid for reads of its length.
            let n = unsafe { libc::write(fd.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
            usize::try_from(n).map_err(|_| io::Error::last_os_error())
        });
        match written {
            Err(_would_block) => continue,
            Ok(Ok(n)) => bytes = &bytes[n..],
            Ok(Err(error)) if error.kind() == io::ErrorKind::Interrupted => continue,
            Ok(Err(error)) => return Err(error),
        }
    }
    Ok(())
}
