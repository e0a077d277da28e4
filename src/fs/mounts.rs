//! Which devices hold filesystems whose attributes the kernel itself owns (read from `/proc/self/mountinfo`), and whether the mount table has changed since.
//!
//! `fs/getMetadata` from the kernel's caches (`cached.rs`) reads attributes
//! with `AT_STATX_DONT_SYNC`. On a local filesystem that is the truth; on FUSE,
//! NFS or any filesystem with a server behind it, it may be stale for as long
//! as the entry stays cached. So a cached answer is only given for a file on
//! one of the [`OWNED`] filesystems, known by its device number. The table is
//! read on a blocking thread; the loop only looks it up (`try_lock`, never a
//! wait) and checks, with a zero-timeout `poll` on the open mountinfo file,
//! that no mount or unmount happened since it was read (a device number of a
//! filesystem that is gone could be reused by a new one). After a change the
//! table is dropped and read again by the next blocking call.

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

/// The devices of [`OWNED`] filesystems, read when needed.
#[derive(Debug, Default)]
pub(crate) struct OwnedDevices {
    table: Mutex<Option<Table>>,
}

#[derive(Debug)]
struct Table {
    devices: HashSet<libc::dev_t>,
    /// The mountinfo file the table was read from, polled for changes.
    watch: File,
}

impl OwnedDevices {
    /// None read yet.
    pub(crate) const fn new() -> OwnedDevices {
        OwnedDevices { table: Mutex::new(None) }
    }

    /// Whether `device` holds an [`OWNED`] filesystem and the mount table is
    /// unchanged since the table was read. Never waits: false when the table
    /// is missing, being read, or stale (it is then dropped).
    pub(crate) fn owns(&self, device: libc::dev_t) -> bool {
        let Ok(mut table) = self.table.try_lock() else { return false };
        let Some(current) = table.as_ref() else { return false };
        if changed(&current.watch) {
            *table = None;
            return false;
        }
        current.devices.contains(&device)
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
    Ok(Table { devices: owned_devices(&text), watch })
}

/// The devices of [`OWNED`] filesystems in mountinfo text: per line, the third
/// field is `major:minor` and the first after ` - ` is the filesystem type.
fn owned_devices(mountinfo: &str) -> HashSet<libc::dev_t> {
    let mut devices = HashSet::new();
    for line in mountinfo.lines() {
        let Some((mount, filesystem)) = line.split_once(" - ") else { continue };
        let Some(kind) = filesystem.split(' ').next() else { continue };
        let Some(numbers) = mount.split(' ').nth(2) else { continue };
        let Some((major, minor)) = numbers.split_once(':') else { continue };
        let (Ok(major), Ok(minor)) = (major.parse(), minor.parse()) else { continue };
        if OWNED.contains(&kind) {
            devices.insert(libc::makedev(major, minor));
        }
    }
    devices
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
junk without a separator";
        let devices = owned_devices(mountinfo);
        let expected: HashSet<_> =
            [libc::makedev(253, 0), libc::makedev(0, 21), libc::makedev(0, 47)].into();
        assert_eq!(devices, expected);
    }

    #[test]
    fn the_table_is_used_only_once_read() {
        let owned = OwnedDevices::new();
        // SAFETY: stat of a NUL-terminated path into a zeroed struct.
        let root = unsafe {
            let mut stat: libc::stat = std::mem::zeroed();
            assert_eq!(libc::stat(c"/proc/self".as_ptr(), &mut stat), 0);
            stat.st_dev
        };
        assert!(!owned.owns(root), "nothing is owned before the table is read");
        // A mount elsewhere on the machine drops the table: a few tries.
        let owned_once_read = (0..3).any(|_| {
            owned.refresh();
            owned.owns(root)
        });
        assert!(owned_once_read, "/proc is owned once the table is read");
    }
}
