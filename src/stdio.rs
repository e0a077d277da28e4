//! The process's stdin and stdout as async streams for the stdio server.
//!
//! When they are pipes (a parent program, `ssh`, a shell pipeline) they are
//! driven by the reactor directly; anything else (a terminal, a file) goes
//! through tokio's stdio, which hands each read and write to a blocking thread.
//! Pipes are switched to non-blocking mode while in use; [`FlagsGuard`] puts the
//! original flags back when dropped.

mod face;

pub(crate) use self::face::{serve_stdio, Face};

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::unix::pipe;

/// The server's ends of stdin and stdout.
pub(crate) struct Stdio {
    /// Reads the input.
    pub(crate) reader: Box<dyn AsyncRead + Send + Unpin>,
    /// Writes the output.
    pub(crate) writer: Box<dyn AsyncWrite + Send + Unpin>,
    /// Restores the descriptors' flags when dropped: keep it until the server is done.
    pub(crate) guard: FlagsGuard,
}

/// Puts back the flags of stdin and stdout that [`Stdio::open`] changed.
pub(crate) struct FlagsGuard {
    restore: Vec<(libc::c_int, libc::c_int)>,
}

impl Stdio {
    /// Opens stdin and stdout; must be called inside a tokio runtime.
    pub(crate) fn open() -> Stdio {
        let mut restore = Vec::new();
        let reader: Box<dyn AsyncRead + Send + Unpin> =
            match pipe_end(libc::STDIN_FILENO, &mut restore)
                .map(grown)
                .and_then(pipe::Receiver::from_owned_fd)
            {
                Ok(pipe) => Box::new(pipe),
                Err(_) => Box::new(tokio::io::stdin()),
            };
        let writer: Box<dyn AsyncWrite + Send + Unpin> =
            match pipe_end(libc::STDOUT_FILENO, &mut restore)
                .map(grown)
                .and_then(pipe::Sender::from_owned_fd)
            {
                Ok(pipe) => Box::new(pipe),
                Err(_) => Box::new(tokio::io::stdout()),
            };
        Stdio { reader, writer, guard: FlagsGuard { restore } }
    }
}

impl Drop for FlagsGuard {
    fn drop(&mut self) {
        for &(fd, flags) in &self.restore {
            // SAFETY: fcntl on a standard descriptor this process owns.
            unsafe { libc::fcntl(fd, libc::F_SETFL, flags) };
        }
    }
}

/// The buffer asked for stdin and stdout pipes (the default is 64 KiB): lines
/// of megabytes then cross in fewer, larger reads and writes (measured: the raw
/// output stream 0.41 -> 0.64-0.80 of a direct pipe read). Not larger: every
/// pipe page counts against the user's pipe-user-pages-soft (64 MiB), past
/// which new pipes of that user get two pages; 256 KiB is 128 pages, so even
/// dozens of servers stay well inside it. Best effort: a refusal keeps the default.
const PIPE_SIZE: libc::c_int = 256 << 10;

/// `pipe` with its buffer grown to [`PIPE_SIZE`] if it is smaller and the
/// kernel allows (the pipe is the client's too: a larger one is kept).
fn grown(pipe: OwnedFd) -> OwnedFd {
    // SAFETY: F_GETPIPE_SZ and F_SETPIPE_SZ only read and resize the buffer of
    // a pipe this process holds.
    unsafe {
        let size = libc::fcntl(pipe.as_raw_fd(), libc::F_GETPIPE_SZ);
        if (0..PIPE_SIZE).contains(&size) {
            libc::fcntl(pipe.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_SIZE);
        }
    }
    pipe
}

/// A duplicate of `fd` when it is a pipe, remembering its flags to restore.
fn pipe_end(fd: libc::c_int, restore: &mut Vec<(libc::c_int, libc::c_int)>) -> io::Result<OwnedFd> {
    // SAFETY: stat is plain data, filled in by fstat.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes only to `stat`.
    if unsafe { libc::fstat(fd, &mut stat) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if stat.st_mode & libc::S_IFMT != libc::S_IFIFO {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a pipe"));
    }
    // SAFETY: F_GETFL reads the descriptor's flags.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags == -1 {
        return Err(io::Error::last_os_error());
    }
    restore.push((fd, flags));
    // SAFETY: the standard descriptors stay open for the life of the process.
    unsafe { BorrowedFd::borrow_raw(fd) }.try_clone_to_owned()
}

/// Completes when stdout is a pipe whose reader has gone away, even while the
/// server has nothing to write (pending forever otherwise).
pub(crate) async fn output_hangup() {
    let watched = pipe_end(libc::STDOUT_FILENO, &mut Vec::new()).and_then(|fd| {
        // SAFETY: the OwnedFd stays open and unchanged while the AsyncFd owns it.
        unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::ERROR) }
            .map_err(io::Error::from)
    });
    match watched {
        Ok(fd) => {
            if fd.ready(tokio::io::Interest::ERROR).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        Err(_) => std::future::pending().await,
    }
}
