//! The spawner: one long-lived thread that checks cwds and forks every child,
//! so a program or directory on a hung mount stalls only the start that named
//! it, never a connection's loop.
//!
//! One thread for the whole process, alive until it exits: the children's
//! parent-death signal fires when the *thread* that forked them ends, so they
//! must not be forked from a pool thread that may retire. If the thread cannot
//! be started, the work runs on the caller's thread instead.

use std::sync::mpsc;
use std::sync::OnceLock;

use tokio::sync::oneshot;

use super::registry;
use super::signal::{signal_group, Signal};
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

static SPAWNER: OnceLock<Option<mpsc::Sender<Job>>> = OnceLock::new();

/// Runs `work` on the spawner thread; the receiver yields its outcome.
pub(crate) fn submit(work: Work) -> oneshot::Receiver<Outcome> {
    let (reply, outcome) = oneshot::channel();
    let job = Job { work, reply };
    match SPAWNER.get_or_init(start).as_ref() {
        Some(jobs) => {
            if let Err(mpsc::SendError(job)) = jobs.send(job) {
                run(job);
            }
        }
        None => run(job),
    }
    outcome
}

fn start() -> Option<mpsc::Sender<Job>> {
    let (jobs, queue) = mpsc::channel::<Job>();
    let thread = std::thread::Builder::new().name("exec-server-spawn".into()).spawn(move || {
        for job in queue {
            run(job);
        }
    });
    match thread {
        // Detached on purpose: it serves until the process exits.
        Ok(_) => Some(jobs),
        Err(error) => {
            tracing::warn!(%error, "cannot start the spawner thread; spawning on the loop");
            None
        }
    }
}

/// Does the work and hands over its outcome; a child nobody waits for any more
/// (its connection ended meanwhile) is killed and left to the reapers.
fn run(job: Job) {
    let outcome = (job.work)();
    if let Err(Ok(spawned)) = job.reply.send(outcome) {
        let _ = signal_group(spawned.pid, Signal::KILL);
        registry::disown(spawned.pid);
    }
}
