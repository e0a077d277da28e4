//! Where tunnel bytes are held: the server-wide room (`--max-retained-bytes`,
//! shared by every connection) and the connection's share of it, both taken
//! at once for each buffer and charged to the retention account.

use std::sync::Arc;

use tokio::sync::Semaphore;

use crate::account::Account;
pub(super) use crate::hold::Held;

/// What one connection's tunnels may hold at once (of the server-wide room):
/// one connection cannot starve the others.
pub const CONNECTION_TUNNEL_BYTES: usize = 64 * 1024 * 1024;

/// A connection's view of the rooms.
#[derive(Clone)]
pub(super) struct Room {
    server: Arc<Semaphore>,
    connection: Arc<Semaphore>,
    account: Arc<Account>,
    /// The connection's share, and so the most one buffer may hold: both
    /// rooms always have that much in all.
    largest: usize,
}

impl Room {
    /// The rooms of a new connection of a server whose account is `account`.
    pub(super) fn new(account: Arc<Account>, server_bytes: usize) -> Room {
        let server = account.tunnel_room(server_bytes);
        let share = CONNECTION_TUNNEL_BYTES.min(server_bytes).max(1);
        let connection = Arc::new(Semaphore::new(share));
        Room { server, connection, account, largest: share }
    }

    /// A room for a new connection of the same server.
    pub(super) fn renewed(&self) -> Room {
        Room { connection: Arc::new(Semaphore::new(self.largest)), ..self.clone() }
    }

    /// The largest hold that can ever be granted.
    pub(super) fn largest(&self) -> usize {
        self.largest
    }

    /// Waits until `bytes` (at most [`Room::largest`]) fit in both rooms,
    /// taking them together (no part is held while waiting for the rest).
    pub(super) async fn hold(&self, bytes: usize) -> Option<Held> {
        let bytes = bytes.clamp(1, self.largest);
        Held::wait(&[&self.connection, &self.server], &self.account, bytes).await
    }

    /// `bytes` now, or `None` when either room lacks them.
    pub(super) fn try_hold(&self, bytes: usize) -> Option<Held> {
        Held::try_take(&[&self.connection, &self.server], &self.account, bytes)
    }

    /// Bytes free for this connection now.
    pub(super) fn free(&self) -> usize {
        self.connection.available_permits().min(self.server.available_permits())
    }
}
