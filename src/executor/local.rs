//! [`LocalExecutor`]: processes run by a server inside this process (feature `server`).

use super::*;
use crate::server::Config;

/// Processes on this machine, run by a server inside this process (the same
/// code path as a remote server, without a child process or a pipe).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), exec_server::Error> {
/// use exec_server::{Executor, LocalExecutor, StartParams};
///
/// let local = LocalExecutor::new().await?;
/// let mut p = local.start(StartParams::new("p", ["sh", "-c", "exit 4"], "/")).await?;
/// assert_eq!(p.wait().await?.code, 4);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct LocalExecutor {
    client: Client,
}

impl LocalExecutor {
    /// Starts the in-process server.
    pub async fn new() -> Result<LocalExecutor, Error> {
        LocalExecutor::with_config(Config::default()).await
    }

    /// Starts the in-process server with `config`: for sandboxed processes,
    /// [`Config::sandbox_helper`] names the `exec-server` binary that applies
    /// the policy (this process cannot, unless it calls
    /// [`run_sandbox_helper_if_requested`](crate::run_sandbox_helper_if_requested) first thing in `main`).
    pub async fn with_config(config: Config) -> Result<LocalExecutor, Error> {
        Ok(LocalExecutor { client: Client::in_process(config).await? })
    }

    /// The in-process client, for the other methods.
    pub fn client(&self) -> &Client {
        &self.client
    }
}

impl Executor for LocalExecutor {
    async fn start(&self, params: StartParams) -> Result<Process, Error> {
        self.client.start(params).await
    }
}
