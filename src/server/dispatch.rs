//! Connection state and request dispatch: one match over methods.
//!
//! The lifecycle (`initialize`, what may come before it) is in
//! `dispatch/lifecycle.rs`; process requests, handled on the loop in arrival
//! order (none of them blocks), in `dispatch/processes.rs`; params decoding
//! and answers in `reply.rs`. fs requests are handed to [`FsCalls`] and
//! answered when done.

use std::collections::VecDeque;
use std::sync::Arc;

use serde_json::Value;

use tokio::sync::oneshot;

mod lifecycle;
mod processes;

use super::fs_calls::{Call, FsCalls};
use super::reply::{decode, error_reply, reply};
use super::{Handoff, Sessions};
use crate::dialect::inbound::{self, Inbound};
use crate::dialect::{Dialect, Numbering};
use crate::fs::Roots;
use crate::hold::ServerRoom;
use crate::http::{HttpEvent, Requests};
use crate::ports::{Ports, PortsWake};
use crate::process::ProcessTable;
use crate::protocol::*;
use crate::sessions::Wake;
use crate::transport::Incoming;
use crate::transport::Line;
use crate::tunnel::{TunnelEvent, Tunnels};
use crate::watch::{Command as WatchCommand, Watcher};

/// What became of a process request whose turn came.
enum Turn {
    /// Handled: its reply now, or later (`None`).
    Done(Option<String>),
    /// A start that depends on the starts under way (same id, or the process
    /// limit): it waits for them, first in line.
    Wait(Request),
}

/// The dialect of a process request, and the numbering a start gets.
type Spoken = (Dialect, Numbering);

/// Process requests that may wait behind a start; beyond, they are refused.
const MAX_WAITING: usize = 4096;
/// Bytes of process requests that may wait behind a start (writes carry data).
const MAX_WAITING_BYTES: usize = 64 * 1024 * 1024;

/// A session's end at its client's word (`session/end`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// Not asked for.
    Open,
    /// Received, waiting behind a start: nothing sent after it runs.
    Asked,
    /// Run: the connection closes and nobody can resume the session.
    Ended,
    /// Run, and the loop has acted on it.
    Seen,
}

impl Ending {
    fn has_run(self) -> bool {
        matches!(self, Ending::Ended | Ending::Seen)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Nothing yet.
    New,
    /// `initialize` answered, `initialized` not yet received.
    Initializing,
    /// Handshake done.
    Ready,
}

/// A claimed session to wake with this connection's link: the claim, the
/// `initialize` to answer, and the session's id.
pub(super) type Claimed = (oneshot::Sender<Wake<Handoff>>, RequestId, Arc<str>);

/// Everything one session owns (its processes), and its connection's request state.
pub(super) struct State {
    phase: Phase,
    roots: Arc<Roots>,
    session_id: Arc<str>,
    /// The listening server's sessions (None: this session cannot detach or resume another).
    sessions: Option<Arc<Sessions>>,
    /// Set by an `initialize` that resumes another session.
    claimed: Option<Claimed>,
    /// Where the client's `session/end` stands.
    ending: Ending,
    /// The client has spoken today's dialect (a file URI, `environment/*`):
    /// refused writes are answered with a status.
    today: bool,
    /// The client said in `initialize` that it resumes (`resumable`, or
    /// `resumeSessionId`): with `today`, what lets the session detach.
    resumable: bool,
    /// Process requests that arrived while a start was under way, in order,
    /// with their sizes.
    waiting: VecDeque<(Request, Spoken, usize)>,
    waiting_bytes: usize,
    pub(super) table: ProcessTable,
    pub(super) fs: FsCalls,
    /// The server-wide room, for the fs calls of the next connection.
    room: ServerRoom,
    pub(super) watches: Watcher,
    /// The connection's tunnels (they end with it).
    pub(super) tunnels: Tunnels,
    /// The connection's port lookups.
    pub(super) ports: Ports,
    /// The connection's HTTP requests (they end with it).
    pub(super) http: Requests,
}

impl State {
    pub(super) fn new(
        roots: Arc<Roots>,
        table: ProcessTable,
        session_id: Arc<str>,
        sessions: Option<Arc<Sessions>>,
        tunnels: Tunnels,
        http: Requests,
        room: ServerRoom,
    ) -> State {
        State {
            phase: Phase::New,
            session_id,
            sessions,
            claimed: None,
            ending: Ending::Open,
            today: false,
            resumable: false,
            fs: FsCalls::new(roots.clone(), room.clone()),
            room,
            watches: Watcher::new(roots.clone()),
            roots,
            waiting: VecDeque::new(),
            waiting_bytes: 0,
            table,
            tunnels,
            ports: Ports::default(),
            http,
        }
    }

    pub(super) fn session_id(&self) -> &Arc<str> {
        &self.session_id
    }

    /// Nothing the client asked is still under way: no start, no request
    /// waiting behind one, no fs call, no HTTP request.
    pub(super) fn is_quiet(&self) -> bool {
        !self.table.is_starting()
            && self.waiting.is_empty()
            && self.fs.is_idle()
            && self.links_idle()
    }

    /// No tunnel, ports or HTTP request waits for its reply.
    pub(super) fn links_idle(&self) -> bool {
        self.tunnels.is_idle() && self.ports.is_idle() && self.http.is_idle()
    }

    /// Whether the client has been told this session's id.
    pub(super) fn initialized(&self) -> bool {
        self.phase != Phase::New
    }

    /// Whether the client has shown it can resume this session (Part A: a
    /// closed connection kills, unless it has): it spoke today's dialect, or
    /// said so in `initialize`.
    pub(super) fn client_resumes(&self) -> bool {
        self.resumable || self.today
    }

    /// The session this connection asked to resume, claimed for it.
    pub(super) fn take_claimed(&mut self) -> Option<Claimed> {
        self.claimed.take()
    }

    /// Whether the client has just ended its session (`session/end`): true once.
    pub(super) fn take_ended(&mut self) -> bool {
        let ended = self.ending == Ending::Ended;
        if ended {
            self.ending = Ending::Seen;
        }
        ended
    }

    /// The connection is gone and the session detaches: what belonged to
    /// the connection (fs calls, watches, a half-done handshake) goes with it.
    pub(super) fn detach(&mut self) {
        self.fs = FsCalls::new(self.roots.clone(), self.room.clone());
        self.watches = Watcher::new(self.roots.clone());
        self.tunnels = self.tunnels.renewed();
        self.http = self.http.renewed();
        self.ports = Ports::default();
        self.phase = Phase::New;
        // The dialect a connection spoke is the connection's, not the session's.
        self.today = false;
        self.resumable = false;
    }

    /// A connection resumed this session: the reply to its `initialize`.
    pub(super) fn resume(&mut self, request: &RequestId) -> String {
        tracing::info!(session = %self.session_id, "session resumed");
        self.phase = Phase::Initializing;
        self.resumable = true;
        reply::<Initialize>(request, Ok(self.initialize_result()))
    }

    /// Handles one input message; encoded replies go to `out` (fs replies come later).
    pub(super) fn on_incoming(&mut self, incoming: Incoming, out: &mut Vec<Line>) {
        let (message, bytes) = match incoming {
            Incoming::Message(message, bytes) => (Ok(message), bytes),
            Incoming::Malformed(error) => (Err(error), 0),
            Incoming::TooLong { limit } => {
                tracing::warn!(limit, "discarded a message over the size limit");
                out.push(malformed(format!(
                    "message is longer than the limit of {limit} bytes (--max-message-bytes); it was discarded"
                )).into());
                return;
            }
        };
        match message {
            Err(error) => {
                tracing::warn!(%error, "malformed message");
                out.push(malformed(error).into());
            }
            Ok(Message::Request(request)) => {
                if let Some(reply) = self.on_request(request, bytes, out) {
                    out.push(reply.into());
                }
            }
            Ok(Message::Notification(notification)) => {
                if let Some(error) = self.on_notification(notification) {
                    out.push(error.into());
                }
            }
            Ok(Message::Response(response)) => {
                if !self.table.answer_decision(&response.id, response.result) {
                    tracing::warn!(id = %response.id, "ignoring a response to no request of the server");
                }
            }
        }
    }

    fn on_notification(&mut self, notification: Notification) -> Option<String> {
        let method = notification.method;
        if method == TunnelAck::NAME {
            if self.phase == Phase::Ready {
                self.tunnels.ack(notification.params);
            }
            None
        } else if method == Initialized::NAME {
            match self.phase {
                Phase::Initializing => self.phase = Phase::Ready,
                Phase::New => tracing::warn!("ignoring initialized before initialize"),
                Phase::Ready => tracing::warn!("ignoring a repeated initialized"),
            }
            None
        } else if METHODS.contains(&method.as_str()) {
            tracing::warn!(%method, "request without id");
            Some(malformed(format!("{method} is a request and needs an id")))
        } else {
            tracing::warn!(%method, "ignoring unknown notification");
            None
        }
    }

    /// A start finished (its reply is `line`): the requests that waited behind
    /// it take effect now, in order, until another start is under way.
    pub(super) fn on_started(&mut self, line: String, out: &mut Vec<Line>) {
        out.push(line.into());
        while let Some((next, _, _)) = self.waiting.front() {
            // Nothing behind a `session/end` runs: the loop refuses it as the connection ends.
            if self.ending.has_run()
                || (self.table.is_starting() && next.method != ProcessStart::NAME)
            {
                break;
            }
            let Some((Request { id, method, params }, spoken, bytes)) = self.waiting.pop_front()
            else {
                break;
            };
            self.waiting_bytes -= bytes;
            match self.on_process_request(id, method, params, spoken, out) {
                Turn::Done(Some(reply)) => out.push(reply.into()),
                Turn::Done(None) => {}
                Turn::Wait(request) => {
                    // Still not its turn: it stays first in line.
                    self.waiting_bytes += bytes;
                    self.waiting.push_front((request, spoken, bytes));
                    break;
                }
            }
        }
    }

    /// Refuses what still waits (the connection is ending): process requests
    /// behind a start, fs calls not yet run, and HTTP requests under way.
    pub(super) fn refuse_waiting(&mut self, out: &mut Vec<Line>) {
        for (request, _, _) in self.waiting.drain(..) {
            let error = ErrorObject::invalid_request(format!(
                "{} was not run: the connection is ending",
                request.method
            ));
            out.push(error_reply(&request.id, error).into());
        }
        self.waiting_bytes = 0;
        self.fs.refuse_waiting(out);
        self.http.refuse_all(out);
    }

    /// The encoded response to a request, or `None` when it is answered later
    /// (a waiting read, an fs call).
    /// Lines besides the one returned (a closed tunnel's refused writes) go to `out`.
    fn on_request(
        &mut self,
        request: Request,
        bytes: usize,
        out: &mut Vec<Line>,
    ) -> Option<String> {
        let Request { id, method, params } = request;
        if !METHODS.contains(&method.as_str()) {
            let error =
                ErrorObject::new(codes::METHOD_NOT_FOUND, format!("unknown method {method}"));
            return Some(error_reply(&id, error));
        }
        if method == Initialize::NAME {
            return match decode::<Initialize>(params).and_then(|p| self.initialize(&id, p)) {
                Ok(Some(result)) => Some(reply::<Initialize>(&id, Ok(result))),
                Ok(None) => None,
                Err(error) => Some(error_reply(&id, error)),
            };
        }
        if let Err(error) = self.check_ready(&method) {
            return Some(error_reply(&id, error));
        }
        if self.ending != Ending::Open {
            let error = ErrorObject::invalid_request(format!(
                "{method} was not run: the connection is ending"
            ));
            return Some(error_reply(&id, error));
        }
        let Inbound { params, dialect, numbering, confine } =
            match inbound::translate(&method, params) {
                Ok(inbound) => inbound,
                Err(error) => return Some(error_reply(&id, error)),
            };
        if dialect == Dialect::Today {
            self.today = true;
        }

        if method == EnvironmentInfo::NAME {
            self.today = true;
            // Part B: `{"limits": true}` adds which limits this server
            // enforces; without it the answer is today's dialect's, exactly.
            let limits = params.get("limits").and_then(Value::as_bool).unwrap_or(false);
            let mut info = crate::dialect::environment_info(self.table.prepend_path());
            if limits {
                info["limits"] = crate::limits::support(self.table.default_limits());
            }
            return Some(reply::<EnvironmentInfo>(&id, Ok(info)));
        }
        if method == EnvironmentStatus::NAME {
            self.today = true;
            let ready = StatusResult { status: "ready".to_owned() };
            return Some(reply::<EnvironmentStatus>(&id, Ok(ready)));
        }
        if method == Watch::NAME {
            return match decode::<Watch>(params) {
                Ok(params) => self
                    .watches
                    .submit(&id.clone(), WatchCommand::Watch { id, params: Box::new(params) }),
                Err(error) => Some(error_reply(&id, error)),
            };
        }
        if method == WatchMissing::NAME {
            self.today = true;
            return match decode::<WatchMissing>(params) {
                Ok(params) => self.watches.submit(
                    &id.clone(),
                    WatchCommand::WatchMissing { id, params: Box::new(params) },
                ),
                Err(error) => Some(error_reply(&id, error)),
            };
        }
        if method == Unwatch::NAME {
            return match decode::<Unwatch>(params) {
                Ok(params) => {
                    self.watches.submit(&id.clone(), WatchCommand::Unwatch { id, params })
                }
                Err(error) => Some(error_reply(&id, error)),
            };
        }
        if method == HttpRequest::NAME {
            // Only today's client asks for it.
            self.today = true;
            let started = decode::<HttpRequest>(params).and_then(|p| self.http.start(&id, p));
            return started.err().map(|error| error_reply(&id, error));
        }
        if method.starts_with("tunnel/") || method.starts_with("ports/") {
            self.on_link_request(id, &method, params, out);
            return None;
        }
        if method.starts_with("fs/") || method == EnvironmentConfigRead::NAME {
            let today = self.today || method == EnvironmentConfigRead::NAME;
            return self.fs.submit(Call { id, method, params, bytes, dialect, today, confine });
        }
        // Process requests take effect in arrival order: behind the starts under
        // way (a start behind only starts goes to the spawner at once: it keeps
        // their order), and behind anything already waiting.
        let behind_starts = self.table.is_starting() && method != ProcessStart::NAME;
        if behind_starts || !self.waiting.is_empty() {
            if self.waiting.len() >= MAX_WAITING || self.waiting_bytes + bytes > MAX_WAITING_BYTES {
                let error = ErrorObject::invalid_request(format!(
                    "too many requests wait for a process/start to finish (the limit is {MAX_WAITING} requests or {MAX_WAITING_BYTES} bytes)"
                ));
                return Some(error_reply(&id, error));
            }
            // An end that waits behind a start ends what may run from now
            // on, and the starts themselves (one may be stuck in its exec).
            if method == SessionEnd::NAME && decode::<SessionEnd>(params.clone()).is_ok() {
                self.ending = Ending::Asked;
                self.table.end_starts();
            }
            self.waiting_bytes += bytes;
            self.waiting.push_back((Request { id, method, params }, (dialect, numbering), bytes));
            return None;
        }
        match self.on_process_request(id, method, params, (dialect, numbering), out) {
            Turn::Done(reply) => reply,
            Turn::Wait(request) => {
                self.waiting_bytes += bytes;
                self.waiting.push_back((request, (dialect, numbering), bytes));
                None
            }
        }
    }

    /// A `tunnel/*` or `ports/*` request: replies now go to `out`, later
    /// ones come from [`State::on_tunnel`] and [`State::on_ports`].
    fn on_link_request(&mut self, id: RequestId, method: &str, params: Value, out: &mut Vec<Line>) {
        let done = match method {
            TunnelOpen::NAME => {
                decode::<TunnelOpen>(params).and_then(|p| self.tunnels.open(&id, p))
            }
            TunnelWrite::NAME => {
                decode::<TunnelWrite>(params).and_then(|p| self.tunnels.write(&id, p))
            }
            TunnelClose::NAME => decode::<TunnelClose>(params).and_then(|p| {
                self.tunnels.close(&p.tunnel_id, out)?;
                out.push(reply::<TunnelClose>(&id, Ok(Empty {})).into());
                Ok(())
            }),
            PortsList::NAME => decode::<PortsList>(params).and_then(|_| {
                let table = &self.table;
                self.ports.list(id.clone(), || table.roster())
            }),
            PortsWatch::NAME => decode::<PortsWatch>(params).map(|_| {
                self.ports.watch();
                out.push(reply::<PortsWatch>(&id, Ok(Empty {})).into());
            }),
            PortsUnwatch::NAME => decode::<PortsUnwatch>(params).map(|_| {
                self.ports.unwatch();
                out.push(reply::<PortsUnwatch>(&id, Ok(Empty {})).into());
            }),
            other => Err(ErrorObject::new(
                codes::METHOD_NOT_FOUND,
                format!("method {other} is listed but not dispatched"),
            )),
        };
        if let Err(error) = done {
            out.push(error_reply(&id, error).into());
        }
    }

    /// A tunnel's event.
    pub(super) fn on_tunnel(&mut self, event: TunnelEvent, out: &mut Vec<Line>) {
        self.tunnels.apply(event, out);
    }

    /// An HTTP request's event.
    pub(super) fn on_http(&mut self, event: HttpEvent, out: &mut Vec<Line>) {
        self.http.apply(event, out);
    }

    /// A port scan finished or is due.
    pub(super) fn on_ports(&mut self, wake: PortsWake, out: &mut Vec<Line>) {
        let table = &self.table;
        self.ports.on_wake(wake, || table.roster(), out);
    }
}

/// The reply to a line that is not a usable message: id -1, -32600.
fn malformed(message: String) -> String {
    error_reply(&RequestId::from(-1), ErrorObject::invalid_request(message))
}
