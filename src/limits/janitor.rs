//! The janitor: one thread per server process that removes start cgroups
//! once they are empty. A cgroup is handed over when its leader exits (or
//! its start is dropped); `rmdir` fails while a member lives, so it is tried
//! again, every 100 ms for the first second and every second after, until
//! the tree is gone (its session's end kills what is left). The thread
//! sleeps on its channel while nothing waits.

use std::path::PathBuf;
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

static JANITOR: OnceLock<Mutex<Sender<Vec<PathBuf>>>> = OnceLock::new();

/// Removes `dirs` once each is empty (at once if it is).
pub(crate) fn remove(dirs: Vec<PathBuf>) {
    let mut waiting: Vec<Waiting> = Vec::new();
    try_now(dirs, &mut waiting);
    if waiting.is_empty() {
        return;
    }
    let dirs = waiting.into_iter().map(|w| w.dir).collect();
    let sender = JANITOR.get_or_init(|| Mutex::new(start()));
    let sender = sender.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if sender.send(dirs).is_err() {
        tracing::warn!("the cgroup janitor is gone; a cgroup is left");
    }
}

struct Waiting {
    dir: PathBuf,
    since: Instant,
}

/// Tries each dir once; the ones still in use are pushed on `waiting`.
fn try_now(dirs: Vec<PathBuf>, waiting: &mut Vec<Waiting>) {
    let now = Instant::now();
    for dir in dirs {
        match std::fs::remove_dir(&dir) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) if error.raw_os_error() == Some(libc::EBUSY) => {
                waiting.push(Waiting { dir, since: now });
            }
            Err(error) => tracing::warn!(%error, cgroup = %dir.display(), "cannot remove a cgroup"),
        }
    }
}

fn start() -> Sender<Vec<PathBuf>> {
    let (sender, receiver) = mpsc::channel::<Vec<PathBuf>>();
    let spawned = std::thread::Builder::new().name("exec-server-cgroups".into()).spawn(move || {
        let mut waiting: Vec<Waiting> = Vec::new();
        loop {
            let next = if waiting.is_empty() {
                receiver.recv().map_err(|_| RecvTimeoutError::Disconnected)
            } else {
                let young = waiting.iter().any(|w| w.since.elapsed() < Duration::from_secs(1));
                let pause = if young { Duration::from_millis(100) } else { Duration::from_secs(1) };
                receiver.recv_timeout(pause)
            };
            match next {
                Ok(dirs) => try_now(dirs, &mut waiting),
                Err(RecvTimeoutError::Timeout) => {
                    let retry: Vec<Waiting> = std::mem::take(&mut waiting);
                    for old in retry {
                        let since = old.since;
                        let before = waiting.len();
                        try_now(vec![old.dir], &mut waiting);
                        if let Some(again) = waiting.get_mut(before) {
                            again.since = since;
                        }
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    });
    if let Err(error) = spawned {
        tracing::warn!(%error, "cannot start the cgroup janitor; empty cgroups are left");
    }
    sender
}
