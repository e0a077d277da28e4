//! The user's shell for `environment/info`: the login shell of the passwd
//! entry (`getpwuid_r`), else bash, else zsh, else `/bin/sh`, as upstream.

use std::ffi::{CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Where bash and zsh are looked for when the passwd entry names no usable shell.
const FALLBACKS: [&str; 4] = ["/bin/bash", "/usr/bin/bash", "/bin/zsh", "/usr/bin/zsh"];
/// The shell of last resort.
const LAST_RESORT: &str = "/bin/sh";

/// The shell's native path.
pub(super) fn user_shell() -> PathBuf {
    login_shell()
        .filter(|shell| shell.is_absolute() && shell.is_file())
        .or_else(|| FALLBACKS.iter().map(PathBuf::from).find(|path| path.is_file()))
        .unwrap_or_else(|| PathBuf::from(LAST_RESORT))
}

/// The shell's name: its file name (`bash`).
pub(super) fn name(shell: &Path) -> String {
    shell.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default()
}

/// `pw_shell` of the server's real uid, when the passwd database has an entry.
fn login_shell() -> Option<PathBuf> {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let mut buffer = vec![0u8; 4096];
    loop {
        // SAFETY: an all-zero passwd is a valid value (null pointers, zero ids).
        let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: `entry`, `buffer` (with its true length) and `found` outlive
        // the call; the strings it fills in point into `buffer`.
        let status = unsafe {
            libc::getpwuid_r(uid, &mut entry, buffer.as_mut_ptr().cast(), buffer.len(), &mut found)
        };
        if status == libc::ERANGE && buffer.len() < 1 << 20 {
            buffer.resize(buffer.len() * 2, 0);
            continue;
        }
        if status != 0 || found.is_null() || entry.pw_shell.is_null() {
            return None;
        }
        // SAFETY: on success `pw_shell` is a NUL-terminated string inside `buffer`.
        let shell = unsafe { CStr::from_ptr(entry.pw_shell) };
        let shell = OsStr::from_bytes(shell.to_bytes());
        return (!shell.is_empty()).then(|| PathBuf::from(shell));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shell_is_a_native_absolute_path() {
        let shell = user_shell();
        assert!(shell.is_absolute(), "{shell:?}");
        assert_eq!(name(Path::new("/usr/bin/zsh")), "zsh");
    }
}
