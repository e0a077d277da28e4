//! Encoded messages waiting for room in the writer's queue, bounded in bytes.

use std::collections::VecDeque;

use tokio::sync::mpsc::{Permit, Sender};

use crate::transport::Line;

/// Past this many bytes waiting, the loop stops taking input and process events.
/// Small, since stdout pipes are grown to 256 KiB (`stdio`): the kernel buffers the rest.
const OUTBOX_BYTES: usize = 128 * 1024;

/// Lines for the writer, in order.
#[derive(Debug, Default)]
pub(super) struct Outbox {
    lines: VecDeque<Line>,
    bytes: usize,
    /// The output is gone: lines are dropped instead of kept.
    closed: bool,
}

impl Outbox {
    /// Moves `out`'s lines to the back of the queue.
    pub(super) fn extend(&mut self, out: &mut Vec<Line>) {
        if self.closed {
            out.clear();
            return;
        }
        for line in out.drain(..) {
            self.bytes += line.len();
            self.lines.push_back(line);
        }
    }

    /// Whether the loop may take more work that produces lines.
    pub(super) fn has_room(&self) -> bool {
        self.bytes < OUTBOX_BYTES
    }

    pub(super) fn is_closed(&self) -> bool {
        self.closed
    }

    pub(super) fn has_lines(&self) -> bool {
        !self.lines.is_empty()
    }

    /// Sends the first line through `permit`, and as many more as fit without waiting.
    pub(super) fn send(&mut self, permit: Permit<'_, Line>, sender: &Sender<Line>) {
        let Some(line) = self.pop() else { return };
        permit.send(line);
        self.send_ready(sender);
    }

    /// Sends as many lines as fit in the writer's queue now, without waiting:
    /// a reply leaves in the same turn of the loop that made it.
    pub(super) fn send_ready(&mut self, sender: &Sender<Line>) {
        while self.has_lines() {
            let Ok(permit) = sender.try_reserve() else { return };
            if let Some(line) = self.pop() {
                permit.send(line);
            }
        }
    }

    /// Sends every line, waiting for room (the caller bounds the wait).
    pub(super) async fn flush(&mut self, sender: &Sender<Line>) {
        while let Some(line) = self.pop() {
            if sender.send(line).await.is_err() {
                return;
            }
        }
    }

    /// The output is gone: drop what waits and anything added later.
    pub(super) fn close(&mut self) {
        self.closed = true;
        self.lines.clear();
        self.bytes = 0;
    }

    fn pop(&mut self) -> Option<Line> {
        let line = self.lines.pop_front()?;
        self.bytes -= line.len();
        Some(line)
    }
}
