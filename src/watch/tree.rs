//! The watched directories of one connection: inotify watch descriptors, the
//! path each stands for, and which watches see it. Directories are opened
//! beneath their watch's root without following any symlink, so a recursive
//! watch never leaves its tree; counts are bounded per connection.

use std::collections::HashMap;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::inotify::{Inotify, DIR_MASK};

/// Directories watched at once per connection.
pub(crate) const MAX_WATCHED_DIRS: usize = 100_000;

/// One watched directory (or file, for a plain watch of a file).
pub(crate) struct Dir {
    pub(crate) path: PathBuf,
    /// The watches that see it.
    pub(crate) watches: Vec<u64>,
}

/// Why a directory could not be watched.
pub(crate) enum AddError {
    /// The connection watches [`MAX_WATCHED_DIRS`] already.
    TooMany,
    /// The kernel refused (ENOSPC: `fs.inotify.max_user_watches`).
    Kernel(io::Error),
}

#[derive(Default)]
pub(crate) struct Dirs {
    by_wd: HashMap<i32, Dir>,
    by_path: HashMap<PathBuf, i32>,
}

impl Dirs {
    pub(crate) fn get(&self, wd: i32) -> Option<&Dir> {
        self.by_wd.get(&wd)
    }

    /// Watches `fd` (open on `path`) for `watch`; the wd, and whether it is new.
    pub(crate) fn add(
        &mut self,
        inotify: &Inotify,
        fd: &OwnedFd,
        path: &Path,
        mask: u32,
        watch: u64,
    ) -> Result<(i32, bool), AddError> {
        if self.by_wd.len() >= MAX_WATCHED_DIRS && !self.by_path.contains_key(path) {
            return Err(AddError::TooMany);
        }
        let wd = inotify.add(fd, mask).map_err(AddError::Kernel)?;
        let dir = self
            .by_wd
            .entry(wd)
            .or_insert_with(|| Dir { path: path.to_path_buf(), watches: Vec::new() });
        let fresh = !dir.watches.contains(&watch);
        if fresh {
            dir.watches.push(watch);
        }
        if dir.path != path {
            // The same directory under a new name (a rename we did not see).
            self.by_path.remove(&dir.path);
            dir.path = path.to_path_buf();
        }
        self.by_path.insert(path.to_path_buf(), wd);
        Ok((wd, fresh))
    }

    /// `watch` no longer sees `wd`; the kernel watch goes with its last watch.
    pub(crate) fn release(&mut self, inotify: &Inotify, wd: i32, watch: u64) {
        let Some(dir) = self.by_wd.get_mut(&wd) else { return };
        dir.watches.retain(|w| *w != watch);
        if dir.watches.is_empty() {
            inotify.remove(wd);
            self.forget(wd);
        }
    }

    /// The kernel dropped `wd` (its directory is gone): forgets it.
    pub(crate) fn forget(&mut self, wd: i32) -> Option<Dir> {
        let dir = self.by_wd.remove(&wd)?;
        if self.by_path.get(&dir.path) == Some(&wd) {
            self.by_path.remove(&dir.path);
        }
        Some(dir)
    }

    /// Every wd at or beneath `path`.
    pub(crate) fn beneath(&self, path: &Path) -> Vec<i32> {
        self.by_wd.iter().filter(|(_, dir)| dir.path.starts_with(path)).map(|(wd, _)| *wd).collect()
    }

    /// A directory moved from `from` to `to` inside the watched trees.
    pub(crate) fn renamed(&mut self, from: &Path, to: &Path) {
        for wd in self.beneath(from) {
            if let Some(dir) = self.by_wd.get_mut(&wd) {
                let rest = dir.path.strip_prefix(from).map(Path::to_path_buf).unwrap_or_default();
                self.by_path.remove(&dir.path);
                dir.path =
                    if rest.as_os_str().is_empty() { to.to_path_buf() } else { to.join(rest) };
                self.by_path.insert(dir.path.clone(), wd);
            }
        }
    }

    /// The wds `watch` sees.
    pub(crate) fn of_watch(&self, watch: u64) -> Vec<i32> {
        self.by_wd
            .iter()
            .filter(|(_, dir)| dir.watches.contains(&watch))
            .map(|(wd, _)| *wd)
            .collect()
    }
}

/// Watches the directory `dir` (at `path`) and, recursively, every directory
/// beneath it, never through a symlink. `found` receives each entry found
/// (for directories that appeared after the watch began, they are reported
/// as created). The wds added are pushed to `added` (for a rollback).
pub(crate) fn add_tree(
    dirs: &mut Dirs,
    inotify: &Inotify,
    dir: OwnedFd,
    path: PathBuf,
    watch: u64,
    added: &mut Vec<i32>,
    found: &mut dyn FnMut(&Path),
) -> Result<(), AddError> {
    let mut stack = vec![(dir, path)];
    while let Some((dir, path)) = stack.pop() {
        let (wd, fresh) = dirs.add(inotify, &dir, &path, DIR_MASK, watch)?;
        if fresh {
            added.push(wd);
        }
        let Ok(entries) = std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd())) else {
            continue;
        };
        for entry in entries.flatten() {
            let child = path.join(entry.file_name());
            found(&child);
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                if let Ok(child_dir) = open_beneath(&dir, Path::new(&entry.file_name())) {
                    stack.push((child_dir, child));
                }
            }
        }
    }
    Ok(())
}

/// Opens `relative` beneath `base` (`O_PATH`, a directory), following no
/// symlink and never leaving `base`.
pub(crate) fn open_beneath(base: &OwnedFd, relative: &Path) -> io::Result<OwnedFd> {
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }
    let c_path = CString::new(relative.as_os_str().as_bytes()).map_err(io::Error::other)?;
    let how = OpenHow {
        flags: (libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: a valid directory descriptor, a NUL-terminated path and an open_how of its size.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            base.as_raw_fd(),
            c_path.as_ptr(),
            &how,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}
