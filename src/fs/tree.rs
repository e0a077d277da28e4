//! `fs/walk`: a bounded, breadth-first listing of a tree.
//!
//! Directories are opened by descriptor, entry by entry; a symlink to a
//! directory is followed only when asked, resolved from the root like any
//! path (so never out of `--root`), and a directory already seen (same
//! device and inode: a loop, or two links to one place) is not entered again.

use std::collections::{HashSet, VecDeque};
use std::ffi::OsStr;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::error::FsOp;
use super::sys;
use super::walk::DirStream;
use super::{FsResult, Roots};
use crate::protocol::WalkOptions;

/// Default and ceiling of `maxDepth`.
const MAX_DEPTH: u32 = 64;
/// Default and ceiling of `maxDirectories`.
const MAX_DIRECTORIES: u32 = 10_000;
/// Default and ceiling of `maxEntries`.
const MAX_ENTRIES: u32 = 100_000;

/// What a walk found.
#[derive(Debug, Default)]
pub(crate) struct Walked {
    /// Each entry below the start and whether it is a directory.
    pub(crate) entries: Vec<(PathBuf, bool)>,
    /// Directories that could not be read.
    pub(crate) errors: Vec<(PathBuf, String)>,
    pub(crate) truncated: bool,
}

/// Walks the tree at `path` within `options`' bounds.
pub(crate) fn walk(roots: &Roots, path: &Path, options: &WalkOptions) -> FsResult<Walked> {
    let op = FsOp::Walk;
    let max_depth = options.max_depth.unwrap_or(MAX_DEPTH).min(MAX_DEPTH);
    let max_directories = options.max_directories.unwrap_or(MAX_DIRECTORIES).min(MAX_DIRECTORIES);
    let max_entries = options.max_entries.unwrap_or(MAX_ENTRIES).min(MAX_ENTRIES) as usize;
    let located = roots.locate(path)?;
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
    let start = located.open(flags).map_err(|e| located.fail(op, e))?;
    let mut seen = HashSet::new();
    let mut walked = Walked::default();
    let mut queue = VecDeque::from([(start, PathBuf::new(), 0u32)]);
    let mut opened = 0u32;
    while let Some((fd, rel, depth)) = queue.pop_front() {
        if let Ok(stat) = sys::fstat(fd.as_fd()) {
            if !seen.insert((stat.st_dev, stat.st_ino)) {
                continue;
            }
        }
        if opened >= max_directories {
            walked.truncated = true;
            break;
        }
        opened += 1;
        let mut stream = match DirStream::new(fd) {
            Ok(stream) => stream,
            Err(error) => {
                walked.errors.push((path.join(&rel), error.to_string()));
                continue;
            }
        };
        let mut names = Vec::new();
        // Never more names held than entries may still be returned (plus one, to know).
        let room = max_entries.saturating_sub(walked.entries.len()) + 1;
        while let Some(entry) = stream.next_entry() {
            if names.len() >= room {
                break;
            }
            match entry {
                Ok(entry) => names.push(entry),
                Err(error) => {
                    walked.errors.push((path.join(&rel), error.to_string()));
                    break;
                }
            }
        }
        // A stable order: by name within each directory.
        names.sort();
        for (name, d_type) in names {
            if walked.entries.len() >= max_entries {
                walked.truncated = true;
                return Ok(walked);
            }
            let child = rel.join(OsStr::from_bytes(name.to_bytes()));
            let kind = match d_type {
                libc::DT_UNKNOWN => match sys::fstatat(stream.fd(), &name, false) {
                    Ok(stat) => match sys::file_type(&stat) {
                        libc::S_IFDIR => libc::DT_DIR,
                        libc::S_IFLNK => libc::DT_LNK,
                        _ => libc::DT_REG,
                    },
                    Err(_) => libc::DT_REG,
                },
                other => other,
            };
            let hidden = name.to_bytes().first() == Some(&b'.');
            let descend = depth < max_depth && !(hidden && options.prune_hidden_directories);
            let directory = match kind {
                libc::DT_DIR => {
                    if descend {
                        match sys::openat(stream.fd(), &name, flags | libc::O_NOFOLLOW, 0) {
                            Ok(fd) => queue.push_back((fd, child.clone(), depth + 1)),
                            Err(error) => {
                                walked.errors.push((path.join(&child), error.to_string()))
                            }
                        }
                    }
                    true
                }
                // Followed beneath the root, or not at all.
                libc::DT_LNK if options.follow_directory_symlinks => {
                    match located.open_below(&child, flags) {
                        Ok(fd) => {
                            if descend {
                                queue.push_back((fd, child.clone(), depth + 1));
                            }
                            true
                        }
                        Err(_) => false,
                    }
                }
                _ => false,
            };
            walked.entries.push((path.join(&child), directory));
        }
    }
    if !queue.is_empty() {
        walked.truncated = true;
    }
    Ok(walked)
}
