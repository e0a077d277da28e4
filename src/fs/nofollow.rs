//! `followSymlinks: false` read strictly, as a caller may ask: no component
//! of the path may be a symlink, the last one included. Checked before the
//! method runs (the method itself still confines every step beneath the
//! roots); what the method does when it finds one is the caller's choice.

use std::io;
use std::path::{Path, PathBuf};

use super::error::{io_error, FsOp};
use super::roots::{clean, Roots};
use crate::protocol::{codes, ErrorObject};

/// The methods that take the strict rule, as they fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Strict {
    /// fs/readFile: a link anywhere is an I/O error.
    Read,
    /// fs/writeFile: the same; nothing is written.
    Write,
    /// fs/getMetadata: a last link is refused (-32600), not described.
    Stat,
    /// fs/remove: a last link is refused and kept; a tree is not removed.
    Remove { recursive: bool },
}

/// Fails when a component of `path` is a symlink (a link above the last
/// component as ENOTDIR, the last one as the method says); `Ok` when none is
/// (or the path stops existing before one is met).
pub(crate) fn refuse_links(roots: &Roots, path: &Path, strict: Strict) -> Result<(), ErrorObject> {
    // Beneath the roots first, with the same refusal as the method's.
    roots.locate(path)?;
    let op = match strict {
        Strict::Read => FsOp::Read,
        Strict::Write => FsOp::Write,
        Strict::Stat => FsOp::Stat,
        Strict::Remove { .. } => FsOp::Remove,
    };
    let cleaned = clean(path);
    let mut prefix = PathBuf::new();
    let mut components = cleaned.components().peekable();
    while let Some(component) = components.next() {
        prefix.push(component);
        let last = components.peek().is_none();
        let Ok(meta) = std::fs::symlink_metadata(&prefix) else { return Ok(()) };
        if meta.file_type().is_symlink() {
            if !last {
                return Err(io_error(op, path)(io::Error::from_raw_os_error(libc::ENOTDIR)));
            }
            return Err(match strict {
                Strict::Read | Strict::Write => {
                    io_error(op, path)(io::Error::from_raw_os_error(libc::ELOOP))
                }
                Strict::Stat | Strict::Remove { .. } => {
                    ErrorObject::invalid_request("path contains a symbolic link")
                }
            });
        }
        if last && meta.is_dir() && strict == (Strict::Remove { recursive: true }) {
            return Err(ErrorObject::new(
                codes::INTERNAL_ERROR,
                "recursive no-follow removal is unsupported",
            ));
        }
    }
    Ok(())
}
