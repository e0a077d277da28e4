//! The exec tools (`exec_command`, `write_stdin`, `kill_session`) over the
//! one engine: each command is a process of the in-process server, started
//! through our own [`Client`] (so it gets the sandbox, the bounds and the
//! tree kill), and a session is a small integer that names it. A pump task
//! per session takes its output as it comes (between two answers it keeps the
//! first [`HEAD`] bytes and the last [`TAIL`]; what lies between is counted
//! and cut, as Codex's head and tail buffers do), and the tools wait for it,
//! or for the exit, up to their yield time.
//!
//! What the sessions keep is charged to the engine's account, within the
//! server's room (`--max-retained-bytes`), like every byte the server holds:
//! past it, the kept output of ended sessions goes first, oldest first, then
//! that of other running ones, then the writer's own head (an answer then
//! shows what was cut, as for any long output).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::text::Answer;
use crate::account::Account;
use crate::client::lock;
use crate::protocol::{LimitHit, ProcessTerminate, ProcessWrite, TerminateParams, WriteParams};
use crate::{Client, Sandbox, StartParams};

/// The first output bytes a session keeps for its next answer.
const HEAD: usize = 512 * 1024;
/// The last output bytes a session keeps for its next answer (the rest of
/// one MiB: what an answer can show whatever its `max_output_tokens`).
const TAIL: usize = 512 * 1024;
/// Sessions running at once.
pub(crate) const MAX_SESSIONS: usize = 64;
/// How long a kill waits for the process's last output and exit.
const KILL_WAIT: Duration = Duration::from_secs(2);

/// How commands are confined.
#[derive(Debug, Clone)]
pub(crate) struct Confinement {
    /// Sandboxed with the roots writable (false only with `--mcp-unsandboxed`).
    pub(crate) sandbox: bool,
    /// The sandbox keeps the host's network.
    pub(crate) network: bool,
    /// The sandbox reaches only these hosts, through the proxy (`--mcp-allow-host`).
    pub(crate) allow_hosts: Vec<String>,
}

/// What `exec_command` asks for.
pub(crate) struct Command {
    pub(crate) cmd: String,
    pub(crate) workdir: Option<PathBuf>,
    pub(crate) tty: bool,
    pub(crate) yield_time: Duration,
    pub(crate) max_output_tokens: usize,
    pub(crate) shell: Option<String>,
    pub(crate) login: bool,
}

/// Where the sessions' kept output is charged: the engine's account, and
/// the server's room it must stay within.
#[derive(Clone)]
pub(crate) struct Room {
    pub(crate) account: Arc<Account>,
    pub(crate) limit: usize,
}

impl Room {
    fn over(&self) -> bool {
        self.account.bytes() > self.limit
    }
}

/// What a session's pump has gathered since the last answer.
struct Gathered {
    output: Output,
    /// The exit code, once the output has ended and the process exited.
    exit: Option<i32>,
    /// Its memory limit killed a process of its tree.
    memory_killed: bool,
    /// The pump ended (exit known, or the connection to the engine lost).
    done: bool,
}

impl Gathered {
    fn new(account: &Arc<Account>) -> Gathered {
        Gathered { output: Output::new(account), exit: None, memory_killed: false, done: false }
    }
}

struct Session {
    process_id: String,
    gathered: Arc<Mutex<Gathered>>,
    changed: Arc<Notify>,
    pump: JoinHandle<()>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.pump.abort();
    }
}

/// Sessions by id, and starts under way (which count against the limit).
#[derive(Default)]
struct Table {
    sessions: HashMap<u32, Arc<Session>>,
    starting: usize,
}

impl Table {
    /// Sessions whose process still runs, and starts under way.
    fn live(&self) -> usize {
        let running = self.sessions.values().filter(|s| !lock(&s.gathered).done).count();
        running + self.starting
    }

    /// Keeps at most [`MAX_KEPT`] sessions: the oldest whose end nobody
    /// asked for go first (a session that ended is kept to be reported).
    fn forget_ended(&mut self) {
        while self.sessions.len() > MAX_KEPT {
            let oldest = self
                .sessions
                .iter()
                .filter(|(_, s)| lock(&s.gathered).done)
                .map(|(id, _)| *id)
                .min();
            match oldest {
                Some(id) => self.sessions.remove(&id),
                None => return,
            };
        }
    }
}

/// A start under way, counted until dropped.
struct Starting<'a>(&'a Mutex<Table>);

/// Brings the kept output back within the room after session `own`'s pump
/// added to it: ended sessions' first, oldest first, then other running
/// ones', then `own`'s head.
fn make_room(table: &Mutex<Table>, own: u32, room: &Room) {
    let mut others: Vec<(bool, u32, Arc<Mutex<Gathered>>)> = lock(table)
        .sessions
        .iter()
        .filter(|(id, _)| **id != own)
        .map(|(id, session)| (!lock(&session.gathered).done, *id, session.gathered.clone()))
        .collect();
    others.sort_by_key(|(running, id, _)| (*running, *id));
    for (_, _, gathered) in others {
        if !room.over() {
            return;
        }
        lock(&gathered).output.cut();
    }
    if room.over() {
        let session = lock(table).sessions.get(&own).cloned();
        if let Some(session) = session {
            lock(&session.gathered).output.cut_head();
        }
    }
}

impl Drop for Starting<'_> {
    fn drop(&mut self) {
        lock(self.0).starting -= 1;
    }
}

/// Sessions kept, ended ones included (their last output waits to be read).
const MAX_KEPT: usize = 4 * MAX_SESSIONS;

/// The sessions of one MCP connection.
pub(crate) struct Exec {
    client: Client,
    confinement: Confinement,
    /// The server's default memory limit, which every command runs under.
    memory_limit: Option<u64>,
    table: Arc<Mutex<Table>>,
    room: Room,
    next: AtomicU32,
}

impl Exec {
    pub(crate) fn new(
        client: Client,
        confinement: Confinement,
        memory_limit: Option<u64>,
        room: Room,
    ) -> Exec {
        let table = Arc::default();
        Exec { client, confinement, memory_limit, table, room, next: AtomicU32::new(1) }
    }

    /// `exec_command`: starts `command` beneath `roots` (writable), waits.
    pub(crate) async fn exec_command(
        &self,
        command: Command,
        roots: &[PathBuf],
        started_session: &Mutex<Option<u32>>,
    ) -> Result<(String, Value), String> {
        let _starting = {
            let mut table = lock(&self.table);
            if table.live() >= MAX_SESSIONS {
                return Err(format!(
                    "too many running sessions (at most {MAX_SESSIONS}): end one with kill_session, or let it finish"
                ));
            }
            table.starting += 1;
            Starting(&self.table)
        };
        let started = Instant::now();
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let process_id = process_id(id);
        // Known before the start: a call cancelled during it still kills it.
        *lock(started_session) = Some(id);
        let shell = command.shell.unwrap_or_else(default_shell);
        let flag = if command.login { "-lc" } else { "-c" };
        let cwd = match command.workdir.or_else(|| roots.first().cloned()) {
            Some(cwd) => cwd,
            None => std::env::current_dir().map_err(|e| format!("no working directory: {e}"))?,
        };
        let mut params =
            StartParams::new(process_id.clone(), [shell.as_str(), flag, &command.cmd], &cwd);
        params.env = std::env::vars().collect();
        params = if command.tty { params.with_tty(24, 80) } else { params.with_stdin() };
        if self.confinement.sandbox {
            let sandbox = Sandbox::restricted(roots.iter().cloned());
            let sandbox = match self.confinement.allow_hosts.is_empty() {
                true => sandbox.network(self.confinement.network),
                false => sandbox.network_policy(crate::protocol::NetworkPolicy::allow(
                    self.confinement.allow_hosts.iter().cloned(),
                )),
            };
            params = params.sandbox(sandbox);
        }
        let process = self
            .client
            .start(params)
            .await
            .map_err(|e| format!("cannot start `{}` in {}: {e}", command.cmd, cwd.display()))?;
        let gathered = Arc::new(Mutex::new(Gathered::new(&self.room.account)));
        let changed = Arc::new(Notify::new());
        let kept = Kept { table: self.table.clone(), id, room: self.room.clone() };
        let pump = tokio::spawn(pump(process, gathered.clone(), changed.clone(), kept));
        let session = Arc::new(Session { process_id, gathered, changed, pump });
        {
            let mut table = lock(&self.table);
            table.sessions.insert(id, session.clone());
            table.forget_ended();
        }
        self.answer(id, &session, started, started + command.yield_time, command.max_output_tokens)
            .await
    }

    /// `write_stdin`: writes `chars` (if any) to session `id`, waits.
    pub(crate) async fn write_stdin(
        &self,
        id: u32,
        chars: &str,
        yield_time: Duration,
        max_output_tokens: usize,
    ) -> Result<(String, Value), String> {
        let started = Instant::now();
        let session = self.session(id)?;
        if !chars.is_empty() {
            let params = WriteParams::new(session.process_id.clone(), chars.as_bytes().to_vec());
            self.client
                .call::<ProcessWrite>(&params)
                .await
                .map_err(|e| format!("cannot write to session {id}: {e}"))?;
        }
        self.answer(id, &session, started, started + yield_time, max_output_tokens).await
    }

    /// `kill_session`: ends session `id` and everything it started.
    pub(crate) async fn kill(&self, id: u32) -> Result<(String, Value), String> {
        let started = Instant::now();
        let session = self.session(id)?;
        let params = TerminateParams::new(session.process_id.clone());
        self.client
            .call::<ProcessTerminate>(&params)
            .await
            .map_err(|e| format!("cannot kill session {id}: {e}"))?;
        self.answer(id, &session, started, started + KILL_WAIT, 10_000).await
    }

    /// Kills the session `id` if it runs (a cancelled call's).
    /// (Sent whether or not its start finished: the engine takes requests in
    /// order, so a terminate after a start in flight comes after it.)
    pub(crate) async fn abandon(&self, id: u32) {
        lock(&self.table).sessions.remove(&id);
        let params = TerminateParams::new(process_id(id));
        let _ = self.client.call::<ProcessTerminate>(&params).await;
    }

    fn session(&self, id: u32) -> Result<Arc<Session>, String> {
        lock(&self.table).sessions.get(&id).cloned().ok_or_else(|| {
            format!("unknown session ID {id}: it exited and was reported, or never existed")
        })
    }

    /// Waits until the process is done or `deadline`, then answers with the
    /// output gathered since the last answer; a done session is forgotten.
    async fn answer(
        &self,
        id: u32,
        session: &Session,
        started: Instant,
        deadline: Instant,
        max_output_tokens: usize,
    ) -> Result<(String, Value), String> {
        loop {
            let changed = session.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if lock(&session.gathered).done {
                break;
            }
            let deadline = tokio::time::Instant::from_std(deadline);
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                break;
            }
        }
        let (output, exit, done, memory_killed) = {
            let mut gathered = lock(&session.gathered);
            let output = std::mem::replace(&mut gathered.output, Output::new(&self.room.account));
            (output, gathered.exit, gathered.done, gathered.memory_killed)
        };
        if done {
            lock(&self.table).sessions.remove(&id);
        }
        let answer = Answer {
            wall: started.elapsed(),
            exit_code: exit,
            memory_limit: self.memory_limit.filter(|_| memory_killed),
            session_id: Some(id),
            head: &output.head,
            tail: &output.tail,
            produced: output.produced,
            max_output_tokens,
        };
        Ok(answer.render())
    }
}

/// The engine's process id of session `id`.
fn process_id(id: u32) -> String {
    format!("mcp-{id}")
}

/// Where a pump's session is kept, to make room in.
struct Kept {
    table: Arc<Mutex<Table>>,
    id: u32,
    room: Room,
}

/// Takes the process's output until it ends, then its exit.
async fn pump(
    mut process: crate::Process,
    gathered: Arc<Mutex<Gathered>>,
    changed: Arc<Notify>,
    kept: Kept,
) {
    while let Ok(Some(chunk)) = process.next_output().await {
        lock(&gathered).output.push(&chunk.bytes);
        if kept.room.over() {
            make_room(&kept.table, kept.id, &kept.room);
        }
        changed.notify_waiters();
    }
    let exit = process.wait().await.ok();
    let mut done = lock(&gathered);
    done.memory_killed = exit.as_ref().is_some_and(|e| e.limit == Some(LimitHit::Memory));
    done.exit = exit.map(|status| status.code);
    done.done = true;
    drop(done);
    changed.notify_waiters();
}

/// The output since the last answer: its first [`HEAD`] bytes, its last
/// [`TAIL`] (after the head), and how many bytes were produced in all; the
/// memory it holds is charged to the engine's account.
struct Output {
    head: Vec<u8>,
    tail: Vec<u8>,
    produced: usize,
    account: Arc<Account>,
    charged: usize,
}

impl Output {
    fn new(account: &Arc<Account>) -> Output {
        Output {
            head: Vec::new(),
            tail: Vec::new(),
            produced: 0,
            account: account.clone(),
            charged: 0,
        }
    }

    fn push(&mut self, mut bytes: &[u8]) {
        self.produced += bytes.len();
        let into_head = (HEAD - self.head.len()).min(bytes.len());
        self.head.extend_from_slice(&bytes[..into_head]);
        bytes = &bytes[into_head..];
        if bytes.len() >= TAIL {
            self.tail.clear();
            self.tail.extend_from_slice(&bytes[bytes.len() - TAIL..]);
        } else {
            let over = (self.tail.len() + bytes.len()).saturating_sub(TAIL);
            self.tail.drain(..over);
            self.tail.extend_from_slice(bytes);
        }
        self.settle();
    }

    /// Lets go of everything kept (it is then reported as cut).
    fn cut(&mut self) {
        self.head = Vec::new();
        self.tail = Vec::new();
        self.settle();
    }

    /// Lets go of the head (the newest output, in the tail, stays).
    fn cut_head(&mut self) {
        self.head = Vec::new();
        self.settle();
    }

    /// Charges what the buffers hold now.
    fn settle(&mut self) {
        let now = self.head.capacity() + self.tail.capacity();
        if now > self.charged {
            self.account.hold(now - self.charged);
        } else {
            self.account.release(self.charged - now);
        }
        self.charged = now;
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        self.account.release(self.charged);
    }
}

/// `$SHELL`, else /bin/bash, else /bin/sh.
fn default_shell() -> String {
    std::env::var("SHELL")
        .ok()
        .filter(|shell| !shell.is_empty())
        .or_else(|| std::path::Path::new("/bin/bash").exists().then(|| "/bin/bash".to_owned()))
        .unwrap_or_else(|| "/bin/sh".to_owned())
}
