//! Landlock through its three system calls: which ABI this kernel has, and a
//! ruleset built from a policy and applied to the calling thread (the program
//! about to be executed). Every right this ABI knows is handled; what a rule
//! does not grant is denied.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use super::roots::Roots;

const CREATE_RULESET_VERSION: u32 = 1;
const RULE_PATH_BENEATH: libc::c_int = 1;

const EXECUTE: u64 = 1 << 0;
const WRITE_FILE: u64 = 1 << 1;
const READ_FILE: u64 = 1 << 2;
const READ_DIR: u64 = 1 << 3;
/// Rights up to ABI 1: execute, read and write files, read directories, remove and make entries.
const ABI1_ALL: u64 = (1 << 13) - 1;
const REFER: u64 = 1 << 13;
const TRUNCATE: u64 = 1 << 14;
const IOCTL_DEV: u64 = 1 << 15;
const NET_BIND_TCP: u64 = 1 << 0;
const NET_CONNECT_TCP: u64 = 1 << 1;
const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
const SCOPE_SIGNAL: u64 = 1 << 1;

/// Devices every sandboxed process may read and write (besides its own terminal).
const DEVICES: [&str; 6] =
    ["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"];

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// The Landlock ABI version of this kernel; 0 when Landlock is missing or disabled.
pub(crate) fn abi() -> u32 {
    // SAFETY: the version query takes no attribute.
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(version).unwrap_or(0)
}

/// Restricts the calling thread (and what it executes) to the roots: reads
/// beneath the readable roots (everywhere when none are given), everything
/// beneath the writable roots, the usual devices and `tty`; with ABI 4 and no
/// network no TCP; with ABI 6 no signals to and no abstract sockets of
/// processes outside. Needs NoNewPrivs (or CAP_SYS_ADMIN).
pub(crate) fn restrict(
    roots: &Roots,
    network: bool,
    tty: Option<&Path>,
    abi: u32,
) -> Result<(), String> {
    let mut fs = ABI1_ALL;
    if abi >= 2 {
        fs |= REFER;
    }
    if abi >= 3 {
        fs |= TRUNCATE;
    }
    if abi >= 5 {
        fs |= IOCTL_DEV;
    }
    let net = if abi >= 4 && !network { NET_BIND_TCP | NET_CONNECT_TCP } else { 0 };
    let scoped = if abi >= 6 { SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL } else { 0 };
    let attr = RulesetAttr { handled_access_fs: fs, handled_access_net: net, scoped };
    // The attribute size tells the kernel which fields this ABI reads.
    let size = if abi >= 6 {
        std::mem::size_of::<RulesetAttr>()
    } else if abi >= 4 {
        16
    } else {
        8
    };
    // SAFETY: `attr` is a valid ruleset attribute of at least `size` bytes.
    let fd = unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, &attr, size, 0u32) };
    if fd < 0 {
        return Err(format!("cannot create a Landlock ruleset: {}", io::Error::last_os_error()));
    }
    // SAFETY: the kernel just returned this new descriptor.
    let ruleset = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let read = EXECUTE | READ_FILE | READ_DIR;
    match &roots.readable {
        None => {
            let everything = open_nofollow(Path::new("/"))?;
            allow(&ruleset, Path::new("/"), &everything, read & fs)?;
        }
        Some(readable) => {
            for root in readable {
                allow(&ruleset, &root.path, &root.dir, read & fs)?;
            }
        }
    }
    for root in &roots.writable {
        allow(&ruleset, &root.path, &root.dir, fs)?;
    }
    let device = (READ_FILE | WRITE_FILE | TRUNCATE | IOCTL_DEV) & fs;
    for path in DEVICES.iter().map(Path::new).chain(tty) {
        match open_nofollow(path) {
            Ok(fd) if is_char_device(&fd)? => allow(&ruleset, path, &fd, device)?,
            // Missing here (no /dev/tty in some containers), or not a device: no rule.
            _ => {}
        }
    }
    // SAFETY: a valid ruleset descriptor; no flags.
    if unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0u32) } != 0 {
        return Err(format!("cannot apply the Landlock ruleset: {}", io::Error::last_os_error()));
    }
    Ok(())
}

/// Grants `access` beneath the directory or file `fd` (only the file rights
/// when it is not a directory); `path` names it in errors.
fn allow(ruleset: &OwnedFd, path: &Path, fd: &OwnedFd, access: u64) -> Result<(), String> {
    let named = |e: io::Error| format!("cannot add Landlock rule for {}: {e}", path.display());
    let is_dir = file_type(fd).map_err(named)? == libc::S_IFDIR;
    let access = if is_dir {
        access
    } else {
        access & (EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV)
    };
    let rule = PathBeneathAttr { allowed_access: access, parent_fd: fd.as_raw_fd() };
    // SAFETY: a valid ruleset, rule type and attribute.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_raw_fd(),
            RULE_PATH_BENEATH,
            &rule,
            0u32,
        )
    };
    if rc != 0 {
        return Err(named(io::Error::last_os_error()));
    }
    Ok(())
}

/// `O_PATH` of `path`, following no symlink on the way or at the end.
fn open_nofollow(path: &Path) -> Result<OwnedFd, String> {
    let resolve = libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
    crate::fs::sys::openat2_path(path, libc::O_PATH | libc::O_NOFOLLOW, resolve)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))
}

fn file_type(fd: &OwnedFd) -> io::Result<libc::mode_t> {
    use std::os::fd::AsFd;
    crate::fs::sys::fstat(fd.as_fd()).map(|stat| crate::fs::sys::file_type(&stat))
}

fn is_char_device(fd: &OwnedFd) -> Result<bool, String> {
    file_type(fd).map(|t| t == libc::S_IFCHR).map_err(|e| format!("cannot stat a device: {e}"))
}
