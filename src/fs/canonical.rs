//! `fs/canonicalize`: the path with every link resolved, beneath the roots.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use super::error::{io_error, FsOp};
use super::{FsResult, Roots};

/// Where `path` leads once every symlink is followed (the kernel resolves
/// it beneath its root, so the answer never lies outside the roots).
pub(crate) fn canonicalize(roots: &Roots, path: &Path) -> FsResult<PathBuf> {
    let op = FsOp::Canonicalize;
    let located = roots.locate(path)?;
    let handle = located.open(libc::O_PATH | libc::O_CLOEXEC).map_err(|e| located.fail(op, e))?;
    std::fs::read_link(format!("/proc/self/fd/{}", handle.as_raw_fd())).map_err(io_error(op, path))
}
