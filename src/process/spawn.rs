//! Starting a child in its own session (pipes or a pseudo-terminal), watching and reaping it.
//!
//! The server reaps its children itself: exit is observed through a pidfd and
//! `waitid(WNOWAIT)`, which leaves the child a zombie until the connection's loop
//! reaps it with [`reap`] (never blocking). Until then the zombie keeps its pid,
//! and so its group and session id, from being reused; after, signals go through
//! the checks of `tree`.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{ChildStderr, ChildStdin, ChildStdout, Command, Stdio};

use portable_pty::{MasterPty, PtySize};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use super::registry;
use super::signal::ExitInfo;
use super::tree;
use crate::protocol::TtySize;

/// What to start.
pub(crate) struct SpawnRequest<'a> {
    pub(crate) argv: &'a [String],
    pub(crate) arg0: Option<&'a str>,
    pub(crate) cwd: &'a Path,
    /// The checked cwd, entered with `fchdir` instead of `cwd` (under `--root`).
    pub(crate) cwd_dir: Option<&'a OwnedFd>,
    pub(crate) env: &'a BTreeMap<String, String>,
    pub(crate) tty: Option<TtySize>,
    pub(crate) pipe_stdin: bool,
}

/// A started child; its pid is also its process-group and session id.
pub(crate) struct Spawned {
    pub(crate) pid: u32,
    pub(crate) pidfd: OwnedFd,
    pub(crate) io: ChildIo,
}

/// The parent's ends of the child's stdio.
pub(crate) enum ChildIo {
    Pipes { stdin: Option<ChildStdin>, stdout: ChildStdout, stderr: ChildStderr },
    Pty { master: Box<dyn MasterPty + Send> },
}

/// Starts the child. Errors carry the OS error text.
pub(crate) fn spawn(request: &SpawnRequest<'_>) -> io::Result<Spawned> {
    let program = &request.argv[0];
    let mut command = Command::new(resolve_program(program, request.env));
    command
        .args(&request.argv[1..])
        .arg0(request.arg0.unwrap_or(program))
        .env_clear()
        .envs(request.env);
    let (io_setup, master) = match request.tty {
        None => {
            command
                .stdin(if request.pipe_stdin { Stdio::piped() } else { Stdio::null() })
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            (false, None)
        }
        Some(size) => {
            let master = open_pty(size)?;
            let slave = open_slave(master.as_ref())?;
            command
                .stdin(Stdio::from(slave.try_clone()?))
                .stdout(Stdio::from(slave.try_clone()?))
                .stderr(Stdio::from(slave));
            (true, Some(master))
        }
    };
    let cwd_dir = match request.cwd_dir {
        Some(dir) => Some(std::os::fd::AsRawFd::as_raw_fd(dir)),
        None => {
            command.current_dir(request.cwd);
            None
        }
    };
    let parent = std::process::id();
    // SAFETY: `parent` is captured by value; the hook calls only async-signal-safe
    // functions (setsid, ioctl, prctl, getppid) and builds errors from raw errno
    // values, which does not allocate.
    unsafe {
        command.pre_exec(move || in_child(io_setup, cwd_dir, parent));
    }
    // Held across the fork: the orphan reaper must not reap this child before it is known.
    let registry = registry::lock_for_spawn();
    let mut child = command.spawn()?;
    registry.register(child.id());
    // The slave copies held by `command` close here, so the master sees EOF
    // once every process holding the terminal is gone.
    drop(command);
    let pid = child.id();
    let pidfd = tree::pidfd_open(pid)?;
    let io = match master {
        Some(master) => ChildIo::Pty { master },
        None => {
            let stdout =
                child.stdout.take().ok_or_else(|| io::Error::other("stdout pipe missing"))?;
            let stderr =
                child.stderr.take().ok_or_else(|| io::Error::other("stderr pipe missing"))?;
            ChildIo::Pipes { stdin: child.stdin.take(), stdout, stderr }
        }
    };
    Ok(Spawned { pid, pidfd, io })
}

/// Waits until the child has exited, without reaping it.
pub(crate) async fn wait_exit(pid: u32, pidfd: OwnedFd) -> io::Result<ExitInfo> {
    // SAFETY: OwnedFd keeps the descriptor open and unchanged while the AsyncFd owns it.
    let fd = unsafe { AsyncFd::register_with_interest(pidfd, Interest::READABLE) }?;
    loop {
        let mut guard = fd.readable().await?;
        match peek_exit(pid)? {
            Some(info) => return Ok(info),
            None => guard.clear_ready(),
        }
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

/// Runs in the forked child before exec: only async-signal-safe calls, and
/// errors made from raw errno values (no allocation).
fn in_child(tty: bool, cwd_dir: Option<std::os::fd::RawFd>, parent: u32) -> io::Result<()> {
    // SAFETY: plain syscalls in the forked child, before exec; `cwd_dir` is a
    // descriptor the parent keeps open until spawn returns.
    unsafe {
        if let Some(dir) = cwd_dir {
            if libc::fchdir(dir) == -1 {
                return Err(io::Error::last_os_error());
            }
        }
        if libc::setsid() == -1 {
            return Err(io::Error::last_os_error());
        }
        if tty && libc::ioctl(0, libc::TIOCSCTTY, 0) == -1 {
            return Err(io::Error::last_os_error());
        }
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
            return Err(io::Error::last_os_error());
        }
        // The server died between fork and prctl: the death signal would never come.
        if libc::getppid() as u32 != parent {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
    }
    Ok(())
}

fn open_pty(size: TtySize) -> io::Result<Box<dyn MasterPty + Send>> {
    let pair = portable_pty::native_pty_system()
        .openpty(PtySize { rows: size.rows, cols: size.cols, pixel_width: 0, pixel_height: 0 })
        .map_err(io::Error::other)?;
    Ok(pair.master)
}

fn open_slave(master: &dyn MasterPty) -> io::Result<File> {
    let name = master.tty_name().ok_or_else(|| io::Error::other("pseudo-terminal has no name"))?;
    OpenOptions::new().read(true).write(true).custom_flags(libc::O_NOCTTY).open(name)
}

fn peek_exit(pid: u32) -> io::Result<Option<ExitInfo>> {
    loop {
        // SAFETY: siginfo_t is plain data; waitid fills it in.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let rc = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT | libc::WNOHANG,
            )
        };
        if rc == -1 {
            let error = io::Error::last_os_error();
            if error.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(error);
        }
        // SAFETY: the fields are valid after a successful waitid.
        let (child, status) = unsafe { (info.si_pid(), info.si_status()) };
        if child == 0 {
            return Ok(None);
        }
        return Ok(match info.si_code {
            libc::CLD_EXITED => Some(ExitInfo::exited(status)),
            libc::CLD_KILLED | libc::CLD_DUMPED => Some(ExitInfo::killed(status)),
            _ => None,
        });
    }
}

/// Looks a bare program name up on the child's PATH, or the server's when env has none.
fn resolve_program(program: &str, env: &BTreeMap<String, String>) -> PathBuf {
    if program.contains('/') {
        return PathBuf::from(program);
    }
    let path = env.get("PATH").map(OsString::from).or_else(|| std::env::var_os("PATH"));
    path.iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
        .unwrap_or_else(|| PathBuf::from(program))
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
