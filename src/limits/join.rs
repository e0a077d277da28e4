//! The join trampoline, for cgroup v2 (where the spawning thread cannot move
//! alone): the `exec-server` binary started with a hidden first argument
//! writes `0` (itself) to the start's `cgroup.procs`, then execs the program.
//! The program is born in the cgroup's limits, and the helper counts for
//! nothing: it *is* the program after the exec. If it cannot join, nothing
//! runs: it exits 127 and says why on stderr.
//!
//! Its own environment is empty (it runs with the server's privileges); the
//! program's comes sealed at `env_fd::ENV_FD`. It applies it at the exec,
//! or, when the program is the sandbox's trampoline, leaves it there for it
//! (the mode argument: [`APPLY`] or [`PASS`]).

use std::ffi::{CStr, CString, OsString};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use super::file::c_path;

/// The hidden first argument.
pub(crate) const MARKER: &CStr = c"--exec-server-join-cgroup";
/// The mode that execs the program with the sealed environment.
const APPLY: &CStr = c"env";
/// The mode that execs the trampoline, which reads the environment itself.
const PASS: &CStr = c"pass";

/// `exe MARKER PROCS MODE PROGRAM ARGV...`: what to spawn instead of
/// `program` (the sandbox's trampoline when `trampoline`).
pub(crate) fn wrap(
    exe: &Path,
    procs: &Path,
    program: &Path,
    argv: &[CString],
    trampoline: bool,
) -> io::Result<(PathBuf, Vec<CString>)> {
    let mode = if trampoline { PASS } else { APPLY };
    let mut wrapped = vec![
        c_path(exe)?,
        CString::from(MARKER),
        c_path(procs)?,
        CString::from(mode),
        c_path(program)?,
    ];
    wrapped.extend(argv.iter().cloned());
    Ok((exe.to_path_buf(), wrapped))
}

/// Joins and execs when this process was started as the join trampoline;
/// returns at once otherwise.
pub(crate) fn run_if_joining() {
    let mut args = std::env::args_os();
    if args.nth(1).is_none_or(|first| first.as_bytes() != MARKER.to_bytes()) {
        return;
    }
    let rest: Vec<OsString> = args.collect();
    let message = match join_and_exec(rest) {
        Ok(never) => match never {},
        Err(message) => message,
    };
    eprintln!("exec-server: cannot start the program in its cgroup: {message}");
    // SAFETY: ends the process without running anything more.
    unsafe { libc::_exit(127) }
}

fn join_and_exec(rest: Vec<OsString>) -> Result<std::convert::Infallible, String> {
    let mut rest = rest.into_iter();
    let (Some(procs), Some(mode), Some(program)) = (rest.next(), rest.next(), rest.next()) else {
        return Err("no cgroup, mode or program given".to_owned());
    };
    let env = match mode.as_bytes() {
        mode if mode == APPLY.to_bytes() => crate::env_fd::take()?,
        mode if mode == PASS.to_bytes() => Vec::new(),
        _ => return Err("an unknown mode".to_owned()),
    };
    super::file::write(Path::new(&procs), "0")
        .map_err(|error| format!("cannot join {}: {error}", Path::new(&procs).display()))?;
    let program = CString::new(program.into_vec()).map_err(|_| "a NUL byte".to_owned())?;
    let argv: Vec<CString> = rest
        .map(|arg| CString::new(arg.as_bytes()).map_err(|_| "a NUL byte".to_owned()))
        .collect::<Result<_, _>>()?;
    let pointers = |strings: &[CString]| {
        let mut pointers: Vec<*const libc::c_char> = strings.iter().map(|a| a.as_ptr()).collect();
        pointers.push(std::ptr::null());
        pointers
    };
    let (argv, env) = (pointers(&argv), pointers(&env));
    // SAFETY: NUL-terminated strings and NULL-terminated arrays that outlive the call.
    unsafe { libc::execve(program.as_ptr(), argv.as_ptr(), env.as_ptr()) };
    Err(format!("cannot execute {}: {}", program.to_string_lossy(), io::Error::last_os_error()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trampoline_is_named_before_the_program() {
        let (exe, argv) = wrap(
            Path::new("/usr/bin/exec-server"),
            Path::new("/sys/fs/cgroup/s/exec-server-9/3/cgroup.procs"),
            Path::new("/bin/sh"),
            &[CString::from(c"sh"), CString::from(c"-c")],
            false,
        )
        .unwrap();
        assert_eq!(exe, Path::new("/usr/bin/exec-server"));
        let argv: Vec<&str> = argv.iter().map(|a| a.to_str().unwrap()).collect();
        assert_eq!(
            argv,
            [
                "/usr/bin/exec-server",
                "--exec-server-join-cgroup",
                "/sys/fs/cgroup/s/exec-server-9/3/cgroup.procs",
                "env",
                "/bin/sh",
                "sh",
                "-c"
            ]
        );
    }
}
