//! One request's task: the exchange (bounded by `timeoutMs`), then the body,
//! read whole (buffered) or handed to the loop in deltas of at most
//! [`HTTP_DELTA`] bytes (streamed), each charged until the loop has it.
//!
//! The order of events is the order on the wire: a stream's response head
//! goes before its first delta, and its terminal frame after the last.

use std::future::Future;
use std::sync::Arc;

use futures_util::FutureExt as _;
use http::HeaderMap;
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use tokio::sync::{mpsc, Semaphore};
use tokio::time::Instant;

use super::exchange;
use super::prepare::Prepared;
use super::{CONNECTION_HTTP_BYTES, HTTP_BODY_LIMIT, HTTP_DELTA, HTTP_STREAM_BUFFER};
use crate::account::Account;
use crate::hold::Held;
use crate::protocol::{b64_len, Base64, ErrorObject, HttpHeader, HttpResponse};

/// What the task tells the loop, in order.
pub(super) enum Event {
    /// The answer to the `http/request` (a stream's has an empty body),
    /// with the charge of a buffered body.
    Answered { serial: u64, result: Result<HttpResponse, ErrorObject>, held: Option<Held> },
    /// Part of a streamed body, charged until the loop has encoded it.
    Delta { serial: u64, bytes: Vec<u8>, held: Held },
    /// A stream's body ended (with why, when early).
    Ended { serial: u64, error: Option<String> },
}

/// What the task needs.
pub(super) struct Spec {
    pub(super) serial: u64,
    pub(super) prepared: Prepared,
    pub(super) streamed: bool,
    pub(super) room: Arc<Semaphore>,
    /// The room's size, to tell a body that can never fit from a full room.
    pub(super) room_bytes: usize,
    /// The connection's share of the room.
    pub(super) share: Arc<Semaphore>,
    pub(super) account: Arc<Account>,
}

pub(super) async fn run(spec: Spec, events: mpsc::Sender<Event>) {
    let serial = spec.serial;
    let deadline = Deadline::new(&spec.prepared);
    let sent = deadline.bound(exchange::send(&spec.prepared)).await.and_then(|sent| sent);
    let (response, _connection) = match sent {
        Ok(sent) => sent,
        Err(error) => {
            let error = ErrorObject::internal(format!("http/request failed: {error}"));
            let _ = events.send(Event::Answered { serial, result: Err(error), held: None }).await;
            return;
        }
    };
    let (head, body) = response.into_parts();
    let status = head.status.as_u16();
    let headers = response_headers(&head.headers);
    if !spec.streamed {
        let read = deadline.bound(read_whole(body, &spec)).await.and_then(|read| read);
        if read.is_err() {
            // What the body held is free: give it back before the next request.
            crate::transport::give_back_memory();
        }
        let (result, held) = match read {
            Ok((bytes, held)) => {
                (Ok(HttpResponse { status, headers, body_base64: Base64(bytes) }), held)
            }
            Err(error) => (
                Err(ErrorObject::internal(format!(
                    "failed to read http/request response body: {error}"
                ))),
                None,
            ),
        };
        let _ = events.send(Event::Answered { serial, result, held }).await;
        return;
    }
    let head = HttpResponse { status, headers, body_base64: Base64::default() };
    if events.send(Event::Answered { serial, result: Ok(head), held: None }).await.is_err() {
        return;
    }
    let error = stream(body, &spec, &deadline, &events).await.err();
    let _ = events.send(Event::Ended { serial, error }).await;
}

/// The whole body, charged to the connection's share and the server's room,
/// as it arrives, for itself and its base64 (both are in memory while the
/// answer is made; the loop then keeps only the line's charge). The answer cannot wait for room while
/// it holds part of it (two such answers could each wait for the other), so
/// a full room refuses it.
async fn read_whole(mut body: Incoming, spec: &Spec) -> Result<(Vec<u8>, Option<Held>), String> {
    use hyper::body::Body as _;
    // Sized once from Content-Length (pages are touched only as bytes come):
    // no copies as it grows, no freed blocks left behind in the heap.
    let expected = body.size_hint().exact().map_or(0, |n| usize::try_from(n).unwrap_or(0));
    let mut bytes = Vec::with_capacity(expected.min(HTTP_BODY_LIMIT));
    let mut held: Option<Held> = None;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(|e| e.to_string())?.into_data() else { continue };
        if bytes.len() + data.len() > HTTP_BODY_LIMIT {
            return Err(format!(
                "the body is larger than {HTTP_BODY_LIMIT} bytes, the most a buffered request answers with (set streamResponse)"
            ));
        }
        // Until the answer is made, the bytes and their base64 are both in memory.
        let cost = data.len() + b64_len(data.len());
        let Some(more) = Held::try_take(&[&spec.share, &spec.room], &spec.account, cost) else {
            let needed = held.as_ref().map_or(0, Held::bytes) + cost;
            let share = CONNECTION_HTTP_BYTES.min(spec.room_bytes);
            return Err(if needed > share {
                format!(
                    "the answer needs more than {share} bytes held until it is written, the most one connection may hold (--max-retained-bytes {}, at most {CONNECTION_HTTP_BYTES} per connection); set streamResponse",
                    spec.room_bytes
                )
            } else {
                format!(
                    "the server's room for held bytes is full (--max-retained-bytes {}, at most {share} per connection) until answers already made are read; retry later or set streamResponse",
                    spec.room_bytes
                )
            });
        };
        match held.as_mut() {
            Some(held) => held.merge(more),
            None => held = Some(more),
        }
        bytes.extend_from_slice(&data);
    }
    Ok((bytes, held))
}

/// Hands the body to the loop in deltas; Err with why it ended early.
async fn stream(
    mut body: Incoming,
    spec: &Spec,
    deadline: &Deadline,
    events: &mpsc::Sender<Event>,
) -> Result<(), String> {
    let own = Arc::new(Semaphore::new(b64_len(HTTP_STREAM_BUFFER)));
    let mut pending: Vec<u8> = Vec::new();
    let mut pending_held: Option<Held> = None;
    loop {
        // Frames that are already here join the pending delta; it goes out
        // when full, or before waiting for more.
        let next = if pending.is_empty() {
            Some(deadline.bound(body.frame()).await?)
        } else {
            body.frame().now_or_never()
        };
        let frame = match next {
            None => {
                let all = pending.len();
                deliver(spec, &mut pending, &mut pending_held, all, deadline, events).await?;
                continue;
            }
            Some(None) => {
                let all = pending.len();
                return deliver(spec, &mut pending, &mut pending_held, all, deadline, events).await;
            }
            Some(Some(frame)) => frame,
        };
        let frame = match frame {
            Ok(frame) => frame,
            Err(error) => {
                let all = pending.len();
                deliver(spec, &mut pending, &mut pending_held, all, deadline, events).await?;
                return Err(error.to_string());
            }
        };
        let Ok(data) = frame.into_data() else { continue };
        for piece in data.chunks(HTTP_DELTA) {
            let budgets = [&own, &spec.share, &spec.room];
            // A room smaller than one piece is taken whole (never waited for in vain).
            let cost = b64_len(piece.len()).min(CONNECTION_HTTP_BYTES.min(spec.room_bytes).max(1));
            let held = match Held::try_take(&budgets, &spec.account, cost) {
                Some(held) => held,
                None => {
                    // Nothing is held while waiting: what is pending goes first.
                    let all = pending.len();
                    deliver(spec, &mut pending, &mut pending_held, all, deadline, events).await?;
                    deadline
                        .bound(Held::wait(&budgets, &spec.account, cost))
                        .await?
                        .ok_or("the server's buffers were closed")?
                }
            };
            match pending_held.as_mut() {
                Some(pending_held) => pending_held.merge(held),
                None => pending_held = Some(held),
            }
            pending.extend_from_slice(piece);
            if pending.len() >= HTTP_DELTA {
                deliver(spec, &mut pending, &mut pending_held, HTTP_DELTA, deadline, events)
                    .await?;
            }
        }
    }
}

/// Sends the first `bytes` of `pending` (nothing when there are none) as one delta.
async fn deliver(
    spec: &Spec,
    pending: &mut Vec<u8>,
    pending_held: &mut Option<Held>,
    bytes: usize,
    deadline: &Deadline,
    events: &mpsc::Sender<Event>,
) -> Result<(), String> {
    if bytes == 0 {
        return Ok(());
    }
    let rest = pending.split_off(bytes);
    let delta = std::mem::replace(pending, rest);
    let held = match pending_held.as_mut() {
        Some(all) if all.bytes() > b64_len(bytes) => all.split_off(b64_len(bytes)),
        _ => pending_held.take().ok_or("a delta without its charge")?,
    };
    let event = Event::Delta { serial: spec.serial, bytes: delta, held };
    deadline.bound(events.send(event)).await?.map_err(|_| "the connection ended".to_owned())
}

/// The end `timeoutMs` sets to the whole exchange (none when absent).
struct Deadline {
    at: Option<Instant>,
    millis: u64,
}

impl Deadline {
    fn new(prepared: &Prepared) -> Deadline {
        let millis =
            prepared.timeout.map_or(0, |t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX));
        Deadline { at: prepared.timeout.and_then(|t| Instant::now().checked_add(t)), millis }
    }

    /// `future`'s output, or Err once the deadline has passed.
    async fn bound<F: Future>(&self, future: F) -> Result<F::Output, String> {
        match self.at {
            None => Ok(future.await),
            Some(at) => tokio::time::timeout_at(at, future)
                .await
                .map_err(|_| format!("timed out after {} ms (timeoutMs)", self.millis)),
        }
    }
}

/// Response headers as the wire has them: lowercase names, in order; values
/// that are not visible ASCII left out.
fn response_headers(headers: &HeaderMap) -> Vec<HttpHeader> {
    headers
        .iter()
        .filter_map(|(name, value)| Some(HttpHeader::new(name.as_str(), value.to_str().ok()?)))
        .collect()
}
