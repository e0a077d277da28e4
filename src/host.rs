//! What the binary does to the process it runs in: the watcher, the child
//! subreaper, orphan reaping and the final sweep of descendants.
//!
//! A library user embedding [`crate::server::run`] keeps control of its own
//! process; only the `exec-server` binary calls these.

use std::io;

/// Forks the watcher that kills every child session if this process dies, even
/// by SIGKILL. Call it first thing in `main`, while the process has one thread.
pub(crate) fn start_watcher() -> io::Result<()> {
    crate::process::start_watcher()
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

/// Reaps adopted orphans on every SIGCHLD, forever (abort the task to stop).
/// Children that a connection started are left to that connection.
pub(crate) async fn reap_orphans() -> io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut sigchld = signal(SignalKind::child())?;
    loop {
        // On a blocking thread: it takes the registry lock, which a spawn stuck
        // in a hung exec may hold; the runtime's thread must never wait on it.
        let _ = tokio::task::spawn_blocking(crate::process::reap_orphans).await;
        if sigchld.recv().await.is_none() {
            return Ok(());
        }
    }
}

/// SIGKILLs every process still below this one; returns how many were signalled.
pub(crate) fn kill_descendants() -> usize {
    crate::process::kill_descendants()
}

/// Removes temporary files of fs writes and copies cut short by the exit.
pub(crate) fn remove_abandoned_temps() -> usize {
    crate::fs::remove_abandoned_temps()
}
