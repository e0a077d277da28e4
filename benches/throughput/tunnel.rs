//! The `tunnel` section: 256 MiB from a loopback TCP source read through a
//! `Client::forward` (local port → tunnel → the source), against two
//! baselines of the same run: the source read directly, and through `ssh -L`
//! to a local sshd of the bench's own.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use exec_server::Client;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Bytes read per run.
pub const TUNNEL_BYTES: u64 = 256 * 1024 * 1024;

/// A loopback source writing [`TUNNEL_BYTES`] to each connection; its port.
pub async fn source() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let block = vec![0x5au8; 256 * 1024];
                let mut left = TUNNEL_BYTES as usize;
                while left > 0 {
                    let n = block.len().min(left);
                    if stream.write_all(&block[..n]).await.is_err() {
                        return;
                    }
                    left -= n;
                }
            });
        }
    });
    port
}

/// Connects to `port` and reads everything; the time it took.
pub async fn read_all(port: u16) -> Duration {
    let start = Instant::now();
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut buffer = vec![0u8; 256 * 1024];
    let mut total = 0u64;
    loop {
        let n = stream.read(&mut buffer).await.unwrap();
        if n == 0 {
            break;
        }
        total += n as u64;
    }
    assert_eq!(total, TUNNEL_BYTES, "short read");
    start.elapsed()
}

/// A forward of a local port to `port` through `client`; the local port.
pub async fn forward(client: &Client, port: u16) -> (exec_server::Forward, u16) {
    let forward = client.forward("127.0.0.1:0", "127.0.0.1", port).await.unwrap();
    let local = forward.local_addr().port();
    (forward, local)
}

/// An sshd of the bench's own and an `ssh -N -L` through it to `port`: the
/// local port, and the processes to kill. `None` (said why) without sshd.
pub async fn ssh_forward(port: u16) -> Option<(u16, Vec<tokio::process::Child>, PathBuf)> {
    let sshd = Path::new("/usr/sbin/sshd");
    if !sshd.exists() {
        println!(
            "(ssh -L baseline skipped: /usr/sbin/sshd is missing; apt-get install openssh-server)"
        );
        return None;
    }
    let dir = std::env::temp_dir().join(format!("exec-server-bench-ssh-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for key in ["host_key", "client_key"] {
        let status = std::process::Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(dir.join(key))
            .status()
            .unwrap();
        assert!(status.success());
    }
    std::fs::copy(dir.join("client_key.pub"), dir.join("authorized_keys")).unwrap();
    let _ = std::fs::create_dir_all("/run/sshd");
    let ssh_port = free_port();
    let config = format!(
        "Port {ssh_port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\nPidFile {d}/sshd.pid\n\
         AuthorizedKeysFile {d}/authorized_keys\nPermitRootLogin prohibit-password\n\
         PasswordAuthentication no\nUsePAM no\nStrictModes no\n",
        d = dir.display()
    );
    std::fs::write(dir.join("sshd_config"), config).unwrap();
    let daemon = tokio::process::Command::new(sshd)
        .args(["-D", "-f"])
        .arg(dir.join("sshd_config"))
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // SAFETY: getuid and getpwuid have no preconditions; the name is copied at once.
    let user = unsafe {
        let entry = libc::getpwuid(libc::getuid());
        std::ffi::CStr::from_ptr((*entry).pw_name).to_string_lossy().into_owned()
    };
    let local = free_port();
    let mut tunnel = None;
    // sshd takes a moment to listen, and ssh to set up the forward: try again until both did.
    for _ in 0..200 {
        if tunnel.is_none() {
            let child = tokio::process::Command::new("ssh")
                .args(["-N", "-F", "/dev/null", "-o", "StrictHostKeyChecking=no"])
                .args(["-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR"])
                .args(["-o", "ExitOnForwardFailure=yes", "-p", &ssh_port.to_string(), "-i"])
                .arg(dir.join("client_key"))
                .args(["-L", &format!("127.0.0.1:{local}:127.0.0.1:{port}")])
                .arg(format!("{user}@127.0.0.1"))
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .unwrap();
            tunnel = Some(child);
        }
        if let Some(child) = tunnel.as_mut() {
            if child.try_wait().unwrap().is_some() {
                tunnel = None;
            }
        }
        if tunnel.is_some() && TcpStream::connect(("127.0.0.1", local)).await.is_ok() {
            return Some((local, vec![tunnel.take().unwrap(), daemon], dir));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!("(ssh -L baseline skipped: the forward did not come up)");
    None
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}
