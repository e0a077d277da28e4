//! `process/write`: bytes queued for a process's stdin, bounded, with
//! retried writes acknowledged once.

use super::entry::Entry;
use super::pumps::{StdinError, StdinOp, STDIN_LIMIT};
use super::{too_long_id, write_ids, ProcessTable, MAX_PROCESS_ID_BYTES};
use crate::protocol::{ErrorObject, WriteParams, WriteResult, WriteStatus};

/// Why stdin took no write.
pub(super) enum StdinRefusal {
    Closed(ErrorObject),
    Other(ErrorObject),
}

impl Entry {
    pub(super) fn write_stdin(&mut self, params: WriteParams) -> Result<WriteResult, StdinRefusal> {
        let entry = self;
        let id = &params.process_id;
        use StdinRefusal::Other;
        if entry.tty && params.close_stdin {
            return Err(Other(ErrorObject::invalid_request(format!(
                "closeStdin is not supported for tty process {id}: write the terminal's EOF character (\\u0004) instead"
            ))));
        }
        let closed = || {
            StdinRefusal::Closed(ErrorObject::invalid_request(format!(
                "stdin is closed for process {id}"
            )))
        };
        // A terminal whose every holder is gone takes no input: refuse rather
        // than accept bytes that nobody can read.
        if entry.tty && !entry.streams_open() {
            entry.stdin = None;
        }
        let stdin = entry.stdin.as_ref().ok_or_else(closed)?;
        let op = StdinOp { bytes: params.chunk.0, close: params.close_stdin };
        match stdin.push(op) {
            Ok(()) => {}
            Err(StdinError::TooLarge(size)) => {
                return Err(Other(ErrorObject::invalid_request(format!(
                    "the chunk for process {id} is too large: {size} bytes, and at most {STDIN_LIMIT} bytes of stdin can wait; send it in pieces"
                ))))
            }
            Err(StdinError::Full(queued)) => {
                return Err(Other(ErrorObject::invalid_request(format!(
                    "stdin of process {id} is full: {queued} bytes wait for it to read, and the limit is {STDIN_LIMIT} bytes"
                ))))
            }
            Err(StdinError::Closed) => {
                entry.stdin = None;
                return Err(closed());
            }
        }
        if let Some(write_id) = &params.write_id {
            entry.write_ids.insert(write_id);
        }
        if params.close_stdin {
            entry.stdin = None;
        }
        Ok(WriteResult { accepted: true, status: WriteStatus::Accepted })
    }
}

impl ProcessTable {
    /// `process/write`: queued for the process's stdin, bounded in bytes. A
    /// refusal says which [`WriteStatus`] it is, when it is one.
    pub(crate) fn write(
        &mut self,
        params: WriteParams,
    ) -> Result<WriteResult, (Option<WriteStatus>, ErrorObject)> {
        let id = &params.process_id;
        if id.len() > MAX_PROCESS_ID_BYTES {
            return Err((None, too_long_id(id)));
        }
        if let Some(write_id) = &params.write_id {
            write_ids::WriteIds::check(write_id, id).map_err(|e| (None, e))?;
        }
        let entry = self.get_mut(id).map_err(|e| (Some(WriteStatus::UnknownProcess), e))?;
        if params.write_id.as_deref().is_some_and(|w| entry.write_ids.contains(w)) {
            tracing::debug!(%id, "a retried write was acknowledged again, not applied");
            return Ok(WriteResult { accepted: true, status: WriteStatus::Accepted });
        }
        let closed = |error| (Some(WriteStatus::StdinClosed), error);
        entry.write_stdin(params).map_err(|error| match error {
            StdinRefusal::Closed(error) => closed(error),
            StdinRefusal::Other(error) => (None, error),
        })
    }
}
