//! Tunnels (Part B): TCP streams the server opens on the client's behalf and
//! carries through the connection, with credit-based flow control.
//!
//! The connection's loop owns a [`Tunnels`]: it routes `tunnel/*` requests
//! and `tunnel/ack` here and takes [`Tunnels::next_event`] only while its
//! outbox has room. Each tunnel is one task ([`task`]), aborted when the
//! tunnel is closed or the connection goes, so a tunnel never outlives its
//! connection (a resumed session has none).
//!
//! Bounds: at most [`TUNNEL_WINDOW`] bytes sent and not acknowledged per
//! tunnel, [`TUNNEL_WRITE_BUFFER`] bytes written by the client and not yet
//! taken by the kernel per tunnel, [`MAX_TUNNELS`] per connection, and every
//! buffered byte held in the server-wide room (`--max-retained-bytes`, also
//! charged to the retention budget).

mod room;
mod target;
mod task;

pub use self::room::CONNECTION_TUNNEL_BYTES;
pub use self::target::{TunnelPolicy, TUNNEL_CONNECT_TIMEOUT};

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinHandle;

use self::room::Room;
use self::task::{Event, Spec, Write};
use crate::account::Account;
use crate::protocol::*;
use crate::transport::Line;

/// Bytes of `tunnel/data` a tunnel sends before the client acknowledges them.
pub const TUNNEL_WINDOW: usize = 1024 * 1024;
/// Bytes of `tunnel/write` a tunnel holds before the kernel takes them.
pub const TUNNEL_WRITE_BUFFER: usize = 1024 * 1024;
/// Tunnels open (or opening) at once on one connection.
pub const MAX_TUNNELS: usize = 256;
/// Longest `tunnelId`.
pub const MAX_TUNNEL_ID_BYTES: usize = 256;
/// Largest `tunnel/data` chunk.
const CHUNK: usize = 128 * 1024;
/// What each `tunnel/write` counts against [`TUNNEL_WRITE_BUFFER`] besides
/// its bytes (its record and its reply): at most 256 writes wait per tunnel.
const WRITE_OVERHEAD: usize = 4096;
/// Events of a connection's tunnels waiting for its loop.
const EVENT_QUEUE: usize = 64;

/// One tunnel, as the loop knows it.
struct Entry {
    serial: u64,
    shown: String,
    /// The `tunnel/open` to answer once connected.
    opening: Option<RequestId>,
    writes: mpsc::UnboundedSender<Write>,
    /// Writes handed to the task, oldest first: each gets its reply in turn.
    pending: VecDeque<(RequestId, usize)>,
    queued: usize,
    write_closed: bool,
    credit: Arc<Semaphore>,
    unacked: usize,
    task: JoinHandle<()>,
}

impl Drop for Entry {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The tunnels of one connection.
pub(crate) struct Tunnels {
    policy: TunnelPolicy,
    room: Room,
    entries: HashMap<String, Entry>,
    ids: HashMap<u64, String>,
    next_serial: u64,
    events_tx: mpsc::Sender<Event>,
    events: mpsc::Receiver<Event>,
}

/// A tunnel event for the loop to apply ([`Tunnels::apply`]).
pub(crate) struct TunnelEvent(Event);

impl Tunnels {
    /// No tunnels yet; `account` is the server's, `room_bytes` the server-wide room.
    pub(crate) fn new(policy: TunnelPolicy, account: Arc<Account>, room_bytes: usize) -> Tunnels {
        Tunnels::with_room(policy, Room::new(account, room_bytes))
    }

    /// A fresh set for a new connection of the same session (tunnels never carry over).
    pub(crate) fn renewed(&self) -> Tunnels {
        Tunnels::with_room(self.policy, self.room.renewed())
    }

    fn with_room(policy: TunnelPolicy, room: Room) -> Tunnels {
        let (events_tx, events) = mpsc::channel(EVENT_QUEUE);
        Tunnels {
            policy,
            room,
            entries: HashMap::new(),
            ids: HashMap::new(),
            next_serial: 1,
            events_tx,
            events,
        }
    }

    /// `tunnel/open`: the reply comes from [`Tunnels::apply`] once connected.
    pub(crate) fn open(
        &mut self,
        request: &RequestId,
        params: TunnelOpenParams,
    ) -> Result<(), ErrorObject> {
        let TunnelOpenParams { tunnel_id, host, port } = params;
        check_id(&tunnel_id)?;
        if host.len() > target::MAX_HOST_BYTES {
            return Err(ErrorObject::invalid_params(format!(
                "host must be at most {} bytes, not {}",
                target::MAX_HOST_BYTES,
                host.len()
            )));
        }
        let target = target::allow(self.policy, &host, port)?;
        if self.entries.contains_key(&tunnel_id) {
            return Err(ErrorObject::invalid_request(format!("tunnel {tunnel_id} already exists")));
        }
        if self.entries.len() >= MAX_TUNNELS {
            return Err(ErrorObject::invalid_request(format!(
                "tunnel {tunnel_id} refused: at most {MAX_TUNNELS} tunnels may be open per connection"
            )));
        }
        let serial = self.next_serial;
        self.next_serial += 1;
        let shown = target::shown(&host, port);
        let credit = Arc::new(Semaphore::new(TUNNEL_WINDOW));
        let (writes, writes_rx) = mpsc::unbounded_channel();
        let spec = Spec {
            serial,
            id: tunnel_id.clone(),
            shown: shown.clone(),
            target,
            credit: credit.clone(),
            room: self.room.clone(),
        };
        let task = tokio::spawn(task::run(spec, writes_rx, self.events_tx.clone()));
        tracing::debug!(tunnel = %tunnel_id, to = %shown, "opening a tunnel");
        self.ids.insert(serial, tunnel_id.clone());
        self.entries.insert(
            tunnel_id,
            Entry {
                serial,
                shown,
                opening: Some(request.clone()),
                writes,
                pending: VecDeque::new(),
                queued: 0,
                write_closed: false,
                credit,
                unacked: 0,
                task,
            },
        );
        Ok(())
    }

    /// `tunnel/write`: the reply comes from [`Tunnels::apply`] once written.
    /// Writes sent before the tunnel opened wait for the connect (and fail with it).
    pub(crate) fn write(
        &mut self,
        request: &RequestId,
        params: TunnelWriteParams,
    ) -> Result<(), ErrorObject> {
        let TunnelWriteParams { tunnel_id, chunk, close_write } = params;
        let entry = self.entries.get_mut(&tunnel_id).ok_or_else(|| unknown(&tunnel_id))?;
        if entry.write_closed {
            return Err(ErrorObject::invalid_request(format!(
                "tunnel {tunnel_id}'s write side is closed (closeWrite was sent)"
            )));
        }
        let bytes = chunk.0;
        let cost = bytes.len() + WRITE_OVERHEAD;
        if entry.queued + cost > TUNNEL_WRITE_BUFFER {
            return Err(ErrorObject::invalid_request(format!(
                "tunnel {tunnel_id}'s write buffer is full: {} bytes wait for {} to take them (each write counts {WRITE_OVERHEAD} more), and at most {TUNNEL_WRITE_BUFFER} may; wait for the replies to earlier writes",
                entry.queued, entry.shown
            )));
        }
        let Some(held) = self.room.try_hold(bytes.len()) else {
            return Err(ErrorObject::invalid_request(format!(
                "tunnel {tunnel_id}'s write was refused: the server's buffers for tunnels are full ({} bytes free for this connection); retry later",
                self.room.free()
            )));
        };
        let size = cost;
        if entry.writes.send(Write { bytes, close_write, held }).is_err() {
            return Err(unknown(&tunnel_id));
        }
        entry.queued += size;
        entry.write_closed = close_write;
        entry.pending.push_back((request.clone(), size));
        Ok(())
    }

    /// Ends `tunnel_id` at the client's word: what waited on it is refused.
    pub(crate) fn close(
        &mut self,
        tunnel_id: &str,
        out: &mut Vec<Line>,
    ) -> Result<(), ErrorObject> {
        let entry = self.entries.remove(tunnel_id).ok_or_else(|| unknown(tunnel_id))?;
        self.ids.remove(&entry.serial);
        refuse_waiting(tunnel_id, entry, "it was closed", out);
        Ok(())
    }

    /// No request waits for its reply (opens and writes under way).
    pub(crate) fn is_idle(&self) -> bool {
        self.entries.values().all(|entry| entry.opening.is_none() && entry.pending.is_empty())
    }

    /// `tunnel/ack`: `bytes` more may be sent (never more than were sent).
    pub(crate) fn ack(&mut self, params: Value) {
        let params = match serde_json::from_value::<TunnelAckParams>(params) {
            Ok(params) => params,
            Err(error) => {
                tracing::warn!(%error, "ignoring a malformed tunnel/ack");
                return;
            }
        };
        let Some(entry) = self.entries.get_mut(&params.tunnel_id) else {
            tracing::debug!(tunnel = %params.tunnel_id, "tunnel/ack for a tunnel that is gone");
            return;
        };
        let granted = usize::try_from(params.bytes).unwrap_or(usize::MAX).min(entry.unacked);
        entry.unacked -= granted;
        entry.credit.add_permits(granted);
    }

    /// The next event of any tunnel (pending while there are none).
    pub(crate) async fn next_event(&mut self) -> TunnelEvent {
        match self.events.recv().await {
            Some(event) => TunnelEvent(event),
            // The loop holds a sender: never reached.
            None => std::future::pending().await,
        }
    }

    /// Applies one event: lines for the client go to `out`.
    pub(crate) fn apply(&mut self, event: TunnelEvent, out: &mut Vec<Line>) {
        let serial = match &event.0 {
            Event::Connected { serial, .. }
            | Event::Data { serial, .. }
            | Event::Written { serial, .. }
            | Event::Ended { serial, .. } => *serial,
        };
        // Events of a tunnel closed meanwhile are dropped (their holds with them).
        let Some(id) = self.ids.get(&serial).cloned() else { return };
        let Some(entry) = self.entries.get_mut(&id) else { return };
        match event.0 {
            Event::Connected { result, .. } => {
                let Some(request) = entry.opening.take() else { return };
                let failed = result.is_err();
                out.push(encode_response(&request, &result.map(|()| Empty {})).into());
                if failed {
                    tracing::debug!(tunnel = %id, "tunnel did not open");
                    // Writes sent before the open was answered fail with it.
                    if let Some(entry) = self.forget(&id) {
                        refuse_waiting(&id, entry, "it did not open", out);
                    }
                }
            }
            Event::Data { line, size, held, .. } => {
                entry.unacked += size;
                // Charged until the writer has written it.
                out.push(Line::charged(line, Some(held)));
            }
            Event::Written { result, .. } => {
                let Some((request, size)) = entry.pending.pop_front() else { return };
                entry.queued -= size;
                let result = result.map(|()| Empty {}).map_err(|error| {
                    ErrorObject::internal(format!(
                        "cannot write to tunnel {id} ({}): {error}",
                        entry.shown
                    ))
                });
                out.push(encode_response(&request, &result).into());
            }
            Event::Ended { reason, message, .. } => {
                if let Some(entry) = self.forget(&id) {
                    refuse_waiting(&id, entry, "it ended", out);
                }
                let closed = TunnelClosedParams { tunnel_id: id, reason, message };
                out.push(encode_notification::<TunnelClosed>(&closed, 128).into());
            }
        }
    }

    fn forget(&mut self, id: &str) -> Option<Entry> {
        let entry = self.entries.remove(id)?;
        self.ids.remove(&entry.serial);
        Some(entry)
    }
}

/// Errors for the open and the writes that waited on a tunnel that is gone.
fn refuse_waiting(id: &str, mut entry: Entry, why: &str, out: &mut Vec<Line>) {
    if let Some(request) = entry.opening.take() {
        let error = ErrorObject::invalid_request(format!("tunnel {id} did not open: {why}"));
        out.push(encode_response::<Empty>(&request, &Err(error)).into());
    }
    for (request, _) in entry.pending.drain(..) {
        let error = ErrorObject::invalid_request(format!("tunnel {id} was not written: {why}"));
        out.push(encode_response::<Empty>(&request, &Err(error)).into());
    }
}

fn check_id(id: &str) -> Result<(), ErrorObject> {
    if id.is_empty() || id.len() > MAX_TUNNEL_ID_BYTES {
        return Err(ErrorObject::invalid_params(format!(
            "tunnelId must be 1 to {MAX_TUNNEL_ID_BYTES} bytes, not {}",
            id.len()
        )));
    }
    Ok(())
}

fn unknown(id: &str) -> ErrorObject {
    ErrorObject::invalid_request(format!("unknown tunnel {id}"))
}
