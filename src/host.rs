//! What the binary does to the process it runs in: the watcher, the child
//! subreaper, orphan reaping and the final sweep of descendants.
//!
//! A library user embedding [`crate::server::run`] keeps control of its own
//! process; only the `exec-server` binary calls these.

use std::io;

/// Asks for the watcher that kills every child session if this process dies,
/// even by SIGKILL: this binary started again, before the first child.
pub(crate) fn want_watcher() {
    crate::process::want_watcher();
}

/// Makes this process a child subreaper: descendants orphaned by their parent
/// (a daemon that double-forked, a `setsid` escapee) become our children, so
/// they can be reaped and are still below us when the server ends.
pub(crate) fn become_subreaper() -> io::Result<()> {
    // SAFETY: prctl with an integer argument has no memory-safety preconditions.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Descriptors the server needs before it can serve anything (stdio, the
/// runtime's epoll and wakers, the signal driver, a reader and a writer).
pub(crate) const MIN_DESCRIPTORS: u64 = 16;

/// Unblocks every signal this process may have inherited blocked: the
/// server's own handlers (SIGTERM and the rest) must see them.
pub(crate) fn unblock_signals() {
    // SAFETY: an empty set, installed as this thread's mask before any other thread exists.
    unsafe {
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::pthread_sigmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
    }
}

/// Raises the soft limit on open descriptors to the hard limit (at most
/// 2^20), as servers commonly do: each process takes up to
/// [`crate::process::FDS_PER_PROCESS`] descriptors, so the usual soft limit of
/// 1024 would stop a connection near 300 processes. Returns the limit now in force.
pub(crate) fn raise_descriptor_limit() -> io::Result<u64> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into `limit`.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let wanted = limit.rlim_max.min(1 << 20);
    if wanted > limit.rlim_cur {
        let raised = libc::rlimit { rlim_cur: wanted, rlim_max: limit.rlim_max };
        // SAFETY: setrlimit reads `raised`.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
            return Err(io::Error::last_os_error());
        }
        return Ok(wanted);
    }
    Ok(limit.rlim_cur)
}

/// Reaps adopted orphans on every SIGCHLD, forever (abort the task to stop).
/// Children that a connection started are left to that connection.
pub(crate) async fn reap_orphans() -> io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut sigchld = signal(SignalKind::child())?;
    // A new process has no orphans to adopt yet: the first sweep waits for a
    // SIGCHLD (installed above, so none is missed), and start-up stays cheap.
    while sigchld.recv().await.is_some() {
        // On a blocking thread: it reads /proc and takes the registry lock.
        let _ = tokio::task::spawn_blocking(crate::process::reap_orphans).await;
    }
    Ok(())
}

/// SIGKILLs every process still below this one; returns how many were signalled.
pub(crate) fn kill_descendants() -> usize {
    crate::process::kill_descendants()
}

/// Removes temporary files of fs writes and copies cut short by the exit.
pub(crate) fn remove_abandoned_temps() -> usize {
    crate::fs::remove_abandoned_temps()
}
