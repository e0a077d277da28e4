//! The janitor: one thread per server process that keeps start cgroups off
//! the spawn's path. A start's cgroup is handed back when its leader exits
//! (or its start is dropped); once it is empty it becomes a spare for the
//! next start in its server directory (at most two are kept; a fresh cgroup
//! costs the kernel more to enter than a used one) or is removed. While a
//! member lives it is looked at again, every 100 ms for the first second and
//! every 500 ms after, until the tree is gone (its session's end kills what
//! is left). A spare unused for two seconds is removed, so an idle server
//! keeps no cgroup. The thread sleeps on its channel while nothing waits.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Spare start directories kept per server directory.
const SPARES: usize = 2;
/// How long a spare waits for a start before it is removed.
const SPARE_IDLE: Duration = Duration::from_secs(2);
/// The most memory an emptied cgroup may still have charged (page cache the
/// tree read) to become a spare; more (tmpfs files the tree left, which
/// stay charged) would count against the next tree: it is removed instead.
const SPARE_CHARGE: u64 = 4 * 1024 * 1024;

/// Numbers start directories across the whole server.
static NEXT: AtomicU64 = AtomicU64::new(1);
/// Spares (and since when), by the server directory they are in.
static READY: Mutex<Option<Spares>> = Mutex::new(None);

/// Spare directories and when each became one, by server directory.
type Spares = HashMap<PathBuf, Vec<(PathBuf, Instant)>>;
/// Directories handed back, and the flag their group reads as "retired"
/// (None: a spare never used, which may not become one again).
type Job = (Vec<PathBuf>, Option<Retired>);

/// Set once a group's cgroup is empty and handed on (kept as a spare or
/// removed): from then on its members are another start's, never its own.
pub(crate) type Retired = Arc<AtomicBool>;

static JANITOR: OnceLock<Mutex<Sender<Job>>> = OnceLock::new();

/// A new start directory's path in `server` (not made).
pub(crate) fn fresh_name(server: &Path) -> PathBuf {
    server.join(NEXT.fetch_add(1, Ordering::Relaxed).to_string())
}

/// A spare directory of `server`, if one is ready.
pub(crate) fn take_spare(server: &Path) -> Option<PathBuf> {
    let mut ready = ready();
    let spares = ready.get_or_insert_with(HashMap::new).get_mut(server)?;
    spares.pop().map(|(dir, _)| dir)
}

/// Hands back the start directories `dirs` of a group: spares or removed,
/// once empty; `retired` is set before either.
pub(crate) fn release(dirs: Vec<PathBuf>, retired: Retired) {
    send(dirs, Some(retired));
}

/// Removes `dirs` once empty, never keeping them as spares (a spare that
/// took no limits).
pub(crate) fn discard(dirs: Vec<PathBuf>) {
    send(dirs, None);
}

fn send(dirs: Vec<PathBuf>, retired: Option<Retired>) {
    let sender = JANITOR.get_or_init(|| Mutex::new(start()));
    let sender = sender.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if sender.send((dirs, retired)).is_err() {
        tracing::warn!("the cgroup janitor is gone; empty cgroups are left");
    }
}

fn ready() -> std::sync::MutexGuard<'static, Option<Spares>> {
    READY.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

struct Waiting {
    dir: PathBuf,
    since: Instant,
    retired: Option<Retired>,
}

/// Looks at each dir once: an empty one becomes a spare or is removed; the
/// ones still in use are pushed on `waiting`.
fn settle(dirs: Vec<Waiting>, waiting: &mut Vec<Waiting>) {
    for Waiting { dir, since, retired } in dirs {
        if !super::members(&dir).is_empty() {
            waiting.push(Waiting { dir, since, retired });
            continue;
        }
        // Its group lets go before anyone else can enter it.
        let recycle = retired.is_some_and(|retired| {
            retired.store(true, Ordering::SeqCst);
            true
        });
        if let Some(server) = dir.parent().filter(|_| recycle && can_be_spare(&dir)) {
            let mut ready = ready();
            let spares =
                ready.get_or_insert_with(HashMap::new).entry(server.to_path_buf()).or_default();
            if spares.len() < SPARES {
                // Its high-water mark starts again (v1; v2 has none). The page
                // cache the last tree left charged stays: reclaimed before any
                // OOM kill, and what makes a used cgroup cheaper to start in.
                let _ = super::file::write(&dir.join("memory.max_usage_in_bytes"), "0");
                tracing::trace!(cgroup = %dir.display(), "a spare cgroup");
                spares.push((dir, Instant::now()));
                continue;
            }
        }
        remove(Waiting { dir, since, retired: None }, waiting);
    }
}

/// Whether an emptied cgroup may serve the next start: nothing made below
/// it, and little memory left charged to it.
fn can_be_spare(dir: &Path) -> bool {
    let charged = ["memory.usage_in_bytes", "memory.current"]
        .iter()
        .find_map(|file| std::fs::read_to_string(dir.join(file)).ok())
        .and_then(|text| text.trim().parse::<u64>().ok())
        .unwrap_or(0);
    super::file::children(dir).is_empty() && charged <= SPARE_CHARGE
}

fn remove(gone: Waiting, waiting: &mut Vec<Waiting>) {
    match super::file::remove_tree(&gone.dir) {
        Ok(()) => {}
        Err(error) if error.raw_os_error() == Some(libc::EBUSY) => waiting.push(gone),
        Err(error) => {
            tracing::warn!(%error, cgroup = %gone.dir.display(), "cannot remove a cgroup")
        }
    }
}

/// Removes the spares idle for [`SPARE_IDLE`]; whether any spare is left.
fn expire_spares() -> bool {
    let mut ready = ready();
    let Some(ready) = ready.as_mut() else { return false };
    for spares in ready.values_mut() {
        spares.retain(|(dir, since)| {
            let keep = since.elapsed() < SPARE_IDLE || super::file::remove_tree(dir).is_err();
            if !keep {
                tracing::trace!(cgroup = %dir.display(), "removed an idle spare cgroup");
            }
            keep
        });
    }
    ready.retain(|_, spares| !spares.is_empty());
    !ready.is_empty()
}

/// Starts the thread. It lives as long as the process (its sender is in a
/// static, like the process registry's state): nothing it holds outlives
/// the work, and it sleeps while there is none.
fn start() -> Sender<Job> {
    let (sender, receiver) = mpsc::channel::<Job>();
    let spawned = std::thread::Builder::new().name("exec-server-cgroups".into()).spawn(move || {
        let mut waiting: Vec<Waiting> = Vec::new();
        let mut spares = false;
        loop {
            let next = if waiting.is_empty() && !spares {
                receiver.recv().map_err(|_| RecvTimeoutError::Disconnected)
            } else {
                let young = waiting.iter().any(|w| w.since.elapsed() < Duration::from_secs(1));
                let pause =
                    if young { Duration::from_millis(100) } else { Duration::from_millis(500) };
                receiver.recv_timeout(pause)
            };
            match next {
                Ok((dirs, retired)) => {
                    let since = Instant::now();
                    let dirs = dirs.into_iter().map(|dir| Waiting {
                        dir,
                        since,
                        retired: retired.clone(),
                    });
                    settle(dirs.collect(), &mut waiting);
                }
                Err(RecvTimeoutError::Timeout) => {
                    let retry = std::mem::take(&mut waiting);
                    settle(retry, &mut waiting);
                }
                Err(RecvTimeoutError::Disconnected) => return,
            }
            spares = expire_spares();
        }
    });
    if let Err(error) = spawned {
        tracing::warn!(%error, "cannot start the cgroup janitor; empty cgroups are left");
    }
    sender
}
