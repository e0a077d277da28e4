//! `process/read`: answered at once, or parked until output, the exit or
//! its deadline; each answer charged to the server-wide room until written.

use std::time::Duration;

use tokio::time::Instant;

use super::entry::Entry;
use super::timers::{Timer, TimerKey};
use super::{unknown, ProcessTable};
use crate::protocol::{encode_response, ErrorObject, ReadParams, RequestId};
use crate::transport::Line;

/// The answer to `process/read`: now, or later when output, exit or the deadline comes.
pub(crate) enum ReadOutcome {
    /// The encoded answer, charged until written.
    Ready(Line),
    Parked,
}

pub(super) struct ParkedRead {
    request: RequestId,
    serial: u64,
    params: ReadParams,
    deadline: TimerKey,
}

/// Longest `waitMs` honoured (one day).
pub(super) const MAX_WAIT: Duration = Duration::from_secs(24 * 3600);

/// `process/read`s waiting at once per connection.
pub(crate) const MAX_PARKED: usize = 10_000;

impl ProcessTable {
    /// `process/read`. A read with `waitMs` and nothing to return is parked.
    pub(crate) fn read(
        &mut self,
        request: RequestId,
        params: ReadParams,
        now: Instant,
    ) -> Result<ReadOutcome, ErrorObject> {
        let entry = self.get(&params.process_id)?;
        let after = params.after_seq.unwrap_or(0);
        let wait = params.wait_ms.map(Duration::from_millis).filter(|w| !w.is_zero());
        match wait {
            Some(wait) if !entry.read_ready(after) => {
                if self.parked.len() >= MAX_PARKED {
                    return Err(ErrorObject::invalid_request(format!(
                        "too many waiting reads: the limit is {MAX_PARKED} per connection; answer some before parking more"
                    )));
                }
                let serial = entry.serial;
                let wait_id = self.next_serial;
                self.next_serial += 1;
                let at = now + wait.min(MAX_WAIT);
                let deadline = self.timers.schedule(at, Timer::ReadDeadline(wait_id));
                self.parked.insert(wait_id, ParkedRead { request, serial, params, deadline });
                self.parked_by_process.entry(serial).or_default().insert(wait_id);
                Ok(ReadOutcome::Parked)
            }
            _ => Ok(ReadOutcome::Ready(self.read_reply(&request, Ok(entry), &params))),
        }
    }

    /// Answers every parked read with what there is now.
    pub(crate) fn answer_all_parked(&mut self, out: &mut Vec<Line>) {
        let mut waits: Vec<u64> = self.parked.keys().copied().collect();
        waits.sort_unstable();
        for wait_id in waits {
            if let Some(parked) = self.unpark(wait_id) {
                self.answer(parked, out);
            }
        }
    }

    /// Removes a parked read and its deadline timer.
    pub(super) fn unpark(&mut self, wait_id: u64) -> Option<ParkedRead> {
        let parked = self.parked.remove(&wait_id)?;
        self.timers.cancel(parked.deadline);
        if let Some(waits) = self.parked_by_process.get_mut(&parked.serial) {
            waits.remove(&wait_id);
            if waits.is_empty() {
                self.parked_by_process.remove(&parked.serial);
            }
        }
        Some(parked)
    }

    /// Answers the parked reads of `serial` that now have something to return.
    pub(super) fn wake(&mut self, serial: u64, out: &mut Vec<Line>) {
        let Some(waits) = self.parked_by_process.get(&serial) else { return };
        let Some(entry) = self.entry_by_serial(serial) else { return };
        let ready: Vec<u64> = waits
            .iter()
            .copied()
            .filter(|wait_id| {
                self.parked
                    .get(wait_id)
                    .is_some_and(|p| entry.read_ready(p.params.after_seq.unwrap_or(0)))
            })
            .collect();
        for wait_id in ready {
            if let Some(parked) = self.unpark(wait_id) {
                self.answer(parked, out);
            }
        }
    }

    pub(super) fn answer(&self, parked: ParkedRead, out: &mut Vec<Line>) {
        let entry =
            self.entry_by_serial(parked.serial).ok_or_else(|| unknown(&parked.params.process_id));
        out.push(self.read_reply(&parked.request, entry, &parked.params));
    }

    /// A `process/read` answer, charged to the server-wide room until it is
    /// written: the page is cut to what the room has free (as `maxBytes`
    /// would cut it; the first chunk always goes, so a full room still
    /// answers with one chunk, uncharged where the room lacks it).
    pub(super) fn read_reply(
        &self,
        request: &RequestId,
        entry: Result<&Entry, ErrorObject>,
        params: &ReadParams,
    ) -> Line {
        let room = self.account.tunnel_room(self.limits.server_retained);
        let result = entry.map(|entry| {
            // base64 is 4/3 of the bytes; the JSON of each chunk about 64 more.
            let free = (room.available_permits() / 4 * 3) as u64;
            let max_bytes = Some(params.max_bytes.map_or(free, |asked| asked.min(free)));
            entry.read(&ReadParams { max_bytes, ..params.clone() })
        });
        let line = encode_response(request, &result);
        let held = crate::hold::Held::try_take(&[&room], &self.account, line.len());
        Line::charged(line, held)
    }
}
