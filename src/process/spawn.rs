//! Starting a child in its own session (pipes or a pseudo-terminal), watching and reaping it.
//!
//! The server reaps its children itself: exit is observed through a pidfd and
//! `waitid(WNOWAIT)`, which leaves the child a zombie until the connection's loop
//! reaps it with [`reap`] (never blocking). Until then the zombie keeps its pid,
//! and so its group and session id, from being reused; after, signals go through
//! the checks of `tree`.

use std::collections::BTreeMap;
use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{ChildStderr, ChildStdin, ChildStdout};

use portable_pty::{MasterPty, PtySize};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use super::forker;
use super::launch::{self, Launch, Stdio};
use super::registry;
use super::signal::ExitInfo;
use super::tree;
use crate::fd::pipe;
use crate::limits::Group;
use crate::protocol::{SandboxType, TtySize};
use crate::sandbox::{self, Failure, Policy};

/// This binary, for the cgroup v2 join trampoline when no helper is named.
const SELF_EXE: &str = "/proc/self/exe";

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
    /// Run confined: the policy, and the helper binary (None: this one).
    pub(crate) sandbox: Option<(&'a Policy, Option<&'a Path>)>,
    /// Run in this cgroup, and the binary that joins it where a thread cannot
    /// (cgroup v2; None: this one).
    pub(crate) group: Option<(&'a Group, Option<&'a Path>)>,
}

/// A started child; its pid is also its process-group and session id.
pub(crate) struct Spawned {
    pub(crate) pid: u32,
    pub(crate) sandbox_type: SandboxType,
    pub(crate) pidfd: OwnedFd,
    pub(crate) io: ChildIo,
    /// The cgroup its tree runs in, for a start with limits.
    pub(crate) group: Option<std::sync::Arc<Group>>,
    /// A policy's network: the proxy's listeners in the sandbox, and its rules.
    pub(crate) proxy: Option<(sandbox::Listeners, std::sync::Arc<crate::dial::Rules>)>,
}

/// The parent's ends of the child's stdio.
pub(crate) enum ChildIo {
    Pipes {
        stdin: Option<ChildStdin>,
        stdout: ChildStdout,
        stderr: ChildStderr,
        /// Held while stdout is read when its pipe was grown.
        wide: Option<super::wide_pipe::Slot>,
    },
    Pty {
        master: Box<dyn MasterPty + Send>,
    },
}

/// Why a start failed.
#[derive(Debug)]
pub(crate) enum SpawnError {
    /// The OS refused (a missing program, a bad cwd, no descriptors).
    Io(io::Error),
    /// The sandbox cannot be enforced as asked.
    Sandbox(String),
}

impl From<io::Error> for SpawnError {
    fn from(error: io::Error) -> SpawnError {
        SpawnError::Io(error)
    }
}

/// Starts the child (through `posix_spawn`, see `launch`; under a sandbox,
/// the trampoline, then waits for its report). Errors carry the OS error text.
pub(crate) fn spawn(request: &SpawnRequest<'_>) -> Result<Spawned, SpawnError> {
    let name = &request.argv[0];
    let program = resolve_program(name, request.env);
    let nul = || io::Error::new(io::ErrorKind::InvalidInput, "an argument holds a NUL byte");
    let mut argv = Vec::with_capacity(request.argv.len());
    argv.push(CString::new(request.arg0.unwrap_or(name).as_bytes()).map_err(|_| nul())?);
    for arg in &request.argv[1..] {
        argv.push(CString::new(arg.as_bytes()).map_err(|_| nul())?);
    }
    let env = request
        .env
        .iter()
        .map(|(key, value)| CString::new(format!("{key}={value}")).map_err(|_| nul()))
        .collect::<io::Result<Vec<_>>>()?;
    let launch = |stdio, tty: Option<&Path>| {
        let prepared = match request.sandbox {
            Some((policy, helper)) => Some(sandbox::prepare(
                policy,
                helper,
                &program,
                (request.cwd, tty),
                argv.clone(),
                &env,
                request.group.map(|(group, _)| group.homes()).unwrap_or_default(),
            )?),
            None => None,
        };
        // A helper (the trampoline, the cgroup join) runs outside any sandbox:
        // its environment is empty, and the program's reaches it sealed (env_fd).
        let (exe, args, fds, env) = match &prepared {
            Some(prepared) => {
                (prepared.helper.as_path(), &prepared.argv, &prepared.fds[..], &[][..])
            }
            None => (program.as_path(), &argv, &[][..], &env[..]),
        };
        // Announced: the orphan reaper leaves this child alone until it is known.
        let spawning = registry::spawning()?;
        let base = Launch {
            program: exe,
            argv: args,
            env,
            stdio,
            cwd: request.cwd,
            cwd_dir: request.cwd_dir,
            fds,
        };
        // The default trampoline (this binary) comes from the resident
        // forker when there is one; a limited start's must be born in its
        // cgroup, and a named helper is exec'd.
        let forked = match (request.group, request.sandbox) {
            (None, Some((_, None))) => forker::launch(&base),
            _ => None,
        };
        let pid = match (forked, request.group) {
            (Some(forked), _) => forked?,
            (None, Some((group, helper))) => {
                let helper = helper.unwrap_or(Path::new(SELF_EXE));
                group.spawn_inside(
                    helper,
                    exe,
                    args,
                    prepared.is_some(),
                    |program, argv, joining| {
                        if !joining || prepared.is_some() {
                            return launch::launch(&Launch { program, argv, ..base });
                        }
                        // The join helper execs the program itself: it takes
                        // the environment sealed too.
                        let sealed = crate::env_fd::seal(env)?;
                        let fds = [(sealed.as_raw_fd(), crate::env_fd::ENV_FD)];
                        launch::launch(&Launch { program, argv, env: &[], fds: &fds, ..base })
                    },
                )?
            }
            (None, None) => launch::launch(&base)?,
        };
        spawning.register(pid);
        let Some(prepared) = prepared else { return Ok((pid, None)) };
        match prepared.wait_started() {
            Ok(listeners) => Ok::<_, SpawnError>((pid, listeners)),
            Err(failure) => {
                registry::abandon(pid);
                Err(match failure {
                    Failure::Setup(message) => SpawnError::Sandbox(message),
                    Failure::Exec(error) => SpawnError::Io(error),
                })
            }
        }
    };
    let (pid, listeners, io) = match request.tty {
        None => {
            let (stdout, child_stdout) = pipe()?;
            let wide = super::wide_pipe::widen(&stdout);
            let (stderr, child_stderr) = pipe()?;
            let stdin = if request.pipe_stdin { Some(pipe()?) } else { None };
            let stdio = Stdio::Pipes {
                stdin: stdin.as_ref().map(|(child_end, _)| child_end),
                stdout: &child_stdout,
                stderr: &child_stderr,
            };
            let (pid, listeners) = launch(stdio, None)?;
            // The child's ends close here: end of file comes when the child's copies go.
            let stdin = stdin.map(|(_, ours)| ChildStdin::from(ours));
            let io = ChildIo::Pipes {
                stdin,
                stdout: ChildStdout::from(stdout),
                stderr: ChildStderr::from(stderr),
                wide,
            };
            (pid, listeners, io)
        }
        Some(size) => {
            let master = open_pty(size)?;
            let slave =
                master.tty_name().ok_or_else(|| io::Error::other("pseudo-terminal has no name"))?;
            let slave_path = slave;
            let slave = CString::new(slave_path.as_os_str().as_bytes()).map_err(|_| nul())?;
            let (pid, listeners) = launch(Stdio::Terminal(&slave), Some(&slave_path))?;
            (pid, listeners, ChildIo::Pty { master })
        }
    };
    let pidfd = tree::pidfd_open(pid)?;
    let sandbox_type =
        if request.sandbox.is_some() { SandboxType::LinuxLandlock } else { SandboxType::None };
    // A policy's network: its listeners, and the rules its proxy applies.
    let rules = request.sandbox.and_then(|(policy, _)| policy.rules.clone());
    let proxy = listeners.zip(rules);
    Ok(Spawned { pid, sandbox_type, pidfd, io, group: None, proxy })
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

#[cfg(test)]
#[test]
fn pty_errors_read_as_os_errors() {
    let error = pty_error(
        "failed to openpty: Os { code: 24, kind: Uncategorized, message: \"Too many open files\" }",
    );
    assert_eq!(error.to_string(), "Too many open files (os error 24)");
    assert_eq!(pty_error("odd").to_string(), "cannot open a pseudo-terminal");
}

fn open_pty(size: TtySize) -> io::Result<Box<dyn MasterPty + Send>> {
    let pair = portable_pty::native_pty_system()
        .openpty(PtySize { rows: size.rows, cols: size.cols, pixel_width: 0, pixel_height: 0 })
        .map_err(|error| pty_error(&error.to_string()))?;
    Ok(pair.master)
}

/// portable-pty reports openpty's failure as text holding the OS error's
/// Debug form (`failed to openpty: Os { code: 24, .. }`): the OS error again,
/// with its own message ("Too many open files (os error 24)").
fn pty_error(text: &str) -> io::Error {
    let code = text
        .split_once("code: ")
        .and_then(|(_, rest)| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|digits| digits.parse().ok());
    match code {
        Some(code) => io::Error::from_raw_os_error(code),
        None => io::Error::other("cannot open a pseudo-terminal"),
    }
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
