//! Bytes of response bodies held in memory: charged to the request's own
//! buffer (streams), to the server-wide room and to the retention account,
//! and given back when dropped (once the loop has handed them to the outbox).

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::process::Account;

/// Held bytes; dropping gives them back.
pub(super) struct Held {
    room: Option<OwnedSemaphorePermit>,
    own: Option<OwnedSemaphorePermit>,
    account: Arc<Account>,
    bytes: usize,
}

impl Held {
    /// Waits for `bytes` of the request's buffer `own`, then of the server's `room`.
    /// `None` when a semaphore is closed (never, in practice).
    pub(super) async fn wait(
        room: &Arc<Semaphore>,
        own: &Arc<Semaphore>,
        account: &Arc<Account>,
        bytes: usize,
    ) -> Option<Held> {
        let count = u32::try_from(bytes).ok()?;
        let own = own.clone().acquire_many_owned(count).await.ok()?;
        let room = room.clone().acquire_many_owned(count).await.ok()?;
        account.hold(bytes);
        Some(Held { room: Some(room), own: Some(own), account: account.clone(), bytes })
    }

    /// `bytes` of the server's `room` if it has them now (a buffered body
    /// never waits for room: two of them could each wait for the other).
    pub(super) fn try_take(
        room: &Arc<Semaphore>,
        account: &Arc<Account>,
        bytes: usize,
    ) -> Option<Held> {
        let count = u32::try_from(bytes).ok()?;
        let room = room.clone().try_acquire_many_owned(count).ok()?;
        account.hold(bytes);
        Some(Held { room: Some(room), own: None, account: account.clone(), bytes })
    }

    /// Adds `other` to this hold.
    pub(super) fn merge(&mut self, mut other: Held) {
        merge(&mut self.room, other.room.take());
        merge(&mut self.own, other.own.take());
        self.bytes += other.bytes;
        other.bytes = 0;
    }

    /// Splits `bytes` (at most what is held) off into a hold of their own.
    pub(super) fn split_off(&mut self, bytes: usize) -> Held {
        let bytes = bytes.min(self.bytes);
        let room = self.room.as_mut().and_then(|permit| permit.split(bytes));
        let own = self.own.as_mut().and_then(|permit| permit.split(bytes));
        self.bytes -= bytes;
        Held { room, own, account: self.account.clone(), bytes }
    }

    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }
}

fn merge(into: &mut Option<OwnedSemaphorePermit>, from: Option<OwnedSemaphorePermit>) {
    match (into.as_mut(), from) {
        (Some(mine), Some(theirs)) => mine.merge(theirs),
        (None, theirs) => *into = theirs,
        (Some(_), None) => {}
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.account.release(self.bytes);
    }
}
