//! [`Forward`]: a local TCP port whose connections are tunnelled to a
//! host:port on the server's side, as `ssh -L` does.

use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream, ToSocketAddrs};
use tokio::task::{JoinHandle, JoinSet};

use super::tunnel::Ending;
use super::Client;
use crate::error::Error;

/// A local listener forwarding every connection through a tunnel, from
/// [`Client::forward`]. Dropping it stops listening and ends the
/// connections it carries. After a session resume it keeps listening, and
/// new connections get tunnels on the new connection (those under way when
/// the connection dropped end with it).
#[derive(Debug)]
pub struct Forward {
    local: SocketAddr,
    task: JoinHandle<()>,
}

impl Forward {
    /// The local address it listens on (useful after binding port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }
}

impl Drop for Forward {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Client {
    /// Listens on `local` and tunnels each accepted connection to
    /// `remote_host:remote_port` on the server's side.
    pub async fn forward(
        &self,
        local: impl ToSocketAddrs,
        remote_host: impl Into<String>,
        remote_port: u16,
    ) -> Result<Forward, Error> {
        let listener = TcpListener::bind(local)
            .await
            .map_err(|e| Error::io("cannot listen for the forward", e))?;
        let local = listener
            .local_addr()
            .map_err(|e| Error::io("cannot read the forward's local address", e))?;
        let client = self.clone();
        let host = remote_host.into();
        let task = tokio::spawn(accept(client, listener, host, remote_port));
        Ok(Forward { local, task })
    }
}

/// Accepts until aborted; each connection is a task of this one's set.
async fn accept(client: Client, listener: TcpListener, host: String, port: u16) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    connections.spawn(carry(client.clone(), stream, peer, host.clone(), port));
                }
                Err(error) => {
                    tracing::warn!(%error, "forward: cannot accept");
                    // Out of descriptors, most likely: give the others a moment.
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// One forwarded connection: a tunnel, the bytes both ways, and a reset
/// passed on as a reset.
async fn carry(client: Client, mut stream: TcpStream, peer: SocketAddr, host: String, port: u16) {
    let _ = stream.set_nodelay(true);
    let opened = match client.open_tunnel_raw(&host, port).await {
        Ok(opened) => opened,
        Err(error) => {
            tracing::warn!(%peer, %error, "forward: cannot open the tunnel");
            let _ = stream.set_zero_linger();
            return;
        }
    };
    match opened.pump(&mut stream).await {
        Ending::Done => {}
        Ending::Reset(message) => {
            tracing::debug!(%peer, %message, "forward: the remote side reset the connection");
            let _ = stream.set_zero_linger();
        }
        Ending::Failed(message) => {
            tracing::debug!(%peer, %message, "forward: the tunnel failed");
            let _ = stream.set_zero_linger();
        }
    }
}
