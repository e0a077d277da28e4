//! One tunnel's task: connects, then moves bytes both ways until one side ends.
//!
//! Remote bytes are read only against credit (the client's window, granted
//! back by `tunnel/ack`) and against the server-wide room for tunnel buffers,
//! so a tunnel whose client stops reading holds at most its window, and the
//! server at most its budget. Writes come in order from the loop, each
//! answered once the kernel has taken it.

use std::io;
use std::sync::Arc;

use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, Semaphore};

use super::room::{Held, Room};
use super::target::{self, Target};
use super::CHUNK;
use crate::protocol::{encode_tunnel_data, ErrorObject, TunnelEnd};

/// What the task tells the loop, in order.
pub(super) enum Event {
    /// The connect finished.
    Connected { serial: u64, result: Result<(), ErrorObject> },
    /// Bytes from the remote side (`size` of them), as their encoded
    /// `tunnel/data` line, charged until it is handed out.
    Data { serial: u64, line: String, size: usize, held: Held },
    /// The oldest write is done (or failed, with the OS's words).
    Written { serial: u64, result: Result<(), String> },
    /// The tunnel is over.
    Ended { serial: u64, reason: TunnelEnd, message: Option<String> },
}

/// A write handed to the task.
pub(super) struct Write {
    pub(super) bytes: Vec<u8>,
    pub(super) close_write: bool,
    /// The write's charge, given back once written.
    pub(super) held: Held,
}

/// What the task needs besides its commands.
pub(super) struct Spec {
    pub(super) serial: u64,
    pub(super) id: String,
    pub(super) shown: String,
    pub(super) target: Target,
    pub(super) credit: Arc<Semaphore>,
    pub(super) room: Room,
}

pub(super) async fn run(
    spec: Spec,
    writes: mpsc::UnboundedReceiver<Write>,
    events: mpsc::Sender<Event>,
) {
    let serial = spec.serial;
    let stream = match target::connect(spec.target.clone()).await {
        Ok(stream) => stream,
        Err(error) => {
            let error = target::connect_error(&spec.id, &spec.shown, &error);
            let _ = events.send(Event::Connected { serial, result: Err(error) }).await;
            return;
        }
    };
    let _ = stream.set_nodelay(true);
    if events.send(Event::Connected { serial, result: Ok(()) }).await.is_err() {
        return;
    }
    let (reader, writer) = stream.into_split();
    let (reason, message) = tokio::select! {
        end = read_side(&spec, reader, &events) => end,
        end = write_side(serial, writer, writes, &events) => end,
    };
    let _ = events.send(Event::Ended { serial, reason, message }).await;
}

/// Reads the remote side while there is credit and room; returns how it ended.
async fn read_side(
    spec: &Spec,
    reader: OwnedReadHalf,
    events: &mpsc::Sender<Event>,
) -> (TunnelEnd, Option<String>) {
    let mut seq = 0;
    // A chunk whose line fits in half the room (never one that cannot be held).
    let chunk = largest_chunk(spec.room.largest() / 2, spec.id.len());
    loop {
        // One byte of credit first (the window may be spent), then all there is.
        let Ok(first) = spec.credit.acquire().await else { return closed() };
        first.forget();
        let extra = spec.credit.available_permits().min(chunk - 1);
        let granted = 1 + spec.credit.try_acquire_many(extra as u32).map_or(0, |p| {
            p.forget();
            extra
        });
        if let Err(error) = reader.readable().await {
            return ended(&error);
        }
        // The line's whole cost at once: nothing is held while waiting for more.
        let Some(mut held) = spec.room.hold(line_size(granted, spec.id.len())).await else {
            return closed();
        };
        // Allocated only when there is something to read: an idle tunnel holds no buffer.
        let mut buffer = vec![0u8; granted];
        match reader.try_read(&mut buffer) {
            Ok(0) => return (TunnelEnd::Eof, None),
            Ok(n) => {
                spec.credit.add_permits(granted - n);
                // Encoded here, off the loop; held for what the line costs.
                seq += 1;
                let line = encode_tunnel_data(&spec.id, seq, &buffer[..n]);
                held.shrink_to(line.len());
                let data = Event::Data { serial: spec.serial, line, size: n, held };
                if events.send(data).await.is_err() {
                    return closed();
                }
            }
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                spec.credit.add_permits(granted);
            }
            Err(error) => return ended(&error),
        }
    }
}

/// Writes what the loop hands over, in order; returns when writing fails.
async fn write_side(
    serial: u64,
    mut writer: OwnedWriteHalf,
    mut writes: mpsc::UnboundedReceiver<Write>,
    events: &mpsc::Sender<Event>,
) -> (TunnelEnd, Option<String>) {
    while let Some(Write { bytes, close_write, held }) = writes.recv().await {
        let mut result = writer.write_all(&bytes).await;
        if result.is_ok() && close_write {
            result = writer.shutdown().await;
        }
        drop(held);
        let failure = result.as_ref().err().map(ended);
        let result = result.map_err(|error| error.to_string());
        if events.send(Event::Written { serial, result }).await.is_err() {
            return closed();
        }
        if let Some(end) = failure {
            return end;
        }
    }
    // The loop dropped the tunnel: the task is being ended anyway.
    std::future::pending().await
}

/// What the `tunnel/data` line of `n` bytes costs at most (its JSON around
/// the base64 of the bytes, seq up to 20 digits).
fn line_size(n: usize, id_len: usize) -> usize {
    crate::protocol::b64_len(n) + id_len * 6 + 96
}

/// The most bytes read at once so that their line costs at most `budget`
/// (at least one byte).
fn largest_chunk(budget: usize, id_len: usize) -> usize {
    let room = budget.saturating_sub(id_len * 6 + 96) / 4 * 3;
    room.clamp(1, CHUNK)
}

fn ended(error: &io::Error) -> (TunnelEnd, Option<String>) {
    let reason = match error.kind() {
        io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe => TunnelEnd::Reset,
        _ => TunnelEnd::Error,
    };
    (reason, Some(error.to_string()))
}

/// The loop is gone (the connection ends): nothing more to report.
fn closed() -> (TunnelEnd, Option<String>) {
    (TunnelEnd::Error, Some("the connection ended".to_owned()))
}
