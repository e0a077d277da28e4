//! The sandbox's init (PID 1 of its namespace): mounts the namespace's own
//! `/proc`, forks the program, reports the program's wait status to the
//! trampoline, reaps every orphan, and exits when nothing is left or the
//! server's life pipe closes. Its exit makes the kernel kill the whole namespace.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};

use super::confine;
use super::report::fail;
use super::report::{LIFE_FD, REPORT_FD};
use super::roots::Roots;
use super::spec::Spec;
use super::sys::{self, check};

/// Runs the init; never returns.
/// `program` is the program's argv and environment; `status` takes its
/// wait status, and `go`, when given, says when the program may start (the
/// trampoline has left the tree's cgroup; end of file: never).
pub(crate) fn run(
    spec: &Spec,
    roots: &Roots,
    abi: u32,
    program: (&[CString], &[CString]),
    (status, go): (OwnedFd, Option<OwnedFd>),
) -> ! {
    let flags = libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    // SAFETY: constant strings; a new proc mount of this PID namespace over /proc.
    let rc = unsafe {
        libc::mount(c"proc".as_ptr(), c"/proc".as_ptr(), c"proc".as_ptr(), flags, std::ptr::null())
    };
    if let Err(message) = check(rc.into(), "cannot mount the sandbox's /proc") {
        fail(&message);
    }
    let signals = match child_signals() {
        Ok(fd) => fd,
        Err(message) => fail(&message),
    };
    if let Some(go) = go {
        let mut byte = 0u8;
        // SAFETY: reads one byte into a local.
        if unsafe { libc::read(go.as_raw_fd(), (&raw mut byte).cast(), 1) } != 1 {
            // SAFETY: ends this process: the trampoline said why, or died.
            unsafe { libc::_exit(0) };
        }
    }
    // SAFETY: this process is single-threaded; the child runs only our code.
    let program = match unsafe { libc::fork() } {
        -1 => fail(&sys::failed("cannot start the program")),
        0 => confine::exec(spec, roots, abi, program),
        pid => pid,
    };
    // SAFETY: the report is the program's to send.
    unsafe { libc::close(REPORT_FD) };
    sys::stdio_to_null();
    let mut status = Some(status);
    loop {
        let mut fds = [
            libc::pollfd { fd: LIFE_FD, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: signals.as_raw_fd(), events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: two valid pollfds.
        if unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) } < 0 {
            continue; // EINTR
        }
        if fds[0].revents != 0 {
            // The server is gone (or its pipe never came): the namespace goes with us.
            // SAFETY: ends this process.
            unsafe { libc::_exit(0) };
        }
        if fds[1].revents != 0 {
            let mut info = [0u8; 128];
            // SAFETY: drains one signalfd record into a buffer of its size.
            unsafe { libc::read(signals.as_raw_fd(), info.as_mut_ptr().cast(), info.len()) };
            reap(program, &mut status);
        }
    }
}

/// Reaps every exited child; the program's status goes to the trampoline.
/// Ends the init when no child is left after the program.
fn reap(program: libc::pid_t, status: &mut Option<OwnedFd>) {
    loop {
        let mut wait_status = 0;
        // SAFETY: waitpid writes only to `wait_status`; WNOHANG never blocks.
        let pid = unsafe { libc::waitpid(-1, &mut wait_status, libc::WNOHANG) };
        if pid == program {
            if let Some(fd) = status.take() {
                let _ = sys::write_all(fd.as_raw_fd(), &wait_status.to_ne_bytes());
            }
        } else if pid == 0 {
            return;
        } else if pid < 0 {
            if status.is_none() {
                // SAFETY: ends this process: nothing is left in the namespace.
                unsafe { libc::_exit(0) };
            }
            return;
        }
    }
}

/// A signalfd for SIGCHLD (blocked by the trampoline before the fork).
fn child_signals() -> Result<OwnedFd, String> {
    // SAFETY: a set with SIGCHLD; signalfd returns a new descriptor or -1.
    let fd = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        libc::signalfd(-1, &set, libc::SFD_CLOEXEC)
    };
    check(fd.into(), "cannot watch the sandbox's children")?;
    // SAFETY: a new descriptor owned by nobody else.
    Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) })
}
