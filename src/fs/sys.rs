//! Safe wrappers over the descriptor-relative system calls (`openat2`, `*at`) the fs code is built on.

use std::ffi::{CStr, CString, OsString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

/// `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`: stay under the directory descriptor.
pub(crate) const CONFINED: u64 = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS;

/// `path` as a C string; a NUL byte is invalid input.
pub(crate) fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

/// `openat2(dir, path, {flags | O_CLOEXEC, mode, resolve})`, retried while the
/// kernel reports a concurrent rename (EAGAIN).
pub(crate) fn openat2(
    dir: BorrowedFd<'_>,
    path: &CStr,
    flags: libc::c_int,
    mode: u32,
    resolve: u64,
) -> io::Result<OwnedFd> {
    let how = open_how(flags, mode, resolve);
    for _ in 0..16 {
        match openat2_once(dir.as_raw_fd(), path, &how) {
            Err(error) if error.raw_os_error() == Some(libc::EAGAIN) => continue,
            result => return result,
        }
    }
    Err(io::Error::from_raw_os_error(libc::EAGAIN))
}

/// `openat2(AT_FDCWD, path, {flags | O_CLOEXEC, resolve})` of an absolute
/// path, retried on EAGAIN like [`openat2`]: for the sandbox and the watcher,
/// which open roots and devices by path without following symlinks.
pub(crate) fn openat2_path(path: &Path, flags: libc::c_int, resolve: u64) -> io::Result<OwnedFd> {
    let c_path = c_path(path)?;
    let how = open_how(flags, 0, resolve);
    for _ in 0..16 {
        match openat2_once(libc::AT_FDCWD, &c_path, &how) {
            Err(error) if error.raw_os_error() == Some(libc::EAGAIN) => continue,
            result => return result,
        }
    }
    Err(io::Error::from_raw_os_error(libc::EAGAIN))
}

/// `openat2(dir, path, O_PATH | flags)` from the kernel's caches alone
/// (`RESOLVE_CACHED` added to `resolve`): EAGAIN when any component would need
/// a lookup on disk or a revalidation with a network or FUSE server. One
/// attempt; `dir` may be `AT_FDCWD` (for an absolute path it is not used).
pub(crate) fn openat2_cached(
    dir: RawFd,
    path: &CStr,
    flags: libc::c_int,
    resolve: u64,
) -> io::Result<OwnedFd> {
    openat2_once(dir, path, &open_how(libc::O_PATH | flags, 0, resolve | libc::RESOLVE_CACHED))
}

/// `{flags | O_CLOEXEC, mode, resolve}`; the mode only with O_CREAT or O_TMPFILE.
fn open_how(flags: libc::c_int, mode: u32, resolve: u64) -> libc::open_how {
    // SAFETY: `open_how` is a plain struct of integers, for which all zeroes is valid.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC) as u64;
    // The kernel refuses a mode without O_CREAT or O_TMPFILE (which includes O_DIRECTORY).
    let creates = flags & libc::O_CREAT != 0 || flags & libc::O_TMPFILE == libc::O_TMPFILE;
    how.mode = if creates { u64::from(mode) } else { 0 };
    how.resolve = resolve;
    how
}

fn openat2_once(dir: RawFd, path: &CStr, how: &libc::open_how) -> io::Result<OwnedFd> {
    // SAFETY: `path` is NUL-terminated and `how` lives across the call, whose
    // size argument matches it; the kernel only reads both.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir,
            path.as_ptr(),
            how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

/// `statx` of `fd` itself from cached attributes alone (`AT_STATX_DONT_SYNC`:
/// no round trip to a network or FUSE server), with the birth time if known.
pub(crate) fn statx_cached(fd: BorrowedFd<'_>) -> io::Result<libc::statx> {
    let flags = libc::AT_EMPTY_PATH | libc::AT_STATX_DONT_SYNC;
    let mask = libc::STATX_BASIC_STATS | libc::STATX_BTIME;
    // SAFETY: `statx` is plain integers (all zeroes is valid); the path is an
    // empty NUL-terminated string and the kernel writes only into `buffer`.
    unsafe {
        let mut buffer: libc::statx = std::mem::zeroed();
        check(libc::statx(fd.as_raw_fd(), c"".as_ptr(), flags, mask, &mut buffer))?;
        Ok(buffer)
    }
}

/// `openat(dir, name, flags | O_CLOEXEC, mode)`.
pub(crate) fn openat(
    dir: BorrowedFd<'_>,
    name: &CStr,
    flags: libc::c_int,
    mode: u32,
) -> io::Result<OwnedFd> {
    // SAFETY: `name` is NUL-terminated; the mode is read only with O_CREAT.
    let fd = unsafe {
        libc::openat(dir.as_raw_fd(), name.as_ptr(), flags | libc::O_CLOEXEC, mode as libc::c_uint)
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `fstatat(dir, name)`; `follow` false acts on a final symlink itself.
pub(crate) fn fstatat(dir: BorrowedFd<'_>, name: &CStr, follow: bool) -> io::Result<libc::stat> {
    let flags = if follow { 0 } else { libc::AT_SYMLINK_NOFOLLOW };
    // SAFETY: `stat` is plain integers (all zeroes is valid); `name` is NUL-terminated
    // and the kernel writes only into `stat`.
    unsafe {
        let mut stat: libc::stat = std::mem::zeroed();
        check(libc::fstatat(dir.as_raw_fd(), name.as_ptr(), &mut stat, flags))?;
        Ok(stat)
    }
}

/// `fstat(fd)`; works on `O_PATH` descriptors too.
pub(crate) fn fstat(fd: BorrowedFd<'_>) -> io::Result<libc::stat> {
    // SAFETY: as in `fstatat`; the kernel writes only into `stat`.
    unsafe {
        let mut stat: libc::stat = std::mem::zeroed();
        check(libc::fstat(fd.as_raw_fd(), &mut stat))?;
        Ok(stat)
    }
}

/// `fstat` of a descriptor number the process may not own, such as 0, 1 or 2.
pub(crate) fn fstat_raw(fd: libc::c_int) -> io::Result<libc::stat> {
    // SAFETY: fstat of any number is sound: a closed one fails with EBADF, and the
    // kernel writes only into `stat`.
    unsafe {
        let mut stat: libc::stat = std::mem::zeroed();
        check(libc::fstat(fd, &mut stat))?;
        Ok(stat)
    }
}

/// `unlinkat(dir, name)`; `directory` removes an empty directory.
pub(crate) fn unlinkat(dir: BorrowedFd<'_>, name: &CStr, directory: bool) -> io::Result<()> {
    let flags = if directory { libc::AT_REMOVEDIR } else { 0 };
    // SAFETY: `name` is NUL-terminated.
    check(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) })
}

/// `mkdirat(dir, name, mode)`.
pub(crate) fn mkdirat(dir: BorrowedFd<'_>, name: &CStr, mode: u32) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated.
    check(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode as libc::mode_t) })
}

/// `renameat(from_dir, from, to_dir, to)`.
pub(crate) fn renameat(
    from_dir: BorrowedFd<'_>,
    from: &CStr,
    to_dir: BorrowedFd<'_>,
    to: &CStr,
) -> io::Result<()> {
    // SAFETY: both names are NUL-terminated.
    check(unsafe {
        libc::renameat(from_dir.as_raw_fd(), from.as_ptr(), to_dir.as_raw_fd(), to.as_ptr())
    })
}

/// `symlinkat(target, dir, name)`.
pub(crate) fn symlinkat(target: &CStr, dir: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    // SAFETY: both strings are NUL-terminated.
    check(unsafe { libc::symlinkat(target.as_ptr(), dir.as_raw_fd(), name.as_ptr()) })
}

/// `readlinkat(dir, name)`; an empty `name` reads an `O_PATH` symlink descriptor.
pub(crate) fn readlinkat(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<OsString> {
    let mut buffer = vec![0u8; 256];
    loop {
        // SAFETY: the kernel writes at most `buffer.len()` bytes into `buffer`.
        let length = unsafe {
            libc::readlinkat(
                dir.as_raw_fd(),
                name.as_ptr(),
                buffer.as_mut_ptr().cast(),
                buffer.len(),
            )
        };
        if length < 0 {
            return Err(io::Error::last_os_error());
        }
        let length = length as usize;
        if length < buffer.len() {
            buffer.truncate(length);
            return Ok(OsString::from_vec(buffer));
        }
        buffer.resize(buffer.len() * 2, 0);
    }
}

/// `fchmod(fd, mode)`.
pub(crate) fn fchmod(fd: BorrowedFd<'_>, mode: u32) -> io::Result<()> {
    // SAFETY: a plain system call on a borrowed descriptor.
    check(unsafe { libc::fchmod(fd.as_raw_fd(), mode as libc::mode_t) })
}

/// `fchown(fd, uid, gid)`.
pub(crate) fn fchown(fd: BorrowedFd<'_>, uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY: a plain system call on a borrowed descriptor.
    check(unsafe { libc::fchown(fd.as_raw_fd(), uid, gid) })
}

/// The type bits of a mode.
pub(crate) fn file_type(stat: &libc::stat) -> libc::mode_t {
    stat.st_mode & libc::S_IFMT
}

/// Same device and inode.
pub(crate) fn same_file(a: &libc::stat, b: &libc::stat) -> bool {
    a.st_dev == b.st_dev && a.st_ino == b.st_ino
}

fn check(result: libc::c_int) -> io::Result<()> {
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}
