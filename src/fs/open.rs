//! Resolution of a located path under its root: the target itself, or the entry (parent directory descriptor and name).

use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::access::{AccessMap, Need};
use super::error::{self, io_error, FsOp};
use super::kind;
use super::roots::{self, clean, is_escape, outside, Cwd, Roots};
use super::sys;
use crate::protocol::{Access, ErrorObject};

/// A cleaned path split into a directory descriptor (a root, or `/`) and the
/// rest, which the kernel resolves beneath it.
#[derive(Debug)]
pub(crate) struct Located<'a> {
    roots: &'a Roots,
    /// The path as the client gave it, for messages.
    path: &'a Path,
    dir: OwnedFd,
    rel: PathBuf,
    resolve: u64,
    /// Under a sandbox's access list, what the call needs of this path.
    need: Need,
}

/// A directory entry: its parent directory and its name (one component).
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) dir: OwnedFd,
    pub(crate) name: CString,
}

impl<'a> Located<'a> {
    pub(crate) fn new(
        roots: &'a Roots,
        path: &'a Path,
        dir: OwnedFd,
        rel: PathBuf,
        resolve: u64,
    ) -> Located<'a> {
        let need = roots.guard.as_ref().map_or(Need::Read, |guard| guard.need);
        Located { roots, path, dir, rel, resolve, need }
    }

    /// This path as one the call only reads (the source of a copy).
    pub(crate) fn reading(self) -> Located<'a> {
        Located { need: Need::Read, ..self }
    }

    /// The path as given.
    pub(crate) fn path(&self) -> &'a Path {
        self.path
    }

    /// Opens the path itself with `flags` (add `O_NOFOLLOW` to stop at a final symlink).
    pub(crate) fn open(&self, flags: libc::c_int) -> io::Result<OwnedFd> {
        let rel = if self.rel.as_os_str().is_empty() { Path::new(".") } else { &self.rel };
        let fd = sys::openat2(self.dir.as_fd(), &sys::c_path(rel)?, flags, 0, self.resolve)?;
        self.check_fd(&fd)?;
        Ok(fd)
    }

    /// Whether the path is a directory now. Under an access list a
    /// directory the call may not read is EACCES, as a missing path there
    /// would be (so no answer tells what exists), unless it lies on the way
    /// to an entry the list grants (whose existence is no secret).
    pub(crate) fn is_directory(&self) -> io::Result<bool> {
        let rel = if self.rel.as_os_str().is_empty() { Path::new(".") } else { &self.rel };
        let flags = libc::O_PATH | libc::O_DIRECTORY;
        let Ok(fd) = sys::c_path(rel)
            .and_then(|rel| sys::openat2(self.dir.as_fd(), &rel, flags, 0, self.resolve))
        else {
            return Ok(false);
        };
        let Some(guard) = &self.roots.guard else { return Ok(true) };
        let real = real_path(&fd)?;
        if guard.map.allows(&real, Need::Read) || on_the_way(&guard.map, &real) {
            return Ok(true);
        }
        Err(denied())
    }

    /// Under an access list: `fd` must be something the call may use as it
    /// needs, judged by its real path (so no link on the way fools it).
    fn check_fd(&self, fd: &OwnedFd) -> io::Result<()> {
        if self.roots.guard.is_none() {
            return Ok(());
        }
        self.check(&real_path(fd)?)
    }

    /// Under an access list: whether `real` allows what the call needs;
    /// EACCES when it may not be read, EROFS when it may only be read.
    fn check(&self, real: &Path) -> io::Result<()> {
        let Some(guard) = &self.roots.guard else { return Ok(()) };
        if guard.map.allows(real, self.need) {
            return Ok(());
        }
        if self.need == Need::Write && guard.map.allows(real, Need::Read) {
            return Err(io::Error::new(
                io::ErrorKind::ReadOnlyFilesystem,
                "Read-only file system: the sandbox lets this call only read it",
            ));
        }
        Err(denied())
    }

    /// Under an access list: the check of each path a tree copy creates
    /// beneath `entry` (given relative to it), by the real place it lands.
    pub(crate) fn check_beneath(
        &self,
        entry: &Entry,
    ) -> io::Result<impl Fn(&Path) -> io::Result<()> + '_> {
        let base = match self.roots.guard {
            Some(_) => Some(real_path(&entry.dir)?.join(OsStr::from_bytes(entry.name.to_bytes()))),
            None => None,
        };
        Ok(move |rel: &Path| match &base {
            Some(base) => self.check(&base.join(rel)),
            None => Ok(()),
        })
    }

    /// Under an access list: refuses a tree (the directory `fd`) that holds a
    /// path the call may not use as it needs, before it is walked whole.
    pub(crate) fn check_tree(&self, fd: BorrowedFd<'_>, name: Option<&CStr>) -> io::Result<()> {
        let Some(guard) = &self.roots.guard else { return Ok(()) };
        let mut real = real_path(&fd)?;
        if let Some(name) = name {
            real.push(OsStr::from_bytes(name.to_bytes()));
        }
        let narrower = guard.map.narrower_beneath(&real, self.need);
        match narrower.map_err(|e| io::Error::other(e.message))? {
            None => Ok(()),
            Some(inner) => Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "Permission denied: it holds {}, which the sandbox keeps from this call",
                    inner.display()
                ),
            )),
        }
    }

    /// The error for a failed resolution: leaving a root is -32600 outside, the rest as I/O errors.
    pub(crate) fn fail(&self, op: FsOp, error: io::Error) -> ErrorObject {
        if self.resolve != 0 && roots::is_escape(&error) {
            roots::outside(self.path)
        } else {
            io_error(op, self.path)(self.hide_missing(error))
        }
    }

    /// Under an access list, a path missing where the call may not read
    /// (its nearest existing ancestor is neither readable nor on the way to
    /// an entry) fails as an existing one there does, so that no answer
    /// tells what exists where the list does not reach.
    pub(crate) fn hide_missing(&self, error: io::Error) -> io::Error {
        let Some(guard) = &self.roots.guard else { return error };
        if error.kind() != io::ErrorKind::NotFound {
            return error;
        }
        let Some(existing) = self.path.ancestors().find_map(|a| std::fs::canonicalize(a).ok())
        else {
            return error;
        };
        if guard.map.allows(&existing, Need::Read) || on_the_way(&guard.map, &existing) {
            return error;
        }
        denied()
    }

    /// The entry the path names, without following a final symlink. A root (or
    /// `/`) has no entry a method may remove, rename or create.
    pub(crate) fn entry(&self, op: FsOp) -> Result<Entry, ErrorObject> {
        match self.entry_io() {
            Ok(Some(entry)) => Ok(entry),
            Ok(None) => Err(self.no_entry(op)),
            Err(e) => Err(self.fail(op, e)),
        }
    }

    /// The error for a root (or `/`) used where an entry is needed.
    pub(crate) fn no_entry(&self, op: FsOp) -> ErrorObject {
        let detail = if self.resolve != 0 { "it is an allowed root" } else { "it is /" };
        error::invalid_input(op, self.path, detail.into())
    }

    /// [`Located::entry`] with the raw error; `None` for a root or `/`.
    pub(crate) fn entry_io(&self) -> io::Result<Option<Entry>> {
        let Some(name) = self.rel.file_name() else { return Ok(None) };
        let parent = match self.rel.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        let flags = libc::O_PATH | libc::O_DIRECTORY;
        let dir = sys::openat2(self.dir.as_fd(), &sys::c_path(parent)?, flags, 0, self.resolve)?;
        if self.roots.guard.is_some() {
            self.check(&real_path(&dir)?.join(name))?;
        }
        let name = CString::new(name.as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
        Ok(Some(Entry { dir, name }))
    }

    /// The parent directory, located the same way; `None` for a root or `/`.
    pub(crate) fn parent(&self) -> io::Result<Option<Located<'a>>> {
        let Some(parent) = self.rel.parent() else { return Ok(None) };
        let dir = self.dir.try_clone()?;
        Ok(Some(Located { rel: parent.to_path_buf(), dir, ..*self }))
    }

    /// Opens `rel` below this path, resolved from the root like the path itself
    /// (so a symlink on the way may not lead out of the root), with `resolve`
    /// flags added.
    pub(crate) fn open_below(
        &self,
        rel: &Path,
        flags: libc::c_int,
        resolve: u64,
    ) -> io::Result<OwnedFd> {
        let rel = self.rel.join(rel);
        let rel = if rel.as_os_str().is_empty() { Path::new(".") } else { &rel };
        let fd =
            sys::openat2(self.dir.as_fd(), &sys::c_path(rel)?, flags, 0, self.resolve | resolve)?;
        self.check_fd(&fd)?;
        Ok(fd)
    }

    /// Opens `name` inside this directory, resolved from the root like the path itself.
    pub(crate) fn open_child(&self, name: &CStr, flags: libc::c_int) -> io::Result<OwnedFd> {
        let rel = self.rel.join(OsStr::from_bytes(name.to_bytes()));
        let fd = sys::openat2(self.dir.as_fd(), &sys::c_path(&rel)?, flags, 0, self.resolve)?;
        self.check_fd(&fd)?;
        Ok(fd)
    }

    /// The entry the path leads to after following final symlinks (beneath the
    /// root), with its status; `None` when nothing exists there yet. A dangling
    /// symlink is NotFound. The entry is verified to be the file the kernel
    /// resolved (same device and inode), so a concurrent swap is an error.
    pub(crate) fn follow_entry(
        &self,
        op: FsOp,
    ) -> Result<(Entry, Option<libc::stat>), ErrorObject> {
        let entry = self.entry(op)?;
        match sys::fstatat(entry.dir.as_fd(), &entry.name, false) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((entry, None)),
            Err(e) => return Err(self.fail(op, e)),
            Ok(stat) if sys::file_type(&stat) != libc::S_IFLNK => return Ok((entry, Some(stat))),
            Ok(_) => {}
        }
        let target = self.open(libc::O_PATH).map_err(|e| self.fail(op, e))?;
        let resolved = sys::fstat(target.as_fd()).map_err(io_error(op, self.path))?;
        let proc_path = format!("/proc/self/fd/{}", target.as_raw_fd());
        let real = std::fs::read_link(proc_path).map_err(io_error(op, self.path))?;
        if !real.is_absolute() {
            // An anonymous pipe or socket (`pipe:[N]`): nothing a method may act on.
            let detail = format!("it is {}, not a regular file", kind::type_name(&resolved));
            return Err(error::invalid_input(op, self.path, detail));
        }
        let located = self.roots.locate(&real).map_err(|_| roots::outside(self.path))?;
        let located = Located { need: self.need, ..located };
        let entry = match located.entry_io() {
            Ok(Some(entry)) => entry,
            Err(e) if self.roots.guard.is_some() && !roots::is_escape(&e) => {
                return Err(self.fail(op, e))
            }
            _ => return Err(roots::outside(self.path)),
        };
        let stat = sys::fstatat(entry.dir.as_fd(), &entry.name, false).ok();
        match stat {
            Some(stat) if sys::same_file(&stat, &resolved) => Ok((entry, Some(stat))),
            _ => Err(io_error(op, self.path)(io::Error::other(
                "it changed while its symlinks were being resolved",
            ))),
        }
    }
}

/// What a call gets for a path the access list keeps from it.
fn denied() -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        "Permission denied: the sandbox keeps this call from it",
    )
}

/// Whether `dir` lies on the way to a path the list grants (its existence
/// is then no secret).
fn on_the_way(map: &AccessMap, dir: &Path) -> bool {
    let granted = map.entries().iter().filter(|(_, access)| *access != Access::Deny);
    granted.map(|(path, _)| path).any(|path| path.starts_with(dir))
}

/// The path the kernel has for an open descriptor.
fn real_path(fd: &impl AsRawFd) -> io::Result<PathBuf> {
    let real = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))?;
    if !real.is_absolute() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "Permission denied: not a path",
        ));
    }
    Ok(real)
}

/// Where a path is resolved from: the one place a [`Located`] is made.
impl Roots {
    /// Cleans `path` and finds where it is resolved from: -32602 for a relative
    /// path, -32600 for a path outside every root.
    pub(crate) fn locate<'a>(&'a self, path: &'a Path) -> Result<Located<'a>, ErrorObject> {
        if !path.is_absolute() {
            return Err(ErrorObject::invalid_params(format!(
                "path must be absolute: {}",
                path.display()
            )));
        }
        let cleaned = clean(path);
        if !self.confined() {
            let rel = cleaned.strip_prefix("/").unwrap_or(&cleaned).to_path_buf();
            let dir = std::fs::File::open("/").map(OwnedFd::from).map_err(|e| {
                let hint = match e.raw_os_error() {
                    Some(libc::EMFILE | libc::ENFILE) => {
                        ": the server is out of file descriptors (RLIMIT_NOFILE)"
                    }
                    _ => "",
                };
                ErrorObject::internal(format!("cannot open /: {e}{hint}"))
                    .with_data(serde_json::json!({"kind": "other", "path": "/"}))
            })?;
            return Ok(Located::new(self, path, dir, rel, 0));
        }
        let Some((root, rel)) = self.best_root(&cleaned) else { return Err(outside(path)) };
        let dir = root.try_clone().map_err(|e| {
            ErrorObject::invalid_request(format!("cannot use the root of {}: {e}", path.display()))
        })?;
        Ok(Located::new(self, path, dir, rel.to_path_buf(), sys::CONFINED))
    }

    /// Checks a process's `cwd` (already known to be absolute) and returns it
    /// cleaned, for the process to start in. With no roots it is returned as is.
    pub(crate) fn check_cwd(&self, cwd: &Path) -> Result<Cwd, ErrorObject> {
        if !self.confined() {
            return Ok(Cwd { path: cwd.to_path_buf(), dir: None });
        }
        let located = self.locate(cwd)?;
        match located.open(libc::O_PATH | libc::O_DIRECTORY) {
            // A loop or magic link (ELOOP) is refused with the escapes.
            Err(e) if is_escape(&e) || e.raw_os_error() == Some(libc::ELOOP) => Err(outside(cwd)),
            // The child enters the very directory checked (fchdir), never the path again.
            Ok(dir) => Ok(Cwd { path: clean(cwd), dir: Some(dir) }),
            // Under --root the path is never used again after a failed check:
            // it could be swapped for a link out of the root meanwhile.
            Err(e) => Err(ErrorObject::internal(format!("cannot use cwd {}: {e}", cwd.display()))),
        }
    }
}
