//! State shared by a client and its reader task: pending calls, process routes, event subscribers.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use super::events::{Event, EVENT_BUFFER};
use super::events::{ExitStatus, OutputChunk};
use super::tunnel::TunnelRoutes;
use super::watching::WatchRoutes;
use super::{lock, ClosedWatch};
use crate::error::Error;
use crate::protocol::*;

/// Output chunks queued per process handle; beyond this the handle catches up with `process/read`.
const OUTPUT_QUEUE: usize = 256;

pub(crate) type Reply = Result<Value, ErrorObject>;

/// What the reader task knows of one process, published to its handle.
#[derive(Debug, Clone, Default)]
pub(crate) struct ProcStatus {
    pub(crate) exit: Option<ExitStatus>,
    /// Seq of the last chunk, once `process/closed` arrived.
    pub(crate) closed_seq: Option<u64>,
}

/// Where the notifications of one process go.
pub(crate) struct Route {
    key: u64,
    /// Highest output seq seen, to end the stream at exit on a Part A-only server.
    last_seq: u64,
    output: mpsc::Sender<OutputChunk>,
    status: watch::Sender<ProcStatus>,
}

impl Route {
    pub(crate) fn new() -> (Route, mpsc::Receiver<OutputChunk>, watch::Receiver<ProcStatus>) {
        let (output, output_rx) = mpsc::channel(OUTPUT_QUEUE);
        let (status, status_rx) = watch::channel(ProcStatus::default());
        (Route { key: 0, last_seq: 0, output, status }, output_rx, status_rx)
    }

    /// Queues one chunk of output for the process's handle.
    fn deliver_output(&mut self, seq: u64, stream: Stream, bytes: Vec<u8>) {
        // A Part A server sends no seq: count the chunks here, as its reads do.
        let seq = if seq == 0 { self.last_seq + 1 } else { seq };
        self.last_seq = self.last_seq.max(seq);
        // A full queue drops the chunk; the handle fills the gap with process/read.
        let _ = self.output.try_send(OutputChunk { seq, stream, bytes });
    }
}

/// How the server writes every `process/output` line.
const OUTPUT_PREFIX: &[u8] = br#"{"method":"process/output","params":{"processId":""#;

/// `{"method":"process/output","params":{"processId":"ID","seq":N,"stream":"S","chunk":"B64"}}`
/// with a plain id (no escapes or control characters): the id, seq, stream and
/// the chunk's text; None for anything else (the general path decides).
fn parse_output_line(line: &[u8]) -> Option<(&str, u64, Stream, &[u8])> {
    let (id, seq, rest) = super::fast_line::id_and_seq(line, OUTPUT_PREFIX)?;
    let seq = seq.parse().ok()?;
    let rest = rest.strip_prefix(br#","stream":""#)?;
    let (stream, rest) =
        [(Stream::Stdout, &b"stdout"[..]), (Stream::Stderr, b"stderr"), (Stream::Pty, b"pty")]
            .into_iter()
            .find_map(|(stream, name)| Some((stream, rest.strip_prefix(name)?)))?;
    let chunk = rest.strip_prefix(br#"","chunk":""#)?.strip_suffix(br#""}}"#)?;
    Some((id, seq, stream, chunk))
}

#[derive(Default)]
struct Pending {
    calls: HashMap<RequestId, oneshot::Sender<Reply>>,
    /// The encoded requests of calls that are safe to send again after a
    /// resume (reads, and writes with a writeId).
    retry: HashMap<RequestId, String>,
    ignored: HashSet<RequestId>,
    closed: bool,
}

/// Shared between the [`super::Client`] clones and the reader task.
pub(crate) struct Shared {
    pending: Mutex<Pending>,
    routes: Mutex<HashMap<String, Route>>,
    /// `None` once closed: a subscriber then gets an ended stream.
    events: Mutex<Option<broadcast::Sender<Event>>>,
    closed: watch::Sender<bool>,
    next_route: AtomicU64,
    /// Whether the server sends `process/closed` (Part B); without it, exit ends a stream.
    sends_closed: AtomicBool,
    /// Where `fs/changed` goes.
    pub(crate) watches: Mutex<WatchRoutes>,
    /// Where `tunnel/data` and `tunnel/closed` go.
    pub(crate) tunnels: Mutex<TunnelRoutes>,
    /// One permit per tunnel this client may have open at once.
    pub(crate) tunnel_slots: Arc<tokio::sync::Semaphore>,
    next_tunnel: AtomicU64,
    /// Where `ports/changed` goes (one watcher at a time).
    pub(crate) ports: Mutex<Option<mpsc::UnboundedSender<PortsChangedParams>>>,
    /// Request ids, from 2 (1 is the first `initialize`).
    next_id: AtomicI64,
    /// Unique to this client, so its writeIds never meet another's.
    write_prefix: String,
    next_write: AtomicU64,
    /// How requests are written (set once, before the first).
    dialect: Mutex<crate::dialect::Dialect>,
    /// Why the connection ended for good, when it was not simply closed (a session lost).
    lost: Mutex<Option<String>>,
    /// The client asked to end its session: the connection's end is not a loss to resume from.
    ending: AtomicBool,
    /// Who answers `network/decide`, when the client takes decisions.
    decider: Mutex<Option<super::decide::Answering>>,
}

impl Default for Shared {
    fn default() -> Shared {
        Shared {
            pending: Mutex::default(),
            routes: Mutex::default(),
            events: Mutex::new(Some(broadcast::channel(EVENT_BUFFER).0)),
            closed: watch::channel(false).0,
            next_route: AtomicU64::new(1),
            watches: Mutex::default(),
            tunnels: Mutex::default(),
            tunnel_slots: Arc::new(tokio::sync::Semaphore::new(super::tunnel::MAX_TUNNELS)),
            next_tunnel: AtomicU64::new(1),
            ports: Mutex::default(),
            sends_closed: AtomicBool::new(true),
            next_id: AtomicI64::new(2),
            write_prefix: crate::transport::new_id(),
            next_write: AtomicU64::new(1),
            lost: Mutex::new(None),
            ending: AtomicBool::new(false),
            decider: Mutex::new(None),
            dialect: Mutex::default(),
        }
    }
}

impl Shared {
    pub(crate) fn add_pending(
        &self,
        id: RequestId,
        reply: oneshot::Sender<Reply>,
    ) -> Result<(), Error> {
        let mut pending = lock(&self.pending);
        if pending.closed {
            return Err(self.closed_error());
        }
        pending.calls.insert(id, reply);
        Ok(())
    }

    /// Like [`Shared::add_pending`], for a call that a resumed session may be sent again.
    pub(crate) fn add_retryable(
        &self,
        id: RequestId,
        reply: oneshot::Sender<Reply>,
        line: &str,
    ) -> Result<(), Error> {
        let mut pending = lock(&self.pending);
        if pending.closed {
            return Err(self.closed_error());
        }
        pending.retry.insert(id.clone(), line.to_owned());
        pending.calls.insert(id, reply);
        Ok(())
    }

    pub(crate) fn remove_pending(&self, id: &RequestId) {
        let mut pending = lock(&self.pending);
        pending.calls.remove(id);
        pending.retry.remove(id);
    }

    pub(crate) fn set_dialect(&self, dialect: crate::dialect::Dialect) {
        *lock(&self.dialect) = dialect;
    }

    pub(crate) fn dialect(&self) -> crate::dialect::Dialect {
        *lock(&self.dialect)
    }

    /// A fresh `writeId`: this client's random prefix and a counter.
    pub(crate) fn next_write_id(&self) -> String {
        format!("{}-{}", self.write_prefix, self.next_write.fetch_add(1, Ordering::Relaxed))
    }

    /// A fresh tunnel number.
    pub(crate) fn next_tunnel(&self) -> u64 {
        self.next_tunnel.fetch_add(1, Ordering::Relaxed)
    }

    /// A fresh request id.
    pub(crate) fn next_id(&self) -> RequestId {
        RequestId::from(self.next_id.fetch_add(1, Ordering::Relaxed))
    }

    /// The connection dropped and a resume begins: calls that cannot be sent
    /// again fail now (their outcome is unknown); the lines of the others are
    /// returned, oldest first, to send on the resumed connection.
    pub(crate) fn connection_lost(&self) -> Vec<String> {
        // Tunnels and the ports watch belong to the connection that is gone.
        lock(&self.tunnels).clear();
        lock(&self.ports).take();
        let mut pending = lock(&self.pending);
        let Pending { calls, retry, .. } = &mut *pending;
        calls.retain(|id, _| retry.contains_key(id));
        let mut lines: Vec<(RequestId, String)> =
            retry.iter().map(|(id, line)| (id.clone(), line.clone())).collect();
        lines.sort_by_key(|(id, _)| id.as_i64());
        lines.into_iter().map(|(_, line)| line).collect()
    }

    /// The client is ending its session (`session/end`): when the connection
    /// ends now, it is closed, not resumed.
    pub(crate) fn set_ending(&self, ending: bool) {
        self.ending.store(ending, Ordering::Relaxed);
    }

    pub(crate) fn is_ending(&self) -> bool {
        self.ending.load(Ordering::Relaxed)
    }

    /// Ends the connection for good because `reason` (a session that cannot
    /// be resumed): every pending call and handle fails with it.
    pub(crate) fn close_lost(&self, reason: String) {
        *lock(&self.lost) = Some(reason);
        self.close();
    }

    /// The error of a call or handle whose connection is gone.
    pub(crate) fn closed_error(&self) -> Error {
        match lock(&self.lost).clone() {
            Some(reason) => Error::SessionLost(reason),
            None => Error::Closed,
        }
    }

    /// The processes with handles, and the last seq each has seen.
    pub(crate) fn routed(&self) -> Vec<(String, u64)> {
        lock(&self.routes).iter().map(|(id, route)| (id.clone(), route.last_seq)).collect()
    }

    /// A `process/read` made after a resume: what was missed while the
    /// connection was down (chunks, the exit, the close) reaches the handle.
    pub(crate) fn caught_up(&self, id: &str, read: ReadResult) {
        let mut routes = lock(&self.routes);
        let Some(route) = routes.get_mut(id) else { return };
        for chunk in read.chunks {
            if chunk.seq > route.last_seq {
                route.last_seq = chunk.seq;
                let chunk =
                    OutputChunk { seq: chunk.seq, stream: chunk.stream, bytes: chunk.chunk.0 };
                // A full queue drops the chunk; the handle fills the gap with process/read.
                let _ = route.output.try_send(chunk);
            }
        }
        if read.exited {
            let exit = ExitStatus {
                code: read.exit_code.unwrap_or(-1),
                signal: read.signal,
                limit: read.limit,
            };
            let closed = read.closed.then(|| read.next_seq.saturating_sub(1));
            route.status.send_modify(|status| {
                status.exit.get_or_insert(exit);
                if closed.is_some() {
                    status.closed_seq = closed;
                }
            });
            if closed.is_some() {
                routes.remove(id);
            }
        }
    }

    pub(crate) fn ignore_response(&self, id: RequestId) {
        lock(&self.pending).ignored.insert(id);
    }

    /// The request was never sent: no response will come to ignore.
    pub(crate) fn unignore_response(&self, id: &RequestId) {
        lock(&self.pending).ignored.remove(id);
    }

    /// Registers a process route; returns its key for [`Shared::remove_route`].
    /// A live route for `id` is never replaced: a handle for that id exists, so
    /// the server still knows the id and would refuse the start.
    pub(crate) fn add_route(&self, id: &str, mut route: Route) -> Result<u64, Error> {
        if lock(&self.pending).closed {
            return Err(self.closed_error());
        }
        let mut routes = lock(&self.routes);
        if routes.contains_key(id) {
            return Err(Error::Rpc(ErrorObject::invalid_request(format!(
                "process {id} already exists"
            ))));
        }
        route.key = self.next_route.fetch_add(1, Ordering::Relaxed);
        let key = route.key;
        routes.insert(id.to_owned(), route);
        Ok(key)
    }

    /// Removes the route of `id` if it is still the one registered under `key`.
    pub(crate) fn remove_route(&self, id: &str, key: u64) {
        let mut routes = lock(&self.routes);
        if routes.get(id).is_some_and(|route| route.key == key) {
            routes.remove(id);
        }
    }

    /// Records whether the server sends `process/closed` (from its capabilities).
    pub(crate) fn set_sends_closed(&self, sends_closed: bool) {
        self.sends_closed.store(sends_closed, Ordering::Relaxed);
    }

    /// A new subscriber; decided under the lock that [`Shared::close`] takes,
    /// so a stream made during close still ends.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Event> {
        match lock(&self.events).as_ref() {
            Some(events) => events.subscribe(),
            None => broadcast::channel(1).1,
        }
    }

    pub(crate) fn closed_watch(&self) -> ClosedWatch {
        self.closed.subscribe()
    }

    /// Routes a line that is a `tunnel/data` or a `process/output` in the
    /// server's own form without decoding it as JSON (the chunk is decoded
    /// from the line's bytes: no value tree, no copy of a 175 KB string),
    /// when nobody subscribed to raw events; false when the line must take
    /// the general path.
    pub(crate) fn dispatch_fast(&self, line: &[u8]) -> bool {
        let tunnel = line.starts_with(br#"{"method":"tunnel/data""#);
        if line.len() < 64 || !(tunnel || line.starts_with(OUTPUT_PREFIX)) {
            return false;
        }
        if lock(&self.events).as_ref().is_some_and(|events| events.receiver_count() > 0) {
            return false;
        }
        if tunnel {
            return lock(&self.tunnels).deliver_line(line);
        }
        let Some((id, seq, stream, chunk)) = parse_output_line(line) else { return false };
        let mut routes = lock(&self.routes);
        let Some(route) = routes.get_mut(id) else { return true };
        let Ok(bytes) = crate::protocol::Base64::decode_ascii(chunk) else { return false };
        route.deliver_output(seq, stream, bytes);
        true
    }

    /// Routes one message from the server.
    pub(crate) fn dispatch(&self, message: Message) {
        match message {
            Message::Response(response) => {
                let mut pending = lock(&self.pending);
                if let Some(reply) = pending.calls.remove(&response.id) {
                    pending.retry.remove(&response.id);
                    let _ = reply.send(response.result);
                } else if !pending.ignored.remove(&response.id) {
                    tracing::warn!(id = %response.id, "response to an unknown request");
                }
            }
            Message::Notification(notification) => {
                self.route(&notification);
                if let Some(events) = lock(&self.events).as_ref() {
                    if events.receiver_count() > 0 {
                        let _ = events.send(Event::from_notification(&notification));
                    }
                }
            }
            Message::Request(request) if request.method == NetworkDecide::NAME => {
                match lock(&self.decider).as_mut() {
                    Some(answering) => answering.answer(request),
                    None => {
                        tracing::warn!("ignoring network/decide: this client takes no decisions")
                    }
                }
            }
            Message::Request(request) => {
                tracing::warn!(method = %request.method, "ignoring a request from the server");
            }
        }
    }

    /// Answers `network/decide` with `decider`, sending on `outgoing`.
    pub(crate) fn set_decider(
        &self,
        decider: super::NetworkDecider,
        outgoing: mpsc::Sender<String>,
    ) {
        let answering = tokio::task::JoinSet::new();
        *lock(&self.decider) = Some(super::decide::Answering { decider, outgoing, answering });
    }

    /// Marks the connection closed: pending calls fail, handles see the end.
    pub(crate) fn close(&self) {
        let calls = {
            let mut pending = lock(&self.pending);
            pending.closed = true;
            pending.retry.clear();
            std::mem::take(&mut pending.calls)
        };
        drop(calls);
        lock(&self.routes).clear();
        lock(&self.watches).clear();
        lock(&self.tunnels).clear();
        lock(&self.ports).take();
        lock(&self.events).take();
        lock(&self.decider).take();
        self.closed.send_replace(true);
    }

    fn route(&self, notification: &Notification) {
        let params = &notification.params;
        if notification.method == TunnelData::NAME || notification.method == TunnelClosed::NAME {
            lock(&self.tunnels).deliver(&notification.method, params);
            return;
        }
        if notification.method == PortsChanged::NAME {
            match serde_json::from_value::<PortsChangedParams>(params.clone()) {
                Ok(changed) => {
                    let mut ports = lock(&self.ports);
                    if ports.as_ref().is_some_and(|p| p.send(changed).is_err()) {
                        ports.take();
                    }
                }
                Err(error) => tracing::warn!(%error, "malformed ports/changed"),
            }
            return;
        }
        if notification.method == FsChanged::NAME {
            match serde_json::from_value::<ChangedParams>(params.clone()) {
                Ok(changed) => lock(&self.watches).deliver(changed),
                Err(error) => tracing::warn!(%error, "malformed fs/changed"),
            }
            return;
        }
        let Some(id) = params.get("processId").and_then(Value::as_str) else { return };
        let mut routes = lock(&self.routes);
        let Some(route) = routes.get_mut(id) else { return };
        match notification.method.as_str() {
            m if m == ProcessOutput::NAME => {
                let Ok(output) = serde_json::from_value::<OutputParams>(params.clone()) else {
                    tracing::warn!(%id, "malformed process/output");
                    return;
                };
                route.deliver_output(output.seq, output.stream, output.chunk.0);
            }
            m if m == ProcessExited::NAME => {
                if let Ok(exited) = serde_json::from_value::<ExitedParams>(params.clone()) {
                    let exit = ExitStatus {
                        code: exited.exit_code,
                        signal: exited.signal,
                        limit: exited.limit,
                    };
                    let ends_stream = !self.sends_closed.load(Ordering::Relaxed);
                    let last_seq = route.last_seq;
                    let mut done = false;
                    route.status.send_modify(|status| {
                        status.exit = Some(exit);
                        if ends_stream {
                            status.closed_seq = Some(last_seq);
                        }
                        done = status.closed_seq.is_some();
                    });
                    // Upstream's server may send the close before the exit.
                    if done {
                        routes.remove(id);
                    }
                }
            }
            m if m == ProcessClosed::NAME => {
                if let Ok(closed) = serde_json::from_value::<ClosedParams>(params.clone()) {
                    let mut exited = false;
                    route.status.send_modify(|status| {
                        status.closed_seq = Some(closed.seq);
                        exited = status.exit.is_some();
                    });
                    // The route stays for an exit still to come (upstream's
                    // server may send the close first).
                    if exited {
                        routes.remove(id);
                    }
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_output_line;
    use crate::protocol::Stream;

    #[test]
    fn only_the_servers_own_output_lines_take_the_fast_path() {
        let line = br#"{"method":"process/output","params":{"processId":"p-1","seq":42,"stream":"stderr","chunk":"aGkK"}}"#;
        assert_eq!(parse_output_line(line), Some(("p-1", 42, Stream::Stderr, &b"aGkK"[..])));
        let pty = br#"{"method":"process/output","params":{"processId":"t","seq":1,"stream":"pty","chunk":""}}"#;
        assert_eq!(parse_output_line(pty), Some(("t", 1, Stream::Pty, &b""[..])));
        for other in [
            // An escaped id, a Part A line (no seq), fields in another order,
            // an unknown stream, a seq too big, a seq with a leading zero
            // (not JSON), trailing bytes.
            &br#"{"method":"process/output","params":{"processId":"p\"1","seq":1,"stream":"stdout","chunk":"aGk="}}"#[..],
            br#"{"method":"process/output","params":{"processId":"p","stream":"stdout","chunk":"aGk="}}"#,
            br#"{"method":"process/output","params":{"processId":"p","stream":"stdout","seq":1,"chunk":"aGk="}}"#,
            br#"{"method":"process/output","params":{"processId":"p","seq":1,"stream":"stdin","chunk":"aGk="}}"#,
            br#"{"method":"process/output","params":{"processId":"p","seq":99999999999999999999,"stream":"stdout","chunk":"aGk="}}"#,
            br#"{"method":"process/output","params":{"processId":"p","seq":007,"stream":"stdout","chunk":"aGk="}}"#,
            br#"{"method":"process/output","params":{"processId":"p","seq":1,"stream":"stdout","chunk":"aGk="}} "#,
        ] {
            assert_eq!(parse_output_line(other), None, "{}", String::from_utf8_lossy(other));
        }
    }
}
