//! The server loop: one task owns the connection state and only routes.
//!
//! It reacts to input messages, process events, finished fs calls and sweeps,
//! room in the writer's queue, timers and the shutdown signal, and never awaits
//! anything another party can hold up: fs calls run on blocking threads
//! (`fs_calls`), `/proc` sweeps are blocking tasks of the table, and replies
//! wait in a bounded `Outbox` instead of in a `send().await`. While the
//! outbox is full the loop stops taking input and process events, which is what
//! pushes back on a client that does not read, down to the children's pipes.

mod dispatch;
mod fs_calls;
mod outbox;

pub use crate::listen::{
    listen, ListenOptions, DEFAULT_MAX_CONNECTIONS, HANDSHAKE_TIMEOUT, MESSAGE_BUDGET,
    PING_INTERVAL,
};

use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, Instant};

use self::outbox::Outbox;
use std::sync::Arc;

use crate::fs::Roots;
use crate::process::{Limits, ProcessTable, CONNECTION_RETAINED, RETAINED_BYTES};
use crate::transport::{self, Incoming};

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
    /// The `exec-server` binary that applies sandbox policies in the child
    /// (None: this process's own executable, right for the binary itself; an
    /// embedder or a test names the binary).
    pub sandbox_helper: Option<PathBuf>,
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
            sandbox_helper: None,
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
    let roots = Arc::new(Roots::new(&config.roots)?);
    let (incoming, reader, input_ended) = transport::spawn_reader(
        BufReader::with_capacity(transport::INPUT_BUFFER, reader),
        config.max_message_bytes,
    );
    let (outgoing, writer) = transport::spawn_writer(writer);
    let channels = Channels { incoming, outgoing, reader, writer, input_ended };
    serve(channels, roots, &config, Arc::default(), shutdown).await
}

/// One connection's transport, as the loop sees it: decoded messages in,
/// encoded lines out, and the two tasks that own the real stream.
pub(crate) struct Channels {
    pub(crate) incoming: mpsc::Receiver<Incoming>,
    pub(crate) outgoing: mpsc::Sender<String>,
    pub(crate) reader: JoinHandle<()>,
    pub(crate) writer: JoinHandle<io::Result<()>>,
    /// Fires when the input has ended while lines before its end still wait
    /// for the loop; a transport without that signal drops the sender.
    pub(crate) input_ended: oneshot::Receiver<()>,
}

/// The loop of one connection over any transport.
pub(crate) async fn serve<S>(
    channels: Channels,
    roots: Arc<Roots>,
    config: &Config,
    retained: Arc<crate::process::Account>,
    shutdown: S,
) -> io::Result<()>
where
    S: Future<Output = ()>,
{
    let Channels { mut incoming, outgoing: lines, reader, writer, mut input_ended } = channels;
    let mut ending_seen = false;
    // If this future is dropped midway, the transport's tasks go with it.
    let reader_task = AbortOnDrop(reader);
    let mut writer_task = AbortOnDrop(writer);
    let (events_tx, mut events) = mpsc::channel(EVENT_QUEUE);
    let limits = Limits {
        max_processes: config.max_processes,
        retained_bytes: RETAINED_BYTES,
        connection_retained: CONNECTION_RETAINED,
        server_retained: config.max_retained_bytes,
        server_account: retained,
        reservation: config.id_reservation,
        sandbox: crate::sandbox::Settings {
            always: config.sandbox,
            network: config.sandbox_network,
            helper: config.sandbox_helper.as_deref().map(Arc::from),
        },
    };
    let mut state = dispatch::State::new(roots, ProcessTable::new(events_tx, limits));
    let mut out = Vec::new();
    let mut outbox = Outbox::default();
    let mut input_open = true;
    let mut drain_deadline: Option<Instant> = None;
    tokio::pin!(shutdown);
    loop {
        let timer = state.table.next_deadline();
        let room = outbox.has_room();
        // A full fs queue holds the input back too (pipelined calls wait).
        let take_input = room && state.fs.has_room() && state.watches.has_room();
        let spin = state.fs.spinning();
        tokio::select! {
            message = incoming.recv(), if input_open && take_input => match message {
                Some(message) => state.on_incoming(message, &mut out),
                None => {
                    tracing::debug!("input ended");
                    input_open = false;
                    if config.on_eof == OnEof::Kill {
                        state.table.kill_all();
                        drain_deadline = Some(Instant::now() + KILL_DRAIN);
                    }
                }
            },
            // The input ended while the loop takes none (replies wait for the
            // client to read): the processes are killed now, as EOF asks; the
            // lines before the end are still answered once the client reads,
            // and the connection ends at the EOF itself as usual.
            ended = &mut input_ended, if input_open && !take_input && !ending_seen => {
                ending_seen = true;
                if ended.is_ok() && config.on_eof == OnEof::Kill {
                    tracing::debug!("input ended while replies wait; killing the processes");
                    state.table.kill_all();
                    // A client that stopped reading cannot keep the server alive.
                    drain_deadline.get_or_insert(Instant::now() + EOF_LINGER);
                }
            }
            Some(event) = events.recv(), if room => state.table.on_event(event, Instant::now(), &mut out),
            // Finished fs calls are taken only while the outbox has room: an
            // unread reply holds its slot, and no more calls start meanwhile.
            line = state.fs.next_reply(), if room => out.push(line),
            line = state.watches.next_line(), if room => out.push(line),
            // Polls again (after a non-blocking look at I/O) while a fresh fs call runs.
            () = tokio::task::yield_now(), if spin => {}
            done = state.table.next_done() => {
                if let Some(line) = done {
                    state.on_started(line, &mut out);
                }
            }
            permit = lines.reserve(), if outbox.has_lines() => match permit {
                Ok(permit) => outbox.send(permit, &lines),
                Err(_) => {
                    output_gone(&mut outbox, &mut state.table, &mut drain_deadline);
                    input_open = false;
                }
            },
            // The writer gave up (a peer gone silent, a write error) while
            // nothing was waiting to be sent: the connection is over all the same.
            () = lines.closed(), if !outbox.is_closed() => {
                output_gone(&mut outbox, &mut state.table, &mut drain_deadline);
                input_open = false;
            }
            () = sleep_until(timer.unwrap_or_else(Instant::now)), if timer.is_some() => {
                state.table.on_timers(Instant::now(), &mut out);
            }
            () = &mut shutdown, if drain_deadline.is_none() => {
                tracing::info!("shutting down on request");
                input_open = false;
                state.table.kill_all();
                drain_deadline = Some(Instant::now() + KILL_DRAIN);
            }
            () = sleep_until(drain_deadline.unwrap_or_else(Instant::now)), if drain_deadline.is_some() => {
                tracing::warn!("processes or fs calls still busy after the connection ended; closing");
                break;
            }
        }
        outbox.extend(&mut out);
        if !input_open && state.table.is_settled() && state.fs.is_idle() && !outbox.has_lines() {
            break;
        }
    }
    state.table.answer_all_parked(&mut out);
    state.refuse_waiting(&mut out);
    outbox.extend(&mut out);
    let flushed = tokio::time::timeout(FINAL_FLUSH, outbox.flush(&lines)).await;
    if flushed.is_err() {
        tracing::warn!("the client did not read the last replies in time; dropping them");
    }
    // Dropping the state kills what is left; fs calls still in a syscall are abandoned.
    drop(state);
    drop(lines);
    drop(reader_task);
    match tokio::time::timeout(FINAL_FLUSH, &mut writer_task.0).await {
        // The client closing its end is how a connection may end; not an error.
        Ok(Ok(Err(error))) if error.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        Ok(Ok(result)) => result,
        Ok(Err(error)) => Err(io::Error::other(error)),
        Err(_) => {
            tracing::warn!("the client stopped reading; leaving its last replies unsent");
            Ok(())
        }
    }
}

/// The output is gone: nothing more can be said, so the connection ends.
fn output_gone(outbox: &mut Outbox, table: &mut ProcessTable, drain: &mut Option<Instant>) {
    tracing::debug!("output closed; ending the connection");
    outbox.close();
    table.kill_all();
    drain.get_or_insert(Instant::now() + KILL_DRAIN);
}

/// A task aborted when its handle is dropped: the loop owns its transport's tasks.
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
