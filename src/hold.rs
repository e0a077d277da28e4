//! Bytes held in memory against budgets of bytes (semaphores: a connection's
//! share, a request's buffer, the server-wide room) and charged to the
//! retention account; given back when dropped. Tunnels and `http/request`
//! bodies hold their buffers so.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::account::Account;

/// Held bytes: one permit per budget, in the order they were taken.
pub(crate) struct Held {
    permits: Vec<OwnedSemaphorePermit>,
    account: Arc<Account>,
    bytes: usize,
    /// A turn held with the bytes (the server's one oversized answer).
    turn: Option<OwnedSemaphorePermit>,
}

impl Held {
    /// Waits for `bytes` of each budget in turn (all of one before the next,
    /// so nothing is held while waiting for more of the same budget).
    /// `None` when a budget is closed or `bytes` is too large to ask for.
    pub(crate) async fn wait(
        budgets: &[&Arc<Semaphore>],
        account: &Arc<Account>,
        bytes: usize,
    ) -> Option<Held> {
        let count = u32::try_from(bytes).ok()?;
        let mut permits = Vec::with_capacity(budgets.len());
        for budget in budgets {
            permits.push((*budget).clone().acquire_many_owned(count).await.ok()?);
        }
        Some(Held::charged(permits, account, bytes))
    }

    /// `bytes` of every budget now, or `None` when one lacks them.
    pub(crate) fn try_take(
        budgets: &[&Arc<Semaphore>],
        account: &Arc<Account>,
        bytes: usize,
    ) -> Option<Held> {
        let count = u32::try_from(bytes).ok()?;
        let permits = budgets
            .iter()
            .map(|budget| (*budget).clone().try_acquire_many_owned(count).ok())
            .collect::<Option<Vec<_>>>()?;
        Some(Held::charged(permits, account, bytes))
    }

    fn charged(permits: Vec<OwnedSemaphorePermit>, account: &Arc<Account>, bytes: usize) -> Held {
        account.hold(bytes);
        Held { permits, account: account.clone(), bytes, turn: None }
    }

    /// Adds `other`: its permits join those of the same budget (a budget
    /// this hold lacks is added to it).
    pub(crate) fn merge(&mut self, mut other: Held) {
        for theirs in other.permits.drain(..) {
            let same = self
                .permits
                .iter_mut()
                .find(|mine| Arc::ptr_eq(mine.semaphore(), theirs.semaphore()));
            match same {
                Some(mine) => mine.merge(theirs),
                None => self.permits.push(theirs),
            }
        }
        self.bytes += other.bytes;
        other.bytes = 0;
    }

    /// Splits `bytes` (at most what is held) off into a hold of their own.
    pub(crate) fn split_off(&mut self, bytes: usize) -> Held {
        let bytes = bytes.min(self.bytes);
        let permits = self.permits.iter_mut().filter_map(|permit| permit.split(bytes)).collect();
        self.bytes -= bytes;
        Held { permits, account: self.account.clone(), bytes, turn: None }
    }

    /// Keeps at most `bytes`, giving the rest back.
    pub(crate) fn shrink_to(&mut self, bytes: usize) {
        drop(self.split_off(self.bytes.saturating_sub(bytes)));
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Made the size of a line of `bytes`: what it holds beyond is given
    /// back, what it lacks is added from `budgets` when they have it now
    /// (never waited for while the rest is held).
    pub(crate) fn fit(&mut self, budgets: &[&Arc<Semaphore>], bytes: usize) {
        match bytes.checked_sub(self.bytes) {
            Some(0) => {}
            Some(more) => {
                if let Some(more) = Held::try_take(budgets, &self.account, more) {
                    self.merge(more);
                }
            }
            None => self.shrink_to(bytes),
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.account.release(self.bytes);
    }
}

/// The server-wide room (`--max-retained-bytes`) as one connection's fs
/// answers see it: a line is charged from before its bytes are read until it
/// has been written, to the connection's share (a quarter of the room) and
/// to the room. So one connection that reads its answers slowly holds at
/// most its share, its other calls wait on that share (never in the room's
/// queue), and the rest of the room stays for the other connections. An
/// answer larger than the share (an `fs/readFile` of a large file: v0 reads
/// up to 512 MiB) is charged the whole share and takes the server's one
/// oversized turn: at most one such answer is held at a time, and the
/// server's peak is the room plus that answer's excess over a share.
#[derive(Clone)]
pub(crate) struct ServerRoom {
    room: Arc<Semaphore>,
    share: Arc<Semaphore>,
    /// The share's size: the most one charge takes.
    share_size: usize,
    oversized: Arc<Semaphore>,
    account: Arc<Account>,
}

impl ServerRoom {
    /// One connection's view of the room of the server whose account is
    /// `account` (`size` bytes).
    pub(crate) fn new(account: Arc<Account>, size: usize) -> ServerRoom {
        let room = account.tunnel_room(size);
        let size = size.clamp(1, Semaphore::MAX_PERMITS).min(u32::MAX as usize);
        let share_size = (size / 4).max(1);
        let share = Arc::new(Semaphore::new(share_size));
        let oversized = account.oversized_turn();
        ServerRoom { room, share, share_size, oversized, account }
    }

    /// `held` made the size of a line of `bytes`, from the share and the room ([`Held::fit`]).
    pub(crate) fn fit(&self, held: &mut Held, bytes: usize) {
        if held.turn.is_none() {
            held.fit(&[&self.share, &self.room], bytes.min(self.share_size));
        }
    }

    /// Waits, on a blocking thread, for an answer of `bytes` (at most the
    /// share, with the oversized turn beyond); `None` once `gate` is closed
    /// (the connection went).
    pub(crate) fn wait_blocking(&self, bytes: usize, gate: &Semaphore) -> Option<Held> {
        self.wait(bytes, bytes > self.share_size, gate)
    }

    /// What an answer still to be built may take, `most` (a walk's most),
    /// at most the share and without the oversized turn, if the share and
    /// the room have it now (`None`: build it uncharged, then charge its line).
    pub(crate) fn try_estimate(&self, most: usize) -> Option<Held> {
        let charge = most.clamp(1, self.share_size);
        Held::try_take(&[&self.share, &self.room], &self.account, charge)
    }

    fn wait(&self, bytes: usize, turn: bool, gate: &Semaphore) -> Option<Held> {
        let charge = bytes.clamp(1, self.share_size);
        let handle = tokio::runtime::Handle::try_current().ok()?;
        let budgets = [&self.share, &self.room];
        handle.block_on(async {
            let held = async {
                let mut held = Held::wait(&budgets, &self.account, charge).await?;
                if turn {
                    held.turn = Some(self.oversized.clone().acquire_owned().await.ok()?);
                }
                Some(held)
            };
            tokio::select! {
                held = held => held,
                _ = gate.acquire() => None,
            }
        })
    }
}
