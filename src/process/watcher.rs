//! The watcher: a small process, this binary started again before the
//! server's first child, that outlives the server and kills the sessions of
//! its children when the server dies, even by SIGKILL.
//!
//! The server writes `+PID START` when it starts a session leader and `-PID`
//! when it forgets one, on a pipe whose only writer is the server. When the
//! pipe reaches end of file, the server is gone (however it ended): the watcher
//! SIGKILLs every process still in one of those sessions and exits.
//!
//! Pid reuse: a session id is reused only after every process of the old
//! session is gone. If the number `S` now names a running process with another
//! start time that leads its own session, session `S` is no longer ours and is
//! left alone. Limits: a descendant that called `setsid` itself left our
//! sessions and is not found here (the binary's exit path kills it, as a child
//! subreaper, but a SIGKILLed server cannot).

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::Path;

use super::helper;
use super::signal::Signal;
use super::tree;

/// The hidden first argument that runs this binary as the watcher.
pub(crate) const MARKER: &CStr = c"--exec-server-watcher";

/// Starts the watcher (a [`helper`] with the pipe's read end). Returns its
/// pid and the pipe's non-blocking write end.
pub(crate) fn spawn() -> io::Result<(u32, File)> {
    let (read_end, write_end) = crate::fd::pipe()?;
    let argv = [CString::from(c"exec-server-wd"), CString::from(MARKER)];
    let pid = helper::spawn(&argv, read_end.as_raw_fd())?;
    // SAFETY: F_SETFL on a descriptor we own.
    unsafe { libc::fcntl(write_end.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
    // A stuck watcher must never block the server: messages are dropped instead.
    Ok((pid, File::from(write_end)))
}

/// Runs as the watcher when this process was started as one (see [`spawn`]),
/// never returning; otherwise returns at once.
pub(crate) fn run_if_watcher() {
    if !helper::started_as(MARKER, c"exec-server-wd") {
        return;
    }
    // SAFETY: the helper's descriptor is the pipe's read end, given to this process alone.
    watch(unsafe { File::from_raw_fd(helper::HELPER_FD) });
    // SAFETY: ends the process without running anything more.
    unsafe { libc::_exit(0) }
}

fn watch(pipe: File) {
    let mut sessions: HashMap<u32, u64> = HashMap::new();
    let mut cgroups: Vec<std::path::PathBuf> = Vec::new();
    for line in BufReader::new(pipe).lines() {
        let Ok(line) = line else { break };
        if let Some(rest) = line.strip_prefix('+') {
            let mut parts = rest.split(' ');
            let pid = parts.next().and_then(|p| p.parse().ok());
            let start = parts.next().and_then(|s| s.parse().ok());
            if let (Some(pid), Some(start)) = (pid, start) {
                sessions.insert(pid, start);
            }
        } else if let Some(pid) = line.strip_prefix('-').and_then(|p| p.parse().ok()) {
            sessions.remove(&pid);
        } else if let Some(dir) = line.strip_prefix('c') {
            cgroups.push(dir.into());
        }
    }
    kill_sessions(&sessions);
    for dir in cgroups {
        clear_cgroups(&dir);
    }
}

/// Kills what is left in the server's cgroup directory `dir` (a tree
/// whose members left its sessions) and removes it with its start directories.
fn clear_cgroups(dir: &Path) {
    let starts = crate::limits::children(dir);
    tree::until_none_left(|| {
        starts.iter().map(|start| tree::kill_listed(&|| crate::limits::members(start))).sum()
    });
    // Killed processes leave their cgroup as they die: wait up to a second.
    for _ in 0..100 {
        if starts.iter().all(|start| crate::limits::members(start).is_empty()) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    crate::limits::remove_server_dir(dir);
}

/// SIGKILLs every process of `sessions` (leader pid to leader start time).
fn kill_sessions(sessions: &HashMap<u32, u64>) {
    let ours: HashMap<u32, u64> = sessions
        .iter()
        .filter(|(&sid, &start)| match tree::stat(sid) {
            // The number now leads a session of another process: not ours any more.
            Ok(stat) => stat.start == start || stat.sid != sid,
            Err(_) => true,
        })
        .map(|(&sid, &start)| (sid, start))
        .collect();
    if ours.is_empty() {
        return;
    }
    tree::until_none_left(|| {
        let mut found = 0;
        for pid in tree::all_pids() {
            let Some(sid) = tree::session_of(pid).filter(|sid| ours.contains_key(sid)) else {
                continue;
            };
            if tree::signal_if(pid, &[Signal::KILL], |stat| stat.sid == sid) {
                found += 1;
            }
        }
        found
    });
}
