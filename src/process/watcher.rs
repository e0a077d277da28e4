//! The watcher: a small process forked at start-up that outlives the server and
//! kills the sessions of its children when the server dies, even by SIGKILL.
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
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::os::fd::{FromRawFd, RawFd};

use super::registry;
use super::signal::Signal;
use super::tree;

/// Forks the watcher. Must be called while this process has a single thread
/// (before the runtime starts): the child runs ordinary Rust code after fork.
pub(crate) fn start() -> io::Result<()> {
    let mut fds: [RawFd; 2] = [-1; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == -1 {
        return Err(io::Error::last_os_error());
    }
    let [read_end, write_end] = fds;
    // SAFETY: the process is single-threaded here (the caller's contract), so
    // the child may allocate and run any code until it exits.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => {
            // SAFETY: the child owns its copy of the write end and closes it; it then
            // watches and ends with _exit below, never returning into the server's code.
            unsafe { libc::close(write_end) };
            let code = match detach(read_end) {
                Ok(pipe) => {
                    watch(pipe);
                    0
                }
                Err(_) => 1,
            };
            // SAFETY: _exit ends the child without running the parent's atexit handlers.
            unsafe { libc::_exit(code) }
        }
        child => {
            // SAFETY: the parent owns both descriptors and gives up the read end.
            unsafe {
                libc::close(read_end);
                // A stuck watcher must never block the server: drop messages instead.
                libc::fcntl(write_end, libc::F_SETFL, libc::O_NONBLOCK);
            }
            // SAFETY: `write_end` is open and owned by nobody else.
            registry::set_watcher(child as u32, unsafe { File::from_raw_fd(write_end) });
            Ok(())
        }
    }
}

/// Leaves the server's session and stdio: only the pipe stays open (as fd 3).
fn detach(read_end: RawFd) -> io::Result<File> {
    // SAFETY: plain syscalls on descriptors this (single-threaded) child owns.
    unsafe {
        libc::setsid();
        let name = c"exec-server-wd";
        libc::prctl(libc::PR_SET_NAME, name.as_ptr());
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null == -1 {
            return Err(io::Error::last_os_error());
        }
        for fd in 0..3 {
            libc::dup2(null, fd);
        }
        if libc::dup2(read_end, 3) == -1 {
            return Err(io::Error::last_os_error());
        }
        // Everything else (the server's stdout above all) must not be held
        // open here: one close_range, or one close per descriptor before 5.9.
        if libc::syscall(libc::SYS_close_range, 4u32, u32::MAX, 0u32) == -1 {
            for fd in 4..1024 {
                libc::close(fd);
            }
        }
        Ok(File::from_raw_fd(3))
    }
}

fn watch(pipe: File) {
    let mut sessions: HashMap<u32, u64> = HashMap::new();
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
        }
    }
    kill_sessions(&sessions);
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
