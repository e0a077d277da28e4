//! Handshakes under way, as tasks of the listener's runtime (no thread until
//! the upgrade): at most a fixed number. A new arrival beyond it evicts the
//! oldest one that has nothing unread (an idle or trickling connection whose
//! bytes were taken), never one whose request waits in its socket: an honest
//! client sends its upgrade at once, so a flood of idle or slow sockets
//! pushes out only its own kind. Only when every one has bytes waiting does
//! the oldest go.

use std::collections::VecDeque;
use std::os::fd::RawFd;

use tokio::task::{AbortHandle, JoinSet};

use super::EVICTIONS;

pub(super) struct Pending {
    pub(super) tasks: JoinSet<()>,
    /// Oldest first: each task and its socket (open while the task runs).
    order: VecDeque<(AbortHandle, RawFd)>,
    limit: usize,
}

impl Pending {
    pub(super) fn new(limit: usize) -> Pending {
        Pending { tasks: JoinSet::new(), order: VecDeque::new(), limit }
    }

    /// Starts `task`, the handshake on socket `fd`, evicting as needed.
    pub(super) fn start(
        &mut self,
        fd: RawFd,
        task: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        // Finished ones leave from the front as they come; in the middle
        // they are removed when the search for a victim meets them. Either
        // way the work per arrival is small: the oldest is nearly always idle.
        while self.order.front().is_some_and(|(handle, _)| handle.is_finished()) {
            self.order.pop_front();
        }
        while self.order.len() >= self.limit {
            // A listed task not finished still holds its socket open.
            let found = self
                .order
                .iter()
                .position(|(handle, fd)| handle.is_finished() || unread(*fd) == 0)
                .unwrap_or(0);
            if let Some((handle, _)) = self.order.remove(found) {
                if !handle.is_finished() {
                    handle.abort();
                    EVICTIONS.log(&"too many handshakes under way");
                }
            }
        }
        self.order.push_back((self.tasks.spawn(task), fd));
    }
}

/// Bytes waiting unread in socket `fd`.
fn unread(fd: RawFd) -> usize {
    let mut waiting: libc::c_int = 0;
    // SAFETY: FIONREAD writes one c_int for a socket this process holds open.
    if unsafe { libc::ioctl(fd, libc::FIONREAD, &mut waiting) } != 0 {
        return 0;
    }
    usize::try_from(waiting).unwrap_or(0)
}
