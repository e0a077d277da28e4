//! `fs/watchMissing` (today's dialect): one `fs/missingChanged` when a path
//! that did not exist appears, or when a present one changes (is modified,
//! removed or replaced). Each missing path is watched through its deepest
//! existing ancestor directory (moved deeper as directories appear), the
//! present one through its parent; every event there is checked against
//! the paths themselves, so only a real change fires. A watch fires once and
//! ends; it counts against the connection's watches like `fs/watch`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::Value;
use tokio::sync::mpsc::error::TrySendError;

use super::{Inotify, Worker, COALESCE_WINDOW, DIR_MASK, MAX_WATCHES};
use crate::fs::Roots;
use crate::protocol::{
    encode_notification, ErrorObject, MissingChanged, MissingChangedParams, WatchMissingParams,
    WatchMissingResult,
};

/// Paths one watch may name.
const MAX_PATHS: usize = 64;

/// What a path was: device, inode, and for a regular file its size and
/// modification time (a directory's time changes with what it holds, which
/// is not a change of it).
type Identity = (u64, u64, u64, i64, i64);

/// The connection's missing-path watches, by watch number.
#[derive(Default)]
pub(super) struct Missing {
    watches: BTreeMap<u64, State>,
}

/// One watch.
struct State {
    client_id: Value,
    missing: Vec<PathBuf>,
    /// The present path and what it was when the watch began (`None`: not there).
    present: Option<(PathBuf, Option<Identity>)>,
    /// The directories watched now, to follow only when they change.
    armed: Vec<PathBuf>,
}

impl Missing {
    pub(super) fn holds(&self, watch: u64) -> bool {
        self.watches.contains_key(&watch)
    }

    pub(super) fn len(&self) -> usize {
        self.watches.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.watches.is_empty()
    }

    pub(super) fn ids(&self) -> impl Iterator<Item = &u64> {
        self.watches.keys()
    }
}

impl State {
    /// Whether the watch should fire: a missing path is there, or the
    /// present one is not what it was (both as `roots` let the client see them).
    fn changed(&self, roots: &Roots) -> bool {
        self.missing.iter().any(|path| identity(roots, path).is_some())
            || self.present.as_ref().is_some_and(|(path, was)| identity(roots, path) != *was)
    }

    /// The directories to watch: each path's deepest existing ancestor that
    /// is a directory itself (a link is not followed: what it leads to,
    /// outside the roots or not, is never looked at) — the present path's
    /// parent, when it is one.
    fn directories(&self) -> Vec<PathBuf> {
        let real_dir = |dir: &Path| dir.symlink_metadata().is_ok_and(|m| m.is_dir());
        let present = self.present.iter().map(|(path, _)| path);
        let mut dirs: Vec<PathBuf> = self
            .missing
            .iter()
            .chain(present)
            .filter_map(|path| path.ancestors().skip(1).find(|dir| real_dir(dir)))
            .map(Path::to_path_buf)
            .collect();
        dirs.sort();
        dirs.dedup();
        dirs
    }
}

/// What `path` is now, as the client may see it: under `--root`, only a
/// path the roots lead to without leaving them (else it counts as absent).
fn identity(roots: &Roots, path: &Path) -> Option<Identity> {
    use std::os::unix::fs::MetadataExt;
    if roots.confined() && crate::fs::open_for_watch(roots, path).is_err() {
        return None;
    }
    path.symlink_metadata().ok().map(|m| match m.is_file() {
        true => (m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec()),
        false => (m.dev(), m.ino(), 0, 0, 0),
    })
}

/// A path of the request: a file URI or an absolute path, cleaned.
fn path_of(text: &str) -> Result<PathBuf, ErrorObject> {
    let bad = |why: String| {
        ErrorObject::invalid_params(format!("invalid params for fs/watchMissing: {text}: {why}"))
    };
    let path = if text.starts_with("file:") {
        crate::dialect::uri::to_path(text).map_err(bad)?
    } else {
        PathBuf::from(text)
    };
    if !path.is_absolute() {
        return Err(bad("not an absolute path or a file URI".to_owned()));
    }
    Ok(crate::fs::clean_path(&path))
}

impl Worker {
    pub(super) fn watch_missing(
        &mut self,
        params: WatchMissingParams,
    ) -> Result<WatchMissingResult, ErrorObject> {
        if !matches!(params.watch_id, Value::Number(_) | Value::String(_)) {
            return Err(ErrorObject::invalid_params(
                "invalid params for fs/watchMissing: watchId must be a number or a string",
            ));
        }
        if params.missing.len() > MAX_PATHS {
            return Err(ErrorObject::invalid_params(format!(
                "invalid params for fs/watchMissing: at most {MAX_PATHS} missing paths, not {}",
                params.missing.len()
            )));
        }
        let missing = params.missing.iter().map(|p| path_of(p)).collect::<Result<Vec<_>, _>>()?;
        let present = params.present.as_deref().map(path_of).transpose()?;
        // The same id again: the new watch replaces the old.
        let same = self.missing.watches.iter().find(|(_, s)| s.client_id == params.watch_id);
        if let Some(old) = same.map(|(watch, _)| *watch) {
            self.end_missing(old);
        }
        if self.watches.len() + self.missing.len() >= MAX_WATCHES {
            return Err(ErrorObject::invalid_request(format!(
                "cannot watch for missing paths: too many watches, the limit is {MAX_WATCHES} per connection"
            )));
        }
        let present = present.map(|path| {
            let was = identity(&self.roots, &path);
            (path, was)
        });
        let state = State { client_id: params.watch_id, missing, present, armed: Vec::new() };
        if self.inotify.is_none() {
            let inotify = Inotify::new().map_err(|e| {
                ErrorObject::invalid_request(format!(
                    "cannot watch for missing paths: no inotify instance ({e})"
                ))
            })?;
            self.inotify = Some(inotify);
        }
        let watch = self.next_watch;
        self.next_watch += 1;
        let mut state = state;
        self.arm(watch, &mut state)?;
        self.missing.watches.insert(watch, state);
        Ok(WatchMissingResult { watching: true })
    }

    /// Watches the directories `state` needs under `watch`.
    fn arm(&mut self, watch: u64, state: &mut State) -> Result<(), ErrorObject> {
        let Some(inotify) = self.inotify.as_ref() else {
            return Err(ErrorObject::internal("the inotify instance is gone"));
        };
        state.armed = state.directories();
        for dir in &state.armed {
            let added = crate::fs::open_for_watch(&self.roots, dir).and_then(|opened| {
                self.dirs
                    .add(inotify, &opened, dir, DIR_MASK, watch)
                    .map_err(|error| super::add_error(&dir.display().to_string(), error))
            });
            if let Err(error) = added {
                self.dirs.release_watch(inotify, watch);
                return Err(error);
            }
        }
        // Already there (or already gone): it fires at once.
        if state.changed(&self.roots) {
            self.pending.overflow(watch);
            self.flush_at.get_or_insert(Instant::now() + COALESCE_WINDOW);
        }
        Ok(())
    }

    /// Events came for `watch`: it fires (`fs/missingChanged`, and it ends),
    /// or follows directories that appeared. `Some(false)`: the loop has no
    /// room yet; `None`: the loop is gone.
    pub(super) fn missing_changed(&mut self, watch: u64) -> Option<bool> {
        let Some(state) = self.missing.watches.get(&watch) else { return Some(true) };
        if !state.changed(&self.roots) {
            // Watched from where the paths' ancestors are now, when a
            // directory on the way appeared or left (else nothing to do).
            if state.directories() == state.armed {
                return Some(true);
            }
            if let Some(inotify) = &self.inotify {
                self.dirs.release_watch(inotify, watch);
            }
            let Some(mut state) = self.missing.watches.remove(&watch) else { return Some(true) };
            let client_id = state.client_id.clone();
            match self.arm(watch, &mut state) {
                Ok(()) => {
                    self.missing.watches.insert(watch, state);
                    return Some(true);
                }
                // It cannot be followed there: the client is told, and probes itself.
                Err(_) => return self.fire(watch, client_id),
            }
        }
        let client_id = state.client_id.clone();
        self.fire(watch, client_id)
    }

    /// Sends `fs/missingChanged` and ends the watch (see [`Worker::missing_changed`]).
    fn fire(&mut self, watch: u64, client_id: Value) -> Option<bool> {
        let params = MissingChangedParams { watch_id: client_id };
        match self.lines.try_send(encode_notification::<MissingChanged>(&params, 64)) {
            Ok(()) => {
                self.end_missing(watch);
                Some(true)
            }
            Err(TrySendError::Full(_)) => Some(false),
            Err(TrySendError::Closed(_)) => None,
        }
    }

    fn end_missing(&mut self, watch: u64) {
        self.missing.watches.remove(&watch);
        self.let_go(watch);
    }
}
