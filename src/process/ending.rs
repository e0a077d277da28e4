//! How a table's processes end: killed with the connection, their
//! families ended with the session, forgotten ones lingering until then.

use std::sync::Arc;

use tokio::time::Instant;

use super::entry::Entry;
use super::registry;
use super::signal::Signal;
use super::timers::Timer;
use super::tree::{self, Session};
use super::ProcessTable;
use crate::limits::Group;

/// Sessions of forgotten processes a table keeps sweeping at its end.
pub(super) const MAX_LINGERING: usize = 4096;

impl ProcessTable {
    /// A blocking sweep (it reads `/proc`) that ends every family of this
    /// session, the descendants that left its sessions (setsid) included,
    /// with none able to slip away meanwhile (see [`tree::end_families`]):
    /// run it off the loop when a session ends (a detached one follows it
    /// with [`ProcessTable::kill_all`] for what started meanwhile).
    pub(crate) fn family_ender(&self) -> impl FnOnce() -> usize + Send + 'static {
        let leaders: Vec<u32> =
            self.entries.values().filter(|e| e.is_running()).map(|e| e.pid).collect();
        let sessions = self.all_sessions();
        let groups = self.all_groups();
        move || tree::end_families(&leaders, &sessions) + tree::kill_groups(&groups)
    }

    /// While held (a detached session), exited processes are not forgotten
    /// when their id reservation passes: the client has not been told yet.
    /// Released, each gets a whole reservation again from now.
    pub(crate) fn hold_exited(&mut self, hold: bool, now: Instant) {
        self.holding = hold;
        if !hold {
            self.released = Some(now);
            let serials: Vec<u64> = self.entries.values().map(|entry| entry.serial).collect();
            for serial in serials {
                self.timers.schedule(now + self.limits.reservation, Timer::Forget(serial));
            }
        }
    }

    /// Ends the session at its client's word (`session/end`): one
    /// [`ProcessTable::family_ender`] sweep, off the loop.
    pub(crate) fn end_session(&mut self) {
        self.closing = true;
        if !self.entries.is_empty() || !self.lingering.is_empty() {
            self.sweeps.spawn_blocking(self.family_ender());
        }
        self.kill_stuck_starts();
    }

    /// The session ends while starts are under way (a `session/end` waits
    /// behind them): each is killed once started, and one stuck in its exec
    /// (a program on a hung mount) is killed now, which lets the rest finish.
    pub(crate) fn end_starts(&mut self) {
        self.closing = true;
        self.kill_stuck_starts();
    }

    fn kill_stuck_starts(&mut self) {
        if !self.starting.is_empty() {
            let kill_stuck = self.spawner.kill_stuck();
            self.sweeps.spawn_blocking(move || {
                kill_stuck();
                0
            });
        }
    }

    /// Kills every process group and session (connection end), in one
    /// sweep, and everything in the cgroups of limited processes.
    pub(crate) fn kill_all(&mut self) {
        self.closing = true;
        let lingering = self.lingering.iter().map(|(session, _)| *session);
        let sessions: Vec<Session> = self
            .entries
            .values()
            .map(|entry| entry.signal_tree(&[Signal::KILL]))
            .chain(lingering)
            .collect();
        self.sweep(sessions, &[Signal::KILL]);
        let groups = self.all_groups();
        if !groups.is_empty() {
            self.sweeps.spawn_blocking(move || tree::kill_groups(&groups));
        }
        self.kill_stuck_starts();
    }

    /// Drops the entry of `id`; its session lingers (see `lingering`).
    pub(super) fn forget(&mut self, id: &str) {
        let Some(entry) = self.entries.remove(id) else { return };
        // Its cgroup lingers too, to be killed at the end if a background job
        // is still in it (looked at off the loop then: a member may have made
        // any number of cgroups below it).
        if let Some(group) = entry.group.clone() {
            self.lingering_groups.push_back(group);
            if self.lingering_groups.len() > MAX_LINGERING {
                self.lingering_groups.pop_front();
            }
        }
        self.lingering.push_back((entry.session(), entry.pid));
        if self.lingering.len() > MAX_LINGERING {
            if let Some((_, pid)) = self.lingering.pop_front() {
                registry::forgotten(pid);
            }
        }
    }

    /// Every session to sweep when the table ends: its processes' and the lingering ones.
    pub(super) fn all_sessions(&self) -> Vec<Session> {
        let lingering = self.lingering.iter().map(|(session, _)| *session);
        self.entries.values().map(Entry::session).chain(lingering).collect()
    }

    /// The cgroups of its limited processes, forgotten ones included.
    pub(super) fn all_groups(&self) -> Vec<Arc<Group>> {
        let live = self.entries.values().filter_map(|entry| entry.group.clone());
        live.chain(self.lingering_groups.iter().cloned()).collect()
    }

    /// Runs a `/proc` sweep of `sessions` off the loop.
    pub(super) fn sweep(&mut self, sessions: Vec<Session>, signals: &[Signal]) {
        if sessions.is_empty() {
            return;
        }
        let signals = signals.to_vec();
        self.sweeps.spawn_blocking(move || tree::signal_sessions(&sessions, &signals));
    }
}
