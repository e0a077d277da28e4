//! The spawner: one thread per connection that checks cwds and spawns its
//! children (`posix_spawn` waits for the exec), so a program or directory on a
//! hung mount stalls only that start (and the process requests sent behind
//! it), never the connection's loop and never another connection.
//!
//! The thread lives as long as its connection's table. If it cannot be
//! started, the work runs on the caller's thread instead. When the table is
//! killed while a spawn is stuck in its exec, the stuck child is killed
//! ([`Spawner::kill_stuck`]), which frees the thread.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{mpsc, Arc};

use tokio::sync::oneshot;

use super::spawn::Spawned;
use crate::protocol::ErrorObject;

/// What a start does off the loop: check the cwd, spawn.
pub(crate) type Work = Box<dyn FnOnce() -> Result<Spawned, ErrorObject> + Send>;
/// Its outcome, delivered to the loop.
pub(crate) type Outcome = Result<Spawned, ErrorObject>;

struct Job {
    work: Work,
    reply: oneshot::Sender<Outcome>,
}

/// A connection's spawner thread, started on first use; dropping it lets the
/// thread finish its queue and end.
#[derive(Default)]
pub(crate) struct Spawner {
    jobs: Option<mpsc::Sender<Job>>,
    unavailable: bool,
    /// The thread's id, once it runs (0 before).
    tid: Arc<AtomicI32>,
}

impl Spawner {
    /// Runs `work` on the spawner thread; the receiver yields its outcome.
    pub(crate) fn submit(&mut self, work: Work) -> oneshot::Receiver<Outcome> {
        let (reply, outcome) = oneshot::channel();
        let job = Job { work, reply };
        if self.jobs.is_none() && !self.unavailable {
            self.jobs = start(self.tid.clone());
            self.unavailable = self.jobs.is_none();
        }
        match &self.jobs {
            Some(jobs) => {
                if let Err(mpsc::SendError(job)) = jobs.send(job) {
                    run(job);
                }
            }
            None => run(job),
        }
        outcome
    }
}

impl Spawner {
    /// Kills the child the thread is stuck exec'ing, if it is (a blocking
    /// read of `/proc`: off the loop).
    pub(crate) fn kill_stuck(&self) -> impl FnOnce() + Send + 'static {
        let tid = self.tid.clone();
        move || match tid.load(Ordering::Acquire) {
            0 => {}
            tid => super::registry::kill_stuck_spawn(tid),
        }
    }
}

fn start(tid: Arc<AtomicI32>) -> Option<mpsc::Sender<Job>> {
    let (jobs, queue) = mpsc::channel::<Job>();
    let thread = std::thread::Builder::new().name("exec-server-spawn".into()).spawn(move || {
        // SAFETY: gettid has no preconditions.
        tid.store(unsafe { libc::gettid() }, Ordering::Release);
        for job in queue {
            run(job);
        }
    });
    match thread {
        // Detached: it ends when its Spawner is dropped and the queue is done.
        Ok(_) => Some(jobs),
        Err(error) => {
            tracing::warn!(%error, "cannot start a spawner thread; spawning on the loop");
            None
        }
    }
}

/// Does the work and hands over its outcome; a child nobody waits for any more
/// (its connection ended meanwhile) is killed and left to the reapers.
fn run(job: Job) {
    let outcome = (job.work)();
    if let Err(Ok(spawned)) = job.reply.send(outcome) {
        super::registry::abandon(spawned.pid);
    }
}
