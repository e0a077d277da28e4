//! `--listen unix:PATH`: newline-delimited JSON-RPC on a Unix socket, with the
//! sessions of a listening server, for a daemon that `--connect` bridges reach.
//!
//! Only the server's own user gets in, three times over: the socket's
//! directory must be private to that user (created mode 0700 when missing;
//! an existing one open to others is refused), the socket is mode 0600, and a
//! peer whose SO_PEERCRED uid differs is dropped before a byte is read. One
//! daemon per path: `PATH.lock` is held (flock) for the server's lifetime, so
//! a second server on the same path fails instead of stealing the socket, and
//! a socket file left by a dead daemon is replaced.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tokio::io::BufReader;
use tokio::net::{UnixListener, UnixStream};

use super::{stopping, Context};
use crate::server::{serve_resumable, Channels, Config, OnEof};
use crate::transport;

/// A bound daemon socket; the socket file is removed when dropped.
pub struct UnixSocket {
    /// The listening socket.
    pub listener: UnixListener,
    path: PathBuf,
    /// The socket file's device and inode, so only ours is removed.
    inode: (u64, u64),
    _lock: File,
}

impl Drop for UnixSocket {
    fn drop(&mut self) {
        let ours = std::fs::symlink_metadata(&self.path)
            .is_ok_and(|meta| (meta.dev(), meta.ino()) == self.inode);
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Binds `path` for `--listen unix:PATH` (see the module docs for the checks).
pub fn bind(path: &Path) -> io::Result<UnixSocket> {
    let named = |error: io::Error, what: &str| {
        io::Error::new(error.kind(), format!("{what} {}: {error}", path.display()))
    };
    if !path.is_absolute() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("socket path {} must be absolute", path.display()),
        ));
    }
    let dir = path.parent().unwrap_or(Path::new("/"));
    private_dir(dir)?;
    let lock_path = with_suffix(path, ".lock");
    let lock =
        private_file(&lock_path).map_err(|e| named(e, "cannot open the lock file of socket"))?;
    // SAFETY: flock on a descriptor this function owns.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == -1 {
        return Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("another exec-server already listens on {}", path.display()),
        ));
    }
    match std::fs::symlink_metadata(path) {
        // Left by a daemon that is gone (we hold the lock, and nothing answers): replace it.
        Ok(meta) if std::os::unix::fs::FileTypeExt::is_socket(&meta.file_type()) => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("another exec-server already listens on {}", path.display()),
                ));
            }
            std::fs::remove_file(path).map_err(|e| named(e, "cannot remove the stale socket"))?;
        }
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ))
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        Err(error) => return Err(named(error, "cannot inspect")),
    }
    let listener = UnixListener::bind(path).map_err(|e| named(e, "cannot listen on"))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| named(e, "cannot restrict the mode of"))?;
    let meta = std::fs::symlink_metadata(path).map_err(|e| named(e, "cannot inspect"))?;
    let inode = (meta.dev(), meta.ino());
    Ok(UnixSocket { listener, path: path.to_owned(), inode, _lock: lock })
}

/// Creates `dir` (mode 0700) when missing, then checks it
/// ([`check_private_dir`]). What exists is checked first, hop by hop, and
/// each missing directory is made with one `mkdir` that follows no link:
/// nothing is ever created through a link planted by another user.
pub(crate) fn private_dir(dir: &Path) -> io::Result<()> {
    let mut existing = dir.to_path_buf();
    let mut missing = Vec::new();
    while std::fs::symlink_metadata(&existing).is_err() {
        let Some(name) = existing.file_name().map(|n| n.to_owned()) else { break };
        missing.push(name);
        existing.pop();
    }
    if missing.is_empty() {
        // Nothing to make: the directory as it is.
        return check_private_dir(dir);
    }
    check_hops(dir, &existing)?;
    let created = |error: io::Error, at: &Path| {
        io::Error::new(
            error.kind(),
            format!("cannot create the socket's directory {}: {error}", at.display()),
        )
    };
    for name in missing.into_iter().rev() {
        existing.push(name);
        if let Err(error) = std::fs::DirBuilder::new().mode(0o700).create(&existing) {
            if error.kind() != io::ErrorKind::AlreadyExists {
                return Err(created(error, &existing));
            }
        }
        // Made by us, or by someone else meanwhile: it must be a directory, not a link.
        let meta = std::fs::symlink_metadata(&existing).map_err(|e| created(e, &existing))?;
        if !meta.file_type().is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "the socket's directory {} lies in {}, which is not a directory",
                    dir.display(),
                    existing.display()
                ),
            ));
        }
    }
    check_private_dir(dir)
}

/// The socket's directory must be a directory of this user (not a link to
/// one) that others may not enter, and no other user may replace it: each
/// ancestor, as written and with links resolved, belongs to root or to this
/// user, and is writable by others only when sticky (as /tmp is).
pub(crate) fn check_private_dir(dir: &Path) -> io::Result<()> {
    let uid = euid();
    let refuse = |why: String| io::Error::new(io::ErrorKind::PermissionDenied, why);
    let meta = std::fs::symlink_metadata(dir)?;
    if !meta.file_type().is_dir() {
        return Err(refuse(format!(
            "the socket's directory {} must be a directory, not a link to one",
            dir.display()
        )));
    }
    if meta.uid() != uid || meta.mode() & 0o077 != 0 {
        return Err(refuse(format!(
            "the socket's directory {} must belong to uid {uid} and be private (mode 0700); it is uid {}, mode {:o}",
            dir.display(),
            meta.uid(),
            meta.mode() & 0o7777
        )));
    }
    check_hops(dir, dir)
}

/// Checks every hop of `path`'s resolution (links included, component by
/// component): each belongs to root or this user and is writable by others
/// only when sticky. `dir` names the socket's directory in errors.
fn check_hops(dir: &Path, path: &Path) -> io::Result<()> {
    let uid = euid();
    let refuse = |why: String| io::Error::new(io::ErrorKind::PermissionDenied, why);
    // Every hop of the resolution, links included, component by component.
    let mut pending: Vec<std::ffi::OsString> =
        path.components().rev().map(|c| c.as_os_str().to_owned()).collect();
    let mut at = PathBuf::from("/");
    let mut links = 0;
    while let Some(name) = pending.pop() {
        if name == "/" || name == "." {
            continue;
        }
        if name == ".." {
            at.pop();
            continue;
        }
        let next = at.join(&name);
        let meta = std::fs::symlink_metadata(&next)?;
        let owner_ok = meta.uid() == 0 || meta.uid() == uid;
        let is_link = meta.file_type().is_symlink();
        let open_to_others =
            !is_link && meta.mode() & 0o022 != 0 && meta.mode() & libc::S_ISVTX == 0;
        if !owner_ok || open_to_others {
            return Err(refuse(format!(
                "the socket's directory {} lies in {}, which another user could change (uid {}, mode {:o})",
                dir.display(),
                next.display(),
                meta.uid(),
                meta.mode() & 0o7777
            )));
        }
        if is_link {
            links += 1;
            if links > 40 {
                return Err(refuse(format!("too many links on the way to {}", dir.display())));
            }
            let target = std::fs::read_link(&next)?;
            if target.is_absolute() {
                at = PathBuf::from("/");
            }
            pending.extend(target.components().rev().map(|c| c.as_os_str().to_owned()));
        } else {
            at = next;
        }
    }
    Ok(())
}

/// The uid of the process at the other end of a Unix socket.
pub(crate) fn peer_uid(fd: &impl AsRawFd) -> io::Result<u32> {
    // SAFETY: ucred is plain data, filled in by getsockopt.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED writes at most `len` bytes into `cred`.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            std::ptr::addr_of_mut!(cred).cast(),
            &mut len,
        )
    };
    if rc == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.uid)
}

/// Where a daemon started by `--spawn-daemon` writes its log.
pub(crate) fn log_path(path: &Path) -> PathBuf {
    with_suffix(path, ".log")
}

/// Opens `path` for appending, creating it with mode 0600, never through a symlink.
pub(crate) fn private_file(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// The line a connection beyond `--max-connections` gets before the close.
pub(super) fn busy(limit: usize) -> String {
    refusal(format!(
        "too many connections: this server serves at most {limit} at once (--max-connections)"
    ))
}

/// Writes `line`, ends the output, and reads (for at most a second) what
/// the peer had sent: closing with unread input would reset the connection
/// and lose the line.
async fn refuse(mut stream: UnixStream, line: &str) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = stream.write_all(line.as_bytes()).await;
    let _ = stream.shutdown().await;
    let drain = async {
        let mut sink = [0u8; 4096];
        let mut left: usize = 64 * 1024;
        while left > 0 {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(read) => left = left.saturating_sub(read),
            }
        }
    };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), drain).await;
}

/// An error line with id -1 (-32600), for a connection refused before it is served.
fn refusal(message: String) -> String {
    let error = crate::protocol::ErrorObject::invalid_request(message);
    let id = crate::protocol::RequestId::from(-1);
    let line = crate::protocol::encode_response::<crate::protocol::Empty>(&id, &Err(error));
    format!("{line}\n")
}

/// Serves one Unix-socket connection (on its own thread's runtime).
pub(super) async fn connection(stream: UnixStream, context: Context) {
    let Context { shared, active: _active, slot } = context;
    let super::Shared { options, roots, retained, sessions, stopped, done: _done, .. } = shared;
    let uid = euid();
    match peer_uid(&stream) {
        Ok(peer) if peer == uid => {}
        Ok(peer) => {
            tracing::warn!(peer, uid, "refused a connection from another user");
            // Nothing of the session machinery is touched: one line, then the close.
            let refusal = refusal(format!(
                "connection refused: the peer runs as uid {peer}, and this server serves only uid {uid}"
            ));
            refuse(stream, &refusal).await;
            return;
        }
        Err(error) => {
            tracing::warn!(%error, "cannot learn a connection's peer; refused it");
            return;
        }
    }
    tracing::info!("connection opened");
    let (read_half, write_half) = stream.into_split();
    let limit = options.config.max_message_bytes;
    let (incoming, reader, input_ended) = transport::spawn_reader(
        BufReader::with_capacity(transport::INPUT_BUFFER, read_half),
        limit,
    );
    let (outgoing, writer) = transport::spawn_writer(write_half);
    let channels = Channels { incoming, outgoing, reader, writer, input_ended };
    let config = Config { on_eof: OnEof::Kill, ..options.config.clone() };
    serve_resumable(channels, roots, &config, retained, &sessions, slot, stopping(stopped)).await;
    tracing::info!("connection's thread done");
}

/// This process's effective uid.
pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

/// `path` with `suffix` appended to its file name.
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}
