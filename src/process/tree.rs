//! Finding and signalling the members of a child's session through `/proc`, safe against pid reuse.
//!
//! A child runs in its own session, so its pid `S` is also its session id. While
//! the leader is unreaped, `killpg(S)` is safe: the zombie keeps the number `S`
//! allocated. Once it is reaped, every signal goes through [`signal_sessions`],
//! which decides for each process whether it really belongs to our session.
//!
//! The argument, for a process `P` whose session id reads `S`:
//! - The kernel does not hand out a pid number while any process still uses it
//!   as a session id. So if `P` started before our leader was reaped, `S` was
//!   still ours when `P` was created, and a process never moves into another
//!   session except by `setsid`, which would make its session id its own pid.
//!   Hence `P` is in our session. [`Session::bound`] is that instant, in the
//!   clock ticks `/proc` uses for start times, rounded up to the next tick: a
//!   process started in the same 10 ms tick as the reap counts as ours. That is
//!   safe because the kernel hands out pids cyclically: a freed number comes
//!   back only after the counter wraps around `pid_max` (32768 at least), which
//!   takes far longer than a tick.
//! - A process started later is ours only while a member that started before
//!   the reap lives: then the number `S` has stayed in use the whole time, so
//!   it was never handed to another leader (see `owned_sessions`). Without
//!   one, the session is left alone: a late child of ours cannot be told from
//!   the members of another leader that got the number `S`.
//! - The decision is made on a pidfd opened before the final check: the signal
//!   goes to the process that was checked, even if `P` is reused meanwhile.

use std::collections::{HashMap, HashSet};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::signal::Signal;

/// One session to sweep.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Session {
    /// The session id: the pid of the child we started.
    pub(crate) sid: u32,
    /// Processes of session `sid` that started before this tick are ours: the
    /// tick after the reap, or after now while the leader is unreaped.
    pub(crate) bound: u64,
}

/// What `/proc/P/stat` says about a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stat {
    pub(crate) state: u8,
    pub(crate) ppid: u32,
    pub(crate) sid: u32,
    /// Start time in clock ticks since boot.
    pub(crate) start: u64,
}

/// Reads `/proc/<pid>/stat`.
pub(crate) fn stat(pid: u32) -> io::Result<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_stat(&text).ok_or_else(|| io::Error::other(format!("unreadable /proc/{pid}/stat")))
}

fn parse_stat(text: &str) -> Option<Stat> {
    // The command name is in parentheses and may itself hold ") ".
    let (_, rest) = text.rsplit_once(") ")?;
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    Some(Stat {
        state: *fields.first()?.as_bytes().first()?,
        ppid: fields.get(1)?.parse().ok()?,
        sid: fields.get(3)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
    })
}

/// Clock ticks since boot, as `/proc` counts process start times.
pub(crate) fn boot_ticks() -> u64 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes only to `now`.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut now) };
    // SAFETY: sysconf has no preconditions.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).unwrap_or(100).max(1);
    let nanos = u64::try_from(now.tv_sec).unwrap_or(0) * 1_000_000_000
        + u64::try_from(now.tv_nsec).unwrap_or(0);
    nanos / (1_000_000_000 / hz)
}

/// Every pid in `/proc`, numeric entries only.
pub(crate) fn all_pids() -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries.flatten().filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok())).collect()
}

/// Sends each of `signals`, in order, to every process of `sessions`; returns
/// how many processes were signalled. Runs off the server loop (it reads `/proc`).
pub(crate) fn signal_sessions(sessions: &[Session], signals: &[Signal]) -> usize {
    if sessions.is_empty() || signals.is_empty() {
        return 0;
    }
    let me = std::process::id();
    // The cheap filter first (one getsid per pid), then /proc for the members.
    let members: Vec<(u32, Stat)> = all_pids()
        .into_iter()
        .filter(|&pid| pid != me)
        .filter(|&pid| session_of(pid).is_some_and(|sid| sessions.iter().any(|s| s.sid == sid)))
        .filter_map(|pid| Some((pid, stat(pid).ok()?)))
        .collect();
    let owned = owned_sessions(sessions, members.iter().map(|(_, stat)| *stat));
    members
        .into_iter()
        .filter(|(_, stat)| owned.contains(&stat.sid))
        .filter(|&(pid, seen)| {
            signal_if(pid, signals, |now| now.start == seen.start && now.sid == seen.sid)
        })
        .count()
}

/// Which of `sessions` the processes `members` show to be still ours. A
/// session whose leader is unreaped is (its zombie holds the number). Once
/// the leader is reaped, the number can come back as another leader's, but
/// only after every process of the old session is gone: so while a member
/// that started before the reap ([`Session::bound`]) lives, every member is
/// ours; when none does, the session is left alone (a late child of ours
/// cannot be told from another leader's).
fn owned_sessions(sessions: &[Session], members: impl Iterator<Item = Stat>) -> Vec<u32> {
    let mut owned: Vec<u32> = Vec::new();
    for stat in members {
        let old = sessions.iter().any(|s| s.sid == stat.sid && stat.start < s.bound);
        if old && !owned.contains(&stat.sid) {
            owned.push(stat.sid);
        }
    }
    owned
}

/// Every live process as `/proc` showed it at one moment, for deciding
/// ancestry without re-reading `/proc` at every step.
struct Snapshot {
    stats: HashMap<u32, Stat>,
}

impl Snapshot {
    fn take() -> Snapshot {
        let stats = all_pids()
            .into_iter()
            .filter_map(|pid| Some((pid, stat(pid).ok()?)))
            .filter(|(_, stat)| stat.state != b'Z')
            .collect();
        Snapshot { stats }
    }

    /// How many ancestors of `stat` the snapshot shows.
    fn depth(&self, stat: Stat) -> usize {
        let mut depth = 0;
        let mut parent = stat.ppid;
        while let Some(next) = self.stats.get(&parent).filter(|_| parent > 1) {
            depth += 1;
            if depth > self.stats.len() {
                break;
            }
            parent = next.ppid;
        }
        depth
    }

    /// Whether `ancestor` is above `stat` (a walk bounded by the number of processes).
    fn descends(&self, stat: Stat, ancestor: u32) -> bool {
        let mut parent = stat.ppid;
        for _ in 0..=self.stats.len() {
            if parent == ancestor {
                return true;
            }
            match self.stats.get(&parent) {
                Some(next) if parent > 1 => parent = next.ppid,
                _ => return false,
            }
        }
        false
    }
}

/// Ends whole families, leaving none a way out: every process of
/// `sessions` (as [`signal_sessions`] decides), and every descendant of the
/// running `leaders` that left them (it called `setsid`), is first stopped,
/// pass after pass until a pass finds no new one (a stopped process can
/// neither fork nor call setsid, and its children stay its children). Each
/// is recorded by pid and start time as it is stopped, and every recorded
/// one is then killed, whatever happened to its parents meanwhile (a parent
/// killed first hands its children to us); then the sessions are swept once
/// more. One descriptor is open at a time. Returns how many were killed.
/// Runs off the server loop (it reads `/proc`).
pub(crate) fn end_families(leaders: &[u32], sessions: &[Session]) -> usize {
    if leaders.is_empty() && sessions.is_empty() {
        return 0;
    }
    let me = std::process::id();
    let sids: HashSet<u32> = sessions.iter().map(|session| session.sid).collect();
    // pid -> (start time, depth below the first process of the snapshot's tree).
    let mut stopped: HashMap<u32, (u64, usize)> = HashMap::new();
    for _ in 0..16 {
        let snapshot = Snapshot::take();
        let members = snapshot.stats.values().copied().filter(|stat| sids.contains(&stat.sid));
        let owned: HashSet<u32> = owned_sessions(sessions, members).into_iter().collect();
        let mut found = 0;
        for (&pid, &seen) in &snapshot.stats {
            let recorded = stopped.get(&pid).is_some_and(|&(start, _)| start == seen.start);
            // Stopped (or about to be, out of a syscall): nothing to do.
            // Recorded but running again (a SIGCONT from the family): stop it again.
            if pid == me || (recorded && matches!(seen.state, b'T' | b't' | b'D')) {
                continue;
            }
            let ours = owned.contains(&seen.sid)
                || leaders.iter().any(|&leader| snapshot.descends(seen, leader));
            let same = |now: Stat| now.start == seen.start;
            if ours && signal_if(pid, &[Signal::STOP], same) {
                stopped.insert(pid, (seen.start, snapshot.depth(seen)));
                found += 1;
            }
        }
        if found == 0 {
            break;
        }
    }
    // Children first: a parent's death hangs up its stopped children's
    // group (SIGHUP, SIGCONT), and one with SIGKILL pending runs no more code.
    let mut doomed: Vec<(u32, u64, usize)> =
        stopped.into_iter().map(|(pid, (start, depth))| (pid, start, depth)).collect();
    doomed.sort_unstable_by_key(|&(_, _, depth)| std::cmp::Reverse(depth));
    let killed = doomed
        .into_iter()
        .filter(|&(pid, start, _)| signal_if(pid, &[Signal::KILL], |now| now.start == start))
        .count();
    killed + signal_sessions(sessions, &[Signal::KILL])
}

/// The session id of `pid` (one syscall, no file: the cheap filter before a check).
pub(crate) fn session_of(pid: u32) -> Option<u32> {
    // SAFETY: getsid has no memory-safety preconditions.
    let sid = unsafe { libc::getsid(pid as libc::pid_t) };
    u32::try_from(sid).ok().filter(|&sid| sid > 0)
}

/// Sends `signals` to process `pid` if it is alive and `check` accepts what
/// `/proc` says of it. The pidfd is opened before the check, so the signals
/// reach the very process checked even if `pid` is reused meanwhile. True when
/// every signal was delivered.
pub(crate) fn signal_if(pid: u32, signals: &[Signal], check: impl FnOnce(Stat) -> bool) -> bool {
    let Some(pidfd) = pidfd_if(pid, check) else { return false };
    // Every signal is sent, even after one failed.
    let mut delivered = true;
    for signal in signals {
        delivered &= pidfd_send_signal(&pidfd, *signal).is_ok();
    }
    delivered
}

/// A pidfd for process `pid` if it is alive and `check` accepts what `/proc`
/// says of it (opened before the check: it names the very process checked).
fn pidfd_if(pid: u32, check: impl FnOnce(Stat) -> bool) -> Option<OwnedFd> {
    let pidfd = pidfd_open(pid).ok()?;
    let stat = stat(pid).ok()?;
    (stat.state != b'Z' && check(stat)).then_some(pidfd)
}

/// Runs `pass` (a sweep returning how many it signalled) until one finds
/// nothing, at most 16 times: processes forked during a pass are caught by the
/// next. Returns the total.
pub(crate) fn until_none_left(mut pass: impl FnMut() -> usize) -> usize {
    let mut total = 0;
    for _ in 0..16 {
        let found = pass();
        total += found;
        if found == 0 {
            break;
        }
    }
    total
}

/// Sends `signal` to every process below `ancestor` except those in
/// `spared`, as one snapshot of `/proc` shows them; returns how many.
pub(crate) fn signal_descendants(ancestor: u32, spared: &[u32], signal: Signal) -> usize {
    let snapshot = Snapshot::take();
    snapshot
        .stats
        .iter()
        .filter(|&(pid, _)| *pid != ancestor && !spared.contains(pid))
        .filter(|&(_, &seen)| snapshot.descends(seen, ancestor))
        .filter(|&(&pid, &seen)| signal_if(pid, &[signal], |now| now.start == seen.start))
        .count()
}

/// SIGKILLs every process of the cgroups of `groups`, pass after pass until
/// none is left: a pid is signalled through a pidfd opened before the cgroup
/// is read again, and only if it is still listed, so a number reused
/// meanwhile is never hit. Returns how many were killed.
pub(crate) fn kill_groups(groups: &[std::sync::Arc<crate::limits::Group>]) -> usize {
    until_none_left(|| groups.iter().map(|group| kill_listed(&|| group.members())).sum())
}

/// One pass of SIGKILL to the processes `list` names (a cgroup's members),
/// each through a pidfd opened before the list is read again and signalled
/// only if still listed. Returns how many were signalled.
pub(crate) fn kill_listed(list: &dyn Fn() -> Vec<u32>) -> usize {
    let pidfds: Vec<(u32, OwnedFd)> =
        list().into_iter().filter_map(|pid| Some((pid, pidfd_open(pid).ok()?))).collect();
    if pidfds.is_empty() {
        return 0;
    }
    let listed = list();
    pidfds
        .iter()
        .filter(|(pid, _)| listed.contains(pid))
        .filter(|(_, pidfd)| pidfd_send_signal(pidfd, Signal::KILL).is_ok())
        .count()
}

/// A pidfd for `pid`.
pub(crate) fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the descriptor was just returned to us and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Sends `signal` to the process `pidfd` refers to; a process already gone is not an error.
pub(crate) fn pidfd_send_signal(pidfd: &OwnedFd, signal: Signal) -> io::Result<()> {
    // SAFETY: a null siginfo asks the kernel to fill it in as kill(2) would.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal.0,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    super::signal::sent(rc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_lines_with_odd_names() {
        let line = "4242 (a) b (c) S 17 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10 18446744073709551615";
        assert_eq!(
            parse_stat(line),
            Some(Stat { state: b'S', ppid: 17, sid: 4242, start: 987654 })
        );
        assert_eq!(parse_stat("12 (x)"), None);
    }

    #[test]
    fn own_stat_matches_the_process() {
        let me = stat(std::process::id()).unwrap();
        // SAFETY: getppid and getsid have no preconditions.
        let (ppid, sid) = unsafe { (libc::getppid(), libc::getsid(0)) };
        assert_eq!((me.ppid, me.sid), (ppid as u32, sid as u32));
        assert!(me.start <= boot_ticks());
    }
}
