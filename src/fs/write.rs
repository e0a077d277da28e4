//! `fs/writeFile`: atomic replacement (a temporary file beside the target, renamed over it) or append in place.

use std::ffi::CString;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use super::error::{invalid_input, io_error, FsOp};
use super::open::Entry;
use super::{kind, sys, FsResult, FsRules, Roots};
use crate::protocol::{Base64, Empty, ErrorObject, WriteFileParams};

/// Writes `dataBase64` to the path. Without `append` the file is replaced
/// atomically, keeping the old one's permissions; readers see the old or the
/// new content, never a mix. A final symlink is followed (its target is
/// replaced and the link kept) unless `followSymlinks` is false, which refuses it.
/// A file with other names is written in place when `rules` say so.
pub(crate) fn write_file(
    roots: &Roots,
    mut params: WriteFileParams,
    rules: &FsRules,
) -> FsResult<Empty> {
    let data = Base64::decode_string(std::mem::take(&mut params.data_base64)).map_err(|e| {
        ErrorObject::invalid_request(format!("fs/writeFile requires valid base64 dataBase64: {e}"))
    })?;
    let op = FsOp::Write;
    let located = roots.locate(&params.path)?;
    let path = located.path();
    let (entry, existing) = if params.follow_symlinks.unwrap_or(true) {
        located.follow_entry(op)?
    } else {
        let entry = located.entry(op)?;
        let stat = sys::fstatat(entry.dir.as_fd(), &entry.name, false).ok();
        if stat.is_some_and(|s| sys::file_type(&s) == libc::S_IFLNK) {
            return Err(invalid_input(
                op,
                path,
                "it is a symlink and followSymlinks is false".into(),
            ));
        }
        (entry, stat)
    };
    if let Some(stat) = &existing {
        kind::require_regular(op, path, stat)?;
    }
    // A pseudo-file (/proc, /sys) cannot be replaced, and no temporary file can
    // be made beside it: it is written in place.
    let pseudo = existing.is_some() && on_pseudo_filesystem(entry.dir.as_fd());
    let linked = rules.write_linked_in_place && existing.is_some_and(|stat| stat.st_nlink > 1);
    if params.append || pseudo || linked {
        let mode = if params.append { libc::O_APPEND | libc::O_CREAT } else { libc::O_TRUNC };
        let flags = libc::O_WRONLY | mode | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY;
        let fd = sys::openat(entry.dir.as_fd(), &entry.name, flags, 0o666)
            .map_err(io_error(op, path))?;
        // The entry may have changed since it was checked: check what was opened.
        let stat = sys::fstat(fd.as_fd()).map_err(io_error(op, path))?;
        kind::require_regular(op, path, &stat)?;
        let mut file = std::fs::File::from(fd);
        file.write_all(&data.0).map_err(io_error(op, path))?;
        return Ok(Empty {});
    }
    let like = Like {
        mode: existing.map(|stat| stat.st_mode & 0o7777),
        owner: existing.map(|stat| (stat.st_uid, stat.st_gid)),
        durable: true,
    };
    replace(&entry, like, |file| file.write_all(&data.0)).map_err(io_error(op, path))?;
    Ok(Empty {})
}

/// Whether `dir` (or any file) lies on procfs, sysfs or a similar kernel filesystem.
pub(crate) fn on_pseudo_filesystem(dir: BorrowedFd<'_>) -> bool {
    const PSEUDO: [i64; 7] = [
        0x9fa0,      // proc
        0x6265_6572, // sysfs
        0x6367_7270, // cgroup2
        0x0027_e0eb, // cgroup
        0x6462_6720, // debugfs
        0x7472_6163, // tracefs
        0x7363_6673, // securityfs
    ];
    // SAFETY: statfs is plain integers; fstatfs writes only into it.
    let mut info: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `dir` is an open descriptor for the duration of the call.
    if unsafe { libc::fstatfs(dir.as_raw_fd(), &mut info) } != 0 {
        return false;
    }
    PSEUDO.contains(&(info.f_type as i64))
}

/// How a replacement file is made.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Like {
    /// Permission bits; `None` for those of a new file (0o666 less the umask).
    pub(crate) mode: Option<u32>,
    /// Owner and group to give it, best effort.
    pub(crate) owner: Option<(u32, u32)>,
    /// Sync the data to disk before the rename, so a power loss cannot leave an empty file.
    pub(crate) durable: bool,
}

/// Replaces `entry` with a new regular file that `fill` writes: the data goes to
/// a temporary file in the same directory, is synced, and is renamed over the
/// entry; the new file is returned, still open for writing. On any failure the
/// temporary file is removed and the entry is untouched.
pub(crate) fn replace(
    entry: &Entry,
    like: Like,
    fill: impl FnOnce(&mut std::fs::File) -> io::Result<()>,
) -> io::Result<std::fs::File> {
    let dir = entry.dir.as_fd();
    let (temp_name, mut file) = create_temp(dir, &entry.name)?;
    let _pending = PendingTemp::new(dir, &temp_name);
    let result = (|| {
        if let Some((uid, gid)) = like.owner {
            let _ = sys::fchown(file.as_fd(), uid, gid);
        }
        if let Some(mode) = like.mode {
            sys::fchmod(file.as_fd(), mode)?;
        }
        fill(&mut file)?;
        if like.durable {
            file.sync_all()?;
        }
        sys::renameat(dir, &temp_name, dir, &entry.name)
    })();
    if result.is_err() {
        let _ = sys::unlinkat(dir, &temp_name, false);
    }
    result.map(|()| file)
}

/// Creates `.NAME.PID.N.tmp` (new, exclusive, never through a symlink) in `dir`.
pub(crate) fn create_temp(
    dir: BorrowedFd<'_>,
    name: &CString,
) -> io::Result<(CString, std::fs::File)> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    // Leave room for the suffix under the 255-byte name limit.
    let stem = &name.as_bytes()[..name.as_bytes().len().min(200)];
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW;
    loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let mut temp = b".".to_vec();
        temp.extend_from_slice(stem);
        temp.extend_from_slice(format!(".{}.{n}.tmp", std::process::id()).as_bytes());
        let temp = CString::new(temp).map_err(io::Error::other)?;
        match sys::openat(dir, &temp, flags, 0o666) {
            Ok(fd) => return Ok((temp, std::fs::File::from(fd))),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Temporary files being written, so that a server that exits while a write or
/// copy is stuck or slow removes them instead of leaving them behind.
static PENDING: std::sync::Mutex<Vec<std::path::PathBuf>> = std::sync::Mutex::new(Vec::new());

/// Registers a temporary file for [`remove_abandoned_temps`] until dropped.
struct PendingTemp(Option<std::path::PathBuf>);

impl PendingTemp {
    fn new(dir: BorrowedFd<'_>, name: &std::ffi::CStr) -> PendingTemp {
        use std::os::unix::ffi::OsStrExt;
        let dir = std::fs::read_link(format!("/proc/self/fd/{}", dir.as_raw_fd())).ok();
        let path = dir.map(|d| d.join(std::ffi::OsStr::from_bytes(name.to_bytes())));
        if let Some(path) = &path {
            pending().push(path.clone());
        }
        PendingTemp(path)
    }
}

impl Drop for PendingTemp {
    fn drop(&mut self) {
        if let Some(path) = &self.0 {
            pending().retain(|p| p != path);
        }
    }
}

fn pending() -> std::sync::MutexGuard<'static, Vec<std::path::PathBuf>> {
    PENDING.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Removes the temporary files of writes that never finished (at exit).
pub(crate) fn remove_abandoned_temps() -> usize {
    let paths = std::mem::take(&mut *pending());
    paths.iter().filter(|path| std::fs::remove_file(path).is_ok()).count()
}
