//! Descriptors the process table and the sandbox both make for children.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// A pipe as (read end, write end), both close-on-exec.
pub(crate) fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two new descriptors into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// `fd` as a descriptor numbered at least `lowest` (moved there, close-on-exec,
/// when it is below): a source the spawn's dup2s onto the numbers below
/// `lowest` can never clobber.
pub(crate) fn at_least(fd: OwnedFd, lowest: RawFd) -> io::Result<OwnedFd> {
    use std::os::fd::AsRawFd;
    if fd.as_raw_fd() >= lowest {
        return Ok(fd);
    }
    // SAFETY: duplicates a valid descriptor to a new one of at least `lowest`.
    let moved = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, lowest) };
    if moved < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(moved) })
}
