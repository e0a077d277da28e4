//! The client half of the protocol: typed calls over any byte stream, process handles, raw events.
//!
//! One reader task routes responses to their callers and notifications to
//! [`Process`] handles and [`EventStream`]s; one writer task owns the output.
//! When the transport closes, every pending call fails with [`Error::Closed`].

mod decide;
mod events;
mod fast_line;
mod forward;
mod ports;
mod process;
mod resume;
mod routing;
mod tunnel;
mod watching;
mod wire;
mod ws;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

pub use self::decide::NetworkDecider;
pub use self::events::{Event, EventStream};
pub use self::events::{ExitStatus, OutputChunk};
pub use self::forward::Forward;
pub use self::ports::PortWatch;
pub use self::process::Process;
pub(crate) use self::resume::{Connector, Transport};
use self::routing::{Route, Shared};
pub use self::tunnel::Tunnel;
pub use self::watching::Watch;
use self::wire::{handshake, line_round_trip, read_loop, round_trip, sends_closed};
use crate::dialect::{requests, Dialect};
use crate::error::Error;
use crate::protocol::*;
#[cfg(feature = "server")]
use crate::server::{self, Config};
use crate::transport;

/// How long [`Client::connect`] waits for the handshake by default.
pub(crate) const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Options of [`Client::connect_with`].
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Sent as `clientName` in `initialize`.
    pub client_name: String,
    /// Deadline of the handshake (default 10 s).
    pub handshake_timeout: Duration,
    /// Sent as `Authorization: Bearer TOKEN` by [`Client::connect_ws`].
    pub bearer_token: Option<String>,
    /// How long a client whose connection can be opened again (WebSocket, a
    /// persistent launcher) keeps trying to resume its session after a drop
    /// (default 25 s, inside the server's 30 s ttl; zero: never).
    pub resume_within: Duration,
    /// How requests are written: [`Dialect::V0`] (default), or
    /// [`Dialect::Today`] to drive a server that speaks only today's
    /// upstream dialect (paths as file URIs; no `protocolVersion` needed).
    pub dialect: Dialect,
    /// Answers `network/decide`: sandboxes whose network policy has `ask`
    /// put hosts no rule names to it (the client then says
    /// `networkDecisions: true` in `initialize`).
    pub network_decider: Option<NetworkDecider>,
}

impl Default for ClientOptions {
    fn default() -> ClientOptions {
        ClientOptions {
            client_name: "exec-server-client".to_owned(),
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            bearer_token: None,
            resume_within: resume::DEFAULT_RESUME_WITHIN,
            dialect: Dialect::V0,
            network_decider: None,
        }
    }
}

/// A connection to an exec-server. Cheap to clone; the connection closes when
/// the last clone (and the last [`Process`] handle) is dropped, or on [`Client::close`].
///
/// ```
/// # #[cfg(not(feature = "server"))] fn main() {} // Client::in_process needs the server half.
/// # #[cfg(feature = "server")]
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), exec_server::Error> {
/// use exec_server::server::Config;
/// use exec_server::{Client, StartParams};
///
/// let client = Client::in_process(Config::default()).await?;
/// let mut process = client.start(StartParams::new("hello", ["echo", "hi"], "/tmp")).await?;
/// let (output, status) = process.output_to_end().await?;
/// assert_eq!((output.as_slice(), status.code), (&b"hi\n"[..], 0));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    shared: Arc<Shared>,
    outgoing: Mutex<Option<mpsc::Sender<String>>>,
    info: InitializeResult,
    /// The reader task, or for a resumable client the supervisor that owns
    /// each connection's reader and writer and resumes the session.
    reader: JoinHandle<()>,
    /// Not aborted on drop: it ends by itself once `outgoing` is dropped, after
    /// flushing what is queued and closing the output (None: the supervisor's).
    _writer: Option<JoinHandle<std::io::Result<()>>>,
    server: Option<JoinHandle<std::io::Result<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.reader.abort();
        if let Some(server) = &self.server {
            server.abort();
        }
    }
}

/// The variable upstream Codex reads the bearer token for a remote
/// exec-server from, used when no token is configured.
pub const CONNECTION_TOKEN_ENV: &str = "CODEX_EXEC_SERVER_CONNECTION_TOKEN";

/// The token in [`CONNECTION_TOKEN_ENV`], when set; an error names the
/// variable when its value cannot be a bearer token.
fn connection_token_from_env() -> Result<Option<String>, Error> {
    let Some(value) = std::env::var_os(CONNECTION_TOKEN_ENV) else { return Ok(None) };
    let invalid = |why: &str| {
        Error::io(
            format!("{CONNECTION_TOKEN_ENV} is invalid"),
            std::io::Error::new(std::io::ErrorKind::InvalidInput, why.to_owned()),
        )
    };
    let token = value.into_string().map_err(|_| invalid("it is not UTF-8"))?;
    if token.is_empty() {
        return Err(invalid("it is empty"));
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(invalid("a bearer token is visible ASCII without spaces"));
    }
    Ok(Some(token))
}

impl Client {
    /// Connects over `reader`/`writer` (a child's stdout/stdin, a duplex pipe)
    /// and performs the handshake with the default options.
    pub async fn connect<R, W>(reader: R, writer: W) -> Result<Client, Error>
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        Client::connect_with(reader, writer, ClientOptions::default()).await
    }

    /// Like [`Client::connect`] with a client name and handshake deadline.
    pub async fn connect_with<R, W>(
        reader: R,
        writer: W,
        options: ClientOptions,
    ) -> Result<Client, Error>
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        Client::start_connection(reader, writer, options, None).await
    }

    /// Connects to a server listening on WebSocket (`exec-server --listen
    /// ws://IP:PORT`) and performs the handshake; `options.bearer_token` is
    /// sent when the server requires one. The same [`Client`] as over stdio.
    ///
    /// When the connection drops, the client reconnects and resumes its
    /// session for up to `options.resume_within`: in-flight reads and writes
    /// with a writeId are sent again, [`Process`] handles get what they
    /// missed, and a session that cannot be resumed fails everything with
    /// [`Error::SessionLost`].
    pub async fn connect_ws(url: &str, options: ClientOptions) -> Result<Client, Error> {
        let url = url.to_owned();
        let token = match options.bearer_token.clone() {
            Some(token) => Some(token),
            None => connection_token_from_env()?,
        };
        let connector: resume::Connector = Arc::new(move || {
            let (url, token) = (url.clone(), token.clone());
            Box::pin(async move {
                let (pipe, bridge) = ws::open(&url, token.as_deref()).await?;
                let (read, write) = tokio::io::split(pipe);
                Ok(resume::Transport {
                    reader: Box::new(read),
                    writer: Box::new(write),
                    keep: Some(bridge),
                })
            })
        });
        Client::connect_resumable(connector, options).await
    }

    /// Connects through `connector`, which opens a new connection to the same
    /// server each time it is called. When a connection drops, the client
    /// calls it again (with backoff) for up to `options.resume_within` and
    /// resumes its session: in-flight reads and writes with a writeId are sent
    /// again, and [`Process`] handles get what they missed, in order. A
    /// session that cannot be resumed fails every call and handle with
    /// [`Error::SessionLost`].
    pub(crate) async fn connect_resumable(
        connector: resume::Connector,
        options: ClientOptions,
    ) -> Result<Client, Error> {
        let deadline = options.handshake_timeout;
        match tokio::time::timeout(deadline, resume::connect(connector, options)).await {
            Ok(Ok((shared, outgoing, info, supervisor))) => {
                let inner = Inner {
                    shared,
                    outgoing: Mutex::new(Some(outgoing)),
                    info,
                    reader: supervisor,
                    _writer: None,
                    server: None,
                };
                Ok(Client { inner: Arc::new(inner) })
            }
            Ok(Err(error)) => Err(error),
            Err(_) => Err(Error::Timeout { what: "the initialize response", timeout: deadline }),
        }
    }

    /// A server running inside this process (`server::run` on a duplex pipe),
    /// owned by the client: dropping the client stops it and kills its processes.
    /// (Feature `server`.)
    #[cfg(feature = "server")]
    pub async fn in_process(config: Config) -> Result<Client, Error> {
        Client::in_process_counted(config, Arc::default()).await
    }

    /// [`Client::in_process`] whose server counts its held bytes in `account`.
    #[cfg(feature = "server")]
    pub(crate) async fn in_process_counted(
        config: Config,
        account: Arc<crate::account::Account>,
    ) -> Result<Client, Error> {
        let (client_side, server_side) = tokio::io::duplex(1 << 20);
        let (server_read, server_write) = tokio::io::split(server_side);
        let pending = std::future::pending();
        let server =
            tokio::spawn(server::run_counted(server_read, server_write, config, account, pending));
        let (read, write) = tokio::io::split(client_side);
        Client::start_connection(read, write, ClientOptions::default(), Some(server)).await
    }

    async fn start_connection<R, W>(
        reader: R,
        writer: W,
        options: ClientOptions,
        server: Option<JoinHandle<std::io::Result<()>>>,
    ) -> Result<Client, Error>
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let shared = Arc::new(Shared::default());
        shared.set_dialect(options.dialect);
        let (outgoing, writer) = transport::spawn_writer(writer);
        let reader = tokio::spawn(read_loop(reader, shared.clone()));
        let mut params = InitializeParams::new(options.client_name);
        if let Some(decider) = options.network_decider {
            shared.set_decider(decider, outgoing.clone());
            params = params.network_decisions();
        }
        let deadline = options.handshake_timeout;
        let info = match tokio::time::timeout(deadline, handshake(&shared, &outgoing, params)).await
        {
            Ok(Ok(info)) => info,
            Ok(Err(error)) => {
                reader.abort();
                return Err(error);
            }
            Err(_) => {
                reader.abort();
                return Err(Error::Timeout { what: "the initialize response", timeout: deadline });
            }
        };
        shared.set_sends_closed(sends_closed(&info));
        let initialized = encode_notification::<Initialized>(&Empty {}, 64);
        if outgoing.send(initialized).await.is_err() {
            reader.abort();
            return Err(Error::Closed);
        }
        let inner = Inner {
            shared,
            outgoing: Mutex::new(Some(outgoing)),
            info,
            reader,
            _writer: Some(writer),
            server,
        };
        Ok(Client { inner: Arc::new(inner) })
    }

    /// The server's `initialize` result.
    pub fn server_info(&self) -> &InitializeResult {
        &self.inner.info
    }

    /// The server's capabilities (empty for a Part A-only server).
    pub fn capabilities(&self) -> Capabilities {
        self.inner.info.capabilities.clone().unwrap_or_default()
    }

    /// Calls method `M` and decodes its result.
    pub async fn call<M: Method>(&self, params: &M::Params) -> Result<M::Result, Error> {
        let id = self.inner.shared.next_id();
        let outgoing = self.outgoing()?;
        round_trip::<M>(&self.inner.shared, &outgoing, id, params).await
    }

    fn outgoing(&self) -> Result<mpsc::Sender<String>, Error> {
        lock(&self.inner.outgoing).clone().ok_or_else(|| self.inner.shared.closed_error())
    }

    /// `fs/writeFile` of `data` with `params` (their `dataBase64` ignored): the
    /// bytes are encoded straight into the request line, with no base64
    /// string of their own.
    pub(crate) async fn write_bytes(
        &self,
        params: &WriteFileParams,
        data: &[u8],
    ) -> Result<Empty, Error> {
        if self.inner.shared.dialect() == Dialect::Today {
            let mut params = params.clone();
            params.data_base64 =
                base64::Engine::encode(&base64::engine::general_purpose::STANDARD, data);
            return self.call::<WriteFile>(&params).await;
        }
        let id = self.inner.shared.next_id();
        let line = encode_write_file_bytes(&id, params, data)
            .map_err(|e| Error::Encode(format!("{} params: {e}", WriteFile::NAME)))?;
        let outgoing = self.outgoing()?;
        line_round_trip::<WriteFile>(&self.inner.shared, &outgoing, id, line).await
    }

    /// Starts a process and returns its handle. The handle is registered before
    /// the request is sent, so it sees every notification of the process.
    pub async fn start(&self, params: StartParams) -> Result<Process, Error> {
        let (route, output, status) = Route::new();
        let key = self.inner.shared.add_route(&params.process_id, route)?;
        match self.call::<ProcessStart>(&params).await {
            Ok(_) => Ok(Process::new(self.clone(), params.process_id, key, output, status)),
            Err(error) => {
                self.inner.shared.remove_route(&params.process_id, key);
                Err(error)
            }
        }
    }

    /// Every notification from now on, typed (bounded: a slow reader is told it lagged).
    pub fn events(&self) -> EventStream {
        EventStream { receiver: self.inner.shared.subscribe() }
    }

    /// Ends the session now (`session/end`): the server kills every process
    /// it started for this client, with their descendants, forgets the
    /// session and closes the connection, which is not resumed. Dropping a
    /// resumable client (WebSocket, a persistent launch) only detaches its
    /// session, which the server ends after its ttl.
    pub async fn end_session(&self) -> Result<(), Error> {
        self.inner.shared.set_ending(true);
        let ended = self.call::<SessionEnd>(&Empty {}).await;
        if ended.is_err() {
            // Not ended (an older server, a lost connection): resuming stays possible.
            self.inner.shared.set_ending(false);
            return ended.map(|_: Empty| ());
        }
        self.close();
        Ok(())
    }

    /// Closes the output; the server sees end of input and shuts the connection down.
    pub fn close(&self) {
        lock(&self.inner.outgoing).take();
    }

    /// Completes once the connection is closed (by either side).
    pub async fn closed(&self) {
        let mut closed = self.inner.shared.closed_watch();
        let _ = closed.wait_for(|closed| *closed).await;
    }

    /// Whether the connection is closed.
    pub fn is_closed(&self) -> bool {
        *self.inner.shared.closed_watch().borrow()
    }

    /// Sends request `M` now, in order with the other sends, and returns
    /// its reply to await later (pipelined calls).
    pub(crate) async fn send_call<M: Method>(
        &self,
        params: &M::Params,
    ) -> Result<PendingReply, Error> {
        let shared = &self.inner.shared;
        let id = shared.next_id();
        let line = encode_request::<M>(&id, params)
            .map_err(|e| Error::Encode(format!("{} params: {e}", M::NAME)))?;
        let line = requests::request_line(shared.dialect(), line);
        let (tx, rx) = oneshot::channel();
        shared.add_pending(id.clone(), tx)?;
        if self.outgoing()?.send(line).await.is_err() {
            shared.remove_pending(&id);
            return Err(shared.closed_error());
        }
        Ok(rx)
    }

    /// Sends notification `N` without waiting (a full queue: from a small
    /// task of its own); a closed connection drops it.
    pub(crate) fn notify<N: NotificationMethod>(&self, params: &N::Params) {
        let line = encode_notification::<N>(params, 96);
        let Some(outgoing) = lock(&self.inner.outgoing).clone() else { return };
        if let Err(mpsc::error::TrySendError::Full(line)) = outgoing.try_send(line) {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move { outgoing.send(line).await });
            }
        }
    }

    /// Sends a request whose answer nobody waits for (used from `Drop`, which
    /// cannot await). When the queue is full the send waits in a small task of
    /// its own on the current runtime; when it cannot be delivered at all (the
    /// connection is gone, or no runtime), that is logged.
    pub(crate) fn send_and_forget<M: Method>(&self, params: &M::Params) {
        let id = self.inner.shared.next_id();
        let Ok(line) = encode_request::<M>(&id, params) else { return };
        let line = requests::request_line(self.inner.shared.dialect(), line);
        let Some(outgoing) = lock(&self.inner.outgoing).clone() else {
            tracing::warn!(method = M::NAME, "cannot send: the connection is closed");
            return;
        };
        let shared = self.inner.shared.clone();
        shared.ignore_response(id.clone());
        let line = match outgoing.try_send(line) {
            Ok(()) => return,
            Err(mpsc::error::TrySendError::Full(line)) => line,
            Err(mpsc::error::TrySendError::Closed(_)) => {
                shared.unignore_response(&id);
                tracing::warn!(method = M::NAME, "cannot send: the connection is closed");
                return;
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    if outgoing.send(line).await.is_err() {
                        shared.unignore_response(&id);
                        tracing::warn!(method = M::NAME, "cannot send: the connection closed");
                    }
                });
            }
            Err(_) => {
                shared.unignore_response(&id);
                tracing::warn!(
                    method = M::NAME,
                    "cannot send: the queue is full and no runtime runs"
                );
            }
        }
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.inner.shared
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("closed", &self.is_closed()).finish()
    }
}

macro_rules! typed_calls {
    ($($(#[$doc:meta])* $name:ident: $method:ty;)*) => {
        impl Client {
            $(
                $(#[$doc])*
                pub async fn $name(
                    &self,
                    params: <$method as Method>::Params,
                ) -> Result<<$method as Method>::Result, Error> {
                    self.call::<$method>(&params).await
                }
            )*
        }
    };
}

typed_calls! {
    /// `process/read`.
    read: ProcessRead;
    /// `process/write`.
    write: ProcessWrite;
    /// `process/terminate`.
    terminate: ProcessTerminate;
    /// `process/signal`.
    signal: ProcessSignal;
    /// `process/resize`.
    resize: ProcessResize;
    /// `process/list`.
    list: ProcessList;
    /// `fs/readFile`.
    read_file: ReadFile;
    /// `fs/writeFile`.
    write_file: WriteFile;
    /// `fs/createDirectory`.
    create_directory: CreateDirectory;
    /// `fs/getMetadata`.
    get_metadata: GetMetadata;
    /// `fs/readDirectory`.
    read_directory: ReadDirectory;
    /// `fs/remove`.
    remove: Remove;
    /// `fs/copy`.
    copy: Copy;
    /// `fs/rename`.
    rename: Rename;
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Watches whether a connection is closed.
pub(crate) type ClosedWatch = watch::Receiver<bool>;

/// The reply to a call sent with [`Client::send_call`].
pub(crate) type PendingReply = oneshot::Receiver<routing::Reply>;
