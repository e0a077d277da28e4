//! `--listen ws://IP:PORT`: JSON-RPC over WebSocket, one session per connection.
//!
//! The accept loop decides on each TCP peer before reading it ([`peer`]: a
//! local peer of another uid is refused without a token), then its upgrade
//! runs as a task of the listener ([`pending`], bounded, the idle evicted
//! first): the request ([`handshake`], bounded by [`HANDSHAKE_TIMEOUT`]),
//! the token ([`auth`]), and who holds the peer's socket (never a process in
//! one of the server's sandboxes). Only an upgraded connection gets a thread
//! of its own (a current-thread runtime), so one connection's large reply or
//! burst of work never stalls another: its frames ([`frames`], charged as
//! they arrive), its reader and writer tasks ([`ws`]: pings every 30 s, a
//! silent peer dropped) and its process table and loop ([`crate::server`]'s
//! `serve`), exactly as a stdio session. Upgrades carrying an `Origin`
//! header are refused (403). Beyond `--max-connections` upgraded connections
//! an upgrade gets 503; when the process is out of descriptors, the accept
//! loop pauses instead of spinning.

mod auth;
mod frames;
mod handshake;
mod peer;
mod pending;
mod unix;
mod ws;

pub(crate) use self::auth::parse_sha256;
pub use self::auth::{sign_hs256, Auth, SignedBearer, DEFAULT_CLOCK_SKEW, MIN_SHARED_SECRET_BYTES};

pub use self::unix::{bind as bind_unix, UnixSocket};
pub(crate) use self::unix::{
    check_private_dir, euid, log_path as unix_log_path, peer_uid, private_dir, private_file,
};

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

use self::frames::MessageBudget;
use self::handshake::Outcome;
use self::pending::Pending;
use crate::fs::Roots;
use crate::server::{serve_resumable, Config, OnEof, Sessions};
pub use crate::sessions::{DEFAULT_MAX_DETACHED_SESSIONS, DEFAULT_SESSION_TTL};

/// How often the server pings each peer; a peer silent for a whole period is dropped.
pub const PING_INTERVAL: Duration = Duration::from_secs(30);
/// How long a connection may take to send its upgrade request.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Default `--max-connections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;
/// Connections whose upgrade is under way at once; a new arrival beyond
/// evicts the oldest of them (it is never refused).
pub const MAX_PENDING_HANDSHAKES: usize = 4096;
/// Bytes of incoming messages all connections together may hold at once
/// (at least one `--max-message-bytes` message always fits).
pub const MESSAGE_BUDGET: usize = 256 * 1024 * 1024;
/// The WebSocket wording of a parse error, before the parser's detail.
const FRAME_ERROR: &str = "failed to parse websocket JSON-RPC message from exec-server websocket: ";
/// How long connections get to end after SIGTERM before the server exits anyway.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
/// How long the accept loop pauses when the process is out of descriptors.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// How often a persisting accept failure is logged (with a count).
const ACCEPT_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// What a listening server needs besides its socket.
#[derive(Debug, Clone)]
pub struct ListenOptions {
    /// Settings of every connection (`on_eof` is always kill).
    pub config: Config,
    /// What every upgrade must present; without a token, only loopback
    /// peers of the server's own uid are served.
    pub auth: Auth,
    /// How often each peer is pinged ([`PING_INTERVAL`] in the binary).
    pub ping_interval: Duration,
    /// Upgraded connections served at once; beyond, 503. Handshakes under
    /// way count against [`MAX_PENDING_HANDSHAKES`] instead.
    pub max_connections: usize,
    /// How long a detached session waits to be resumed ([`DEFAULT_SESSION_TTL`]).
    pub session_ttl: Duration,
    /// Detached sessions kept at once; beyond, the oldest ends
    /// ([`DEFAULT_MAX_DETACHED_SESSIONS`]).
    pub max_detached_sessions: usize,
}

impl Default for ListenOptions {
    fn default() -> ListenOptions {
        ListenOptions {
            config: Config::default(),
            auth: Auth::OwnerOnly,
            ping_interval: PING_INTERVAL,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            session_ttl: DEFAULT_SESSION_TTL,
            max_detached_sessions: DEFAULT_MAX_DETACHED_SESSIONS,
        }
    }
}

/// Serves WebSocket connections on `listener` until `shutdown` completes, then
/// kills every session's processes and returns.
pub async fn listen<S>(listener: TcpListener, options: ListenOptions, shutdown: S) -> io::Result<()>
where
    S: std::future::Future<Output = ()>,
{
    // A deep accept queue (the kernel caps it at net.core.somaxconn): a flood
    // of connections waits there instead of dropping the owner's SYN, whose
    // retransmission would cost it a second or more.
    // SAFETY: listen(2) again on a listening socket only changes its backlog.
    unsafe { libc::listen(listener.as_raw_fd(), ACCEPT_BACKLOG) };
    accept_loop(Socket::Tcp(listener), options, None, shutdown).await
}

/// The accept queue asked for (the kernel keeps at most `net.core.somaxconn`).
const ACCEPT_BACKLOG: libc::c_int = 65_535;

/// Serves newline-delimited JSON-RPC on a Unix socket (`--listen unix:PATH`):
/// sessions as over WebSocket; a peer of another uid is refused. With
/// `idle_exit`, returns once no connection or session has existed for that long.
pub async fn listen_unix<S>(
    listener: UnixSocket,
    options: ListenOptions,
    idle_exit: Option<Duration>,
    shutdown: S,
) -> io::Result<()>
where
    S: std::future::Future<Output = ()>,
{
    accept_loop(Socket::Unix(listener), options, idle_exit, shutdown).await
}

/// A listening socket of either kind.
enum Socket {
    Tcp(TcpListener),
    Unix(UnixSocket),
}

/// An accepted connection of either kind.
enum Accepted {
    Tcp(TcpStream, SocketAddr),
    Unix(tokio::net::UnixStream),
}

impl Socket {
    async fn accept(&self) -> io::Result<Accepted> {
        match self {
            Socket::Tcp(listener) => {
                listener.accept().await.map(|(stream, peer)| Accepted::Tcp(stream, peer))
            }
            Socket::Unix(socket) => {
                socket.listener.accept().await.map(|(stream, _)| Accepted::Unix(stream))
            }
        }
    }
}

async fn accept_loop<S>(
    socket: Socket,
    options: ListenOptions,
    idle_exit: Option<Duration>,
    shutdown: S,
) -> io::Result<()>
where
    S: std::future::Future<Output = ()>,
{
    // Resolved once: a bad root fails at start, and connections share the descriptors.
    let roots = Arc::new(Roots::new(&options.config.roots)?);
    let budget = MessageBudget::new(MESSAGE_BUDGET, options.config.max_message_bytes);
    // Every connection's retained output counts against one server-wide account.
    let retained = Arc::new(crate::account::Account::default());
    let sessions = Arc::new(Sessions::new(options.session_ttl, options.max_detached_sessions));
    let options = Arc::new(options);
    let (stop, stopped) = watch::channel(false);
    // Each connection's thread holds a sender; all gone means all ended.
    let (done, mut all_done) = mpsc::channel::<()>(1);
    // Threads of connections and of the sessions they left parked (for the
    // idle exit), and connections attached (for --max-connections).
    let active = Arc::new(watch::Sender::new(0usize));
    let attached = Arc::new(watch::Sender::new(0usize));
    let shared = Shared {
        options: options.clone(),
        roots,
        budget,
        retained,
        sessions,
        stopped,
        done: done.clone(),
        active: active.clone(),
        attached: attached.clone(),
    };
    let mut pending = Pending::new(MAX_PENDING_HANDSHAKES);
    let mut peers = matches!(socket, Socket::Tcp(_)).then(peer::PeerLookup::new);
    let mut active_changed = active.subscribe();
    let mut idle_since: Option<tokio::time::Instant> = None;
    tokio::pin!(shutdown);
    loop {
        let busy = *active_changed.borrow_and_update();
        idle_since = match (busy, idle_since) {
            (0, Some(since)) => Some(since),
            (0, None) => Some(tokio::time::Instant::now()),
            _ => None,
        };
        let idle_deadline = idle_exit.zip(idle_since).map(|(idle, since)| since + idle);
        tokio::select! {
            accepted = socket.accept() => match accepted {
                Ok(Accepted::Tcp(stream, peer)) => match admit_peer(peers.as_mut(), &stream, peer, &options.auth) {
                    // Refused here, before a byte is read: no task, no thread.
                    Err(refusal) => {
                        REFUSALS.log(&format!("{refusal} (peer {peer})"));
                        refuse(stream.as_fd(), handshake::answer(403, &refusal, "").as_bytes());
                    }
                    Ok(()) => {
                        let fd = stream.as_raw_fd();
                        pending.start(fd, upgrade(stream, peer, shared.clone()));
                    }
                },
                Ok(Accepted::Unix(stream)) => {
                    if *attached.borrow() >= options.max_connections {
                        tracing::info!("too many connections; refused one");
                        refuse(stream.as_fd(), unix::busy(options.max_connections).as_bytes());
                        continue;
                    }
                    let slot = ActiveGuard::new(&attached);
                    start_connection(Served::Unix(stream), shared.clone().context(slot));
                }
                Err(error) if out_of_resources(&error) => {
                    ACCEPT_FAILURES.log(&error);
                    // Stop accepting for a moment: the queue waits in the kernel.
                    tokio::select! {
                        () = tokio::time::sleep(ACCEPT_BACKOFF) => {}
                        () = &mut shutdown => break,
                    }
                }
                Err(error) => tracing::debug!(%error, "accepting a connection failed"),
            },
            Some(_) = pending.tasks.join_next(), if !pending.tasks.is_empty() => {}
            _ = active_changed.changed() => {}
            () = tokio::time::sleep_until(idle_deadline.unwrap_or_else(tokio::time::Instant::now)), if idle_deadline.is_some() => {
                tracing::info!(idle = ?idle_exit, "no connection or session for the idle time; exiting");
                break;
            }
            () = &mut shutdown => break,
        }
    }
    tracing::info!(threads = *active.borrow(), "shutting down every connection and session");
    pending.tasks.abort_all();
    drop(shared);
    let _ = stop.send(true);
    drop(done);
    if tokio::time::timeout(SHUTDOWN_GRACE, all_done.recv()).await.is_err() {
        tracing::warn!("connections did not end in time; leaving them");
    }
    Ok(())
}

/// Decides on a TCP peer before anything is read from it. A peer on this
/// machine (found by [`peer::PeerLookup`]) without a token configured must
/// run as the server's uid. A peer whose owner cannot be found is refused
/// when its address is this host's (loopback, or an address of one of its
/// interfaces: fail closed), and served with a token when it is another
/// host's. Sandboxes need no check here: one without network has no IP
/// socket, one with network has a namespace of its own, from which nothing
/// on this host (this listener included) is reachable.
fn admit_peer(
    peers: Option<&mut peer::PeerLookup>,
    stream: &TcpStream,
    peer: SocketAddr,
    auth: &Auth,
) -> Result<(), String> {
    let local = stream
        .local_addr()
        .map_err(|e| format!("connection refused: cannot read the connection's address ({e})"))?;
    let owner = euid();
    let found = match peers {
        Some(peers) => peers.lookup(local, peer),
        None => Err(io::Error::other("no peer lookup")),
    };
    match found {
        Ok(found) if !auth.needs_token() && found.uid != owner => Err(format!(
            "connection refused: the peer runs as uid {}, and this server serves only uid {owner} without a token",
            found.uid
        )),
        Ok(_) => Ok(()),
        Err(error) if peer.ip() == local.ip() || peer::is_this_host(peer.ip()) => Err(format!(
            "connection refused: cannot tell which user the peer runs as ({error})"
        )),
        Err(_) if auth.needs_token() => Ok(()),
        Err(_) => Err("connection refused: a peer off loopback needs a token".to_owned()),
    }
}

/// One connection from accept to upgrade, on the listener's runtime: the
/// handshake, bounded by [`HANDSHAKE_TIMEOUT`]. A connection slot is taken
/// only for an upgrade; the thread starts after it.
async fn upgrade(mut stream: TcpStream, peer: SocketAddr, shared: Shared) {
    let _ = stream.set_nodelay(true);
    let mut slot = None;
    let (attached, max) = (shared.attached.clone(), shared.options.max_connections);
    let admit = || {
        if *attached.borrow() >= max {
            tracing::info!("too many connections; refused one");
            return false;
        }
        slot = Some(ActiveGuard::new(&attached));
        true
    };
    let auth = shared.options.auth.clone();
    let handshake = handshake::handshake(&mut stream, &auth, admit);
    let (leftover, request_id) = match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
        Ok(Ok(Outcome::Upgraded { leftover, request_id })) => (leftover, request_id),
        Ok(Ok(Outcome::Answered { status, request_id })) => {
            tracing::info!(%peer, status, ?request_id, "answered a request without upgrading");
            return;
        }
        Ok(Ok(Outcome::Gone)) => return,
        Ok(Err(error)) => {
            tracing::info!(%peer, %error, "the upgrade failed");
            return;
        }
        Err(_) => {
            tracing::info!(%peer, "no upgrade request within {HANDSHAKE_TIMEOUT:?}; closing");
            return;
        }
    };
    let Some(slot) = slot else { return };
    let request_id = request_id.unwrap_or_default();
    tracing::info!(%peer, request_id, "connection opened");
    let served = Served::WebSocket { stream, peer, leftover, request_id };
    start_connection(served, shared.context(slot));
}

/// Whether an accept failed for want of descriptors or memory (it would fail again at once).
fn out_of_resources(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM))
}

/// A failure that repeats under load (out of descriptors), logged once per
/// [`ACCEPT_LOG_INTERVAL`] with how often it happened since.
pub(crate) struct Throttled {
    what: &'static str,
    count: AtomicU64,
    logged: Mutex<Option<Instant>>,
}

impl Throttled {
    const fn new(what: &'static str) -> Throttled {
        Throttled { what, count: AtomicU64::new(0), logged: Mutex::new(None) }
    }

    pub(crate) fn log(&self, error: &dyn std::fmt::Display) {
        let count = self.count.fetch_add(1, Ordering::Relaxed) + 1;
        let mut logged = self.logged.lock().unwrap_or_else(|p| p.into_inner());
        if logged.is_none_or(|at| at.elapsed() >= ACCEPT_LOG_INTERVAL) {
            tracing::warn!(%error, failures = count, "{}", self.what);
            *logged = Some(Instant::now());
            self.count.store(0, Ordering::Relaxed);
        }
    }
}

/// Accepts that failed for want of descriptors or memory.
static ACCEPT_FAILURES: Throttled = Throttled::new("cannot accept connections; pausing accepts");
/// Connections refused because their thread or runtime could not start.
static START_FAILURES: Throttled =
    Throttled::new("cannot start a connection's thread or runtime; closed it");
/// Peers refused before their upgrade (another uid, a lookup that failed).
static REFUSALS: Throttled = Throttled::new("refused a connection before its upgrade");
/// Handshakes evicted by newer ones.
pub(crate) static EVICTIONS: Throttled = Throttled::new("evicted a handshake under way");

/// Counts a connection's thread as active until dropped.
pub(crate) struct ActiveGuard(Arc<watch::Sender<usize>>);

impl ActiveGuard {
    fn new(active: &Arc<watch::Sender<usize>>) -> ActiveGuard {
        active.send_modify(|count| *count += 1);
        ActiveGuard(active.clone())
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.send_modify(|count| *count -= 1);
    }
}

/// What every connection shares, cloned into each.
#[derive(Clone)]
struct Shared {
    options: Arc<ListenOptions>,
    roots: Arc<Roots>,
    budget: MessageBudget,
    retained: Arc<crate::account::Account>,
    sessions: Arc<Sessions>,
    stopped: watch::Receiver<bool>,
    done: mpsc::Sender<()>,
    active: Arc<watch::Sender<usize>>,
    attached: Arc<watch::Sender<usize>>,
}

impl Shared {
    /// The context of a connection that holds `slot`.
    fn context(self, slot: ActiveGuard) -> Context {
        Context { active: ActiveGuard::new(&self.active), shared: self, slot }
    }
}

/// What a connection's thread takes along: what every connection shares
/// (its `done` sender held until the thread ends), and its counts.
struct Context {
    shared: Shared,
    /// Counts the thread (for the idle exit).
    active: ActiveGuard,
    /// Counts the connection while attached.
    slot: ActiveGuard,
}

/// A connection ready for its thread.
enum Served {
    /// Upgraded, with the bytes read after the upgrade request.
    WebSocket { stream: TcpStream, peer: SocketAddr, leftover: Vec<u8>, request_id: String },
    /// A daemon connection (its peer is checked on the thread).
    Unix(tokio::net::UnixStream),
}

/// Starts the connection's thread (which closes the connection if its runtime cannot start).
fn start_connection(served: Served, context: Context) {
    let thread = std::thread::Builder::new().name("exec-server-conn".into()).spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .max_blocking_threads(8)
            .enable_all()
            .build();
        let runtime = match runtime {
            Ok(runtime) => runtime,
            Err(error) => {
                tracing::debug!(%error, "cannot start a connection's runtime");
                START_FAILURES.log(&error);
                return;
            }
        };
        // A task, not the `block_on` future itself: wakes between the
        // connection's tasks and its loop then skip a look at the reactor.
        // A panic in it is logged and ends this connection only.
        runtime.block_on(async move {
            if let Err(error) = tokio::spawn(serve_connection(served, context)).await {
                tracing::warn!(%error, "a connection's task failed");
            }
        });
    });
    // Detached: it ends with its connection (the listener waits through `_done`).
    if let Err(error) = thread {
        tracing::debug!(%error, "cannot start a connection's thread; closed it");
        START_FAILURES.log(&error);
    }
}

/// Serves one accepted connection on its thread's runtime.
async fn serve_connection(served: Served, context: Context) {
    // Registered with this thread's reactor, not the listener's.
    let served = match served {
        Served::WebSocket { stream, peer, leftover, request_id } => {
            let span = tracing::info_span!("connection", %peer, request_id);
            match stream.into_std().and_then(TcpStream::from_std) {
                Ok(stream) => {
                    use tracing::Instrument;
                    serve_websocket(stream, leftover, context).instrument(span).await;
                    Ok(())
                }
                Err(error) => Err(error),
            }
        }
        Served::Unix(stream) => {
            match stream.into_std().and_then(tokio::net::UnixStream::from_std) {
                Ok(stream) => {
                    unix::connection(stream, context).await;
                    Ok(())
                }
                Err(error) => Err(error),
            }
        }
    };
    if let Err(error) = served {
        tracing::warn!(%error, "cannot serve a connection");
    }
}

/// Answers `answer` on a connection that will not be served, and lets it go
/// gently: what the peer already sent is read first (a socket closed with
/// unread input resets the connection, which can discard the answer before
/// the peer reads it), and the answer is followed by end of file. Never
/// waits: the socket is non-blocking.
fn refuse(socket: BorrowedFd<'_>, answer: &[u8]) {
    let fd = socket.as_raw_fd();
    let drain = || {
        let mut scratch = [0u8; 4096];
        for _ in 0..16 {
            // SAFETY: read(2) into a buffer of the given length.
            let read = unsafe { libc::read(fd, scratch.as_mut_ptr().cast(), scratch.len()) };
            if read <= 0 {
                break;
            }
        }
    };
    drain();
    // SAFETY: send(2) of a buffer of the given length, then shutdown(2), on a
    // socket this function borrows.
    unsafe {
        libc::send(fd, answer.as_ptr().cast(), answer.len(), libc::MSG_NOSIGNAL);
        libc::shutdown(fd, libc::SHUT_WR);
    }
    drain();
}

/// Serves an upgraded WebSocket connection (on its own thread's runtime).
async fn serve_websocket(stream: TcpStream, leftover: Vec<u8>, context: Context) {
    let Context { shared, active: _active, slot } = context;
    let Shared { options, roots, budget, retained, sessions, stopped, done: _done, .. } = shared;
    ws::drop_dead_peers(&stream);
    let limit = options.config.max_message_bytes;
    let channels = ws::bridge(stream, leftover, limit, budget, options.ping_interval);
    let config = Config { on_eof: OnEof::Kill, ..options.config.clone() };
    serve_resumable(channels, roots, &config, retained, &sessions, slot, stopping(stopped)).await;
    tracing::info!("connection's thread done");
}

/// Completes when the listener stops.
async fn stopping(mut stopped: watch::Receiver<bool>) {
    let _ = stopped.wait_for(|stop| *stop).await;
}
