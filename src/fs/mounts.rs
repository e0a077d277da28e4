//! Which mounts hold filesystems whose attributes the kernel itself owns (read from `/proc/self/mountinfo`), and whether the mount table has changed since.
//!
//! `fs/getMetadata` from the kernel's caches (`cached.rs`) reads attributes
//! with `AT_STATX_DONT_SYNC`. On a local filesystem that is the truth; on FUSE,
//! NFS or any filesystem with a server behind it, it may be stale for as long
//! as the entry stays cached, and some (9p) may even ask their server. So the
//! loop only stats a file on one of the [`OWNED`] filesystems, known by the
//! mount id of its `O_PATH` descriptor ([`mount_id`], which asks no server)
//! before any `statx`. The table is read on a blocking thread;
//! the loop only looks it up (`try_lock`, never a wait) and checks, with a
//! zero-timeout `poll` on the open mountinfo file, that no mount or unmount
//! happened since it was read (a mount id that is gone could be reused by a
//! new mount). After a change the table is dropped and read again by the
//! next blocking call.

use std::collections::HashSet;
use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::sync::Mutex;

/// Filesystems with no server behind them: their cached attributes are the attributes.
const OWNED: &[&str] = &[
    "ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "bcachefs", "erofs", "squashfs", "iso9660",
    "vfat", "exfat", "tmpfs", "ramfs", "devtmpfs", "proc", "sysfs",
];

/// The mount ids of [`OWNED`] filesystems, read when needed.
#[derive(Debug, Default)]
pub(crate) struct OwnedMounts {
    table: Mutex<Option<Table>>,
}

#[derive(Debug)]
struct Table {
    mounts: HashSet<u64>,
    /// The mountinfo file the table was read from, polled for changes.
    watch: File,
}

impl OwnedMounts {
    /// None read yet.
    pub(crate) const fn new() -> OwnedMounts {
        OwnedMounts { table: Mutex::new(None) }
    }

    /// Whether the mount `mount_id` holds an [`OWNED`] filesystem and the
    /// mount table is unchanged since the table was read. Never waits: false
    /// when the table is missing, being read, or stale (it is then dropped).
    pub(crate) fn owns(&self, mount_id: u64) -> bool {
        let Ok(mut table) = self.table.try_lock() else { return false };
        let Some(current) = table.as_ref() else { return false };
        if changed(&current.watch) {
            *table = None;
            return false;
        }
        current.mounts.contains(&mount_id)
    }

    /// Reads the table if there is none (on a blocking thread: it reads /proc).
    pub(crate) fn refresh(&self) {
        let mut table = self.table.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if table.is_none() {
            *table = read().ok();
        }
    }
}

/// Whether the mount table changed since `watch` was opened or last reported
/// a change (mountinfo is pollable: POLLPRI | POLLERR on a change).
fn changed(watch: &File) -> bool {
    let mut poll = libc::pollfd { fd: watch.as_raw_fd(), events: libc::POLLPRI, revents: 0 };
    // SAFETY: one valid pollfd for a descriptor `watch` owns; zero timeout.
    // Anything but "nothing happened" (a change, an error) counts as a change.
    unsafe { libc::poll(&mut poll, 1, 0) != 0 }
}

fn read() -> std::io::Result<Table> {
    let mut watch = File::open("/proc/self/mountinfo")?;
    let mut text = String::new();
    watch.read_to_string(&mut text)?;
    Ok(Table { mounts: owned_mounts(&text), watch })
}

/// The mount ids of [`OWNED`] filesystems in mountinfo text: per line, the
/// first field is the mount id and the first after ` - ` the filesystem type.
fn owned_mounts(mountinfo: &str) -> HashSet<u64> {
    let mut mounts = HashSet::new();
    for line in mountinfo.lines() {
        let Some((mount, filesystem)) = line.split_once(" - ") else { continue };
        let Some(kind) = filesystem.split(' ').next() else { continue };
        let Some(Ok(id)) = mount.split(' ').next().map(str::parse) else { continue };
        if OWNED.contains(&kind) {
            mounts.insert(id);
        }
    }
    mounts
}

/// The mount id of an open descriptor, from `name_to_handle_at` with no room
/// for the handle: the kernel fills in the mount id and reports the size the
/// handle would need (EOVERFLOW). It asks no server (handles are encoded from
/// the in-memory inode); a filesystem that cannot make handles at all (proc,
/// sysfs, 9p) gives None, and the call takes the ordinary path.
pub(crate) fn mount_id(fd: std::os::fd::BorrowedFd<'_>) -> Option<u64> {
    /// `struct file_handle` without its variable part.
    #[repr(C)]
    struct HandleHead {
        handle_bytes: u32,
        handle_type: i32,
    }
    let mut head = HandleHead { handle_bytes: 0, handle_type: 0 };
    let mut mount: libc::c_int = -1;
    // SAFETY: the kernel writes the 8-byte head (handle_bytes is 0, so no more)
    // and one int; the path is an empty NUL-terminated string with AT_EMPTY_PATH.
    let done = unsafe {
        libc::syscall(
            libc::SYS_name_to_handle_at,
            fd.as_raw_fd(),
            c"".as_ptr(),
            &mut head as *mut HandleHead,
            &mut mount as *mut libc::c_int,
            libc::AT_EMPTY_PATH,
        )
    };
    let sized =
        done == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EOVERFLOW);
    (sized && mount >= 0).then_some(mount as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_filesystems_without_a_server_are_owned() {
        let mountinfo = "\
22 1 253:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
23 22 0:21 / /proc rw,nosuid shared:2 - proc proc rw
24 22 0:45 / /mnt/fuse rw,nosuid shared:3 - fuse.sshfs me@host:/ rw
25 22 0:46 / /mnt/nfs rw shared:4 - nfs4 host:/export rw
26 22 0:47 / /tmp rw shared:5 - tmpfs tmpfs rw
27 22 8:17 / /media/ntfs rw shared:6 - fuseblk /dev/sdb1 rw
28 22 0:48 / /merged rw - overlay overlay rw
29 22 0:49 / /mnt/9p rw - 9p host rw
junk without a separator";
        assert_eq!(owned_mounts(mountinfo), HashSet::from([22, 23, 26]));
    }

    #[test]
    fn the_table_is_used_only_once_read() {
        let owned = OwnedMounts::new();
        let root = File::open("/").unwrap();
        let id = mount_id(std::os::fd::AsFd::as_fd(&root)).unwrap();
        assert!(!owned.owns(id), "nothing is owned before the table is read");
        // A mount elsewhere on the machine drops the table: a few tries.
        let owned_once_read = (0..3).any(|_| {
            owned.refresh();
            owned.owns(id)
        });
        assert!(owned_once_read, "/ (ext4 or the like) is owned once the table is read");
    }
}
