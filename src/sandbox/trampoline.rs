//! The trampoline: the `exec-server` binary re-executed in a hidden mode (its
//! first argument is [`MARKER`]) as the leader of a sandboxed process. In one
//! straight line it checks the mechanisms, enters new user, mount, PID and IPC
//! namespaces, opens the roots once (no symlink followed: what the mounts and
//! Landlock confine is the same directory), builds the read-only view, and forks
//! the namespace's init, which forks the program. It then stays as the
//! leader the server watches, ignoring signals (they reach the program through
//! the process group), and exits the way the program did.
//!
//! Why three processes: the program must not be the PID namespace's init
//! (init ignores signals it has no handler for, so SIGTERM and SIGINT would
//! not reach a shell), and the init must not be the leader (the leader's exit
//! is the program's exit, while the init outlives it to keep descendants in
//! the namespace). When the server dies, even by SIGKILL, its end of the life
//! pipe closes, the init exits, and the kernel kills everything in the
//! namespace: nothing a sandboxed process does (`setsid`, double fork,
//! signals) can keep it alive, since it can neither see nor signal anything
//! outside.

use std::ffi::{CString, OsString};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;

use super::report::{fail, LIFE_FD, REPORT_FD};
use super::roots::Roots;
use super::spec::Spec;
use super::sys;
use super::{init, landlock, loopback, network, seccomp, view};

/// The first argument of the hidden mode.
pub(crate) const MARKER: &str = "--exec-server-sandbox-trampoline";
/// The lowest Landlock ABI the sandbox runs with: 1 has the fs rights that
/// keep devices and pseudo-files unwritten; later ABIs add layers
/// (truncate, device ioctls, TCP, scoped signals) where the kernel has them.
const MIN_LANDLOCK_ABI: u32 = 1;

/// Runs the hidden mode; never returns.
pub(crate) fn main(args: Vec<OsString>) -> ! {
    ignore_signals();
    let (spec, argv, env) = match parse(args) {
        Ok(parsed) => parsed,
        Err(message) => fail(&message),
    };
    let abi = match mechanisms(&spec) {
        Ok(abi) => abi,
        Err(message) => fail(&message),
    };
    // Opened here, with the host's credentials, to be written once the init runs.
    let leave = match open_homes(&spec.leave) {
        Ok(files) => files,
        Err(message) => fail(&message),
    };
    // Network: a namespace of its own, its helper forked here, in the host's.
    let policy = &spec.policy;
    let egress = match (&spec.network_helper, policy.network && !policy.proxied) {
        (_, false) => None,
        (Some(helper), true) => Some(network::prepare(helper).unwrap_or_else(|m| fail(&m))),
        (None, true) => fail(&network::missing()),
    };
    if let Err(message) = enter_namespaces(egress.is_some() || policy.proxied) {
        fail(&message);
    }
    // A policy's network: only the loopback, where the server's proxy listens.
    if policy.proxied {
        if let Err(message) = loopback::open() {
            fail(&message);
        }
    }
    let attaching = egress.map(|egress| egress.attach().unwrap_or_else(|m| fail(&m)));
    let roots = match Roots::open(&spec.policy) {
        Ok(roots) => roots,
        Err(message) => fail(&message),
    };
    if let Err(message) = view::build(&roots, &spec.cwd) {
        fail(&message);
    }
    // Whoever holds this keeps the network up: the init, as long as it lives.
    let network_life = attaching.map(|attaching| attaching.finish().unwrap_or_else(|m| fail(&m)));
    let (status_read, status_write) = match status_pipe() {
        Ok(pipe) => pipe,
        Err(message) => fail(&message),
    };
    // With cgroups to leave, the init waits for this process to have left
    // before it starts the program.
    let go = match leave.is_empty() {
        true => None,
        false => {
            Some(crate::fd::pipe().unwrap_or_else(|e| fail(&format!("cannot create a pipe: {e}"))))
        }
    };
    // SAFETY: this process is single-threaded; the child runs only our code.
    match unsafe { libc::fork() } {
        -1 => fail(&sys::failed("cannot start the sandbox's init")),
        0 => {
            drop(status_read);
            let go = go.map(|(read, _write)| read);
            init::run(&spec, &roots, abi, (&argv, &env), (status_write, go))
        }
        _ => {
            drop(status_write);
            if let Some((read, write)) = go {
                drop(read);
                if let Err(message) = leave_cgroups(leave) {
                    fail(&message);
                }
                if let Err(error) = sys::write_all(write.as_raw_fd(), b"1") {
                    fail(&format!("cannot start the sandbox's program: {error}"));
                }
            }
            drop(network_life);
            // SAFETY: closing descriptors this process no longer needs.
            unsafe {
                libc::close(LIFE_FD);
                libc::close(REPORT_FD);
            }
            sys::stdio_to_null();
            exit_as(read_status(&status_read))
        }
    }
}

/// The spec, the program's argv, and its environment (this process's own is
/// the server's choice, not the client's: see `env_fd`).
fn parse(args: Vec<OsString>) -> Result<(Spec, Vec<CString>, Vec<CString>), String> {
    let mut args = args.into_iter().skip(2);
    let spec = args.next().ok_or("the sandbox helper got no policy")?;
    let spec: Spec = serde_json::from_slice(spec.as_encoded_bytes())
        .map_err(|e| format!("the sandbox helper got a malformed policy: {e}"))?;
    let argv = args
        .map(|arg| CString::new(arg.into_vec()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| "an argument holds a NUL byte".to_owned())?;
    if argv.is_empty() {
        return Err("the sandbox helper got no program".to_owned());
    }
    let env = crate::env_fd::take()?;
    Ok((spec, argv, env))
}

/// The server's own cgroups' `cgroup.procs`, opened for writing.
fn open_homes(paths: &[std::path::PathBuf]) -> Result<Vec<std::fs::File>, String> {
    paths
        .iter()
        .map(|path| {
            std::fs::OpenOptions::new().write(true).open(path).map_err(|error| {
                format!(
                    "cannot enforce the limits: the sandbox cannot open {}: {error}",
                    path.display()
                )
            })
        })
        .collect()
}

/// Moves this process (not its init) into the server's own cgroups: the
/// trampoline is the server's helper, and its exit must free no slot for
/// the tree (`processes: N` means N at every moment).
fn leave_cgroups(homes: Vec<std::fs::File>) -> Result<(), String> {
    for mut home in homes {
        // `0` is the writer itself; the file was opened with the host's credentials.
        std::io::Write::write_all(&mut home, b"0").map_err(|error| {
            format!("cannot enforce the limits: the sandbox cannot leave its cgroup: {error}")
        })?;
    }
    Ok(())
}

/// Checks that every mechanism is there; the Landlock ABI to use.
fn mechanisms(spec: &Spec) -> Result<u32, String> {
    let missing = |name: &str| spec.unavailable.iter().any(|m| m == name);
    let abi = if missing("landlock") { 0 } else { landlock::abi() };
    if abi < MIN_LANDLOCK_ABI {
        return Err("Landlock is not available on this kernel (Linux 5.13 or later with `landlock` in the lsm= list); it confines reads and device writes".to_owned());
    }
    if missing("seccomp") || !seccomp::available() {
        return Err(
            "seccomp filters are not available on this kernel; they block Unix-domain sockets"
                .to_owned(),
        );
    }
    if missing("userns") {
        return Err(namespaces_missing("unavailable (simulated)"));
    }
    Ok(abi)
}

fn namespaces_missing(error: &str) -> String {
    format!("cannot create the sandbox's user, mount, PID and IPC namespaces: {error}; unprivileged user namespaces may be disabled on this host (kernel.unprivileged_userns_clone, user.max_user_namespaces, or an AppArmor restriction)")
}

/// New user, mount, PID and IPC namespaces (System V shared memory, semaphores
/// and queues of the host are out of reach), with this process's uid and gid
/// mapped to themselves; with `network`, a network namespace too (without,
/// none: the seccomp filter refuses sockets, which costs nothing at start).
fn enter_namespaces(network: bool) -> Result<(), String> {
    // SAFETY: plain getters.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mut flags =
        libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWIPC;
    if network {
        flags |= libc::CLONE_NEWNET;
    }
    // SAFETY: unshare with constant flags.
    if unsafe { libc::unshare(flags) } != 0 {
        return Err(namespaces_missing(&std::io::Error::last_os_error().to_string()));
    }
    sys::write_file("/proc/self/setgroups", "deny")?;
    sys::write_file("/proc/self/uid_map", &format!("{uid} {uid} 1\n"))?;
    sys::write_file("/proc/self/gid_map", &format!("{gid} {gid} 1\n"))?;
    Ok(())
}

/// The pipe the init reports the program's wait status on; SIGCHLD is blocked
/// first so that the init, which inherits the mask, misses none.
fn status_pipe() -> Result<(OwnedFd, OwnedFd), String> {
    let pipe = crate::fd::pipe().map_err(|e| format!("cannot create a pipe: {e}"))?;
    // SAFETY: a set with SIGCHLD, installed as blocked.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
    Ok(pipe)
}

/// Signals sent to the group are for the program: the helpers ignore them.
fn ignore_signals() {
    for signal in 1..libc::SIGRTMIN() {
        if matches!(signal, libc::SIGKILL | libc::SIGSTOP | libc::SIGCHLD) {
            continue;
        }
        // SAFETY: setting a disposition to ignore.
        unsafe { libc::signal(signal, libc::SIG_IGN) };
    }
}

/// The program's wait status, or `None` when the init died first.
fn read_status(status: &OwnedFd) -> Option<libc::c_int> {
    let mut bytes = [0u8; 4];
    let mut got = 0;
    while got < bytes.len() {
        // SAFETY: a valid buffer of the remaining length.
        let n = unsafe {
            libc::read(status.as_raw_fd(), bytes[got..].as_mut_ptr().cast(), bytes.len() - got)
        };
        if n > 0 {
            got += n as usize;
        } else if n == 0
            || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted
        {
            return None;
        }
    }
    Some(libc::c_int::from_ne_bytes(bytes))
}

/// Ends this process as the program ended: its exit code, or its signal.
fn exit_as(status: Option<libc::c_int>) -> ! {
    let signal = match status {
        Some(status) if libc::WIFEXITED(status) => {
            // SAFETY: ends this process.
            unsafe { libc::_exit(libc::WEXITSTATUS(status)) }
        }
        Some(status) if libc::WIFSIGNALED(status) => libc::WTERMSIG(status),
        _ => libc::SIGKILL,
    };
    // SAFETY: no core file; the signal's default action, unblocked, raised at ourselves.
    unsafe {
        let none = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        libc::setrlimit(libc::RLIMIT_CORE, &none);
        libc::signal(signal, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, signal);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(signal);
        libc::_exit(128 + signal)
    }
}
