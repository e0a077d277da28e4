//! Descriptor-based tree walks for recursive remove and copy: depth-first, one directory stream per level, never following a symlink.

use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;

use super::error::{io_error, FsOp};
use super::{kind, sys, write};
use crate::protocol::ErrorObject;

/// What `fs/copy` says of anything but a regular file, a directory or a symlink.
pub(crate) const UNSUPPORTED: &str =
    "fs/copy only supports regular files, directories, and symlinks";

/// Opens a subdirectory for reading, refusing a symlink (ELOOP/ENOTDIR).
const SUBDIR: libc::c_int = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW;

/// A directory stream (`DIR*`) that owns its descriptor.
pub(crate) struct DirStream {
    dir: NonNull<libc::DIR>,
}

impl DirStream {
    /// Takes ownership of `fd`, a directory opened for reading.
    pub(crate) fn new(fd: OwnedFd) -> io::Result<DirStream> {
        let raw = fd.into_raw_fd();
        // SAFETY: `raw` is an open directory descriptor that we own; on success
        // the stream owns it, on failure we close it.
        let dir = unsafe { libc::fdopendir(raw) };
        match NonNull::new(dir) {
            Some(dir) => Ok(DirStream { dir }),
            None => {
                let error = io::Error::last_os_error();
                // SAFETY: fdopendir failed, so `raw` is still ours to close.
                drop(unsafe { OwnedFd::from_raw_fd(raw) });
                Err(error)
            }
        }
    }

    /// The stream's directory descriptor.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the stream is open while `self` lives, and so is its descriptor.
        unsafe { BorrowedFd::borrow_raw(libc::dirfd(self.dir.as_ptr())) }
    }

    /// The next entry other than `.` and `..`: its name and `d_type`.
    pub(crate) fn next_entry(&mut self) -> Option<io::Result<(CString, u8)>> {
        loop {
            // SAFETY: errno is thread-local; readdir reports errors only through it.
            unsafe { *libc::__errno_location() = 0 };
            // SAFETY: the stream is open and used by this thread only (`&mut self`).
            let entry = unsafe { libc::readdir(self.dir.as_ptr()) };
            if entry.is_null() {
                let error = io::Error::last_os_error();
                return (error.raw_os_error() != Some(0)).then_some(Err(error));
            }
            // SAFETY: readdir returned a valid entry, which stays valid until the next
            // call on this stream; the name is copied before that.
            let (name, kind) = unsafe {
                let entry = &*entry;
                (CStr::from_ptr(entry.d_name.as_ptr()), entry.d_type)
            };
            if name.to_bytes() != b"." && name.to_bytes() != b".." {
                return Some(Ok((name.to_owned(), kind)));
            }
        }
    }

    /// Starts the listing over.
    fn rewind(&mut self) {
        // SAFETY: the stream is open.
        unsafe { libc::rewinddir(self.dir.as_ptr()) }
    }
}

impl Drop for DirStream {
    fn drop(&mut self) {
        // SAFETY: the stream is open and closed only here.
        unsafe { libc::closedir(self.dir.as_ptr()) };
    }
}

/// Whether an entry is a directory, from `d_type` or (when the filesystem does
/// not say) `fstatat` without following.
fn is_dir(dir: BorrowedFd<'_>, name: &CStr, d_type: u8) -> io::Result<bool> {
    match d_type {
        libc::DT_UNKNOWN => Ok(sys::file_type(&sys::fstatat(dir, name, false)?) == libc::S_IFDIR),
        d_type => Ok(d_type == libc::DT_DIR),
    }
}

fn child(path: &Path, rel: &Path, name: &CStr) -> PathBuf {
    path.join(rel).join(OsStr::from_bytes(name.to_bytes()))
}

/// Removes the directory `name` in `parent` and everything under it; symlinks
/// met inside are removed, never followed. `path` names it in errors.
pub(crate) fn remove_tree(
    parent: BorrowedFd<'_>,
    name: &CStr,
    path: &Path,
) -> Result<(), ErrorObject> {
    struct Level {
        stream: DirStream,
        name: CString,
        removed: bool,
    }
    let op = FsOp::Remove;
    let fd = sys::openat(parent, name, SUBDIR, 0).map_err(io_error(op, path))?;
    let stream = DirStream::new(fd).map_err(io_error(op, path))?;
    let mut levels = vec![Level { stream, name: name.to_owned(), removed: false }];
    let mut rel = PathBuf::new();
    while let Some(top) = levels.last_mut() {
        match top.stream.next_entry() {
            Some(Ok((name, d_type))) => {
                let dir = top.stream.fd();
                let here = || child(path, &rel, &name);
                if is_dir(dir, &name, d_type).map_err(|e| io_error(op, &here())(e))? {
                    let fd =
                        sys::openat(dir, &name, SUBDIR, 0).map_err(|e| io_error(op, &here())(e))?;
                    let stream = DirStream::new(fd).map_err(|e| io_error(op, &here())(e))?;
                    rel.push(OsStr::from_bytes(name.to_bytes()));
                    levels.push(Level { stream, name, removed: false });
                } else {
                    match sys::unlinkat(dir, &name, false) {
                        Ok(()) => top.removed = true,
                        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                        Err(e) => return Err(io_error(op, &here())(e)),
                    }
                }
            }
            Some(Err(e)) => return Err(io_error(op, &path.join(&rel))(e)),
            None => {
                let Some(mut level) = levels.pop() else { break };
                let parent_dir = levels.last().map_or(parent, |l| l.stream.fd());
                match sys::unlinkat(parent_dir, &level.name, true) {
                    Ok(()) => {
                        rel.pop();
                        if let Some(up) = levels.last_mut() {
                            up.removed = true;
                        }
                    }
                    // Entries removed while listing can hide others: list again.
                    Err(e) if e.raw_os_error() == Some(libc::ENOTEMPTY) && level.removed => {
                        level.stream.rewind();
                        level.removed = false;
                        levels.push(level);
                    }
                    Err(e) => return Err(io_error(op, &path.join(&rel))(e)),
                }
            }
        }
    }
    Ok(())
}

/// Copies the directory `source` (open for reading) into the directory `name`
/// in `parent`, creating it or merging into an existing one. Symlinks inside
/// are copied as symlinks; nothing existing in the destination is followed:
/// files and links replace entries atomically, and a symlink where a directory
/// is to go is an error.
pub(crate) fn copy_tree(
    source: OwnedFd,
    parent: BorrowedFd<'_>,
    name: &CStr,
    destination: &Path,
    skip_special: bool,
    allowed: &dyn Fn(&Path) -> io::Result<()>,
) -> Result<(), ErrorObject> {
    struct Level {
        source: DirStream,
        target: OwnedFd,
        mode: u32,
    }
    let op = FsOp::Copy;
    let mode = sys::fstat(source.as_fd()).map_err(io_error(op, destination))?.st_mode & 0o7777;
    let target = make_dir(parent, name).map_err(io_error(op, destination))?;
    let source = DirStream::new(source).map_err(io_error(op, destination))?;
    let mut levels = vec![Level { source, target, mode }];
    let mut rel = PathBuf::new();
    while let Some(top) = levels.last_mut() {
        let Some(next) = top.source.next_entry() else {
            if let Some(level) = levels.pop() {
                let _ = sys::fchmod(level.target.as_fd(), level.mode);
            }
            rel.pop();
            continue;
        };
        let (name, d_type) = next.map_err(io_error(op, &destination.join(&rel)))?;
        let here = child(destination, &rel, &name);
        allowed(&rel.join(OsStr::from_bytes(name.to_bytes()))).map_err(io_error(op, &here))?;
        let (from, to) = (top.source.fd(), top.target.as_fd());
        if is_dir(from, &name, d_type).map_err(io_error(op, &here))? {
            let fd = sys::openat(from, &name, SUBDIR, 0).map_err(io_error(op, &here))?;
            let mode = sys::fstat(fd.as_fd()).map_err(io_error(op, &here))?.st_mode & 0o7777;
            let target = make_dir(to, &name).map_err(io_error(op, &here))?;
            let source = DirStream::new(fd).map_err(io_error(op, &here))?;
            rel.push(OsStr::from_bytes(name.to_bytes()));
            levels.push(Level { source, target, mode });
        } else if !(skip_special && is_special(from, &name).map_err(io_error(op, &here))?) {
            copy_entry(from, &name, to, &here)?;
        }
    }
    Ok(())
}

/// Whether entry `name` of `dir` is neither a regular file, a directory nor a symlink.
fn is_special(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<bool> {
    let kind = sys::file_type(&sys::fstatat(dir, name, false)?);
    Ok(!matches!(kind, libc::S_IFREG | libc::S_IFDIR | libc::S_IFLNK))
}

/// Creates directory `name` in `dir` (or takes the existing one) and opens it,
/// refusing a symlink.
fn make_dir(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<OwnedFd> {
    match sys::mkdirat(dir, name, 0o700) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    sys::openat(dir, name, SUBDIR, 0)
}

/// Copies one non-directory entry: a regular file's bytes and permissions, or a
/// symlink as a symlink. Anything else is refused.
pub(crate) fn copy_entry(
    from_dir: BorrowedFd<'_>,
    name: &CStr,
    to_dir: BorrowedFd<'_>,
    here: &Path,
) -> Result<(), ErrorObject> {
    let op = FsOp::Copy;
    let stat = sys::fstatat(from_dir, name, false).map_err(io_error(op, here))?;
    match sys::file_type(&stat) {
        libc::S_IFLNK => {
            let target = sys::readlinkat(from_dir, name).map_err(io_error(op, here))?;
            let target = sys::c_path(Path::new(&target)).map_err(io_error(op, here))?;
            link_into(&target, to_dir, name).map_err(io_error(op, here))
        }
        libc::S_IFREG => {
            let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY;
            let fd = sys::openat(from_dir, name, flags, 0).map_err(io_error(op, here))?;
            let stat = sys::fstat(fd.as_fd()).map_err(io_error(op, here))?;
            if sys::file_type(&stat) != libc::S_IFREG {
                return Err(ErrorObject::invalid_request(UNSUPPORTED));
            }
            kind::refuse_stdio(op, here, &stat)?;
            let mut source = std::fs::File::from(fd);
            // A new name is written in place; only an existing entry needs the
            // temporary file and rename (which replaces it without following it).
            let create = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW;
            match sys::openat(to_dir, name, create, 0o600) {
                Ok(fd) => {
                    let mut file = std::fs::File::from(fd);
                    let result = sys::fchmod(file.as_fd(), stat.st_mode & 0o7777)
                        .and_then(|()| io::copy(&mut source, &mut file).map(drop));
                    if result.is_err() {
                        let _ = sys::unlinkat(to_dir, name, false);
                    }
                    return result.map_err(io_error(op, here));
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io_error(op, here)(e)),
            }
            let entry = super::open::Entry {
                dir: to_dir.try_clone_to_owned().map_err(io_error(op, here))?,
                name: name.to_owned(),
            };
            let like =
                write::Like { mode: Some(stat.st_mode & 0o7777), owner: None, durable: false };
            write::replace(&entry, like, |file| io::copy(&mut source, file).map(drop))
                .map(drop)
                .map_err(io_error(op, here))
        }
        _ => Err(ErrorObject::invalid_request(UNSUPPORTED)),
    }
}

/// Creates symlink `name` in `dir`, replacing an existing non-directory entry atomically.
fn link_into(target: &CStr, dir: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    match sys::symlinkat(target, dir, name) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        other => return other,
    }
    let (temp, file) = write::create_temp(dir, &name.to_owned())?;
    drop(file);
    sys::unlinkat(dir, &temp, false)?;
    let result =
        sys::symlinkat(target, dir, &temp).and_then(|()| sys::renameat(dir, &temp, dir, name));
    if result.is_err() {
        let _ = sys::unlinkat(dir, &temp, false);
    }
    result
}
