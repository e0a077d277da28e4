//! One process interface for this machine and for a server: [`Executor`], local and remote.

use std::future::Future;

use crate::client::{Client, Process};
use crate::error::Error;
use crate::protocol::StartParams;

#[cfg(feature = "server")]
mod local;
#[cfg(feature = "server")]
pub use self::local::LocalExecutor;

/// Starts processes and hands back [`Process`] handles.
pub trait Executor: Send + Sync {
    /// Starts a process.
    fn start(&self, params: StartParams) -> impl Future<Output = Result<Process, Error>> + Send;
}

/// Processes on the machine a [`Client`] is connected to.
#[derive(Clone)]
pub struct RemoteExecutor {
    client: Client,
}

impl RemoteExecutor {
    /// Processes through `client`.
    pub fn new(client: Client) -> RemoteExecutor {
        RemoteExecutor { client }
    }
}

impl Executor for RemoteExecutor {
    async fn start(&self, params: StartParams) -> Result<Process, Error> {
        self.client.start(params).await
    }
}
