//! Servers on other machines over OpenSSH: the command line, and the opt-in
//! self-install that streams the local binary to a remote without one.
//!
//! `ssh -T -o BatchMode=yes [options] DEST exec-server`: no tty (a tty would
//! echo requests and turn `\n` into `\r\n`), no password prompt. The remote
//! server's stdin is the ssh channel, so when the launcher goes away the remote
//! side sees EOF and kills everything it started.
//!
//! Self-install: the remote command becomes a small `sh` script that runs the
//! remote program if it is on PATH (or already installed in the cache
//! directory), and otherwise prints `exec-server-launch:need OS ARCH`
//! (`uname -sm`) and waits. When that matches this machine, the launcher sends
//! the binary's size on a line and then its bytes on the same connection; the
//! script stores them (`head -c`), marks the file executable, moves it into
//! place and runs it. Every path ends with `exec-server-launch:ready` before
//! the JSON-RPC stream starts. No cross-architecture install is attempted.

use std::path::PathBuf;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::LaunchCommand;
use crate::error::Error;

/// The marker the remote script prints before the protocol starts.
const READY: &str = "exec-server-launch:ready";
/// The marker the remote script prints when it needs the binary.
const NEED: &str = "exec-server-launch:need ";
/// The marker the remote script prints when it cannot write the install directory.
const REFUSED: &str = "exec-server-launch:cannot-install ";

/// `exec-server` on another machine over OpenSSH; see [`LaunchCommand::ssh`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshCommand {
    destination: String,
    ssh: PathBuf,
    options: Vec<String>,
    remote_program: String,
    remote_args: Vec<String>,
    install: Option<PathBuf>,
    install_dir: Option<String>,
    /// The daemon's socket on the remote, in daemon mode.
    daemon: Option<String>,
}

/// How to install the server on a remote that lacks it (see [`SshCommand::install_if_missing`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SelfInstall {
    /// The local binary streamed to the remote.
    pub(crate) binary: PathBuf,
}

impl SshCommand {
    pub(super) fn new(destination: impl Into<String>) -> SshCommand {
        SshCommand {
            destination: destination.into(),
            ssh: PathBuf::from("ssh"),
            options: Vec::new(),
            remote_program: "exec-server".into(),
            remote_args: Vec::new(),
            install: None,
            install_dir: None,
            daemon: None,
        }
    }

    /// Daemon mode: the remote runs `exec-server --connect unix:SOCKET
    /// --spawn-daemon` (a bridge to a daemon it starts when none answers, at
    /// the remote's default socket), so the session outlives a dropped ssh
    /// connection; the launcher's client opens a new ssh connection and
    /// resumes it. Dropping the launcher closes the session's connection: the
    /// daemon ends its processes once `--session-ttl` passes (30 s).
    pub fn persistent(self) -> SshCommand {
        self.persistent_at("")
    }

    /// [`SshCommand::persistent`] with the daemon's socket at `socket` (an
    /// absolute path on the remote).
    pub fn persistent_at(mut self, socket: impl Into<String>) -> SshCommand {
        self.daemon = Some(socket.into());
        self
    }

    /// The local `ssh` program (default: `ssh` on PATH).
    pub fn ssh_program(mut self, program: impl Into<PathBuf>) -> SshCommand {
        self.ssh = program.into();
        self
    }

    /// An extra argument for `ssh`, placed before the destination (`-p`, `2222`, `-i`, ...).
    pub fn option(mut self, option: impl Into<String>) -> SshCommand {
        self.options.push(option.into());
        self
    }

    /// The server program on the remote (default: `exec-server`, looked up on its PATH).
    pub fn remote_program(mut self, program: impl Into<String>) -> SshCommand {
        self.remote_program = program.into();
        self
    }

    /// An argument for the remote server (`--root`, `--max-processes`, ...).
    pub fn remote_arg(mut self, arg: impl Into<String>) -> SshCommand {
        self.remote_args.push(arg.into());
        self
    }

    /// Opt-in: when the remote program is missing and the remote's `uname -sm`
    /// matches this machine's, stream `binary` (this machine's exec-server)
    /// into the remote cache directory and run it from there.
    pub fn install_if_missing(mut self, binary: impl Into<PathBuf>) -> SshCommand {
        self.install = Some(binary.into());
        self
    }

    /// Where the remote keeps installed binaries (default:
    /// `${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/exec-server/VERSION`).
    pub fn install_dir(mut self, dir: impl Into<String>) -> SshCommand {
        self.install_dir = Some(dir.into());
        self
    }

    fn remote_command(&self) -> String {
        let remote_args = server_args(self.daemon.as_deref(), &self.remote_args);
        if self.install.is_none() {
            let mut words = vec![quote(&self.remote_program)];
            words.extend(remote_args.iter().map(|a| quote(a)));
            return words.join(" ");
        }
        let script =
            install_script(&self.remote_program, self.install_dir.as_deref(), &remote_args);
        format!("sh -c {}", quote(&script))
    }
}

/// The server's arguments on the other side: daemon mode's (a bridge to the
/// daemon at `daemon`, the default socket when empty), then the caller's.
pub(super) fn server_args(daemon: Option<&str>, args: &[String]) -> Vec<String> {
    let mut all = Vec::new();
    if let Some(socket) = daemon {
        all.extend(["--connect".to_owned(), format!("unix:{socket}"), "--spawn-daemon".to_owned()]);
    }
    all.extend(args.iter().cloned());
    all
}

/// The `sh` script of a self-install (see the module's doc): runs `program`
/// when it is on PATH or installed in `dir` (default: the per-user cache,
/// versioned, so another version is installed beside), else asks for the
/// binary. A directory it cannot write is named on stdout before it exits.
pub(super) fn install_script(program: &str, dir: Option<&str>, args: &[String]) -> String {
    let version = env!("CARGO_PKG_VERSION");
    let dir = match dir {
        Some(dir) => quote(dir),
        None => format!("\"${{XDG_CACHE_HOME:-${{HOME:-/tmp}}/.cache}}/exec-server/{version}\""),
    };
    let args = args.iter().map(|a| quote(a)).collect::<Vec<_>>().join(" ");
    format!(
        "prog={program}; dir={dir}; bin=\"$dir/exec-server\"\n\
         if command -v \"$prog\" >/dev/null 2>&1; then echo {READY}; exec \"$prog\" {args}; fi\n\
         if [ -f \"$bin\" ] && [ -x \"$bin\" ]; then echo {READY}; exec \"$bin\" {args}; fi\n\
         refused() {{ rm -f \"$bin.$$\"; echo \"{REFUSED}$dir\"; exit 4; }}\n\
         mkdir -p \"$dir\" && : > \"$bin.$$\" || refused\n\
         echo \"{NEED}$(uname -sm)\"\n\
         read -r size || exit 3\n\
         case \"$size\" in ''|*[!0-9]*) exit 3;; esac\n\
         head -c \"$size\" > \"$bin.$$\" && chmod 755 \"$bin.$$\" && mv \"$bin.$$\" \"$bin\" || refused\n\
         echo {READY}\n\
         exec \"$bin\" {args}",
        program = quote(program),
    )
}

impl From<SshCommand> for LaunchCommand {
    fn from(ssh: SshCommand) -> LaunchCommand {
        let mut args = vec!["-T".to_owned(), "-o".to_owned(), "BatchMode=yes".to_owned()];
        if ssh.daemon.is_some() {
            // A dead link is noticed within 15 s, so the client can resume in time.
            for option in ["ServerAliveInterval=5", "ServerAliveCountMax=3"] {
                args.extend(["-o".to_owned(), option.to_owned()]);
            }
        }
        args.extend(ssh.options.iter().cloned());
        args.push("--".to_owned());
        args.push(ssh.destination.clone());
        args.push(ssh.remote_command());
        let mut command = LaunchCommand::new(ssh.ssh.clone());
        command.args = args;
        command.self_install = ssh.install.clone().map(|binary| SelfInstall { binary });
        command.persistent = ssh.daemon.is_some();
        command
    }
}

/// How long the whole install dialogue may take (the binary's transfer included).
const INSTALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);
/// Lines the remote may print before the server starts.
const MAX_LINES: usize = 256;

/// Runs the install dialogue on a fresh connection: reads the remote script's
/// marker lines and, when asked and the machines match, sends the binary
/// (once), all within [`INSTALL_TIMEOUT`].
pub(super) async fn self_install<R, W>(
    install: &SelfInstall,
    stdout: &mut R,
    stdin: &mut W,
) -> Result<(), Error>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    match tokio::time::timeout(INSTALL_TIMEOUT, dialogue(install, stdout, stdin)).await {
        Ok(result) => result,
        Err(_) => Err(Error::Timeout {
            what: "the remote to install and start the server",
            timeout: INSTALL_TIMEOUT,
        }),
    }
}

async fn dialogue<R, W>(install: &SelfInstall, stdout: &mut R, stdin: &mut W) -> Result<(), Error>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut sent = false;
    for _ in 0..MAX_LINES {
        let line = read_line(stdout).await?;
        if line == READY {
            return Ok(());
        }
        if let Some(dir) = line.strip_prefix(REFUSED) {
            // The remote's text, shown on this side: escaped and cut short.
            let path = dir.escape_default().take(256).collect();
            return Err(Error::InstallRefused { path, stderr: String::new() });
        }
        let Some(remote) = line.strip_prefix(NEED) else {
            tracing::debug!(%line, "ignoring a line before the server started");
            continue;
        };
        if sent {
            return Err(Error::Protocol(
                "the remote asked for the binary again after it was sent".into(),
            ));
        }
        let remote: String = remote.trim().escape_default().take(256).collect();
        let local = super::os::local_uname();
        if remote != local {
            return Err(Error::ArchitectureMismatch { remote, local, stderr: String::new() });
        }
        let bytes = tokio::fs::read(&install.binary).await.map_err(|e| {
            Error::io(format!("cannot read {} to install it", install.binary.display()), e)
        })?;
        let sent_bytes = async {
            stdin.write_all(format!("{}\n", bytes.len()).as_bytes()).await?;
            stdin.write_all(&bytes).await?;
            stdin.flush().await
        };
        sent_bytes.await.map_err(|e| Error::io("cannot send the binary to the remote", e))?;
        sent = true;
    }
    Err(Error::Protocol(format!(
        "the remote printed more than {MAX_LINES} lines before the server started"
    )))
}

/// One line, read a byte at a time so nothing after it is consumed.
pub(super) async fn read_line<R: AsyncRead + Unpin>(reader: &mut R) -> Result<String, Error> {
    let mut line = Vec::new();
    loop {
        let mut byte = [0u8; 1];
        let n = reader
            .read(&mut byte)
            .await
            .map_err(|e| Error::io("cannot read from the remote", e))?;
        if n == 0 {
            return Err(Error::Protocol(format!(
                "the remote closed the connection before the server started (after {:?})",
                String::from_utf8_lossy(&line)
            )));
        }
        if byte[0] == b'\n' {
            return Ok(String::from_utf8_lossy(&line).into_owned());
        }
        if line.len() > 4096 {
            return Err(Error::Protocol("the remote printed an overlong line".into()));
        }
        line.push(byte[0]);
    }
}

/// Quotes `word` for a POSIX shell.
fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_ssh_runs_the_remote_program() {
        let command: LaunchCommand =
            LaunchCommand::ssh("me@host").option("-p").option("2222").into();
        assert_eq!(command.program, PathBuf::from("ssh"));
        assert_eq!(
            command.args,
            ["-T", "-o", "BatchMode=yes", "-p", "2222", "--", "me@host", "'exec-server'"]
        );
        assert_eq!(command.self_install, None);
    }

    #[test]
    fn quoting_survives_single_quotes() {
        assert_eq!(quote("it's"), "'it'\\''s'");
        let command: LaunchCommand =
            LaunchCommand::ssh("h").remote_program("/opt/my dir/exec-server").into();
        assert_eq!(command.args.last().unwrap(), "'/opt/my dir/exec-server'");
    }

    /// The dialogue against a remote that says `script` and reads nothing.
    async fn against(script: Vec<u8>) -> Result<(), Error> {
        let binary = std::env::temp_dir().join(format!("es-dialogue-{}", std::process::id()));
        std::fs::write(&binary, b"binary").unwrap();
        let install = SelfInstall { binary };
        let (mut theirs, mut ours) = tokio::io::duplex(1 << 20);
        tokio::io::AsyncWriteExt::write_all(&mut theirs, &script).await.unwrap();
        let (mut reader, mut writer) = tokio::io::split(ours);
        let result = self_install(&install, &mut reader, &mut writer).await;
        drop(theirs);
        ours = reader.unsplit(writer);
        drop(ours);
        result
    }

    #[tokio::test]
    async fn a_remote_that_asks_twice_or_chatters_is_refused() {
        let local = crate::launcher::os::local_uname();
        let twice = format!("{NEED}{local}\n{NEED}{local}\n");
        let error = against(twice.into_bytes()).await.err().map(|e| e.to_string());
        assert_eq!(
            error.as_deref(),
            Some("protocol violation: the remote asked for the binary again after it was sent")
        );
        let chatter = "hello\n".repeat(300);
        let error = against(chatter.into_bytes()).await.err().map(|e| e.to_string());
        assert_eq!(
            error.as_deref(),
            Some("protocol violation: the remote printed more than 256 lines before the server started")
        );
        let refused = format!("{REFUSED}/opt/\x1b[2Jx\n");
        match against(refused.into_bytes()).await {
            Err(Error::InstallRefused { path, .. }) => assert_eq!(path, "/opt/\\u{1b}[2Jx"),
            other => panic!("{:?}", other.err()),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_remote_times_out() {
        let install = SelfInstall { binary: "/nonexistent".into() };
        let (_theirs, ours) = tokio::io::duplex(64);
        let (mut reader, mut writer) = tokio::io::split(ours);
        let error =
            self_install(&install, &mut reader, &mut writer).await.err().map(|e| e.to_string());
        assert_eq!(
            error.as_deref(),
            Some("timed out after 120s waiting for the remote to install and start the server")
        );
    }

    #[test]
    fn uname_looks_like_uname() {
        let uname = crate::launcher::os::local_uname();
        assert!(uname.starts_with("Linux "), "{uname}");
    }
}
