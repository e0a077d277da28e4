//! The read-only view of the filesystem, built in the trampoline's new mount
//! namespace: every mount becomes private (a mount the host makes later never
//! arrives, with its own flags, inside) and read-only (which stops chmod,
//! chown, utime and xattr changes as well as writes), `/dev/ptmx` opens
//! `/dev/null` (no pseudo-terminal is allocated on the host), and then the
//! policy's layers go on top, a parent before what lies beneath it: each
//! writable path is a copy of itself as it was, a read-only one inside it a
//! read-only copy, and a masked one an empty read-only tmpfs (a directory)
//! or an empty read-only file, holding the mount points of what is shown
//! again beneath it. Each directory between a writable path and a read-only
//! or masked one inside it is a writable copy of itself (a pin), so that the
//! process cannot rename it and leave the carve-out's contents where a later
//! sandbox under the same list would not look. A hard link or rename between layers crosses mounts, so
//! the kernel refuses it; a mount point cannot be removed or renamed over.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use super::roots::{is_root, Kind, Layer, Roots};
use super::sys::{self, check};

const OPEN_TREE_CLONE: libc::c_uint = 1;
const AT_RECURSIVE: libc::c_uint = 0x8000;
const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const MOUNT_ATTR_NOEXEC: u64 = 0x8;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x40;
const FSOPEN_CLOEXEC: libc::c_uint = 1;
const FSCONFIG_SET_STRING: libc::c_uint = 1;
const FSCONFIG_CMD_CREATE: libc::c_uint = 6;
const FSMOUNT_CLOEXEC: libc::c_uint = 1;
/// What a mask's tmpfs may hold: the mount points of the paths shown again beneath it.
const MASK_SIZE: &std::ffi::CStr = c"64k";

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// Makes everything read-only, puts the policy's layers on top, then enters
/// `cwd` again (it must be the same directory: the mounts moved under the old one).
pub(crate) fn build(roots: &Roots, cwd: &Path) -> Result<(), String> {
    let root_writable = roots.writable.iter().any(|root| is_root(&root.path));
    let layers: Vec<Layer<'_>> = roots
        .layers()
        .into_iter()
        .filter(|layer| !is_root(&layer.opened.path))
        .map(|layer| match layer.above {
            // `/` is writable: nothing is outside it (Landlock still applies).
            None if root_writable => Layer { above: Some(Kind::Writable), ..layer },
            _ => layer,
        })
        .filter(|layer| !(layer.kind == Kind::Writable && layer.above == Some(Kind::Writable)))
        .collect();
    if root_writable && layers.is_empty() {
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
    // Copies of what the layers show, taken before anything moves.
    let mut copies = Vec::new();
    for layer in &layers {
        let copy = match layer.kind {
            Kind::Writable | Kind::Pinned => {
                Some(open_tree(&layer.opened.dir, &layer.opened.path)?)
            }
            Kind::ReadOnly => {
                let copy = open_tree(&layer.opened.dir, &layer.opened.path)?;
                set_attr(&copy, MOUNT_ATTR_RDONLY, true, &layer.opened.path)?;
                Some(copy)
            }
            Kind::Masked => None,
        };
        copies.push(copy);
    }
    let before = sys::stat_cwd()?;
    if !root_writable {
        let attr =
            MountAttr { attr_set: MOUNT_ATTR_RDONLY, attr_clr: 0, propagation: 0, userns_fd: 0 };
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
    }
    // One tmpfs holds the empty file every masked file is bound to.
    let mut empty_files = None;
    for (index, (layer, copy)) in layers.iter().zip(copies).enumerate() {
        let path = &layer.opened.path;
        let target = sys::open_nofollow(path)?;
        // Beneath a mask the target is the mount point made for it; elsewhere
        // it must still be what the policy opened.
        if layer.above != Some(Kind::Masked)
            && sys::identity(&target)? != sys::identity(&layer.opened.dir)?
        {
            return Err(format!("{} changed while the sandbox was built", path.display()));
        }
        let source = match copy {
            Some(copy) => copy,
            None => mask(layer, &layers[index + 1..], &mut empty_files)?,
        };
        move_onto(&source, &target, path)?;
    }
    let c_cwd = sys::c_path(cwd)?;
    // SAFETY: a NUL-terminated path.
    check(
        unsafe { libc::chdir(c_cwd.as_ptr()) }.into(),
        &format!("cannot enter cwd {}", cwd.display()),
    )?;
    if sys::stat_cwd()? != before {
        return Err(format!(
            "cwd {} changed while the sandbox was built, or the sandbox hides it",
            cwd.display()
        ));
    }
    Ok(())
}

/// The mount that hides `layer`'s path: an empty read-only file over a
/// file (bound from the one tmpfs `empty_files`, made at the first); over a
/// directory an empty read-only tmpfs holding a mount point for each later
/// layer whose nearest layer above is this one.
fn mask(
    layer: &Layer<'_>,
    later: &[Layer<'_>],
    empty_files: &mut Option<OwnedFd>,
) -> Result<OwnedFd, String> {
    let path = &layer.opened.path;
    let attr = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;
    if !is_dir(&layer.opened.dir, path)? {
        let files = match empty_files {
            Some(files) => files,
            None => {
                let files = new_tmpfs(path)?;
                make_file(&files, c"empty", path)?;
                set_attr(&files, attr, false, path)?;
                empty_files.insert(files)
            }
        };
        // SAFETY: a valid descriptor and a NUL-terminated name.
        let bound = unsafe {
            libc::syscall(
                libc::SYS_open_tree,
                files.as_raw_fd(),
                c"empty".as_ptr(),
                OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint,
            )
        };
        let bound = check(bound, &format!("cannot bind the file that masks {}", path.display()))?;
        // SAFETY: a new descriptor owned by nobody else.
        return Ok(unsafe { OwnedFd::from_raw_fd(bound as RawFd) });
    }
    let tmpfs = new_tmpfs(path)?;
    let shown = later.iter().filter(|inner| {
        inner.above == Some(Kind::Masked)
            && inner.opened.path.starts_with(path)
            && !later.iter().any(|between| {
                between.opened.path != inner.opened.path
                    && inner.opened.path.starts_with(&between.opened.path)
                    && between.opened.path.starts_with(path)
            })
    });
    for inner in shown {
        let rel = inner.opened.path.strip_prefix(path).unwrap_or(&inner.opened.path);
        mount_point(&tmpfs, rel, &inner.opened.dir)?;
    }
    set_attr(&tmpfs, attr, false, path)?;
    Ok(tmpfs)
}

fn is_dir(fd: &OwnedFd, path: &Path) -> Result<bool, String> {
    crate::fs::sys::fstat(std::os::fd::AsFd::as_fd(fd))
        .map(|stat| crate::fs::sys::file_type(&stat) == libc::S_IFDIR)
        .map_err(|e| format!("cannot stat {}: {e}", path.display()))
}

/// An empty file `name` in the directory `dir`, read-only.
fn make_file(dir: &OwnedFd, name: &std::ffi::CStr, path: &Path) -> Result<(), String> {
    // SAFETY: a valid directory descriptor and a NUL-terminated name.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
            0o444,
        )
    };
    check(fd.into(), &format!("cannot make the file that masks {}", path.display()))?;
    // SAFETY: closing the descriptor just made.
    unsafe { libc::close(fd) };
    Ok(())
}

/// A new, detached tmpfs, writable until its attributes are set.
fn new_tmpfs(path: &Path) -> Result<OwnedFd, String> {
    let failed = |step: &str| format!("cannot mask {}: {step}", path.display());
    // SAFETY: a NUL-terminated filesystem name.
    let fs = unsafe { libc::syscall(libc::SYS_fsopen, c"tmpfs".as_ptr(), FSOPEN_CLOEXEC) };
    let fs = check(fs, &failed("fsopen tmpfs"))?;
    // SAFETY: a new descriptor owned by nobody else.
    let fs = unsafe { OwnedFd::from_raw_fd(fs as RawFd) };
    for (key, value) in [(c"size", MASK_SIZE), (c"mode", c"0555")] {
        // SAFETY: a valid fs context, NUL-terminated key and value.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_fsconfig,
                fs.as_raw_fd(),
                FSCONFIG_SET_STRING,
                key.as_ptr(),
                value.as_ptr(),
                0,
            )
        };
        check(rc, &failed("configure tmpfs"))?;
    }
    // SAFETY: a valid fs context; no key.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            fs.as_raw_fd(),
            FSCONFIG_CMD_CREATE,
            std::ptr::null::<libc::c_char>(),
            std::ptr::null::<libc::c_void>(),
            0,
        )
    };
    check(rc, &failed("create tmpfs"))?;
    // SAFETY: a valid, created fs context.
    let mount = unsafe { libc::syscall(libc::SYS_fsmount, fs.as_raw_fd(), FSMOUNT_CLOEXEC, 0) };
    let mount = check(mount, &failed("mount tmpfs"))?;
    // SAFETY: a new descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(mount as RawFd) })
}

/// Makes `rel` inside the tmpfs `dir` (its parents as directories), a
/// directory or an empty file as `like` is.
fn mount_point(dir: &OwnedFd, rel: &Path, like: &OwnedFd) -> Result<(), String> {
    let is_dir = is_dir(like, rel)?;
    let mut at = std::path::PathBuf::new();
    let count = rel.components().count();
    for (index, part) in rel.components().enumerate() {
        at.push(part);
        let c_at = sys::c_path(&at)?;
        let last = index + 1 == count;
        // SAFETY: a valid directory descriptor and a NUL-terminated relative path.
        let rc = unsafe {
            if last && !is_dir {
                let fd = libc::openat(
                    dir.as_raw_fd(),
                    c_at.as_ptr(),
                    libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                    0o444,
                );
                if fd >= 0 {
                    libc::close(fd);
                }
                fd
            } else {
                libc::mkdirat(dir.as_raw_fd(), c_at.as_ptr(), 0o555)
            }
        };
        if rc < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST) {
            return Err(sys::failed(&format!("cannot make the mount point {}", at.display())));
        }
    }
    Ok(())
}

/// Sets `attr` on the detached mount `fd` (and those beneath it when `recursive`).
fn set_attr(fd: &OwnedFd, attr: u64, recursive: bool, path: &Path) -> Result<(), String> {
    let attr = MountAttr { attr_set: attr, attr_clr: 0, propagation: 0, userns_fd: 0 };
    let flags = libc::AT_EMPTY_PATH as libc::c_uint | if recursive { AT_RECURSIVE } else { 0 };
    // SAFETY: a valid descriptor, an empty path as AT_EMPTY_PATH says, a valid attribute.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd.as_raw_fd(),
            c"".as_ptr(),
            flags,
            &attr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    check(rc, &format!("cannot make the mount of {} read-only", path.display()))?;
    Ok(())
}

/// Attaches the detached mount `source` on `target`.
fn move_onto(source: &OwnedFd, target: &OwnedFd, path: &Path) -> Result<(), String> {
    // SAFETY: two valid descriptors and empty paths, as the flags say.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            source.as_raw_fd(),
            c"".as_ptr(),
            target.as_raw_fd(),
            c"".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    };
    check(rc, &format!("cannot mount the sandbox's view of {}", path.display()))?;
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

/// A detached copy of the mounts at and beneath `dir` (a directory or a file).
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
    let fd = check(fd, &format!("cannot copy the mounts of {}", root.display()))?;
    // SAFETY: a new descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}
