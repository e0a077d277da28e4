//! Servers over a real OpenSSH server on loopback, started by the tests.
//!
//! Without sshd the tests skip with a loud message, except in CI (`CI` set),
//! where a missing component is a failure.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use exec_server::{FileSystem, LaunchCommand, Launcher, RemoteFileSystem, SshCommand, StartParams};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;

use crate::binary::BIN;
use crate::support::{is_dead, scratch, wait_dead, within};

const SSHD: &str = "/usr/sbin/sshd";

/// An sshd of our own on a free loopback port, killed when dropped.
struct Sshd {
    _child: Child,
    port: u16,
    key: PathBuf,
    dir: PathBuf,
}

impl Sshd {
    /// Starts sshd, or returns `None` (after saying why) when it cannot run here.
    async fn start(name: &str) -> Option<Sshd> {
        if !Path::new(SSHD).exists() {
            let message = format!("{SSHD} is missing: install openssh-server (.ci/run does)");
            assert!(std::env::var_os("CI").is_none(), "{message}");
            eprintln!("SKIPPED: {message}");
            return None;
        }
        let dir = scratch(&format!("sshd-{name}"));
        for key in ["host_key", "client_key"] {
            let status = std::process::Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(dir.join(key))
                .status()
                .unwrap();
            assert!(status.success(), "ssh-keygen failed");
        }
        std::fs::copy(dir.join("client_key.pub"), dir.join("authorized_keys")).unwrap();
        // sshd's privilege-separation directory.
        let _ = std::fs::create_dir_all("/run/sshd");
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let config = format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {dir}/host_key\nPidFile {dir}/sshd.pid\n\
             AuthorizedKeysFile {dir}/authorized_keys\nPermitRootLogin prohibit-password\n\
             PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n\
             StrictModes no\nLogLevel INFO\n",
            dir = dir.display()
        );
        std::fs::write(dir.join("sshd_config"), config).unwrap();
        let mut child = tokio::process::Command::new(SSHD)
            .arg("-D")
            .arg("-e")
            .arg("-f")
            .arg(dir.join("sshd_config"))
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut log = BufReader::new(child.stderr.take().unwrap()).lines();
        let listening = format!("Server listening on 127.0.0.1 port {port}");
        within("sshd to listen", async {
            loop {
                let line = log.next_line().await.unwrap().expect("sshd exited at start");
                if line.contains(&listening) {
                    return;
                }
            }
        })
        .await;
        tokio::spawn(async move { while let Ok(Some(_)) = log.next_line().await {} });
        Some(Sshd { _child: child, port, key: dir.join("client_key"), dir })
    }

    /// `ssh` to this server as the current user, non-interactively.
    fn command(&self) -> SshCommand {
        // SAFETY: getuid and getpwuid have no preconditions; the name is copied at once.
        let user = unsafe {
            let entry = libc::getpwuid(libc::getuid());
            std::ffi::CStr::from_ptr((*entry).pw_name).to_string_lossy().into_owned()
        };
        let mut command = LaunchCommand::ssh(format!("{user}@127.0.0.1"));
        for option in [
            "-F",
            "/dev/null",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "LogLevel=ERROR",
            "-p",
            &self.port.to_string(),
            "-i",
            self.key.to_str().unwrap(),
        ] {
            command = command.option(option);
        }
        command
    }
}

/// Starts a tree on the remote and returns (server pid, child pid, grandchild pid).
async fn remote_tree(launcher: &Launcher) -> (u32, u32, u32) {
    let script = "echo $PPID $$; sleep 60 & echo $!; wait";
    let params = StartParams::new("tree", ["sh", "-c", script], "/");
    let mut process = launcher.client().start(params).await.unwrap();
    let mut text = String::new();
    let pids = loop {
        let chunk = process.next_output().await.unwrap().expect("the tree printed its pids");
        text.push_str(&String::from_utf8_lossy(&chunk.bytes));
        let pids: Vec<u32> = text.split_whitespace().filter_map(|w| w.parse().ok()).collect();
        if pids.len() == 3 && text.ends_with('\n') {
            break pids;
        }
    };
    for &pid in &pids {
        assert!(!is_dead(pid));
    }
    (pids[0], pids[1], pids[2])
}

#[tokio::test]
async fn a_server_over_ssh_runs_commands_moves_files_and_dies_with_the_launcher() {
    let Some(sshd) = Sshd::start("launch").await else { return };
    let launcher =
        within("a launch over ssh", Launcher::spawn(sshd.command().remote_program(*BIN)))
            .await
            .unwrap();
    let (server, child, grandchild) = remote_tree(&launcher).await;
    let fs = RemoteFileSystem::new(launcher.client().clone());
    let path = sshd.dir.join("over-ssh.txt");
    fs.write_file(&path, b"across ssh\n").await.unwrap();
    assert_eq!(fs.read_file(&path).await.unwrap(), b"across ssh\n");
    drop(launcher);
    for pid in [server, child, grandchild] {
        wait_dead(pid).await;
    }
}

#[tokio::test]
async fn a_sigkilled_ssh_client_ends_the_remote_server_and_its_tree() {
    let Some(sshd) = Sshd::start("sigkill").await else { return };
    let launcher =
        within("a launch over ssh", Launcher::spawn(sshd.command().remote_program(*BIN)))
            .await
            .unwrap();
    let (server, child, grandchild) = remote_tree(&launcher).await;
    // SAFETY: plain kill(2) of the ssh client the launcher started.
    assert_eq!(unsafe { libc::kill(launcher.pid() as libc::pid_t, libc::SIGKILL) }, 0);
    for pid in [server, child, grandchild] {
        wait_dead(pid).await;
    }
    drop(launcher);
}

#[tokio::test]
async fn a_remote_without_exec_server_gets_this_binary_installed() {
    let Some(sshd) = Sshd::start("install").await else { return };
    let cache = sshd.dir.join("cache");
    let command = || {
        sshd.command()
            .remote_program("exec-server-not-on-this-path")
            .install_if_missing(*BIN)
            .install_dir(cache.to_str().unwrap())
    };
    let launcher = within("a self-installing launch", Launcher::spawn(command())).await.unwrap();
    let installed = cache.join("exec-server");
    assert_eq!(std::fs::read(&installed).unwrap(), std::fs::read(*BIN).unwrap());
    let mut echo = launcher
        .client()
        .start(StartParams::new("e", ["sh", "-c", "echo $PPID"], "/"))
        .await
        .unwrap();
    let (output, _) = echo.output_to_end().await.unwrap();
    let server: u32 = String::from_utf8(output).unwrap().trim().parse().unwrap();
    let exe = std::fs::read_link(format!("/proc/{server}/exe")).unwrap();
    assert_eq!(exe, installed);
    drop(launcher);
    wait_dead(server).await;
    // A second launch finds the installed copy and sends nothing.
    let modified = std::fs::metadata(&installed).unwrap().modified().unwrap();
    let again = within("a launch of the installed copy", Launcher::spawn(command())).await.unwrap();
    assert!(again
        .client()
        .list(exec_server::protocol::Empty {})
        .await
        .unwrap()
        .processes
        .is_empty());
    assert_eq!(std::fs::metadata(&installed).unwrap().modified().unwrap(), modified);
}

/// A persistent launch's drop ends its session at once: the daemon's ttl
/// (30 s by default, longer than any wait here) does not keep the tree alive.
#[tokio::test]
async fn dropping_a_persistent_launcher_ends_its_session_at_once() {
    let Some(sshd) = Sshd::start("persistent-drop").await else { return };
    let socket = sshd.dir.join("run").join("daemon.sock");
    let command = sshd.command().remote_program(*BIN).persistent_at(socket.to_str().unwrap());
    let launcher = within("a persistent launch", Launcher::spawn(command)).await.unwrap();
    let client = launcher.client().clone();
    let script = "sleep 1000 & echo $!; wait";
    let mut process = client.start(StartParams::new("p", ["sh", "-c", script], "/")).await.unwrap();
    let output = within("the grandchild's pid", process.next_output()).await.unwrap().unwrap();
    let grandchild: u32 = String::from_utf8(output.bytes).unwrap().trim().parse().unwrap();
    let child = client.list(exec_server::protocol::Empty {}).await.unwrap().processes[0].pid;
    let daemon = crate::support::peer_pid(&socket) as libc::pid_t;
    drop((process, client, launcher));
    wait_dead(child).await;
    wait_dead(grandchild).await;
    // SAFETY: kill(2) of the daemon this test started.
    assert_eq!(unsafe { libc::kill(daemon, libc::SIGKILL) }, 0);
    wait_dead(daemon as u32).await;
}

#[tokio::test]
async fn a_persistent_launch_survives_a_killed_ssh_client_and_its_handle_sees_everything() {
    let Some(sshd) = Sshd::start("persistent").await else { return };
    let socket = sshd.dir.join("run").join("daemon.sock");
    let command = sshd
        .command()
        .remote_program(*BIN)
        .persistent_at(socket.to_str().unwrap())
        .remote_arg("--session-ttl")
        .remote_arg("20s");
    let launcher = within("a persistent launch", Launcher::spawn(command)).await.unwrap();
    let script = "i=0; while [ $i -lt 200 ]; do echo line$i; i=$((i+1)); sleep 0.005; done; exit 5";
    let client = launcher.client().clone();
    let mut process = client.start(StartParams::new("p", ["sh", "-c", script], "/")).await.unwrap();
    let mut output = Vec::new();
    while !String::from_utf8_lossy(&output).contains("line10\n") {
        output.extend(within("early output", process.next_output()).await.unwrap().unwrap().bytes);
    }
    // SAFETY: plain kill(2) of the ssh client the launcher started.
    assert_eq!(unsafe { libc::kill(launcher.pid() as libc::pid_t, libc::SIGKILL) }, 0);
    let (rest, status) =
        within("the output after the resume", process.output_to_end()).await.unwrap();
    output.extend(rest);
    let expected: String = (0..200).map(|i| format!("line{i}\n")).collect();
    assert_eq!(String::from_utf8(output).unwrap(), expected);
    assert_eq!(status.code, 5);
    // The daemon outlives the launcher (its session ends after the ttl); end it here.
    let pid = crate::support::peer_pid(&socket) as libc::pid_t;
    drop(launcher);
    // SAFETY: kill(2) of the daemon this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    wait_dead(pid as u32).await;
}
