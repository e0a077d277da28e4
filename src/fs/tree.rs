//! `fs/walk`: a bounded, breadth-first listing of a tree.
//!
//! Each directory is opened when its turn comes, resolved from the root like
//! any path (so the walk holds one descriptor at a time, and a link on the
//! way never leads out of `--root`); entries are read through that
//! descriptor. A symlink to a directory is followed only when asked, never
//! through a magic link (`/proc/PID/fd/N`), and a directory already seen
//! (same device and inode: a loop, or two links to one place) is not entered
//! again. Bounds: levels, directories opened, entries returned, and the bytes
//! of the paths returned. [`WalkRules`] choose how bounds, a root that is no
//! directory, links and names that are not UTF-8 are treated.

use std::collections::{HashSet, VecDeque};
use std::ffi::OsStr;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::error::FsOp;
use super::sys;
use super::walk::DirStream;
use super::{FsResult, Roots, WalkRules};
use crate::protocol::{ErrorObject, WalkOptions};

/// Default and ceiling of `maxDepth`.
const MAX_DEPTH: u32 = 64;
/// Default and ceiling of `maxDirectories`.
const MAX_DIRECTORIES: u32 = 10_000;
/// Default and ceiling of `maxEntries`.
const MAX_ENTRIES: u32 = 100_000;
/// The ceiling of `maxEntries` when bad bounds are refused.
const STRICT_MAX_ENTRIES: u32 = 50_000;
/// Bytes of paths one walk returns at most (its reply stays well inside a message).
const MAX_PATH_BYTES: usize = 32 * 1024 * 1024;

/// What a walk found.
#[derive(Debug, Default)]
pub(crate) struct Walked {
    /// Each entry below the start and whether it is a directory.
    pub(crate) entries: Vec<(PathBuf, bool)>,
    /// Directories that could not be read.
    pub(crate) errors: Vec<(PathBuf, String)>,
    pub(crate) truncated: bool,
}

/// Walks the tree at `path` within `options`' bounds: entries at most
/// `maxDepth` levels below it (1: its own entries).
pub(crate) fn walk(
    roots: &Roots,
    path: &Path,
    options: &WalkOptions,
    rules: &WalkRules,
) -> FsResult<Walked> {
    let op = FsOp::Walk;
    let entries_ceiling = if rules.refuse_bad_bounds { STRICT_MAX_ENTRIES } else { MAX_ENTRIES };
    if rules.refuse_bad_bounds {
        check_bounds(options)?;
    }
    let max_depth = options.max_depth.unwrap_or(MAX_DEPTH).min(MAX_DEPTH);
    let max_directories = options.max_directories.unwrap_or(MAX_DIRECTORIES).min(MAX_DIRECTORIES);
    let max_entries = options.max_entries.unwrap_or(entries_ceiling).min(entries_ceiling) as usize;
    let located = roots.locate(path)?;
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
    if rules.non_directory_root_is_empty {
        let follow = if options.follow_directory_symlinks { 0 } else { libc::O_NOFOLLOW };
        let root = located.open(libc::O_PATH | follow).map_err(|e| located.fail(op, e))?;
        let stat = sys::fstat(root.as_fd()).map_err(|e| located.fail(op, e))?;
        if sys::file_type(&stat) != libc::S_IFDIR {
            return Ok(Walked::default());
        }
    }
    // The start is opened (and its errors reported) like any fs path.
    drop(located.open(flags).map_err(|e| located.fail(op, e))?);
    let mut seen = HashSet::new();
    let mut walked = Walked::default();
    let mut bytes = 0usize;
    // Entries counted against maxEntries (a lossy name reported as an error counts).
    let mut counted = 0usize;
    // Directories to read: the path below the start, its depth, and whether
    // reaching it followed a link (then it is opened following links).
    let mut queue = VecDeque::from([(PathBuf::new(), 0u32, false)]);
    let mut queued = 1u32;
    while let Some((rel, depth, linked)) = queue.pop_front() {
        let no_magic = if linked { libc::RESOLVE_NO_MAGICLINKS } else { 0 };
        let no_follow = if linked { 0 } else { libc::O_NOFOLLOW };
        let fd = match located.open_below(&rel, flags | no_follow, no_magic) {
            Ok(fd) => fd,
            Err(error) => {
                walked.errors.push((path.join(&rel), error.to_string()));
                continue;
            }
        };
        if let Ok(stat) = sys::fstat(fd.as_fd()) {
            if !seen.insert((stat.st_dev, stat.st_ino)) {
                continue;
            }
        }
        let mut stream = match DirStream::new(fd) {
            Ok(stream) => stream,
            Err(error) => {
                walked.errors.push((path.join(&rel), error.to_string()));
                continue;
            }
        };
        let mut names = Vec::new();
        // Up to the ceiling of entries per directory (then sorted, so a walk
        // cut short returns the first names); past it, in the directory's order.
        while let Some(entry) = stream.next_entry() {
            if names.len() > MAX_ENTRIES as usize {
                walked.truncated = true;
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
        // By name within each directory (of the names read, when a bound cut it short).
        names.sort();
        for (name, d_type) in names {
            let child = rel.join(OsStr::from_bytes(name.to_bytes()));
            let full = path.join(&child);
            bytes += full.as_os_str().len() + 32;
            if counted >= max_entries || bytes > MAX_PATH_BYTES {
                walked.truncated = true;
                return Ok(walked);
            }
            counted += 1;
            if rules.lossy_names && std::str::from_utf8(name.to_bytes()).is_err() {
                // Upstream's walk knows names only as text: the lossy name
                // names nothing, so it is an error, not an entry.
                let lossy = String::from_utf8_lossy(name.to_bytes()).into_owned();
                let lossy_path = path.join(&rel).join(&lossy);
                let error = match located.open_below(&rel.join(&lossy), libc::O_PATH, 0) {
                    Ok(_) => continue,
                    Err(error) => error,
                };
                walked.errors.push((lossy_path, error.to_string()));
                continue;
            }
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
            let descend = depth + 1 < max_depth && !(hidden && options.prune_hidden_directories);
            let directory = match kind {
                libc::DT_DIR => Some(false),
                // Followed beneath the root, or not at all (it is then a file here).
                libc::DT_LNK if options.follow_directory_symlinks => {
                    match located.open_below(
                        &child,
                        libc::O_PATH | libc::O_DIRECTORY,
                        libc::RESOLVE_NO_MAGICLINKS,
                    ) {
                        Ok(_) => Some(true),
                        Err(error) => {
                            let quiet = matches!(
                                error.raw_os_error(),
                                Some(libc::ENOENT | libc::ENOTDIR | libc::EXDEV | libc::ELOOP)
                            );
                            if !quiet {
                                walked.errors.push((full.clone(), error.to_string()));
                            }
                            None
                        }
                    }
                }
                _ => None,
            };
            if kind == libc::DT_LNK && directory.is_none() && rules.links_only_as_directories {
                continue;
            }
            if let Some(linked_here) = directory {
                if descend {
                    if queued < max_directories {
                        queued += 1;
                        queue.push_back((child, depth + 1, linked || linked_here));
                    } else {
                        walked.truncated = true;
                    }
                }
            }
            walked.entries.push((full, directory.is_some()));
        }
    }
    Ok(walked)
}

/// Refuses bounds of 0 and bounds over the ceilings (upstream's words).
fn check_bounds(options: &WalkOptions) -> Result<(), ErrorObject> {
    if options.max_directories == Some(0) || options.max_entries == Some(0) {
        return Err(ErrorObject::invalid_request(
            "filesystem walk limits must be greater than zero",
        ));
    }
    let over = options.max_depth.is_some_and(|d| d > MAX_DEPTH)
        || options.max_directories.is_some_and(|d| d > MAX_DIRECTORIES)
        || options.max_entries.is_some_and(|e| e > STRICT_MAX_ENTRIES);
    if over {
        return Err(ErrorObject::invalid_request(format!(
            "filesystem walk limits exceed maximums: depth={MAX_DEPTH}, directories={MAX_DIRECTORIES}, entries={STRICT_MAX_ENTRIES}"
        )));
    }
    Ok(())
}
