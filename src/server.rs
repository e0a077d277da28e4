//! The server loop: one task owns the connection state and only routes.
//!
//! It reacts to input messages, process events, finished fs calls and sweeps,
//! room in the writer's queue, timers and the shutdown signal, and never awaits
//! anything another party can hold up: fs calls run on blocking threads
//! (`fs_calls`), `/proc` sweeps are blocking tasks of the table, and replies
//! wait in a bounded `Outbox` instead of in a `send().await`. While the
//! outbox is full the loop stops taking input and process events, which is what
//! pushes back on a client that does not read, down to the children's pipes.

mod attach;
mod dispatch;
mod fs_calls;
mod link;
mod outbox;
mod park;
mod reply;
mod session;

pub use crate::listen::{
    bind_unix, listen, listen_unix, sign_hs256, Auth, ListenOptions, SignedBearer, UnixSocket,
    DEFAULT_CLOCK_SKEW, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_DETACHED_SESSIONS,
    DEFAULT_SESSION_TTL, HANDSHAKE_TIMEOUT, MAX_PENDING_HANDSHAKES, MESSAGE_BUDGET,
    MIN_SHARED_SECRET_BYTES, PING_INTERVAL,
};

use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

pub use crate::http::{
    HttpPolicy, HTTP_BODY_LIMIT, HTTP_DELTA, HTTP_STREAM_BUFFER, MAX_HTTP_REQUESTS, MAX_REDIRECTS,
};
pub use crate::ports::{MAX_WAITING_LISTS, PORTS_POLL_INTERVAL};
pub use crate::tunnel::{
    TunnelPolicy, CONNECTION_TUNNEL_BYTES, MAX_TUNNELS, MAX_TUNNEL_ID_BYTES,
    TUNNEL_CONNECT_TIMEOUT, TUNNEL_WINDOW, TUNNEL_WRITE_BUFFER,
};

use self::link::Link;
use self::session::Session;
use crate::fs::Roots;
use crate::transport::{self, Incoming, Line};

/// Default `--max-message-bytes`: 64 MiB.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;
/// Default `--max-processes`.
pub const DEFAULT_MAX_PROCESSES: usize = 1024;
/// Default `--max-retained-bytes`: retained output of the whole server.
pub const DEFAULT_MAX_RETAINED_BYTES: usize = 256 * 1024 * 1024;
/// How long an exited process's id stays reserved by default.
pub const DEFAULT_ID_RESERVATION: Duration = Duration::from_secs(30);
/// Process events queued for the loop. Output is also bounded in bytes, 256
/// KiB for all processes (`process::pumps`), so this only limits the small
/// ones: exits and stream ends of many processes at once.
const EVENT_QUEUE: usize = 64;
/// How long a killed connection waits for its processes' streams to close
/// (and its fs calls to finish) before it ends anyway.
const KILL_DRAIN: Duration = Duration::from_millis(500);
/// How long the last replies may take to reach a client at the end.
const FINAL_FLUSH: Duration = Duration::from_millis(400);
/// How long a connection whose input ended while its replies waited for the
/// client to read goes on answering the lines it still has.
const EOF_LINGER: Duration = Duration::from_secs(10);

/// What a server does when its input ends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnEof {
    /// Kill every process group, deliver what is pending, and return.
    #[default]
    Kill,
    /// Let the processes finish, deliver their output, then return.
    Wait,
}

/// Settings of one connection.
#[derive(Debug, Clone)]
pub struct Config {
    /// Longest input line accepted; longer ones get an error and are discarded.
    pub max_message_bytes: usize,
    /// Live processes allowed at once.
    pub max_processes: usize,
    /// Retained output of all processes of all connections, in bytes charged
    /// with a per-chunk overhead; beyond it, exited processes' output goes
    /// first, then older chunks (see PROTOCOL.md, Limits).
    pub max_retained_bytes: usize,
    /// fs paths and process cwds must lie inside one of these (none: no confinement).
    pub roots: Vec<PathBuf>,
    /// What to do when the input ends.
    pub on_eof: OnEof,
    /// How long an exited process's id stays reserved (the protocol says 30 s).
    pub id_reservation: Duration,
    /// Confine every process (`--sandbox`): the default policy, which a
    /// `restricted` sandbox may only narrow.
    pub sandbox: bool,
    /// Under `sandbox`, the default policy keeps the host's network (`--sandbox-network`).
    pub sandbox_network: bool,
    /// Under `sandbox`, the default policy reaches only these hosts, through
    /// the server's proxy (`--sandbox-allow-host`; patterns as in a
    /// `sandbox.network` policy's `allow`).
    pub sandbox_allow_hosts: Vec<String>,
    /// Which addresses `tunnel/open` may reach (`--tunnels`).
    pub tunnels: TunnelPolicy,
    /// Whether `http/request` is served (`--http-requests`).
    pub http_requests: HttpPolicy,
    /// The `exec-server` binary that applies sandbox policies in the child
    /// (None: this process's own executable, right for the binary itself; an
    /// embedder or a test names the binary).
    pub sandbox_helper: Option<PathBuf>,
    /// Directories put first on every process's `PATH` (`--prepend-path`),
    /// before the start's own `PATH` or, when it names none, the server's;
    /// reported as `environmentInfo.prependPathDirs`. Absolute, without `:`.
    pub prepend_path: Vec<PathBuf>,
    /// Limits of every start that names none of its own (`--limit-memory`,
    /// `--limit-processes`, `--limit-cpu`); a start may lower them, not raise them.
    pub limits: crate::protocol::ProcessLimits,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            max_processes: DEFAULT_MAX_PROCESSES,
            max_retained_bytes: DEFAULT_MAX_RETAINED_BYTES,
            roots: Vec::new(),
            on_eof: OnEof::Kill,
            id_reservation: DEFAULT_ID_RESERVATION,
            sandbox: false,
            sandbox_network: false,
            sandbox_allow_hosts: Vec::new(),
            tunnels: TunnelPolicy::default(),
            http_requests: HttpPolicy::default(),
            sandbox_helper: None,
            prepend_path: Vec::new(),
            limits: crate::protocol::ProcessLimits::default(),
        }
    }
}

/// Serves one connection until its input ends, then kills (or, with
/// [`OnEof::Wait`], waits for) its processes, flushes the output and returns.
pub async fn run<R, W>(reader: R, writer: W, config: Config) -> io::Result<()>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    run_until(reader, writer, config, std::future::pending()).await
}

/// Like [`run`], and also stops as on a killed connection when `shutdown` completes
/// (the binary passes SIGTERM/SIGINT here).
pub async fn run_until<R, W, S>(reader: R, writer: W, config: Config, shutdown: S) -> io::Result<()>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
    S: Future<Output = ()>,
{
    run_counted(reader, writer, config, Arc::default(), shutdown).await
}

/// [`run_until`], with the server's held bytes counted in `account`: the
/// MCP face runs its engine so, and charges what it keeps for its sessions
/// there too.
pub(crate) async fn run_counted<R, W, S>(
    reader: R,
    writer: W,
    config: Config,
    account: Arc<crate::account::Account>,
    shutdown: S,
) -> io::Result<()>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
    S: Future<Output = ()>,
{
    let roots = Arc::new(Roots::new(&config.roots)?);
    let (incoming, reader, input_ended) = transport::spawn_reader(
        BufReader::with_capacity(transport::INPUT_BUFFER, reader),
        config.max_message_bytes,
    );
    let (outgoing, writer) = transport::spawn_writer(writer);
    let channels = Channels { incoming, outgoing, reader, writer, input_ended };
    serve(channels, roots, &config, account, shutdown).await
}

/// One connection's transport, as the loop sees it: decoded messages in,
/// encoded lines out, and the two tasks that own the real stream.
pub(crate) struct Channels {
    pub(crate) incoming: mpsc::Receiver<Incoming>,
    pub(crate) outgoing: mpsc::Sender<Line>,
    pub(crate) reader: JoinHandle<()>,
    pub(crate) writer: JoinHandle<io::Result<()>>,
    /// Fires when the input has ended while lines before its end still wait
    /// for the loop; a transport without that signal drops the sender.
    pub(crate) input_ended: oneshot::Receiver<()>,
}

/// The loop of one connection over any transport whose session ends with it
/// (stdio, and an in-process server).
pub(crate) async fn serve<S>(
    channels: Channels,
    roots: Arc<Roots>,
    config: &Config,
    retained: Arc<crate::account::Account>,
    shutdown: S,
) -> io::Result<()>
where
    S: Future<Output = ()>,
{
    let mut session = Session::new(roots, config, retained, None);
    tokio::pin!(shutdown);
    match attach::attach(Link::new(channels), &mut session, config, &mut shutdown).await {
        Ended::Finished(result) => result,
        // Without a registry a session neither detaches nor resumes another.
        Ended::Detached | Ended::Resume { .. } => Ok(()),
    }
}

/// Serves one connection of a listening server: its session detaches when the
/// connection goes and waits, parked, to be resumed; or the connection resumes
/// another session and hands itself over. Returns when this thread has nothing
/// left to drive (its session ended, or its link was handed over and is done).
///
/// `slot` counts the connection against `--max-connections`: it is dropped
/// while the session waits detached (a resuming connection holds its own).
pub(crate) async fn serve_resumable<S, G>(
    channels: Channels,
    roots: Arc<Roots>,
    config: &Config,
    retained: Arc<crate::account::Account>,
    sessions: &Arc<Sessions>,
    slot: G,
    shutdown: S,
) where
    S: Future<Output = ()>,
{
    let mut slot = Some(slot);
    let mut session = Session::new(roots, config, retained, Some(sessions));
    tokio::pin!(shutdown);
    let mut link = Link::new(channels);
    loop {
        match attach::attach(link, &mut session, config, &mut shutdown).await {
            Ended::Finished(result) => {
                if let Err(error) = result {
                    tracing::info!(%error, "connection ended with an error");
                }
                return;
            }
            Ended::Detached => {
                slot.take();
                match park::park(&mut session, &mut shutdown).await {
                    Some(handoff) => link = session.resumed(handoff),
                    None => return,
                }
            }
            Ended::Resume { wake, mut handoff } => {
                // This thread's runtime drives the link's tasks: it stays until the link is done.
                let (keep_alive, done) = oneshot::channel();
                handoff.link.keep_alive = Some(keep_alive);
                match wake.send(crate::sessions::Wake::Resume(handoff)) {
                    Ok(()) => {
                        let _ = done.await;
                        return;
                    }
                    // The session ended between the claim and now: this
                    // connection goes on with its own, uninitialized session.
                    Err(crate::sessions::Wake::Resume(handoff)) => {
                        link = handoff.link;
                        link.keep_alive = None;
                        let error =
                            crate::sessions::ClaimError::Unknown(handoff.session_id.to_string());
                        link.refuse(&handoff.request, error.to_error());
                    }
                    Err(crate::sessions::Wake::End) => return,
                }
            }
        }
    }
}

/// The sessions of a listening server; a resume hands over a [`Handoff`].
pub(crate) type Sessions = crate::sessions::Registry<Handoff>;

/// What a resuming connection gives the session it resumes.
pub(crate) struct Handoff {
    link: Link,
    /// The `initialize` to answer.
    request: crate::protocol::RequestId,
    session_id: Arc<str>,
}

/// How a connection's loop ended.
pub(crate) enum Ended {
    /// The session is over: its processes were killed (or finished) and the
    /// connection is closed.
    Finished(io::Result<()>),
    /// The connection is gone; the session lives on, to be parked.
    Detached,
    /// The connection resumes another session: wake it with the link.
    Resume { wake: tokio::sync::oneshot::Sender<crate::sessions::Wake<Handoff>>, handoff: Handoff },
}

/// A task aborted when its handle is dropped: the loop owns its transport's tasks.
pub(crate) struct AbortOnDrop<T>(pub(crate) JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
