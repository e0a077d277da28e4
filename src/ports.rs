//! The listening ports of a session (Part B): `ports/list` on demand, and
//! `ports/changed` while watched.
//!
//! Every look is a blocking scan of `/proc` ([`scan`]) on a blocking thread,
//! one at a time per connection; the loop hands over its processes when a
//! scan starts and takes the result as one more source of lines. While
//! watched, a scan runs every [`PORTS_POLL_INTERVAL`]; nothing runs otherwise.

mod scan;

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::{sleep_until, Instant};

use crate::process::tree::Session;
use crate::protocol::{
    encode_notification, encode_response, ErrorObject, ListeningPort, PortsChanged,
    PortsChangedParams, PortsResult, RequestId,
};
use crate::transport::Line;

/// How often a watched session's ports are looked at.
pub const PORTS_POLL_INTERVAL: Duration = Duration::from_millis(500);
/// `ports/list` requests that may wait for a scan on one connection.
pub const MAX_WAITING_LISTS: usize = 1024;

type Scanned = Result<Vec<ListeningPort>, String>;

/// What woke the loop for the ports.
pub(crate) enum PortsWake {
    /// A watched scan is due.
    Poll,
    /// A scan finished.
    Scanned(Scanned),
    /// A `ports/list` may be answered from the last scan (one at a time, so
    /// replies wait for room in the outbox like any other line).
    Reply,
}

/// One connection's port lookups.
#[derive(Default)]
pub(crate) struct Ports {
    /// `ports/list` requests answered by the scan in flight.
    answering: Vec<RequestId>,
    /// `ports/list` requests that came during it: the next scan answers them.
    waiting: Vec<RequestId>,
    /// Requests the last scan answers, one line at a time, and its result.
    replying: std::collections::VecDeque<RequestId>,
    result: Option<Scanned>,
    scan: Option<JoinHandle<Scanned>>,
    watching: bool,
    /// What the last watched scan found (`None`: nothing reported yet).
    known: Option<BTreeSet<ListeningPort>>,
    next_poll: Option<Instant>,
}

impl Drop for Ports {
    fn drop(&mut self) {
        if let Some(scan) = self.scan.take() {
            scan.abort();
        }
    }
}

impl Ports {
    /// `ports/list`: answered when a scan that started after it finishes;
    /// refused when [`MAX_WAITING_LISTS`] already wait.
    pub(crate) fn list(
        &mut self,
        request: RequestId,
        roster: impl FnOnce() -> Vec<(String, Session)>,
    ) -> Result<(), ErrorObject> {
        if self.answering.len() + self.waiting.len() + self.replying.len() >= MAX_WAITING_LISTS {
            return Err(ErrorObject::invalid_request(format!(
                "ports/list refused: {MAX_WAITING_LISTS} wait for a scan already on this connection"
            )));
        }
        if self.scan.is_some() || !self.replying.is_empty() {
            self.waiting.push(request);
        } else {
            self.answering.push(request);
            self.start(roster());
        }
        Ok(())
    }

    /// No `ports/list` waits for its reply.
    pub(crate) fn is_idle(&self) -> bool {
        self.answering.is_empty() && self.waiting.is_empty() && self.replying.is_empty()
    }

    /// `ports/watch`: the first scan reports every port open now, then changes.
    pub(crate) fn watch(&mut self) {
        if !self.watching {
            self.watching = true;
            self.known = None;
            self.next_poll = Some(Instant::now());
        }
    }

    /// `ports/unwatch`.
    pub(crate) fn unwatch(&mut self) {
        self.watching = false;
        self.known = None;
        self.next_poll = None;
    }

    /// The next thing to do (pending while nothing is watched or scanning).
    pub(crate) async fn next(&mut self) -> PortsWake {
        if !self.replying.is_empty() {
            return PortsWake::Reply;
        }
        let poll = self.next_poll.filter(|_| self.scan.is_none());
        tokio::select! {
            done = async {
                match self.scan.as_mut() {
                    Some(scan) => scan.await,
                    None => std::future::pending().await,
                }
            } => {
                self.scan = None;
                PortsWake::Scanned(done.unwrap_or_else(|error| Err(format!("the scan failed: {error}"))))
            }
            () = sleep_until(poll.unwrap_or_else(Instant::now)), if poll.is_some() => PortsWake::Poll,
        }
    }

    /// Acts on a wake; `roster` gives the session's processes if a scan starts.
    pub(crate) fn on_wake(
        &mut self,
        wake: PortsWake,
        roster: impl FnOnce() -> Vec<(String, Session)>,
        out: &mut Vec<Line>,
    ) {
        match wake {
            PortsWake::Poll => {
                self.next_poll = None;
                self.start(roster());
            }
            PortsWake::Scanned(result) => {
                if self.watching {
                    if let Ok(ports) = &result {
                        self.report(ports.clone(), out);
                    }
                    self.next_poll = Some(Instant::now() + PORTS_POLL_INTERVAL);
                }
                self.replying.extend(self.answering.drain(..));
                self.result = Some(result);
                self.after_replies(roster);
            }
            PortsWake::Reply => {
                if let (Some(request), Some(result)) = (self.replying.pop_front(), &self.result) {
                    out.push(reply(&request, result).into());
                }
                self.after_replies(roster);
            }
        }
    }

    /// Once every reply of the last scan is out: the requests that came
    /// meanwhile get a scan of their own.
    fn after_replies(&mut self, roster: impl FnOnce() -> Vec<(String, Session)>) {
        if !self.replying.is_empty() {
            return;
        }
        self.result = None;
        if !self.waiting.is_empty() && self.scan.is_none() {
            self.answering = std::mem::take(&mut self.waiting);
            self.start(roster());
        }
    }

    fn start(&mut self, roster: Vec<(String, Session)>) {
        let scan = tokio::task::spawn_blocking(move || {
            scan::scan(&roster).map_err(|error| format!("cannot read /proc: {error}"))
        });
        self.scan = Some(scan);
    }

    /// `ports/changed` with the difference from the last report, if any.
    fn report(&mut self, ports: Vec<ListeningPort>, out: &mut Vec<Line>) {
        let now: BTreeSet<ListeningPort> = ports.into_iter().collect();
        let before = self.known.take().unwrap_or_default();
        let mut opened: Vec<_> = now.difference(&before).cloned().collect();
        let mut closed: Vec<_> = before.difference(&now).cloned().collect();
        for list in [&mut opened, &mut closed] {
            list.sort_by(|a, b| (a.port, &a.address, a.pid).cmp(&(b.port, &b.address, b.pid)));
        }
        if !opened.is_empty() || !closed.is_empty() {
            let params = PortsChangedParams { opened, closed };
            out.push(encode_notification::<PortsChanged>(&params, 256).into());
        }
        self.known = Some(now);
    }
}

/// The reply to one `ports/list` from a scan's result.
fn reply(request: &RequestId, result: &Scanned) -> String {
    let reply = match result {
        Ok(ports) => Ok(PortsResult { ports: ports.clone() }),
        Err(error) => {
            Err(ErrorObject::internal(format!("cannot list the listening ports: {error}")))
        }
    };
    encode_response(request, &reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lists_waiting_for_a_scan_are_bounded() {
        let mut ports = Ports::default();
        for id in 0..MAX_WAITING_LISTS {
            let id = i64::try_from(id).unwrap_or(i64::MAX);
            assert!(ports.list(RequestId::from(id), Vec::new).is_ok());
        }
        let refused = ports.list(RequestId::from(-5), Vec::new).err().map(|e| e.message);
        assert_eq!(
            refused.as_deref(),
            Some("ports/list refused: 1024 wait for a scan already on this connection")
        );
        // One scan answers them all, one line per wake.
        let mut out = Vec::new();
        let wake = ports.next().await;
        ports.on_wake(wake, Vec::new, &mut out);
        assert!(out.is_empty());
        while !ports.is_idle() {
            let wake = ports.next().await;
            ports.on_wake(wake, Vec::new, &mut out);
        }
        assert_eq!(out.len(), MAX_WAITING_LISTS);
        assert_eq!(out[0].text(), r#"{"id":0,"result":{"ports":[]}}"#);
    }
}
