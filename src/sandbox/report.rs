//! How the trampoline tells the server that the program started, or why not,
//! over a pipe at descriptor [`REPORT_FD`]: `R` just before the program's
//! `execve` (the pipe closes on exec), then `X<errno>` if that exec failed
//! (also written, as `RX<errno>`, by a forker's child that could not become
//! the trampoline); or `S<message>` when the sandbox could not be built. Anything else, or
//! nothing, means the helper is not ours, and the start is refused.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use super::sys;

/// What precedes the proxy's listeners on the report socket (see `loopback`).
pub(crate) const LISTENERS: u8 = b'L';
/// Where the trampoline finds the report pipe's write end.
pub(crate) const REPORT_FD: RawFd = 4;
/// Where the trampoline finds the server's life pipe (end of file: the server is gone).
pub(crate) const LIFE_FD: RawFd = 3;
/// How long a start waits for the trampoline to report.
const REPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest report kept (a setup message).
const REPORT_LIMIT: usize = 4096;

/// Tells the server that the sandbox is built and the program is about to run.
pub(crate) fn ready() -> io::Result<()> {
    sys::write_all(REPORT_FD, b"R")
}

/// Tells the server that the program's exec failed with `errno`.
pub(crate) fn exec_failed(errno: i32) {
    let _ = sys::write_all(REPORT_FD, format!("X{errno}").as_bytes());
}

/// Tells the server that the trampoline itself could not be started with
/// `errno` (its cwd, say): read as a failed exec, which it stands for.
pub(crate) fn start_failed(errno: i32) {
    let _ = sys::write_all(REPORT_FD, format!("RX{errno}").as_bytes());
}

/// Tells the server why the sandbox could not be built.
pub(crate) fn setup_failed(message: &str) {
    let _ = sys::write_all(REPORT_FD, format!("S{message}").as_bytes());
}

/// Why a sandboxed start failed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The sandbox could not be built: a mechanism is missing or refused (-32600).
    Setup(String),
    /// The program could not be executed (-32603, as without a sandbox).
    Exec(io::Error),
}

/// The proxy's listening sockets in a sandbox whose network is a policy
/// (see `loopback`): HTTP, then SOCKS5.
#[derive(Debug)]
pub(crate) struct Listeners {
    pub(crate) http: OwnedFd,
    pub(crate) socks: OwnedFd,
}

/// Reads the trampoline's report to its end: Ok once the program runs,
/// with the proxy's listeners when it sent them.
pub(crate) fn read(report: &OwnedFd) -> Result<Option<Listeners>, Failure> {
    let deadline = Instant::now() + REPORT_TIMEOUT;
    let mut text = Vec::new();
    let mut fds = Vec::new();
    let mut buffer = [0u8; 512];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Failure::Setup(format!(
                "the sandbox helper did not report within {} s",
                REPORT_TIMEOUT.as_secs()
            )));
        }
        let mut poll = libc::pollfd { fd: report.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        let timeout = libc::c_int::try_from(left.as_millis()).unwrap_or(libc::c_int::MAX).max(1);
        // SAFETY: one valid pollfd.
        match unsafe { libc::poll(&mut poll, 1, timeout) } {
            // Nothing yet: the deadline is checked again (the read below would block).
            0 => continue,
            n if n < 0 => {
                let error = io::Error::last_os_error();
                if error.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(Failure::Setup(format!(
                    "cannot read the sandbox helper's report: {error}"
                )));
            }
            _ => {}
        }
        match crate::fd::receive_with_fds(report.as_raw_fd(), &mut buffer) {
            Ok((0, _)) => break,
            Ok((n, received)) => {
                text.extend_from_slice(&buffer[..n]);
                fds.extend(received);
                if text.len() > REPORT_LIMIT || fds.len() > 2 {
                    break;
                }
            }
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
            Err(error) => {
                return Err(Failure::Setup(format!(
                    "cannot read the sandbox helper's report: {error}"
                )))
            }
        }
    }
    match (text.split_first(), <[OwnedFd; 2]>::try_from(fds)) {
        (Some((&LISTENERS, rest)), Ok([http, socks])) => {
            parse(rest).map(|()| Some(Listeners { http, socks }))
        }
        (_, Err(fds)) if fds.is_empty() => parse(&text).map(|()| None),
        _ => Err(Failure::Setup("the sandbox helper sent a malformed report".to_owned())),
    }
}

fn parse(text: &[u8]) -> Result<(), Failure> {
    match text {
        b"R" => Ok(()),
        [b'R', b'X', errno @ ..] => {
            let errno = std::str::from_utf8(errno).ok().and_then(|e| e.parse().ok());
            Err(match errno {
                Some(errno) => Failure::Exec(io::Error::from_raw_os_error(errno)),
                None => Failure::Setup("the sandbox helper sent a malformed report".to_owned()),
            })
        }
        [b'S', message @ ..] => Err(Failure::Setup(String::from_utf8_lossy(message).into_owned())),
        [] => Err(Failure::Setup(
            "the sandbox helper ended without a report (is it the exec-server binary?)".to_owned(),
        )),
        _ => Err(Failure::Setup("the sandbox helper sent a malformed report".to_owned())),
    }
}

/// Reports why the sandbox cannot be built, and ends.
pub(crate) fn fail(message: &str) -> ! {
    setup_failed(message);
    // SAFETY: ends this process at once.
    unsafe { libc::_exit(126) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_parse() {
        assert!(parse(b"R").is_ok());
        match parse(b"RX2") {
            Err(Failure::Exec(e)) => assert_eq!(e.raw_os_error(), Some(2)),
            other => panic!("{other:?}"),
        }
        match parse(b"Sno landlock") {
            Err(Failure::Setup(m)) => assert_eq!(m, "no landlock"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(parse(b""), Err(Failure::Setup(_))));
        assert!(matches!(parse(b"RR"), Err(Failure::Setup(_))));
    }
}
