//! The few system calls the trampoline makes that std has no wrapper for,
//! each returning the OS error with the step that failed.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// A failed step: what was being done and the OS error.
pub(crate) fn failed(step: &str) -> String {
    format!("{step}: {}", io::Error::last_os_error())
}

/// Checks a -1-on-error return.
pub(crate) fn check(rc: libc::c_long, step: &str) -> Result<libc::c_long, String> {
    if rc < 0 {
        Err(failed(step))
    } else {
        Ok(rc)
    }
}

pub(crate) fn c_path(path: &Path) -> Result<CString, String> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| format!("path {} holds a NUL byte", path.display()))
}

/// Opens a directory or file (`O_PATH`) without following any symlink on
/// the way or at the end: the paths are canonical, so a link found now was
/// put there since.
pub(crate) fn open_nofollow(path: &Path) -> Result<OwnedFd, String> {
    let resolve = libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
    let named = |e: io::Error| format!("cannot open {}: {e}", path.display());
    let fd = crate::fs::sys::openat2_path(path, libc::O_PATH | libc::O_NOFOLLOW, resolve)
        .map_err(named)?;
    // O_PATH | O_NOFOLLOW opens a final symlink itself: refused like one on the way.
    let stat = crate::fs::sys::fstat(std::os::fd::AsFd::as_fd(&fd)).map_err(named)?;
    if crate::fs::sys::file_type(&stat) == libc::S_IFLNK {
        return Err(named(io::Error::from_raw_os_error(libc::ELOOP)));
    }
    Ok(fd)
}

/// The device and inode of `fd`.
pub(crate) fn identity(fd: &OwnedFd) -> Result<(u64, u64), String> {
    use std::os::fd::AsFd;
    crate::fs::sys::fstat(fd.as_fd())
        .map(|stat| (stat.st_dev, stat.st_ino))
        .map_err(|e| format!("cannot stat a sandbox path: {e}"))
}

/// Writes all of `bytes` to `fd` (a file in /proc, a pipe).
pub(crate) fn write_all(fd: RawFd, bytes: &[u8]) -> io::Result<()> {
    let mut rest = bytes;
    while !rest.is_empty() {
        // SAFETY: a valid buffer of the given length.
        let n = unsafe { libc::write(fd, rest.as_ptr().cast(), rest.len()) };
        if n < 0 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(error);
        }
        rest = &rest[n as usize..];
    }
    Ok(())
}

/// Writes `text` to the file at `path` (the user namespace's maps).
pub(crate) fn write_file(path: &str, text: &str) -> Result<(), String> {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| format!("cannot open {path}: {e}"))?;
    write_all(file.as_raw_fd(), text.as_bytes()).map_err(|e| format!("cannot write {path}: {e}"))
}

/// Points 0, 1 and 2 at /dev/null: a helper that stays alive must not keep
/// the program's pipes or terminal open.
pub(crate) fn stdio_to_null() {
    // SAFETY: open of a constant path; dup2 onto the standard descriptors.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        if null >= 0 {
            for fd in 0..3 {
                libc::dup2(null, fd);
            }
            libc::close(null);
        }
    }
}

/// `(st_dev, st_ino)` of the working directory.
pub(crate) fn stat_cwd() -> Result<(u64, u64), String> {
    // SAFETY: `stat` is plain data that stat fills in.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a constant path and a valid buffer.
    if unsafe { libc::stat(c".".as_ptr(), &mut stat) } != 0 {
        return Err(failed("cannot stat the working directory"));
    }
    Ok((stat.st_dev, stat.st_ino))
}
