//! The watcher thread of one connection: it owns the inotify instance and the
//! watched directories, answers `fs/watch` and `fs/unwatch` (which make
//! system calls on paths a client named, so they never run on the loop),
//! turns events into changes, and sends them in `fs/changed` batches every
//! [`COALESCE_WINDOW`]. Change batches never wait for the loop: what it cannot
//! take yet stays pending (bounded, see `pending`); a reply to a command waits
//! for room (the loop takes no new command meanwhile, see `Watcher::has_room`).

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::mpsc::Sender;

mod missing;

use super::inotify::{Inotify, RawEvent, DIR_MASK, FILE_MASK};
use super::pending::Pending;
use super::tree::{add_tree, open_beneath, AddError, Dirs, MAX_WATCHED_DIRS};
use crate::fs::Roots;
use crate::protocol::{
    encode_notification, encode_response, Change, ChangeKind, ChangedParams, Empty, ErrorObject,
    FsChanged, RequestId, SandboxMode, UnwatchParams, WatchParams, WatchResult,
};

/// How long changes wait to be merged before they are sent.
pub(crate) const COALESCE_WINDOW: Duration = Duration::from_millis(50);
/// Watches per connection.
pub(crate) const MAX_WATCHES: usize = 256;
/// How soon a batch the loop could not take is offered again.
const RETRY: Duration = Duration::from_millis(10);
/// Changes in one `fs/changed` at most.
pub(crate) const BATCH: usize = 1000;

/// What the loop asks of the thread.
pub(crate) enum Command {
    Watch { id: RequestId, params: Box<WatchParams> },
    Unwatch { id: RequestId, params: UnwatchParams },
    WatchMissing { id: RequestId, params: Box<crate::protocol::WatchMissingParams> },
}

struct Watch {
    root: PathBuf,
    /// The root, open: new directories are opened beneath it.
    root_dir: OwnedFd,
    recursive: bool,
}

/// A directory moved away, as it was watched: (wd, watch) pairs.
struct Moved {
    pairs: Vec<(i32, u64)>,
}

/// A directory that appeared in a watched directory.
struct Appeared {
    parent: i32,
    name: std::ffi::OsString,
}

struct Worker {
    roots: Arc<Roots>,
    lines: Sender<String>,
    inotify: Option<Inotify>,
    dirs: Dirs,
    watches: BTreeMap<u64, Watch>,
    next_watch: u64,
    pending: Pending,
    /// `fs/watchMissing` watches, by their number (beside `watches`).
    missing: missing::Missing,
    flush_at: Option<Instant>,
    /// When changes were last sent: the first change after a quiet window
    /// goes at once, later ones wait for the window to end.
    last_flush: Option<Instant>,
}

/// The thread's body: runs until the connection lets go of it.
pub(crate) fn run(
    commands: Receiver<Command>,
    wake: Arc<OwnedFd>,
    lines: Sender<String>,
    roots: Arc<Roots>,
    outstanding: Arc<AtomicUsize>,
) {
    let mut worker = Worker {
        roots,
        lines,
        inotify: None,
        dirs: Dirs::default(),
        watches: BTreeMap::new(),
        next_watch: 1,
        pending: Pending::default(),
        missing: missing::Missing::default(),
        flush_at: None,
        last_flush: None,
    };
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let timeout = worker.flush_at.map_or(-1, |at| {
            let left = at.saturating_duration_since(Instant::now());
            i32::try_from(left.as_millis()).unwrap_or(i32::MAX).max(1)
        });
        let mut fds = [
            libc::pollfd { fd: wake.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            libc::pollfd {
                fd: worker.inotify.as_ref().map_or(-1, Inotify::raw),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two valid pollfds (a negative fd is ignored by poll).
        unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout) };
        if fds[0].revents != 0 {
            let mut count = [0u8; 8];
            // SAFETY: drains the eventfd counter into an 8-byte buffer.
            unsafe { libc::read(wake.as_raw_fd(), count.as_mut_ptr().cast(), 8) };
        }
        loop {
            match commands.try_recv() {
                Ok(command) => {
                    let answered = worker.command(command);
                    outstanding.fetch_sub(1, Ordering::AcqRel);
                    if !answered {
                        return;
                    }
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => return,
            }
        }
        if fds[1].revents != 0 {
            worker.read_events(&mut buffer);
        }
        if worker.flush_at.is_some_and(|at| Instant::now() >= at) && !worker.flush() {
            return;
        }
    }
}

impl Worker {
    /// Handles a command; false when the loop is gone.
    fn command(&mut self, command: Command) -> bool {
        let line = match command {
            Command::Watch { id, params } => {
                let result = self.watch(*params);
                encode_response(&id, &result)
            }
            Command::Unwatch { id, params } => {
                let result = self.unwatch(&params.watch_id);
                encode_response(&id, &result)
            }
            Command::WatchMissing { id, params } => {
                let result = self.watch_missing(*params);
                encode_response(&id, &result)
            }
        };
        // A reply is never dropped: it waits for room (the loop never waits on us).
        self.lines.blocking_send(line).is_ok()
    }

    fn watch(&mut self, params: WatchParams) -> Result<WatchResult, ErrorObject> {
        let shown = params.path.display().to_string();
        if self.watches.len() + self.missing.len() >= MAX_WATCHES {
            return Err(ErrorObject::invalid_request(format!(
                "cannot watch {shown}: too many watches, the limit is {MAX_WATCHES} per connection"
            )));
        }
        let root_dir = crate::fs::open_for_watch(&self.roots, &params.path)?;
        let real = std::fs::read_link(format!("/proc/self/fd/{}", root_dir.as_raw_fd()))
            .map_err(|e| ErrorObject::internal(format!("cannot watch {shown}: {e}")))?;
        if let Some(sandbox) = params.sandbox.as_ref().filter(|s| s.mode == SandboxMode::Restricted)
        {
            if sandbox.access.is_some() {
                // Fails closed: a watch of a tree would report what the list denies.
                return Err(ErrorObject::invalid_params(format!(
                    "cannot watch {shown}: a sandbox access list cannot confine a watch; give readableRoots"
                )));
            }
            if let Some(readable) = &sandbox.readable_roots {
                let allowed = readable.iter().chain(sandbox.writable_roots.iter().flatten());
                let inside = allowed
                    .filter_map(|root| std::fs::canonicalize(root).ok())
                    .any(|root| real.starts_with(root));
                if !inside {
                    return Err(ErrorObject::invalid_request(format!(
                        "cannot watch {shown}: it is outside the sandbox's readable roots"
                    )));
                }
            }
        }
        let file_type = crate::fs::sys::fstat(std::os::fd::AsFd::as_fd(&root_dir))
            .map(|stat| crate::fs::sys::file_type(&stat))
            .map_err(|e| ErrorObject::internal(format!("cannot watch {shown}: {e}")))?;
        let is_dir = file_type == libc::S_IFDIR;
        if !is_dir && file_type != libc::S_IFREG {
            // A FIFO, socket or device (the server's own stdio among them) is not watched.
            return Err(ErrorObject::invalid_request(format!(
                "cannot watch {shown}: it is not a directory or a regular file"
            )));
        }
        if params.recursive && !is_dir {
            return Err(ErrorObject::invalid_request(format!(
                "cannot watch {shown} recursively: it is not a directory"
            )));
        }
        if self.inotify.is_none() {
            let inotify = Inotify::new().map_err(|e| {
                ErrorObject::invalid_request(format!(
                    "cannot watch {shown}: no inotify instance ({e}): the kernel's limit fs.inotify.max_user_instances, or the descriptor limit, is reached"
                ))
            })?;
            self.inotify = Some(inotify);
        }
        let Some(inotify) = self.inotify.as_ref() else {
            return Err(ErrorObject::internal("the inotify instance is gone"));
        };
        let watch = self.next_watch;
        let root = crate::fs::clean_path(&params.path);
        let mut added = Vec::new();
        let outcome = if params.recursive {
            let dir = open_beneath(&root_dir, Path::new("."))
                .map_err(|e| AddError::Kernel(root.clone(), e));
            dir.and_then(|dir| {
                add_tree(&mut self.dirs, inotify, dir, root.clone(), watch, &mut added, &mut |_| {})
            })
        } else {
            let mask = if is_dir { DIR_MASK } else { FILE_MASK };
            self.dirs.add(inotify, &root_dir, &root, mask, watch).map(|(wd, _)| {
                added.push(wd);
                true
            })
        };
        match outcome {
            Ok(true) => {}
            // A directory beneath could not be entered: an overflow says so at once.
            Ok(false) => {
                self.pending.overflow(watch);
                self.flush_at.get_or_insert(Instant::now() + COALESCE_WINDOW);
            }
            Err(error) => {
                for wd in added {
                    self.dirs.release(inotify, wd, watch);
                }
                return Err(add_error(&shown, error));
            }
        }
        self.next_watch += 1;
        self.watches.insert(watch, Watch { root, root_dir, recursive: params.recursive });
        Ok(WatchResult { watch_id: format!("w{watch}") })
    }

    fn unwatch(&mut self, watch_id: &str) -> Result<Empty, ErrorObject> {
        let unknown = || ErrorObject::invalid_request(format!("unknown watch id {watch_id}"));
        let watch: u64 =
            watch_id.strip_prefix('w').and_then(|n| n.parse().ok()).ok_or_else(unknown)?;
        self.watches.remove(&watch).ok_or_else(unknown)?;
        self.let_go(watch);
        Ok(Empty {})
    }

    /// Lets go of a watch already removed from `watches` or `missing`: its
    /// directories, its pending changes, and the inotify instance with the
    /// last watch (its kernel memory goes too).
    fn let_go(&mut self, watch: u64) {
        if let Some(inotify) = &self.inotify {
            self.dirs.release_watch(inotify, watch);
        }
        self.pending.forget(watch);
        if self.watches.is_empty() && self.missing.is_empty() {
            self.inotify = None;
        }
    }

    fn read_events(&mut self, buffer: &mut [u8]) {
        let Some(inotify) = &self.inotify else { return };
        let events = match inotify.read(buffer) {
            Ok(events) => events,
            Err(error) => {
                tracing::warn!(%error, "reading inotify events failed");
                return;
            }
        };
        let mut moved: HashMap<u32, Moved> = HashMap::new();
        let mut appeared: Vec<Appeared> = Vec::new();
        let mut lost = false;
        for event in events {
            lost |= self.event(event, &mut moved, &mut appeared);
        }
        // Directories moved out of every watched tree: their watches go.
        for gone in moved.into_values() {
            self.release(&gone.pairs);
        }
        for appeared in appeared {
            self.follow_new_directory(&appeared);
        }
        if lost {
            self.rescan();
        }
        if !self.pending.is_empty() && self.flush_at.is_none() {
            // After a quiet window the change goes at once (the events one
            // read brought are merged already); within one, it waits for
            // the window's end, so a burst is still one batch per window.
            let now = Instant::now();
            let quiet = self.last_flush.is_none_or(|at| now >= at + COALESCE_WINDOW);
            self.flush_at = Some(if quiet {
                now
            } else {
                self.last_flush.map_or(now, |at| at + COALESCE_WINDOW)
            });
        }
    }

    /// Applies one event; true when the kernel lost events.
    fn event(
        &mut self,
        event: RawEvent,
        moved: &mut HashMap<u32, Moved>,
        appeared: &mut Vec<Appeared>,
    ) -> bool {
        if event.mask & libc::IN_Q_OVERFLOW != 0 {
            // Missing watches check their paths again too: what the lost
            // events said is asked of the file system itself.
            for watch in self.watches.keys().chain(self.missing.ids()) {
                self.pending.overflow(*watch);
            }
            return true;
        }
        if event.mask & libc::IN_IGNORED != 0 {
            self.dirs.forget(event.wd);
            return false;
        }
        let views = self.dirs.views(event.wd).to_vec();
        if views.is_empty() {
            return false;
        }
        let name = OsStr::from_bytes(&event.name);
        let is_self = event.name.is_empty();
        let is_dir = event.mask & libc::IN_ISDIR != 0;
        let path_in = |view: &Path| if is_self { view.to_path_buf() } else { view.join(name) };
        let kind = if event.mask & libc::IN_CREATE != 0 {
            if is_dir {
                appeared.push(Appeared { parent: event.wd, name: name.to_owned() });
            }
            ChangeKind::Created
        } else if event.mask & libc::IN_DELETE != 0 {
            ChangeKind::Removed
        } else if event.mask & libc::IN_MOVED_FROM != 0 {
            if is_dir {
                // What the directory was watched as, captured now: later events may reuse its name.
                let mut pairs = Vec::new();
                for (_, view) in &views {
                    pairs.extend(self.dirs.beneath(&view.join(name)));
                }
                moved.insert(event.cookie, Moved { pairs });
            }
            ChangeKind::RenamedFrom
        } else if event.mask & libc::IN_MOVED_TO != 0 {
            if is_dir {
                // Watched again from scratch under its new parent's watches: a
                // move between trees, or an exchange, must not keep old paths.
                if let Some(from) = moved.remove(&event.cookie) {
                    self.release(&from.pairs);
                }
                appeared.push(Appeared { parent: event.wd, name: name.to_owned() });
            }
            ChangeKind::RenamedTo
        } else if event.mask & (libc::IN_MODIFY | libc::IN_CLOSE_WRITE) != 0 {
            ChangeKind::Modified
        } else if event.mask & libc::IN_ATTRIB != 0 {
            ChangeKind::Metadata
        } else if event.mask & (libc::IN_DELETE_SELF | libc::IN_MOVE_SELF) != 0 {
            // Reported by the parent unless this is a watch's own root.
            let kind = if event.mask & libc::IN_DELETE_SELF != 0 {
                ChangeKind::Removed
            } else {
                ChangeKind::RenamedFrom
            };
            for (watch, view) in &views {
                let root = self.watches.get(watch).is_some_and(|w| &w.root == view);
                if root || self.missing.holds(*watch) {
                    self.pending.push(*watch, view, kind);
                }
            }
            return false;
        } else {
            return false;
        };
        if is_self && kind != ChangeKind::Modified && kind != ChangeKind::Metadata {
            return false;
        }
        for (watch, view) in &views {
            self.pending.push(*watch, &path_in(view), kind);
        }
        false
    }

    fn release(&mut self, pairs: &[(i32, u64)]) {
        if let Some(inotify) = &self.inotify {
            for (wd, watch) in pairs {
                self.dirs.release(inotify, *wd, *watch);
            }
        }
    }

    /// A directory appeared in a watched directory (made, or moved in): the
    /// recursive watches that see its parent watch it and what it holds, and
    /// report what it held as created (not to a watch it was moved within).
    fn follow_new_directory(&mut self, appeared: &Appeared) {
        for (watch, parent) in self.dirs.views(appeared.parent).to_vec() {
            let Some(state) = self.watches.get(&watch).filter(|w| w.recursive) else { continue };
            let Some(inotify) = &self.inotify else { return };
            let path = parent.join(&appeared.name);
            let Ok(relative) = path.strip_prefix(&state.root) else { continue };
            let dir = match open_beneath(&state.root_dir, relative) {
                Ok(dir) => dir,
                // Gone already (its removal is reported), or swapped for a link: not followed.
                Err(_) => continue,
            };
            // What it holds is reported as created to every watch, the one it
            // moved within too: events that came for it in the same read were
            // dropped with its old views, and the walk is what finds them.
            let mut added = Vec::new();
            let followed = {
                let pending = &mut self.pending;
                let mut report = |found: &Path| pending.push(watch, found, ChangeKind::Created);
                add_tree(&mut self.dirs, inotify, dir, path.clone(), watch, &mut added, &mut report)
            };
            if !matches!(followed, Ok(true)) {
                // Beyond a limit, or a directory it cannot enter: the client rescans the root.
                tracing::warn!(path = %path.display(), "a watch cannot follow a new directory; reporting an overflow");
                self.pending.overflow(watch);
            }
        }
    }

    /// The kernel lost events: directories made meanwhile were never added.
    /// Each recursive watch walks its tree again and watches what it lacks
    /// (its root's overflow tells the client to rescan too).
    fn rescan(&mut self) {
        let recursive: Vec<u64> =
            self.watches.iter().filter(|(_, w)| w.recursive).map(|(id, _)| *id).collect();
        for watch in recursive {
            let Some(state) = self.watches.get(&watch) else { continue };
            let Some(inotify) = &self.inotify else { return };
            let Ok(dir) = open_beneath(&state.root_dir, Path::new(".")) else { continue };
            let mut added = Vec::new();
            let root = state.root.clone();
            let walked =
                add_tree(&mut self.dirs, inotify, dir, root, watch, &mut added, &mut |_| {});
            if !matches!(walked, Ok(true)) {
                self.pending.overflow(watch);
            }
        }
    }

    /// Sends what is pending, in lines of at most [`BATCH`] changes; what the
    /// loop cannot take yet goes back, before anything newer. False when the
    /// loop is gone.
    fn flush(&mut self) -> bool {
        self.flush_at = None;
        self.last_flush = Some(Instant::now());
        let mut batches = self.pending.take().into_iter();
        while let Some((watch, changes)) = batches.next() {
            if self.missing.holds(watch) {
                match self.missing_changed(watch) {
                    Some(true) => {}
                    Some(false) => {
                        self.pending.put_back(watch, changes);
                        for (watch, changes) in batches {
                            self.pending.put_back(watch, changes);
                        }
                        self.flush_at = Some(Instant::now() + RETRY);
                        return true;
                    }
                    None => return false,
                }
                continue;
            }
            let Some(state) = self.watches.get(&watch) else { continue };
            let mut rest = match changes {
                Some(changes) => changes,
                None => vec![(state.root.clone(), ChangeKind::Overflow)],
            };
            while !rest.is_empty() {
                let tail = rest.split_off(rest.len().min(BATCH));
                let list = rest.iter().map(|(path, kind)| Change::new(path, *kind)).collect();
                let params = ChangedParams { watch_id: format!("w{watch}"), changes: list };
                let line = encode_notification::<FsChanged>(&params, 256);
                match self.lines.try_send(line) {
                    Ok(()) => rest = tail,
                    Err(TrySendError::Full(_)) => {
                        rest.extend(tail);
                        let back = if rest.first().is_some_and(|(_, k)| *k == ChangeKind::Overflow)
                        {
                            None
                        } else {
                            Some(rest)
                        };
                        self.pending.put_back(watch, back);
                        for (watch, changes) in batches {
                            self.pending.put_back(watch, changes);
                        }
                        self.flush_at = Some(Instant::now() + RETRY);
                        return true;
                    }
                    Err(TrySendError::Closed(_)) => return false,
                }
            }
        }
        true
    }
}

fn add_error(shown: &str, error: AddError) -> ErrorObject {
    match error {
        AddError::TooMany => ErrorObject::invalid_request(format!(
            "cannot watch {shown}: it needs more than {MAX_WATCHED_DIRS} watched directories, the limit per connection"
        )),
        AddError::Kernel(_, error) if error.raw_os_error() == Some(libc::ENOSPC) => {
            let limit = std::fs::read_to_string("/proc/sys/fs/inotify/max_user_watches")
                .map(|text| text.trim().to_owned())
                .unwrap_or_else(|_| "?".to_owned());
            ErrorObject::invalid_request(format!(
                "cannot watch {shown}: the kernel's limit of inotify watches (fs.inotify.max_user_watches = {limit}) is reached"
            ))
        }
        AddError::Kernel(path, error) => {
            ErrorObject::internal(format!("cannot watch {shown}: {}: {error}", path.display()))
        }
    }
}

// The thread's inputs cross threads.
const _: fn() = || {
    fn sendable<T: Send>() {}
    sendable::<Command>();
    sendable::<io::Error>();
};
