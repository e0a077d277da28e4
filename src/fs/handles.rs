//! `fs/open`, `fs/readBlock`, `fs/writeBlock`, `fs/close`: files held open by
//! client-chosen ids, for moving a file in blocks.
//!
//! A handle is the descriptor itself, so it keeps reading the file it opened
//! even after its path is replaced or removed. Each connection holds at most
//! [`MAX_HANDLES`]; they close with the connection (or, when a session
//! detaches, with the connection it had). Reads and writes use pread and
//! pwrite, so blocks of one handle may be moved concurrently.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use super::error::{self, io_error, FsOp};
use super::read::open_regular;
use super::write::{on_pseudo_filesystem, replace, Like};
use super::{kind, sys, FsResult, Roots};
use crate::protocol::{Base64, Empty, ErrorObject, OpenMode, ReadBlockResult};

/// Open handles per connection.
pub(crate) const MAX_HANDLES: usize = 256;
/// The longest handle id, in bytes.
pub(crate) const MAX_HANDLE_ID: usize = 32;
/// The largest block read or written at once.
pub(crate) const MAX_BLOCK: u64 = 1024 * 1024;

struct Handle {
    file: File,
    mode: OpenMode,
}

/// One connection's open handles.
#[derive(Default)]
pub(crate) struct Handles(Mutex<HashMap<String, Arc<Handle>>>);

impl Handles {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<Handle>>> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn get(&self, id: &str) -> FsResult<Arc<Handle>> {
        self.lock()
            .get(id)
            .cloned()
            .ok_or_else(|| ErrorObject::invalid_request(format!("unknown file handle {id:?}")))
    }

    /// `fs/open`: opens `path` for reading, or creates or truncates it for writing.
    pub(crate) fn open(
        &self,
        roots: &Roots,
        id: String,
        path: &Path,
        mode: OpenMode,
    ) -> FsResult<String> {
        if id.is_empty() || id.len() > MAX_HANDLE_ID {
            return Err(ErrorObject::invalid_params(format!(
                "handleId must be 1 to {MAX_HANDLE_ID} bytes; {id:?} is {}",
                id.len()
            )));
        }
        // Checked before the open (no file touched for nothing) and again after it.
        check_free(&self.lock(), &id)?;
        let file = match mode {
            OpenMode::Read => open_read(roots, path)?,
            OpenMode::Replace => open_replace(roots, path)?,
        };
        let mut handles = self.lock();
        check_free(&handles, &id)?;
        handles.insert(id.clone(), Arc::new(Handle { file, mode }));
        Ok(id)
    }

    /// `fs/readBlock`: up to `len` bytes at `offset`.
    pub(crate) fn read_block(&self, id: &str, offset: u64, len: u64) -> FsResult<ReadBlockResult> {
        if len == 0 || len > MAX_BLOCK {
            return Err(ErrorObject::invalid_params(format!(
                "len must be 1 to {MAX_BLOCK}; got {len}"
            )));
        }
        let handle = self.get(id)?;
        if handle.mode != OpenMode::Read {
            return Err(ErrorObject::invalid_request(format!(
                "file handle {id:?} was opened for writing"
            )));
        }
        let mut buffer = vec![0u8; len as usize];
        let mut filled = 0;
        while filled < buffer.len() {
            let at = offset.checked_add(filled as u64).ok_or_else(|| {
                ErrorObject::invalid_params(format!("offset {offset} is too large"))
            })?;
            match handle.file.read_at(&mut buffer[filled..], at) {
                Ok(0) => break,
                Ok(read) => filled += read,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                Err(error) => {
                    return Err(ErrorObject::internal(format!(
                        "cannot read file handle {id:?}: {error}"
                    )))
                }
            }
        }
        buffer.truncate(filled);
        Ok(ReadBlockResult { eof: filled < len as usize, chunk: Base64(buffer) })
    }

    /// `fs/writeBlock`: all of `bytes` at `offset`.
    pub(crate) fn write_block(&self, id: &str, offset: u64, bytes: &[u8]) -> FsResult<Empty> {
        if bytes.is_empty() || bytes.len() as u64 > MAX_BLOCK {
            return Err(ErrorObject::invalid_params(format!(
                "chunk must be 1 to {MAX_BLOCK} bytes; got {}",
                bytes.len()
            )));
        }
        let handle = self.get(id)?;
        if handle.mode != OpenMode::Replace {
            return Err(ErrorObject::invalid_request(format!(
                "file handle {id:?} was opened for reading"
            )));
        }
        offset
            .checked_add(bytes.len() as u64)
            .ok_or_else(|| ErrorObject::invalid_params(format!("offset {offset} is too large")))?;
        handle
            .file
            .write_all_at(bytes, offset)
            .map_err(|e| ErrorObject::internal(format!("cannot write file handle {id:?}: {e}")))?;
        Ok(Empty {})
    }

    /// `fs/close`.
    pub(crate) fn close(&self, id: &str) -> FsResult<Empty> {
        match self.lock().remove(id) {
            Some(_) => Ok(Empty {}),
            None => Err(ErrorObject::invalid_request(format!("unknown file handle {id:?}"))),
        }
    }
}

/// Whether handle `id` may be opened: not open yet, and room for one more.
fn check_free(handles: &HashMap<String, Arc<Handle>>, id: &str) -> FsResult<()> {
    if handles.contains_key(id) {
        return Err(ErrorObject::invalid_request(format!("file handle {id:?} is already open")));
    }
    if handles.len() >= MAX_HANDLES {
        return Err(ErrorObject::invalid_request(format!(
            "too many open file handles: the limit is {MAX_HANDLES} per connection; close some with fs/close"
        )));
    }
    Ok(())
}

fn open_read(roots: &Roots, path: &Path) -> FsResult<File> {
    let op = FsOp::Open;
    let located = roots.locate(path)?;
    let (file, stat) = open_regular(&located, op, true)?;
    kind::refuse_stdio(op, path, &stat)?;
    refuse_pseudo(op, path, &file)?;
    Ok(file)
}

/// A fresh, empty file at `path`: a new inode renamed over what was there
/// (`write::replace`, as `fs/writeFile` does), with the old file's mode and
/// owner, so a hard link to the old file (perhaps outside the roots) is
/// untouched. Never through a final symlink.
fn open_replace(roots: &Roots, path: &Path) -> FsResult<File> {
    let op = FsOp::Open;
    let located = roots.locate(path)?;
    let entry = located.entry(op)?;
    refuse_pseudo(op, path, &entry.dir)?;
    let existing = match sys::fstatat(entry.dir.as_fd(), &entry.name, false) {
        Ok(stat) if sys::file_type(&stat) == libc::S_IFLNK => {
            return Err(error::invalid_input(
                op,
                path,
                "it is a symlink, and replace never writes through one".into(),
            ))
        }
        Ok(stat) => {
            kind::require_regular(op, path, &stat)?;
            Some(stat)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(located.fail(op, e)),
    };
    let like = Like {
        mode: Some(existing.map_or(0o644, |stat| stat.st_mode & 0o7777)),
        owner: existing.map(|stat| (stat.st_uid, stat.st_gid)),
        durable: false,
    };
    replace(&entry, like, |_| Ok(())).map_err(io_error(op, path))
}

/// Block I/O at offsets means nothing on /proc and /sys pseudo-files (and
/// `/proc/PID/mem` is a process's memory): refused, `fs/readFile` reads them.
fn refuse_pseudo(op: FsOp, path: &Path, fd: &impl AsFd) -> FsResult<()> {
    if on_pseudo_filesystem(fd.as_fd()) {
        return Err(error::invalid_input(
            op,
            path,
            "it is a /proc or /sys pseudo-file; read it with fs/readFile".into(),
        ));
    }
    Ok(())
}
