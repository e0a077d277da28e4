//! The forker: a resident copy of this binary that starts sandbox
//! trampolines by `clone` instead of an exec each.
//!
//! A sandboxed start used to `posix_spawn` this whole binary as the
//! trampoline: loading, relocating and starting an 11 MB program is most of
//! what a sandboxed `true` costs. The forker is exec'd once, on the first
//! sandboxed start, and stays single-threaded for life, so it may fork freely.
//! For each start the server sends it the same [`Launch`] `posix_spawn` would
//! get (argv, environment, cwd, stdio and the descriptors to place, the latter
//! as `SCM_RIGHTS`); the forker clones a child with `CLONE_PARENT`, so the
//! child is the server's own (waited, signalled and watched exactly as a
//! spawned one), and answers with its pid. The child does what the spawn
//! attributes and file actions would have done (new session, default signals,
//! empty mask, descriptors, terminal, cwd, environment) and then runs the
//! trampoline's `main` in place of an exec of it.
//!
//! It ends when the server's end of its socket closes, however the server
//! ended. When it cannot be started or has gone, the caller execs the
//! trampoline as before; a request it took and did not answer is an error,
//! never a second try (a child may exist).

use std::ffi::{CStr, CString, OsString};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Mutex;

use super::launch::{self, Launch, Stdio};

/// The hidden first argument that runs this binary as the forker.
pub(crate) const MARKER: &CStr = c"--exec-server-sandbox-forker";
/// Where the forker finds its socket.
const SOCKET_FD: RawFd = 3;
/// Descriptors a request may carry: stdin, stdout, stderr, the cwd, and
/// the trampoline's life and report pipes, with room to spare.
const MAX_FDS: usize = 8;
/// The largest request: a policy of at most 120 KiB plus argv and environment
/// within what an exec would take (the kernel's ARG_MAX of 2 MiB).
const MAX_REQUEST: usize = 4 << 20;
/// Where the child parks received descriptors while it places them.
const PARK_FROM: RawFd = 64;
/// The forker's first word: it runs and is ours.
const HELLO: [u8; 1] = *b"F";
/// How long the server waits for the forker to start, or to answer a request
/// (a clone takes well under a millisecond). The registry stays locked while
/// it waits (a child must be registered before it can be reaped), so a
/// forker that does not answer (stopped, say) is killed after this, and every
/// later start execs.
const ANSWER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// The server's end: its socket, or why there is none.
static FORKER: Mutex<State> = Mutex::new(State::NotStarted);

enum State {
    NotStarted,
    Running {
        socket: UnixStream,
        pid: u32,
    },
    /// It could not be started or has ended: every start execs.
    Gone,
}

/// Starts the trampoline `request` describes through the forker; None when no
/// forker runs (the caller `posix_spawn`s it instead). The caller holds the
/// registry locked for the spawn, so the child cannot be reaped unregistered.
pub(crate) fn launch(request: &Launch<'_>) -> Option<io::Result<u32>> {
    let mut state = FORKER.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let State::NotStarted = *state {
        *state = match start() {
            Ok((socket, pid)) => State::Running { socket, pid },
            Err(error) => {
                tracing::debug!(%error, "no sandbox forker; trampolines are exec'd");
                State::Gone
            }
        };
    }
    let State::Running { socket, pid } = &mut *state else { return None };
    let forker = *pid;
    let (body, fds) = match encode(request) {
        Ok(encoded) => encoded,
        Err(error) => return Some(Err(error)),
    };
    if body.len() > MAX_REQUEST {
        return None;
    }
    if let Err(error) = send(socket, &body, &fds) {
        tracing::debug!(%error, "the sandbox forker is gone; trampolines are exec'd");
        *state = State::Gone;
        return None;
    }
    let mut reply = [0u8; 8];
    if let Err(error) = socket.read_exact(&mut reply) {
        *state = State::Gone;
        kill(forker);
        let stuck = matches!(error.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut);
        return Some(Err(match stuck {
            true => io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the sandbox forker did not answer within {} s (it was killed; later starts exec the trampoline)",
                    ANSWER_TIMEOUT.as_secs()
                ),
            ),
            false => io::Error::new(error.kind(), format!("the sandbox forker ended: {error}")),
        }));
    }
    Some(decode_reply(reply))
}

/// Kills the forker, our own child, unreaped: the orphan reaper (which reaps
/// it later) waits for the registry lock the caller of [`launch`] holds.
fn kill(pid: u32) {
    // SAFETY: a signal to our own unreaped child (see above).
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
}

/// The forker: this binary again with `SOCKET_FD` as its end of the socket,
/// once it has said it is one (a program embedding the server that does not
/// run [`run_if_forker`] never does, and is killed).
fn start() -> io::Result<(UnixStream, u32)> {
    let (mut ours, theirs) = UnixStream::pair()?;
    ours.set_read_timeout(Some(ANSWER_TIMEOUT))?;
    let null = OwnedFd::from(std::fs::File::options().read(true).write(true).open("/dev/null")?);
    let argv = [CString::from(c"exec-server-fork"), CString::from(MARKER)];
    let pid = launch::launch(&Launch {
        program: Path::new("/proc/self/exe"),
        argv: &argv,
        env: &[],
        stdio: Stdio::Pipes { stdin: None, stdout: &null, stderr: &null },
        cwd: Path::new("/"),
        cwd_dir: None,
        fds: &[(theirs.as_raw_fd(), SOCKET_FD)],
    })?;
    drop(theirs);
    let mut hello = [0u8; 1];
    match ours.read_exact(&mut hello) {
        Ok(()) if hello == HELLO => Ok((ours, pid)),
        answer => {
            kill(pid);
            Err(answer.err().unwrap_or_else(|| io::Error::other("not a sandbox forker")))
        }
    }
}

/// The request as bytes, and the descriptors that go with it in order.
fn encode(request: &Launch<'_>) -> io::Result<(Vec<u8>, Vec<RawFd>)> {
    let mut body = Vec::new();
    let mut fds = Vec::new();
    match &request.stdio {
        Stdio::Pipes { stdin, stdout, stderr } => {
            body.push(if stdin.is_some() { b'p' } else { b'n' });
            fds.extend(stdin.map(|fd| fd.as_raw_fd()));
            fds.extend([stdout.as_raw_fd(), stderr.as_raw_fd()]);
            put(&mut body, b"");
        }
        Stdio::Terminal(slave) => {
            body.push(b't');
            put(&mut body, slave.to_bytes());
        }
    }
    body.push(u8::from(request.cwd_dir.is_some()));
    fds.extend(request.cwd_dir.map(|dir| dir.as_raw_fd()));
    put(&mut body, request.cwd.as_os_str().as_encoded_bytes());
    body.push(u8::try_from(request.fds.len()).map_err(|_| io::Error::other("too many fds"))?);
    for &(ours, theirs) in request.fds {
        fds.push(ours);
        body.extend(theirs.to_le_bytes());
    }
    put_all(&mut body, request.argv);
    put_all(&mut body, request.env);
    if fds.len() > MAX_FDS {
        return Err(io::Error::other("too many descriptors for the sandbox forker"));
    }
    let mut framed = Vec::with_capacity(body.len() + 4);
    framed.extend(u32::try_from(body.len()).unwrap_or(u32::MAX).to_le_bytes());
    framed.extend(body);
    Ok((framed, fds))
}

fn put(body: &mut Vec<u8>, bytes: &[u8]) {
    body.extend(u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_le_bytes());
    body.extend(bytes);
}

fn put_all(body: &mut Vec<u8>, strings: &[CString]) {
    body.extend(u32::try_from(strings.len()).unwrap_or(u32::MAX).to_le_bytes());
    for string in strings {
        put(body, string.as_bytes());
    }
}

/// Sends `body` with `fds` attached to its first byte.
fn send(socket: &mut UnixStream, body: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let sent = send_with_fds(socket.as_raw_fd(), body, fds)?;
    socket.write_all(&body[sent..])
}

fn send_with_fds(socket: RawFd, body: &[u8], fds: &[RawFd]) -> io::Result<usize> {
    let mut iov = libc::iovec { iov_base: body.as_ptr().cast_mut().cast(), iov_len: body.len() };
    let mut control = [0u64; control_words()];
    // SAFETY: msghdr is plain data; every pointer set below outlives the call.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = &mut iov;
    message.msg_iovlen = 1;
    if !fds.is_empty() {
        let payload = std::mem::size_of_val(fds);
        message.msg_control = control.as_mut_ptr().cast();
        // SAFETY: CMSG_SPACE computes a size from a length.
        message.msg_controllen = unsafe { libc::CMSG_SPACE(payload as u32) } as usize;
        // SAFETY: the control buffer holds CMSG_SPACE(payload) bytes (MAX_FDS
        // at most, checked by the caller), aligned for cmsghdr.
        unsafe {
            let header = libc::CMSG_FIRSTHDR(&message);
            (*header).cmsg_level = libc::SOL_SOCKET;
            (*header).cmsg_type = libc::SCM_RIGHTS;
            (*header).cmsg_len = libc::CMSG_LEN(payload as u32) as usize;
            std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(header).cast(), fds.len());
        }
    }
    loop {
        // SAFETY: a valid message over live buffers.
        let sent = unsafe { libc::sendmsg(socket, &message, libc::MSG_NOSIGNAL) };
        if sent >= 0 {
            return Ok(sent as usize);
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

const fn control_words() -> usize {
    // CMSG_SPACE of MAX_FDS descriptors, in u64 words, with room for the header.
    (MAX_FDS * 4 + 32) / 8
}

fn decode_reply(reply: [u8; 8]) -> io::Result<u32> {
    let [a, b, c, d, e, f, g, h] = reply;
    let pid = i32::from_le_bytes([a, b, c, d]);
    let errno = i32::from_le_bytes([e, f, g, h]);
    match u32::try_from(pid) {
        Ok(pid) if pid > 0 => Ok(pid),
        _ => Err(io::Error::from_raw_os_error(errno)),
    }
}

/// Runs as the forker when this process was started as one; returns otherwise.
pub(crate) fn run_if_forker() {
    use std::os::unix::ffi::OsStrExt;
    if std::env::args_os().nth(1).is_none_or(|first| first.as_bytes() != MARKER.to_bytes()) {
        return;
    }
    // SAFETY: closes what this process inherited beyond its socket.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, c"exec-server-fk".as_ptr());
        if libc::syscall(libc::SYS_close_range, 4u32, u32::MAX, 0u32) == -1 {
            for fd in 4..1024 {
                libc::close(fd);
            }
        }
    }
    // SAFETY: the socket stays open for the forker's life; ManuallyDrop keeps it so.
    let mut socket = std::mem::ManuallyDrop::new(unsafe { UnixStream::from_raw_fd(SOCKET_FD) });
    if socket.write_all(&HELLO).is_ok() {
        serve(SOCKET_FD);
    }
    // SAFETY: ends the process without running anything more.
    unsafe { libc::_exit(0) }
}

/// One request, as the forker received it.
struct Request {
    stdio: u8,
    slave: Vec<u8>,
    cwd_dir: bool,
    cwd: Vec<u8>,
    targets: Vec<RawFd>,
    argv: Vec<Vec<u8>>,
    env: Vec<Vec<u8>>,
    fds: Vec<OwnedFd>,
}

impl Request {
    /// Zeroes every byte received (the descriptors close as it drops).
    fn wipe(mut self) {
        for bytes in
            [&mut self.slave, &mut self.cwd].into_iter().chain(&mut self.argv).chain(&mut self.env)
        {
            bytes.fill(0);
            std::hint::black_box(&bytes);
        }
    }
}

fn serve(socket: RawFd) {
    loop {
        let request = match receive(socket) {
            Ok(Some(request)) => request,
            Ok(None) => return,
            Err(error) => {
                let _ = reply(socket, -1, error.raw_os_error().unwrap_or(libc::EINVAL));
                return;
            }
        };
        // SAFETY: this process is single-threaded; the child runs only
        // `become_trampoline` (plain syscalls, then the trampoline's main).
        let pid = unsafe {
            libc::syscall(
                libc::SYS_clone,
                libc::CLONE_PARENT | libc::SIGCHLD,
                0usize,
                0usize,
                0usize,
                0usize,
            )
        };
        match pid {
            0 => become_trampoline(socket, request),
            -1 => {
                let errno = io::Error::last_os_error().raw_os_error().unwrap_or(libc::EAGAIN);
                request.wipe();
                if reply(socket, -1, errno).is_err() {
                    return;
                }
            }
            pid => {
                // The next child starts as a copy of this process: it must
                // not find this start's environment (a secret, perhaps) in it.
                request.wipe();
                if reply(socket, i32::try_from(pid).unwrap_or(-1), 0).is_err() {
                    return;
                }
            }
        }
    }
}

fn reply(socket: RawFd, pid: i32, errno: i32) -> io::Result<()> {
    let mut bytes = [0u8; 8];
    bytes[..4].copy_from_slice(&pid.to_le_bytes());
    bytes[4..].copy_from_slice(&errno.to_le_bytes());
    // SAFETY: the socket stays open for the forker's life; ManuallyDrop keeps it so.
    let mut stream = std::mem::ManuallyDrop::new(unsafe { UnixStream::from_raw_fd(socket) });
    stream.write_all(&bytes)
}

/// The next request; None at end of file.
fn receive(socket: RawFd) -> io::Result<Option<Request>> {
    let mut length = [0u8; 4];
    let mut control = [0u64; control_words()];
    let mut iov = libc::iovec { iov_base: length.as_mut_ptr().cast(), iov_len: length.len() };
    // SAFETY: msghdr is plain data; the pointers set below outlive the call.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = &mut iov;
    message.msg_iovlen = 1;
    message.msg_control = control.as_mut_ptr().cast();
    message.msg_controllen = std::mem::size_of_val(&control);
    let got = loop {
        // SAFETY: a valid message over live buffers; received descriptors are close-on-exec.
        let got = unsafe { libc::recvmsg(socket, &mut message, libc::MSG_CMSG_CLOEXEC) };
        if got >= 0 {
            break got as usize;
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    };
    if got == 0 {
        return Ok(None);
    }
    let fds = received_fds(&message);
    // SAFETY: the socket stays open for the forker's life; ManuallyDrop keeps it so.
    let mut stream = std::mem::ManuallyDrop::new(unsafe { UnixStream::from_raw_fd(socket) });
    stream.read_exact(&mut length[got..])?;
    let length = u32::from_le_bytes(length) as usize;
    if length > MAX_REQUEST {
        return Err(io::Error::from_raw_os_error(libc::E2BIG));
    }
    let mut body = vec![0; length];
    stream.read_exact(&mut body)?;
    let request = decode(&body, fds);
    body.fill(0);
    std::hint::black_box(&body);
    request.ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL)).map(Some)
}

fn received_fds(message: &libc::msghdr) -> Vec<OwnedFd> {
    let mut fds = Vec::new();
    // SAFETY: walks the control messages recvmsg filled in, within msg_controllen.
    unsafe {
        let mut header = libc::CMSG_FIRSTHDR(message);
        while !header.is_null() {
            if (*header).cmsg_level == libc::SOL_SOCKET && (*header).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(header).cast::<RawFd>();
                let count = ((*header).cmsg_len - libc::CMSG_LEN(0) as usize) / 4;
                for i in 0..count {
                    fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            header = libc::CMSG_NXTHDR(message, header);
        }
    }
    fds
}

fn decode(body: &[u8], fds: Vec<OwnedFd>) -> Option<Request> {
    let mut cursor = Cursor { body, at: 0 };
    let stdio = cursor.byte()?;
    let slave = cursor.bytes()?;
    let cwd_dir = cursor.byte()? == 1;
    let cwd = cursor.bytes()?;
    let count = cursor.byte()?;
    let targets =
        (0..count).map(|_| cursor.u32().map(|t| t as RawFd)).collect::<Option<Vec<_>>>()?;
    let argv = cursor.list()?;
    let env = cursor.list()?;
    let expected = match stdio {
        b'p' => 3,
        b'n' => 2,
        b't' => 0,
        _ => return None,
    } + usize::from(cwd_dir)
        + targets.len();
    (fds.len() == expected && !argv.is_empty()).then_some(Request {
        stdio,
        slave,
        cwd_dir,
        cwd,
        targets,
        argv,
        env,
        fds,
    })
}

struct Cursor<'a> {
    body: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn byte(&mut self) -> Option<u8> {
        let value = *self.body.get(self.at)?;
        self.at += 1;
        Some(value)
    }

    fn u32(&mut self) -> Option<u32> {
        let bytes = self.body.get(self.at..self.at + 4)?;
        self.at += 4;
        Some(u32::from_le_bytes(bytes.try_into().ok()?))
    }

    fn bytes(&mut self) -> Option<Vec<u8>> {
        let length = self.u32()? as usize;
        let bytes = self.body.get(self.at..self.at.checked_add(length)?)?;
        self.at += length;
        Some(bytes.to_vec())
    }

    fn list(&mut self) -> Option<Vec<Vec<u8>>> {
        let count = self.u32()?;
        (0..count).map(|_| self.bytes()).collect()
    }
}

/// In the cloned child: what `posix_spawn`'s attributes and file actions
/// would have done, then the trampoline; never returns.
fn become_trampoline(socket: RawFd, request: Request) -> ! {
    let Request { stdio, slave, cwd_dir, cwd, targets, argv, env, fds } = request;
    // SAFETY: single-threaded child; plain syscalls on its own descriptors,
    // session, signals and directory.
    let placed = unsafe {
        libc::prctl(libc::PR_SET_NAME, c"exec-server-sb".as_ptr());
        libc::setsid();
        default_signals();
        // Park every received descriptor above the ones being placed.
        let parked: Vec<RawFd> = fds
            .iter()
            .map(|fd| libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, PARK_FROM))
            .collect();
        drop(fds);
        libc::close(socket);
        place(stdio, &slave, cwd_dir, &cwd, &targets, &parked)
    };
    if let Err(errno) = placed {
        // The report pipe says why, as a failed exec would.
        crate::sandbox::report_start_failure(errno);
        // SAFETY: ends the child at once.
        unsafe { libc::_exit(127) }
    }
    set_environment(env);
    let args = argv.into_iter().map(OsString::from_vec).collect();
    crate::sandbox::run_trampoline(args)
}

/// Places the parked descriptors: stdio, then the extra ones, and the cwd.
///
/// # Safety
/// Only in the single-threaded child, whose descriptors these are.
unsafe fn place(
    stdio: u8,
    slave: &[u8],
    cwd_dir: bool,
    cwd: &[u8],
    targets: &[RawFd],
    parked: &[RawFd],
) -> Result<(), i32> {
    let errno = || io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
    let check = |rc: libc::c_int| if rc == -1 { Err(errno()) } else { Ok(()) };
    if parked.iter().any(|&fd| fd < 0) {
        return Err(errno());
    }
    let mut next = parked.iter().copied();
    let mut take = || next.next().ok_or(libc::EINVAL);
    // SAFETY: the caller's contract: descriptors of this single-threaded child.
    unsafe {
        match stdio {
            b't' => {
                let path = CString::new(slave).map_err(|_| libc::EINVAL)?;
                // Without O_NOCTTY: the new session leader takes it as its terminal.
                let fd = libc::open(path.as_ptr(), libc::O_RDWR);
                check(fd)?;
                for target in 0..3 {
                    if fd != target {
                        check(libc::dup2(fd, target))?;
                    }
                }
                if fd > 2 {
                    libc::close(fd);
                }
            }
            with_stdin => {
                if with_stdin == b'p' {
                    check(libc::dup2(take()?, 0))?;
                } else {
                    let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY);
                    check(null)?;
                    if null != 0 {
                        check(libc::dup2(null, 0))?;
                        libc::close(null);
                    }
                }
                check(libc::dup2(take()?, 1))?;
                check(libc::dup2(take()?, 2))?;
            }
        }
        let dir = if cwd_dir { Some(take()?) } else { None };
        // The report pipe first: a cwd that fails is reported through it.
        for &target in targets {
            check(libc::dup2(take()?, target))?;
        }
        match dir {
            Some(dir) => check(libc::fchdir(dir))?,
            None => {
                let path = CString::new(cwd).map_err(|_| libc::EINVAL)?;
                check(libc::chdir(path.as_ptr()))?;
            }
        }
        for &fd in parked {
            libc::close(fd);
        }
    }
    Ok(())
}

/// Every signal to its default action, none blocked: as the spawn attributes.
///
/// # Safety
/// Only in the single-threaded child.
unsafe fn default_signals() {
    // SAFETY: the caller's contract; valid signal numbers and sets.
    unsafe {
        for signal in 1..=64 {
            if signal != libc::SIGKILL && signal != libc::SIGSTOP {
                libc::signal(signal, libc::SIG_DFL);
            }
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
    }
}

extern "C" {
    static mut environ: *const *const libc::c_char;
}

/// Makes `env` the environment the program is exec'd with (leaked: the child
/// execs or exits).
fn set_environment(env: Vec<Vec<u8>>) {
    let strings: Vec<CString> =
        env.into_iter().filter_map(|entry| CString::new(entry).ok()).collect();
    let mut pointers: Vec<*const libc::c_char> = strings.iter().map(|s| s.as_ptr()).collect();
    pointers.push(std::ptr::null());
    std::mem::forget(strings);
    let pointers = pointers.leak();
    // SAFETY: single-threaded child; the array and its strings live forever.
    unsafe { environ = pointers.as_ptr() };
}
