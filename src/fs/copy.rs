//! `fs/copy`: files (replaced atomically), symlinks (copied as symlinks) and directory trees.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use super::error::{io_error, same_file, FsOp};
use super::{kind, sys, walk, write, FsResult, FsRules, Roots};
use crate::protocol::{CopyParams, Empty, ErrorObject};

const NEEDS_RECURSIVE: &str = "fs/copy requires recursive: true when sourcePath is a directory";
const INTO_ITSELF: &str = "fs/copy cannot copy a directory to itself or one of its descendants";

/// Copies `sourcePath` to `destinationPath`. A source symlink is copied as a
/// symlink. A directory needs `recursive` and is merged into the destination
/// when that directory exists; a final symlink at the destination is followed
/// (beneath the root), links inside the trees never are. With
/// [`FsRules::skip_special_in_copies`] a tree's FIFOs, sockets and devices are
/// skipped; a special file as the source is refused either way.
pub(crate) fn copy(roots: &Roots, params: CopyParams, rules: &FsRules) -> FsResult<Empty> {
    let op = FsOp::Copy;
    let source = roots.locate(&params.source_path)?.reading();
    let destination = roots.locate(&params.destination_path)?;
    let (from, to) = (source.path(), destination.path());
    let handle = source.open(libc::O_PATH | libc::O_NOFOLLOW).map_err(|e| source.fail(op, e))?;
    let stat = sys::fstat(handle.as_fd()).map_err(io_error(op, from))?;
    match sys::file_type(&stat) {
        libc::S_IFDIR => {
            if !params.recursive {
                return Err(ErrorObject::invalid_request(NEEDS_RECURSIVE));
            }
            // As Part A: a tree's destination gets its missing parents.
            if let Some(parent) = destination.parent().map_err(io_error(op, to))? {
                super::create_all(&parent).map_err(|e| destination.fail(op, e))?;
            }
            let (entry, existing) = destination.follow_entry(op)?;
            let inside = is_within(entry.dir.as_fd(), &stat).map_err(io_error(op, to))?;
            if inside || existing.is_some_and(|e| sys::same_file(&e, &stat)) {
                return Err(ErrorObject::invalid_request(INTO_ITSELF));
            }
            source.check_tree(handle.as_fd(), None).map_err(io_error(op, from))?;
            let dir = sys::openat(handle.as_fd(), c".", libc::O_RDONLY | libc::O_DIRECTORY, 0)
                .map_err(io_error(op, from))?;
            let skip_special = rules.skip_special_in_copies;
            let allowed = destination.check_beneath(&entry).map_err(io_error(op, to))?;
            walk::copy_tree(dir, entry.dir.as_fd(), &entry.name, to, skip_special, &allowed)?;
        }
        libc::S_IFLNK => {
            let target = sys::readlinkat(handle.as_fd(), c"").map_err(io_error(op, from))?;
            let target = sys::c_path(target.as_ref()).map_err(io_error(op, from))?;
            let entry = destination.entry(op)?;
            sys::symlinkat(&target, entry.dir.as_fd(), &entry.name).map_err(io_error(op, to))?;
        }
        libc::S_IFREG => {
            let (entry, existing) = destination.follow_entry(op)?;
            if let Some(existing) = existing {
                if sys::same_file(&existing, &stat) {
                    return Err(same_file(op, from, to));
                }
                kind::require_regular(op, to, &existing)?;
            }
            kind::refuse_stdio(op, from, &stat)?;
            let mut file = kind::reopen(&handle, libc::O_RDONLY).map_err(io_error(op, from))?;
            let like =
                write::Like { mode: Some(stat.st_mode & 0o7777), owner: None, durable: true };
            write::replace(&entry, like, |out| io::copy(&mut file, out).map(drop))
                .map_err(io_error(op, to))?;
        }
        _ => return Err(ErrorObject::invalid_request(super::walk::UNSUPPORTED)),
    }
    Ok(Empty {})
}

/// Whether `dir` is the directory `ancestor` or lies below it (walking `..` up to `/`).
fn is_within(dir: BorrowedFd<'_>, ancestor: &libc::stat) -> io::Result<bool> {
    let flags = libc::O_PATH | libc::O_DIRECTORY;
    let mut current = sys::openat(dir, c".", flags, 0)?;
    let mut stat = sys::fstat(current.as_fd())?;
    loop {
        if sys::same_file(&stat, ancestor) {
            return Ok(true);
        }
        let up = sys::openat(current.as_fd(), c"..", flags, 0)?;
        let up_stat = sys::fstat(up.as_fd())?;
        if sys::same_file(&up_stat, &stat) {
            return Ok(false);
        }
        (current, stat) = (up, up_stat);
    }
}
