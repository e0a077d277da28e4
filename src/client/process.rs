//! A handle to one started process: its output in order, its exit, and its controls.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use super::routing::ProcStatus;
use super::Client;
use crate::error::Error;
use crate::protocol::*;

use super::events::{ExitStatus, OutputChunk};

/// A started process. Its output comes in seq order without gaps or repeats
/// (chunks the server's 1 MiB retention already dropped are skipped): when the
/// handle falls behind its stream it catches up with `process/read`.
///
/// Dropping the handle leaves the process running unless
/// [`Process::kill_on_drop`] was set.
///
/// ```
/// # #[cfg(not(feature = "server"))] fn main() {} // Client::in_process needs the server half.
/// # #[cfg(feature = "server")]
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), exec_server::Error> {
/// use exec_server::server::Config;
/// use exec_server::{Client, StartParams};
///
/// let client = Client::in_process(Config::default()).await?;
/// let mut cat = client.start(StartParams::new("cat", ["cat"], "/tmp").with_stdin()).await?;
/// cat.write(b"ping").await?;
/// cat.close_stdin().await?;
/// let chunk = cat.next_output().await?.expect("cat echoes");
/// assert_eq!(chunk.bytes, b"ping");
/// assert_eq!(cat.wait().await?.code, 0);
/// # Ok(())
/// # }
/// ```
pub struct Process {
    client: Client,
    id: String,
    route_key: u64,
    output: mpsc::Receiver<OutputChunk>,
    status: watch::Receiver<ProcStatus>,
    backlog: VecDeque<OutputChunk>,
    last_seq: u64,
    kill_on_drop: bool,
}

impl Process {
    pub(crate) fn new(
        client: Client,
        id: String,
        route_key: u64,
        output: mpsc::Receiver<OutputChunk>,
        status: watch::Receiver<ProcStatus>,
    ) -> Process {
        Process {
            client,
            id,
            route_key,
            output,
            status,
            backlog: VecDeque::new(),
            last_seq: 0,
            kill_on_drop: false,
        }
    }

    /// The client-chosen process id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Kill the process (SIGKILL to its group) when this handle is dropped.
    pub fn kill_on_drop(&mut self, kill: bool) -> &mut Process {
        self.kill_on_drop = kill;
        self
    }

    /// The next output chunk; `None` once every stream of the process is closed.
    pub async fn next_output(&mut self) -> Result<Option<OutputChunk>, Error> {
        loop {
            if let Some(chunk) = self.backlog.pop_front() {
                if let Some(chunk) = self.accept(chunk).await? {
                    return Ok(Some(chunk));
                }
                continue;
            }
            if let Ok(chunk) = self.output.try_recv() {
                self.backlog.push_back(chunk);
                continue;
            }
            let closed_seq = self.status.borrow().closed_seq;
            if let Some(closed_seq) = closed_seq {
                if self.last_seq >= closed_seq {
                    return Ok(None);
                }
                // Chunks were dropped from a full queue: fetch them.
                self.catch_up().await?;
                if self.backlog.is_empty() {
                    self.last_seq = closed_seq;
                }
                continue;
            }
            tokio::select! {
                chunk = self.output.recv() => match chunk {
                    Some(chunk) => self.backlog.push_back(chunk),
                    None => self.status_gone()?,
                },
                changed = self.status.changed() => {
                    if changed.is_err() {
                        self.status_gone()?;
                    }
                }
            }
        }
    }

    /// Waits for the exit (code and signal).
    pub async fn wait(&mut self) -> Result<ExitStatus, Error> {
        loop {
            if let Some(exit) = self.status.borrow().exit.clone() {
                return Ok(exit);
            }
            if self.status.changed().await.is_err() {
                return self
                    .status
                    .borrow()
                    .exit
                    .clone()
                    .ok_or_else(|| self.client.shared().closed_error());
            }
        }
    }

    /// All remaining output, concatenated, and the exit status.
    pub async fn output_to_end(&mut self) -> Result<(Vec<u8>, ExitStatus), Error> {
        let mut bytes = Vec::new();
        while let Some(chunk) = self.next_output().await? {
            bytes.extend(chunk.bytes);
        }
        Ok((bytes, self.wait().await?))
    }

    /// Retained chunks after `after_seq` (a direct `process/read`).
    pub async fn read(&self, after_seq: u64) -> Result<ReadResult, Error> {
        let params = ReadParams {
            process_id: self.id.clone(),
            after_seq: Some(after_seq),
            max_bytes: None,
            wait_ms: None,
        };
        self.client.read(params).await
    }

    /// Writes to the process's stdin (pipe with `pipeStdin`) or terminal.
    pub async fn write(&self, bytes: &[u8]) -> Result<(), Error> {
        self.write_chunk(bytes, false).await
    }

    /// Closes a pipe process's stdin.
    pub async fn close_stdin(&self) -> Result<(), Error> {
        self.write_chunk(&[], true).await
    }

    /// Resizes the terminal of a tty process.
    pub async fn resize(&self, rows: u16, cols: u16) -> Result<(), Error> {
        let params = ResizeParams { process_id: self.id.clone(), rows, cols };
        self.client.resize(params).await.map(drop)
    }

    /// Sends a signal by name (`SIGINT`, `interrupt`, ...) to the process group;
    /// true when the process was running.
    pub async fn signal(&self, signal: &str) -> Result<bool, Error> {
        let params = SignalParams { process_id: self.id.clone(), signal: signal.to_owned() };
        Ok(self.client.signal(params).await?.running)
    }

    /// Kills the process group: SIGKILL now, or SIGTERM then SIGKILL after `grace`.
    pub async fn terminate(&self, grace: Option<Duration>) -> Result<bool, Error> {
        let params = TerminateParams {
            process_id: self.id.clone(),
            grace_ms: grace.map(|g| g.as_millis().try_into().unwrap_or(u64::MAX)),
        };
        Ok(self.client.terminate(params).await?.running)
    }

    async fn write_chunk(&self, bytes: &[u8], close_stdin: bool) -> Result<(), Error> {
        // Tagged so that a write sent again after a resume is applied once.
        let params = WriteParams::new(self.id.clone(), bytes.to_vec())
            .write_id(self.client.shared().next_write_id());
        let params = if close_stdin { params.close_stdin() } else { params };
        let result = self.client.write(params).await?;
        match result.status {
            WriteStatus::Accepted => Ok(()),
            refused => {
                let status = serde_json::to_value(refused).unwrap_or_default();
                Err(Error::Protocol(format!(
                    "the write to process {} was refused: {}",
                    self.id,
                    status.as_str().unwrap_or("refused")
                )))
            }
        }
    }

    /// Takes `chunk` if it is the next one; fills a gap first; drops repeats.
    async fn accept(&mut self, chunk: OutputChunk) -> Result<Option<OutputChunk>, Error> {
        if chunk.seq <= self.last_seq {
            return Ok(None);
        }
        if chunk.seq > self.last_seq + 1 {
            self.backlog.push_front(chunk);
            self.catch_up().await?;
            // The oldest chunk still retained comes first now; older ones are gone for good.
            if let Some(front) = self.backlog.front() {
                self.last_seq = self.last_seq.max(front.seq - 1);
            }
            return Ok(None);
        }
        self.last_seq = chunk.seq;
        Ok(Some(chunk))
    }

    /// Puts the retained chunks after `last_seq` in front of the backlog.
    async fn catch_up(&mut self) -> Result<(), Error> {
        let read = self.read(self.last_seq).await?;
        for chunk in read.chunks.into_iter().rev() {
            let chunk = OutputChunk { seq: chunk.seq, stream: chunk.stream, bytes: chunk.chunk.0 };
            self.backlog.push_front(chunk);
        }
        Ok(())
    }

    /// The route went away: normal after `process/closed`, else the connection closed.
    fn status_gone(&self) -> Result<(), Error> {
        if self.status.borrow().closed_seq.is_some() {
            Ok(())
        } else {
            Err(self.client.shared().closed_error())
        }
    }
}

impl std::fmt::Debug for Process {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Process")
            .field("id", &self.id)
            .field("last_seq", &self.last_seq)
            .field("status", &*self.status.borrow())
            .finish()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.client.shared().remove_route(&self.id, self.route_key);
        if self.kill_on_drop && self.status.borrow().exit.is_none() {
            let params = TerminateParams { process_id: self.id.clone(), grace_ms: None };
            self.client.send_and_forget::<ProcessTerminate>(&params);
        }
    }
}
