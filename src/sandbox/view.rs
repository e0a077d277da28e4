//! The read-only view of the filesystem, built in the trampoline's new mount
//! namespace: every mount becomes private (a mount the host makes later never
//! arrives, with its own flags, inside) and read-only (which stops chmod,
//! chown, utime and xattr changes as well as writes), `/dev/ptmx` opens
//! `/dev/null` (no pseudo-terminal is allocated on the host), and each
//! writable root is a copy of itself as it was, attached on top. A hard link
//! or rename between a writable root and the rest crosses mounts, so the
//! kernel refuses it.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use super::roots::{is_root, Roots};
use super::sys::{self, check};

const OPEN_TREE_CLONE: libc::c_uint = 1;
const AT_RECURSIVE: libc::c_uint = 0x8000;
const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x40;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// Makes everything read-only but the writable roots, then enters `cwd` again
/// (it must be the same directory: the mounts moved under the old one).
pub(crate) fn build(roots: &Roots, cwd: &Path) -> Result<(), String> {
    let writable = roots.outermost_writable();
    if writable.iter().any(|root| is_root(&root.path)) {
        // `/` is writable: nothing is outside it (Landlock still applies).
        return Ok(());
    }
    // SAFETY: constant arguments; changes this namespace's propagation only.
    let rc = unsafe {
        libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    };
    check(
        rc.into(),
        "cannot make the sandbox's mounts private (the host's later mounts must not arrive)",
    )?;
    mask_pty_allocation()?;
    let mut copies = Vec::new();
    for root in writable {
        copies.push((root, open_tree(&root.dir, &root.path)?));
    }
    let before = sys::stat_cwd()?;
    let attr = MountAttr { attr_set: MOUNT_ATTR_RDONLY, attr_clr: 0, propagation: 0, userns_fd: 0 };
    // SAFETY: a constant path and a valid attribute of the given size.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            c"/".as_ptr(),
            AT_RECURSIVE,
            &attr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    check(rc, "cannot make the filesystem read-only")?;
    for (root, copy) in &copies {
        // SAFETY: two valid descriptors and empty paths, as the flags say.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_move_mount,
                copy.as_raw_fd(),
                c"".as_ptr(),
                root.dir.as_raw_fd(),
                c"".as_ptr(),
                MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
            )
        };
        check(rc, &format!("cannot mount writable root {}", root.path.display()))?;
    }
    let c_cwd = sys::c_path(cwd)?;
    // SAFETY: a NUL-terminated path.
    check(
        unsafe { libc::chdir(c_cwd.as_ptr()) }.into(),
        &format!("cannot enter cwd {}", cwd.display()),
    )?;
    if sys::stat_cwd()? != before {
        return Err(format!("cwd {} changed while the sandbox was built", cwd.display()));
    }
    Ok(())
}

/// The multiplexers that allocate pseudo-terminals on the host's devpts,
/// each covered by `/dev/null` (made read-only with the rest).
const PTY_MULTIPLEXERS: [&std::ffi::CStr; 2] = [c"/dev/ptmx", c"/dev/pts/ptmx"];

fn mask_pty_allocation() -> Result<(), String> {
    for target in PTY_MULTIPLEXERS {
        // SAFETY: lstat into a zeroed stat of a NUL-terminated path.
        let exists = unsafe {
            let mut stat: libc::stat = std::mem::zeroed();
            libc::lstat(target.as_ptr(), &mut stat) == 0
        };
        if !exists {
            continue;
        }
        // SAFETY: constant, NUL-terminated paths; a bind mount in this namespace.
        let rc = unsafe {
            libc::mount(
                c"/dev/null".as_ptr(),
                target.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND,
                std::ptr::null(),
            )
        };
        check(rc.into(), &format!("cannot cover {} with /dev/null", target.to_string_lossy()))?;
    }
    Ok(())
}

/// A detached copy of the mounts at and beneath `dir`.
fn open_tree(dir: &OwnedFd, root: &Path) -> Result<OwnedFd, String> {
    // SAFETY: a valid descriptor and an empty path, as AT_EMPTY_PATH says.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            dir.as_raw_fd(),
            c"".as_ptr(),
            OPEN_TREE_CLONE
                | libc::O_CLOEXEC as libc::c_uint
                | AT_RECURSIVE
                | libc::AT_EMPTY_PATH as libc::c_uint,
        )
    };
    let fd = check(fd, &format!("cannot copy the mounts of writable root {}", root.display()))?;
    // SAFETY: a new descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}
