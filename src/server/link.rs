//! One connection as a session's loop holds it: the transport's channels and
//! tasks, and the replies waiting for room. A link can be handed to another
//! session (a resume) with whatever it still holds.

use std::io;

use tokio::sync::{mpsc, oneshot};

use super::outbox::Outbox;
use super::{AbortOnDrop, Channels, FINAL_FLUSH};
use crate::protocol::{encode_response, Empty, ErrorObject, RequestId};
use crate::transport::{Incoming, Line};

pub(crate) struct Link {
    pub(super) incoming: mpsc::Receiver<Incoming>,
    pub(super) lines: mpsc::Sender<Line>,
    pub(super) input_ended: oneshot::Receiver<()>,
    /// `input_ended` has fired (or its sender is gone).
    pub(super) ending_seen: bool,
    pub(super) outbox: Outbox,
    reader: AbortOnDrop<()>,
    writer: AbortOnDrop<io::Result<()>>,
    /// Held while the link is in use by a session on another thread: that
    /// thread's runtime drives the link's tasks and waits for this to drop.
    pub(super) keep_alive: Option<oneshot::Sender<()>>,
}

impl Link {
    pub(super) fn new(channels: Channels) -> Link {
        let Channels { incoming, outgoing, reader, writer, input_ended } = channels;
        Link {
            incoming,
            lines: outgoing,
            input_ended,
            ending_seen: false,
            outbox: Outbox::default(),
            reader: AbortOnDrop(reader),
            writer: AbortOnDrop(writer),
            keep_alive: None,
        }
    }

    /// Queues an error reply to `id`.
    pub(super) fn refuse(&mut self, id: &RequestId, error: ErrorObject) {
        self.outbox.extend(&mut vec![encode_response::<Empty>(id, &Err(error)).into()]);
    }

    /// Sends what waits (for at most [`FINAL_FLUSH`]), closes the output and
    /// waits (as long again) for the writer to finish.
    pub(super) async fn finish(mut self, out: &mut Vec<Line>) -> io::Result<()> {
        self.outbox.extend(out);
        let flushed = tokio::time::timeout(FINAL_FLUSH, self.outbox.flush(&self.lines)).await;
        if flushed.is_err() {
            tracing::warn!("the client did not read the last replies in time; dropping them");
        }
        let Link { lines, reader, mut writer, keep_alive, .. } = self;
        drop(lines);
        drop(reader);
        let result = match tokio::time::timeout(FINAL_FLUSH, &mut writer.0).await {
            // The client closing its end is how a connection may end; not an error.
            Ok(Ok(Err(error))) if error.kind() == io::ErrorKind::BrokenPipe => Ok(()),
            Ok(Ok(result)) => result,
            Ok(Err(error)) => Err(io::Error::other(error)),
            Err(_) => {
                tracing::warn!("the client stopped reading; leaving its last replies unsent");
                Ok(())
            }
        };
        drop(keep_alive);
        result
    }
}
