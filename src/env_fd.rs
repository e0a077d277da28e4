//! The program's environment, carried past the helpers that start it.
//!
//! A helper that runs outside the sandbox (the trampoline, the cgroup join)
//! is exec'd with an environment the server chooses (empty): the client's
//! variables (`LD_PRELOAD`, `LD_LIBRARY_PATH`, `GCONV_PATH`, ...) would
//! otherwise be read by the dynamic loader and libc of a process that has the
//! server's privileges. The program's own environment travels instead in a
//! sealed memory file at [`ENV_FD`], which the last helper reads, closes and
//! hands to the program's `execve`. A memory file, not a pipe: it holds any
//! size without a reader, and, unlike the command line, no other user can
//! read it through `/proc`.

use std::ffi::CString;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Where a helper finds the program's environment.
pub(crate) const ENV_FD: RawFd = 5;

/// A sealed memory file holding `env` as `KEY=VALUE` entries, each ended by a
/// NUL byte; close-on-exec, above [`ENV_FD`] (the spawn places it there).
pub(crate) fn seal(env: &[CString]) -> io::Result<OwnedFd> {
    // SAFETY: a constant name; flags the kernel checks.
    let fd = unsafe {
        libc::memfd_create(c"exec-server-env".as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
    };
    if fd < 0 {
        let error = io::Error::last_os_error();
        return Err(io::Error::new(
            error.kind(),
            format!("cannot hold the program's environment: {error}"),
        ));
    }
    // SAFETY: a new descriptor owned by nobody else.
    let made = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut file = std::fs::File::from(crate::fd::at_least(made, ENV_FD + 1)?);
    // One write for the whole environment, not one per variable (47 writes
    // for the environment the MCP face passes on).
    let bytes = env.iter().map(|entry| entry.as_bytes_with_nul()).collect::<Vec<_>>().concat();
    file.write_all(&bytes)?;
    let seals = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
    // SAFETY: fcntl on our own descriptor with constant arguments.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(OwnedFd::from(file))
}

/// In a helper: reads the environment at [`ENV_FD`] and closes it.
pub(crate) fn take() -> Result<Vec<CString>, String> {
    // SAFETY: the descriptor the spawn placed for this helper alone; the
    // File owns it from here and closes it.
    let mut file = unsafe { std::fs::File::from_raw_fd(ENV_FD) };
    let mut bytes = Vec::new();
    // From the start: the writer's offset is shared with this descriptor.
    file.seek(SeekFrom::Start(0))
        .and_then(|_| file.read_to_end(&mut bytes))
        .map_err(|error| format!("cannot read the program's environment: {error}"))?;
    Ok(parse(&bytes))
}

/// `KEY=VALUE\0` entries back into strings (a last entry without its NUL is kept).
fn parse(bytes: &[u8]) -> Vec<CString> {
    bytes
        .split(|&b| b == 0)
        .filter(|entry| !entry.is_empty())
        .filter_map(|entry| CString::new(entry).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_come_back_as_they_went() {
        assert_eq!(
            parse(b"A=1\0PATH=/bin:/usr/bin\0EMPTY=\0"),
            [c"A=1", c"PATH=/bin:/usr/bin", c"EMPTY="].map(CString::from)
        );
        assert_eq!(parse(b""), Vec::<CString>::new());
        assert_eq!(parse(b"LAST=x"), [CString::from(c"LAST=x")]);
    }

    #[test]
    fn a_sealed_file_refuses_writes() {
        let fd = seal(&[CString::from(c"A=1")]).unwrap();
        // SAFETY: a write to our own descriptor.
        let n = unsafe { libc::pwrite(fd.as_raw_fd(), b"B".as_ptr().cast(), 1, 0) };
        assert_eq!((n, io::Error::last_os_error().raw_os_error()), (-1, Some(libc::EPERM)));
    }
}
