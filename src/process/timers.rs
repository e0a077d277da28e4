//! The table's timers: one ordered map, so a timer can be cancelled when what it guards is done.

use std::collections::BTreeMap;

use tokio::time::Instant;

/// What a timer does when it fires; `u64`s name a process serial or a parked read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timer {
    ReadDeadline(u64),
    ExitDrain(u64),
    KillAfterGrace(u64),
    Forget(u64),
}

/// A scheduled timer, for cancelling it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct TimerKey(Instant, u64);

/// Timers ordered by deadline.
#[derive(Debug, Default)]
pub(crate) struct Timers {
    due: BTreeMap<TimerKey, Timer>,
    next: u64,
}

impl Timers {
    pub(crate) fn schedule(&mut self, at: Instant, timer: Timer) -> TimerKey {
        let key = TimerKey(at, self.next);
        self.next += 1;
        self.due.insert(key, timer);
        key
    }

    pub(crate) fn cancel(&mut self, key: TimerKey) {
        self.due.remove(&key);
    }

    /// When the next timer is due.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.due.keys().next().map(|key| key.0)
    }

    /// Removes and returns the earliest timer due at `now`.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<Timer> {
        let (&key, _) = self.due.first_key_value()?;
        if key.0 > now {
            return None;
        }
        self.due.remove(&key)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.due.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn fires_in_order_and_forgets_cancelled_timers() {
        let start = Instant::now();
        let mut timers = Timers::default();
        let late = timers.schedule(start + Duration::from_secs(2), Timer::Forget(1));
        timers.schedule(start + Duration::from_secs(1), Timer::ExitDrain(2));
        let cancelled = timers.schedule(start + Duration::from_millis(500), Timer::ReadDeadline(3));
        timers.cancel(cancelled);
        assert_eq!(timers.len(), 2);
        assert_eq!(timers.next_deadline(), Some(start + Duration::from_secs(1)));
        assert_eq!(timers.pop_due(start), None);
        assert_eq!(timers.pop_due(start + Duration::from_secs(5)), Some(Timer::ExitDrain(2)));
        timers.cancel(late);
        assert_eq!(timers.pop_due(start + Duration::from_secs(5)), None);
        assert_eq!(timers.len(), 0);
    }
}
