//! Sessions of a listening server: which exist, which are attached to a
//! connection, and which wait detached for a client to resume them.
//!
//! A session is created by every connection's `initialize` and registered
//! here as attached. When its connection goes, the session's own thread parks
//! it (`server::park`) and marks it detached, with a [`Wake`] sender through
//! which a resuming connection hands it the new link. A detached session ends
//! when `--session-ttl` passes, when the server stops, or when it is the
//! oldest beyond `--max-detached-sessions` (see [`Registry::detach`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::protocol::{codes, ErrorObject};

/// Default `--session-ttl`: how long a detached session waits to be resumed.
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(30);
/// Default `--max-detached-sessions`: beyond, the oldest detached session ends.
pub const DEFAULT_MAX_DETACHED_SESSIONS: usize = 32;

/// What a parked session is woken for.
pub(crate) enum Wake<L> {
    /// A connection resumes it, handing over its link.
    Resume(L),
    /// It is evicted (too many detached sessions): end it.
    End,
}

/// Why a session cannot be resumed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ClaimError {
    /// Never existed, ended, or expired.
    Unknown(String),
    /// Attached to a live connection.
    Attached(String),
}

impl ClaimError {
    /// The protocol's error for it (PROTOCOL.md, Sessions; exact texts).
    pub(crate) fn to_error(&self) -> ErrorObject {
        match self {
            ClaimError::Unknown(id) => {
                ErrorObject::invalid_request(format!("unknown session id {id}"))
            }
            ClaimError::Attached(id) => ErrorObject::new(
                codes::SESSION_ATTACHED,
                format!("session {id} is already attached to another connection"),
            ),
        }
    }
}

enum Slot<L> {
    /// `kick` closes its connection (a resume with `takeover`).
    Attached { kick: Option<oneshot::Sender<()>> },
    /// `busy`: it has processes (sessions without any are evicted first).
    Detached { wake: oneshot::Sender<Wake<L>>, order: u64, busy: bool },
}

struct Inner<L> {
    slots: HashMap<Arc<str>, Slot<L>>,
    /// Increases with every detach: the lowest detached `order` is the oldest.
    next_order: u64,
}

/// The sessions of one listening server; `L` is what a resume hands over.
pub(crate) struct Registry<L> {
    inner: Mutex<Inner<L>>,
    /// How long a detached session waits.
    pub(crate) ttl: Duration,
    max_detached: usize,
}

impl<L> Registry<L> {
    pub(crate) fn new(ttl: Duration, max_detached: usize) -> Registry<L> {
        Registry {
            inner: Mutex::new(Inner { slots: HashMap::new(), next_order: 0 }),
            ttl,
            max_detached,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner<L>> {
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A new session, attached; it leaves the registry when the guard drops.
    pub(crate) fn register(self: &Arc<Self>) -> Registration<L> {
        let id: Arc<str> = new_id().into();
        self.lock().slots.insert(id.clone(), Slot::Attached { kick: None });
        Registration { registry: self.clone(), id }
    }

    /// Marks `id` detached (`busy`: it has processes), woken through the
    /// returned receiver. Beyond `max_detached` detached sessions, one is told
    /// to end: the oldest without processes, else the oldest.
    pub(crate) fn detach(&self, id: &Arc<str>, busy: bool) -> oneshot::Receiver<Wake<L>> {
        let (wake, woken) = oneshot::channel();
        let mut inner = self.lock();
        let order = inner.next_order;
        inner.next_order += 1;
        inner.slots.insert(id.clone(), Slot::Detached { wake, order, busy });
        let detached = inner.slots.values().filter(|s| matches!(s, Slot::Detached { .. })).count();
        if detached > self.max_detached {
            let oldest = inner
                .slots
                .iter()
                .filter_map(|(id, slot)| match slot {
                    Slot::Detached { order, busy, .. } => Some((*busy, *order, id.clone())),
                    Slot::Attached { .. } => None,
                })
                .min();
            if let Some((_, _, oldest)) = oldest {
                // Gone from the registry at once: a resume of it is "unknown" from now on.
                if let Some(Slot::Detached { wake, .. }) = inner.slots.remove(&oldest) {
                    tracing::warn!(session = %oldest, limit = self.max_detached, "too many detached sessions; ending the oldest");
                    let _ = wake.send(Wake::End);
                }
            }
        }
        woken
    }

    /// Takes detached session `id` for a resuming connection: it is attached
    /// from now on, and the caller wakes it with the link. With `takeover`, a
    /// session still attached has its connection closed (the client knows
    /// that one is dead); it detaches, and the next claim finds it free.
    pub(crate) fn claim(
        &self,
        id: &str,
        takeover: bool,
    ) -> Result<oneshot::Sender<Wake<L>>, ClaimError> {
        let mut inner = self.lock();
        let Some(slot) = inner.slots.get_mut(id) else {
            return Err(ClaimError::Unknown(id.to_owned()));
        };
        match std::mem::replace(slot, Slot::Attached { kick: None }) {
            Slot::Detached { wake, .. } if !wake.is_closed() => Ok(wake),
            Slot::Detached { .. } => Err(ClaimError::Unknown(id.to_owned())),
            Slot::Attached { kick } => {
                match kick {
                    Some(kick) if takeover => {
                        tracing::info!(session = %id, "a resume takes the session over; closing its connection");
                        let _ = kick.send(());
                    }
                    kick => *slot = Slot::Attached { kick },
                }
                Err(ClaimError::Attached(id.to_owned()))
            }
        }
    }

    /// The session is attached to a new connection: the returned receiver
    /// fires when a resume with `takeover` wants that connection closed.
    pub(crate) fn attached(&self, id: &str) -> oneshot::Receiver<()> {
        let (kick, kicked) = oneshot::channel();
        if let Some(slot @ Slot::Attached { .. }) = self.lock().slots.get_mut(id) {
            *slot = Slot::Attached { kick: Some(kick) };
        }
        kicked
    }

    /// The ttl of detached session `id` has passed: true (and it is gone from
    /// the registry, to end) unless a connection claimed it meanwhile.
    pub(crate) fn expire(&self, id: &str) -> bool {
        let mut inner = self.lock();
        if matches!(inner.slots.get(id), Some(Slot::Detached { .. })) {
            inner.slots.remove(id);
            return true;
        }
        false
    }
}

/// A registered session; dropping it removes the session.
pub(crate) struct Registration<L> {
    registry: Arc<Registry<L>>,
    id: Arc<str>,
}

impl<L> Registration<L> {
    pub(crate) fn id(&self) -> &Arc<str> {
        &self.id
    }

    pub(crate) fn registry(&self) -> &Arc<Registry<L>> {
        &self.registry
    }
}

impl<L> Drop for Registration<L> {
    fn drop(&mut self) {
        self.registry.lock().slots.remove(&self.id);
    }
}

pub(crate) use crate::transport::new_id;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_look_like_uuids_and_differ() {
        let (a, b) = (new_id(), new_id());
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
    }

    #[test]
    fn claim_expire_and_evict() {
        let registry = Arc::new(Registry::<u32>::new(DEFAULT_SESSION_TTL, 1));
        let first = registry.register();
        let id = first.id().clone();
        assert_eq!(registry.claim(&id, false).err(), Some(ClaimError::Attached(id.to_string())));
        assert_eq!(registry.claim("nope", false).err(), Some(ClaimError::Unknown("nope".into())));
        // A takeover closes the attached connection (and still says attached).
        let mut kicked = registry.attached(&id);
        assert!(registry.claim(&id, false).is_err() && kicked.try_recv().is_err());
        assert_eq!(registry.claim(&id, true).err(), Some(ClaimError::Attached(id.to_string())));
        assert!(kicked.try_recv().is_ok());
        let mut woken = registry.detach(&id, true);
        let wake = registry.claim(&id, false).map_err(|_| "claim failed");
        assert!(!registry.expire(&id), "a claimed session does not expire");
        assert!(wake.is_ok_and(|wake| wake.send(Wake::Resume(7)).is_ok()));
        assert!(matches!(woken.try_recv(), Ok(Wake::Resume(7))));
        // Two detached sessions with room for one: the older is told to end,
        // unless the newer has no processes.
        let second = registry.register();
        let mut first_woken = registry.detach(&id, true);
        let mut second_woken = registry.detach(second.id(), false);
        assert!(matches!(second_woken.try_recv(), Ok(Wake::End)));
        assert!(first_woken.try_recv().is_err());
        let _second_woken = registry.detach(second.id(), true);
        assert!(matches!(first_woken.try_recv(), Ok(Wake::End)));
        assert_eq!(registry.claim(&id, false).err(), Some(ClaimError::Unknown(id.to_string())));
        assert!(registry.expire(second.id()));
        assert_eq!(
            registry.claim(second.id(), false).err(),
            Some(ClaimError::Unknown(second.id().to_string()))
        );
        drop((first, second));
        assert!(registry.lock().slots.is_empty());
    }
}
