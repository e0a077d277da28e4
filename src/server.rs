//! The server loop: one task owns the connection state and reacts to input, process events and timers.

mod dispatch;

use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio::sync::mpsc;
use tokio::time::{sleep_until, Instant};

use crate::fs::Roots;
use crate::process::{Limits, ProcessTable, RETAINED_BYTES};
use crate::transport;

/// Default `--max-message-bytes`: 64 MiB.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;
/// Default `--max-processes`.
pub const DEFAULT_MAX_PROCESSES: usize = 1024;
/// How long an exited process's id stays reserved by default.
pub const DEFAULT_ID_RESERVATION: Duration = Duration::from_secs(30);
/// Process events (output chunks of up to 64 KiB) queued for the loop.
const EVENT_QUEUE: usize = 64;
/// How long a killed connection waits for its processes' streams to close.
const KILL_DRAIN: Duration = Duration::from_secs(2);

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
    /// fs paths and process cwds must lie inside one of these (none: no confinement).
    pub roots: Vec<PathBuf>,
    /// What to do when the input ends.
    pub on_eof: OnEof,
    /// How long an exited process's id stays reserved (the protocol says 30 s).
    pub id_reservation: Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            max_processes: DEFAULT_MAX_PROCESSES,
            roots: Vec::new(),
            on_eof: OnEof::Kill,
            id_reservation: DEFAULT_ID_RESERVATION,
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
    let roots = Roots::new(&config.roots)?;
    let (mut frames, reader_task) = transport::spawn_reader(
        BufReader::with_capacity(64 * 1024, reader),
        config.max_message_bytes,
    );
    let (lines, writer_task) = transport::spawn_writer(writer);
    let (events_tx, mut events) = mpsc::channel(EVENT_QUEUE);
    let limits = Limits {
        max_processes: config.max_processes,
        retained_bytes: RETAINED_BYTES,
        reservation: config.id_reservation,
    };
    let mut state = dispatch::State::new(roots, ProcessTable::new(events_tx, limits));
    let mut out = Vec::new();
    let mut input_open = true;
    let mut writer_open = true;
    let mut drain_deadline: Option<Instant> = None;
    tokio::pin!(shutdown);
    loop {
        let timer = state.table.next_deadline();
        tokio::select! {
            frame = frames.recv(), if input_open => match frame {
                Some(frame) => state.on_frame(frame, &mut out).await,
                None => {
                    tracing::debug!("input ended");
                    input_open = false;
                    if config.on_eof == OnEof::Kill {
                        state.table.kill_all();
                        drain_deadline = Some(Instant::now() + KILL_DRAIN);
                    }
                }
            },
            Some(event) = events.recv() => state.table.on_event(event, Instant::now(), &mut out),
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
                tracing::warn!("processes still hold their output open after being killed; closing");
                break;
            }
        }
        if writer_open && !send_all(&lines, &mut out).await {
            tracing::debug!("output closed; ending the connection");
            writer_open = false;
            input_open = false;
            state.table.kill_all();
            drain_deadline = Some(Instant::now() + KILL_DRAIN);
        }
        out.clear();
        if !input_open && state.table.is_settled() {
            break;
        }
    }
    state.table.answer_all_parked(&mut out);
    if writer_open {
        send_all(&lines, &mut out).await;
    }
    // Dropping the table kills what is left and reaps every child.
    drop(state);
    drop(lines);
    reader_task.abort();
    match writer_task.await {
        // The client closing its end is how a connection may end; not an error.
        Ok(Err(error)) if error.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        Ok(result) => result,
        Err(error) => Err(io::Error::other(error)),
    }
}

async fn send_all(lines: &mpsc::Sender<String>, out: &mut Vec<String>) -> bool {
    for line in out.drain(..) {
        if lines.send(line).await.is_err() {
            return false;
        }
    }
    true
}
