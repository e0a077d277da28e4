//! The forker: a resident copy of this binary that starts sandbox
//! trampolines by `clone` instead of an exec each.
//!
//! A sandboxed start used to `posix_spawn` this whole binary as the
//! trampoline: loading, relocating and starting an 11 MB program is most of
//! what a sandboxed `true` costs. The forker is exec'd once, on the first
//! sandboxed start, and stays single-threaded for life, so it may fork freely.
//! For every sandboxed start (the first included) the server sends it the same
//! [`Launch`] `posix_spawn` would get (`wire.rs`: argv, environment, cwd,
//! stdio and the descriptors to place, the latter as `SCM_RIGHTS`); the
//! forker clones a child with `CLONE_PARENT`, so the child is the server's own
//! (waited, signalled and watched exactly as a spawned one), and answers with
//! its pid. The child (`child.rs`) does what the spawn attributes and file
//! actions would have done and then runs the trampoline's `main` in place of
//! an exec of it.
//!
//! It is one per process, like the watcher: it serves every server in the
//! process and ends when its socket closes, which is when the process ends
//! (the binary's exit path kills it first, as it kills every descendant).
//! When it cannot be started or has gone, the caller execs the trampoline as
//! before; a request it took and did not answer is an error, never a second
//! try (a child may exist).

mod child;
mod wire;

use std::ffi::{CStr, CString};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::helper;
use super::launch::Launch;

/// The hidden first argument that runs this binary as the forker.
pub(crate) const MARKER: &CStr = c"--exec-server-sandbox-forker";
/// The forker's first word: it runs, is ours, and is single-threaded.
const HELLO: [u8; 1] = *b"F";
/// How long the server waits for the forker to start, or to take a request
/// and answer it, both together (a clone takes well under a millisecond). The
/// forker serves one start at a time for every connection, so a forker that
/// does not keep up (stopped, say) is killed after this, and every later
/// start execs.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(2);

/// The server's end: its socket, or why there is none.
static FORKER: Mutex<State> = Mutex::new(State::NotStarted);

enum State {
    NotStarted,
    Running {
        socket: UnixStream,
        /// Signalled through this, never by pid: once it has died and been
        /// reaped, its pid may be another process's.
        pidfd: OwnedFd,
    },
    /// It could not be started or has ended: every start execs.
    Gone,
}

/// Starts the trampoline `request` describes through the forker; None when no
/// forker runs or the request does not fit it (the caller `posix_spawn`s the
/// trampoline instead). The caller has announced the spawn
/// (`registry::spawning`), so the child cannot be reaped unregistered.
pub(crate) fn launch(request: &Launch<'_>) -> Option<io::Result<u32>> {
    let mut state = FORKER.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let State::NotStarted = *state {
        *state = match start() {
            Ok((socket, pidfd)) => State::Running { socket, pidfd },
            Err(error) => {
                tracing::debug!(%error, "no sandbox forker; trampolines are exec'd");
                State::Gone
            }
        };
    }
    let (frame, fds) = wire::encode(request)?;
    let State::Running { socket, pidfd } = &mut *state else { return None };
    // One deadline for the whole exchange, however the forker dribbles.
    let deadline = Instant::now() + ANSWER_TIMEOUT;
    if let Err(error) = wire::send(socket, &frame, &fds, deadline) {
        // Killed before it could have the whole request: no child can come
        // of it, and the trampoline is exec'd instead.
        tracing::debug!(%error, "the sandbox forker did not take a request; trampolines are exec'd");
        kill(pidfd);
        *state = State::Gone;
        return None;
    }
    match wire::read_reply(socket, deadline) {
        Ok(answer) => Some(answer),
        Err(error) => {
            kill(pidfd);
            *state = State::Gone;
            let stuck = matches!(error.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut);
            Some(Err(match stuck {
                true => io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the sandbox forker did not answer within {} s (it was killed; later starts exec the trampoline)",
                        ANSWER_TIMEOUT.as_secs()
                    ),
                ),
                false => io::Error::new(error.kind(), format!("the sandbox forker ended: {error}")),
            }))
        }
    }
}

/// Kills the forker through its pidfd (a forker that died and was reaped
/// meanwhile is not there to be signalled, and nothing else is); the orphan
/// reaper reaps it.
fn kill(pidfd: &OwnedFd) {
    let _ = super::tree::pidfd_send_signal(pidfd, super::signal::Signal::KILL);
}

/// The forker: this binary again with its end of the socket as the helper's descriptor,
/// once it has said it is one (a program embedding the server that does not
/// run [`run_if_forker`] first thing in `main` never does, and is killed).
fn start() -> io::Result<(UnixStream, OwnedFd)> {
    let (mut ours, theirs) = UnixStream::pair()?;
    ours.set_read_timeout(Some(ANSWER_TIMEOUT))?;
    ours.set_write_timeout(Some(ANSWER_TIMEOUT))?;
    let pid = spawn_from_its_own_thread(theirs.as_raw_fd())?;
    drop(theirs);
    // Born during the caller's spawn, so the reaper has left it: its pid is still its own.
    let pidfd = super::tree::pidfd_open(pid)?;
    let mut hello = [0u8; 1];
    match ours.read_exact(&mut hello) {
        Ok(()) if hello == HELLO => Ok((ours, pidfd)),
        answer => {
            kill(&pidfd);
            Err(answer.err().unwrap_or_else(|| io::Error::other("not a sandbox forker")))
        }
    }
}

/// Spawns the forker from a thread of its own that stays for the process's
/// life, parked: the forker's clones (`CLONE_PARENT`) are that thread's
/// children, so the orphan reaper tells them from orphans (adopted by the
/// main thread) by thread, and no spawner thread's end moves them.
fn spawn_from_its_own_thread(fd: std::os::fd::RawFd) -> io::Result<u32> {
    let (answer, spawned) = std::sync::mpsc::channel();
    std::thread::Builder::new().name("exec-server-fkp".into()).spawn(move || {
        // SAFETY: gettid has no preconditions.
        super::registry::set_forker_parent(unsafe { libc::gettid() });
        let argv = [CString::from(c"exec-server-fork"), CString::from(MARKER)];
        let _ = answer.send(helper::spawn(&argv, fd));
        loop {
            std::thread::park();
        }
    })?;
    spawned.recv().map_err(|_| io::Error::other("the forker's thread ended"))?
}

/// Runs as the forker when this process was started as one; returns otherwise.
pub(crate) fn run_if_forker() {
    if !helper::started_as(MARKER, c"exec-server-fk") {
        return;
    }
    // SAFETY: the helper's descriptor is the socket the server placed there
    // for this process alone.
    let mut socket = unsafe { UnixStream::from_raw_fd(helper::HELPER_FD) };
    // Cloning is sound only in a single-threaded process: a program that ran
    // this after starting threads stays silent, and the server execs instead.
    if single_threaded() && socket.write_all(&HELLO).is_ok() {
        serve(&mut socket);
    }
    // SAFETY: ends the process without running anything more.
    unsafe { libc::_exit(0) }
}

fn single_threaded() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .is_ok_and(|status| status.lines().any(|line| line == "Threads:\t1"))
}

/// Answers requests until the server's end closes.
fn serve(socket: &mut UnixStream) {
    loop {
        let request = match wire::receive(socket) {
            Ok(Some(request)) => request,
            Ok(None) => return,
            Err(error) => {
                let _ = wire::reply(socket, -1, error.raw_os_error().unwrap_or(libc::EINVAL));
                return;
            }
        };
        // SAFETY: a fork-like clone (no CLONE_VM) of this single-threaded
        // process (checked before it said hello), so the child owns a
        // consistent copy of every lock and the allocator; glibc's fork
        // bookkeeping (atfork handlers, its cached thread id) is skipped,
        // which nothing in the child relies on: it runs only our code, and
        // the trampoline forks again with glibc's `fork`. `CLONE_PARENT`
        // makes the server the parent; the exit signal is then the forker's
        // own (SIGCHLD, as it was spawned), whatever the flags say.
        let pid = unsafe {
            libc::syscall(
                libc::SYS_clone,
                libc::CLONE_PARENT | libc::SIGCHLD,
                0usize,
                0usize,
                0usize,
                0usize,
            )
        };
        match pid {
            0 => child::become_trampoline(socket.as_raw_fd(), request),
            -1 => {
                let errno = io::Error::last_os_error().raw_os_error().unwrap_or(libc::EAGAIN);
                request.wipe();
                if wire::reply(socket, -1, errno).is_err() {
                    return;
                }
            }
            pid => {
                request.wipe();
                if wire::reply(socket, i32::try_from(pid).unwrap_or(-1), 0).is_err() {
                    return;
                }
            }
        }
    }
}
