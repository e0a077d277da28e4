//! fs/* requests off the loop: a few run at once on blocking threads, the rest wait in a bounded queue.
//!
//! Each call decodes its params, does its syscalls and encodes its reply on a
//! blocking thread, so a FIFO, a device, a hung mount or a multi-GiB copy
//! delays nothing but itself. Replies go out as calls finish, in any order.
//! At shutdown the set is dropped: calls still stuck in a syscall are abandoned
//! with their threads.

use std::collections::VecDeque;
use std::sync::Arc;

use serde_json::Value;
use tokio::task::JoinSet;

use super::dispatch::{decode, reply};
use crate::fs::{self, Roots};
use crate::protocol::*;

/// fs calls running at once.
const FS_IN_FLIGHT: usize = 4;
/// fs calls waiting for a slot before the loop stops taking input.
const FS_QUEUED: usize = 64;
/// Bytes of waiting fs requests before the loop stops taking input.
const FS_QUEUED_BYTES: usize = 64 * 1024 * 1024;

struct Job {
    id: RequestId,
    method: String,
    params: Value,
    bytes: usize,
}

/// The fs calls of one connection.
pub(super) struct FsCalls {
    roots: Arc<Roots>,
    running: JoinSet<String>,
    queue: VecDeque<Job>,
    queued_bytes: usize,
}

impl FsCalls {
    pub(super) fn new(roots: Arc<Roots>) -> FsCalls {
        FsCalls { roots, running: JoinSet::new(), queue: VecDeque::new(), queued_bytes: 0 }
    }

    /// Whether another request may be read (the queue is not full).
    pub(super) fn has_room(&self) -> bool {
        self.queue.len() < FS_QUEUED && self.queued_bytes < FS_QUEUED_BYTES
    }

    /// No call is running or waiting.
    pub(super) fn is_idle(&self) -> bool {
        self.running.is_empty() && self.queue.is_empty()
    }

    /// Starts the call, or queues it when [`FS_IN_FLIGHT`] already run.
    pub(super) fn submit(&mut self, id: RequestId, method: String, params: Value, bytes: usize) {
        self.queue.push_back(Job { id, method, params, bytes });
        self.queued_bytes += bytes;
        self.start_queued();
    }

    /// The encoded reply of the next call to finish; pending while none runs.
    pub(super) async fn next_reply(&mut self) -> String {
        loop {
            match self.running.join_next().await {
                Some(Ok(line)) => {
                    self.start_queued();
                    return line;
                }
                Some(Err(error)) => {
                    // A panic in a handler is a bug; the request stays unanswered.
                    tracing::error!(%error, "an fs call failed");
                    self.start_queued();
                }
                None => std::future::pending().await,
            }
        }
    }

    fn start_queued(&mut self) {
        while self.running.len() < FS_IN_FLIGHT {
            let Some(job) = self.queue.pop_front() else { return };
            self.queued_bytes -= job.bytes;
            let roots = self.roots.clone();
            self.running.spawn_blocking(move || run(&roots, job));
        }
    }
}

/// Decodes, runs and encodes one call (on a blocking thread).
fn run(roots: &Roots, job: Job) -> String {
    let Job { id, method, params, .. } = job;
    match method.as_str() {
        ReadFile::NAME => call::<ReadFile>(&id, params, |p| wait(fs::read_file(roots, p))),
        WriteFile::NAME => call::<WriteFile>(&id, params, |p| wait(fs::write_file(roots, p))),
        CreateDirectory::NAME => {
            call::<CreateDirectory>(&id, params, |p| wait(fs::create_directory(roots, p)))
        }
        GetMetadata::NAME => call::<GetMetadata>(&id, params, |p| wait(fs::get_metadata(roots, p))),
        ReadDirectory::NAME => {
            call::<ReadDirectory>(&id, params, |p| wait(fs::read_directory(roots, p)))
        }
        Remove::NAME => call::<Remove>(&id, params, |p| wait(fs::remove(roots, p))),
        Copy::NAME => call::<Copy>(&id, params, |p| wait(fs::copy(roots, p))),
        Rename::NAME => call::<Rename>(&id, params, |p| wait(fs::rename(roots, p))),
        other => encode_response::<Empty>(
            &id,
            &Err(ErrorObject::new(
                codes::METHOD_NOT_FOUND,
                format!("method {other} is not an fs method"),
            )),
        ),
    }
}

/// Runs an async handler to completion on this blocking thread.
fn wait<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Handle::current().block_on(future)
}

fn call<M: Method>(
    id: &RequestId,
    params: Value,
    handler: impl FnOnce(M::Params) -> Result<M::Result, ErrorObject>,
) -> String {
    reply::<M>(id, decode::<M>(params).and_then(handler))
}
