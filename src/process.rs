//! The process table of one connection: start, control, output, exit and forgetting.
//!
//! The table is owned by the server loop and never locked. Process tasks report
//! through [`ProcEvent`]s; the loop hands them to [`ProcessTable::on_event`], and
//! calls [`ProcessTable::on_timers`] when [`ProcessTable::next_deadline`] passes.
//! Encoded messages for the client are pushed onto an outbox `Vec<Line>` in order.
//! Nothing here waits on another party: `/proc` sweeps and cgroup kills run as
//! blocking tasks the table owns (the loop polls [`ProcessTable::next_done`]),
//! reaping never waits, and a limited process's exit reads one counter of its
//! cgroup (a kernel file, answered from memory).
//!
//! Layout: `start`, `reads`, `stdin` and `ending` are the table's methods by
//! job; `entry` is one process; `spawner`, `spawn` and `launch` start one;
//! `pumps`, `output`, `timers` serve it; `registry`, `watcher` and `tree`
//! keep what outlives a connection.

mod denial;
mod ending;
mod entry;
mod forker;
mod helper;
mod launch;
mod network;
mod output;
mod pumps;
mod reads;
mod registry;
mod shape;
mod signal;
mod spawn;
mod spawner;
mod start;
mod stdin;
mod timers;
pub(crate) mod tree;
mod watcher;
mod wide_pipe;
mod write_ids;

pub(crate) use self::reads::ReadOutcome;
use self::reads::{ParkedRead, MAX_WAIT};
pub(crate) use self::start::Begun;
use self::start::Starting;

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

use self::entry::Entry;
pub(crate) use self::forker::run_if_forker;
use self::pumps::EventSender;
pub(crate) use self::pumps::ProcEvent;
pub(crate) use self::registry::want_watcher;
pub(crate) use self::registry::{kill_descendants, reap_orphans};
pub(crate) use self::shape::{Numbering, Shape};
use self::signal::Signal;
use self::timers::{Timer, Timers};
use self::tree::Session;
pub(crate) use self::watcher::run_if_watcher;
use crate::protocol::{
    ErrorObject, ListResult, ResizeParams, RunningResult, SignalParams, TerminateParams,
};
use crate::sandbox;
use crate::transport::Line;

pub(crate) use self::output::OutputLog;
pub(crate) use self::output::RETAINED_BYTES;
use crate::account::{Account, Charge};
/// Default budget of one connection's retained output (charged bytes).
pub(crate) const CONNECTION_RETAINED: usize = 64 * 1024 * 1024;

/// How long `process/exited` waits for the streams to drain after exit.
const EXIT_DRAIN: Duration = Duration::from_millis(250);
/// Descriptors a process holds in the server at most: stdout, stderr and
/// stdin pipes (or a pty master) and a pidfd.
pub(crate) const FDS_PER_PROCESS: u64 = 4;
/// Descriptors the server keeps for itself (stdio, the runtime, listeners, fs calls).
const RESERVED_FDS: u64 = 128;

/// How many processes fit in a descriptor limit of `limit`.
pub(crate) fn processes_fitting(limit: u64) -> u64 {
    limit.saturating_sub(RESERVED_FDS) / FDS_PER_PROCESS
}

/// The current soft descriptor limit, for error messages.
fn descriptor_limit() -> u64 {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into `limit`.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    limit.rlim_cur
}

/// Exited processes a connection remembers (for reads, and their ids
/// reserved); beyond, the oldest one whose output is all delivered is
/// forgotten before its 30 s are up.
pub(crate) const MAX_EXITED: usize = 1024;
/// Retained output let go of between two returns of the heap's free pages.
const TRIM_EVERY: usize = 8 << 20;

/// The longest `processId`, in bytes.
pub(crate) const MAX_PROCESS_ID_BYTES: usize = 256;

/// -32602 for a `processId` over [`MAX_PROCESS_ID_BYTES`] (its start only is quoted).
pub(crate) fn too_long_id(id: &str) -> ErrorObject {
    let mut end = 32.min(id.len());
    while !id.is_char_boundary(end) {
        end -= 1;
    }
    ErrorObject::invalid_params(format!(
        "processId is too long: {} bytes (starting {:?}), and the limit is {MAX_PROCESS_ID_BYTES}",
        id.len(),
        &id[..end]
    ))
}

/// Limits of one table.
#[derive(Debug, Clone)]
pub(crate) struct Limits {
    pub(crate) max_processes: usize,
    pub(crate) retained_bytes: usize,
    /// Retained output of all of the connection's processes (charged bytes).
    pub(crate) connection_retained: usize,
    /// Retained output of the whole server (charged bytes).
    pub(crate) server_retained: usize,
    /// The whole server's account of retained output.
    pub(crate) server_account: Arc<Account>,
    pub(crate) reservation: Duration,
    /// How processes are confined.
    pub(crate) sandbox: sandbox::Settings,
    /// The limits of a start that names none (`--limit-memory` and the rest).
    pub(crate) tree: crate::protocol::ProcessLimits,
    /// Directories put first on every process's `PATH`.
    pub(crate) prepend_path: Arc<[std::path::PathBuf]>,
}

/// Every process one connection started, by client id.
pub(crate) struct ProcessTable {
    entries: HashMap<String, Entry>,
    ids: HashMap<u64, String>,
    next_serial: u64,
    events: EventSender,
    timers: Timers,
    /// Parked reads by wait id, and the wait ids of each process serial.
    parked: HashMap<u64, ParkedRead>,
    parked_by_process: HashMap<u64, BTreeSet<u64>>,
    /// `/proc` sweeps in flight (blocking tasks); each yields how many it signalled.
    sweeps: JoinSet<usize>,
    /// Starts handed to the spawner, oldest first (it finishes them in order).
    starting: VecDeque<Starting>,
    spawner: spawner::Spawner,
    /// The connection is ending: anything still starting is killed once started.
    closing: bool,
    /// A detached session: exited processes are kept past their reservation.
    holding: bool,
    /// When the last hold ended: from then, held processes get their
    /// reservation again, for the client that resumed to read them.
    released: Option<Instant>,
    limits: Limits,
    /// What the processes' retained output costs.
    account: Arc<Account>,
    /// Serials of exited processes, oldest exit first: whose output goes first
    /// when a retention budget is exceeded.
    exited: VecDeque<u64>,
    /// Retained bytes let go of since the heap last gave its free pages back.
    freed_since_trim: usize,
    /// Serials of exited processes not yet forgotten, oldest exit first.
    reserved: VecDeque<u64>,
    /// The sessions of forgotten processes, newest last (at most
    /// [`MAX_LINGERING`]): what a background job left in them is still swept
    /// when the table ends, and the watcher still knows them.
    lingering: VecDeque<(Session, u32)>,
    /// The cgroups of forgotten processes that still had members, newest
    /// last (at most [`MAX_LINGERING`]): killed when the table ends.
    lingering_groups: VecDeque<Arc<crate::limits::Group>>,
    /// The client answers `network/decide`, and the questions it has not
    /// answered yet (see `network`).
    decisions: network::Decisions,
}

impl ProcessTable {
    /// A table whose processes report on `events`.
    pub(crate) fn new(events: mpsc::Sender<ProcEvent>, limits: Limits) -> ProcessTable {
        let account = Arc::new(Account::child_of(limits.server_account.clone()));
        ProcessTable {
            entries: HashMap::new(),
            ids: HashMap::new(),
            next_serial: 1,
            events: EventSender::new(events),
            timers: Timers::default(),
            parked: HashMap::new(),
            parked_by_process: HashMap::new(),
            sweeps: JoinSet::new(),
            starting: VecDeque::new(),
            spawner: spawner::Spawner::default(),
            closing: false,
            holding: false,
            released: None,
            limits,
            account,
            exited: VecDeque::new(),
            freed_since_trim: 0,
            lingering: VecDeque::new(),
            lingering_groups: VecDeque::new(),
            reserved: VecDeque::new(),
            decisions: network::Decisions::default(),
        }
    }

    /// The limits of a start that names none.
    pub(crate) fn default_limits(&self) -> &crate::protocol::ProcessLimits {
        &self.limits.tree
    }

    /// The directories put first on every process's `PATH`.
    pub(crate) fn prepend_path(&self) -> &[std::path::PathBuf] {
        &self.limits.prepend_path
    }
}

impl ProcessTable {
    /// `process/terminate`: SIGKILL now, or SIGTERM and SIGKILL after `graceMs`.
    pub(crate) fn terminate(&mut self, params: TerminateParams, now: Instant) -> RunningResult {
        let Some(entry) = self.entries.get(&params.process_id) else {
            return RunningResult { running: false };
        };
        if !entry.is_running() {
            // Descendants left in the session go too; the answer stays false.
            let session = entry.signal_tree(&[Signal::KILL]);
            self.sweep(vec![session], &[Signal::KILL]);
            return RunningResult { running: false };
        }
        match params.grace_ms {
            Some(grace) => {
                let signals = [Signal::TERM, Signal(libc::SIGCONT)];
                let session = entry.signal_tree(&signals);
                let deadline = now + Duration::from_millis(grace).min(MAX_WAIT);
                self.timers.schedule(deadline, Timer::KillAfterGrace(entry.serial));
                self.sweep(vec![session], &signals);
            }
            None => {
                let session = entry.signal_tree(&[Signal::KILL]);
                self.sweep(vec![session], &[Signal::KILL]);
            }
        }
        RunningResult { running: true }
    }

    /// `process/signal`.
    pub(crate) fn signal(&mut self, params: SignalParams) -> Result<RunningResult, ErrorObject> {
        let signal = Signal::parse(&params.signal).map_err(ErrorObject::invalid_params)?;
        let entry = self.get(&params.process_id)?;
        if !entry.is_running() {
            return Ok(RunningResult { running: false });
        }
        entry.signal(signal);
        Ok(RunningResult { running: true })
    }

    /// `process/resize`.
    pub(crate) fn resize(&mut self, params: ResizeParams) -> Result<(), ErrorObject> {
        let entry = self.get(&params.process_id)?;
        entry.resize(params.rows, params.cols).map_err(|error| match error {
            entry::ResizeError::NotTty => {
                ErrorObject::invalid_request(format!("process {} is not a tty", params.process_id))
            }
            entry::ResizeError::Io(error) => ErrorObject::internal(format!(
                "failed to resize the terminal of process {}: {error}",
                params.process_id
            )),
        })
    }

    /// Each process's id and session, for finding its members in `/proc`.
    pub(crate) fn roster(&self) -> Vec<(String, tree::Session)> {
        self.entries.iter().map(|(id, entry)| (id.clone(), entry.session())).collect()
    }

    /// `process/list`, ordered by id.
    pub(crate) fn list(&self) -> ListResult {
        let mut processes: Vec<_> = self.entries.values().map(Entry::info).collect();
        processes.sort_by(|a, b| a.process_id.cmp(&b.process_id));
        ListResult { processes }
    }

    /// Applies one event from a process task.
    pub(crate) fn on_event(&mut self, event: ProcEvent, now: Instant, out: &mut Vec<Line>) {
        let serial = match &event {
            ProcEvent::Output { serial, .. }
            | ProcEvent::StreamEnd { serial }
            | ProcEvent::Exited { serial, .. }
            | ProcEvent::Network { serial, .. } => *serial,
        };
        let Some(id) = self.ids.get(&serial).cloned() else { return };
        let Some(entry) = self.entries.get_mut(&id) else { return };
        match event {
            ProcEvent::Output { stream, bytes, .. } => {
                out.push(entry.push_output(stream, bytes).into());
                self.keep_retention_budgets(serial);
                self.wake(serial, out);
            }
            ProcEvent::StreamEnd { .. } => {
                entry.stream_ended();
                self.settle(&id, now, out);
            }
            ProcEvent::Exited { exit, .. } => {
                let exit = exit.unwrap_or_else(|error| {
                    tracing::error!(%id, %error, "waiting for the process failed");
                    signal::ExitInfo::exited(-1)
                });
                tracing::debug!(%id, code = exit.code, signal = ?exit.signal, "exited");
                entry.exited(exit, now);
                self.exited.push_back(serial);
                self.reserved.push_back(serial);
                registry::reap_disowned();
                if entry.streams_open() {
                    self.timers.schedule(now + EXIT_DRAIN, Timer::ExitDrain(serial));
                }
                self.timers.schedule(now + self.limits.reservation, Timer::Forget(serial));
                self.settle(&id, now, out);
                self.keep_reserved_bound();
            }
            ProcEvent::Network { report, .. } => self.on_network(id, report, out),
        }
    }

    /// After process `pushed` retained a chunk: while the connection's or the
    /// server's retained output is over its budget, the oldest exited
    /// process's output goes first, then the older chunks of `pushed` (its
    /// newest always stays). Other connections keep theirs; each trims its own
    /// when it next retains, so the server-wide total passes its budget by at
    /// most one chunk per connection.
    fn keep_retention_budgets(&mut self, pushed: u64) {
        let over = |table: &ProcessTable| {
            table.account.bytes() > table.limits.connection_retained
                || table.limits.server_account.bytes() > table.limits.server_retained
        };
        while over(self) {
            if let Some(serial) = self.exited.pop_front() {
                if let Some(entry) = self.ids.get(&serial).and_then(|id| self.entries.get_mut(id)) {
                    let freed = entry.output.clear();
                    if freed > 0 {
                        tracing::debug!(id = %entry.id, "dropped an exited process's output: over the retention budget");
                        self.freed_since_trim += freed;
                    }
                }
                continue;
            }
            let Some(entry) = self.ids.get(&pushed).and_then(|id| self.entries.get_mut(id)) else {
                return;
            };
            if !entry.output.drop_oldest() {
                break;
            }
        }
        // Chunks of every size come and go while output is retained: the
        // holes they leave in the heap are given back every few MiB, or the
        // heap's resident size creeps past the budget over thousands of starts.
        if self.freed_since_trim >= TRIM_EVERY {
            self.freed_since_trim = 0;
            crate::transport::give_back_memory();
        }
    }

    /// Keeps at most [`MAX_EXITED`] exited processes: memory must not grow
    /// with the rate of starts while each waits its 30 s to be forgotten.
    fn keep_reserved_bound(&mut self) {
        self.reserved.retain(|serial| self.ids.contains_key(serial));
        self.exited.retain(|serial| self.ids.contains_key(serial));
        let mut tries = self.reserved.len();
        while self.reserved.len() > MAX_EXITED && tries > 0 {
            tries -= 1;
            let Some(serial) = self.reserved.pop_front() else { return };
            let settled = self
                .ids
                .get(&serial)
                .and_then(|id| self.entries.get(id))
                .is_some_and(|entry| entry.exit_reported() && !entry.streams_open());
            if !settled {
                // Still delivering (a descendant holds a stream): not yet.
                self.reserved.push_back(serial);
                continue;
            }
            if let Some(id) = self.ids.remove(&serial) {
                tracing::debug!(%id, "forgotten early: over the limit of exited processes");
                self.forget(&id);
            }
        }
    }

    /// When the next timer is due.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.timers.next_deadline()
    }

    /// Fires every timer due at `now`.
    pub(crate) fn on_timers(&mut self, now: Instant, out: &mut Vec<Line>) {
        while let Some(timer) = self.timers.pop_due(now) {
            match timer {
                Timer::ReadDeadline(wait_id) => {
                    if let Some(parked) = self.unpark(wait_id) {
                        self.answer(parked, out);
                    }
                }
                Timer::ExitDrain(serial) | Timer::Forget(serial) => {
                    if let Some(id) = self.ids.get(&serial).cloned() {
                        self.settle(&id, now, out);
                    }
                }
                Timer::KillAfterGrace(serial) => {
                    // The whole tree, even when the leader has exited meanwhile:
                    // what ignored SIGTERM must not outlive the grace period.
                    if let Some(entry) = self.entry_by_serial(serial) {
                        let session = entry.signal_tree(&[Signal::KILL]);
                        self.sweep(vec![session], &[Signal::KILL]);
                    }
                }
            }
        }
    }

    /// Whether any process is known (running, or exited and still readable).
    pub(crate) fn has_processes(&self) -> bool {
        !self.entries.is_empty() || !self.starting.is_empty()
    }

    /// Timers and parked reads held (for tests of cancellation).
    #[cfg(test)]
    pub(crate) fn pending_counts(&self) -> (usize, usize) {
        (self.timers.len(), self.parked.len())
    }

    /// No process is running or has undelivered notifications, and no sweep is under way.
    pub(crate) fn is_settled(&self) -> bool {
        // A sweep not yet run would be dropped with the table: it counts too.
        self.starting.is_empty()
            && self.sweeps.is_empty()
            && self.entries.values().all(Entry::is_settled)
    }

    /// Checks that `cwd` is a usable starting directory name.
    pub(crate) fn check_cwd(cwd: &Path) -> Result<(), ErrorObject> {
        if cwd.is_absolute() {
            Ok(())
        } else {
            Err(ErrorObject::invalid_params(format!("cwd must be absolute: {}", cwd.display())))
        }
    }

    fn get(&self, id: &str) -> Result<&Entry, ErrorObject> {
        self.entries.get(id).ok_or_else(|| unknown(id))
    }

    fn get_mut(&mut self, id: &str) -> Result<&mut Entry, ErrorObject> {
        self.entries.get_mut(id).ok_or_else(|| unknown(id))
    }

    fn entry_by_serial(&self, serial: u64) -> Option<&Entry> {
        self.ids.get(&serial).and_then(|id| self.entries.get(id))
    }

    /// Sends `process/exited` and `process/closed` when due; forgets the entry when done.
    fn settle(&mut self, id: &str, now: Instant, out: &mut Vec<Line>) {
        let Some(entry) = self.entries.get_mut(id) else { return };
        let settled = entry.settle(now, EXIT_DRAIN, self.limits.reservation, out);
        let serial = entry.serial;
        if settled.reported_exit || settled.closed {
            self.wake(serial, out);
        }
        let renewed = self.released.is_some_and(|at| now < at + self.limits.reservation);
        if settled.forgettable && !self.holding && !renewed {
            tracing::debug!(%id, "forgotten");
            self.ids.remove(&serial);
            self.forget(id);
        }
    }
}

fn unknown(id: &str) -> ErrorObject {
    if id.len() > MAX_PROCESS_ID_BYTES {
        return too_long_id(id);
    }
    ErrorObject::invalid_request(format!("unknown process id {id}"))
}

#[cfg(test)]
mod tests;

impl Drop for ProcessTable {
    /// The lingering sessions were swept with the table's end: the watcher
    /// may forget them, unless a sweep was still to run (then the watcher
    /// keeps them, for a SIGKILLed server).
    fn drop(&mut self) {
        if !self.sweeps.is_empty() {
            return;
        }
        for (_, pid) in self.lingering.drain(..) {
            registry::forgotten(pid);
        }
    }
}
