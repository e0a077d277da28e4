//! The tasks of one process: output readers, the stdin writer and the exit watcher.
//!
//! They all live in the process's `JoinSet` and talk to the server loop only
//! through the bounded event channel, so a slow client applies backpressure.

use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;

use portable_pty::MasterPty;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::signal::ExitInfo;
use super::spawn::{wait_exit, ChildIo};
use crate::protocol::Stream;

/// Largest output chunk: one read of a (grown) pipe or a terminal.
const READ_BUFFER: usize = 64 * 1024;
/// Queued stdin writes per process before `process/write` is refused.
pub(crate) const STDIN_QUEUE: usize = 1024;

/// What a process's tasks report to the loop. `serial` names the process.
#[derive(Debug)]
pub(crate) enum ProcEvent {
    Output { serial: u64, stream: Stream, bytes: Vec<u8> },
    StreamEnd { serial: u64 },
    Exited { serial: u64, exit: io::Result<ExitInfo> },
}

/// One queued stdin operation: write `bytes`, then close when `close`.
#[derive(Debug)]
pub(crate) struct StdinOp {
    pub(crate) bytes: Vec<u8>,
    pub(crate) close: bool,
}

/// The handles the loop keeps after the tasks are started.
pub(crate) struct Handles {
    pub(crate) stdin: Option<mpsc::Sender<StdinOp>>,
    pub(crate) master: Option<Box<dyn MasterPty + Send>>,
    pub(crate) open_streams: u8,
}

/// Starts every task of a freshly spawned process inside `tasks`.
pub(crate) fn start(
    serial: u64,
    pid: u32,
    pidfd: OwnedFd,
    io: ChildIo,
    events: &mpsc::Sender<ProcEvent>,
    tasks: &mut JoinSet<()>,
) -> io::Result<Handles> {
    let handles = match io {
        ChildIo::Pipes { stdin, stdout, stderr } => {
            let stdout = tokio::process::ChildStdout::from_std(stdout)?;
            let stderr = tokio::process::ChildStderr::from_std(stderr)?;
            tasks.spawn(read_pipe(serial, Stream::Stdout, stdout, events.clone()));
            tasks.spawn(read_pipe(serial, Stream::Stderr, stderr, events.clone()));
            let stdin = match stdin {
                Some(stdin) => {
                    let stdin = tokio::process::ChildStdin::from_std(stdin)?;
                    let (tx, rx) = mpsc::channel(STDIN_QUEUE);
                    tasks.spawn(write_pipe(stdin, rx));
                    Some(tx)
                }
                None => None,
            };
            Handles { stdin, master: None, open_streams: 2 }
        }
        ChildIo::Pty { master } => {
            let reader = master.try_clone_reader().map_err(io::Error::other)?;
            // A plain dup of the master: portable-pty's own writer sends "\n^D" when dropped.
            let writer: Box<dyn Write + Send> = Box::new(dup_master(master.as_ref())?);
            let output = events.clone();
            tasks.spawn_blocking(move || read_pty(serial, reader, output));
            let (tx, rx) = mpsc::channel(STDIN_QUEUE);
            tasks.spawn_blocking(move || write_pty(writer, rx));
            Handles { stdin: Some(tx), master: Some(master), open_streams: 1 }
        }
    };
    let exits = events.clone();
    tasks.spawn(async move {
        let exit = wait_exit(pid, pidfd).await;
        let _ = exits.send(ProcEvent::Exited { serial, exit }).await;
    });
    Ok(handles)
}

fn dup_master(master: &dyn MasterPty) -> io::Result<std::fs::File> {
    let fd = master.as_raw_fd().ok_or_else(|| io::Error::other("terminal has no descriptor"))?;
    // SAFETY: the master owns `fd` and outlives this call; the dup is ours.
    let owned = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }.try_clone_to_owned()?;
    Ok(std::fs::File::from(owned))
}

async fn read_pipe<R: AsyncRead + Unpin>(
    serial: u64,
    stream: Stream,
    mut pipe: R,
    events: mpsc::Sender<ProcEvent>,
) {
    let mut buffer = vec![0; READ_BUFFER];
    loop {
        match pipe.read(&mut buffer).await {
            Ok(0) => break,
            Ok(n) => {
                let bytes = buffer[..n].to_vec();
                if events.send(ProcEvent::Output { serial, stream, bytes }).await.is_err() {
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
    let _ = events.send(ProcEvent::StreamEnd { serial }).await;
}

async fn write_pipe(mut stdin: tokio::process::ChildStdin, mut ops: mpsc::Receiver<StdinOp>) {
    while let Some(op) = ops.recv().await {
        if let Err(error) = stdin.write_all(&op.bytes).await {
            tracing::debug!(%error, "writing to process stdin failed; closing it");
            return;
        }
        if op.close {
            return;
        }
    }
}

fn read_pty(serial: u64, mut reader: Box<dyn Read + Send>, events: mpsc::Sender<ProcEvent>) {
    let mut buffer = vec![0; READ_BUFFER];
    loop {
        match reader.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => {
                let bytes = buffer[..n].to_vec();
                let event = ProcEvent::Output { serial, stream: Stream::Pty, bytes };
                if events.blocking_send(event).is_err() {
                    return;
                }
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            // EIO: every process holding the terminal is gone.
            Err(_) => break,
        }
    }
    let _ = events.blocking_send(ProcEvent::StreamEnd { serial });
}

fn write_pty(mut writer: Box<dyn Write + Send>, mut ops: mpsc::Receiver<StdinOp>) {
    while let Some(op) = ops.blocking_recv() {
        if let Err(error) = writer.write_all(&op.bytes).and_then(|()| writer.flush()) {
            tracing::debug!(%error, "writing to terminal failed");
            return;
        }
    }
}
