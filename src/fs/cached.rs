//! `fs/getMetadata` from the kernel's caches alone, cheap and safe enough for the server loop.
//!
//! Every fs call runs on a blocking thread because a path a client names can
//! make a syscall wait forever (a hung NFS mount, a FUSE server that never
//! answers). For the commonest call, a stat of a path the kernel already
//! knows, that hop costs two cross-CPU wake-ups, most of the round trip. Two
//! kernel guarantees make it safe to try on the loop first: `openat2` with
//! `RESOLVE_CACHED` resolves only through the dentry cache and fails with
//! EAGAIN where a lookup or a revalidation would be needed, and `statx` with
//! `AT_STATX_DONT_SYNC` answers from cached attributes without asking a
//! network or FUSE server. An `O_PATH` descriptor opens nothing (no FIFO,
//! device or filesystem `open` runs). Cached attributes are only the truth on
//! a filesystem with no server behind it, so only a file on one is stat'ed
//! here (`mounts.rs`, checked by mount id before the `statx`); on FUSE or NFS
//! the answer could be stale, and 9p may ask its server regardless. Anything short
//! of success, errors included, gives None, and the call takes the ordinary
//! path, so errors and the first stat of a cold path still come from the
//! blocking thread.

use std::os::fd::AsFd;
use std::time::{Duration, SystemTime};

use super::{mounts, sys, Roots};
use crate::protocol::{Metadata, PathParams};

/// The metadata [`super::get_metadata`] would give, from caches alone, or None.
pub(crate) fn cached_metadata(roots: &Roots, params: &PathParams) -> Option<Metadata> {
    let stat = |flags| {
        let fd = roots.open_cached(&params.path, flags)?;
        // Before any statx: a filesystem with a server behind it is never asked.
        let mount = mounts::mount_id(fd.as_fd())?;
        if !roots.owned.owns(mount) {
            return None;
        }
        sys::statx_cached(fd.as_fd()).ok()
    };
    let link = stat(libc::O_NOFOLLOW)?;
    let is_symlink = u32::from(link.stx_mode) & libc::S_IFMT == libc::S_IFLNK;
    let meta = if is_symlink && params.follow_symlinks.unwrap_or(true) { stat(0)? } else { link };
    let kind = u32::from(meta.stx_mode) & libc::S_IFMT;
    let created = (meta.stx_mask & libc::STATX_BTIME != 0).then_some(meta.stx_btime);
    Some(Metadata {
        is_directory: kind == libc::S_IFDIR,
        is_file: kind == libc::S_IFREG,
        created_at_ms: created.map_or(0, epoch_ms),
        modified_at_ms: epoch_ms(meta.stx_mtime),
        is_symlink,
        size: meta.stx_size,
        readonly: meta.stx_mode & 0o222 == 0,
    })
}

/// Milliseconds since the epoch, 0 before it: as `get_metadata` computes it.
fn epoch_ms(time: libc::statx_timestamp) -> i64 {
    let Ok(secs) = u64::try_from(time.tv_sec) else { return 0 };
    let since = Duration::new(secs, time.tv_nsec);
    super::epoch_ms(SystemTime::UNIX_EPOCH + since)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::fs::get_metadata;

    fn scratch() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("exec-server-cached-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("file"), b"twelve bytes").unwrap();
        symlink(dir.join("file"), dir.join("link")).unwrap();
        symlink("sub", dir.join("dirlink")).unwrap();
        symlink("/etc/hostname", dir.join("out")).unwrap();
        symlink("missing", dir.join("dangling")).unwrap();
        let fifo = std::ffi::CString::new(dir.join("fifo").to_str().unwrap()).unwrap();
        // SAFETY: mkfifo reads a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        dir
    }

    /// Where the cache answers, it answers exactly as the blocking call; a
    /// warm path is answered (so the comparison is not vacuous). A mount
    /// elsewhere on the machine between the two calls drops the table of
    /// filesystems, so each is tried a few times.
    fn agrees(roots: &Roots, path: &Path) -> bool {
        let mut answered = false;
        for params in [PathParams::new(path), PathParams::new(path).no_follow()] {
            for _ in 0..3 {
                // Warms the dentry and attribute caches and reads the table.
                let slow = get_metadata(roots, params.clone());
                if let Some(fast) = cached_metadata(roots, &params) {
                    assert_eq!(Ok(fast), slow, "{params:?}");
                    answered = true;
                    break;
                }
            }
        }
        answered
    }

    #[test]
    fn cached_metadata_is_the_blocking_answer() {
        let dir = scratch();
        let unconfined = Roots::empty();
        let confined = Roots::new(std::slice::from_ref(&dir)).unwrap();
        for name in ["", "sub", "file", "link", "dirlink", "fifo", "sub/../file", "sub/"] {
            let path = dir.join(name);
            assert!(agrees(&unconfined, &path), "{path:?} unconfined");
            assert!(agrees(&confined, &path), "{path:?} confined");
        }
        for path in ["/", "/dev/null"] {
            assert!(agrees(&unconfined, Path::new(path)), "{path}");
        }
        // proc makes no file handles: never answered here, so always the same answer.
        for path in ["/proc/self", "/proc/self/status"] {
            assert!(!agrees(&unconfined, Path::new(path)), "{path}");
        }
        // Failures are never answered from the cache: the blocking call words them.
        for name in ["missing", "dangling", "out"] {
            let path = dir.join(name);
            let follow = PathParams::new(&path);
            assert_eq!(cached_metadata(&confined, &follow), None, "{path:?}");
        }
        assert_eq!(cached_metadata(&confined, &PathParams::new("/etc")), None);
        assert_eq!(cached_metadata(&unconfined, &PathParams::new("relative")), None);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
