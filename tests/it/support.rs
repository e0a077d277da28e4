//! Test support: a raw JSON harness over `server::run` and duplex pipes, and the one timeout helper.

use std::collections::VecDeque;
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use base64::Engine as _;
use exec_server::server::{self, Config};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines};
use tokio::task::JoinHandle;

/// How long any single wait in a test may take before it fails.
pub const TIMEOUT: Duration = Duration::from_secs(20);

/// Awaits `future`, failing the test with `what` if it takes longer than [`TIMEOUT`].
pub async fn within<F: Future>(what: &str, future: F) -> F::Output {
    match tokio::time::timeout(TIMEOUT, future).await {
        Ok(output) => output,
        Err(_) => panic!("timed out after {TIMEOUT:?} waiting for {what}"),
    }
}

pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

pub fn unb64(text: &Value) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(text.as_str().expect("base64 field is a string"))
        .expect("valid base64")
}

/// Peak resident set of `pid` in KiB (VmHWM).
pub fn peak_rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmHWM:")
}

/// Resident set of `pid` now, in KiB (VmRSS).
pub fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Descriptor `fd` of process `pid`, opened anew through /proc with `flags`
/// (non-blocking): for a pipe, another end of the same pipe.
pub fn open_proc_fd(pid: u32, fd: i32, flags: i32) -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    let path = std::ffi::CString::new(format!("/proc/{pid}/fd/{fd}")).unwrap();
    // SAFETY: open of a NUL-terminated path; the new descriptor is owned below.
    let ours = unsafe { libc::open(path.as_ptr(), flags | libc::O_NONBLOCK | libc::O_CLOEXEC) };
    assert!(ours >= 0, "open {path:?}: {}", std::io::Error::last_os_error());
    // SAFETY: `ours` is a new descriptor nothing else owns.
    unsafe { std::os::fd::OwnedFd::from_raw_fd(ours) }
}

/// A fresh scratch directory for one test.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("exec-server-it-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::canonicalize(dir).unwrap()
}

/// A client speaking raw JSON lines to an in-process server.
pub struct Harness {
    writer: DuplexStream,
    lines: Lines<BufReader<DuplexStream>>,
    /// Messages read but not yet consumed, in arrival order.
    pending: VecDeque<Value>,
    next_id: i64,
    pub server: JoinHandle<std::io::Result<()>>,
}

impl Harness {
    /// A server with the default config, before the handshake.
    pub fn new() -> Harness {
        Harness::with_config(Config::default())
    }

    pub fn with_config(config: Config) -> Harness {
        let (client_write, server_read) = tokio::io::duplex(1 << 20);
        let (server_write, client_read) = tokio::io::duplex(1 << 20);
        let server = tokio::spawn(server::run(server_read, server_write, config));
        Harness {
            writer: client_write,
            lines: BufReader::new(client_read).lines(),
            pending: VecDeque::new(),
            next_id: 1,
            server,
        }
    }

    /// A server after `initialize` and `initialized`.
    pub async fn ready() -> Harness {
        Harness::ready_with(Config::default()).await
    }

    pub async fn ready_with(config: Config) -> Harness {
        let mut harness = Harness::with_config(config);
        harness.result("initialize", json!({"clientName": "it"})).await;
        harness.send(json!({"method": "initialized"})).await;
        harness
    }

    pub async fn send_line(&mut self, line: &str) {
        self.writer.write_all(line.as_bytes()).await.unwrap();
        self.writer.write_all(b"\n").await.unwrap();
    }

    pub async fn send_bytes(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).await.unwrap();
    }

    pub async fn send(&mut self, message: Value) {
        self.send_line(&message.to_string()).await;
    }

    /// Closes the client's output: the server sees end of input.
    pub async fn close_input(&mut self) {
        self.writer.shutdown().await.unwrap();
    }

    /// Sends a request and returns its id without waiting.
    pub async fn send_request(&mut self, method: &str, params: Value) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({"id": id, "method": method, "params": params})).await;
        id
    }

    /// The next message from the server, buffered ones first.
    pub async fn next(&mut self) -> Value {
        if let Some(message) = self.pending.pop_front() {
            return message;
        }
        self.read_message().await
    }

    async fn read_message(&mut self) -> Value {
        let line = within("a message from the server", self.lines.next_line())
            .await
            .unwrap()
            .expect("server closed its output");
        serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("server wrote non-JSON {line:?}: {e}"))
    }

    /// The first message (buffered or new) matching `matches`; others stay buffered.
    pub async fn take(&mut self, what: &str, matches: impl Fn(&Value) -> bool) -> Value {
        if let Some(at) = self.pending.iter().position(&matches) {
            return self.pending.remove(at).unwrap();
        }
        within(what, async {
            loop {
                let message = self.read_message().await;
                if matches(&message) {
                    return message;
                }
                self.pending.push_back(message);
            }
        })
        .await
    }

    /// The response to request `id`.
    pub async fn response(&mut self, id: i64) -> Value {
        self.take(&format!("the response to request {id}"), |m| {
            m["id"] == id && m.get("method").is_none()
        })
        .await
    }

    /// Sends a request and returns its whole response message.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.send_request(method, params).await;
        self.response(id).await
    }

    /// Sends a request and returns its `result`, failing on an error.
    pub async fn result(&mut self, method: &str, params: Value) -> Value {
        let response = self.call(method, params).await;
        assert!(response.get("error").is_none(), "{method} failed: {response}");
        response["result"].clone()
    }

    /// Sends a request and returns its `error`, failing on success.
    pub async fn error(&mut self, method: &str, params: Value) -> Value {
        let response = self.call(method, params).await;
        assert!(response.get("result").is_none(), "{method} unexpectedly succeeded: {response}");
        response["error"].clone()
    }

    /// The next notification `method` for process `id`.
    pub async fn notification(&mut self, method: &str, id: &str) -> Value {
        self.take(&format!("{method} of {id}"), |m| {
            m["method"] == method && m["params"]["processId"] == id
        })
        .await["params"]
            .clone()
    }

    /// Starts a pipe process with a PATH and returns once started.
    pub async fn start(&mut self, id: &str, argv: &[&str]) {
        self.start_with(id, argv, json!({})).await;
    }

    /// Starts a process; `extra` fields are merged into the params.
    pub async fn start_with(&mut self, id: &str, argv: &[&str], extra: Value) {
        let result = self.result("process/start", start_params(id, argv, extra)).await;
        assert_eq!(result, json!({"processId": id}));
    }

    /// Every notification of process `id` up to and including `process/closed`.
    pub async fn run_to_close(&mut self, id: &str) -> Vec<Value> {
        let mut seen = Vec::new();
        loop {
            let message = self
                .take(&format!("notifications of {id} until process/closed"), |m| {
                    m["params"]["processId"] == id && m.get("method").is_some()
                })
                .await;
            let closed = message["method"] == "process/closed";
            seen.push(message);
            if closed {
                return seen;
            }
        }
    }

    /// All output bytes of `id` and its `process/exited` params, waiting for close.
    pub async fn output_and_exit(&mut self, id: &str) -> (Vec<u8>, Value) {
        let mut bytes = Vec::new();
        let mut exited = Value::Null;
        for message in self.run_to_close(id).await {
            match message["method"].as_str() {
                Some("process/output") => bytes.extend(unb64(&message["params"]["chunk"])),
                Some("process/exited") => exited = message["params"].clone(),
                _ => {}
            }
        }
        (bytes, exited)
    }

    /// Waits until the output of `id` seen so far contains `needle`; returns it all.
    pub async fn output_containing(&mut self, id: &str, needle: &str, seen: &mut Vec<u8>) {
        while !String::from_utf8_lossy(seen).contains(needle) {
            let params = self.notification("process/output", id).await;
            seen.extend(unb64(&params["chunk"]));
        }
    }
}

/// `process/start` params with PATH set and cwd /tmp; `extra` overrides.
pub fn start_params(id: &str, argv: &[&str], extra: Value) -> Value {
    let mut params = json!({
        "processId": id,
        "argv": argv,
        "cwd": "/tmp",
        "env": {"PATH": "/usr/bin:/bin"},
        "tty": false,
        "arg0": null,
    });
    for (key, value) in extra.as_object().unwrap() {
        params[key] = value.clone();
    }
    params
}

/// Whether `pid` has finished (gone, or a zombie nobody reaped yet).
pub fn is_dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => {
            let state = stat.rsplit(") ").next().and_then(|rest| rest.chars().next());
            matches!(state, Some('Z') | Some('X'))
        }
    }
}

/// Waits for `pid` to exit, through a pidfd (no polling).
pub async fn wait_dead(pid: u32) {
    use std::os::fd::{FromRawFd, OwnedFd};
    // SAFETY: pidfd_open returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return; // ESRCH: already gone
    }
    // SAFETY: the descriptor is new and owned here.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    // SAFETY: the OwnedFd stays open while the AsyncFd owns it.
    let fd = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
    }
    .unwrap();
    within(&format!("process {pid} to die"), fd.readable()).await.unwrap().retain_ready();
    assert!(is_dead(pid), "process {pid} is still alive");
}

/// Every entry under `dir`, links not followed: its type, mode and content (or
/// link target), to compare a tree byte for byte before and after.
pub fn snapshot(dir: &std::path::Path) -> std::collections::BTreeMap<PathBuf, String> {
    use std::os::unix::fs::PermissionsExt;
    let mut entries = std::collections::BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(path) = pending.pop() {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let mode = meta.permissions().mode();
        let description = if meta.file_type().is_symlink() {
            format!("link {mode:o} -> {:?}", std::fs::read_link(&path).unwrap())
        } else if meta.is_dir() {
            for entry in std::fs::read_dir(&path).unwrap() {
                pending.push(entry.unwrap().path());
            }
            format!("dir {mode:o}")
        } else {
            format!("file {mode:o} {:?}", std::fs::read(&path).unwrap())
        };
        entries.insert(path, description);
    }
    entries
}

/// The pid of the process listening on the Unix socket at `path`, through SO_PEERCRED.
pub fn peer_pid(path: &std::path::Path) -> u32 {
    use std::os::fd::AsRawFd;
    let stream = std::os::unix::net::UnixStream::connect(path).unwrap();
    // SAFETY: ucred is plain data, filled in by getsockopt.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED writes at most `len` bytes into `cred`.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            std::ptr::addr_of_mut!(cred).cast(),
            &mut len,
        )
    };
    assert_eq!(rc, 0, "SO_PEERCRED: {}", std::io::Error::last_os_error());
    cred.pid as u32
}

/// The parent of `pid`, from `/proc/PID/stat`.
pub fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.split_whitespace().nth(1)?.parse().ok()
}

/// The children of `pid` (zombies included), by the parent pid in every
/// `/proc/*/stat`: the per-thread `children` files are only a snapshot,
/// which the kernel says may miss a process.
pub fn children_of(pid: u32) -> Vec<u32> {
    let mut found: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&child| parent_of(child) == Some(pid))
        .collect();
    found.sort_unstable();
    found
}

/// The server's processes and their descendants, found through `/proc`.
pub fn descendants(pid: u32) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    let mut pending = vec![pid];
    while let Some(parent) = pending.pop() {
        for child in children_of(parent) {
            let comm = std::fs::read_to_string(format!("/proc/{child}/comm")).unwrap_or_default();
            found.push((child, comm.trim().to_owned()));
            pending.push(child);
        }
    }
    found
}

/// Polls `/proc` until `found` yields something (a process renaming itself
/// or exec'ing has no event to wait for), within the tests' one timeout.
pub async fn poll_proc<T>(what: &str, mut found: impl FnMut() -> Option<T>) -> T {
    within(what, async {
        loop {
            if let Some(value) = found() {
                return value;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await
}

/// Whether the tests run as root (to act as another user); otherwise says
/// why `what` is skipped, and fails under `CI`.
pub fn root_or_skip(what: &str) -> bool {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    let message = format!("not root: {what} (run as root; CI does)");
    assert!(std::env::var_os("CI").is_none(), "{message}");
    eprintln!("SKIPPED: {message}");
    false
}

/// `program` run as uid and gid 65534 through `setpriv` (the tests run as root).
pub fn as_nobody(program: &str) -> tokio::process::Command {
    let nobody = crate::sandbox::NOBODY;
    let mut command = tokio::process::Command::new("setpriv");
    command.args([
        &format!("--reuid={nobody}"),
        &format!("--regid={nobody}"),
        "--clear-groups",
        "--",
        program,
    ]);
    command
}

/// How the binary under test words an OS error: glibc's texts, or musl's
/// for the static build (`EXEC_SERVER_TEST_BIN`), which differ for a few.
pub fn os_text(errno: i32) -> &'static str {
    static MUSL: std::sync::LazyLock<bool> = std::sync::LazyLock::new(|| {
        let binary = std::fs::read(*crate::binary::BIN).unwrap_or_default();
        !binary.windows(8).any(|w| w == b"ld-linux")
    });
    match (errno, *MUSL) {
        (libc::EMFILE, false) => "Too many open files",
        (libc::EMFILE, true) => "No file descriptors available",
        (libc::ELOOP, false) => "Too many levels of symbolic links",
        (libc::ELOOP, true) => "Symbolic link loop",
        _ => panic!("no text for errno {errno}"),
    }
}
