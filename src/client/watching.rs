//! The client half of `fs/watch`: a [`Watch`] handle yields the changes of
//! one watch in order, and ends it with `fs/unwatch` (or when dropped).

use std::collections::HashMap;
use std::path::PathBuf;

use tokio::sync::mpsc;

use super::{lock, Client};
use crate::error::Error;
use crate::protocol::{Change, ChangedParams, Unwatch, UnwatchParams};

/// Batches queued per watch handle; beyond, the handle is told of an overflow.
const WATCH_QUEUE: usize = 256;
/// Batches of watches not yet claimed by their handle (the reply and the
/// first changes can race in the reader task).
const UNCLAIMED: usize = 64;

/// Where the batches of one watch go.
pub(crate) struct WatchRoute {
    changes: mpsc::Sender<Vec<Change>>,
    /// A batch was dropped (the handle fell behind): the next one says so first.
    lost: bool,
    root: PathBuf,
}

/// Watch routes, and batches that came before their handle.
#[derive(Default)]
pub(crate) struct WatchRoutes {
    routes: HashMap<String, WatchRoute>,
    unclaimed: Vec<ChangedParams>,
    /// Watches ended lately: their late batches are dropped, not kept as unclaimed.
    ended: std::collections::VecDeque<String>,
}

/// Ended watch ids remembered.
const ENDED: usize = 256;

impl WatchRoutes {
    /// Routes one `fs/changed`.
    pub(crate) fn deliver(&mut self, params: ChangedParams) {
        let Some(route) = self.routes.get_mut(&params.watch_id) else {
            if self.ended.contains(&params.watch_id) {
                return;
            }
            if self.unclaimed.len() < UNCLAIMED {
                self.unclaimed.push(params);
            }
            return;
        };
        let mut batch = params.changes;
        if route.lost {
            let overflow = Change::overflow(&route.root);
            batch.insert(0, overflow);
        }
        route.lost = route.changes.try_send(batch).is_err();
    }

    /// `id` ended: its route goes, and what still comes for it is dropped.
    pub(crate) fn end(&mut self, id: &str) {
        self.routes.remove(id);
        if self.ended.len() >= ENDED {
            self.ended.pop_front();
        }
        self.ended.push_back(id.to_owned());
    }

    pub(crate) fn clear(&mut self) {
        self.routes.clear();
        self.unclaimed.clear();
    }
}

/// The changes of one watch, from [`Client::watch`]. Dropping it ends the
/// watch (`fs/unwatch`, sent without waiting).
#[derive(Debug)]
pub struct Watch {
    client: Client,
    id: String,
    changes: mpsc::Receiver<Vec<Change>>,
    ended: bool,
}

impl Watch {
    /// The server's id of the watch.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The next batch of changes, in the order they happened; `None` once the
    /// watch or the connection has ended. A handle that fell behind gets an
    /// `overflow` change of the root first: rescan it.
    pub async fn next(&mut self) -> Option<Vec<Change>> {
        self.changes.recv().await
    }

    /// Ends the watch and waits for the server to confirm.
    pub async fn unwatch(mut self) -> Result<(), Error> {
        self.ended = true;
        lock(&self.client.shared().watches).end(&self.id);
        self.client.call::<Unwatch>(&UnwatchParams { watch_id: self.id.clone() }).await?;
        Ok(())
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if !self.ended {
            lock(&self.client.shared().watches).end(&self.id);
            self.client.send_and_forget::<Unwatch>(&UnwatchParams { watch_id: self.id.clone() });
        }
    }
}

impl Client {
    /// Watches `path` (and, with `recursive`, every directory beneath it) and
    /// returns the stream of its changes (`fs/watch`).
    pub async fn watch(&self, path: impl Into<PathBuf>, recursive: bool) -> Result<Watch, Error> {
        let path = path.into();
        let params = crate::protocol::WatchParams::new(path.clone(), recursive);
        let result = self.call::<crate::protocol::Watch>(&params).await?;
        let (sender, changes) = mpsc::channel(WATCH_QUEUE);
        let id = result.watch_id;
        let mut watches = lock(&self.shared().watches);
        let early: Vec<ChangedParams> = {
            let (mine, others) =
                std::mem::take(&mut watches.unclaimed).into_iter().partition(|p| p.watch_id == id);
            watches.unclaimed = others;
            mine
        };
        watches.routes.insert(id.clone(), WatchRoute { changes: sender, lost: false, root: path });
        for params in early {
            watches.deliver(params);
        }
        drop(watches);
        Ok(Watch { client: self.clone(), id, changes, ended: false })
    }
}
