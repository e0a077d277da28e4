//! What the server holds in memory on behalf of its clients, counted: a
//! connection's [`Account`] (retained output, held buffers, stored commands)
//! charges its server's, and each has a budget that the process table,
//! tunnels and HTTP bodies keep within. A [`Charge`] gives back what it
//! charged when dropped.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use tokio::sync::Semaphore;

/// What one connection's processes (its parent is the server's account), or
/// a whole server's, hold in memory: retained output, and stored commands
/// (argv, env and cwd), each in charged bytes and each with its own budget.
#[derive(Debug, Default)]
pub(crate) struct Account {
    bytes: AtomicUsize,
    commands: AtomicUsize,
    parent: Option<Arc<Account>>,
    /// The server's room for tunnel buffers (made on first use, on the root).
    tunnel_room: OnceLock<Arc<Semaphore>>,
    /// The server's one turn for an answer larger than a connection's share
    /// (made on first use, on the root).
    oversized: OnceLock<Arc<Semaphore>>,
}

impl Account {
    /// A connection's account, charging `server` too.
    pub(crate) fn child_of(server: Arc<Account>) -> Account {
        Account { parent: Some(server), ..Account::default() }
    }

    /// The server-wide room for bytes buffered in tunnels: `limit` permits,
    /// one per byte, shared by every connection of the server (the first
    /// caller's `limit` sizes it).
    pub(crate) fn tunnel_room(&self, limit: usize) -> Arc<Semaphore> {
        let limit = limit.min(Semaphore::MAX_PERMITS);
        self.root().tunnel_room.get_or_init(|| Arc::new(Semaphore::new(limit))).clone()
    }

    /// The server-wide turn (one permit) for an answer larger than a
    /// connection's share of the room: one such answer is held at a time.
    pub(crate) fn oversized_turn(&self) -> Arc<Semaphore> {
        self.root().oversized.get_or_init(|| Arc::new(Semaphore::new(1))).clone()
    }

    fn root(&self) -> &Account {
        let mut root = self;
        while let Some(parent) = root.parent.as_deref() {
            root = parent;
        }
        root
    }

    /// Charges `bytes` held outside the output logs (tunnel buffers): the
    /// retention budget counts them, so retained output yields to them.
    pub(crate) fn hold(&self, bytes: usize) {
        self.add(bytes);
    }

    /// Gives back what [`Account::hold`] charged.
    pub(crate) fn release(&self, bytes: usize) {
        self.sub(bytes);
    }

    /// Retained output.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Stored commands.
    pub(crate) fn commands(&self) -> usize {
        self.commands.load(Ordering::Relaxed)
    }

    pub(crate) fn add(&self, bytes: usize) {
        self.each(|account| account.bytes.fetch_add(bytes, Ordering::Relaxed));
    }

    pub(crate) fn sub(&self, bytes: usize) {
        self.each(|account| account.bytes.fetch_sub(bytes, Ordering::Relaxed));
    }

    fn add_commands(&self, bytes: usize) {
        self.each(|account| account.commands.fetch_add(bytes, Ordering::Relaxed));
    }

    fn sub_commands(&self, bytes: usize) {
        self.each(|account| account.commands.fetch_sub(bytes, Ordering::Relaxed));
    }

    /// Applies `change` to this account and each parent up the chain.
    fn each(&self, change: impl Fn(&Account) -> usize) {
        let mut account = Some(self);
        while let Some(current) = account {
            change(current);
            account = current.parent.as_deref();
        }
    }
}

/// What a stored string list costs besides its bytes: each string's record
/// and heap block (a `String` is 24 B, plus the allocator's header and rounding).
pub(crate) const STRING_OVERHEAD: usize = 48;

/// Stored-command bytes charged to an account while held (a process's argv,
/// env and cwd), given back when dropped.
#[derive(Debug)]
pub(crate) struct Charge {
    bytes: usize,
    account: Arc<Account>,
}

impl Charge {
    pub(crate) fn new(account: Arc<Account>, bytes: usize) -> Charge {
        account.add_commands(bytes);
        Charge { bytes, account }
    }

    /// Keeps `bytes` of the charge (never more than it holds).
    pub(crate) fn shrink_to(&mut self, bytes: usize) {
        let freed = self.bytes.saturating_sub(bytes);
        self.account.sub_commands(freed);
        self.bytes -= freed;
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.account.sub_commands(self.bytes);
    }
}
