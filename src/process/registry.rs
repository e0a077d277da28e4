//! Process-wide bookkeeping: which children are session leaders owned by a
//! connection, the watcher that kills them if this process dies, and the
//! reaping of everything else (orphans adopted as a child subreaper).
//!
//! A connection reaps its own leaders (it needs their exit status). Anything
//! else that becomes our child, because the binary is a subreaper, is reaped by
//! [`reap_orphans`]. The two never race, and no lock is held across a spawn
//! (an exec on a hung mount would hold up every other connection's starts):
//! a spawn is announced first ([`spawning`]: its thread and when it began),
//! its child registered once its pid is known, and [`reap_orphans`] leaves
//! alone the unknown children of a spawning thread born since its spawn
//! began (and, while any spawn is under way, those of the forker's parent
//! thread, whose clones the forker's children are). Orphans are adopted by
//! the main thread, which spawns nothing while a spawner thread runs: they are
//! reaped whatever hangs.

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

/// Spawns under way: an id, the spawning thread, and when it began (clock
/// ticks since boot, as `/proc/PID/stat` counts a process's start).
static IN_FLIGHT: Mutex<Vec<InFlight>> = Mutex::new(Vec::new());

#[derive(Clone, Copy)]
struct InFlight {
    id: u64,
    tid: libc::pid_t,
    began: u64,
}

/// A spawn under way: register its child before dropping it.
pub(crate) struct Spawning {
    id: u64,
}

/// Announces a spawn on this thread. When the binary asked for a watcher
/// ([`want_watcher`]) and none runs yet, it is started first; if it cannot
/// be, the spawn fails (a child must not run without it) and the next one
/// tries again.
pub(crate) fn spawning() -> io::Result<Spawning> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    start_watcher()?;
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    in_flight().push(InFlight { id, tid, began: boot_ticks() });
    Ok(Spawning { id })
}

impl Drop for Spawning {
    fn drop(&mut self) {
        in_flight().retain(|spawn| spawn.id != self.id);
    }
}

fn in_flight() -> MutexGuard<'static, Vec<InFlight>> {
    IN_FLIGHT.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Now, in clock ticks since boot (rounded down, as the kernel rounds a
/// process's start: a child born after this has a start at least this).
fn boot_ticks() -> u64 {
    // SAFETY: timespec is plain data that clock_gettime fills in.
    let mut now: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: a valid timespec; CLOCK_BOOTTIME is what the kernel's start times count.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut now) };
    // SAFETY: sysconf has no preconditions.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).unwrap_or(100).max(1);
    let nanos = u64::try_from(now.tv_sec).unwrap_or(0).saturating_mul(1_000_000_000)
        + u64::try_from(now.tv_nsec).unwrap_or(0);
    nanos / (1_000_000_000 / hz)
}

/// The thread whose children the forker's clones are (0: no forker yet).
static FORKER_PARENT: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// Records the thread the forker was spawned from: its clones are that
/// thread's children (`CLONE_PARENT`).
pub(crate) fn set_forker_parent(tid: libc::pid_t) {
    FORKER_PARENT.store(tid, Ordering::Relaxed);
}

/// Kills the child that the spawn under way on thread `tid` is stuck
/// exec'ing (a program on a mount that does not answer): the unknown
/// children of that thread, born since its spawn began, that have not
/// exec'd yet (they still bear the spawning thread's name). Its spawn then
/// returns, and the start fails or its process is reported killed.
pub(crate) fn kill_stuck_spawn(tid: libc::pid_t) {
    let Some(began) = in_flight().iter().find(|spawn| spawn.tid == tid).map(|spawn| spawn.began)
    else {
        return;
    };
    let Ok(name) = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")) else {
        return;
    };
    let Ok(children) = std::fs::read_to_string(format!("/proc/self/task/{tid}/children")) else {
        return;
    };
    let leaders = lock();
    for pid in children.split_ascii_whitespace().filter_map(|p| p.parse::<u32>().ok()) {
        if leaders.as_ref().is_some_and(|l| l.contains(&pid)) {
            continue;
        }
        let born_since = tree::stat(pid).is_ok_and(|stat| stat.start >= began);
        let unexeced =
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|comm| comm == name);
        if born_since && unexeced {
            // An unreaped child (the reaper leaves it while the spawn is under
            // way, and this lock is held): its pid cannot have been reused.
            // SAFETY: a signal to our own child.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
    }
}

/// Starts the watcher, when the binary wants one and none runs yet: before
/// the first cgroup is made (it removes them too).
pub(crate) fn start_watcher() -> io::Result<()> {
    if !WATCHER_WANTED.load(Ordering::Relaxed) || WATCHER.get().is_some() {
        return Ok(());
    }
    // Locked: the orphan reaper must not see the watcher before it is known.
    let _leaders = lock();
    if WATCHER.get().is_none() {
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

impl Spawning {
    /// Records `pid` as a leader owned by a connection, and tells the watcher.
    pub(crate) fn register(&self, pid: u32) {
        lock().get_or_insert_with(HashSet::new).insert(pid);
        if let Some(watcher) = WATCHER.get() {
            // The watcher tells our leader from a later process with its pid by start time.
            if let Ok(stat) = tree::stat(pid) {
                tell(watcher, &format!("+{pid} {}\n", stat.start));
            }
        }
    }
}

/// Leaders reaped while the registry was locked: removed at the next lock.
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
    // The children first, then the spawns under way: a child listed was
    // born after its spawn was announced, and that spawn cannot end (its
    // registration waits for the lock held here) before this pass does.
    let children = children_by_thread();
    let flights = in_flight().clone();
    let forker_parent = FORKER_PARENT.load(Ordering::Relaxed);
    let mut reaped = 0;
    for (tid, children) in children {
        // A child of a spawning thread (or of the forker's parent) born since
        // the spawn began may be that spawn's, not yet registered: it waits
        // for the next pass.
        let since = flights
            .iter()
            .filter(|spawn| spawn.tid == tid || tid == forker_parent)
            .map(|spawn| spawn.began)
            .min();
        for pid in children {
            if leaders.as_ref().is_some_and(|l| l.contains(&pid)) {
                continue;
            }
            if since.is_some_and(|began| tree::stat(pid).is_ok_and(|stat| stat.start >= began)) {
                continue;
            }
            if reap(pid) {
                reaped += 1;
            }
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

/// Our children (zombies included), by the thread whose `children` list names them.
fn children_by_thread() -> Vec<(libc::pid_t, Vec<u32>)> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return Vec::new() };
    let mut found = Vec::new();
    for task in tasks.flatten() {
        let Some(tid) = task.file_name().to_str().and_then(|name| name.parse().ok()) else {
            continue;
        };
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            let pids = text.split_ascii_whitespace().filter_map(|p| p.parse::<u32>().ok());
            found.push((tid, pids.collect()));
        }
    }
    found
}

/// Locks the registry (off the loop only; held for map updates and the reaper's pass).
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
