//! The forker's wire: a request (what `posix_spawn` would get) framed as
//! length-prefixed bytes, its descriptors attached to the first byte as
//! `SCM_RIGHTS`, and the answer (a pid, or an errno).

use std::ffi::CString;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use super::super::launch::{Launch, Stdio};

/// Descriptors a request may carry: stdin, stdout, stderr, the cwd, and
/// the trampoline's life and report pipes, with room to spare.
const MAX_FDS: usize = 8;
/// The largest request: a policy of at most 120 KiB plus argv and environment
/// within what an exec would take (the kernel's ARG_MAX of 2 MiB).
const MAX_REQUEST: usize = 4 << 20;

/// How the child gets its stdio.
pub(super) enum Standard {
    /// Pipe ends, received in order: stdin (when `stdin`), stdout, stderr;
    /// without stdin it reads `/dev/null`.
    Pipes { stdin: bool },
    /// The terminal at this path, opened by the child.
    Terminal(Vec<u8>),
}

/// One request, as the forker received it.
pub(super) struct Request {
    pub(super) stdio: Standard,
    /// The cwd as a path; used when no descriptor came for it.
    pub(super) cwd: Vec<u8>,
    /// Whether a descriptor of the cwd came (after the stdio ones).
    pub(super) cwd_dir: bool,
    /// Where the extra descriptors (the last ones received) go.
    pub(super) targets: Vec<RawFd>,
    pub(super) argv: Vec<Vec<u8>>,
    pub(super) env: Vec<Vec<u8>>,
    /// Every descriptor received, in order.
    pub(super) fds: Vec<OwnedFd>,
}

impl Request {
    /// Zeroes every byte received (the descriptors close as it drops): the
    /// next child starts as a copy of the forker and must not find this
    /// start's environment (a secret, perhaps) in it.
    pub(super) fn wipe(mut self) {
        if let Standard::Terminal(slave) = &mut self.stdio {
            slave.fill(0);
        }
        for bytes in std::iter::once(&mut self.cwd).chain(&mut self.argv).chain(&mut self.env) {
            bytes.fill(0);
            std::hint::black_box(&bytes);
        }
    }
}

/// The request as a frame, and the descriptors that go with it in order;
/// None when it does not fit the forker (the trampoline is exec'd instead).
pub(super) fn encode(request: &Launch<'_>) -> Option<(Vec<u8>, Vec<RawFd>)> {
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
    body.push(u8::try_from(request.fds.len()).ok()?);
    for &(ours, theirs) in request.fds {
        fds.push(ours);
        body.extend(theirs.to_le_bytes());
    }
    put_all(&mut body, request.argv);
    put_all(&mut body, request.env);
    if fds.len() > MAX_FDS || body.len() > MAX_REQUEST {
        return None;
    }
    let mut frame = Vec::with_capacity(body.len() + 4);
    frame.extend(u32::try_from(body.len()).ok()?.to_le_bytes());
    frame.extend(body);
    Some((frame, fds))
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

/// Sends `frame` with `fds` attached to its first byte, all of it by
/// `deadline` (a socket timeout bounds each call; this bounds them together).
pub(super) fn send(
    socket: &mut UnixStream,
    frame: &[u8],
    fds: &[RawFd],
    deadline: Instant,
) -> io::Result<()> {
    if fds.len() > MAX_FDS {
        return Err(io::Error::from_raw_os_error(libc::E2BIG));
    }
    socket.set_write_timeout(Some(left(deadline)?))?;
    let mut sent = crate::fd::send_with_fds(socket.as_raw_fd(), frame, fds)?;
    while sent < frame.len() {
        socket.set_write_timeout(Some(left(deadline)?))?;
        match socket.write(&frame[sent..]) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => sent += n,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

/// The time left until `deadline`; a timeout error once it has passed.
fn left(deadline: Instant) -> io::Result<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(io::Error::from(io::ErrorKind::TimedOut));
    }
    Ok(left)
}

/// The next request; None at end of file.
pub(super) fn receive(socket: &mut UnixStream) -> io::Result<Option<Request>> {
    let mut length = [0u8; 4];
    let (got, fds) = crate::fd::receive_with_fds(socket.as_raw_fd(), &mut length)?;
    if got == 0 {
        return Ok(None);
    }
    socket.read_exact(&mut length[got..])?;
    let length = u32::from_le_bytes(length) as usize;
    if length > MAX_REQUEST {
        return Err(io::Error::from_raw_os_error(libc::E2BIG));
    }
    let mut body = vec![0; length];
    socket.read_exact(&mut body)?;
    let request = decode(&body, fds);
    body.fill(0);
    std::hint::black_box(&body);
    request.ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL)).map(Some)
}

fn decode(body: &[u8], fds: Vec<OwnedFd>) -> Option<Request> {
    let mut cursor = Cursor { body, at: 0 };
    let kind = cursor.byte()?;
    let slave = cursor.bytes()?;
    let cwd_dir = cursor.byte()? == 1;
    let cwd = cursor.bytes()?;
    let count = cursor.byte()?;
    let targets = (0..count)
        .map(|_| cursor.u32().and_then(|t| RawFd::try_from(t).ok()))
        .collect::<Option<Vec<_>>>()?;
    let argv = cursor.list()?;
    let env = cursor.list()?;
    let (stdio, standard) = match kind {
        b'p' => (Standard::Pipes { stdin: true }, 3),
        b'n' => (Standard::Pipes { stdin: false }, 2),
        b't' => (Standard::Terminal(slave), 0),
        _ => return None,
    };
    let expected = standard + usize::from(cwd_dir) + targets.len();
    (fds.len() == expected && !argv.is_empty()).then_some(Request {
        stdio,
        cwd,
        cwd_dir,
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
        let bytes = self.body.get(self.at..self.at.checked_add(4)?)?;
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

/// Answers a request: the child's pid, or -1 and why.
pub(super) fn reply(socket: &mut UnixStream, pid: i32, errno: i32) -> io::Result<()> {
    let mut bytes = [0u8; 8];
    bytes[..4].copy_from_slice(&pid.to_le_bytes());
    bytes[4..].copy_from_slice(&errno.to_le_bytes());
    socket.write_all(&bytes)
}

/// The next answer, by `deadline` (the outer error: none could be read): the
/// child's pid, or why the forker could not make it.
pub(super) fn read_reply(
    socket: &mut UnixStream,
    deadline: Instant,
) -> io::Result<io::Result<u32>> {
    let mut reply = [0u8; 8];
    let mut got = 0;
    while got < reply.len() {
        socket.set_read_timeout(Some(left(deadline)?))?;
        match socket.read(&mut reply[got..]) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
            Ok(n) => got += n,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    let [a, b, c, d, e, f, g, h] = reply;
    let pid = i32::from_le_bytes([a, b, c, d]);
    let errno = i32::from_le_bytes([e, f, g, h]);
    Ok(match u32::try_from(pid) {
        Ok(pid) if pid > 0 => Ok(pid),
        _ => Err(io::Error::from_raw_os_error(errno)),
    })
}
