//! What launching a server asks of the operating system, per platform: its
//! own process group and a death signal (Unix, Linux), group signals, and the
//! name of this machine as `uname -sm` prints it. On Windows a launched
//! server (the OpenSSH client, in practice) has no group: it is ended with
//! `Child::kill` (TerminateProcess), and the remote server, seeing end of
//! file, kills everything it started.

use std::process::Command;

/// How a launched server's group is signalled.
#[derive(Debug, Clone, Copy)]
pub(super) enum Ending {
    /// SIGTERM: end gracefully.
    Terminate,
    /// SIGKILL.
    Kill,
}

/// Puts the server in a process group of its own (its descendants are
/// signalled with it); on Linux it also gets SIGTERM when the launching
/// process dies, even by SIGKILL (`PR_SET_PDEATHSIG`). Elsewhere the server
/// learns of the launcher's death from its stdin's end of file.
#[cfg(unix)]
pub(super) fn own_group(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    command.process_group(0);
    #[cfg(target_os = "linux")]
    {
        let parent = std::process::id();
        // SAFETY: only async-signal-safe calls (prctl, getppid) run in the child,
        // and its errors come from raw errno values (no allocation).
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                // The launching process died before prctl: no signal would come.
                if libc::getppid() as u32 != parent {
                    return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            });
        }
    }
}

/// Windows: no process group (see the module docs).
#[cfg(not(unix))]
pub(super) fn own_group(_command: &mut Command) {}

/// Signals the server's group; false where there are no groups (the caller
/// kills the child itself).
#[cfg(unix)]
pub(super) fn signal_group(pid: u32, ending: Ending) -> bool {
    let signal = match ending {
        Ending::Terminate => libc::SIGTERM,
        Ending::Kill => libc::SIGKILL,
    };
    // SAFETY: killpg has no memory-safety preconditions; the group is the
    // server's own (it is unreaped until the reaper's wait returns).
    unsafe { libc::killpg(pid as libc::pid_t, signal) };
    true
}

/// Windows: no groups to signal.
#[cfg(not(unix))]
pub(super) fn signal_group(_pid: u32, _ending: Ending) -> bool {
    false
}

/// This machine as `uname -sm` prints it, such as `Linux x86_64`.
#[cfg(unix)]
pub(super) fn local_uname() -> String {
    // SAFETY: utsname is plain data; uname fills it in.
    let mut name: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: uname writes only to `name`.
    if unsafe { libc::uname(&mut name) } != 0 {
        return String::new();
    }
    let field = |chars: &[libc::c_char]| {
        let bytes: Vec<u8> = chars.iter().take_while(|c| **c != 0).map(|c| *c as u8).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    format!("{} {}", field(&name.sysname), field(&name.machine))
}

/// Windows has no `uname`: its name as MSYS prints it (never a Linux server's).
#[cfg(not(unix))]
pub(super) fn local_uname() -> String {
    format!("Windows_NT {}", std::env::consts::ARCH)
}
