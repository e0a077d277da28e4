//! The watched directories of one connection: inotify watch descriptors, and
//! for each the watches that see it and under which path (one directory can
//! be reached by two paths: a bind mount, a hard-linked file). Directories are
//! opened beneath their watch's root without following any symlink, so a
//! recursive watch never leaves its tree; counts are bounded per connection.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use super::inotify::{Inotify, DIR_MASK};

/// Directories watched at once per connection.
pub(crate) const MAX_WATCHED_DIRS: usize = 100_000;

/// Why a directory could not be watched.
pub(crate) enum AddError {
    /// The connection watches [`MAX_WATCHED_DIRS`] already.
    TooMany,
    /// The kernel refused this path (ENOSPC: `fs.inotify.max_user_watches`).
    Kernel(PathBuf, io::Error),
}

/// Every watched descriptor and its views: (watch, the path it sees it under).
#[derive(Default)]
pub(crate) struct Dirs {
    views: HashMap<i32, Vec<(u64, PathBuf)>>,
}

impl Dirs {
    /// The views of `wd`.
    pub(crate) fn views(&self, wd: i32) -> &[(u64, PathBuf)] {
        self.views.get(&wd).map_or(&[], Vec::as_slice)
    }

    /// Watches `fd` (open on `path`) for `watch`; the wd, and whether this
    /// watch did not see it yet (a directory it sees already is not entered again).
    pub(crate) fn add(
        &mut self,
        inotify: &Inotify,
        fd: &OwnedFd,
        path: &Path,
        mask: u32,
        watch: u64,
    ) -> Result<(i32, bool), AddError> {
        if self.views.len() >= MAX_WATCHED_DIRS {
            return Err(AddError::TooMany);
        }
        let wd = inotify.add(fd, mask).map_err(|e| AddError::Kernel(path.to_path_buf(), e))?;
        let views = self.views.entry(wd).or_default();
        if views.iter().any(|(w, _)| *w == watch) {
            return Ok((wd, false));
        }
        views.push((watch, path.to_path_buf()));
        Ok((wd, true))
    }

    /// `watch` no longer sees `wd`; the kernel watch goes with its last view.
    pub(crate) fn release(&mut self, inotify: &Inotify, wd: i32, watch: u64) {
        let Some(views) = self.views.get_mut(&wd) else { return };
        views.retain(|(w, _)| *w != watch);
        if views.is_empty() {
            inotify.remove(wd);
            self.views.remove(&wd);
        }
    }

    /// `watch` no longer sees any directory.
    pub(crate) fn release_watch(&mut self, inotify: &Inotify, watch: u64) {
        for wd in self.of_watch(watch) {
            self.release(inotify, wd, watch);
        }
    }

    /// The kernel dropped `wd` (its directory is gone).
    pub(crate) fn forget(&mut self, wd: i32) {
        self.views.remove(&wd);
    }

    /// Every (wd, watch) whose view lies at or beneath `path`.
    pub(crate) fn beneath(&self, path: &Path) -> Vec<(i32, u64)> {
        let mut found = Vec::new();
        for (wd, views) in &self.views {
            for (watch, view) in views {
                if view.starts_with(path) {
                    found.push((*wd, *watch));
                }
            }
        }
        found
    }

    /// The wds `watch` sees.
    pub(crate) fn of_watch(&self, watch: u64) -> Vec<i32> {
        let sees = |views: &Vec<(u64, PathBuf)>| views.iter().any(|(w, _)| *w == watch);
        self.views.iter().filter(|(_, views)| sees(views)).map(|(wd, _)| *wd).collect()
    }
}

/// Watches the directory `dir` (at `path`) and, recursively, every directory
/// beneath it, never through a symlink. `found` receives each entry found
/// (for directories that appeared after the watch began, they are reported
/// as created). The wds this watch did not see before go to `added` (for a rollback).
pub(crate) fn add_tree(
    dirs: &mut Dirs,
    inotify: &Inotify,
    dir: OwnedFd,
    path: PathBuf,
    watch: u64,
    added: &mut Vec<i32>,
    found: &mut dyn FnMut(&Path),
) -> Result<bool, AddError> {
    // False once a directory could not be listed or entered (no permission,
    // gone meanwhile): the caller reports an overflow, never a silently partial watch.
    let mut complete = true;
    let mut stack = vec![(dir, path)];
    while let Some((dir, path)) = stack.pop() {
        let (wd, fresh) = dirs.add(inotify, &dir, &path, DIR_MASK, watch)?;
        if !fresh {
            continue;
        }
        added.push(wd);
        let Ok(entries) = std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd())) else {
            complete = false;
            continue;
        };
        for entry in entries.flatten() {
            let child = path.join(entry.file_name());
            found(&child);
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                match open_beneath(&dir, Path::new(&entry.file_name())) {
                    Ok(child_dir) => stack.push((child_dir, child)),
                    Err(_) => complete = false,
                }
            }
        }
    }
    Ok(complete)
}

/// Opens `relative` beneath `base` (`O_PATH`, a directory), following no
/// symlink and never leaving `base`.
pub(crate) fn open_beneath(base: &OwnedFd, relative: &Path) -> io::Result<OwnedFd> {
    use std::os::fd::AsFd;
    let resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
    let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW;
    crate::fs::sys::openat2(base.as_fd(), &crate::fs::sys::c_path(relative)?, flags, 0, resolve)
}
