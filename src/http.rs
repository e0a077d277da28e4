//! `http/request` (today's dialect): HTTP exchanges the server makes on the
//! client's behalf, answered whole or with the body streamed as
//! `http/request/bodyDelta` notifications.
//!
//! The connection's loop owns a [`Requests`]: it routes `http/request` here
//! and takes [`Requests::next_event`] only while its outbox has room. Each
//! request is one task ([`task`]), aborted when the connection goes, so an
//! exchange never outlives its connection. The request is checked on the
//! loop (`prepare`) before any connection is made; the exchange itself
//! (`exchange`: name lookup, TCP, TLS, redirects) runs in the task.
//!
//! Bounds: [`MAX_HTTP_REQUESTS`] in flight per connection; a streamed body
//! holds at most [`HTTP_STREAM_BUFFER`] bytes read and not yet written to the
//! outbox, a buffered one at most [`HTTP_BODY_LIMIT`]; every such byte is held,
//! at what its base64 costs on the wire, in the connection's share
//! ([`CONNECTION_HTTP_BYTES`]) and the server-wide room for buffers (shared
//! with tunnels, sized by `--max-retained-bytes` and charged to the retention
//! account) until its line has been written to the transport; `timeoutMs`
//! bounds the whole exchange, body included.

mod connect;
mod exchange;
mod prepare;
mod task;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinHandle;

use self::task::{Event, Spec};
use crate::account::Account;
use crate::protocol::*;
use crate::transport::Line;

/// Requests in flight at once on one connection.
pub const MAX_HTTP_REQUESTS: usize = 64;
/// Largest body of one `http/request/bodyDelta`.
pub const HTTP_DELTA: usize = 1024 * 1024;
/// Bytes of a streamed body read and not yet handed to the outbox, per request.
pub const HTTP_STREAM_BUFFER: usize = 2 * HTTP_DELTA;
/// Largest body a buffered (not streamed) request answers with.
pub const HTTP_BODY_LIMIT: usize = 32 * 1024 * 1024;
/// Redirects followed with `redirectPolicy: follow`.
pub const MAX_REDIRECTS: usize = 10;
/// What one connection's requests may hold at once (of the server-wide room):
/// one connection cannot starve the others. A buffered answer is charged its
/// body and the body's base64 while it is made (at most 32 + 43 MiB).
pub(crate) const CONNECTION_HTTP_BYTES: usize = 80 * 1024 * 1024;
/// Events of a connection's requests waiting for its loop.
const EVENT_QUEUE: usize = 64;

/// Whether `http/request` is served (`--http-requests`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum HttpPolicy {
    /// Refused with -32600.
    None,
    /// Any http or https URL.
    #[default]
    Any,
}

/// One request, as the loop knows it.
struct Entry {
    /// The `http/request` to answer.
    answer: Option<RequestId>,
    /// A streamed request's `requestId` and the last seq sent.
    stream: Option<(String, u64)>,
    task: JoinHandle<()>,
}

impl Drop for Entry {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The HTTP requests of one connection.
pub(crate) struct Requests {
    policy: HttpPolicy,
    room: Arc<Semaphore>,
    /// The room's size (`--max-retained-bytes`).
    room_bytes: usize,
    /// This connection's share of the room.
    share: Arc<Semaphore>,
    account: Arc<Account>,
    entries: HashMap<u64, Entry>,
    /// `requestId`s of the streams under way.
    streaming: HashSet<String>,
    next_serial: u64,
    events_tx: mpsc::Sender<Event>,
    events: mpsc::Receiver<Event>,
}

/// A request's event for the loop to apply ([`Requests::apply`]).
pub(crate) struct HttpEvent(Event);

impl Requests {
    /// None yet; `account` is the server's, `room_bytes` the server-wide room.
    pub(crate) fn new(policy: HttpPolicy, account: Arc<Account>, room_bytes: usize) -> Requests {
        let (events_tx, events) = mpsc::channel(EVENT_QUEUE);
        Requests {
            policy,
            room: account.tunnel_room(room_bytes),
            room_bytes,
            share: Arc::new(Semaphore::new(CONNECTION_HTTP_BYTES.min(room_bytes).max(1))),
            account,
            entries: HashMap::new(),
            streaming: HashSet::new(),
            next_serial: 1,
            events_tx,
            events,
        }
    }

    /// A fresh set for a new connection of the same session (requests never carry over).
    pub(crate) fn renewed(&self) -> Requests {
        Requests::new(self.policy, self.account.clone(), self.room_bytes)
    }

    /// Whether no request is under way.
    pub(crate) fn is_idle(&self) -> bool {
        self.entries.is_empty()
    }

    /// `http/request`: checked here, before any connection is made; the reply
    /// comes from [`Requests::apply`].
    pub(crate) fn start(
        &mut self,
        request: &RequestId,
        params: HttpRequestParams,
    ) -> Result<(), ErrorObject> {
        if self.policy == HttpPolicy::None {
            return Err(ErrorObject::invalid_request(
                "http/request refused: http requests are off on this server (--http-requests none)",
            ));
        }
        let prepared = prepare::prepare(&params)?;
        let streamed = params.stream_response;
        if streamed && self.streaming.contains(&params.request_id) {
            return Err(ErrorObject::invalid_params(format!(
                "http/request streamResponse requestId `{}` is already active",
                params.request_id
            )));
        }
        if self.entries.len() >= MAX_HTTP_REQUESTS {
            return Err(ErrorObject::invalid_request(format!(
                "http/request refused: at most {MAX_HTTP_REQUESTS} requests may be in flight per connection (MAX_HTTP_REQUESTS)"
            )));
        }
        let serial = self.next_serial;
        self.next_serial += 1;
        let spec = Spec {
            serial,
            prepared,
            streamed,
            room: self.room.clone(),
            room_bytes: self.room_bytes,
            share: self.share.clone(),
            account: self.account.clone(),
        };
        let task = tokio::spawn(task::run(spec, self.events_tx.clone()));
        let stream = streamed.then(|| (params.request_id.clone(), 0));
        if streamed {
            self.streaming.insert(params.request_id);
        }
        self.entries.insert(serial, Entry { answer: Some(request.clone()), stream, task });
        Ok(())
    }

    /// The next event of any request (pending while there are none).
    pub(crate) async fn next_event(&mut self) -> HttpEvent {
        match self.events.recv().await {
            Some(event) => HttpEvent(event),
            // The loop holds a sender: never reached.
            None => std::future::pending().await,
        }
    }

    /// Applies one event: lines for the client go to `out`, each with the
    /// charge of its body until it is written.
    pub(crate) fn apply(&mut self, event: HttpEvent, out: &mut Vec<Line>) {
        match event.0 {
            Event::Answered { serial, result, held } => {
                let Some(entry) = self.entries.get_mut(&serial) else { return };
                let Some(request) = entry.answer.take() else { return };
                let failed = result.is_err();
                let line = match &result {
                    Ok(response) => encode_http_response(&request, response),
                    Err(_) => encode_response(&request, &result),
                };
                drop(result);
                let held = held.map(|mut held| {
                    held.fit(&[&self.share, &self.room], line.len());
                    held
                });
                out.push(Line::charged(line, held));
                // A buffered request is over; a stream that failed before its head too.
                if entry.stream.is_none() || failed {
                    self.forget(serial);
                }
            }
            Event::Delta { serial, bytes, held } => {
                let Some(entry) = self.entries.get_mut(&serial) else { return };
                let Some((id, seq)) = entry.stream.as_mut() else { return };
                *seq += 1;
                let line = encode_body_delta(id, *seq, &bytes, false, None);
                drop(bytes);
                let mut held = held;
                held.fit(&[&self.share, &self.room], line.len());
                out.push(Line::charged(line, Some(held)));
            }
            Event::Ended { serial, error } => {
                let Some(entry) = self.entries.get_mut(&serial) else { return };
                if let Some((id, seq)) = entry.stream.as_mut() {
                    *seq += 1;
                    out.push(encode_body_delta(id, *seq, &[], true, error.as_deref()).into());
                }
                self.forget(serial);
            }
        }
    }

    /// The connection is ending: every request still under way is answered
    /// with an error, every stream ends with an error frame, and the tasks
    /// are aborted.
    pub(crate) fn refuse_all(&mut self, out: &mut Vec<Line>) {
        const WHY: &str = "the connection is ending";
        for (_, mut entry) in self.entries.drain() {
            if let Some(request) = entry.answer.take() {
                let error = ErrorObject::internal(format!("http/request failed: {WHY}"));
                out.push(encode_response::<Empty>(&request, &Err(error)).into());
            } else if let Some((id, seq)) = entry.stream.take() {
                out.push(encode_body_delta(&id, seq + 1, &[], true, Some(WHY)).into());
            }
        }
        self.streaming.clear();
    }

    fn forget(&mut self, serial: u64) {
        if let Some(mut entry) = self.entries.remove(&serial) {
            if let Some((id, _)) = entry.stream.take() {
                self.streaming.remove(&id);
            }
        }
    }
}
