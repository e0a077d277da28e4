//! The fs/* methods: one plain blocking function each, over descriptors resolved beneath the `--root`s.
//!
//! Every handler locates its paths with [`Roots::locate`] (lexical cleaning, then
//! the kernel resolves beneath a root descriptor, `open.rs`) and then works with
//! `*at` calls on verified descriptors, so no symlink leads it out of a root
//! between a check and a use. Reads and writes act on regular files only
//! (`kind.rs`); writes replace files atomically, or write a hard-linked one in
//! place where the rules ask it (`write.rs`); recursive remove and copy walk
//! descriptors and never follow links inside the tree (`walk.rs`). Under an
//! access list (`access.rs`, deny globs in `glob.rs`) every descriptor a call
//! opens is checked by its real path against it.
//! The server calls these under `spawn_blocking`.

mod access;
mod cached;
mod canonical;
mod copy;
mod error;
mod glob;
mod handles;
mod kind;
mod mounts;
mod nofollow;
mod open;
mod read;
mod refusal;
mod roots;
mod rules;
pub(crate) mod sys;
mod tree;
mod walk;
mod write;

use std::io;
use std::os::fd::AsFd;
use std::time::SystemTime;

pub(crate) use self::access::{AccessMap, Need};
pub(crate) use self::cached::cached_metadata;
pub(crate) use self::canonical::canonicalize;
pub(crate) use self::copy::copy;
use self::error::{io_error, FsOp};
pub(crate) use self::glob::Pattern;
pub(crate) use self::handles::{HandleRules, Handles};
pub(crate) use self::nofollow::{refuse_links, Strict};
use self::open::Located;
pub(crate) use self::read::{read_file, read_file_charged};
pub(crate) use self::refusal::Refusal;
pub(crate) use self::refusal::{MAX_BLOCK, MAX_HANDLE_ID};
pub(crate) use self::roots::{clean as clean_path, Roots};
pub(crate) use self::rules::{FsRules, WalkRules};
pub(crate) use self::tree::{walk, Walked};
pub(crate) use self::write::{remove_abandoned_temps, write_file};
use crate::protocol::{
    CreateDirectoryParams, DirectoryEntry, Empty, ErrorObject, Metadata, PathParams,
    ReadDirectoryResult, RemoveParams, RenameParams,
};

pub(crate) use crate::protocol::READ_LIMIT;

type FsResult<T> = Result<T, ErrorObject>;

/// Opens `path` (`O_PATH`, confined as every fs path) for a watch.
pub(crate) fn open_for_watch(
    roots: &Roots,
    path: &std::path::Path,
) -> Result<std::os::fd::OwnedFd, ErrorObject> {
    let located = roots.locate(path)?;
    located.open(libc::O_PATH | libc::O_CLOEXEC).map_err(|e| located.fail(FsOp::Watch, e))
}

/// `fs/createDirectory`; recursive by default.
pub(crate) fn create_directory(roots: &Roots, params: CreateDirectoryParams) -> FsResult<Empty> {
    let op = FsOp::CreateDirectory;
    let located = roots.locate(&params.path)?;
    if params.recursive.unwrap_or(true) {
        create_all(&located).map_err(|e| located.fail(op, e))?;
    } else {
        let entry = located.entry(op)?;
        sys::mkdirat(entry.dir.as_fd(), &entry.name, 0o777).map_err(|e| located.fail(op, e))?;
    }
    Ok(Empty {})
}

/// Creates the directory and its missing parents, each with `mkdirat` in its verified parent.
pub(crate) fn create_all(located: &Located<'_>) -> io::Result<()> {
    // A directory already there is fine, even one the call may only read:
    // nothing is made in it (what is made beneath it is checked).
    if located.is_directory()? {
        return Ok(());
    }
    let entry = match located.entry_io() {
        Ok(Some(entry)) => entry,
        Ok(None) => return Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if let Some(parent) = located.parent()? {
                create_all(&parent)?;
            }
            located.entry_io()?.ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?
        }
        Err(e) => return Err(e),
    };
    match sys::mkdirat(entry.dir.as_fd(), &entry.name, 0o777) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            // Fine if it is a directory (possibly through a symlink beneath the root).
            if located.is_directory()? {
                Ok(())
            } else {
                Err(e)
            }
        }
        other => other,
    }
}

/// `fs/getMetadata`: follows symlinks (a dangling link is NotFound) and reports
/// whether the path itself is a symlink; `followSymlinks: false` describes the link.
pub(crate) fn get_metadata(roots: &Roots, params: PathParams) -> FsResult<Metadata> {
    // So that the next call can be answered from the kernel's caches (`cached.rs`).
    roots.owned.refresh();
    let op = FsOp::Stat;
    let located = roots.locate(&params.path)?;
    let stat = |flags| -> FsResult<std::fs::Metadata> {
        let fd = located.open(libc::O_PATH | flags).map_err(|e| located.fail(op, e))?;
        std::fs::File::from(fd).metadata().map_err(io_error(op, located.path()))
    };
    let link = stat(libc::O_NOFOLLOW)?;
    let is_symlink = link.file_type().is_symlink();
    let follow = params.follow_symlinks.unwrap_or(true);
    let meta = if is_symlink && follow { stat(0)? } else { link };
    Ok(Metadata {
        is_directory: meta.is_dir(),
        is_file: meta.is_file(),
        created_at_ms: meta.created().map(epoch_ms).unwrap_or(0),
        modified_at_ms: meta.modified().map(epoch_ms).unwrap_or(0),
        is_symlink,
        size: meta.len(),
        readonly: meta.permissions().readonly(),
    })
}

/// `fs/readDirectory`, entries sorted by name (as bytes); symlinks are followed
/// beneath the root for the type (one that leads out is neither file nor directory).
/// With [`FsRules::list_only_known`], a link that cannot be stat'ed and an
/// entry whose type cannot be read are left out.
pub(crate) fn read_directory(
    roots: &Roots,
    params: PathParams,
    rules: &FsRules,
) -> FsResult<ReadDirectoryResult> {
    let op = FsOp::List;
    let located = roots.locate(&params.path)?;
    let path = located.path();
    let fd = located.open(libc::O_RDONLY | libc::O_DIRECTORY).map_err(|e| located.fail(op, e))?;
    let mut stream = walk::DirStream::new(fd).map_err(io_error(op, path))?;
    let mut entries = Vec::new();
    while let Some(next) = stream.next_entry() {
        let (name, d_type) = next.map_err(io_error(op, path))?;
        let file_type = match d_type {
            libc::DT_DIR => libc::S_IFDIR,
            libc::DT_REG => libc::S_IFREG,
            libc::DT_LNK | libc::DT_UNKNOWN => {
                match located.open_child(&name, libc::O_PATH).and_then(|fd| sys::fstat(fd.as_fd()))
                {
                    Ok(stat) => sys::file_type(&stat),
                    Err(_) if rules.list_only_known => continue,
                    Err(_) => 0,
                }
            }
            _ => 0,
        };
        let bytes = name.as_bytes();
        entries.push((
            bytes.to_vec(),
            DirectoryEntry {
                file_name: String::from_utf8_lossy(bytes).into_owned(),
                is_directory: file_type == libc::S_IFDIR,
                is_file: file_type == libc::S_IFREG,
                file_name_base64: crate::protocol::names::base64_if_not_utf8(bytes),
            },
        ));
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(ReadDirectoryResult { entries: entries.into_iter().map(|(_, entry)| entry).collect() })
}

/// `fs/remove`: recursive and forgiving of a missing path by default. A symlink
/// is removed itself unless `followSymlinks` is true; links inside a removed
/// tree are always removed themselves.
pub(crate) fn remove(roots: &Roots, params: RemoveParams) -> FsResult<Empty> {
    let op = FsOp::Remove;
    let located = roots.locate(&params.path)?;
    let path = located.path();
    let force = params.force.unwrap_or(true);
    let missing = |e: &io::Error| e.kind() == io::ErrorKind::NotFound;
    let entry = if params.follow_symlinks.unwrap_or(false) {
        located.follow_entry(op)?.0
    } else {
        match located.entry_io() {
            Ok(Some(entry)) => entry,
            Ok(None) => return Err(located.no_entry(op)),
            Err(e) if force && missing(&e) => return Ok(Empty {}),
            Err(e) => return Err(located.fail(op, e)),
        }
    };
    let stat = match sys::fstatat(entry.dir.as_fd(), &entry.name, false) {
        Ok(stat) => stat,
        Err(e) if force && missing(&e) => return Ok(Empty {}),
        Err(e) => return Err(io_error(op, path)(e)),
    };
    if sys::file_type(&stat) != libc::S_IFDIR {
        sys::unlinkat(entry.dir.as_fd(), &entry.name, false).map_err(io_error(op, path))?;
    } else if params.recursive.unwrap_or(true) {
        located.check_tree(entry.dir.as_fd(), Some(&entry.name)).map_err(io_error(op, path))?;
        walk::remove_tree(entry.dir.as_fd(), &entry.name, path)?;
    } else {
        sys::unlinkat(entry.dir.as_fd(), &entry.name, true).map_err(io_error(op, path))?;
    }
    Ok(Empty {})
}

/// `fs/rename`: renames the entry itself; the error names the missing side.
/// Renaming onto the same file (another name of it) is refused.
pub(crate) fn rename(roots: &Roots, params: RenameParams) -> FsResult<Empty> {
    let op = FsOp::Rename;
    let source = roots.locate(&params.source_path)?;
    let destination = roots.locate(&params.destination_path)?;
    let (from, to) = (source.path(), destination.path());
    let resolve = |located: &Located<'_>| match located.entry_io() {
        Ok(Some(entry)) => Ok(entry),
        Ok(None) => Err(located.no_entry(op)),
        Err(e) if roots.confined() && roots::is_escape(&e) => Err(roots::outside(located.path())),
        Err(e) => {
            Err(error::io_error_between(op, from, to, located.path(), located.hide_missing(e)))
        }
    };
    let (source_entry, destination_entry) = (resolve(&source)?, resolve(&destination)?);
    let (a, b) = (&source_entry, &destination_entry);
    let source_stat = sys::fstatat(a.dir.as_fd(), &a.name, false);
    if let (Ok(x), Ok(y)) = (&source_stat, sys::fstatat(b.dir.as_fd(), &b.name, false)) {
        // The same entry, or a link onto the very file it would replace (as `mv`
        // refuses: the file would be lost and the link left pointing at itself).
        let link_onto_target = sys::file_type(x) == libc::S_IFLNK
            && sys::fstatat(a.dir.as_fd(), &a.name, true).is_ok_and(|t| sys::same_file(&t, &y));
        if sys::same_file(x, &y) || link_onto_target {
            return Err(error::same_file(op, from, to));
        }
    }
    if source_stat.as_ref().is_ok_and(|stat| sys::file_type(stat) == libc::S_IFDIR) {
        // Under an access list a tree holding what the call may not change
        // stays where its entries name it.
        source.check_tree(a.dir.as_fd(), Some(&a.name)).map_err(io_error(op, from))?;
    }
    if let Err(e) = sys::renameat(a.dir.as_fd(), &a.name, b.dir.as_fd(), &b.name) {
        let blamed = if source_stat.is_ok() { to } else { from };
        return Err(error::io_error_between(op, from, to, blamed, e));
    }
    Ok(Empty {})
}

fn too_large() -> ErrorObject {
    ErrorObject::invalid_request(format!("file is too large to read: limit is {READ_LIMIT} bytes"))
}

fn epoch_ms(time: SystemTime) -> i64 {
    time.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}
