//! What a file is: refusing FIFOs, sockets, devices and the server's own stdio before any byte moves.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;

use super::error::{invalid_input, io_error, FsOp};
use super::sys;
use crate::protocol::ErrorObject;

/// "a FIFO", "a socket"...: the type of a file, for messages.
pub(crate) fn type_name(stat: &libc::stat) -> &'static str {
    match sys::file_type(stat) {
        libc::S_IFREG => "a regular file",
        libc::S_IFDIR => "a directory",
        libc::S_IFLNK => "a symlink",
        libc::S_IFIFO => "a FIFO",
        libc::S_IFSOCK => "a socket",
        libc::S_IFCHR => "a character device",
        libc::S_IFBLK => "a block device",
        _ => "of an unknown type",
    }
}

/// Refuses anything but a regular file that is not the server's stdin, stdout
/// or stderr. A directory keeps Part A's `isADirectory` I/O error.
pub(crate) fn require_regular(op: FsOp, path: &Path, stat: &libc::stat) -> Result<(), ErrorObject> {
    match sys::file_type(stat) {
        libc::S_IFREG => refuse_stdio(op, path, stat),
        libc::S_IFDIR => Err(io_error(op, path)(io::Error::from_raw_os_error(libc::EISDIR))),
        _ => Err(invalid_input(op, path, format!("it is {}, not a regular file", type_name(stat)))),
    }
}

/// Refuses the file open as the server's fd 0, 1 or 2, whatever path reached it.
pub(crate) fn refuse_stdio(op: FsOp, path: &Path, stat: &libc::stat) -> Result<(), ErrorObject> {
    let streams = [(0, "standard input"), (1, "standard output"), (2, "standard error")];
    for (fd, name) in streams {
        if sys::fstat_raw(fd).is_ok_and(|own| sys::same_file(&own, stat)) {
            return Err(invalid_input(op, path, format!("it is the server's {name}")));
        }
    }
    Ok(())
}

/// Opens the file an `O_PATH` descriptor refers to, with `flags`. Going through
/// `/proc/self/fd` reopens the same inode, not whatever the path names now.
pub(crate) fn reopen(handle: &OwnedFd, flags: libc::c_int) -> io::Result<std::fs::File> {
    let proc_path = format!("/proc/self/fd/{}\0", handle.as_raw_fd());
    let c_path =
        std::ffi::CStr::from_bytes_with_nul(proc_path.as_bytes()).map_err(io::Error::other)?;
    let root = std::fs::File::open("/")?;
    let fd = sys::openat(root.as_fd(), c_path, flags | libc::O_NOCTTY, 0)?;
    let (before, after) = (sys::fstat(handle.as_fd())?, sys::fstat(fd.as_fd())?);
    if !sys::same_file(&before, &after) {
        return Err(io::Error::other("the file changed while it was being opened"));
    }
    Ok(std::fs::File::from(fd))
}
