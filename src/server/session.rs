//! A session: the processes and the request state that a connection drives,
//! and that, in a listening server, outlive it until resumed or expired.

use std::sync::Arc;

use tokio::sync::mpsc;

use super::dispatch::State;
use super::link::Link;
use super::{Config, Handoff, Sessions, EVENT_QUEUE};
use crate::account::Account;
use crate::fs::Roots;
use crate::process::{Limits, ProcEvent, ProcessTable, CONNECTION_RETAINED, RETAINED_BYTES};
use crate::sessions::Registration;

pub(crate) struct Session {
    pub(super) state: State,
    pub(super) events: mpsc::Receiver<ProcEvent>,
    /// In a listening server: the registry's record, removed when the session ends.
    pub(super) registration: Option<Registration<Handoff>>,
}

impl Session {
    pub(super) fn new(
        roots: Arc<Roots>,
        config: &Config,
        retained: Arc<Account>,
        sessions: Option<&Arc<Sessions>>,
    ) -> Session {
        let (events_tx, events) = mpsc::channel(EVENT_QUEUE);
        let limits = Limits {
            max_processes: config.max_processes,
            retained_bytes: RETAINED_BYTES,
            connection_retained: CONNECTION_RETAINED,
            server_retained: config.max_retained_bytes,
            server_account: retained,
            reservation: config.id_reservation,
            sandbox: crate::sandbox::Settings {
                always: config.sandbox,
                network: config.sandbox_network,
                allow_hosts: allow_hosts(&config.sandbox_allow_hosts),
                helper: config.sandbox_helper.as_deref().map(Arc::from),
            },
            tree: config.limits,
            prepend_path: config.prepend_path.clone().into(),
        };
        let registration = sessions.map(|sessions| sessions.register());
        let (id, registry) = match &registration {
            Some(registration) => {
                (registration.id().clone(), Some(registration.registry().clone()))
            }
            None => (crate::sessions::new_id().into(), None),
        };
        let tunnels = crate::tunnel::Tunnels::new(
            config.tunnels,
            limits.server_account.clone(),
            config.max_retained_bytes,
        );
        let http = crate::http::Requests::new(
            config.http_requests,
            limits.server_account.clone(),
            config.max_retained_bytes,
        );
        let room =
            crate::hold::ServerRoom::new(limits.server_account.clone(), config.max_retained_bytes);
        let table = ProcessTable::new(events_tx, limits);
        let state = State::new(roots, table, id, registry, tunnels, http, room);
        Session { state, events, registration }
    }

    /// Takes the link a resuming connection handed over, with the answer to
    /// its `initialize` queued first.
    pub(super) fn resumed(&mut self, handoff: Handoff) -> Link {
        let Handoff { mut link, request, .. } = handoff;
        let mut lines = vec![self.state.resume(&request).into()];
        self.state.table.hold_exited(false, tokio::time::Instant::now());
        link.outbox.extend(&mut lines);
        link
    }
}

/// The server's own allow list (`--sandbox-allow-host`); a malformed one
/// (the binary refuses it first) allows nothing rather than everything.
fn allow_hosts(patterns: &[String]) -> Option<Arc<crate::dial::Rules>> {
    if patterns.is_empty() {
        return None;
    }
    let policy = crate::protocol::NetworkPolicy::allow(patterns.iter().cloned());
    let rules = crate::dial::Rules::parse(&policy).unwrap_or_else(|error| {
        tracing::error!(%error, "the sandbox's allow list is malformed; it allows nothing");
        crate::dial::Rules::nothing()
    });
    Some(Arc::new(rules))
}
