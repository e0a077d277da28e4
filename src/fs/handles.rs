//! `fs/open`, `fs/readBlock`, `fs/writeBlock`, `fs/close`: files held open by
//! client-chosen ids, for moving a file in blocks.
//!
//! A handle is the descriptor itself, so it keeps reading the file it opened
//! even after its path is replaced or removed. Each connection holds at most
//! [`HandleRules::limit`]; they close with the connection (or, when a session
//! detaches, with the connection it had). Reads and writes use pread and
//! pwrite, so blocks of one handle may be moved concurrently. The rules that
//! callers choose are plain options ([`HandleRules`]), and refusals
//! are [`Refusal`]s, worded by the caller.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use super::error::{self, io_error, FsOp};
use super::read::open_regular;
use super::refusal::{Refusal, MAX_BLOCK, MAX_HANDLE_ID};
use super::write::{on_pseudo_filesystem, replace, Like};
use super::{kind, sys, FsResult, Roots};
use crate::protocol::{Base64, Empty, ErrorObject, OpenMode, ReadBlockResult};

/// Open handles per connection, by default.
pub(crate) const MAX_HANDLES: usize = 256;

struct Handle {
    file: File,
    mode: OpenMode,
}

/// How a connection's handles behave where callers choose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HandleRules {
    /// Open handles per connection.
    pub(crate) limit: usize,
    /// Whether an empty handle id is accepted by `fs/open`.
    pub(crate) empty_ids: bool,
    /// Whether `fs/readBlock`, `fs/writeBlock` and `fs/close` refuse an id
    /// longer than [`MAX_HANDLE_ID`] as `fs/open` does (else it is unknown).
    pub(crate) check_ids: bool,
    /// Whether a failed `fs/readBlock` closes its handle.
    pub(crate) close_on_read_error: bool,
}

impl Default for HandleRules {
    fn default() -> HandleRules {
        HandleRules {
            limit: MAX_HANDLES,
            empty_ids: false,
            check_ids: false,
            close_on_read_error: false,
        }
    }
}

impl HandleRules {
    fn check_id(&self, id: &str, opening: bool) -> Result<(), Refusal> {
        let empty = id.is_empty() && !self.empty_ids;
        if (opening || self.check_ids) && (empty || id.len() > MAX_HANDLE_ID) {
            return Err(Refusal::BadHandleId(id.to_owned()));
        }
        Ok(())
    }
}

/// One connection's open handles.
#[derive(Default)]
pub(crate) struct Handles(Mutex<HashMap<String, Arc<Handle>>>);

impl Handles {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<Handle>>> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn get(&self, id: &str, rules: &HandleRules) -> Result<Arc<Handle>, Refusal> {
        rules.check_id(id, false)?;
        self.lock().get(id).cloned().ok_or_else(|| Refusal::UnknownHandle(id.to_owned()))
    }

    /// `fs/open`: opens `path` for reading, or creates or truncates it for writing.
    pub(crate) fn open(
        &self,
        roots: &Roots,
        id: String,
        path: &Path,
        mode: OpenMode,
        rules: &HandleRules,
    ) -> Result<String, Refusal> {
        rules.check_id(&id, true)?;
        // Checked before the open (no file touched for nothing) and again after it.
        check_free(&self.lock(), &id, rules.limit)?;
        let file = match mode {
            OpenMode::Read => open_read(roots, path)?,
            OpenMode::Replace => open_replace(roots, path)?,
        };
        let mut handles = self.lock();
        check_free(&handles, &id, rules.limit)?;
        handles.insert(id.clone(), Arc::new(Handle { file, mode }));
        Ok(id)
    }

    /// `fs/readBlock`: up to `len` bytes at `offset`.
    pub(crate) fn read_block(
        &self,
        id: &str,
        offset: u64,
        len: u64,
        rules: &HandleRules,
    ) -> Result<ReadBlockResult, Refusal> {
        rules.check_id(id, false)?;
        if len == 0 || len > MAX_BLOCK {
            return Err(Refusal::BadBlockLength(len));
        }
        let handle = self.get(id, rules)?;
        if handle.mode != OpenMode::Read {
            return Err(Refusal::Fs(ErrorObject::invalid_request(format!(
                "file handle {id:?} was opened for writing"
            ))));
        }
        let read = read_at(&handle.file, id, offset, len);
        if read.is_err() && rules.close_on_read_error {
            self.lock().remove(id);
        }
        Ok(read?)
    }

    /// `fs/writeBlock`: all of `bytes` at `offset`.
    pub(crate) fn write_block(
        &self,
        id: &str,
        offset: u64,
        bytes: &[u8],
        rules: &HandleRules,
    ) -> Result<Empty, Refusal> {
        rules.check_id(id, false)?;
        if bytes.is_empty() || bytes.len() as u64 > MAX_BLOCK {
            return Err(Refusal::Fs(ErrorObject::invalid_params(format!(
                "chunk must be 1 to {MAX_BLOCK} bytes; got {}",
                bytes.len()
            ))));
        }
        let handle = self.get(id, rules)?;
        if handle.mode != OpenMode::Replace {
            return Err(Refusal::Fs(ErrorObject::invalid_request(format!(
                "file handle {id:?} was opened for reading"
            ))));
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
    pub(crate) fn close(&self, id: &str, rules: &HandleRules) -> Result<Empty, Refusal> {
        rules.check_id(id, false)?;
        match self.lock().remove(id) {
            Some(_) => Ok(Empty {}),
            None => Err(Refusal::UnknownHandle(id.to_owned())),
        }
    }
}

/// Up to `len` bytes of `file` at `offset` (`len` is at most [`MAX_BLOCK`]).
fn read_at(file: &File, id: &str, offset: u64, len: u64) -> FsResult<ReadBlockResult> {
    let mut buffer = vec![0u8; len as usize];
    let mut filled = 0;
    while filled < buffer.len() {
        let at = offset
            .checked_add(filled as u64)
            .ok_or_else(|| ErrorObject::invalid_params(format!("offset {offset} is too large")))?;
        match file.read_at(&mut buffer[filled..], at) {
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

/// Whether handle `id` may be opened: not open yet, and room for one more.
fn check_free(
    handles: &HashMap<String, Arc<Handle>>,
    id: &str,
    limit: usize,
) -> Result<(), Refusal> {
    if handles.contains_key(id) {
        return Err(Refusal::HandleExists(id.to_owned()));
    }
    if handles.len() >= limit {
        return Err(Refusal::TooManyHandles(limit));
    }
    Ok(())
}

fn open_read(roots: &Roots, path: &Path) -> Result<File, Refusal> {
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
