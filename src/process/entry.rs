//! One process of the table: its handles, output log and lifecycle flags.

use portable_pty::{MasterPty, PtySize};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::output::OutputLog;
use super::pumps::{self, ProcEvent, StdinQueue};
use super::registry;
use super::signal::{signal_group, ExitInfo, Signal};
use super::spawn::{self, SpawnRequest};
use super::tree::{self, Session};
use crate::protocol::{
    encode_notification, encode_output, ClosedParams, ExitedParams, ProcessClosed, ProcessExited,
    ProcessInfo, ReadParams, ReadResult, StartParams, Stream,
};

/// Why a resize failed.
pub(crate) enum ResizeError {
    NotTty,
    Io(std::io::Error),
}

/// A started process. Dropping it kills its process group (if the leader is
/// still unreaped) and aborts its tasks.
pub(crate) struct Entry {
    pub(crate) serial: u64,
    pub(crate) id: String,
    pub(crate) argv: Vec<String>,
    pub(crate) tty: bool,
    pub(crate) pid: u32,
    pub(crate) output: OutputLog,
    /// Exit as observed; `None` while running.
    pub(crate) exit: Option<ExitInfo>,
    pub(crate) exit_reported: bool,
    /// Seq of the last chunk sent before `process/exited`.
    exit_seq: u64,
    pub(crate) open_streams: u8,
    pub(crate) closed_reported: bool,
    /// When the exit was observed; the id is reserved for a while after.
    pub(crate) exited_at: Option<tokio::time::Instant>,
    /// When the leader was reaped, in `/proc` clock ticks; `None` while unreaped.
    reaped_at: Option<u64>,
    pub(crate) stdin: Option<StdinQueue>,
    master: Option<Box<dyn MasterPty + Send>>,
    tasks: JoinSet<()>,
}

impl Entry {
    /// Spawns the process and starts its tasks.
    pub(crate) fn start(
        serial: u64,
        params: &StartParams,
        events: &mpsc::Sender<ProcEvent>,
        retained_bytes: usize,
    ) -> std::io::Result<Entry> {
        let request = SpawnRequest {
            argv: &params.argv,
            arg0: params.arg0.as_deref(),
            cwd: &params.cwd,
            env: &params.env,
            tty: params.tty.then(|| params.size.unwrap_or_default()),
            pipe_stdin: params.pipe_stdin,
        };
        let spawned = spawn::spawn(&request)?;
        let pid = spawned.pid;
        let mut tasks = JoinSet::new();
        let handles = match pumps::start(serial, pid, spawned.pidfd, spawned.io, events, &mut tasks)
        {
            Ok(handles) => handles,
            Err(error) => {
                // Killed and left to the orphan reaper: never wait on the loop.
                let _ = signal_group(pid, Signal::KILL);
                if spawn::reap(pid) {
                    registry::reaped(pid);
                } else {
                    registry::disown(pid);
                }
                return Err(error);
            }
        };
        Ok(Entry {
            serial,
            id: params.process_id.clone(),
            argv: params.argv.clone(),
            tty: params.tty,
            pid,
            output: OutputLog::new(retained_bytes),
            exit: None,
            exit_reported: false,
            exit_seq: 0,
            open_streams: handles.open_streams,
            closed_reported: false,
            exited_at: None,
            reaped_at: None,
            stdin: handles.stdin,
            master: handles.master,
            tasks,
        })
    }

    /// Sends `signal` to the process group (`process/signal`); failures are logged.
    pub(crate) fn signal(&self, signal: Signal) {
        if let Err(error) = signal_group(self.pid, signal) {
            tracing::warn!(id = %self.id, pid = self.pid, %error, "signalling the process group failed");
        }
    }

    /// Sends `signals` to the process group while the leader is unreaped (safe:
    /// its zombie holds the group id), and returns the session to sweep off the
    /// loop for the rest of the tree (`process/terminate`, shutdown).
    pub(crate) fn signal_tree(&self, signals: &[Signal]) -> Session {
        if self.reaped_at.is_none() {
            for &signal in signals {
                self.signal(signal);
            }
        }
        self.session()
    }

    /// This process's session, for a sweep.
    pub(crate) fn session(&self) -> Session {
        Session { sid: self.pid, bound: self.reaped_at.unwrap_or_else(tree::boot_ticks) + 1 }
    }

    /// Reaps the leader after its exit was observed (never blocks).
    pub(crate) fn reap(&mut self) {
        if self.reaped_at.is_none() && spawn::reap(self.pid) {
            self.reaped_at = Some(tree::boot_ticks());
            registry::reaped(self.pid);
        }
    }

    pub(crate) fn resize(&self, rows: u16, cols: u16) -> Result<(), ResizeError> {
        let master = self.master.as_ref().ok_or(ResizeError::NotTty)?;
        master
            .resize(PtySize { rows, cols, pixel_width: 0, pixel_height: 0 })
            .map_err(|e| ResizeError::Io(std::io::Error::other(e)))
    }

    /// Retains a chunk (the log numbers it) and encodes its `process/output` notification.
    pub(crate) fn push_output(&mut self, stream: Stream, bytes: Vec<u8>) -> String {
        let seq = self.output.push(stream, bytes);
        encode_output(&self.id, seq, stream, self.output.newest_bytes())
    }

    pub(crate) fn report_exit(&mut self, exit: &ExitInfo) -> String {
        self.exit_reported = true;
        self.exit_seq = self.output.last_seq();
        let params = ExitedParams {
            process_id: self.id.clone(),
            seq: self.exit_seq,
            exit_code: exit.code,
            signal: exit.signal.clone(),
        };
        encode_notification::<ProcessExited>(&params, 128)
    }

    pub(crate) fn report_closed(&mut self) -> String {
        self.closed_reported = true;
        let params = ClosedParams { process_id: self.id.clone(), seq: self.output.last_seq() };
        encode_notification::<ProcessClosed>(&params, 96)
    }

    /// A `process/read` result. `exited` is true only once `process/exited` was
    /// sent and this page reaches the last chunk sent before it.
    pub(crate) fn read(&self, params: &ReadParams) -> ReadResult {
        let page = self.output.read(params.after_seq.unwrap_or(0), params.max_bytes);
        let exit = self.exit.as_ref().filter(|_| self.exit_reported);
        let exited = exit.is_some() && page.next_seq > self.exit_seq;
        ReadResult {
            chunks: page.chunks,
            next_seq: page.next_seq,
            exited,
            exit_code: exit.filter(|_| exited).map(|e| e.code),
            signal: exit.filter(|_| exited).and_then(|e| e.signal.clone()),
        }
    }

    pub(crate) fn info(&self) -> ProcessInfo {
        ProcessInfo {
            process_id: self.id.clone(),
            argv: self.argv.clone(),
            tty: self.tty,
            pid: self.pid,
            running: self.exit.is_none(),
            exit_code: self.exit.as_ref().map(|e| e.code),
            signal: self.exit.as_ref().and_then(|e| e.signal.clone()),
        }
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        self.tasks.abort_all();
        self.stdin = None;
        if self.reaped_at.is_none() {
            // The leader is unreaped, so its pid still names our group.
            let _ = signal_group(self.pid, Signal::KILL);
            if spawn::reap(self.pid) {
                registry::reaped(self.pid);
            } else {
                // Dying now: the binary's orphan reaper collects it.
                registry::disown(self.pid);
            }
        }
        drop(self.master.take());
    }
}
