//! The process table of one connection: start, control, output, exit and forgetting.
//!
//! The table is owned by the server loop and never locked. Process tasks report
//! through [`ProcEvent`]s; the loop hands them to [`ProcessTable::on_event`], and
//! calls [`ProcessTable::on_timers`] when [`ProcessTable::next_deadline`] passes.
//! Encoded messages for the client are pushed onto an outbox `Vec<String>` in order.
//! Nothing here blocks: `/proc` sweeps run as blocking tasks the table owns
//! (the loop polls [`ProcessTable::next_sweep`]), and reaping never waits.

mod entry;
mod launch;
mod output;
mod pumps;
mod registry;
mod shape;
mod signal;
mod spawn;
mod spawner;
mod timers;
pub(crate) mod tree;
mod watcher;
mod write_ids;

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

use self::entry::Entry;
use self::pumps::EventSender;
pub(crate) use self::pumps::ProcEvent;
use self::pumps::{StdinError, StdinOp, STDIN_LIMIT};
pub(crate) use self::registry::want_watcher;
pub(crate) use self::registry::{kill_descendants, reap_orphans};
pub(crate) use self::shape::{Numbering, Shape};
use self::signal::Signal;
use self::spawn::SpawnError;
use self::timers::{Timer, TimerKey, Timers};
use self::tree::Session;
pub(crate) use self::watcher::run_if_watcher;
use crate::fs::Roots;
use crate::protocol::{
    encode_response, ErrorObject, ListResult, ReadParams, ResizeParams, RunningResult,
    SignalParams, StartParams, StartResult, TerminateParams, WriteParams, WriteResult, WriteStatus,
};
use crate::sandbox;
use crate::transport::Line;

pub(crate) use self::output::OutputLog;
pub(crate) use self::output::RETAINED_BYTES;
use crate::account::{Account, Charge, STRING_OVERHEAD};
/// Default budget of one connection's retained output (charged bytes).
pub(crate) const CONNECTION_RETAINED: usize = 64 * 1024 * 1024;

/// How long `process/exited` waits for the streams to drain after exit.
const EXIT_DRAIN: Duration = Duration::from_millis(250);
/// Longest `waitMs` honoured (one day).
const MAX_WAIT: Duration = Duration::from_secs(24 * 3600);
/// `process/read`s waiting at once per connection.
pub(crate) const MAX_PARKED: usize = 10_000;
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
}

/// The answer to `process/read`: now, or later when output, exit or the deadline comes.
pub(crate) enum ReadOutcome {
    /// The encoded answer, charged until written.
    Ready(Line),
    Parked,
}

/// What [`ProcessTable::begin_start`] did with a valid start.
pub(crate) enum Begun {
    /// Handed to the spawner; the reply comes from [`ProcessTable::next_done`].
    Spawning,
    /// It depends on the starts under way: ask again when they are done.
    MustWait,
}

/// A `process/start` whose spawn runs on the spawner thread.
struct Starting {
    request: crate::protocol::RequestId,
    serial: u64,
    params: StartParams,
    shape: Shape,
    /// What its argv, env and cwd cost while held (the entry keeps argv's).
    charge: Charge,
    outcome: tokio::sync::oneshot::Receiver<spawner::Outcome>,
}

struct ParkedRead {
    request: crate::protocol::RequestId,
    serial: u64,
    params: ReadParams,
    deadline: TimerKey,
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
    /// Serials of exited processes not yet forgotten, oldest exit first.
    reserved: VecDeque<u64>,
    /// The sessions of forgotten processes, newest last (at most
    /// [`MAX_LINGERING`]): what a background job left in them is still swept
    /// when the table ends, and the watcher still knows them.
    lingering: VecDeque<(Session, u32)>,
    /// The cgroups of forgotten processes that still had members, newest
    /// last (at most [`MAX_LINGERING`]): killed when the table ends.
    lingering_groups: VecDeque<Arc<crate::limits::Group>>,
}

/// Bytes of stored commands (argv, env, cwd of live, starting and exited
/// processes) one connection or detached session may hold.
pub(crate) const CONNECTION_COMMANDS: usize = 32 * 1024 * 1024;
/// Bytes of stored commands the whole server may hold.
pub(crate) const SERVER_COMMANDS: usize = 128 * 1024 * 1024;

/// What storing `strings` costs: their bytes and a record each.
fn stored_cost<'a>(strings: impl Iterator<Item = &'a String>) -> usize {
    strings.map(|s| s.len() + STRING_OVERHEAD).sum()
}

/// Sessions of forgotten processes a table keeps sweeping at its end.
const MAX_LINGERING: usize = 4096;

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
            lingering: VecDeque::new(),
            lingering_groups: VecDeque::new(),
            reserved: VecDeque::new(),
        }
    }

    /// `process/start`, first half: checks the params, then hands the cwd check
    /// and the fork to the spawner thread. The reply comes from
    /// [`ProcessTable::next_started`]; until then [`ProcessTable::is_starting`].
    pub(crate) fn begin_start(
        &mut self,
        request: crate::protocol::RequestId,
        mut params: StartParams,
        shape: Shape,
        roots: Arc<Roots>,
    ) -> Result<Begun, ErrorObject> {
        export_metadata(&mut params)?;
        if params.argv.is_empty() {
            return Err(ErrorObject::invalid_params("argv must not be empty"));
        }
        if params.process_id.len() > MAX_PROCESS_ID_BYTES {
            return Err(too_long_id(&params.process_id));
        }
        if let Some(at) = params.argv.iter().position(|arg| arg.contains('\0')) {
            return Err(ErrorObject::invalid_params(format!("argv[{at}] holds a NUL byte")));
        }
        if params.arg0.as_deref().is_some_and(|arg0| arg0.contains('\0')) {
            return Err(ErrorObject::invalid_params("arg0 holds a NUL byte"));
        }
        if std::os::unix::ffi::OsStrExt::as_bytes(params.cwd.as_os_str()).contains(&0) {
            return Err(ErrorObject::invalid_params("cwd holds a NUL byte"));
        }
        sandbox::check_request(params.sandbox.as_ref(), &self.limits.sandbox)?;
        if let Some(name) = params.env.keys().find(|n| n.is_empty() || n.contains(['=', '\0'])) {
            return Err(ErrorObject::invalid_params(format!(
                "env name {name:?} is invalid: a name must be non-empty, without '=' or NUL"
            )));
        }
        if let Some((name, _)) = params.env.iter().find(|(_, value)| value.contains('\0')) {
            return Err(ErrorObject::invalid_params(format!(
                "the value of env {name:?} holds a NUL byte"
            )));
        }
        if self.entries.contains_key(&params.process_id) {
            return Err(ErrorObject::invalid_request(format!(
                "process {} already exists",
                params.process_id
            )));
        }
        let live = self.entries.values().filter(|e| e.is_running()).count();
        // Whether this start can go depends on the starts under way (one with
        // the same id, or the limit counting them): it waits for their outcome.
        let same_id = self.starting.iter().any(|s| s.params.process_id == params.process_id);
        let limit = self.limits.max_processes;
        if same_id || (live < limit && live + self.starting.len() >= limit) {
            return Ok(Begun::MustWait);
        }
        if live >= limit {
            return Err(ErrorObject::invalid_request(format!(
                "too many processes: the limit is {} live processes per connection",
                self.limits.max_processes
            )));
        }
        if !params.tty && params.size.is_some() {
            return Err(ErrorObject::invalid_request(format!(
                "size is only valid for a tty process, and process {} is not one",
                params.process_id
            )));
        }
        let tree_limits = crate::limits::resolve(params.limits.as_ref(), &self.limits.tree)?;
        let charge = self.charge_start(&params)?;
        registry::reap_disowned();
        let serial = self.next_serial;
        self.next_serial += 1;
        let work_params = params.clone();
        let settings = self.limits.sandbox.clone();
        let outcome = self.spawner.submit(Box::new(move || {
            let cwd = roots.check_cwd(&work_params.cwd)?;
            let mut policy =
                sandbox::resolve(work_params.sandbox.as_ref(), &settings, &roots, &cwd.path)?;
            if let Some(policy) = policy.as_mut() {
                policy.exit_on_exec_failure = shape.exit_on_exec_failure;
            }
            let params = StartParams { cwd: cwd.path, ..work_params };
            let confined = policy.as_ref().map(|policy| (policy, settings.helper.as_deref()));
            // The server's own processes in a sandboxed tree: its trampoline
            // and init, and the network helper.
            let helpers = policy.as_ref().map_or(0, |policy| 2 + u64::from(policy.network));
            let group = tree_limits
                .map(|limits| crate::limits::Group::create(limits, helpers).map(Arc::new))
                .transpose()
                .map_err(|refusal| crate::limits::refused(&refusal))?;
            let grouped = group.as_ref().map(|group| (group, settings.helper.as_deref()));
            Entry::spawn(&params, cwd.dir.as_ref(), confined, grouped).map_err(|error| match error {
                SpawnError::Io(error) if matches!(error.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                    ErrorObject::internal(format!(
                        "failed to start `{}`: {error}: the server is out of file descriptors (its limit, RLIMIT_NOFILE, is {}, and each process takes up to {FDS_PER_PROCESS})",
                        params.argv[0],
                        descriptor_limit()
                    ))
                }
                SpawnError::Io(error) => {
                    ErrorObject::internal(format!("failed to start `{}`: {error}", params.argv[0]))
                }
                SpawnError::Sandbox(reason) => ErrorObject::invalid_request(format!(
                    "cannot sandbox `{}`: {reason}",
                    params.argv[0]
                )),
            })
        }));
        self.starting.push_back(Starting { request, serial, params, shape, charge, outcome });
        Ok(Begun::Spawning)
    }

    /// Charges what a start stores (argv, env and cwd while it starts; argv
    /// and id while its entry lives) to the stored-command budgets of the
    /// connection and the server; refused when it cannot fit.
    fn charge_start(&mut self, params: &StartParams) -> Result<Charge, ErrorObject> {
        let cost = stored_cost(
            params
                .argv
                .iter()
                .chain([&params.process_id])
                .chain(params.env.iter().flat_map(|(name, value)| [name, value]))
                .chain(params.arg0.iter()),
        ) + params.cwd.as_os_str().len();
        let (connection, server) = (self.account.commands(), self.limits.server_account.commands());
        if connection + cost > CONNECTION_COMMANDS || server + cost > SERVER_COMMANDS {
            return Err(ErrorObject::invalid_request(format!(
                "process/start refused: its argv, env and cwd take {cost} bytes, and stored commands may take {} more on this connection (of {CONNECTION_COMMANDS}) and {} more on the server (of {SERVER_COMMANDS}); forgotten processes give theirs back",
                CONNECTION_COMMANDS.saturating_sub(connection),
                SERVER_COMMANDS.saturating_sub(server),
            )));
        }
        Ok(Charge::new(self.account.clone(), cost))
    }

    /// The limits of a start that names none.
    pub(crate) fn default_limits(&self) -> &crate::protocol::ProcessLimits {
        &self.limits.tree
    }

    /// Whether a start waits for the spawner (later process requests wait too).
    pub(crate) fn is_starting(&self) -> bool {
        !self.starting.is_empty()
    }

    /// What the table's own background work finished: a start (its encoded
    /// reply) or a `/proc` sweep (`None`). Pending forever while none runs.
    pub(crate) async fn next_done(&mut self) -> Option<String> {
        let starting = async {
            match self.starting.front_mut() {
                Some(starting) => (&mut starting.outcome).await,
                None => std::future::pending().await,
            }
        };
        let swept = async {
            match self.sweeps.join_next().await {
                Some(Ok(count)) => tracing::trace!(count, "sweep signalled processes"),
                Some(Err(error)) => tracing::warn!(%error, "a process sweep failed"),
                None => std::future::pending().await,
            }
        };
        let outcome = tokio::select! {
            outcome = starting => outcome,
            () = swept => return None,
        };
        Some(self.finish_start(outcome))
    }

    /// `process/start`, second half: the entry and the encoded reply.
    fn finish_start(
        &mut self,
        outcome: Result<spawner::Outcome, tokio::sync::oneshot::error::RecvError>,
    ) -> String {
        let Some(Starting { request, serial, params, shape, mut charge, .. }) =
            self.starting.pop_front()
        else {
            return String::new();
        };
        let outcome = outcome
            .unwrap_or_else(|_| Err(ErrorObject::internal("the spawner thread is gone")))
            .and_then(|spawned| {
                let account = self.account.clone();
                Entry::start(
                    serial,
                    &params,
                    shape,
                    spawned,
                    &self.events,
                    self.limits.retained_bytes,
                    account,
                )
                .map_err(|error| {
                    ErrorObject::internal(format!("failed to start `{}`: {error}", params.argv[0]))
                })
            });
        let result = outcome.map(|mut entry| {
            tracing::debug!(id = %params.process_id, pid = entry.pid, argv = ?params.argv, "started");
            // The entry keeps its argv (and id), not the env and cwd.
            charge.shrink_to(stored_cost(params.argv.iter().chain([&params.process_id])));
            entry.stored = Some(charge);
            if self.closing {
                // The connection ended while it started: it goes at once.
                let session = entry.signal_tree(&[Signal::KILL]);
                self.sweep(vec![session], &[Signal::KILL]);
            }
            let sandbox_type = shape.start_sandbox_type(params.sandbox.as_ref(), entry.sandbox_type);
            self.ids.insert(serial, params.process_id.clone());
            self.entries.insert(params.process_id.clone(), entry);
            StartResult { process_id: params.process_id.clone(), sandbox_type }
        });
        encode_response(&request, &result)
    }

    /// `process/read`. A read with `waitMs` and nothing to return is parked.
    pub(crate) fn read(
        &mut self,
        request: crate::protocol::RequestId,
        params: ReadParams,
        now: Instant,
    ) -> Result<ReadOutcome, ErrorObject> {
        let entry = self.get(&params.process_id)?;
        let after = params.after_seq.unwrap_or(0);
        let wait = params.wait_ms.map(Duration::from_millis).filter(|w| !w.is_zero());
        match wait {
            Some(wait) if !entry.read_ready(after) => {
                if self.parked.len() >= MAX_PARKED {
                    return Err(ErrorObject::invalid_request(format!(
                        "too many waiting reads: the limit is {MAX_PARKED} per connection; answer some before parking more"
                    )));
                }
                let serial = entry.serial;
                let wait_id = self.next_serial;
                self.next_serial += 1;
                let at = now + wait.min(MAX_WAIT);
                let deadline = self.timers.schedule(at, Timer::ReadDeadline(wait_id));
                self.parked.insert(wait_id, ParkedRead { request, serial, params, deadline });
                self.parked_by_process.entry(serial).or_default().insert(wait_id);
                Ok(ReadOutcome::Parked)
            }
            _ => Ok(ReadOutcome::Ready(self.read_reply(&request, Ok(entry), &params))),
        }
    }

    /// `process/write`: queued for the process's stdin, bounded in bytes. A
    /// refusal says which [`WriteStatus`] it is, when it is one.
    pub(crate) fn write(
        &mut self,
        params: WriteParams,
    ) -> Result<WriteResult, (Option<WriteStatus>, ErrorObject)> {
        let id = &params.process_id;
        if id.len() > MAX_PROCESS_ID_BYTES {
            return Err((None, too_long_id(id)));
        }
        if let Some(write_id) = &params.write_id {
            write_ids::WriteIds::check(write_id, id).map_err(|e| (None, e))?;
        }
        let entry = self.get_mut(id).map_err(|e| (Some(WriteStatus::UnknownProcess), e))?;
        if params.write_id.as_deref().is_some_and(|w| entry.write_ids.contains(w)) {
            tracing::debug!(%id, "a retried write was acknowledged again, not applied");
            return Ok(WriteResult { accepted: true, status: WriteStatus::Accepted });
        }
        let closed = |error| (Some(WriteStatus::StdinClosed), error);
        entry.write_stdin(params).map_err(|error| match error {
            StdinRefusal::Closed(error) => closed(error),
            StdinRefusal::Other(error) => (None, error),
        })
    }
}

/// Why stdin took no write.
enum StdinRefusal {
    Closed(ErrorObject),
    Other(ErrorObject),
}

impl Entry {
    fn write_stdin(&mut self, params: WriteParams) -> Result<WriteResult, StdinRefusal> {
        let entry = self;
        let id = &params.process_id;
        use StdinRefusal::Other;
        if entry.tty && params.close_stdin {
            return Err(Other(ErrorObject::invalid_request(format!(
                "closeStdin is not supported for tty process {id}: write the terminal's EOF character (\\u0004) instead"
            ))));
        }
        let closed = || {
            StdinRefusal::Closed(ErrorObject::invalid_request(format!(
                "stdin is closed for process {id}"
            )))
        };
        // A terminal whose every holder is gone takes no input: refuse rather
        // than accept bytes that nobody can read.
        if entry.tty && !entry.streams_open() {
            entry.stdin = None;
        }
        let stdin = entry.stdin.as_ref().ok_or_else(closed)?;
        let op = StdinOp { bytes: params.chunk.0, close: params.close_stdin };
        match stdin.push(op) {
            Ok(()) => {}
            Err(StdinError::TooLarge(size)) => {
                return Err(Other(ErrorObject::invalid_request(format!(
                    "the chunk for process {id} is too large: {size} bytes, and at most {STDIN_LIMIT} bytes of stdin can wait; send it in pieces"
                ))))
            }
            Err(StdinError::Full(queued)) => {
                return Err(Other(ErrorObject::invalid_request(format!(
                    "stdin of process {id} is full: {queued} bytes wait for it to read, and the limit is {STDIN_LIMIT} bytes"
                ))))
            }
            Err(StdinError::Closed) => {
                entry.stdin = None;
                return Err(closed());
            }
        }
        if let Some(write_id) = &params.write_id {
            entry.write_ids.insert(write_id);
        }
        if params.close_stdin {
            entry.stdin = None;
        }
        Ok(WriteResult { accepted: true, status: WriteStatus::Accepted })
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
            | ProcEvent::Exited { serial, .. } => *serial,
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
                    if entry.output.clear() {
                        tracing::debug!(id = %entry.id, "dropped an exited process's output: over the retention budget");
                    }
                }
                continue;
            }
            let Some(entry) = self.ids.get(&pushed).and_then(|id| self.entries.get_mut(id)) else {
                return;
            };
            if !entry.output.drop_oldest() {
                return;
            }
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

    /// A blocking sweep (it reads `/proc`) that ends every family of this
    /// session, the descendants that left its sessions (setsid) included,
    /// with none able to slip away meanwhile (see [`tree::end_families`]):
    /// run it off the loop when a session ends (a detached one follows it
    /// with [`ProcessTable::kill_all`] for what started meanwhile).
    pub(crate) fn family_ender(&self) -> impl FnOnce() -> usize + Send + 'static {
        let leaders: Vec<u32> =
            self.entries.values().filter(|e| e.is_running()).map(|e| e.pid).collect();
        let sessions = self.all_sessions();
        let groups = self.all_groups();
        move || tree::end_families(&leaders, &sessions) + tree::kill_groups(&groups)
    }

    /// While held (a detached session), exited processes are not forgotten
    /// when their id reservation passes: the client has not been told yet.
    /// Released, each gets a whole reservation again from now.
    pub(crate) fn hold_exited(&mut self, hold: bool, now: Instant) {
        self.holding = hold;
        if !hold {
            self.released = Some(now);
            let serials: Vec<u64> = self.entries.values().map(|entry| entry.serial).collect();
            for serial in serials {
                self.timers.schedule(now + self.limits.reservation, Timer::Forget(serial));
            }
        }
    }

    /// Ends the session at its client's word (`session/end`): one
    /// [`ProcessTable::family_ender`] sweep, off the loop.
    pub(crate) fn end_session(&mut self) {
        self.closing = true;
        if !self.entries.is_empty() || !self.lingering.is_empty() {
            self.sweeps.spawn_blocking(self.family_ender());
        }
    }

    /// Kills every process group and session (connection end), in one
    /// sweep, and everything in the cgroups of limited processes.
    pub(crate) fn kill_all(&mut self) {
        self.closing = true;
        let lingering = self.lingering.iter().map(|(session, _)| *session);
        let sessions: Vec<Session> = self
            .entries
            .values()
            .map(|entry| entry.signal_tree(&[Signal::KILL]))
            .chain(lingering)
            .collect();
        self.sweep(sessions, &[Signal::KILL]);
        let groups = self.all_groups();
        if !groups.is_empty() {
            self.sweeps.spawn_blocking(move || tree::kill_groups(&groups));
        }
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

    /// Answers every parked read with what there is now.
    pub(crate) fn answer_all_parked(&mut self, out: &mut Vec<Line>) {
        let mut waits: Vec<u64> = self.parked.keys().copied().collect();
        waits.sort_unstable();
        for wait_id in waits {
            if let Some(parked) = self.unpark(wait_id) {
                self.answer(parked, out);
            }
        }
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

    /// Drops the entry of `id`; its session lingers (see `lingering`).
    fn forget(&mut self, id: &str) {
        let Some(entry) = self.entries.remove(id) else { return };
        // A cgroup still in use (a background job) lingers too, to be killed at the end.
        if let Some(group) = entry.group.clone().filter(|group| !group.members().is_empty()) {
            self.lingering_groups.push_back(group);
            if self.lingering_groups.len() > MAX_LINGERING {
                self.lingering_groups.pop_front();
            }
        }
        self.lingering.push_back((entry.session(), entry.pid));
        if self.lingering.len() > MAX_LINGERING {
            if let Some((_, pid)) = self.lingering.pop_front() {
                registry::forgotten(pid);
            }
        }
    }

    /// Every session to sweep when the table ends: its processes' and the lingering ones.
    fn all_sessions(&self) -> Vec<Session> {
        let lingering = self.lingering.iter().map(|(session, _)| *session);
        self.entries.values().map(Entry::session).chain(lingering).collect()
    }

    /// The cgroups of its limited processes, forgotten ones included.
    fn all_groups(&self) -> Vec<Arc<crate::limits::Group>> {
        let live = self.entries.values().filter_map(|entry| entry.group.clone());
        live.chain(self.lingering_groups.iter().cloned()).collect()
    }

    /// Runs a `/proc` sweep of `sessions` off the loop.
    fn sweep(&mut self, sessions: Vec<Session>, signals: &[Signal]) {
        if sessions.is_empty() {
            return;
        }
        let signals = signals.to_vec();
        self.sweeps.spawn_blocking(move || tree::signal_sessions(&sessions, &signals));
    }

    /// Removes a parked read and its deadline timer.
    fn unpark(&mut self, wait_id: u64) -> Option<ParkedRead> {
        let parked = self.parked.remove(&wait_id)?;
        self.timers.cancel(parked.deadline);
        if let Some(waits) = self.parked_by_process.get_mut(&parked.serial) {
            waits.remove(&wait_id);
            if waits.is_empty() {
                self.parked_by_process.remove(&parked.serial);
            }
        }
        Some(parked)
    }

    /// Answers the parked reads of `serial` that now have something to return.
    fn wake(&mut self, serial: u64, out: &mut Vec<Line>) {
        let Some(waits) = self.parked_by_process.get(&serial) else { return };
        let Some(entry) = self.entry_by_serial(serial) else { return };
        let ready: Vec<u64> = waits
            .iter()
            .copied()
            .filter(|wait_id| {
                self.parked
                    .get(wait_id)
                    .is_some_and(|p| entry.read_ready(p.params.after_seq.unwrap_or(0)))
            })
            .collect();
        for wait_id in ready {
            if let Some(parked) = self.unpark(wait_id) {
                self.answer(parked, out);
            }
        }
    }

    fn answer(&self, parked: ParkedRead, out: &mut Vec<Line>) {
        let entry =
            self.entry_by_serial(parked.serial).ok_or_else(|| unknown(&parked.params.process_id));
        out.push(self.read_reply(&parked.request, entry, &parked.params));
    }

    /// A `process/read` answer, charged to the server-wide room until it is
    /// written: the page is cut to what the room has free (as `maxBytes`
    /// would cut it; the first chunk always goes, so a full room still
    /// answers with one chunk, uncharged where the room lacks it).
    fn read_reply(
        &self,
        request: &crate::protocol::RequestId,
        entry: Result<&Entry, ErrorObject>,
        params: &ReadParams,
    ) -> Line {
        let room = self.account.tunnel_room(self.limits.server_retained);
        let result = entry.map(|entry| {
            // base64 is 4/3 of the bytes; the JSON of each chunk about 64 more.
            let free = (room.available_permits() / 4 * 3) as u64;
            let max_bytes = Some(params.max_bytes.map_or(free, |asked| asked.min(free)));
            entry.read(&ReadParams { max_bytes, ..params.clone() })
        });
        let line = encode_response(request, &result);
        let held = crate::hold::Held::try_take(&[&room], &self.account, line.len());
        Line::charged(line, held)
    }
}

/// The most bytes a `metadata` value may hold.
pub(crate) const MAX_METADATA_BYTES: usize = 256;

/// A start's `metadata`, checked, into the process's environment.
fn export_metadata(params: &mut StartParams) -> Result<(), ErrorObject> {
    let Some(metadata) = params.metadata.take() else { return Ok(()) };
    let fields = [
        ("threadId", "CODEX_THREAD_ID", metadata.thread_id),
        ("toolCallId", "CODEX_TOOL_CALL_ID", metadata.tool_call_id),
    ];
    for (field, variable, value) in fields {
        let Some(value) = value else { continue };
        if value.len() > MAX_METADATA_BYTES || value.contains(['\0', '\n', '\r']) {
            return Err(ErrorObject::invalid_params(format!(
                "metadata.{field} must be a string of at most {MAX_METADATA_BYTES} bytes without NUL or newline"
            )));
        }
        params.env.insert(variable.to_owned(), value);
    }
    Ok(())
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
