//! In the forker's clone: what `posix_spawn`'s attributes and file actions
//! would have done (new session, default signals, empty mask, descriptors,
//! terminal, cwd, environment), then the trampoline in place of an exec.

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::OsStringExt;

use super::wire::{Request, Standard};

/// Becomes the trampoline `request` describes; never returns. `socket` is the
/// forker's, closed here.
pub(super) fn become_trampoline(socket: RawFd, request: Request) -> ! {
    let Request { stdio, cwd, cwd_dir, targets, argv, env, fds } = request;
    // SAFETY: this child is single-threaded (a clone of the single-threaded
    // forker); plain syscalls on its own name, session, signals, descriptors
    // and directory.
    let placed = unsafe {
        libc::prctl(libc::PR_SET_NAME, c"exec-server-sb".as_ptr());
        default_signals();
        // Parked just above every number placed (0-2 and the targets), so no
        // placement overwrites one, and low enough for a small descriptor limit.
        let park_from = targets.iter().copied().fold(2, RawFd::max) + 1;
        let parked: Vec<RawFd> = fds
            .iter()
            .map(|fd| libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, park_from))
            .collect();
        drop(fds);
        libc::close(socket);
        place(&stdio, cwd_dir, &cwd, &targets, &parked)
    };
    if let Err(errno) = placed {
        // The report pipe (placed first) says why, as a failed exec would.
        crate::sandbox::report_start_failure(errno);
        // SAFETY: ends the child at once.
        unsafe { libc::_exit(127) }
    }
    set_environment(env);
    let args = argv.into_iter().map(OsString::from_vec).collect();
    crate::sandbox::run_trampoline(args)
}

/// Places the parked descriptors: the extra ones first (the report pipe among
/// them, so that any later failure can be reported), then stdio, then the cwd;
/// a new session before the terminal is opened.
///
/// # Safety
/// Only in the single-threaded child, whose descriptors these are.
unsafe fn place(
    stdio: &Standard,
    cwd_dir: bool,
    cwd: &[u8],
    targets: &[RawFd],
    parked: &[RawFd],
) -> Result<(), i32> {
    let errno = || io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
    let check = |rc: libc::c_int| if rc == -1 { Err(errno()) } else { Ok(()) };
    // The order they came in: stdio, the cwd, the extra ones.
    let standard = match stdio {
        Standard::Pipes { stdin: true } => 3,
        Standard::Pipes { stdin: false } => 2,
        Standard::Terminal(_) => 0,
    };
    let (pipes, rest) = parked.split_at(standard.min(parked.len()));
    let (dir, extra) = match (cwd_dir, rest.split_first()) {
        (true, Some((&dir, extra))) => (Some(dir), extra),
        _ => (None, rest),
    };
    // SAFETY: the caller's contract: descriptors of this single-threaded child.
    unsafe {
        for (&fd, &target) in extra.iter().zip(targets) {
            check(fd)?;
            check(libc::dup2(fd, target))?;
        }
        check(libc::setsid())?;
        match stdio {
            Standard::Terminal(slave) => {
                let path = CString::new(slave.as_slice()).map_err(|_| libc::EINVAL)?;
                // Without O_NOCTTY: the new session leader takes it as its terminal.
                let fd = libc::open(path.as_ptr(), libc::O_RDWR);
                check(fd)?;
                for target in 0..3 {
                    if fd != target {
                        check(libc::dup2(fd, target))?;
                    }
                }
                if fd > 2 {
                    libc::close(fd);
                }
            }
            Standard::Pipes { stdin } => {
                let mut pipes = pipes.iter().copied();
                if *stdin {
                    let fd = pipes.next().ok_or(libc::EINVAL)?;
                    check(fd)?;
                    check(libc::dup2(fd, 0))?;
                } else {
                    let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY);
                    check(null)?;
                    if null != 0 {
                        check(libc::dup2(null, 0))?;
                        libc::close(null);
                    }
                }
                for target in [1, 2] {
                    let fd = pipes.next().ok_or(libc::EINVAL)?;
                    check(fd)?;
                    check(libc::dup2(fd, target))?;
                }
            }
        }
        match dir {
            Some(dir) => {
                check(dir)?;
                check(libc::fchdir(dir))?;
            }
            None => {
                let path = CString::new(cwd).map_err(|_| libc::EINVAL)?;
                check(libc::chdir(path.as_ptr()))?;
            }
        }
        for &fd in parked.iter().filter(|&&fd| fd >= 0) {
            libc::close(fd);
        }
    }
    Ok(())
}

/// Every signal to its default action, none blocked: as the spawn attributes.
/// glibc's two internal signals (32 and 33) are left as they are: `signal`
/// refuses them, and the forker (exec'd with every signal at its default,
/// single-threaded, never cancelling a thread) never changed them.
///
/// # Safety
/// Only in the single-threaded child.
unsafe fn default_signals() {
    // SAFETY: the caller's contract; signal numbers glibc accepts, valid sets.
    unsafe {
        for signal in (1..32).chain(libc::SIGRTMIN()..=libc::SIGRTMAX()) {
            if signal != libc::SIGKILL && signal != libc::SIGSTOP {
                libc::signal(signal, libc::SIG_DFL);
            }
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
    }
}

extern "C" {
    static mut environ: *const *const libc::c_char;
}

/// Makes `env` the environment the program is exec'd with (leaked: the child
/// execs or exits).
fn set_environment(env: Vec<Vec<u8>>) {
    let strings: Vec<CString> =
        env.into_iter().filter_map(|entry| CString::new(entry).ok()).collect();
    let mut pointers: Vec<*const libc::c_char> = strings.iter().map(|s| s.as_ptr()).collect();
    pointers.push(std::ptr::null());
    std::mem::forget(strings);
    let pointers = pointers.leak();
    // SAFETY: single-threaded child; the array and its strings live forever.
    unsafe { environ = pointers.as_ptr() };
}
