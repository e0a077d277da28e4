//! The launcher: spawns a server command, connects a [`Client`], and owns the server's lifetime.

mod container;
mod os;
mod ssh;

use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncWrite, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::task::JoinHandle;

pub use self::container::{ContainerCommand, Engine};
use self::ssh::SelfInstall;
pub use self::ssh::SshCommand;
use crate::client::{lock, Client, ClientOptions};
use crate::error::Error;

/// How long `Drop` waits after closing stdin, and again after SIGTERM.
const DROP_GRACE: Duration = Duration::from_millis(500);
/// How long a dropped persistent launcher waits for its `session/end` (a
/// round trip through ssh) before it closes the bridge anyway.
const END_GRACE: Duration = Duration::from_secs(5);

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
    /// Install the server first when the remote lacks it (set by [`SshCommand::install_if_missing`]).
    pub(crate) self_install: Option<SelfInstall>,
    /// Reach a daemon through a bridge, reconnecting when it drops (set by
    /// [`SshCommand::persistent`]).
    pub(crate) persistent: bool,
    /// Where [`LaunchCommand::exec_server`] looked in vain, for the error.
    pub(crate) searched: Option<String>,
    /// A container launch: what its errors name (set by [`LaunchCommand::container`]).
    pub(crate) container: Option<container::Facts>,
}

impl LaunchCommand {
    /// Runs `program` with no arguments.
    pub fn new(program: impl Into<PathBuf>) -> LaunchCommand {
        LaunchCommand {
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            cwd: None,
            self_install: None,
            persistent: false,
            searched: None,
            container: None,
        }
    }

    /// `exec-server` on `destination` over OpenSSH: `ssh -T -o BatchMode=yes
    /// DESTINATION exec-server`, never with a tty. The builder sets extra ssh
    /// options, the remote program and its arguments, and the opt-in
    /// self-install; it converts into a `LaunchCommand`.
    pub fn ssh(destination: impl Into<String>) -> SshCommand {
        SshCommand::new(destination)
    }

    /// `exec-server` inside a running container or pod, through its engine:
    /// `docker exec -i TARGET exec-server`, `podman exec -i ...`, `kubectl
    /// exec -i POD [-c CONTAINER] -- exec-server`, never with a tty. The
    /// builder sets exec options, the program and its arguments, and the
    /// opt-in install of a static binary; it converts into a `LaunchCommand`.
    pub fn container(engine: Engine, target: impl Into<String>) -> ContainerCommand {
        ContainerCommand::new(engine, target)
    }

    /// The `exec-server` binary: `$EXEC_SERVER_BIN` if set, else the one next to
    /// the current executable (or its parent directory, for tests and examples),
    /// else `exec-server` on PATH.
    pub fn exec_server() -> LaunchCommand {
        if let Some(path) = std::env::var_os("EXEC_SERVER_BIN") {
            return LaunchCommand::new(path);
        }
        let candidates: Vec<PathBuf> = std::env::current_exe()
            .ok()
            .and_then(|exe| {
                let dir = exe.parent()?.to_path_buf();
                Some(vec![dir.join("exec-server"), dir.parent()?.join("exec-server")])
            })
            .unwrap_or_default();
        match candidates.iter().find(|candidate| candidate.is_file()) {
            Some(found) => LaunchCommand::new(found),
            None => {
                let mut command = LaunchCommand::new("exec-server");
                let looked: Vec<String> =
                    candidates.iter().map(|c| c.display().to_string()).collect();
                command.searched = Some(format!(
                    "$EXEC_SERVER_BIN is unset, and neither {} nor PATH has exec-server: build it with `cargo build`, set EXEC_SERVER_BIN, or use LaunchCommand::this_program",
                    looked.join(" nor ")
                ));
                command
            }
        }
    }

    /// This program, started as its own server: it must call
    /// [`crate::serve_if_requested`] first thing in `main`. For an application
    /// that ships as one binary, and for examples that run without a separate
    /// build of `exec-server`.
    pub fn this_program() -> LaunchCommand {
        let program = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/proc/self/exe"));
        LaunchCommand::new(program).arg(crate::SERVE_ARG)
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
/// ```
/// use exec_server::{LaunchCommand, Launcher, Shutdown, StartParams};
///
/// # #[cfg(not(feature = "server"))] fn main() {} // this_program serves: the server half.
/// # #[cfg(feature = "server")]
/// fn main() -> Result<(), exec_server::Error> {
///     exec_server::serve_if_requested(); // serves, when this program is the server
///     tokio::runtime::Runtime::new().expect("a runtime").block_on(async {
///         let launcher = Launcher::spawn(LaunchCommand::this_program()).await?;
///         let mut date = launcher.client().start(StartParams::new("date", ["date"], "/")).await?;
///         let (output, status) = date.output_to_end().await?;
///         println!("{} (exit {})", String::from_utf8_lossy(&output).trim(), status.code);
///         // Or just drop it: the server and everything it started die either way.
///         let ended = launcher.shutdown(std::time::Duration::from_secs(2)).await?;
///         assert!(matches!(ended, Shutdown::Exited(status) if status.success()), "{ended:?}");
///         Ok(())
///     })
/// }
/// ```
pub struct Launcher {
    client: Client,
    /// Taken only by `Drop`, which hands it to a reaper task.
    child: Option<Child>,
    stdin: Arc<Mutex<Option<ChildStdin>>>,
    pid: u32,
    stderr: JoinHandle<()>,
    /// A `--listen` server does not read stdin: it ends on SIGTERM.
    listening: bool,
    /// Daemon mode only (the session outlives the bridge, so dropping ends
    /// it): the bridges started after the first (one per resume), with their
    /// stderr forwarders.
    bridges: Option<Bridges>,
}

impl Launcher {
    /// Starts `command` and performs the handshake.
    pub async fn spawn(command: impl Into<LaunchCommand>) -> Result<Launcher, Error> {
        Launcher::spawn_with(command, ClientOptions::default()).await
    }

    /// Like [`Launcher::spawn`] with client options.
    pub async fn spawn_with(
        command: impl Into<LaunchCommand>,
        options: ClientOptions,
    ) -> Result<Launcher, Error> {
        let command = command.into();
        let started = Started::spawn_ready(&command).await?;
        if command.persistent {
            return Launcher::persistent(command, started, options).await;
        }
        let Started { child, stdin, stdout, stderr, pid, tail } = started;
        let stdin = Arc::new(Mutex::new(Some(stdin)));
        let writer = SharedStdin(stdin.clone());
        let connected = Client::connect_with(stdout, writer, options).await;
        let explained = command.container.clone().map(|facts| (facts, tail));
        Launcher::own(connected, child, (stdin, pid), (stderr, explained), None).await
    }

    /// The launcher of a stdio server (or, with `bridges`, the first bridge of
    /// a persistent launch) `child` once its client has connected; when it
    /// could not, the child is killed and reaped.
    async fn own(
        connected: Result<Client, Error>,
        mut child: Child,
        (stdin, pid): (Arc<Mutex<Option<ChildStdin>>>, u32),
        (stderr, explained): (JoinHandle<()>, Option<(container::Facts, Tail)>),
        bridges: Option<Bridges>,
    ) -> Result<Launcher, Error> {
        match connected {
            Ok(client) => {
                let child = Some(child);
                Ok(Launcher { client, child, stdin, pid, stderr, listening: false, bridges })
            }
            Err(error) => {
                let _ = child.start_kill();
                let _ = child.wait().await;
                Err(explain(error, stderr, explained).await)
            }
        }
    }

    /// Starts `command` with `--listen ws://127.0.0.1:0`, reads the URL it
    /// prints and connects to it over WebSocket. The launcher owns the server as
    /// it owns a stdio one; dropping it sends SIGTERM.
    pub async fn spawn_listening(
        command: impl Into<LaunchCommand>,
        options: ClientOptions,
    ) -> Result<Launcher, Error> {
        let command = command.into().arg("--listen").arg("ws://127.0.0.1:0");
        let mut started = Started::spawn(&command)?;
        let url = match ssh::read_line(&mut started.stdout).await {
            Ok(url) if url.starts_with("ws://") => url,
            Ok(other) => {
                let error = Error::Protocol(format!("expected the server's URL, got {other:?}"));
                return Err(started.abandon(error).await);
            }
            Err(error) => return Err(started.abandon(error).await),
        };
        match Client::connect_ws(&url, options).await {
            Ok(client) => {
                let Started { child, stdin, stderr, pid, .. } = started;
                let stdin = Arc::new(Mutex::new(Some(stdin)));
                let child = Some(child);
                let bridges = None;
                Ok(Launcher { client, child, stdin, pid, stderr, listening: true, bridges })
            }
            Err(error) => Err(started.abandon(error).await),
        }
    }
}

impl Launcher {
    /// Daemon mode: the client reconnects by starting `command` again.
    async fn persistent(
        command: LaunchCommand,
        started: Started,
        options: ClientOptions,
    ) -> Result<Launcher, Error> {
        let Started { child, stdin, stdout, stderr, pid, tail } = started;
        let explained = command.container.clone().map(|facts| (facts, tail));
        let first = crate::client::Transport {
            reader: Box::new(stdout),
            writer: Box::new(stdin),
            keep: None,
        };
        let first = Arc::new(Mutex::new(Some(first)));
        let bridges: Bridges = Arc::default();
        let (spawned, command) = (bridges.clone(), Arc::new(command));
        let connector: crate::client::Connector = Arc::new(move || {
            let (first, spawned, command) = (first.clone(), spawned.clone(), command.clone());
            Box::pin(async move {
                if let Some(transport) = lock(&first).take() {
                    return Ok(transport);
                }
                let Started { child, stdin, stdout, stderr, .. } =
                    Started::spawn_ready(&command).await?;
                let mut bridges = lock(&spawned);
                // Bridges that ended are reaped as new ones come.
                bridges.retain_mut(|(bridge, _)| matches!(bridge.try_wait(), Ok(None)));
                bridges.push((child, stderr));
                Ok(crate::client::Transport {
                    reader: Box::new(stdout),
                    writer: Box::new(stdin),
                    keep: None,
                })
            })
        });
        let connected = Client::connect_resumable(connector, options).await;
        // The client owns the first bridge's stdin (`Connector`), not the launcher.
        Launcher::own(connected, child, (Arc::default(), pid), (stderr, explained), Some(bridges))
            .await
    }
}

/// Bridges of a persistent launch, each with its stderr forwarder.
type Bridges = Arc<Mutex<Vec<(Child, JoinHandle<()>)>>>;

/// A spawned server before its client is connected.
struct Started {
    child: Child,
    stdin: ChildStdin,
    stdout: tokio::process::ChildStdout,
    stderr: JoinHandle<()>,
    pid: u32,
    /// The last lines the server (or its engine) wrote on stderr.
    tail: Tail,
}

/// The last lines of a server's stderr, kept for a failed launch's error.
type Tail = Arc<Mutex<std::collections::VecDeque<String>>>;
/// Lines of stderr kept.
const TAIL_LINES: usize = 8;
/// Characters kept of each of them.
const TAIL_LINE_CHARS: usize = 512;

/// `error` of a launch that failed, with what its engine said (a container
/// launch); the stderr forwarder is given a moment to read the rest.
async fn explain(
    error: Error,
    stderr: JoinHandle<()>,
    explained: Option<(container::Facts, Tail)>,
) -> Error {
    let Some((facts, tail)) = explained else {
        stderr.abort();
        return error;
    };
    let abort = stderr.abort_handle();
    if tokio::time::timeout(Duration::from_secs(2), stderr).await.is_err() {
        abort.abort();
    }
    let said = lock(&tail).iter().cloned().collect::<Vec<_>>().join("\n");
    container::explain(&facts, error, said)
}

impl Started {
    fn spawn(command: &LaunchCommand) -> Result<Started, Error> {
        let mut std_command = std::process::Command::new(&command.program);
        std_command
            .args(&command.args)
            .envs(command.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        os::own_group(&mut std_command);
        if let Some(cwd) = &command.cwd {
            std_command.current_dir(cwd);
        }
        let program = command.program.display().to_string();
        let mut child = tokio::process::Command::from(std_command)
            // The backstop if the reaper task never runs (its runtime shut down).
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| match (&command.searched, &command.container, e.kind()) {
                (Some(searched), _, io::ErrorKind::NotFound) => {
                    Error::io(format!("cannot start {program} ({searched})"), e)
                }
                (_, Some(facts), io::ErrorKind::NotFound) => Error::EngineMissing {
                    engine: facts.engine.program().to_owned(),
                    program: program.clone(),
                    source: e,
                },
                _ => Error::io(format!("cannot start {program}"), e),
            })?;
        let pid = child
            .id()
            .ok_or_else(|| Error::Protocol(format!("server {program} exited as it started")))?;
        let missing = || Error::Protocol(format!("the stdio of server {program} is not piped"));
        let stdin = child.stdin.take().ok_or_else(missing)?;
        let stdout = child.stdout.take().ok_or_else(missing)?;
        let stderr = child.stderr.take().ok_or_else(missing)?;
        let tail = Tail::default();
        let stderr = tokio::spawn(forward_stderr(stderr, pid, tail.clone()));
        Ok(Started { child, stdin, stdout, stderr, pid, tail })
    }

    /// Spawns `command` and runs its install dialogue, if any.
    async fn spawn_ready(command: &LaunchCommand) -> Result<Started, Error> {
        let mut started = Started::spawn(command)?;
        if let Some(install) = &command.self_install {
            let dialogue = ssh::self_install(install, &mut started.stdout, &mut started.stdin);
            if let Err(error) = dialogue.await {
                let explained = command.container.clone();
                return Err(started.abandon_explained(error, explained).await);
            }
        }
        Ok(started)
    }

    /// Kills and reaps the server after a failed start, and returns `error`.
    async fn abandon(self, error: Error) -> Error {
        self.abandon_explained(error, None).await
    }

    /// [`Started::abandon`], the error read against the engine's stderr (a container launch).
    async fn abandon_explained(mut self, error: Error, facts: Option<container::Facts>) -> Error {
        // A container's engine is given a moment to end on its own: it may
        // still be relaying what the container wrote on stderr.
        if facts.is_some() {
            let _ = tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await;
        }
        os::signal_group(self.pid, os::Ending::Kill);
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
        explain(error, self.stderr, facts.map(|facts| (facts, self.tail))).await
    }
}

impl Launcher {
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
        self.child_mut().try_wait().map_err(|e| Error::io("cannot check the server", e))
    }

    /// Waits for the server to exit (on its own, or after [`Client::close`]).
    pub async fn wait(&mut self) -> Result<std::process::ExitStatus, Error> {
        self.child_mut().wait().await.map_err(|e| Error::io("cannot wait for the server", e))
    }

    /// Closes stdin and waits up to `timeout` for the server to exit, then sends
    /// SIGTERM and waits up to `timeout` again, then SIGKILL.
    pub async fn shutdown(mut self, timeout: Duration) -> Result<Shutdown, Error> {
        self.close_stdin();
        let pid = self.pid;
        end(self.child_mut(), pid, timeout, true)
            .await
            .map_err(|e| Error::io("cannot wait for the server", e))
    }

    fn close_stdin(&self) {
        self.client.close();
        lock(&self.stdin).take();
    }

    fn child_mut(&mut self) -> &mut Child {
        self.child.as_mut().expect("the child is taken only by Drop")
    }
}

impl Drop for Launcher {
    /// Closes the server's stdin at once and leaves the rest to a reaper task
    /// on the current runtime (SIGTERM after a grace, then SIGKILL): dropping
    /// never blocks the runtime thread. Without a runtime, it waits here, as
    /// nothing else could.
    fn drop(&mut self) {
        // A bridge's end only detaches the session: in daemon mode the
        // session is ended first (its processes go now, not after the
        // daemon's ttl), then the bridges.
        let ending = self.bridges.is_some().then(|| self.client.clone());
        if ending.is_none() {
            self.close_stdin();
        }
        let bridges: Vec<_> = self
            .bridges
            .as_ref()
            .map(|bridges| lock(bridges).drain(..).collect())
            .unwrap_or_default();
        let Some(mut child) = self.child.take() else {
            for (mut bridge, stderr) in bridges {
                let _ = bridge.start_kill();
                stderr.abort();
            }
            return;
        };
        let (pid, listening) = (self.pid, self.listening);
        let stderr = self.stderr.abort_handle();
        let reap = async move {
            if let Some(client) = ending {
                let _ = tokio::time::timeout(END_GRACE, client.end_session()).await;
                client.close();
            }
            for (mut bridge, stderr) in bridges {
                let _ = bridge.start_kill();
                let _ = bridge.wait().await;
                stderr.abort();
            }
            let _ = end(&mut child, pid, DROP_GRACE, !listening).await;
            stderr.abort();
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(reap)),
            Err(_) => match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(runtime) => runtime.block_on(reap),
                // Without groups (Windows), dropping `reap` drops the child,
                // whose kill_on_drop ends it.
                Err(_) => {
                    os::signal_group(pid, os::Ending::Kill);
                }
            },
        }
    }
}

/// Ends a server whose stdin is closed: with `wait_for_eof`, up to `grace` for
/// it to exit on its own, then SIGTERM and `grace` again, then SIGKILL. The
/// group is signalled only while the child is unreaped (only this `Child`
/// reaps it, and an exit already collected returns at once), so its pid is
/// still the server's own.
async fn end(
    child: &mut Child,
    pid: u32,
    grace: Duration,
    wait_for_eof: bool,
) -> io::Result<Shutdown> {
    if let Some(status) = child.try_wait()? {
        return Ok(Shutdown::Exited(status));
    }
    if wait_for_eof {
        if let Ok(status) = tokio::time::timeout(grace, child.wait()).await {
            return Ok(Shutdown::Exited(status?));
        }
    }
    // Without process groups (Windows) there is no graceful signal: kill at once.
    if os::signal_group(pid, os::Ending::Terminate) {
        if let Ok(status) = tokio::time::timeout(grace, child.wait()).await {
            return Ok(Shutdown::Terminated(status?));
        }
    }
    if !os::signal_group(pid, os::Ending::Kill) {
        child.start_kill()?;
    }
    Ok(Shutdown::Killed(child.wait().await?))
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

/// The longest stderr line kept whole (the rest of a longer one is dropped).
const MAX_STDERR_LINE: usize = 4096;

/// One line of `reader`, at most [`MAX_STDERR_LINE`] bytes of it kept;
/// `None` at end of input.
async fn bounded_line<R: tokio::io::AsyncBufRead + Unpin>(reader: &mut R) -> Option<String> {
    use tokio::io::AsyncBufReadExt;
    let mut line = Vec::new();
    loop {
        let available = reader.fill_buf().await.ok()?;
        if available.is_empty() {
            return (!line.is_empty()).then(|| String::from_utf8_lossy(&line).into_owned());
        }
        let (taken, ended) = match memchr::memchr(b'\n', available) {
            Some(at) => (at + 1, true),
            None => (available.len(), false),
        };
        let room = MAX_STDERR_LINE.saturating_sub(line.len());
        line.extend_from_slice(&available[..taken.min(room)]);
        reader.consume(taken);
        if ended {
            if line.last() == Some(&b'\n') {
                line.pop();
            }
            return Some(String::from_utf8_lossy(&line).into_owned());
        }
    }
}

async fn forward_stderr(stderr: tokio::process::ChildStderr, pid: u32, tail: Tail) {
    let mut reader = BufReader::new(stderr);
    while let Some(line) = bounded_line(&mut reader).await {
        {
            let mut tail = lock(&tail);
            if tail.len() == TAIL_LINES {
                tail.pop_front();
            }
            tail.push_back(line.chars().take(TAIL_LINE_CHARS).collect());
        }
        tracing::info!(target: "exec_server::server_stderr", server_pid = pid, "{line}");
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn a_stderr_line_is_kept_short_however_long_it_is() {
        let mut text = vec![b'E'; 1 << 20];
        text.extend_from_slice(b"\nnext\n");
        let mut reader = tokio::io::BufReader::new(&text[..]);
        assert_eq!(super::bounded_line(&mut reader).await.map(|l| l.len()), Some(4096));
        assert_eq!(super::bounded_line(&mut reader).await.as_deref(), Some("next"));
        assert_eq!(super::bounded_line(&mut reader).await, None);
    }
}
