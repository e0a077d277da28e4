//! `--connect unix:PATH`: a byte bridge between stdio and a daemon's socket,
//! the command `ssh host exec-server --connect unix:PATH` runs.
//!
//! It needs none of the server's machinery (no runtime, no watcher): two
//! threads copy bytes, stdin to the socket and the socket to stdout. At
//! stdin's end the socket's write side is shut, so the daemon sees the
//! client's EOF (and detaches the session); the bridge exits when the socket
//! reaches its end or stdout is gone. With `--spawn-daemon`, a path where
//! nothing answers gets a daemon first: this binary with `--listen unix:PATH`
//! and the same server flags, in a session of its own, its stderr appended to
//! `PATH.log`.

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::FromRawFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// How long a spawned daemon gets to start answering.
const DAEMON_START: Duration = Duration::from_secs(10);

/// Bridges stdio to the daemon at `path` until either side ends.
pub(crate) fn run(path: &Path, spawn_daemon: bool, daemon_args: Vec<OsString>) -> ExitCode {
    let stream = match connect(path, spawn_daemon, daemon_args) {
        Ok(stream) => stream,
        Err(error) => {
            eprintln!("exec-server: {error}");
            return ExitCode::FAILURE;
        }
    };
    let to_daemon = match stream.try_clone() {
        Ok(stream) => stream,
        Err(error) => {
            eprintln!("exec-server: cannot duplicate the socket of {}: {error}", path.display());
            return ExitCode::FAILURE;
        }
    };
    let upstream = std::thread::Builder::new().name("exec-server-bridge".into()).spawn(move || {
        let mut to_daemon = to_daemon;
        let _ = pump(&mut *standard(libc::STDIN_FILENO), &mut to_daemon);
        let _ = to_daemon.shutdown(std::net::Shutdown::Write);
    });
    if let Err(error) = upstream {
        eprintln!("exec-server: cannot start the bridge's thread: {error}");
        return ExitCode::FAILURE;
    }
    let mut from_daemon = stream;
    match pump(&mut from_daemon, &mut *standard(libc::STDOUT_FILENO)) {
        Ok(()) => ExitCode::SUCCESS,
        // The client went away: nothing left to bridge.
        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("exec-server: the bridge to {} failed: {error}", path.display());
            ExitCode::FAILURE
        }
    }
}

/// Copies until `from` ends. Not `io::copy`: its splice(2) from a Unix socket
/// into a pipe can sit on data that has arrived (seen: an answer never
/// delivered until the next one came).
fn pump(from: &mut impl io::Read, to: &mut impl io::Write) -> io::Result<()> {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let read = match from.read(&mut buffer) {
            Ok(0) => return Ok(()),
            Ok(read) => read,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        to.write_all(&buffer[..read])?;
    }
}

/// A standard descriptor as a file that is never closed.
fn standard(fd: libc::c_int) -> ManuallyDrop<File> {
    // SAFETY: the standard descriptors stay open for the life of the process,
    // and ManuallyDrop never closes this one.
    ManuallyDrop::new(unsafe { File::from_raw_fd(fd) })
}

/// Connects to `path`, starting a daemon there first when asked and nothing
/// answers; only to a daemon of this user, in a directory no one else controls.
fn connect(path: &Path, spawn_daemon: bool, daemon_args: Vec<OsString>) -> io::Result<UnixStream> {
    let dir = path.parent().unwrap_or(Path::new("/"));
    if spawn_daemon {
        crate::listen::private_dir(dir)?;
    } else if dir.exists() {
        crate::listen::check_private_dir(dir)?;
    }
    let error = match UnixStream::connect(path) {
        Ok(stream) => return ours(stream, path),
        Err(error) => error,
    };
    let absent = matches!(error.kind(), io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused);
    if !spawn_daemon || !absent {
        return Err(io::Error::new(
            error.kind(),
            format!(
                "cannot connect to {}: {error}{}",
                path.display(),
                if absent {
                    " (start a daemon with --listen unix:PATH, or add --spawn-daemon)"
                } else {
                    ""
                }
            ),
        ));
    }
    let log = crate::listen::unix_log_path(path);
    let mut daemon = start_daemon(&log, daemon_args)?;
    let deadline = Instant::now() + DAEMON_START;
    let mut pause = Duration::from_millis(1);
    loop {
        match UnixStream::connect(path) {
            Ok(stream) => {
                // Reaped later by whoever adopts it; this process exits long before.
                drop(daemon);
                return ours(stream, path);
            }
            Err(error) if Instant::now() >= deadline => {
                return Err(io::Error::new(
                    error.kind(),
                    format!(
                        "the daemon started for {} did not answer within {DAEMON_START:?}: {error} (see {})",
                        path.display(),
                        log.display()
                    ),
                ))
            }
            Err(_) => {}
        }
        if let Some(status) = daemon.try_wait()? {
            // Another bridge's daemon may have won the lock: it answers soon.
            if let Ok(stream) = UnixStream::connect(path) {
                return ours(stream, path);
            }
            if Instant::now() >= deadline || !status.success() {
                return Err(io::Error::other(format!(
                    "the daemon started for {} exited ({status}) before answering; see {}",
                    path.display(),
                    log.display()
                )));
            }
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

/// `stream` if the daemon behind it runs as this user, else the refusal.
fn ours(stream: UnixStream, path: &Path) -> io::Result<UnixStream> {
    let uid = crate::listen::euid();
    match crate::listen::peer_uid(&stream)? {
        peer if peer == uid => Ok(stream),
        peer => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("the socket {} is served by uid {peer}, not by this user (uid {uid}); refusing to talk to it", path.display()),
        )),
    }
}

/// Starts `exec-server --listen unix:PATH ...` in a session of its own.
fn start_daemon(log: &Path, daemon_args: Vec<OsString>) -> io::Result<Child> {
    let exe = std::env::current_exe()
        .map_err(|e| io::Error::new(e.kind(), format!("cannot find this executable: {e}")))?;
    // The log lives beside the socket, in the directory checked private above.
    let log_file = crate::listen::private_file(log)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot open {}: {e}", log.display())))?;
    let mut command = Command::new(&exe);
    command.args(daemon_args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(log_file);
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() == -1 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command.spawn().map_err(|e| {
        io::Error::new(e.kind(), format!("cannot start the daemon {}: {e}", exe.display()))
    })
}

/// The daemon's arguments: this command line with `--connect PATH` and
/// `--spawn-daemon` replaced by `--listen unix:PATH`.
pub(crate) fn daemon_args(args: impl Iterator<Item = OsString>, path: &Path) -> Vec<OsString> {
    let mut out = vec![OsString::from("--listen"), {
        let mut url = OsString::from("unix:");
        url.push(path);
        url
    }];
    let mut args = args.skip(1);
    while let Some(arg) = args.next() {
        if arg == "--connect" {
            args.next();
        } else if arg == "--spawn-daemon" || arg.to_string_lossy().starts_with("--connect=") {
        } else {
            out.push(arg);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn daemon_args_replace_the_bridge_flags() {
        let args = [
            "exec-server",
            "--root",
            "/w",
            "--connect",
            "unix:/r/s",
            "--spawn-daemon",
            "--session-ttl=5s",
        ]
        .map(OsString::from);
        let got = daemon_args(args.into_iter(), Path::new("/r/s"));
        let want: Vec<OsString> = ["--listen", "unix:/r/s", "--root", "/w", "--session-ttl=5s"]
            .map(OsString::from)
            .into();
        assert_eq!(got, want);
        let args = ["exec-server", "--connect=unix:/r/s"].map(OsString::from);
        assert_eq!(daemon_args(args.into_iter(), Path::new("/r/s")).len(), 2);
    }
}
