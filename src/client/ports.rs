//! The client half of listening ports: [`Client::listening_ports`] and the
//! [`PortWatch`] stream of `ports/changed`.

use tokio::sync::mpsc;

use super::{lock, Client};
use crate::error::Error;
use crate::protocol::*;

/// The listening ports of the session as they open and close, from
/// [`Client::watch_ports`]. Dropping it stops the watch (`ports/unwatch`).
#[derive(Debug)]
pub struct PortWatch {
    client: Client,
    changes: mpsc::UnboundedReceiver<PortsChangedParams>,
}

impl PortWatch {
    /// The next change: the first lists every port already open. `None`
    /// once the connection has ended (a resumed session is watched again
    /// by calling [`Client::watch_ports`] again).
    pub async fn next(&mut self) -> Option<PortsChangedParams> {
        self.changes.recv().await
    }
}

impl Drop for PortWatch {
    fn drop(&mut self) {
        lock(&self.client.shared().ports).take();
        if !self.client.is_closed() {
            self.client.send_and_forget::<PortsUnwatch>(&Empty {});
        }
    }
}

impl Client {
    /// Every TCP socket listening in a process of this session or its
    /// descendants (`ports/list`).
    pub async fn listening_ports(&self) -> Result<Vec<ListeningPort>, Error> {
        Ok(self.call::<PortsList>(&Empty {}).await?.ports)
    }

    /// Watches the session's listening ports (`ports/watch`); one watch per
    /// client at a time.
    pub async fn watch_ports(&self) -> Result<PortWatch, Error> {
        let (tx, changes) = mpsc::unbounded_channel();
        {
            let mut ports = lock(&self.shared().ports);
            if ports.as_ref().is_some_and(|p| !p.is_closed()) {
                return Err(Error::Protocol(
                    "this client already watches its ports: drop that PortWatch first".to_owned(),
                ));
            }
            *ports = Some(tx);
        }
        if let Err(error) = self.call::<PortsWatch>(&Empty {}).await {
            lock(&self.shared().ports).take();
            return Err(error);
        }
        Ok(PortWatch { client: self.clone(), changes })
    }
}
