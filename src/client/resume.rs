//! A client that outlives its connections: when one drops, it opens another
//! and resumes the session (PROTOCOL.md, Sessions).
//!
//! Callers write to one queue for the client's whole life; a supervisor task
//! moves its lines to the current connection. When the connection ends
//! without the client having closed it, the supervisor fails the calls that
//! cannot be sent twice, opens a new connection with backoff until
//! `resume_within` has passed, sends `initialize {resumeSessionId}`, then
//! sends again the calls that can (reads, writes with a writeId), and reads
//! each process with a handle from the last seq it saw, so the handle gets
//! what it missed, its exit and its close. A session the server no longer
//! knows, or a window that closes, fails every call and handle with
//! [`Error::SessionLost`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use super::routing::Shared;
use super::wire::{handshake, read_lines, round_trip, sends_closed};
use crate::error::Error;
use crate::protocol::*;
use crate::transport;

/// Default [`super::ClientOptions::resume_within`]: inside the server's 30 s ttl.
pub(crate) const DEFAULT_RESUME_WITHIN: Duration = Duration::from_secs(25);
/// The first pause between attempts; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(50);
const MAX_PAUSE: Duration = Duration::from_secs(1);
/// How long one attempt (connect and handshake) may take.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);

/// One connection's byte streams, and a task that must live as long (a WebSocket bridge).
pub(crate) struct Transport {
    pub(crate) reader: Box<dyn AsyncRead + Send + Unpin>,
    pub(crate) writer: Box<dyn AsyncWrite + Send + Unpin>,
    pub(crate) keep: Option<JoinHandle<std::io::Result<()>>>,
}

/// Opens a new connection to the same server.
pub(crate) type Connector =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<Transport, Error>> + Send>> + Send + Sync>;

/// One connection as the supervisor holds it. Dropped, its reader and its
/// WebSocket bridge are aborted (a hung server cannot keep them), while the
/// writer ends by itself once `lines` is gone, closing the output.
struct Connection {
    lines: mpsc::Sender<String>,
    reader: Aborted<()>,
    _writer: JoinHandle<std::io::Result<()>>,
    _keep: Option<Aborted<std::io::Result<()>>>,
}

/// A task aborted when dropped.
struct Aborted<T>(JoinHandle<T>);

impl<T> Drop for Aborted<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Opens the first connection and performs the handshake; returns the shared
/// state, the callers' queue, the server's answer and the supervisor.
pub(super) async fn connect(
    connector: Connector,
    options: super::ClientOptions,
) -> Result<(Arc<Shared>, mpsc::Sender<String>, InitializeResult, JoinHandle<()>), Error> {
    let shared = Arc::new(Shared::default());
    shared.set_dialect(options.dialect);
    let mut params = InitializeParams::new(options.client_name.clone()).resumable();
    let (outgoing, queue) = mpsc::channel(4);
    if let Some(decider) = options.network_decider {
        shared.set_decider(decider, outgoing.clone());
        params = params.network_decisions();
    }
    let (connection, info) = open(&connector, &shared, params).await?;
    shared.set_sends_closed(sends_closed(&info));
    let supervisor = Supervisor {
        shared: shared.clone(),
        queue,
        connector,
        session_id: info.session_id.clone(),
        client_name: options.client_name,
        within: options.resume_within,
        catching: JoinSet::new(),
    };
    let task = tokio::spawn(supervisor.run(connection));
    Ok((shared, outgoing, info, task))
}

/// Opens a connection and sends `initialize` (then `initialized`) on it.
async fn open(
    connector: &Connector,
    shared: &Arc<Shared>,
    params: InitializeParams,
) -> Result<(Connection, InitializeResult), Error> {
    let Transport { reader, writer, keep } = connector().await?;
    let (lines, writer) = transport::spawn_writer(writer);
    let reading = shared.clone();
    let reader = tokio::spawn(async move { read_lines(reader, &reading).await });
    let connection =
        Connection { lines, reader: Aborted(reader), _writer: writer, _keep: keep.map(Aborted) };
    let info = handshake(shared, &connection.lines, params).await?;
    let initialized = encode_notification::<Initialized>(&Empty {}, 64);
    connection.lines.send(initialized).await.map_err(|_| Error::Closed)?;
    Ok((connection, info))
}

struct Supervisor {
    shared: Arc<Shared>,
    /// What callers send, for every connection in turn.
    queue: mpsc::Receiver<String>,
    connector: Connector,
    /// None: an older server without sessions, which cannot be resumed.
    session_id: Option<String>,
    client_name: String,
    within: Duration,
    /// The reads that catch handles up after a resume (each ends with its reply).
    catching: JoinSet<()>,
}

impl Supervisor {
    async fn run(mut self, mut connection: Connection) {
        loop {
            if !self.forward(&mut connection).await {
                // The client closed: the server sees EOF and ends the session.
                let Connection { lines, mut reader, .. } = connection;
                drop(lines);
                self.catching.abort_all();
                let _ = tokio::time::timeout(Duration::from_secs(2), &mut reader.0).await;
                self.shared.close();
                return;
            }
            let resumable = !self.within.is_zero() && !self.shared.is_ending();
            let Some(session) = self.session_id.clone().filter(|_| resumable) else {
                self.shared.close();
                return;
            };
            tracing::info!(%session, "connection lost; resuming the session");
            let retry = self.shared.connection_lost();
            match self.resume(&session).await {
                Ok(resumed) => {
                    connection = resumed;
                    for line in retry {
                        if connection.lines.send(line).await.is_err() {
                            break;
                        }
                    }
                    self.catch_up(&connection);
                }
                Err(reason) => {
                    tracing::warn!(%session, %reason, "cannot resume the session");
                    self.shared.close_lost(reason);
                    return;
                }
            }
        }
    }

    /// Moves queued lines to `connection` until it ends (true) or the client closes (false).
    async fn forward(&mut self, connection: &mut Connection) -> bool {
        loop {
            tokio::select! {
                line = self.queue.recv() => match line {
                    Some(line) => {
                        if connection.lines.send(line).await.is_err() {
                            return true;
                        }
                    }
                    None => return false,
                },
                _ = &mut connection.reader.0 => return true,
            }
        }
    }

    /// Opens connections until one resumes `session`, or says why none can.
    async fn resume(&self, session: &str) -> Result<Connection, String> {
        let started = Instant::now();
        let deadline = started + self.within;
        let mut pause = FIRST_PAUSE;
        let mut last = String::from("no attempt finished");
        while Instant::now() < deadline {
            // This client's old connection is dead, whatever the server thinks.
            let params = InitializeParams::new(self.client_name.clone())
                .resume(session)
                .takeover()
                .resumable();
            let attempt = open(&self.connector, &self.shared, params);
            match tokio::time::timeout(ATTEMPT_TIMEOUT, attempt).await {
                Ok(Ok((connection, info))) => {
                    if info.session_id.as_deref() != Some(session) {
                        return Err(format!(
                            "the server answered the resume of session {session} with session {:?}",
                            info.session_id
                        ));
                    }
                    tracing::info!(%session, after = ?started.elapsed(), "session resumed");
                    return Ok(connection);
                }
                // Unknown: expired, or the server restarted. Nothing to wait for.
                Ok(Err(Error::Rpc(error))) if error.code == codes::INVALID_REQUEST => {
                    return Err(format!("session {session} cannot be resumed: {}", error.message));
                }
                // Still attached (the server has not noticed the drop yet), or no server yet.
                Ok(Err(error)) => last = error.to_string(),
                Err(_) => last = format!("an attempt took over {ATTEMPT_TIMEOUT:?}"),
            }
            tokio::time::sleep(pause.min(deadline.saturating_duration_since(Instant::now()))).await;
            pause = (pause * 2).min(MAX_PAUSE);
        }
        Err(format!("session {session} was not resumed within {:?}: {last}", self.within))
    }

    /// Reads every process with a handle from the last seq it saw: what the
    /// drop swallowed (output, exit, close) reaches the handles.
    fn catch_up(&mut self, connection: &Connection) {
        // Those of an earlier resume are moot: their connection is gone.
        self.catching.abort_all();
        for (process_id, last_seq) in self.shared.routed() {
            let shared = self.shared.clone();
            let lines = connection.lines.clone();
            // Ends with its reply, or when the connection goes (its pending call fails).
            self.catching.spawn(async move {
                let id = shared.next_id();
                let params = ReadParams::new(process_id.clone()).after_seq(last_seq);
                match round_trip::<ProcessRead>(&shared, &lines, id, &params).await {
                    Ok(read) => shared.caught_up(&process_id, read),
                    Err(error) => tracing::debug!(%error, %process_id, "catching up failed"),
                }
            });
        }
    }
}
