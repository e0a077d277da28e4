//! `fs/watch`: change notifications for a path or a tree, through inotify.
//!
//! Each connection that watches gets a thread ([`worker`]) that owns its
//! inotify instance; the loop hands it `fs/watch` and `fs/unwatch` and takes
//! its replies and `fs/changed` lines from a bounded channel, like any other
//! source of lines, only when the outbox has room. The thread never waits
//! for the loop to send changes (they stay pending, merged and bounded,
//! until it can), so a flood of changes cannot delay the connection's
//! replies, and the loop never waits for the thread.
//!
//! Layout: `inotify` (the system calls), `tree` (watched directories,
//! opened beneath their root without following symlinks), `pending`
//! (coalescing and the bound), `worker` (the thread).

mod inotify;
mod pending;
mod tree;
mod worker;

pub(crate) use self::worker::Command;

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;

use crate::fs::Roots;
use crate::protocol::{encode_response, Empty, ErrorObject, RequestId};

/// Lines from the thread waiting for the loop (each a reply or a batch of at
/// most `worker::BATCH` changes): what the loop has not taken counts
/// against the pending bound soon, as changes then wait in the thread.
const LINES: usize = 2;

/// Commands the thread may have waiting; at this many the loop takes no more
/// input until it catches up (a recursive watch of a large tree takes a while).
const COMMANDS: usize = 16;

/// A connection's watches, as the loop sees them.
pub(crate) struct Watcher {
    roots: Arc<Roots>,
    worker: Option<Handle>,
    /// Commands handed over and not yet handled by the thread.
    outstanding: Arc<AtomicUsize>,
}

struct Handle {
    commands: mpsc::Sender<Command>,
    wake: Arc<OwnedFd>,
    lines: tokio::sync::mpsc::Receiver<String>,
}

impl Watcher {
    pub(crate) fn new(roots: Arc<Roots>) -> Watcher {
        Watcher { roots, worker: None, outstanding: Arc::default() }
    }

    /// Whether another command may be taken (see [`COMMANDS`]).
    pub(crate) fn has_room(&self) -> bool {
        self.outstanding.load(Ordering::Acquire) < COMMANDS
    }

    /// Hands a command to the thread (started on first use); its reply comes
    /// from [`Watcher::next_line`]. An error reply now if the thread cannot start.
    pub(crate) fn submit(&mut self, id: &RequestId, command: Command) -> Option<String> {
        if self.worker.is_none() {
            match start(self.roots.clone(), self.outstanding.clone()) {
                Ok(handle) => self.worker = Some(handle),
                Err(error) => {
                    let error =
                        ErrorObject::internal(format!("cannot start the watcher thread: {error}"));
                    return Some(encode_response::<Empty>(id, &Err(error)));
                }
            }
        }
        let handle = self.worker.as_ref()?;
        self.outstanding.fetch_add(1, Ordering::AcqRel);
        if handle.commands.send(command).is_err() {
            self.outstanding.fetch_sub(1, Ordering::AcqRel);
            let error = ErrorObject::internal("the watcher thread is gone");
            return Some(encode_response::<Empty>(id, &Err(error)));
        }
        wake(&handle.wake);
        None
    }

    /// The next reply or `fs/changed` line; pending forever while nothing watches.
    pub(crate) async fn next_line(&mut self) -> String {
        match self.worker.as_mut() {
            Some(handle) => match handle.lines.recv().await {
                Some(line) => line,
                None => std::future::pending().await,
            },
            None => std::future::pending().await,
        }
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // The thread sees the channel closed at its next wake, and ends; its
        // inotify instance closes with it, which frees every kernel watch.
        let (closed, _) = mpsc::channel();
        drop(std::mem::replace(&mut self.commands, closed));
        wake(&self.wake);
    }
}

fn start(roots: Arc<Roots>, outstanding: Arc<AtomicUsize>) -> std::io::Result<Handle> {
    // SAFETY: a new eventfd, or -1.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new descriptor owned by nobody else.
    let wake = Arc::new(unsafe { OwnedFd::from_raw_fd(fd) });
    let (commands, queue) = mpsc::channel();
    let (lines_tx, lines) = tokio::sync::mpsc::channel(LINES);
    let thread_wake = wake.clone();
    // Detached, like the spawner: it ends when its connection drops the handle.
    std::thread::Builder::new()
        .name("exec-server-watch".into())
        .spawn(move || worker::run(queue, thread_wake, lines_tx, roots, outstanding))?;
    Ok(Handle { commands, wake, lines })
}

fn wake(fd: &OwnedFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes to our eventfd.
    unsafe { libc::write(fd.as_raw_fd(), std::ptr::addr_of!(one).cast(), 8) };
}
