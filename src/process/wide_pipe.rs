//! Children's stdout pipes grown past the kernel's 64 KiB, a few at a time.
//!
//! A child that prints fast fills a 64 KiB pipe in one write and then waits
//! for the server to drain it; a 256 KiB pipe lets it run on while the server
//! encodes, so the two switch a quarter as often and the server's reads come
//! back full (a full read is handed on as it is, a short one is copied).
//! Measured: the output stream 6% faster and the server's peak RSS while
//! streaming 1-2 MiB lower (docs/benchmarks.md).
//!
//! Pipe pages count against the user's `fs.pipe-user-pages-soft` (past which
//! the user's new pipes get two pages) and `-hard` (past which they cannot be
//! made). So the whole server grows at most [`WIDE_PIPES`] pipes at once,
//! and fewer when those limits are low: the extra pages stay within a
//! sixteenth of the lower one ([`bound`]). Each grown pipe holds a [`Slot`]
//! until its reader is done; the slot puts the pipe back to the size it had
//! before it is released, so a descendant that kept the pipe's write end
//! (one that escaped with `setsid`) holds no more than it would have.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// The buffer asked for a grown pipe.
const WIDE_PIPE: libc::c_int = 256 << 10;

/// Pipes grown at once, server-wide, when the user's pipe limits allow.
pub(super) const WIDE_PIPES: usize = 16;

/// The pages of a new pipe (the kernel's `PIPE_DEF_BUFFERS`).
const DEFAULT_PAGES: usize = 16;

/// A count of grown pipes.
pub(super) struct Budget {
    grown: AtomicUsize,
}

/// The server's budget.
static SERVER: Budget = Budget::new();

/// One pipe of a [`Budget`], and that pipe, to be put back to `size` when
/// dropped (hold it with the reader).
pub(crate) struct Slot {
    budget: &'static Budget,
    pipe: OwnedFd,
    size: libc::c_int,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Slot")
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        shrink(&self.pipe, self.size);
        self.budget.release();
    }
}

/// Grows `pipe` (a read end) to [`WIDE_PIPE`] when the server's bound (see
/// [`bound`]) has room and the kernel allows; None leaves it as it was (best
/// effort: the default still works).
pub(super) fn widen(pipe: &OwnedFd) -> Option<Slot> {
    SERVER.widen(pipe, server_bound())
}

/// The server's bound, from this host's pipe limits, read once.
fn server_bound() -> usize {
    static BOUND: OnceLock<usize> = OnceLock::new();
    *BOUND.get_or_init(|| {
        let limit = |name: &str| {
            std::fs::read_to_string(format!("/proc/sys/fs/{name}"))
                .ok()
                .and_then(|text| text.trim().parse().ok())
                .unwrap_or(0)
        };
        // SAFETY: sysconf only reads a constant of the system.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        bound(limit("pipe-user-pages-soft"), limit("pipe-user-pages-hard"), page as usize)
    })
}

/// How many pipes may be grown at once for a user whose pipe pages are
/// limited to `soft` and `hard` (0: no limit) with pages of `page` bytes:
/// [`WIDE_PIPES`], or fewer so that their extra pages are at most a
/// sixteenth of the lower limit; none where a new pipe is already as large.
pub(super) fn bound(soft: usize, hard: usize, page: usize) -> usize {
    let wide_pages = WIDE_PIPE as usize / page.max(1);
    let Some(extra) = wide_pages.checked_sub(DEFAULT_PAGES).filter(|&extra| extra > 0) else {
        return 0;
    };
    match [soft, hard].into_iter().filter(|&limit| limit > 0).min() {
        Some(limit) => (limit / 16 / extra).min(WIDE_PIPES),
        None => WIDE_PIPES,
    }
}

impl Budget {
    const fn new() -> Budget {
        Budget { grown: AtomicUsize::new(0) }
    }

    fn widen(&'static self, pipe: &OwnedFd, most: usize) -> Option<Slot> {
        let fd = pipe.as_raw_fd();
        // SAFETY: F_GETPIPE_SZ only reads the size of a pipe this process holds.
        let size = unsafe { libc::fcntl(fd, libc::F_GETPIPE_SZ) };
        if !(0..WIDE_PIPE).contains(&size) {
            return None;
        }
        self.grown
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < most).then_some(n + 1))
            .ok()?;
        // A descriptor of its own, so the pipe can be put back even after
        // the reader's is closed (in the order a cancelled task drops them).
        let Ok(own) = pipe.try_clone() else {
            self.release();
            return None;
        };
        // Dropped if the kernel refuses: its place goes back.
        let slot = Slot { budget: self, pipe: own, size };
        // SAFETY: F_SETPIPE_SZ only resizes the buffer of a pipe this process holds.
        (unsafe { libc::fcntl(fd, libc::F_SETPIPE_SZ, WIDE_PIPE) } >= WIDE_PIPE).then_some(slot)
    }

    fn release(&self) {
        self.grown.fetch_sub(1, Ordering::AcqRel);
    }

    #[cfg(test)]
    fn grown(&self) -> usize {
        self.grown.load(Ordering::Acquire)
    }
}

/// Puts `pipe` back to `size`. The kernel refuses while the pipe holds more
/// than that; then its reader is gone without reading it to the end (the
/// connection or the session ended), nobody will read what is left, and it
/// is discarded to make room. Best effort: a writer that refills it faster
/// keeps the larger pipe until it ends.
fn shrink(pipe: &OwnedFd, size: libc::c_int) {
    let fd = pipe.as_raw_fd();
    for _ in 0..2 {
        // SAFETY: F_SETPIPE_SZ only resizes the buffer of a pipe this process holds.
        if unsafe { libc::fcntl(fd, libc::F_SETPIPE_SZ, size) } >= 0 {
            return;
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EBUSY) {
            return;
        }
        discard(fd);
    }
    tracing::debug!("a grown pipe kept its size: its writer refills it");
}

/// Reads what `fd` holds now, without waiting, and drops it.
fn discard(fd: libc::c_int) {
    // SAFETY: F_GETFL/F_SETFL on a descriptor this process holds; its file is
    // the reader's, and the reader is done with it.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
    }
    let mut buffer = [0u8; 16 * 1024];
    for _ in 0..WIDE_PIPE as usize / buffer.len() {
        // SAFETY: read writes at most `buffer.len()` bytes into `buffer`.
        let n = unsafe { libc::read(fd, buffer.as_mut_ptr().cast(), buffer.len()) };
        if n <= 0 {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn size(pipe: &OwnedFd) -> libc::c_int {
        // SAFETY: F_GETPIPE_SZ only reads the size of a pipe this test holds.
        unsafe { libc::fcntl(pipe.as_raw_fd(), libc::F_GETPIPE_SZ) }
    }

    #[test]
    fn grows_at_most_its_bound_at_once_and_puts_each_pipe_back_when_released() {
        static BUDGET: Budget = Budget::new();
        let pipes: Vec<_> = (0..5).map(|_| crate::fd::pipe().expect("a pipe")).collect();
        let slots: Vec<_> = pipes.iter().map(|(read, _)| BUDGET.widen(read, 3)).collect();
        let sizes: Vec<_> = pipes.iter().map(|(read, _)| size(read)).collect();
        assert_eq!(sizes, [WIDE_PIPE, WIDE_PIPE, WIDE_PIPE, 64 << 10, 64 << 10]);
        assert_eq!(slots.iter().filter(|slot| slot.is_some()).count(), 3);
        assert_eq!(BUDGET.grown(), 3);
        drop(slots);
        assert_eq!(BUDGET.grown(), 0);
        let sizes: Vec<_> = pipes.iter().map(|(read, _)| size(read)).collect();
        assert_eq!(sizes, [64 << 10; 5]);
        // A pipe already as large takes no slot.
        let (read, _write) = crate::fd::pipe().expect("a pipe");
        // SAFETY: F_SETPIPE_SZ on a pipe this test holds.
        unsafe { libc::fcntl(read.as_raw_fd(), libc::F_SETPIPE_SZ, 1 << 20) };
        assert!(BUDGET.widen(&read, 3).is_none());
        assert_eq!(BUDGET.grown(), 0);
    }

    #[test]
    fn a_pipe_left_full_is_emptied_and_put_back_after_its_reader_closed() {
        static BUDGET: Budget = Budget::new();
        let (read, write) = crate::fd::pipe().expect("a pipe");
        let slot = BUDGET.widen(&read, 1).expect("a slot");
        let chunk = vec![7u8; 200 * 1024];
        // SAFETY: write reads `chunk.len()` bytes from `chunk`.
        let written = unsafe { libc::write(write.as_raw_fd(), chunk.as_ptr().cast(), chunk.len()) };
        assert_eq!(written, chunk.len() as isize);
        // The reader's descriptor goes first, as when a task is cancelled.
        drop(read);
        drop(slot);
        assert_eq!(BUDGET.grown(), 0);
        assert_eq!(size(&write), 64 << 10);
    }

    #[test]
    fn the_bound_keeps_the_extra_pages_within_a_sixteenth_of_the_lower_limit() {
        let page = 4096;
        assert_eq!(bound(16384, 0, page), WIDE_PIPES);
        assert_eq!(bound(0, 0, page), WIDE_PIPES);
        assert_eq!(bound(2048, 0, page), 2);
        assert_eq!(bound(16384, 2048, page), 2);
        assert_eq!(bound(0, 4096, page), 5);
        assert_eq!(bound(500, 0, page), 0);
        // 64 KiB pages: a new pipe is already 1 MiB.
        assert_eq!(bound(16384, 0, 64 * 1024), 0);
    }
}
