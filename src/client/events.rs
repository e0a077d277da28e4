//! Typed notifications for subscribers: a bounded broadcast that tells a slow reader it lagged.

use serde_json::Value;
use tokio::sync::broadcast;

use crate::protocol::*;

/// One chunk of output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputChunk {
    /// Per-process sequence number, from 1.
    pub seq: u64,
    /// `stdout`, `stderr` or `pty`.
    pub stream: Stream,
    /// The bytes.
    pub bytes: Vec<u8>,
}

/// How a process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExitStatus {
    /// The exit code; 128+N for signal N.
    pub code: i32,
    /// The killing signal's name, such as `SIGKILL`.
    pub signal: Option<String>,
    /// The limit that ended it (a start with limits whose tree hit its memory limit).
    pub limit: Option<crate::protocol::LimitHit>,
}

/// Events buffered per subscriber before the oldest are dropped for it.
pub(crate) const EVENT_BUFFER: usize = 256;

/// A notification from the server, decoded.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Event {
    /// `process/output`.
    Output {
        /// The process.
        process_id: String,
        /// The chunk (its seq is 0 from a Part A-only server).
        chunk: OutputChunk,
    },
    /// `process/exited`.
    Exited {
        /// The process.
        process_id: String,
        /// Seq of the last chunk sent before it.
        seq: u64,
        /// How it ended.
        status: ExitStatus,
    },
    /// `process/closed`: every stream of the process reached end of file.
    Closed {
        /// The process.
        process_id: String,
        /// Seq of the last chunk.
        seq: u64,
    },
    /// A notification this client does not know (or could not decode), raw.
    Unknown(Notification),
    /// This subscriber fell behind and `skipped` events were dropped for it.
    Lagged {
        /// How many.
        skipped: u64,
    },
}

impl Event {
    pub(crate) fn from_notification(notification: &Notification) -> Event {
        let params = &notification.params;
        let decoded = match notification.method.as_str() {
            m if m == ProcessOutput::NAME => {
                decode::<OutputParams>(params).map(|p| Event::Output {
                    process_id: p.process_id,
                    chunk: OutputChunk { seq: p.seq, stream: p.stream, bytes: p.chunk.0 },
                })
            }
            m if m == ProcessExited::NAME => {
                decode::<ExitedParams>(params).map(|p| Event::Exited {
                    process_id: p.process_id,
                    seq: p.seq,
                    status: ExitStatus { code: p.exit_code, signal: p.signal, limit: p.limit },
                })
            }
            m if m == ProcessClosed::NAME => decode::<ClosedParams>(params)
                .map(|p| Event::Closed { process_id: p.process_id, seq: p.seq }),
            _ => None,
        };
        decoded.unwrap_or_else(|| Event::Unknown(notification.clone()))
    }
}

fn decode<T: serde::de::DeserializeOwned>(params: &Value) -> Option<T> {
    serde_json::from_value(params.clone()).ok()
}

/// Every notification from the moment of [`crate::Client::events`], typed and
/// in order. Bounded: a subscriber that does not keep up gets
/// [`Event::Lagged`] instead of growing memory.
pub struct EventStream {
    pub(crate) receiver: broadcast::Receiver<Event>,
}

impl EventStream {
    /// The next event, or `None` once the connection is closed.
    pub async fn next(&mut self) -> Option<Event> {
        match self.receiver.recv().await {
            Ok(event) => Some(event),
            Err(broadcast::error::RecvError::Lagged(skipped)) => Some(Event::Lagged { skipped }),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }
}
