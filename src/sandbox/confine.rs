//! The program's last steps before `execve`, in the process that becomes it:
//! default signal handling, NoNewPrivs, Landlock, no capabilities, the seccomp
//! filter, and no descriptor beyond 0-2 across the exec.

use std::ffi::CString;

use super::roots::Roots;
use super::spec::Spec;
use super::sys::{self, check};
use super::{landlock, report, seccomp};

/// Confines this process and executes the program (`argv`, `env`); never returns.
pub(crate) fn exec(
    spec: &Spec,
    roots: &Roots,
    abi: u32,
    (argv, env): (&[CString], &[CString]),
) -> ! {
    if let Err(message) = confine(spec, roots, abi) {
        report::setup_failed(&message);
        // SAFETY: ends this process at once.
        unsafe { libc::_exit(126) };
    }
    let program = match sys::c_path(&spec.program) {
        Ok(program) => program,
        Err(message) => {
            report::setup_failed(&message);
            // SAFETY: ends this process at once.
            unsafe { libc::_exit(126) };
        }
    };
    let pointers = |strings: &[CString]| {
        let mut pointers: Vec<*const libc::c_char> = strings.iter().map(|a| a.as_ptr()).collect();
        pointers.push(std::ptr::null());
        pointers
    };
    let (argv, env) = (pointers(argv), pointers(env));
    if report::ready().is_err() {
        // SAFETY: ends this process at once: the server is gone.
        unsafe { libc::_exit(126) };
    }
    // SAFETY: a NUL-terminated path and NULL-terminated argv and environment
    // kept alive above.
    unsafe { libc::execve(program.as_ptr(), argv.as_ptr(), env.as_ptr()) };
    let error = std::io::Error::last_os_error();
    if spec.policy.exit_on_exec_failure {
        // The start stands (the report said ready); the process says why and exits.
        let line = format!("exec-server: cannot run {}: {error}\n", spec.program.display());
        let _ = sys::write_all(2, line.as_bytes());
    } else {
        report::exec_failed(error.raw_os_error().unwrap_or(libc::EIO));
    }
    // SAFETY: ends this process at once.
    unsafe { libc::_exit(127) }
}

fn confine(spec: &Spec, roots: &Roots, abi: u32) -> Result<(), String> {
    default_signals()?;
    reopen_stdio(spec.tty.as_deref())?;
    // SAFETY: plain prctl with integer arguments.
    check(
        unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) }.into(),
        "cannot set NoNewPrivs",
    )?;
    landlock::restrict(roots, spec.policy.network, spec.tty.as_deref(), abi)?;
    drop_capabilities()?;
    let rules = seccomp::Rules {
        network: spec.policy.network,
        confined_reads: spec.policy.readable.is_some(),
        socket_errno: if spec.policy.eperm_sockets { libc::EPERM } else { libc::EACCES },
    };
    seccomp::install(rules)?;
    // SAFETY: marks descriptors 3 and up close-on-exec; the report pipe goes with the exec.
    let rc =
        unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, libc::CLOSE_RANGE_CLOEXEC) };
    check(rc, "cannot mark inherited descriptors close-on-exec")?;
    Ok(())
}

/// Descriptors 0-2 that are `/dev/null` or the process's terminal, opened by
/// the server on the host's writable mounts, are opened again by name in the
/// view, whose mounts are read-only: `fchmod(0)`, `fchown(0)` or
/// `futimens(0)` then fail with EROFS instead of changing the host's
/// `/dev/null` or `/dev/pts/N`. Pipes are left as they are.
fn reopen_stdio(tty: Option<&std::path::Path>) -> Result<(), String> {
    let null = sys::c_path(std::path::Path::new("/dev/null"))?;
    let tty = tty.map(sys::c_path).transpose()?;
    let rdev_of = |path: &std::ffi::CStr| {
        // SAFETY: stat into a zeroed stat of a NUL-terminated path.
        unsafe {
            let mut stat: libc::stat = std::mem::zeroed();
            (libc::stat(path.as_ptr(), &mut stat) == 0).then_some(stat.st_rdev)
        }
    };
    let null_rdev = rdev_of(&null);
    let tty_rdev = tty.as_deref().and_then(rdev_of);
    for fd in 0..=2 {
        // SAFETY: fstat into a zeroed stat; EBADF for a closed descriptor.
        let stat = unsafe {
            let mut stat: libc::stat = std::mem::zeroed();
            if libc::fstat(fd, &mut stat) != 0 {
                continue;
            }
            stat
        };
        if stat.st_mode & libc::S_IFMT != libc::S_IFCHR {
            continue;
        }
        let path = if Some(stat.st_rdev) == null_rdev {
            &null
        } else if let (Some(rdev), Some(tty)) = (tty_rdev, tty.as_ref()) {
            if stat.st_rdev != rdev {
                continue;
            }
            tty
        } else {
            continue;
        };
        // SAFETY: a NUL-terminated path; the new descriptor replaces `fd`, then goes.
        unsafe {
            let again = libc::open(path.as_ptr(), libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
            check(
                again.into(),
                &format!("cannot open {} again in the sandbox", path.to_string_lossy()),
            )?;
            let moved = libc::dup2(again, fd);
            libc::close(again);
            check(
                moved.into(),
                &format!("cannot replace descriptor {fd} with {}", path.to_string_lossy()),
            )?;
        }
    }
    Ok(())
}

/// Every signal back to its default action and unblocked (the helpers ignore them).
fn default_signals() -> Result<(), String> {
    for signal in 1..=libc::SIGRTMAX() {
        if signal == libc::SIGKILL || signal == libc::SIGSTOP {
            continue;
        }
        // SAFETY: resetting a disposition; numbers the kernel rejects are skipped.
        unsafe { libc::signal(signal, libc::SIG_DFL) };
    }
    // SAFETY: an empty set, then installed as the mask.
    unsafe {
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        check(
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut()).into(),
            "cannot clear the signal mask",
        )?;
    }
    Ok(())
}

/// Empties the bounding and ambient sets, then the effective, permitted and
/// inheritable ones: nothing is regained at exec, even as uid 0.
fn drop_capabilities() -> Result<(), String> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    for capability in 0..64 {
        // SAFETY: plain prctl; EINVAL past the last capability this kernel knows.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, capability, 0, 0, 0) } != 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
                break;
            }
            return Err(sys::failed("cannot drop the capability bounding set"));
        }
    }
    // SAFETY: plain prctl.
    let rc = unsafe { libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) };
    check(rc.into(), "cannot clear the ambient capabilities")?;
    let header = Header { version: VERSION_3, pid: 0 };
    let data = [Data { effective: 0, permitted: 0, inheritable: 0 }; 2];
    // SAFETY: a version-3 header and its two data words.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &header, data.as_ptr()) };
    check(rc, "cannot drop the capabilities")?;
    Ok(())
}
