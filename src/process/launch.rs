//! The exec itself, through `posix_spawn`: glibc starts the child with
//! `clone(CLONE_VM | CLONE_VFORK)`, so the server's page tables are never
//! copied (a `fork` here cost a copy-on-write fault storm per start).
//!
//! Everything the child needs is expressed as spawn attributes and file
//! actions: a new session (`POSIX_SPAWN_SETSID`), default dispositions for the
//! signals the server ignores, stdio (dup2 of pipe ends, `/dev/null`, or the
//! terminal's slave opened without `O_NOCTTY`, which makes it the controlling
//! terminal of the new session leader), and the cwd (`fchdir` on the checked
//! directory, or `chdir`).

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// One child's stdio, as descriptors the child gets at 0, 1 and 2.
#[derive(Clone, Copy)]
pub(crate) enum Stdio<'a> {
    /// Pipe ends (stdin `None`: `/dev/null`).
    Pipes { stdin: Option<&'a OwnedFd>, stdout: &'a OwnedFd, stderr: &'a OwnedFd },
    /// The terminal at this path, opened in the child.
    Terminal(&'a CStr),
}

/// What to exec.
pub(crate) struct Launch<'a> {
    pub(crate) program: &'a Path,
    pub(crate) argv: &'a [CString],
    pub(crate) env: &'a [CString],
    pub(crate) stdio: Stdio<'a>,
    pub(crate) cwd: &'a Path,
    pub(crate) cwd_dir: Option<&'a OwnedFd>,
    /// More descriptors the child gets, as (ours, its number).
    pub(crate) fds: &'a [(RawFd, RawFd)],
}

/// Starts the child in a new session; returns its pid. Errors carry the OS
/// error of whichever step failed (glibc reports exec failures too).
pub(crate) fn launch(request: &Launch<'_>) -> io::Result<u32> {
    let path = cstring(request.program.as_os_str().as_bytes())?;
    let cwd = cstring(request.cwd.as_os_str().as_bytes())?;
    let argv = pointers(request.argv);
    let env = pointers(request.env);
    let mut actions = FileActions::new()?;
    match &request.stdio {
        Stdio::Pipes { stdin, stdout, stderr } => {
            match stdin {
                Some(stdin) => actions.dup2(stdin.as_raw_fd(), 0)?,
                None => actions.open(0, c"/dev/null", libc::O_RDONLY)?,
            }
            actions.dup2(stdout.as_raw_fd(), 1)?;
            actions.dup2(stderr.as_raw_fd(), 2)?;
        }
        Stdio::Terminal(slave) => {
            // Without O_NOCTTY: the new session leader takes it as its terminal.
            actions.open(0, slave, libc::O_RDWR)?;
            actions.dup2(0, 1)?;
            actions.dup2(0, 2)?;
        }
    }
    // The cwd before the extra descriptors, whose targets may be the number
    // the checked directory has here.
    match request.cwd_dir {
        Some(dir) => actions.fchdir(dir.as_raw_fd())?,
        None => actions.chdir(&cwd)?,
    }
    for &(from, to) in request.fds {
        actions.dup2(from, to)?;
    }
    let attributes = Attributes::new()?;
    let mut pid: libc::pid_t = 0;
    // SAFETY: every pointer is valid for the call: NUL-terminated strings and
    // NULL-terminated arrays kept alive above, initialised actions and attributes.
    let rc = unsafe {
        libc::posix_spawn(
            &mut pid,
            path.as_ptr(),
            &actions.0,
            &attributes.0,
            argv.as_ptr(),
            env.as_ptr(),
        )
    };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    u32::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))
}

fn cstring(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte"))
}

fn pointers(strings: &[CString]) -> Vec<*mut libc::c_char> {
    let mut pointers: Vec<*mut libc::c_char> =
        strings.iter().map(|s| s.as_ptr().cast_mut()).collect();
    pointers.push(std::ptr::null_mut());
    pointers
}

/// Checks a posix_spawn* return code (an errno value, not -1).
fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(rc))
    }
}

struct FileActions(libc::posix_spawn_file_actions_t);

impl FileActions {
    fn new() -> io::Result<FileActions> {
        // SAFETY: zeroed storage that init fills in.
        let mut actions: libc::posix_spawn_file_actions_t = unsafe { std::mem::zeroed() };
        // SAFETY: `actions` is valid storage.
        check(unsafe { libc::posix_spawn_file_actions_init(&mut actions) })?;
        Ok(FileActions(actions))
    }

    fn dup2(&mut self, from: RawFd, to: RawFd) -> io::Result<()> {
        // SAFETY: initialised actions; plain integers.
        check(unsafe { libc::posix_spawn_file_actions_adddup2(&mut self.0, from, to) })
    }

    fn open(&mut self, fd: RawFd, path: &CStr, flags: libc::c_int) -> io::Result<()> {
        // SAFETY: initialised actions; glibc copies the path.
        check(unsafe {
            libc::posix_spawn_file_actions_addopen(&mut self.0, fd, path.as_ptr(), flags, 0)
        })
    }

    fn fchdir(&mut self, dir: RawFd) -> io::Result<()> {
        // SAFETY: initialised actions; the descriptor stays open until spawn returns.
        check(unsafe { libc::posix_spawn_file_actions_addfchdir_np(&mut self.0, dir) })
    }

    fn chdir(&mut self, path: &CStr) -> io::Result<()> {
        // SAFETY: initialised actions; glibc copies the path.
        check(unsafe { libc::posix_spawn_file_actions_addchdir_np(&mut self.0, path.as_ptr()) })
    }
}

impl Drop for FileActions {
    fn drop(&mut self) {
        // SAFETY: initialised in `new`, destroyed once.
        unsafe { libc::posix_spawn_file_actions_destroy(&mut self.0) };
    }
}

struct Attributes(libc::posix_spawnattr_t);

impl Attributes {
    /// A new session, an empty signal mask, and every signal's default
    /// disposition: children start clean even when the server was started
    /// ignoring some (SIGPIPE in a Rust program; SIGINT and SIGQUIT under
    /// `nohup` or as a background job of a script).
    fn new() -> io::Result<Attributes> {
        // SAFETY: zeroed storage that init fills in.
        let mut attributes: libc::posix_spawnattr_t = unsafe { std::mem::zeroed() };
        // SAFETY: `attributes` is valid storage.
        check(unsafe { libc::posix_spawnattr_init(&mut attributes) })?;
        let mut attributes = Attributes(attributes);
        // SAFETY: sigset_t is plain data, filled in by sigemptyset.
        let mut empty: libc::sigset_t = unsafe { std::mem::zeroed() };
        let mut defaults: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: valid sigset storage; valid signal numbers; a sigset_t is
        // at least one u64 of signal bits, suitably aligned.
        unsafe {
            libc::sigemptyset(&mut empty);
            libc::sigfillset(&mut defaults);
            libc::sigdelset(&mut defaults, libc::SIGKILL);
            libc::sigdelset(&mut defaults, libc::SIGSTOP);
            // glibc's full set leaves out its two internal signals (32 and
            // 33), and its spawn otherwise leaves them ignored, which exec
            // keeps: set their bits by hand (signal n is bit n - 1 of the
            // set's first word on Linux).
            *(&mut defaults as *mut libc::sigset_t).cast::<u64>() |= (1 << 31) | (1 << 32);
        }
        let flags = libc::POSIX_SPAWN_SETSID
            | libc::POSIX_SPAWN_SETSIGMASK as libc::c_short
            | libc::POSIX_SPAWN_SETSIGDEF as libc::c_short;
        // SAFETY: initialised attributes; the sets are valid and copied.
        unsafe {
            check(libc::posix_spawnattr_setsigmask(&mut attributes.0, &empty))?;
            check(libc::posix_spawnattr_setsigdefault(&mut attributes.0, &defaults))?;
            check(libc::posix_spawnattr_setflags(&mut attributes.0, flags))?;
        }
        Ok(attributes)
    }
}

impl Drop for Attributes {
    fn drop(&mut self) {
        // SAFETY: initialised in `new`, destroyed once.
        unsafe { libc::posix_spawnattr_destroy(&mut self.0) };
    }
}
