//! The process sandbox. A policy is plain data ([`Policy`]): checked when a
//! start is decoded, resolved against the filesystem on the spawner thread,
//! and applied in one straight line in the child, by the `exec-server` binary
//! as a trampoline ([`trampoline`]), before the program runs: re-executed, or
//! cloned by the resident forker (`process/forker.rs`) without an exec.
//!
//! Layout: `policy` (what a start asks for and the server allows),
//! `access` (an access list resolved against the filesystem), `wire_path`
//! (policy paths in the trampoline's spec, as bytes), `trampoline`
//! (namespaces, then the init), `roots` (the policy's paths, opened once),
//! `view` (the read-only mounts, binds, masks and pins),
//! `init` (PID 1 of the sandbox), `confine` (the program's last steps:
//! Landlock, capabilities, seccomp, descriptors), `landlock`, `seccomp`,
//! `report` (how the trampoline tells the server it started, or why not),
//! `sys` (the system calls std lacks).

mod access;
mod confine;
mod init;
mod landlock;
mod loopback;
mod network;
mod policy;
mod report;
mod roots;
mod seccomp;
mod spec;
mod sys;
mod trampoline;
mod view;
mod wire_path;

pub(crate) use self::access::{resolve_map, Globs};
pub(crate) use self::loopback::{HTTP_PORT as PROXY_HTTP_PORT, SOCKS_PORT as PROXY_SOCKS_PORT};
pub(crate) use self::policy::{check_request, resolve, Policy, Settings};
pub(crate) use self::report::{Failure, Listeners};

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Mutex;

/// The environment variable that names mechanisms to treat as missing
/// (comma-separated: `landlock`, `seccomp`, `userns`); for tests of the refusal.
pub(crate) const UNAVAILABLE_ENV: &str = "EXEC_SERVER_SANDBOX_UNAVAILABLE";
/// The largest policy the trampoline takes (one argument: the kernel allows 128 KiB).
const MAX_SPEC: usize = 120 * 1024;
/// The helper run when the server is not told another: this very binary.
const SELF_EXE: &str = "/proc/self/exe";

/// Runs the trampoline when this process was started as one; returns otherwise.
pub(crate) fn run_if_trampoline() {
    let mut args = std::env::args_os();
    if args.nth(1).is_some_and(|first| first == trampoline::MARKER) {
        trampoline::main(std::env::args_os().collect());
    }
}

/// Runs the trampoline in this process, a child the forker cloned with its
/// descriptors placed (`args` as the trampoline's own argv); never returns.
pub(crate) fn run_trampoline(args: Vec<std::ffi::OsString>) -> ! {
    trampoline::main(args)
}

/// Tells the server, over the report pipe, that the trampoline could not be
/// started (`errno`): the start fails as a failed exec of it would.
pub(crate) fn report_start_failure(errno: i32) {
    report::start_failed(errno);
}

/// A sandboxed start, ready for `posix_spawn`: the helper, its argv, and the
/// descriptors it gets at 3 (the life pipe), 4 (the report pipe) and 5 (the
/// program's environment, see `env_fd`). The helper's own environment is
/// empty: nothing of the client's reaches a process outside the sandbox.
pub(crate) struct Prepared {
    pub(crate) helper: std::path::PathBuf,
    pub(crate) argv: Vec<CString>,
    pub(crate) fds: [(RawFd, RawFd); 3],
    report: OwnedFd,
    report_child: OwnedFd,
    _env: OwnedFd,
}

/// Builds the trampoline's command line for `program` under `policy`, and
/// seals `env`, the program's environment, for it. `leave`: the cgroups the
/// trampoline joins once the init runs (a limited start's homes).
pub(crate) fn prepare(
    policy: &Policy,
    helper: Option<&Path>,
    program: &Path,
    (cwd, tty): (&Path, Option<&Path>),
    argv: Vec<CString>,
    env: &[CString],
    leave: Vec<std::path::PathBuf>,
) -> io::Result<Prepared> {
    let unavailable = std::env::var(UNAVAILABLE_ENV)
        .map(|list| list.split(',').map(str::to_owned).collect())
        .unwrap_or_default();
    let network_helper = match policy.network && !policy.proxied {
        true => Some(
            network::helper()
                .ok_or_else(|| io::Error::new(io::ErrorKind::Unsupported, network::missing()))?,
        ),
        false => None,
    };
    let spec = spec::Spec {
        policy: policy.clone(),
        program: program.to_path_buf(),
        cwd: cwd.to_path_buf(),
        tty: tty.map(Path::to_path_buf),
        unavailable,
        network_helper,
        leave,
    };
    let spec = serde_json::to_vec(&spec).map_err(io::Error::other)?;
    if spec.len() > MAX_SPEC {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "its sandbox policy takes {} bytes, more than the {MAX_SPEC} one argument may hold; name fewer paths",
                spec.len()
            ),
        ));
    }
    let helper = helper.unwrap_or(Path::new(SELF_EXE)).to_path_buf();
    let mut full = Vec::with_capacity(argv.len() + 3);
    full.push(CString::new(helper.as_os_str().as_bytes()).map_err(|_| nul())?);
    full.push(CString::new(trampoline::MARKER).map_err(|_| nul())?);
    full.push(CString::new(spec).map_err(|_| nul())?);
    full.extend(argv);
    let life = life_pipe()?;
    let (report, report_child) = report_socket()?;
    let env = crate::env_fd::seal(env)?;
    let fds = [
        (life, report::LIFE_FD),
        (report_child.as_raw_fd(), report::REPORT_FD),
        (env.as_raw_fd(), crate::env_fd::ENV_FD),
    ];
    Ok(Prepared { helper, argv: full, fds, report, report_child, _env: env })
}

impl Prepared {
    /// After the spawn: waits (on the spawner thread) until the program runs,
    /// or the trampoline says why it cannot; with a policy's network, the
    /// proxy's listeners it sent.
    pub(crate) fn wait_started(self) -> Result<Option<Listeners>, Failure> {
        drop(self.report_child);
        report::read(&self.report)
    }
}

fn nul() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, "an argument holds a NUL byte")
}

/// The read end of the server's life pipe, made once. Nobody writes to it and
/// only this process holds the write end (close-on-exec, made after the
/// watcher's fork): it reaches end of file exactly when the server is gone.
fn life_pipe() -> io::Result<RawFd> {
    // Only success is kept: a transient failure (EMFILE) is tried again next time.
    static LIFE: Mutex<Option<(OwnedFd, OwnedFd)>> = Mutex::new(None);
    let mut life = LIFE.lock().unwrap_or_else(|p| p.into_inner());
    if life.is_none() {
        let created = pipe().map_err(|e| {
            io::Error::new(e.kind(), format!("cannot create the sandbox's life pipe: {e}"))
        })?;
        *life = Some(created);
    }
    life.as_ref()
        .map(|(read, _write)| read.as_raw_fd())
        .ok_or_else(|| io::Error::other("no life pipe"))
}

/// The report channel (the server's end, the trampoline's): a Unix stream
/// socket, which reads like a pipe and also carries the proxy's listeners;
/// placed like [`pipe`]'s ends.
fn report_socket() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    let kind = libc::SOCK_STREAM | libc::SOCK_CLOEXEC;
    // SAFETY: socketpair writes two new descriptors into `fds`.
    if unsafe { libc::socketpair(libc::AF_UNIX, kind, 0, fds.as_mut_ptr()) } == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((crate::fd::at_least(ours, 6)?, crate::fd::at_least(theirs, 6)?))
}

/// A pipe (read end, write end), close-on-exec, both above 2 and away from 3
/// to 5, so the spawn's dup2s onto 3, 4 and 5 never clobber one another.
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let (read, write) = crate::fd::pipe()?;
    Ok((crate::fd::at_least(read, 6)?, crate::fd::at_least(write, 6)?))
}
