//! The launcher: spawns a server command, connects a [`Client`], and owns the server's lifetime.

use std::io;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWrite, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::task::JoinHandle;

use crate::client::{lock, Client, ClientOptions};
use crate::error::Error;

/// How long `Drop` waits after closing stdin, and again after SIGTERM.
const DROP_GRACE: Duration = Duration::from_millis(500);

/// The command that starts a server, such as `exec-server` or `ssh host exec-server`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchCommand {
    /// The program.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Variables added to the inherited environment.
    pub env: Vec<(String, String)>,
    /// Working directory (default: inherited).
    pub cwd: Option<PathBuf>,
}

impl LaunchCommand {
    /// Runs `program` with no arguments.
    pub fn new(program: impl Into<PathBuf>) -> LaunchCommand {
        LaunchCommand { program: program.into(), args: Vec::new(), env: Vec::new(), cwd: None }
    }

    /// The `exec-server` binary: `$EXEC_SERVER_BIN` if set, else the one next to
    /// the current executable (or its parent directory, for tests and examples),
    /// else `exec-server` on PATH.
    pub fn exec_server() -> LaunchCommand {
        if let Some(path) = std::env::var_os("EXEC_SERVER_BIN") {
            return LaunchCommand::new(path);
        }
        let beside = std::env::current_exe().ok().and_then(|exe| {
            let dir = exe.parent()?.to_path_buf();
            [dir.join("exec-server"), dir.parent()?.join("exec-server")]
                .into_iter()
                .find(|candidate| candidate.is_file())
        });
        LaunchCommand::new(beside.unwrap_or_else(|| PathBuf::from("exec-server")))
    }

    /// Adds an argument.
    pub fn arg(mut self, arg: impl Into<String>) -> LaunchCommand {
        self.args.push(arg.into());
        self
    }
}

impl Default for LaunchCommand {
    fn default() -> LaunchCommand {
        LaunchCommand::exec_server()
    }
}

/// How [`Launcher::shutdown`] ended the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shutdown {
    /// It exited on its own after its stdin closed.
    Exited(std::process::ExitStatus),
    /// It needed SIGTERM.
    Terminated(std::process::ExitStatus),
    /// It needed SIGKILL.
    Killed(std::process::ExitStatus),
}

/// A running server and the client connected to it. Dropping it closes the
/// server's stdin (the server then kills everything it started and exits),
/// sends SIGTERM if the server has not exited shortly after, and SIGKILL last.
/// The server also gets SIGTERM as its parent-death signal, so it cleans up
/// when the launching process dies, even by SIGKILL.
///
/// The parent-death signal fires when the *thread* that spawned the server
/// exits: spawn from a thread that lives as long as the launcher (a runtime
/// worker or the main thread, not a `spawn_blocking` thread).
///
/// ```no_run
/// # #[tokio::main]
/// # async fn main() -> Result<(), exec_server::Error> {
/// use exec_server::{LaunchCommand, Launcher, StartParams};
///
/// let launcher = Launcher::spawn(LaunchCommand::exec_server()).await?;
/// let mut date = launcher.client().start(StartParams::new("date", ["date"], "/")).await?;
/// let (output, status) = date.output_to_end().await?;
/// println!("{} (exit {})", String::from_utf8_lossy(&output).trim(), status.code);
/// # Ok(())
/// # }
/// ```
pub struct Launcher {
    client: Client,
    child: Child,
    stdin: Arc<Mutex<Option<ChildStdin>>>,
    pid: u32,
    stderr: JoinHandle<()>,
}

impl Launcher {
    /// Starts `command` and performs the handshake.
    pub async fn spawn(command: LaunchCommand) -> Result<Launcher, Error> {
        Launcher::spawn_with(command, ClientOptions::default()).await
    }

    /// Like [`Launcher::spawn`] with client options.
    pub async fn spawn_with(
        command: LaunchCommand,
        options: ClientOptions,
    ) -> Result<Launcher, Error> {
        let mut std_command = std::process::Command::new(&command.program);
        std_command
            .args(&command.args)
            .envs(command.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        if let Some(cwd) = &command.cwd {
            std_command.current_dir(cwd);
        }
        let parent = std::process::id();
        // SAFETY: only async-signal-safe calls (prctl, getppid) run in the child.
        unsafe {
            std_command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) == -1 {
                    return Err(io::Error::last_os_error());
                }
                if libc::getppid() as u32 != parent {
                    return Err(io::Error::other("the launching process exited"));
                }
                Ok(())
            });
        }
        let program = command.program.display().to_string();
        let mut child = tokio::process::Command::from(std_command)
            .spawn()
            .map_err(|e| Error::io(format!("cannot start {program}"), e))?;
        let pid = child.id().ok_or_else(|| Error::Protocol("server exited at once".into()))?;
        let missing = || Error::Protocol("server stdio is not piped".into());
        let stdin = Arc::new(Mutex::new(Some(child.stdin.take().ok_or_else(missing)?)));
        let stdout = child.stdout.take().ok_or_else(missing)?;
        let stderr = child.stderr.take().ok_or_else(missing)?;
        let stderr = tokio::spawn(forward_stderr(stderr, pid));
        let writer = SharedStdin(stdin.clone());
        match Client::connect_with(stdout, writer, options).await {
            Ok(client) => Ok(Launcher { client, child, stdin, pid, stderr }),
            Err(error) => {
                let _ = child.start_kill();
                let _ = child.wait().await;
                stderr.abort();
                Err(error)
            }
        }
    }

    /// The connected client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The server's pid (also its process group).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The server's exit status if it has exited.
    pub fn try_wait(&mut self) -> Result<Option<std::process::ExitStatus>, Error> {
        self.child.try_wait().map_err(|e| Error::io("cannot check the server", e))
    }

    /// Waits for the server to exit (on its own, or after [`Client::close`]).
    pub async fn wait(&mut self) -> Result<std::process::ExitStatus, Error> {
        self.child.wait().await.map_err(|e| Error::io("cannot wait for the server", e))
    }

    /// Closes stdin and waits up to `timeout` for the server to exit, then sends
    /// SIGTERM and waits up to `timeout` again, then SIGKILL.
    pub async fn shutdown(mut self, timeout: Duration) -> Result<Shutdown, Error> {
        self.close_stdin();
        if let Ok(status) = tokio::time::timeout(timeout, self.wait()).await {
            return Ok(Shutdown::Exited(status?));
        }
        self.signal(libc::SIGTERM);
        if let Ok(status) = tokio::time::timeout(timeout, self.wait()).await {
            return Ok(Shutdown::Terminated(status?));
        }
        self.signal(libc::SIGKILL);
        Ok(Shutdown::Killed(self.wait().await?))
    }

    fn close_stdin(&self) {
        self.client.close();
        lock(&self.stdin).take();
    }

    fn signal(&self, signal: libc::c_int) {
        // SAFETY: killpg has no memory-safety preconditions; the group is the server's own.
        unsafe { libc::killpg(self.pid as libc::pid_t, signal) };
    }

    /// Polls for exit for up to `grace` (used from `Drop`, which cannot await).
    fn exited_within(&mut self, grace: Duration) -> bool {
        let deadline = Instant::now() + grace;
        loop {
            if matches!(self.child.try_wait(), Ok(Some(_)) | Err(_)) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Drop for Launcher {
    fn drop(&mut self) {
        self.close_stdin();
        if !self.exited_within(DROP_GRACE) {
            self.signal(libc::SIGTERM);
            if !self.exited_within(DROP_GRACE) {
                self.signal(libc::SIGKILL);
                let _ = self.child.start_kill();
            }
        }
        self.stderr.abort();
    }
}

/// The server's stdin, closable from `Drop` while the client's writer task holds it.
struct SharedStdin(Arc<Mutex<Option<ChildStdin>>>);

impl AsyncWrite for SharedStdin {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match lock(&self.0).as_mut() {
            Some(stdin) => Pin::new(stdin).poll_write(cx, buf),
            None => Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match lock(&self.0).as_mut() {
            Some(stdin) => Pin::new(stdin).poll_flush(cx),
            None => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        lock(&self.0).take();
        Poll::Ready(Ok(()))
    }
}

async fn forward_stderr(stderr: tokio::process::ChildStderr, pid: u32) {
    let mut lines = BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::info!(target: "exec_server::server_stderr", server_pid = pid, "{line}");
    }
}
