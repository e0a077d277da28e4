//! The MCP face: a stdio connection whose first message is MCP's (see
//! [`sniff`]; `crate::stdio` chooses) is served as a Model Context Protocol server (versions
//! 2025-06-18 and 2025-11-25 after `initialize`, and the stateless 2026-07-28,
//! [`modern`], chosen by the first request that speaks it) with Codex's exec and file tools. It is an edge
//! like the dialects: MCP calls become calls of our own [`crate::Client`]
//! to the one engine, a server running in this process ([`exec`] for
//! processes, with the sandbox and bounds; [`files`] for files, confined to
//! the client's roots), and their answers become MCP results. The core knows
//! nothing of MCP.
//!
//! The loop only routes: tool calls run as tasks it owns (cancelled by
//! `notifications/cancelled`), and `roots/list` is asked of the client when
//! it declares roots and again when they change.

mod calls;
mod exec;
mod files;
mod modern;
mod rpc;
mod sniff;
mod text;
mod tools;

pub(crate) use self::exec::Confinement;
pub(crate) use self::sniff::opens_mcp;

use std::collections::HashMap;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinSet};

use self::exec::Exec;
use self::files::Files;
use self::rpc::{
    error, result, Incoming, INTERNAL_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR,
};
use crate::client::lock;
use crate::server::Config;
use crate::transport;

/// The MCP versions served; the last is answered to a client that asks for another.
const VERSIONS: [&str; 2] = ["2025-06-18", "2025-11-25"];
/// How often a long call with a `progressToken` reports progress.
const PROGRESS_INTERVAL: Duration = Duration::from_secs(1);
/// How long a tool call waits for the client's first `roots/list` answer.
pub(crate) const ROOTS_WAIT: Duration = Duration::from_secs(10);
/// How long calls under way may still finish once the input ended.
const EOF_LINGER: Duration = Duration::from_secs(10);
/// Tool calls running at once; beyond, a call is answered with an error.
const MAX_CALLS: usize = 64;

/// What the tools share.
struct Engine {
    exec: Exec,
    /// The client's roots, or the server's directory when the client
    /// declares none; `None` while the client's answer to `roots/list` is
    /// awaited (no command runs, no file is touched until it comes).
    roots: tokio::sync::watch::Sender<Option<Vec<PathBuf>>>,
    /// The file tools, made for the roots of the moment.
    files: tokio::sync::Mutex<Option<Arc<Files>>>,
}

/// What the server tells a client of itself.
const INSTRUCTIONS: &str = "Runs shell commands and works on files, sandboxed: commands may write only beneath the roots. Long-running commands answer with a session ID; continue them with write_stdin.";

/// Which revision a connection speaks, decided by its first request that
/// settles it: `initialize` (the handshake era) or one of 2026-07-28.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Era {
    Undecided,
    Handshake,
    Modern,
}

/// The roots a `roots/list` result names: `file:` URIs of directories here.
fn roots_from(listed: &[Value]) -> Vec<PathBuf> {
    let mut roots = Vec::new();
    for uri in listed.iter().filter_map(|root| root.get("uri").and_then(Value::as_str)) {
        match crate::dialect::uri::to_path(uri) {
            Ok(path) if path.is_dir() => roots.push(path),
            Ok(path) => {
                tracing::warn!(path = %path.display(), "a root that is not a directory here; left out")
            }
            Err(problem) => {
                tracing::warn!(uri, problem, "a root that is not a file: URI; left out")
            }
        }
    }
    roots
}

/// Serves one MCP connection until its input ends or `shutdown`.
pub(crate) async fn serve<R, W, S>(
    reader: R,
    writer: W,
    config: Config,
    confinement: Confinement,
    shutdown: S,
) -> io::Result<()>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
    S: std::future::Future<Output = ()>,
{
    tracing::info!("serving MCP");
    let limit = config.max_message_bytes;
    let memory_limit = config.limits.memory_bytes;
    // The engine's account: what it retains and what the sessions keep, in one room.
    let room = exec::Room { account: Arc::default(), limit: config.max_retained_bytes };
    let client = crate::Client::in_process_counted(config, room.account.clone())
        .await
        .map_err(|e| io::Error::other(format!("cannot start the engine: {e}")))?;
    let cwd = std::env::current_dir().map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot read the current directory, the default root: {e}"),
        )
    })?;
    let engine = Arc::new(Engine {
        exec: Exec::new(client, confinement, memory_limit, room),
        roots: tokio::sync::watch::Sender::new(Some(vec![cwd.clone()])),
        files: tokio::sync::Mutex::new(None),
    });
    let (out, writer_task) = transport::spawn_writer(writer);
    let (lines_tx, mut lines) = mpsc::channel::<Option<Vec<u8>>>(16);
    let reader_task = tokio::spawn(async move {
        let mut reader = BufReader::with_capacity(transport::INPUT_BUFFER, reader);
        let mut line = Vec::new();
        loop {
            let message = match transport::read_line_into(&mut reader, limit, &mut line).await {
                Ok(Some(true)) => Some(std::mem::take(&mut line)),
                Ok(Some(false)) => None,
                Ok(None) | Err(_) => break,
            };
            if lines_tx.send(message).await.is_err() {
                break;
            }
        }
    });
    let mut session = Session {
        engine,
        out: out.clone(),
        calls: JoinSet::new(),
        running: HashMap::new(),
        client_roots: false,
        initialized: false,
        era: Era::Undecided,
        cwd,
        asked: 0,
        limit,
    };
    tokio::pin!(shutdown);
    // After the input ends, calls under way may finish (for a while).
    let mut linger: Option<tokio::time::Instant> = None;
    loop {
        if linger.is_some() && session.calls.is_empty() {
            break;
        }
        let until = linger.unwrap_or_else(tokio::time::Instant::now);
        tokio::select! {
            line = lines.recv(), if linger.is_none() => match line {
                Some(Some(line)) => session.on_line(&line).await,
                Some(None) => session.send(error(&Value::Null, INVALID_REQUEST, &format!("message is longer than the limit of {limit} bytes (--max-message-bytes); it was discarded"))).await,
                None => linger = Some(tokio::time::Instant::now() + EOF_LINGER),
            },
            () = tokio::time::sleep_until(until), if linger.is_some() => break,
            Some(done) = session.calls.join_next(), if !session.calls.is_empty() => {
                if let Ok((key, line)) = done {
                    session.running.remove(&key);
                    session.send(line).await;
                }
            }
            () = &mut shutdown => break,
        }
    }
    tracing::info!("MCP connection ended");
    session.calls.abort_all();
    reader_task.abort();
    drop(session);
    drop(out);
    let _ = writer_task.await;
    Ok(())
}

/// Where an `exec_command` call records the session it started (a
/// cancelled call's session is killed).
type StartedSession = Arc<Mutex<Option<u32>>>;

/// One MCP connection's state, owned by its loop.
struct Session {
    engine: Arc<Engine>,
    out: mpsc::Sender<String>,
    /// Tool calls under way: each yields its request's key and answer line.
    calls: JoinSet<(String, String)>,
    /// By request key: the call's task and the session it started, if any.
    running: HashMap<String, (AbortHandle, StartedSession)>,
    /// The client declared `roots`.
    client_roots: bool,
    /// `initialize` was answered.
    initialized: bool,
    /// The revision this connection speaks.
    era: Era,
    /// The root of a modern call whose client declares none.
    cwd: PathBuf,
    /// `roots/list` requests sent (their ids are `roots-N`).
    asked: u64,
    limit: usize,
}

impl Session {
    async fn send(&self, line: String) {
        // A cancelled call's clean-up answers nothing.
        if !line.is_empty() {
            let _ = self.out.send(line).await;
        }
    }

    async fn on_line(&mut self, line: &[u8]) {
        // Strictly: a member named twice is refused (a proxy that reads the
        // first would disagree with us about what was asked).
        let parsed = std::str::from_utf8(line)
            .map_err(|e| e.to_string())
            .and_then(|text| crate::protocol::strict_json(text).map_err(|e| e.to_string()));
        let message: Value = match parsed {
            Ok(message) => message,
            Err(parse) => {
                return self
                    .send(error(&Value::Null, PARSE_ERROR, &format!("parse error: {parse}")))
                    .await
            }
        };
        match Incoming::classify(message) {
            Ok(Incoming::Request { id, method, params }) => {
                self.on_request(&method, id, params).await
            }
            Ok(Incoming::Notification { method, params }) => {
                self.on_notification(&method, &params).await
            }
            Ok(Incoming::Response { id, message }) => self.on_response(&id, &message).await,
            Err(Some(refusal)) => self.send(refusal).await,
            Err(None) => {}
        }
    }

    async fn on_request(&mut self, method: &str, id: Value, params: Value) {
        if self.era == Era::Modern && method == "initialize" {
            let asked = params.get("protocolVersion").and_then(Value::as_str).unwrap_or("");
            return self.send(modern::handshake_refused(&id, asked)).await;
        }
        if self.era == Era::Modern
            || (self.era == Era::Undecided && modern::speaks(method, &params))
        {
            return self.on_modern_request(method, id, params).await;
        }
        let line = match method {
            "initialize" if self.initialized => {
                error(&id, INVALID_REQUEST, "initialize may only be sent once per connection")
            }
            "tools/list" | "tools/call" if !self.initialized => error(
                &id,
                INVALID_REQUEST,
                "the connection is not initialized: send initialize first",
            ),
            "initialize" => {
                self.initialized = true;
                self.era = Era::Handshake;
                let asked = params.get("protocolVersion").and_then(Value::as_str).unwrap_or("");
                let version = VERSIONS.iter().find(|v| **v == asked).unwrap_or(&VERSIONS[1]);
                self.client_roots =
                    params.get("capabilities").and_then(|c| c.get("roots")).is_some();
                if self.client_roots {
                    // Nothing runs until the client has named its roots.
                    self.engine.roots.send_replace(None);
                }
                let client = params.pointer("/clientInfo/name").and_then(Value::as_str);
                tracing::info!(client, version, "MCP initialize");
                result(&id, json!({
                    "protocolVersion": version,
                    "capabilities": {"tools": {"listChanged": false}},
                    "serverInfo": {"name": env!("CARGO_PKG_NAME"), "version": env!("CARGO_PKG_VERSION")},
                    "instructions": INSTRUCTIONS
                }))
            }
            "ping" => result(&id, json!({})),
            "tools/list" => result(&id, tools::list()),
            "tools/call" => return self.start_call(id, params, None),
            "server/discover" => error(
                &id,
                METHOD_NOT_FOUND,
                "method not found: server/discover (this connection speaks MCP 2025-06-18 and 2025-11-25 since its initialize)",
            ),
            other => error(&id, METHOD_NOT_FOUND, &format!("method not found: {other}")),
        };
        self.send(line).await;
    }

    /// A request of MCP 2026-07-28: its envelope checked, then answered
    /// from it alone (the era is settled by the first good one).
    async fn on_modern_request(&mut self, method: &str, id: Value, params: Value) {
        let envelope = match modern::envelope(&id, &params) {
            Ok(envelope) => envelope,
            Err(line) => return self.send(line).await,
        };
        if self.era == Era::Undecided {
            tracing::info!(version = modern::MODERN, "MCP era");
            self.era = Era::Modern;
        }
        let line = match method {
            "server/discover" => result(&id, modern::discover(INSTRUCTIONS)),
            "tools/list" => result(&id, modern::tools(tools::list())),
            "ping" => result(&id, modern::complete(json!({}))),
            "tools/call" => {
                let needs_roots = matches!(
                    params.get("name").and_then(Value::as_str),
                    Some("exec_command" | "read_file" | "write_file" | "list_dir")
                );
                let roots = match modern::answered_roots(&params) {
                    Err(problem) => {
                        error(&id, rpc::INVALID_PARAMS, &format!("invalid params: {problem}"))
                    }
                    Ok(Some(roots)) => return self.start_call(id, params, Some(roots)),
                    Ok(None) if envelope.roots && needs_roots => {
                        result(&id, modern::ask_for_roots())
                    }
                    Ok(None) => return self.start_call(id, params, Some(vec![self.cwd.clone()])),
                };
                roots
            }
            other => error(&id, METHOD_NOT_FOUND, &format!("method not found: {other}")),
        };
        self.send(line).await;
    }

    async fn on_notification(&mut self, method: &str, params: &Value) {
        match method {
            "notifications/initialized" | "notifications/roots/list_changed"
                if self.client_roots =>
            {
                self.asked += 1;
                let ask = rpc::request(&format!("roots-{}", self.asked), "roots/list", json!({}));
                self.send(ask).await;
            }
            "notifications/cancelled" => {
                let key = params.get("requestId").map(Value::to_string).unwrap_or_default();
                if let Some((task, started)) = self.running.remove(&key) {
                    task.abort();
                    tracing::info!(request = %key, "tool call cancelled");
                    if let Some(session) = *lock(&started) {
                        let engine = self.engine.clone();
                        self.calls.spawn(async move {
                            engine.exec.abandon(session).await;
                            (String::new(), String::new())
                        });
                    }
                }
            }
            _ => {}
        }
    }

    async fn on_response(&mut self, id: &Value, message: &Value) {
        // Only the answer to the latest roots/list counts (a late answer to an
        // earlier one must not widen newer roots).
        if id.as_str() != Some(format!("roots-{}", self.asked).as_str()) || self.asked == 0 {
            return;
        }
        let Some(listed) = message.pointer("/result/roots").and_then(Value::as_array) else {
            tracing::warn!(%message, "the client's roots/list failed: nothing is writable");
            self.engine.roots.send_replace(Some(Vec::new()));
            return;
        };
        let roots = roots_from(listed);
        tracing::info!(?roots, "MCP roots");
        self.engine.roots.send_replace(Some(roots));
    }

    /// Runs a tool call as a task; `roots` are the call's own (a modern
    /// call), else those the client named for the connection.
    fn start_call(&mut self, id: Value, params: Value, roots: Option<Vec<PathBuf>>) {
        let key = id.to_string();
        if self.running.contains_key(&key) {
            let line = error(
                &id,
                INVALID_REQUEST,
                &format!("request id {key} is already in use by a call under way"),
            );
            self.calls.spawn(async move { (String::new(), line) });
            return;
        }
        if self.running.len() >= MAX_CALLS {
            let line = error(
                &id,
                INTERNAL_ERROR,
                &format!("too many tool calls under way (at most {MAX_CALLS})"),
            );
            self.calls.spawn(async move { (String::new(), line) });
            return;
        }
        let started = Arc::new(Mutex::new(None));
        let (engine, out, slot, limit) =
            (self.engine.clone(), self.out.clone(), started.clone(), self.limit);
        let task_key = key.clone();
        let task = self.calls.spawn(async move {
            let token = params.pointer("/_meta/progressToken").cloned();
            let modern = roots.is_some();
            let call = calls::call(&engine, &params, &slot, limit, roots);
            let line = match token {
                Some(token) => with_progress(call, &out, token).await,
                None => call.await,
            };
            let line = match line {
                Ok(answer) if modern => result(&id, modern::complete(answer)),
                Ok(answer) => result(&id, answer),
                Err((code, message)) => error(&id, code, &message),
            };
            (task_key, line)
        });
        self.running.insert(key, (task, started));
    }
}

/// Runs `call`, sending `notifications/progress` every [`PROGRESS_INTERVAL`].
async fn with_progress<F>(call: F, out: &mpsc::Sender<String>, token: Value) -> F::Output
where
    F: std::future::Future,
{
    tokio::pin!(call);
    let mut tick = tokio::time::interval(PROGRESS_INTERVAL);
    let mut seconds = 0u64;
    loop {
        tokio::select! {
            done = &mut call => return done,
            _ = tick.tick() => {
                let progress = rpc::notification("notifications/progress", json!({
                    "progressToken": token, "progress": seconds, "message": format!("running for {seconds} s")
                }));
                let _ = out.send(progress).await;
                seconds += PROGRESS_INTERVAL.as_secs();
            }
        }
    }
}
