//! Children's stdout pipes grown past the kernel's 64 KiB, a few at a time.
//!
//! A child that prints fast fills a 64 KiB pipe in one write and then waits
//! for the server to drain it; a 256 KiB pipe lets it run on while the server
//! encodes, so the two switch a quarter as often and the server's reads come
//! back full (a full read is handed on as it is, a short one is copied).
//! Measured: the output stream +10% and the server's peak RSS while streaming
//! 1-2 MiB lower (docs/benchmarks.md).
//!
//! Pipe pages count against the user's `pipe-user-pages-soft` (64 MiB), past
//! which every new pipe of that user gets two pages: so only [`WIDE_PIPES`]
//! pipes are grown at once in the whole server (4 MiB), each holding a
//! [`Slot`] until its reader is done; the rest keep the default.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The buffer asked for a grown pipe.
const WIDE_PIPE: libc::c_int = 256 << 10;

/// Pipes grown at once, server-wide.
pub(super) const WIDE_PIPES: usize = 16;

/// A count of grown pipes and its bound.
pub(super) struct Budget {
    grown: AtomicUsize,
    most: usize,
}

/// The server's budget.
static SERVER: Budget = Budget::new(WIDE_PIPES);

/// One pipe of a [`Budget`]; released when dropped (hold it with the reader).
pub(crate) struct Slot(&'static Budget);

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Slot")
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.grown.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Grows `pipe` to [`WIDE_PIPE`] when one of the server's [`WIDE_PIPES`] is
/// free and the kernel allows; None leaves it as it was (best effort: the
/// default still works).
pub(super) fn widen(pipe: &OwnedFd) -> Option<Slot> {
    SERVER.widen(pipe)
}

impl Budget {
    const fn new(most: usize) -> Budget {
        Budget { grown: AtomicUsize::new(0), most }
    }

    fn widen(&'static self, pipe: &OwnedFd) -> Option<Slot> {
        let most = self.most;
        self.grown
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < most).then_some(n + 1))
            .ok()?;
        let slot = Slot(self);
        // SAFETY: F_SETPIPE_SZ only resizes the buffer of a pipe this process holds.
        let size = unsafe { libc::fcntl(pipe.as_raw_fd(), libc::F_SETPIPE_SZ, WIDE_PIPE) };
        (size >= WIDE_PIPE).then_some(slot)
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
    fn grows_at_most_its_bound_at_once_and_frees_a_slot_when_dropped() {
        static BUDGET: Budget = Budget::new(3);
        let pipes: Vec<_> = (0..5).map(|_| crate::fd::pipe().expect("a pipe")).collect();
        let slots: Vec<_> = pipes.iter().map(|(read, _)| BUDGET.widen(read)).collect();
        let sizes: Vec<_> = pipes.iter().map(|(read, _)| size(read)).collect();
        assert_eq!(sizes, [WIDE_PIPE, WIDE_PIPE, WIDE_PIPE, 64 << 10, 64 << 10]);
        assert_eq!(slots.iter().filter(|slot| slot.is_some()).count(), 3);
        assert_eq!(BUDGET.grown.load(Ordering::Acquire), 3);
        drop(slots);
        assert_eq!(BUDGET.grown.load(Ordering::Acquire), 0);
        let (read, _write) = crate::fd::pipe().expect("a pipe");
        let slot = BUDGET.widen(&read);
        assert!(slot.is_some());
        assert_eq!(size(&read), WIDE_PIPE);
        assert_eq!(BUDGET.grown.load(Ordering::Acquire), 1);
    }
}
