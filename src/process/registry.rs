//! Process-wide bookkeeping: which children are session leaders owned by a
//! connection, the watcher that kills them if this process dies, and the
//! reaping of everything else (orphans adopted as a child subreaper).
//!
//! A connection reaps its own leaders (it needs their exit status). Anything
//! else that becomes our child, because the binary is a subreaper, is reaped by
//! [`reap_orphans`]. The two never race: a leader is registered while the
//! registry lock is held across its spawn, and [`reap_orphans`] holds the same
//! lock while it decides what to reap.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use super::signal::{signal_group, Signal};
use super::tree;

/// The leaders alive or unreaped, by pid.
static LEADERS: Mutex<Option<HashSet<u32>>> = Mutex::new(None);
/// The write end of the watcher's pipe, when the binary started one.
static WATCHER: OnceLock<Mutex<File>> = OnceLock::new();
/// The watcher's pid: a descendant that must outlive the final sweep.
static WATCHER_PID: OnceLock<u32> = OnceLock::new();

/// The registry, locked for a spawn: register the child before letting go.
pub(crate) struct SpawnLock {
    leaders: MutexGuard<'static, Option<HashSet<u32>>>,
}

/// Locks the registry for a spawn. When the binary asked for a watcher
/// ([`want_watcher`]) and none runs yet, it is started first; if it cannot
/// be, the spawn fails (a child must not run without it) and the next one
/// tries again.
pub(crate) fn lock_for_spawn() -> io::Result<SpawnLock> {
    let leaders = lock();
    start_watcher_locked()?;
    Ok(SpawnLock { leaders })
}

/// Starts the watcher, when the binary wants one and none runs yet: before
/// the first cgroup is made (it removes them too).
pub(crate) fn start_watcher() -> io::Result<()> {
    let _leaders = lock();
    start_watcher_locked()
}

/// [`start_watcher`] with the registry locked (the orphan reaper must not
/// see the watcher before it is known).
fn start_watcher_locked() -> io::Result<()> {
    if WATCHER_WANTED.load(Ordering::Relaxed) && WATCHER.get().is_none() {
        let (pid, pipe) = super::watcher::spawn().map_err(|error| {
            io::Error::new(
                error.kind(),
                format!(
                    "cannot start the watcher that ends it if the server is SIGKILLed: {error}"
                ),
            )
        })?;
        let _ = WATCHER_PID.set(pid);
        let _ = WATCHER.set(Mutex::new(pipe));
    }
    Ok(())
}

/// Whether the binary wants a watcher (started at the first spawn).
static WATCHER_WANTED: AtomicBool = AtomicBool::new(false);

/// Asks for a watcher, started before the first child (the binary does; an
/// embedder's program may not be able to run as one).
pub(crate) fn want_watcher() {
    WATCHER_WANTED.store(true, Ordering::Relaxed);
}

impl SpawnLock {
    /// Records `pid` as a leader owned by a connection, and tells the watcher.
    pub(crate) fn register(mut self, pid: u32) {
        self.leaders.get_or_insert_with(HashSet::new).insert(pid);
        drop(self);
        if let Some(watcher) = WATCHER.get() {
            // The watcher tells our leader from a later process with its pid by start time.
            if let Ok(stat) = tree::stat(pid) {
                tell(watcher, &format!("+{pid} {}\n", stat.start));
            }
        }
    }
}

/// Leaders reaped while the registry was locked (a spawn holds it until its
/// exec, which a hung mount can stretch): removed at the next lock.
static REAPED_LATER: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// The connection reaped `pid` (or gave up on it): it is no longer a leader.
/// Called on the loop, so it never waits for the registry lock.
pub(crate) fn reaped(pid: u32) {
    match LEADERS.try_lock() {
        Ok(mut leaders) => {
            if let Some(leaders) = leaders.as_mut() {
                leaders.remove(&pid);
            }
        }
        Err(_) => REAPED_LATER.lock().unwrap_or_else(|p| p.into_inner()).push(pid),
    }
}

/// Children killed but not yet dead when their connection let go of them, by
/// pidfd (safe against pid reuse), reaped by [`reap_disowned`].
static DISOWNED: Mutex<Vec<std::os::fd::OwnedFd>> = Mutex::new(Vec::new());

/// The connection gave up on `pid` (killed, still unreaped): it is no longer a
/// leader, and it is reaped later by [`reap_disowned`], which every connection
/// runs on each exit and start, so embedders get no zombies either.
pub(crate) fn disown(pid: u32) {
    // The pid is still our unreaped child here, so the pidfd names it.
    let pidfd = tree::pidfd_open(pid);
    reaped(pid);
    if let Ok(pidfd) = pidfd {
        disowned().push(pidfd);
    }
}

/// Reaps the disowned children that have exited (never blocks).
pub(crate) fn reap_disowned() {
    let mut list = disowned();
    if list.is_empty() {
        return;
    }
    list.retain(|pidfd| {
        use std::os::fd::AsRawFd;
        // SAFETY: siginfo_t is plain data; waitid fills it in.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: a pidfd we own; WNOHANG never blocks.
        let rc = unsafe {
            libc::waitid(
                libc::P_PIDFD,
                pidfd.as_raw_fd() as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOHANG,
            )
        };
        // SAFETY: the fields are valid after a successful waitid.
        rc == 0 && unsafe { info.si_pid() } == 0
    });
}

fn disowned() -> MutexGuard<'static, Vec<std::os::fd::OwnedFd>> {
    DISOWNED.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The connection forgot `pid`: the watcher need not kill its session any more.
pub(crate) fn forgotten(pid: u32) {
    if let Some(watcher) = WATCHER.get() {
        tell(watcher, &format!("-{pid}\n"));
    }
}

/// Reaps every exited child that is not a connection's leader; returns how many.
pub(crate) fn reap_orphans() -> usize {
    let leaders = lock();
    let mut reaped = 0;
    for pid in children() {
        if leaders.as_ref().is_some_and(|l| l.contains(&pid)) {
            continue;
        }
        if reap(pid) {
            reaped += 1;
        }
    }
    reaped
}

/// SIGKILLs every descendant of this process (leaders, their trees, adopted
/// orphans), pass after pass until none is left; returns how many were signalled.
pub(crate) fn kill_descendants() -> usize {
    let me = std::process::id();
    let watcher = WATCHER_PID.get().copied();
    let spared: Vec<u32> = watcher.into_iter().collect();
    tree::until_none_left(|| tree::signal_descendants(me, &spared, Signal::KILL))
}

/// Our children, from every thread's `children` list (zombies included).
fn children() -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return Vec::new() };
    let mut pids = Vec::new();
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            pids.extend(text.split_ascii_whitespace().filter_map(|p| p.parse::<u32>().ok()));
        }
    }
    pids
}

/// Locks the registry (off the loop only: spawns hold it across an exec).
fn lock() -> MutexGuard<'static, Option<HashSet<u32>>> {
    // A panic while holding the lock leaves the set consistent (single inserts/removes).
    let mut leaders = LEADERS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let later = std::mem::take(&mut *REAPED_LATER.lock().unwrap_or_else(|p| p.into_inner()));
    if let Some(set) = leaders.as_mut() {
        for pid in later {
            set.remove(&pid);
        }
    }
    leaders
}

/// The cgroup directories the watcher was told of.
static TOLD_CGROUPS: Mutex<Vec<std::path::PathBuf>> = Mutex::new(Vec::new());

/// Tells the watcher of the server's cgroup directories it does not know
/// yet: if the server dies, it kills what is in them and removes them.
pub(crate) fn watch_cgroups(dirs: &[std::path::PathBuf]) {
    let Some(watcher) = WATCHER.get() else { return };
    let mut told = TOLD_CGROUPS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    for dir in dirs {
        if told.contains(dir) {
            continue;
        }
        match dir.to_str().filter(|text| !text.contains('\n')) {
            Some(text) => tell(watcher, &format!("c{text}\n")),
            None => {
                tracing::warn!(cgroup = %dir.display(), "a cgroup path the watcher cannot be told")
            }
        }
        told.push(dir.clone());
    }
}

fn tell(watcher: &Mutex<File>, line: &str) {
    let mut pipe = watcher.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Err(error) = pipe.write_all(line.as_bytes()) {
        // The pipe is non-blocking: a stuck watcher costs this one message, logged.
        tracing::warn!(%error, message = line.trim_end(), "telling the watcher failed; a SIGKILLed server would leave this session");
    }
}

/// Reaps the child if it has exited, without ever blocking; true when it is gone
/// (reaped now, or already by someone else).
pub(crate) fn reap(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return true };
    let mut status = 0;
    // SAFETY: waitpid writes only to `status`; WNOHANG never blocks.
    let rc = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    rc != 0
}

/// Lets go of an unreaped leader without waiting: SIGKILL to its group (safe:
/// its unreaped pid still names the group), then a reap if it is already
/// dead, else it is disowned and reaped later through its pidfd.
pub(crate) fn abandon(pid: u32) {
    let _ = signal_group(pid, Signal::KILL);
    if reap(pid) {
        reaped(pid);
    } else {
        disown(pid);
    }
}
