//! One process of the table: its handles, output log and lifecycle.
//!
//! The lifecycle is one enum, [`Life`], moved forward only here:
//! `Running` → `Exited` (exit seen, leader reaped) → `Reported` (`process/exited`
//! sent) → `Closed` (`process/closed` sent) → forgotten by the table once the
//! id's reservation has passed. Open streams are counted beside it: they may
//! end before or after the exit.

use std::time::Duration;

use portable_pty::{MasterPty, PtySize};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::output::OutputLog;
use super::pumps::{self, EventSender, StdinQueue};
use super::registry;
use super::shape::{Numbering, Shape};
use super::signal::{signal_group, ExitInfo, Signal};
use super::spawn::{self, SpawnError, SpawnRequest, Spawned};
use super::tree::{self, Session};
use super::write_ids::WriteIds;
use crate::account::Account;
use crate::limits::Group;
use crate::protocol::{
    encode_notification, encode_output, ClosedParams, ExitedParams, LimitHit, ProcessClosed,
    ProcessExited, ProcessInfo, ReadParams, ReadResult, SandboxType, StartParams, Stream,
};
use crate::sandbox::Policy;
use crate::transport::Line;

/// Why a resize failed.
pub(crate) enum ResizeError {
    NotTty,
    Io(std::io::Error),
}

/// How a process ended, and when.
struct Exit {
    info: ExitInfo,
    /// When the exit was observed; the id is reserved for a while after.
    at: Instant,
    /// When the leader was reaped, in `/proc` clock ticks; `None` if it could not be.
    reaped_at: Option<u64>,
}

/// Where a process is in its life.
enum Life {
    Running,
    /// Exited; `process/exited` not sent yet.
    Exited(Exit),
    /// `process/exited` sent, after the chunk with this seq.
    Reported(Exit, u64),
    /// `process/closed` sent too.
    Closed(Exit, u64),
}

/// What [`Entry::settle`] did.
pub(crate) struct Settled {
    /// `process/exited` went out now: parked reads may be answerable.
    pub(crate) reported_exit: bool,
    /// `process/closed` went out now: reads waiting past the exit end.
    pub(crate) closed: bool,
    /// Everything is sent and the reservation is over: the id may be forgotten.
    pub(crate) forgettable: bool,
}

/// A started process. Dropping it kills its process group (if the leader is
/// still unreaped) and aborts its tasks.
pub(crate) struct Entry {
    pub(crate) serial: u64,
    pub(crate) id: String,
    pub(crate) argv: Vec<String>,
    pub(crate) tty: bool,
    pub(crate) pid: u32,
    pub(crate) sandbox_type: SandboxType,
    pub(crate) output: OutputLog,
    life: Life,
    open_streams: u8,
    pub(crate) stdin: Option<StdinQueue>,
    /// The `writeId`s applied to stdin.
    pub(crate) write_ids: WriteIds,
    /// How its answers are numbered and name its sandbox (chosen at its start).
    shape: Shape,
    master: Option<Box<dyn MasterPty + Send>>,
    tasks: JoinSet<()>,
    /// What its stored argv costs the retained-memory budgets.
    pub(crate) stored: Option<super::Charge>,
    /// The cgroup its tree runs in (a start with limits).
    pub(crate) group: Option<std::sync::Arc<Group>>,
    /// The limit that ended it, found when it exited.
    limit_hit: Option<LimitHit>,
    /// Its failure looks like the sandbox's refusal (guessed at its exit).
    denied: bool,
    /// A policy's network: the proxy, ended with the entry.
    pub(crate) proxy: Option<crate::proxy::Proxy>,
}

impl Entry {
    /// Spawns the process (on the calling thread: the spawner's).
    pub(crate) fn spawn(
        params: &StartParams,
        cwd_dir: Option<&std::os::fd::OwnedFd>,
        sandbox: Option<(&Policy, Option<&std::path::Path>)>,
        group: Option<(&std::sync::Arc<Group>, Option<&std::path::Path>)>,
    ) -> Result<Spawned, SpawnError> {
        let request = SpawnRequest {
            argv: &params.argv,
            arg0: params.arg0.as_deref(),
            cwd: &params.cwd,
            cwd_dir,
            env: &params.env,
            tty: params.tty.then(|| params.size.unwrap_or_default()),
            pipe_stdin: params.pipe_stdin,
            sandbox,
            group: group.map(|(group, helper)| (&**group, helper)),
        };
        let mut spawned = spawn::spawn(&request)?;
        spawned.group = group.map(|(group, _)| group.clone());
        Ok(spawned)
    }

    /// Starts the tasks of a spawned process (on the loop; never blocks).
    pub(crate) fn start(
        serial: u64,
        params: &StartParams,
        shape: Shape,
        spawned: Spawned,
        events: &EventSender,
        retained_bytes: usize,
        account: std::sync::Arc<Account>,
    ) -> std::io::Result<Entry> {
        let pid = spawned.pid;
        let mut tasks = JoinSet::new();
        let handles = match pumps::start(serial, pid, spawned.pidfd, spawned.io, events, &mut tasks)
        {
            Ok(handles) => handles,
            Err(error) => {
                registry::abandon(pid);
                return Err(error);
            }
        };
        Ok(Entry {
            serial,
            id: params.process_id.clone(),
            argv: params.argv.clone(),
            tty: params.tty,
            pid,
            sandbox_type: spawned.sandbox_type,
            output: OutputLog::new(retained_bytes, account),
            life: Life::Running,
            open_streams: handles.open_streams,
            stdin: handles.stdin,
            write_ids: WriteIds::default(),
            shape,
            master: handles.master,
            tasks,
            stored: None,
            group: spawned.group,
            limit_hit: None,
            denied: false,
            proxy: None,
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
        if self.reaped_at().is_none() {
            for &signal in signals {
                self.signal(signal);
            }
        }
        self.session()
    }

    /// This process's session, for a sweep.
    pub(crate) fn session(&self) -> Session {
        Session { sid: self.pid, bound: self.reaped_at().unwrap_or_else(tree::boot_ticks) + 1 }
    }

    /// The exit was observed: reap the leader (never blocks) and remember when.
    pub(crate) fn exited(&mut self, info: ExitInfo, now: Instant) {
        if !matches!(self.life, Life::Running) {
            return;
        }
        if let Some(group) = &self.group {
            self.limit_hit = (group.oom_kills() > 0).then_some(LimitHit::Memory);
            group.release();
        }
        let reaped_at = registry::reap(self.pid).then(|| {
            registry::reaped(self.pid);
            tree::boot_ticks()
        });
        self.life = Life::Exited(Exit { info, at: now, reaped_at });
    }

    /// One output stream reached end of file.
    pub(crate) fn stream_ended(&mut self) {
        self.open_streams = self.open_streams.saturating_sub(1);
    }

    /// Whether some output stream is still open.
    pub(crate) fn streams_open(&self) -> bool {
        self.open_streams > 0
    }

    pub(crate) fn is_running(&self) -> bool {
        matches!(self.life, Life::Running)
    }

    /// Whether `process/exited` has been sent.
    pub(crate) fn exit_reported(&self) -> bool {
        matches!(self.life, Life::Reported(..) | Life::Closed(..))
    }

    /// Whether a `process/read` after `after_seq` has something to say now, so
    /// it must not wait. `Numbering::Output`: a chunk after it, or the exit
    /// reported. `Numbering::Counter`: a chunk after it, the close, or an exit event after it; a read
    /// past the exit waits for output a descendant writes later, or the close.
    pub(crate) fn read_ready(&self, after_seq: u64) -> bool {
        if self.output.has_after(after_seq) {
            return true;
        }
        match (self.shape.numbering, &self.life) {
            (_, Life::Running | Life::Exited(_)) => false,
            (Numbering::Output, Life::Reported(..) | Life::Closed(..)) => true,
            (Numbering::Counter, Life::Reported(_, exit_seq)) => *exit_seq > after_seq,
            (Numbering::Counter, Life::Closed(..)) => true,
        }
    }

    /// Whether nothing more will be sent for this process.
    pub(crate) fn is_settled(&self) -> bool {
        matches!(self.life, Life::Closed(..))
    }

    /// Sends `process/exited` once the streams ended or `drain` has passed
    /// since the exit, then `process/closed` once they ended; says whether the
    /// id may be forgotten (everything sent, `reservation` passed since exit).
    pub(crate) fn settle(
        &mut self,
        now: Instant,
        drain: Duration,
        reservation: Duration,
        out: &mut Vec<Line>,
    ) -> Settled {
        let (mut reported_exit, mut closed) = (false, false);
        let life = std::mem::replace(&mut self.life, Life::Running);
        self.life = match life {
            Life::Exited(exit) if !self.streams_open() || now >= exit.at + drain => {
                if self.shape.report_denials {
                    let sandboxed = self.sandbox_type != SandboxType::None;
                    self.denied =
                        super::denial::likely(sandboxed, exit.info.code, self.output.bytes());
                }
                let seq = self.shape.numbering.event_seq(&mut self.output);
                out.push(self.exited_line(&exit.info, seq).into());
                reported_exit = true;
                Life::Reported(exit, seq)
            }
            other => other,
        };
        let life = std::mem::replace(&mut self.life, Life::Running);
        self.life = match life {
            Life::Reported(exit, seq) if !self.streams_open() => {
                let closed_seq = self.shape.numbering.event_seq(&mut self.output);
                out.push(self.closed_line(closed_seq).into());
                closed = true;
                // Its readers and exit watcher are done: their task cells
                // go now, not with the entry (kept for up to 30 s, up to
                // 1024 of them). A stdin writer may still run (a background
                // job may read the pipe).
                while self.tasks.try_join_next().is_some() {}
                Life::Closed(exit, seq)
            }
            other => other,
        };
        let forgettable =
            matches!(&self.life, Life::Closed(exit, _) if now >= exit.at + reservation);
        Settled { reported_exit, closed, forgettable }
    }

    fn exit(&self) -> Option<&ExitInfo> {
        match &self.life {
            Life::Running => None,
            Life::Exited(exit) | Life::Reported(exit, _) | Life::Closed(exit, _) => {
                Some(&exit.info)
            }
        }
    }

    fn reaped_at(&self) -> Option<u64> {
        match &self.life {
            Life::Running => None,
            Life::Exited(exit) | Life::Reported(exit, _) | Life::Closed(exit, _) => exit.reaped_at,
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

    fn exited_line(&self, exit: &ExitInfo, seq: u64) -> String {
        let params = ExitedParams {
            process_id: self.id.clone(),
            seq,
            exit_code: exit.code,
            signal: exit.signal.clone(),
            limit: self.limit_hit,
            sandbox_denied: self.shape.report_denials.then_some(self.denied),
        };
        encode_notification::<ProcessExited>(&params, 128)
    }

    fn closed_line(&self, seq: u64) -> String {
        let params = ClosedParams { process_id: self.id.clone(), seq };
        encode_notification::<ProcessClosed>(&params, 96)
    }

    /// A `process/read` result. `exited` is true only once `process/exited` was
    /// sent and this page reaches the last chunk sent before it.
    pub(crate) fn read(&self, params: &ReadParams) -> ReadResult {
        let page = self.output.read(params.after_seq.unwrap_or(0), params.max_bytes);
        let (exit, exit_seq) = match &self.life {
            Life::Reported(exit, seq) | Life::Closed(exit, seq) => (Some(&exit.info), *seq),
            Life::Running | Life::Exited(_) => (None, 0),
        };
        let exited = exit.is_some() && page.next_seq > exit_seq;
        let closed =
            matches!(self.life, Life::Closed(..)) && page.next_seq > self.output.last_seq();
        ReadResult {
            chunks: page.chunks,
            next_seq: page.next_seq,
            exited,
            exit_code: exit.filter(|_| exited).map(|e| e.code),
            signal: exit.filter(|_| exited).and_then(|e| e.signal.clone()),
            closed,
            limit: self.limit_hit.filter(|_| exited),
            failure: self.shape.report_denials.then_some(None),
            sandbox_denied: self.shape.report_denials.then_some(self.denied && exited),
        }
    }

    pub(crate) fn info(&self) -> ProcessInfo {
        ProcessInfo {
            process_id: self.id.clone(),
            argv: self.argv.clone(),
            tty: self.tty,
            pid: self.pid,
            running: self.is_running(),
            exit_code: self.exit().map(|e| e.code),
            signal: self.exit().and_then(|e| e.signal.clone()),
            sandbox_type: self.shape.sandbox_name(self.sandbox_type),
            limits: self.group.as_ref().map(|group| group.limits()),
        }
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        self.tasks.abort_all();
        self.stdin = None;
        if self.reaped_at().is_none() {
            registry::abandon(self.pid);
        }
        drop(self.master.take());
    }
}
