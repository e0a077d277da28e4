//! The sandbox attacked, through the real binary, as root and as nobody: every
//! escape probe is held (and the same probes escape without a sandbox, so they
//! prove something), ordinary work inside the writable root succeeds, and
//! nothing sandboxed outlives a SIGKILLed server.

use std::collections::BTreeSet;
use std::io::ErrorKind;
use std::net::{TcpListener, UdpSocket};
use std::os::unix::net::{UnixDatagram, UnixListener};

use serde_json::{json, Value};

use crate::binary::BIN;
use crate::sandbox::{full_snapshot, run, sandboxed, set_xattr, Tree, User, NOBODY};
use crate::support::{descendants, poll_proc, unb64, wait_dead, within};

/// Each probe runs `sh -c` on its own copy of the outside tree (`$D`) and its
/// own file in the writable root (`$M`), and says whether it got through.
const PROBES: &[(&str, &str)] = &[
    ("write", r#"echo x > "$D/file""#),
    ("create", r#"echo x > "$D/new""#),
    ("append", r#"echo x >> "$D/file""#),
    ("truncate", r#"truncate -s 0 "$D/file""#),
    ("delete", r#"rm "$D/file""#),
    ("delete-tree", r#"rm -r "$D/sub""#),
    ("rename", r#"mv "$D/file" "$D/renamed""#),
    ("move-out", r#"mv "$M" "$D/moved""#),
    ("move-in", r#"mv "$D/file" "$W/stolen-$$""#),
    ("mkdir", r#"mkdir "$D/dir""#),
    ("chmod", r#"chmod 600 "$D/file""#),
    ("chown", r#"chown "$(id -u):$(id -g)" "$D/file""#),
    ("touch", r#"touch -d @0 "$D/file""#),
    (
        "setxattr",
        r#"python3 -c 'import os; os.setxattr(os.environ["D"] + "/file", "user.p", b"1")'"#,
    ),
    (
        "removexattr",
        r#"python3 -c 'import os; os.removexattr(os.environ["D"] + "/file", "user.k")'"#,
    ),
    ("hardlink-out", r#"ln "$M" "$D/hard""#),
    ("hardlink-in", r#"ln "$D/file" "$W/hard-$$""#),
    ("symlink-out", r#"ln -s /etc "$D/sym""#),
    ("through-symlink", r#"ln -s "$D/file" "$W/through-$$" && echo x > "$W/through-$$""#),
    ("fifo-out", r#"mkfifo "$D/fifo""#),
    ("shm", r#"echo x > "/dev/shm/exec-server-probe-$TAG""#),
    (
        "tcp4",
        r#"python3 -c 'import os, socket; socket.create_connection(("127.0.0.1", int(os.environ["PORT"])), 5)'"#,
    ),
    (
        "tcp6",
        r#"python3 -c 'import os, socket; socket.create_connection(("::1", int(os.environ["PORT6"])), 5)'"#,
    ),
    (
        "udp",
        r#"python3 -c 'import os, socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("127.0.0.1", int(os.environ["UPORT"])))'"#,
    ),
    (
        "listen",
        r#"python3 -c 'import socket; s = socket.socket(); s.bind(("0.0.0.0", 0)); s.listen()'"#,
    ),
    (
        "unix-socket",
        r#"python3 -c 'import os, socket; socket.socket(socket.AF_UNIX).connect(os.environ["SOCK"])'"#,
    ),
    ("signal", r#"kill -0 "$VICTIM""#),
    ("proc-environ", r#"cat "/proc/$VICTIM/environ""#),
    ("proc-cmdline", r#"cat "/proc/$VICTIM/cmdline" | grep -q sleep"#),
    ("proc-mem", r#"python3 -c 'import os; open("/proc/%s/mem" % os.environ["VICTIM"], "rb")'"#),
    ("remount", r#"unshare -Urm sh -c 'mount -o remount,bind,rw / && echo x > "$D/file"'"#),
    // The host's /dev/null through the descriptor the server opened: its times
    // set to now (harmless), and (as root) its mode set to what it is.
    ("devnull-utime", r#"python3 -c 'import os; os.utime(0)'"#),
    ("devnull-fchmod", r#"python3 -c 'import os; os.fchmod(0, os.fstat(0).st_mode & 0o7777)'"#),
    // A nested user, mount and cgroup namespace, then a fresh cgroup2 mount.
    (
        "userns-cgroup-mount",
        r#"python3 -c 'import ctypes; c = ctypes.CDLL(None); assert c.unshare(0x12020000) == 0; assert c.syscall(430, b"cgroup2", 0) >= 0'"#,
    ),
    (
        "lease",
        r#"python3 -c 'import fcntl, os; fcntl.fcntl(os.open(os.environ["D"] + "/file", os.O_RDONLY), fcntl.F_SETLEASE, fcntl.F_RDLCK)'"#,
    ),
    // A pseudo-terminal allocated on the host's devpts (not /dev/null's device).
    (
        "ptmx",
        r#"python3 -c 'import os; assert os.major(os.fstat(os.open("/dev/ptmx", os.O_RDONLY)).st_rdev) != 1'"#,
    ),
    ("drop-caches", r#"echo 1 > /proc/sys/vm/drop_caches"#),
];

/// The script: every probe, then what the process holds.
fn probe_script() -> String {
    let mut script = String::from(
        r#"probe() { D="$OUT/$1"; M="$W/$1-mine"; export D M; if sh -c "$2" >/dev/null 2>&1; then echo "$1: escaped"; else echo "$1: held"; fi; }
"#,
    );
    for (name, command) in PROBES {
        script.push_str(&format!("probe {name} '{}'\n", command.replace('\'', r"'\''")));
    }
    script.push_str(
        r#"grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs):' /proc/self/status | tr -s '\t' ' '
echo "fds: $(ls /proc/self/fd | tr '\n' ' ')"
"#,
    );
    script
}

/// What an attacker would use: listeners of the test, a process of the same user.
struct Targets {
    tcp: TcpListener,
    tcp6: Option<TcpListener>,
    udp: UdpSocket,
    unix: UnixListener,
    dgram: UnixDatagram,
    /// A System V shared memory segment of the host: (key, id).
    shm: (i32, i32),
    victim: std::process::Child,
}

impl Targets {
    fn new(tree: &Tree, user: User) -> Targets {
        let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
        let tcp6 = TcpListener::bind("[::1]:0").ok();
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        for socket in
            [tcp.as_raw(), udp.as_raw()].into_iter().chain(tcp6.as_ref().map(|l| l.as_raw()))
        {
            set_nonblocking(socket);
        }
        let sock = tree.base.join("agent.sock");
        let unix = UnixListener::bind(&sock).unwrap();
        unix.set_nonblocking(true).unwrap();
        user.own(&sock);
        let dgram_path = tree.base.join("dgram.sock");
        let dgram = UnixDatagram::bind(&dgram_path).unwrap();
        dgram.set_nonblocking(true).unwrap();
        user.own(&dgram_path);
        let key = 0x5e00_0000
            | (std::process::id() as i32 & 0xffff)
            | if user == User::Nobody { 0x10000 } else { 0 };
        // SAFETY: creates a segment of 4096 bytes; removed in drop.
        let id = unsafe { libc::shmget(key, 4096, libc::IPC_CREAT | 0o666) };
        assert!(id >= 0, "shmget: {}", std::io::Error::last_os_error());
        let mut victim = match user {
            User::Current => std::process::Command::new("sleep"),
            User::Nobody => {
                let mut command = std::process::Command::new("setpriv");
                command.args([
                    &format!("--reuid={NOBODY}"),
                    &format!("--regid={NOBODY}"),
                    "--clear-groups",
                    "sleep",
                ]);
                command
            }
        };
        let victim = victim.arg("1000").env("SECRET", "1").spawn().unwrap();
        Targets { tcp, tcp6, udp, unix, dgram, shm: (key, id), victim }
    }

    fn env(&self, tree: &Tree) -> Value {
        let port6 = self.tcp6.as_ref().map_or(1, |l| l.local_addr().unwrap().port());
        json!({
            "W": tree.w(),
            "OUT": tree.out(),
            "PORT": self.tcp.local_addr().unwrap().port().to_string(),
            "PORT6": port6.to_string(),
            "UPORT": self.udp.local_addr().unwrap().port().to_string(),
            "SOCK": tree.base.join("agent.sock").to_str().unwrap(),
            "DGRAM": tree.base.join("dgram.sock").to_str().unwrap(),
            "SHMKEY": self.shm.0.to_string(),
            "VICTIM": self.victim.id().to_string(),
            "TAG": tree.base.file_name().unwrap().to_str().unwrap(),
        })
    }

    /// Whether anything reached the listeners.
    fn reached(&self) -> Vec<&'static str> {
        let mut reached = Vec::new();
        if self.tcp.accept().is_ok() {
            reached.push("tcp4");
        }
        if self.tcp6.as_ref().is_some_and(|l| l.accept().is_ok()) {
            reached.push("tcp6");
        }
        if self.udp.recv(&mut [0u8; 16]).map_err(|e| e.kind()) != Err(ErrorKind::WouldBlock) {
            reached.push("udp");
        }
        if self.unix.accept().is_ok() {
            reached.push("unix-socket");
        }
        if self.dgram.recv(&mut [0u8; 16]).is_ok() {
            reached.push("unix-datagram");
        }
        reached
    }
}

impl Drop for Targets {
    fn drop(&mut self) {
        let _ = self.victim.kill();
        let _ = self.victim.wait();
        // SAFETY: removes the segment this test created.
        unsafe { libc::shmctl(self.shm.1, libc::IPC_RMID, std::ptr::null_mut()) };
    }
}

trait AsRaw {
    fn as_raw(&self) -> i32;
}
impl<T: std::os::fd::AsRawFd> AsRaw for T {
    fn as_raw(&self) -> i32 {
        self.as_raw_fd()
    }
}

fn set_nonblocking(fd: i32) {
    // SAFETY: fcntl on a descriptor the test owns.
    unsafe { libc::fcntl(fd, libc::F_SETFL, libc::fcntl(fd, libc::F_GETFL) | libc::O_NONBLOCK) };
}

/// One copy of the outside tree per probe, and each probe's file in the writable root.
fn lay_out(tree: &Tree, user: User) {
    for (name, _) in PROBES {
        let dir = tree.out.join(name);
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("file"), "outside").unwrap();
        std::fs::write(dir.join("sub/deep"), "deep").unwrap();
        set_xattr(&dir.join("file"), "user.k", b"v");
        std::fs::write(tree.w.join(format!("{name}-mine")), "mine").unwrap();
    }
    user.own(&tree.base);
}

fn verdicts(output: &str) -> Vec<(String, String)> {
    output
        .lines()
        .filter_map(|line| line.split_once(": "))
        .filter(|(name, _)| PROBES.iter().any(|(probe, _)| probe == name))
        .map(|(name, verdict)| (name.to_owned(), verdict.to_owned()))
        .collect()
}

#[tokio::test]
async fn every_escape_probe_is_held_as_root_and_as_nobody() {
    for user in User::all() {
        let tree = Tree::new("probes", user);
        lay_out(&tree, user);
        let targets = Targets::new(&tree, user);
        let before = full_snapshot(&tree.out);
        let mut server = user.ready(&[], &[]).await;
        let sandbox = json!({"mode": "restricted", "writableRoots": [tree.w()]});
        let params = sandboxed(
            "probe",
            &["sh", "-c", &probe_script()],
            tree.w(),
            targets.env(&tree),
            sandbox,
        );
        let (output, code) = run(&mut server, params).await;
        assert_eq!(code, 0, "{user:?}: {output}");
        let held: Vec<(String, String)> =
            PROBES.iter().map(|(name, _)| (name.to_string(), "held".to_owned())).collect();
        assert_eq!(verdicts(&output), held, "{user:?}: {output}");
        let zero = "0000000000000000";
        let status: Vec<&str> =
            output.lines().filter(|l| l.starts_with("Cap") || l.starts_with("NoNew")).collect();
        assert_eq!(
            status,
            [
                format!("CapInh: {zero}"),
                format!("CapPrm: {zero}"),
                format!("CapEff: {zero}"),
                format!("CapBnd: {zero}"),
                format!("CapAmb: {zero}"),
                "NoNewPrivs: 1".to_owned()
            ],
            "{user:?}"
        );
        // `ls` itself holds 3, the directory it lists.
        assert!(output.contains("fds: 0 1 2 3 \n"), "{user:?}: {output}");
        assert_eq!(full_snapshot(&tree.out), before, "{user:?}: the outside tree changed");
        assert_eq!(targets.reached(), Vec::<&str>::new(), "{user:?}");
        let shm = format!(
            "/dev/shm/exec-server-probe-{}",
            tree.base.file_name().unwrap().to_str().unwrap()
        );
        assert!(!std::path::Path::new(&shm).exists(), "{user:?}: {shm} was created");
    }
}

/// Without a sandbox the same probes get through: they test what they claim.
#[tokio::test]
async fn without_a_sandbox_the_probes_escape() {
    for user in User::all() {
        let tree = Tree::new("baseline", user);
        lay_out(&tree, user);
        let targets = Targets::new(&tree, user);
        let mut server = user.ready(&[], &[]).await;
        let mut params = sandboxed(
            "probe",
            &["sh", "-c", &probe_script()],
            tree.w(),
            targets.env(&tree),
            json!(null),
        );
        params.as_object_mut().unwrap().remove("sandbox");
        let (output, _) = run(&mut server, params).await;
        let escaped: BTreeSet<String> = verdicts(&output)
            .into_iter()
            .filter(|(_, verdict)| verdict == "escaped")
            .map(|(name, _)| name)
            .collect();
        let mut expected: BTreeSet<String> =
            PROBES.iter().map(|(name, _)| name.to_string()).collect();
        if user == User::Nobody {
            expected.remove("drop-caches");
            // Root's /dev/null: nobody may not change its mode.
            expected.remove("devnull-fchmod");
        }
        if targets.tcp6.is_none() {
            expected.remove("tcp6");
        }
        assert_eq!(escaped, expected, "{user:?}: {output}");
        let _ = std::fs::remove_file(format!(
            "/dev/shm/exec-server-probe-{}",
            tree.base.file_name().unwrap().to_str().unwrap()
        ));
    }
}

#[tokio::test]
async fn ordinary_work_inside_the_writable_root_succeeds() {
    let script = r#"set -e
mkdir -p a/b/c
echo hi > a/f
echo more >> a/f
mv a/f a/g
ln -s g a/link
ln a/g a/hard
printf '#!/bin/sh\necho script-ran\n' > a/s.sh
chmod +x a/s.sh
./a/s.sh
mkfifo a/fifo
(echo through-fifo > a/fifo &)
cat a/fifo
python3 -c 'print("python-ran")'
cat a/link
stat -c %h a/g
touch -d @0 a/g
stat -c %Y a/g
rm -r a/b
echo done > /dev/null
"#;
    for user in User::all() {
        let tree = Tree::new("work", user);
        let mut server = user.ready(&[], &[]).await;
        let sandbox = json!({"mode": "restricted", "writableRoots": [tree.w()]});
        let params = sandboxed("work", &["sh", "-c", script], tree.w(), json!({}), sandbox);
        let (output, code) = run(&mut server, params).await;
        assert_eq!(
            (output.as_str(), code),
            ("script-ran\nthrough-fifo\npython-ran\nhi\nmore\n2\n0\n", 0),
            "{user:?}"
        );
        assert_eq!(std::fs::read_to_string(tree.w.join("a/hard")).unwrap(), "hi\nmore\n");
        assert!(!tree.w.join("a/b").exists());
    }
}

#[tokio::test]
async fn a_tty_process_is_confined_and_has_its_terminal() {
    for user in User::all() {
        let tree = Tree::new("tty", user);
        let mut server = user.ready(&[], &[]).await;
        let script = format!("stty size; test -t 0 && echo is-a-tty; (echo x > {}/file) 2>/dev/null || echo held; echo y > /dev/tty", tree.out());
        let mut params = sandboxed(
            "t",
            &["sh", "-c", &script],
            tree.w(),
            json!({}),
            json!({"mode": "restricted", "writableRoots": [tree.w()]}),
        );
        params["tty"] = json!(true);
        let (output, code) = run(&mut server, params).await;
        assert_eq!((output.as_str(), code), ("24 80\r\nis-a-tty\r\nheld\r\ny\r\n", 0), "{user:?}");
        assert_eq!(std::fs::read_to_string(tree.out.join("file")).unwrap(), "outside");
    }
}

#[tokio::test]
async fn readable_roots_confine_reads() {
    let tree = Tree::new("reads", User::Current);
    let readable = tree.base.join("readable");
    std::fs::create_dir(&readable).unwrap();
    std::fs::write(readable.join("r"), "readable\n").unwrap();
    let mut server = User::Current.ready(&[], &[]).await;
    // An inotify watch on a directory outside would name every file made there.
    let watch = r#"python3 -c 'import ctypes; c = ctypes.CDLL(None); assert c.inotify_add_watch(c.inotify_init(), b"/etc", 0x100) >= 0' 2>/dev/null || echo held-inotify"#;
    let script = format!(
        "cat {0}/r; cat {1}/file 2>/dev/null || echo held-file; ls /etc >/dev/null 2>&1 || echo held-etc; {watch}; echo w > w; cat w",
        readable.display(),
        tree.out()
    );
    let sandbox = json!({"mode": "restricted", "writableRoots": [tree.w()], "readableRoots": ["/usr", readable]});
    let (output, code) =
        run(&mut server, sandboxed("r", &["sh", "-c", &script], tree.w(), json!({}), sandbox))
            .await;
    assert_eq!((output.as_str(), code), ("readable\nheld-file\nheld-etc\nheld-inotify\nw\n", 0));
}

#[tokio::test]
async fn network_true_has_a_loopback_of_its_own() {
    let tree = Tree::new("network", User::Current);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let mut server = User::Current.ready(&[], &[]).await;
    // The host's listener at that port is not reached; its own server on its
    // own loopback is.
    let script = "python3 -c '
import os, socket
try:
    socket.create_connection((\"127.0.0.1\", int(os.environ[\"PORT\"])), 5)
    print(\"reached the host\")
except ConnectionRefusedError:
    print(\"refused\")
own = socket.create_server((\"127.0.0.1\", 0))
socket.create_connection(own.getsockname(), 5).sendall(b\"hi\")
print(own.accept()[0].recv(2).decode())
'";
    let sandbox = json!({"mode": "restricted", "writableRoots": [tree.w()], "network": true});
    let (output, code) = run(
        &mut server,
        sandboxed("n", &["sh", "-c", script], tree.w(), json!({"PORT": port}), sandbox),
    )
    .await;
    assert_eq!((output.as_str(), code), ("refused\nhi\n", 0));
    assert_eq!(listener.accept().unwrap_err().kind(), std::io::ErrorKind::WouldBlock);
}

/// A daemon that double-forks, calls setsid and waits until its parent is gone
/// is still confined.
#[tokio::test]
async fn a_setsid_daemon_stays_confined_after_its_parent_exits() {
    for user in User::all() {
        let tree = Tree::new("daemon", user);
        for fifo in ["go", "result"] {
            let path = std::ffi::CString::new(tree.w.join(fifo).to_str().unwrap()).unwrap();
            // SAFETY: a NUL-terminated path.
            assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o666) }, 0);
        }
        user.own(&tree.base);
        let mut server = user.ready(&[], &[]).await;
        let daemon = format!(
            "cat go >/dev/null; if (echo x > {}/file) 2>/dev/null; then echo escaped > result; else echo held > result; fi",
            tree.out()
        );
        let script = format!("(setsid sh -c '{daemon}' </dev/null >/dev/null 2>&1 &); exit 7");
        let sandbox = json!({"mode": "restricted", "writableRoots": [tree.w()]});
        let (_, code) =
            run(&mut server, sandboxed("d", &["sh", "-c", &script], tree.w(), json!({}), sandbox))
                .await;
        assert_eq!(code, 7);
        let (go, result) = (tree.w.join("go"), tree.w.join("result"));
        let verdict = within("the daemon's verdict", async move {
            tokio::task::spawn_blocking(move || {
                std::fs::write(go, "go").unwrap();
                std::fs::read_to_string(result).unwrap()
            })
            .await
            .unwrap()
        })
        .await;
        assert_eq!(verdict, "held\n", "{user:?}");
        assert_eq!(std::fs::read_to_string(tree.out.join("file")).unwrap(), "outside");
    }
}

fn state(pid: u32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    stat.rsplit(") ").next().unwrap().chars().next().unwrap()
}

/// A sandboxed daemon that left its session and tried to stop and kill the
/// server's watcher still dies with a SIGKILLed server.
#[tokio::test]
async fn nothing_sandboxed_outlives_a_sigkilled_server() {
    for user in User::all() {
        let tree = Tree::new("outlive", user);
        let ready = tree.w.join("ready");
        let path = std::ffi::CString::new(ready.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o666) }, 0);
        user.own(&tree.base);
        let mut server = user.ready(&[], &[]).await;
        let server_pid = server.child.id().unwrap();
        // The watcher starts with the first child and names itself: wait for the name.
        let first = crate::support::start_params("first", &["true"], json!({}));
        server.result("process/start", first).await;
        let watcher = poll_proc("the server's watcher", || {
            descendants(server_pid).into_iter().find(|(_, comm)| comm == "exec-server-wd")
        })
        .await
        .0;
        let script = "kill -STOP \"$WATCHER\" 2>/dev/null; kill -KILL \"$WATCHER\" 2>/dev/null; kill -KILL -1 2>/dev/null; \
            (setsid sh -c 'echo up > ready; exec sleep 1000' </dev/null >/dev/null 2>&1 &); \
            cat ready >/dev/null; echo both-up; exec sleep 1000";
        let sandbox = json!({"mode": "restricted", "writableRoots": [tree.w()]});
        let params = sandboxed(
            "o",
            &["sh", "-c", script],
            tree.w(),
            json!({"WATCHER": watcher.to_string()}),
            sandbox,
        );
        assert_eq!(server.result("process/start", params).await["sandboxType"], "linuxLandlock");
        // The daemon is up (it wrote `ready`) once the leader says so.
        loop {
            let message = server.next().await.expect("the server is serving");
            if message["method"] == "process/output" {
                assert_eq!(
                    String::from_utf8(unb64(&message["params"]["chunk"])).unwrap(),
                    "both-up\n"
                );
                break;
            }
        }
        assert_eq!(state(watcher), 'S', "{user:?}: the watcher was stopped or killed");
        let sandboxed: Vec<u32> = descendants(server_pid)
            .into_iter()
            .filter(|(pid, _)| *pid != watcher)
            .map(|(pid, _)| pid)
            .collect();
        // The trampoline, the init, the leader and the daemon (perhaps the daemon's parent too).
        assert!(sandboxed.len() >= 4, "{user:?}: {sandboxed:?}");
        server.child.start_kill().unwrap();
        server.child.wait().await.unwrap();
        for pid in sandboxed.into_iter().chain([watcher]) {
            wait_dead(pid).await;
        }
    }
}

/// The exec-server binary run inside the sandbox is confined like anything else.
#[tokio::test]
async fn the_server_binary_run_inside_cannot_write_outside() {
    for user in User::all() {
        let tree = Tree::new("nested", user);
        let mut server = user.ready(&[], &[]).await;
        let target = tree.out.join("nested");
        let requests = [
            json!({"id": 1, "method": "initialize", "params": {"clientName": "nested"}}),
            json!({"method": "initialized"}),
            json!({"id": 2, "method": "fs/writeFile", "params": {"path": target, "dataBase64": "eA=="}}),
            json!({"id": 3, "method": "process/start", "params": {"processId": "p", "argv": ["sh", "-c", format!("echo x > {}/file", tree.out())], "cwd": tree.w(), "env": {"PATH": "/usr/bin:/bin"}, "tty": false}}),
        ];
        let input: String = requests.iter().map(|r| format!("{r}\n")).collect();
        std::fs::write(tree.w.join("requests"), input).unwrap();
        user.own(&tree.w);
        let script = format!("{} --on-eof wait < requests 2>/dev/null", *BIN);
        let sandbox = json!({"mode": "restricted", "writableRoots": [tree.w()]});
        let (output, code) =
            run(&mut server, sandboxed("n", &["sh", "-c", &script], tree.w(), json!({}), sandbox))
                .await;
        assert_eq!(code, 0, "{user:?}: {output}");
        let replies: Vec<Value> =
            output.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let write = replies.iter().find(|r| r["id"] == 2).unwrap();
        assert_eq!(write["error"]["code"], -32603, "{user:?}: {write}");
        assert!(
            write["error"]["message"].as_str().unwrap().contains("Read-only file system"),
            "{write}"
        );
        let exited = replies.iter().find(|r| r["method"] == "process/exited").unwrap();
        assert_eq!(exited["params"]["exitCode"], 2, "{user:?}: {output}");
        assert!(!target.exists());
        assert_eq!(std::fs::read_to_string(tree.out.join("file")).unwrap(), "outside");
    }
}

/// The process's own terminal, opened by the server on the host's devpts, is
/// opened again in the view: its metadata cannot be changed through fds 0-2.
#[tokio::test]
async fn a_sandboxed_terminal_is_read_only_through_its_descriptors() {
    for user in User::all() {
        let tree = Tree::new("tty-meta", user);
        user.own(&tree.base);
        let mut server = user.ready(&[], &[]).await;
        let script = r#"python3 -c '
import os
for fd in (0, 1, 2):
    try:
        os.utime(fd)
        print(f"fd {fd}: escaped")
    except OSError:
        print(f"fd {fd}: held")
'"#;
        let sandbox = json!({"mode": "restricted", "writableRoots": [tree.w()]});
        let mut params = sandboxed("t", &["sh", "-c", script], tree.w(), json!({}), sandbox);
        params["tty"] = json!(true);
        let (output, code) = run(&mut server, params).await;
        assert_eq!(code, 0, "{user:?}: {output}");
        assert_eq!(output.replace('\r', ""), "fd 0: held\nfd 1: held\nfd 2: held\n", "{user:?}");
    }
}

/// On a host whose `/` propagates mounts (systemd's default), a mount made
/// after the start never reaches the sandbox with its own flags.
#[tokio::test]
async fn a_mount_made_after_the_start_stays_out_of_the_sandbox() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        assert!(std::env::var_os("CI").is_none(), "CI must run as root: this test mounts");
        eprintln!("SKIPPED: not root: cannot mount");
        return;
    }
    let tree = Tree::new("late-mount", User::Current);
    let late = tree.base.join("late");
    std::fs::create_dir(&late).unwrap();
    // The server in a mount namespace of its own whose / is shared, as on systemd hosts.
    let mut command = tokio::process::Command::new("unshare");
    command.args(["-m", "--propagation", "shared", "--", *BIN]);
    let mut server = crate::binary::Binary::from_command(command);
    server.result("initialize", json!({"clientName": "late"})).await;
    server.send_line(r#"{"method":"initialized"}"#).await;
    let namespace = server.child.id().unwrap().to_string();
    let script = format!(
        r#"read go; chmod 4777 {late}/target 2>/dev/null && echo chmod-escaped || echo chmod-held; touch {late}/made 2>/dev/null && echo touch-escaped || echo touch-held"#,
        late = late.display()
    );
    let sandbox = json!({"mode": "restricted", "writableRoots": [tree.w()]});
    let mut params = sandboxed("late", &["sh", "-c", &script], tree.w(), json!({}), sandbox);
    params["pipeStdin"] = json!(true);
    server.result("process/start", params).await;
    // Now, with the program running, a mount arrives in the server's namespace.
    let mounted = std::process::Command::new("nsenter")
        .args(["-t", &namespace, "-m", "--", "sh", "-c"])
        .arg(format!(
            "mount -t tmpfs late {late} && touch {late}/target && chmod 644 {late}/target",
            late = late.display()
        ))
        .status()
        .unwrap();
    assert!(mounted.success());
    server
        .result(
            "process/write",
            json!({"processId": "late", "chunk": crate::support::b64(b"go\n"), "closeStdin": true}),
        )
        .await;
    let mut output = Vec::new();
    loop {
        let message = server.next().await.unwrap();
        match message["method"].as_str() {
            Some("process/output") => output.extend(unb64(&message["params"]["chunk"])),
            Some("process/closed") => break,
            _ => {}
        }
    }
    assert_eq!(String::from_utf8_lossy(&output), "chmod-held\ntouch-held\n");
    let mode = std::process::Command::new("nsenter")
        .args(["-t", &namespace, "-m", "--", "stat", "-c", "%a"])
        .arg(late.join("target"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&mode.stdout), "644\n");
}

/// With `network: true` a process keeps routing netlink (`getifaddrs`) but
/// gets no `NETLINK_SOCK_DIAG` socket, which would list the host's sockets.
#[tokio::test]
async fn a_networked_sandbox_cannot_list_the_hosts_sockets() {
    let tree = Tree::new("sockdiag", User::Current);
    let mut server = User::Current.ready(&[], &[]).await;
    let script = r#"python3 -c '
import socket
for name, proto in (("route", 0), ("sock_diag", 4)):
    try:
        socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, proto).close()
        print(name, "open")
    except OSError:
        print(name, "refused")
'"#;
    let sandbox = json!({"mode": "restricted", "writableRoots": [tree.w()], "network": true});
    let (output, code) =
        run(&mut server, sandboxed("n", &["sh", "-c", script], tree.w(), json!({}), sandbox)).await;
    assert_eq!((output.as_str(), code), ("route open\nsock_diag refused\n", 0));
}
