//! Cgroup interface files: a value written in one `write`, paths as C
//! strings, and a cgroup's own children (which a member may have made).

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Writes `value` to a cgroup file in one `write`.
pub(crate) fn write(path: &Path, value: &str) -> io::Result<()> {
    use std::io::Write;
    let mut file = fs::OpenOptions::new().write(true).open(path)?;
    file.write_all(value.as_bytes())
}

/// A path as a C string (cgroup paths hold no NUL).
pub(crate) fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in a cgroup path"))
}

/// The child cgroups of `dir`.
pub(crate) fn children(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .map(|entries| {
            let dirs = entries.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir()));
            dirs.map(|entry| entry.path()).collect()
        })
        .unwrap_or_default()
}

/// Removes `dir` and the cgroups below it, deepest first (each must be empty
/// of processes: EBUSY otherwise).
pub(crate) fn remove_tree(dir: &Path) -> io::Result<()> {
    for child in children(dir) {
        remove_tree(&child)?;
    }
    match fs::remove_dir(dir) {
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}
