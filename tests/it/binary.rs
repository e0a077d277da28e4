//! Through the real binary: handshake, shutdown on EOF and signals, process groups, flags.

use std::process::Stdio;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

use crate::support::{
    b64, children_of, is_dead, open_proc_fd, poll_proc, scratch, start_params, unb64, wait_dead,
    within,
};

/// The binary under test: `$EXEC_SERVER_TEST_BIN` when set (the static
/// build, `just test-static`), else the one cargo built.
pub static BIN: std::sync::LazyLock<&'static str> =
    std::sync::LazyLock::new(|| match std::env::var("EXEC_SERVER_TEST_BIN") {
        Ok(path) if !path.is_empty() => Box::leak(path.into_boxed_str()),
        _ => env!("CARGO_BIN_EXE_exec-server"),
    });

/// The binary with piped stdio, killed if the test fails.
pub struct Binary {
    pub child: Child,
    stdin: Option<ChildStdin>,
    lines: Option<Lines<BufReader<ChildStdout>>>,
    next_id: i64,
}

impl Binary {
    pub fn spawn(args: &[&str]) -> Binary {
        Binary::spawn_with_stderr(args, Stdio::inherit())
    }

    /// Like [`Binary::spawn`], with stderr going to `stderr`.
    pub fn spawn_with_stderr(args: &[&str], stderr: Stdio) -> Binary {
        let mut command = tokio::process::Command::new(*BIN);
        command.args(args).stderr(stderr);
        Binary::from_command(command)
    }

    /// Runs `command` (the binary, perhaps behind `setpriv`) with piped stdin and stdout.
    pub fn from_command(mut command: tokio::process::Command) -> Binary {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Binary { child, stdin, lines: Some(lines), next_id: 1 }
    }

    pub async fn ready(args: &[&str]) -> Binary {
        let mut server = Binary::spawn(args);
        let result = server.result("initialize", json!({"clientName": "binary-test"})).await;
        assert_eq!(result["protocolVersion"], "exec-server.v0");
        server.send_line(r#"{"method":"initialized"}"#).await;
        server
    }

    pub async fn send_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(format!("{line}\n").as_bytes()).await.unwrap();
        stdin.flush().await.unwrap();
    }

    /// The server's stdin, for a test that writes to it from another task.
    pub fn take_stdin(&mut self) -> ChildStdin {
        self.stdin.take().expect("stdin is open")
    }

    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Closes the test's end of the server's stdout.
    pub fn close_stdout(&mut self) {
        self.lines = None;
    }

    pub async fn next(&mut self) -> Option<Value> {
        let line = within(
            "a line from the binary",
            self.lines.as_mut().expect("stdout is open").next_line(),
        )
        .await
        .unwrap()?;
        Some(
            serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("stdout had non-JSON {line:?}: {e}")),
        )
    }

    /// Sends a request and returns its response, skipping notifications.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send_line(&json!({"id": id, "method": method, "params": params}).to_string()).await;
        loop {
            let message = self.next().await.expect("server closed stdout before answering");
            if message["id"] == id {
                return message;
            }
        }
    }

    pub async fn result(&mut self, method: &str, params: Value) -> Value {
        let response = self.call(method, params).await;
        assert!(response.get("error").is_none(), "{method} failed: {response}");
        response["result"].clone()
    }

    /// Sends a request that must fail and returns its error.
    pub async fn error(&mut self, method: &str, params: Value) -> Value {
        let response = self.call(method, params).await;
        assert!(response.get("result").is_none(), "{method} succeeded: {response}");
        response["error"].clone()
    }

    /// The next notification `method` of process `id`.
    pub async fn notification(&mut self, method: &str, id: &str) -> Value {
        loop {
            let message = self.next().await.expect("server closed stdout");
            if message["method"] == method && message["params"]["processId"] == id {
                return message["params"].clone();
            }
        }
    }

    /// Waits for the binary to exit and returns its exit code.
    pub async fn exit_code(&mut self) -> Option<i32> {
        within("the binary to exit", self.child.wait()).await.unwrap().code()
    }
}

#[tokio::test]
async fn handshake_and_a_process() {
    let mut server = Binary::ready(&[]).await;
    server.result("process/start", start_params("p", &["echo", "hi"], json!({}))).await;
    let output = server.notification("process/output", "p").await;
    assert_eq!(unb64(&output["chunk"]), b"hi\n");
    server.close_stdin();
    assert_eq!(server.exit_code().await, Some(0));
}

#[tokio::test]
async fn stdin_eof_kills_a_child_and_its_grandchild() {
    let dir = scratch("bin-eof");
    let marker = dir.join("marker");
    let script = format!("sh -c 'echo $$; sleep 2; touch {}' & wait", marker.display());
    let mut server = Binary::ready(&[]).await;
    server.result("process/start", start_params("tree", &["sh", "-c", &script], json!({}))).await;
    let output = server.notification("process/output", "tree").await;
    let grandchild: u32 =
        String::from_utf8(unb64(&output["chunk"])).unwrap().trim().parse().unwrap();
    assert!(!is_dead(grandchild));
    server.close_stdin();
    // What was pending is flushed: the kill is reported before stdout closes.
    let exited = server.notification("process/exited", "tree").await;
    assert_eq!(
        (exited["exitCode"].clone(), exited["signal"].clone()),
        (json!(137), json!("SIGKILL"))
    );
    assert_eq!(server.exit_code().await, Some(0));
    assert!(is_dead(grandchild), "grandchild {grandchild} outlived the server");
    assert!(!marker.exists());
}

#[tokio::test]
async fn sigterm_kills_the_children_and_exits_zero() {
    let mut server = Binary::ready(&[]).await;
    server
        .result(
            "process/start",
            start_params("s", &["sh", "-c", "sleep 30 & echo $!; wait"], json!({})),
        )
        .await;
    let output = server.notification("process/output", "s").await;
    let grandchild: u32 =
        String::from_utf8(unb64(&output["chunk"])).unwrap().trim().parse().unwrap();
    let pid = server.child.id().unwrap() as libc::pid_t;
    // SAFETY: plain kill(2) of the server we spawned.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    assert_eq!(server.exit_code().await, Some(0));
    assert!(is_dead(grandchild), "grandchild {grandchild} outlived the server");
}

/// Over stdio, `session/end` is an EOF that is answered: the tree dies,
/// and the server exits 0 once the reply is out.
#[tokio::test]
async fn session_end_over_stdio_kills_the_tree_and_ends_the_server() {
    let mut server = Binary::ready(&[]).await;
    let script = "sleep 30 & echo $!; wait";
    server.result("process/start", start_params("s", &["sh", "-c", script], json!({}))).await;
    let output = server.notification("process/output", "s").await;
    let grandchild: u32 =
        String::from_utf8(unb64(&output["chunk"])).unwrap().trim().parse().unwrap();
    assert_eq!(server.result("session/end", json!({})).await, json!({}));
    assert_eq!(server.exit_code().await, Some(0));
    wait_dead(grandchild).await;
}

/// What was sent after `session/end` does not run, even when `session/end`
/// waited behind a start: it is refused as the connection ends.
#[tokio::test]
async fn nothing_sent_after_session_end_runs() {
    let mut server = Binary::ready(&[]).await;
    let dir = scratch("after-end");
    let marker = dir.join("late-ran");
    let written = dir.join("late-written");
    let late = format!("touch {}", marker.display());
    let lines = [
        json!({"id": 2, "method": "process/start", "params": start_params("first", &["sleep", "30"], json!({}))}),
        json!({"id": 3, "method": "session/end", "params": {}}),
        json!({"id": 4, "method": "process/start", "params": start_params("late", &["sh", "-c", &late], json!({}))}),
        json!({"id": 5, "method": "fs/writeFile", "params": {"path": written, "dataBase64": b64(b"late")}}),
    ];
    let batch: String = lines.iter().map(|line| format!("{line}\n")).collect();
    server.send_line(batch.trim_end()).await;
    let mut replies = Vec::new();
    while let Some(message) = server.next().await {
        if message.get("id").is_some() {
            replies.push(message);
        }
    }
    // A line read while the end waited is refused at once; once the end has
    // run (the start finished first), nothing more is read or answered.
    replies.sort_by_key(|reply| reply["id"].as_i64());
    let refusal = |id: i64, method: &str| {
        let message = format!("{method} was not run: the connection is ending");
        json!({"id": id, "error": {"code": -32600, "message": message}})
    };
    let expected = [
        json!({"id": 2, "result": {"processId": "first"}}),
        json!({"id": 3, "result": {}}),
        refusal(4, "process/start"),
        refusal(5, "fs/writeFile"),
    ];
    assert!(replies.len() >= 2 && replies.len() <= 4, "{replies:?}");
    assert_eq!(replies[..], expected[..replies.len()]);
    assert_eq!(server.exit_code().await, Some(0));
    assert!(!marker.exists(), "the start sent after session/end ran");
    assert!(!written.exists(), "the write sent after session/end ran");
}

/// A server started with every signal blocked still ends on SIGTERM, with its children.
#[tokio::test]
async fn a_server_started_with_signals_blocked_still_ends_on_sigterm() {
    let mut command = tokio::process::Command::new(*BIN);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        command.pre_exec(|| {
            let mut all: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::sigprocmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
            Ok(())
        });
    }
    let mut server = Binary::from_command(command);
    server.result("initialize", json!({"clientName": "binary-test"})).await;
    server.send_line(r#"{"method":"initialized"}"#).await;
    server.result("process/start", start_params("s", &["sleep", "30"], json!({}))).await;
    let child =
        server.result("process/list", json!({})).await["processes"][0]["pid"].as_u64().unwrap();
    let pid = server.child.id().unwrap() as libc::pid_t;
    // SAFETY: plain kill(2) of the server we spawned.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    assert_eq!(server.exit_code().await, Some(0));
    wait_dead(child as u32).await;
}

/// When the watcher (which ends a child if the server is SIGKILLed) cannot
/// start, the child does not start either, and says why. Descriptor limits
/// just above the minimum run out either at the child's pipes or at the
/// watcher's: some limit must meet the watcher's, and none may start a child
/// without one.
#[tokio::test]
async fn a_start_fails_when_its_watcher_cannot_start() {
    let watcher = format!("failed to start `true`: cannot start the watcher that ends it if the server is SIGKILLed: {} (os error 24)", crate::support::os_text(libc::EMFILE));
    let mut met = false;
    for limit in 16..=24 {
        let mut command = tokio::process::Command::new("sh");
        let script = format!(r#"ulimit -n {limit} && exec "$0""#);
        command.args(["-c", &script, *BIN]).stderr(Stdio::null());
        let mut server = Binary::from_command(command);
        server.result("initialize", json!({"clientName": "binary-test"})).await;
        server.send_line(r#"{"method":"initialized"}"#).await;
        let reply = server.call("process/start", start_params("s", &["true"], json!({}))).await;
        let message = reply["error"]["message"].as_str().unwrap_or_default().to_owned();
        if message == watcher {
            met = true;
        } else if reply.get("result").is_some() {
            let list = server.result("process/list", json!({})).await;
            let pid = server.child.id().unwrap();
            // By its command line, which it has once its exec is done: the
            // spawn may return before that (the vfork child lets its parent
            // go early in the exec), so the test waits for it.
            let is_watcher = |child: &u32| {
                std::fs::read(format!("/proc/{child}/cmdline"))
                    .is_ok_and(|line| line.ends_with(b"--exec-server-watcher\0"))
            };
            let watchers = |pid| children_of(pid).into_iter().filter(is_watcher).count();
            let what = format!("limit {limit}: the watcher of a started child ({list})");
            let watchers = poll_proc(&what, || Some(watchers(pid)).filter(|&n| n > 0)).await;
            assert_eq!(watchers, 1, "limit {limit}: a child started without a watcher: {list}");
        } else {
            assert!(
                message.starts_with(&format!(
                    "failed to start `true`: {}",
                    crate::support::os_text(libc::EMFILE)
                )),
                "limit {limit}: {reply}"
            );
        }
    }
    assert!(met, "no descriptor limit met the watcher's start");
}

#[tokio::test]
async fn malformed_lines_keep_the_binary_serving() {
    let mut server = Binary::ready(&["--max-message-bytes", "100"]).await;
    server.send_line("this is not json").await;
    assert_eq!(server.next().await.unwrap()["id"], -1);
    server.send_line("[]").await;
    assert_eq!(server.next().await.unwrap()["id"], -1);
    server.send_line(&format!("{{\"pad\":\"{}\"}}", "x".repeat(200))).await;
    assert_eq!(
        server.next().await.unwrap(),
        json!({"id": -1, "error": {"code": -32600, "message": "message is longer than the limit of 100 bytes (--max-message-bytes); it was discarded"}})
    );
    assert_eq!(server.result("process/list", json!({})).await, json!({"processes": []}));
}

#[tokio::test]
async fn sigint_to_a_sleep_reports_130() {
    let mut server = Binary::ready(&[]).await;
    server.result("process/start", start_params("z", &["sleep", "30"], json!({}))).await;
    let result =
        server.result("process/signal", json!({"processId": "z", "signal": "SIGINT"})).await;
    assert_eq!(result, json!({"running": true}));
    assert_eq!(
        server.notification("process/exited", "z").await,
        json!({"processId": "z", "seq": 0, "exitCode": 130, "signal": "SIGINT"})
    );
}

/// A server started ignoring SIGINT and SIGQUIT (a script's background job,
/// `nohup`) starts its children with every signal at its default and none blocked.
#[tokio::test]
async fn children_start_with_default_signals_when_the_server_ignores_some() {
    let mut command = tokio::process::Command::new("sh");
    command.args(["-c", r#"trap '' INT QUIT HUP PIPE USR1; exec "$0""#, *BIN]);
    let mut server = Binary::from_command(command);
    server.result("initialize", json!({"clientName": "binary-test"})).await;
    server.send_line(r#"{"method":"initialized"}"#).await;
    let status = ["grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status"];
    server.result("process/start", start_params("s", &status, json!({}))).await;
    let output = server.notification("process/output", "s").await;
    assert_eq!(
        String::from_utf8(unb64(&output["chunk"])).unwrap(),
        "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n"
    );
    server.result("process/start", start_params("z", &["sleep", "30"], json!({}))).await;
    server.result("process/signal", json!({"processId": "z", "signal": "interrupt"})).await;
    assert_eq!(
        server.notification("process/exited", "z").await,
        json!({"processId": "z", "seq": 0, "exitCode": 130, "signal": "SIGINT"})
    );
}

#[tokio::test]
async fn signals_reach_the_whole_group() {
    let mut server = Binary::ready(&[]).await;
    // The child restores SIGTERM's default before it reports its pid.
    let script = "trap '' TERM; env --default-signal=TERM sh -c 'echo $$; exec sleep 30' & wait";
    server.result("process/start", start_params("g", &["sh", "-c", script], json!({}))).await;
    let output = server.notification("process/output", "g").await;
    let sleeper: u32 = String::from_utf8(unb64(&output["chunk"])).unwrap().trim().parse().unwrap();
    // The shell ignores SIGTERM; the sleep in its group dies of it, and then the shell ends.
    server.result("process/signal", json!({"processId": "g", "signal": "SIGTERM"})).await;
    wait_dead(sleeper).await;
    // The shell itself survived the signal: it exits on its own, not by SIGTERM.
    let exited = server.notification("process/exited", "g").await;
    assert_eq!(exited.get("signal"), None, "{exited}");
}

#[tokio::test]
async fn flags_max_processes_and_root() {
    let dir = scratch("bin-flags");
    let root = dir.to_str().unwrap();
    let mut server = Binary::ready(&["--max-processes", "1", "--root", root]).await;
    server
        .result("process/start", start_params("one", &["sleep", "30"], json!({"cwd": root})))
        .await;
    let response =
        server.call("process/start", start_params("two", &["true"], json!({"cwd": root}))).await;
    assert_eq!(
        response["error"],
        json!({"code": -32600, "message": "too many processes: the limit is 1 live processes per connection"})
    );
    let response = server.call("fs/readDirectory", json!({"path": "/"})).await;
    assert_eq!(
        response["error"],
        json!({"code": -32600, "message": "path / is outside the allowed roots"})
    );
    let file = format!("{root}/f");
    server.result("fs/writeFile", json!({"path": file, "dataBase64": b64(b"in root")})).await;
}

#[tokio::test]
async fn a_missing_root_is_a_startup_error() {
    let output = tokio::process::Command::new(*BIN)
        .args(["--root", "/no/such/root"])
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        "exec-server: root /no/such/root: No such file or directory (os error 2)\n"
    );
    assert!(output.stdout.is_empty());
}

#[tokio::test]
async fn stdout_carries_only_protocol_messages_even_with_debug_logs() {
    let output = tokio::process::Command::new(*BIN)
        .args(["--log-level", "debug", "--on-eof", "wait"])
        .stdin(
            std::fs::File::open(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/demo.jsonl"))
                .unwrap(),
        )
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    let stdout = String::from_utf8(output.stdout).unwrap();
    for line in stdout.lines() {
        let message: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
        assert!(message.get("id").is_some() || message.get("method").is_some(), "{line}");
    }
    assert!(String::from_utf8_lossy(&output.stderr).contains("DEBUG"));
}

#[tokio::test]
async fn a_client_that_closes_stdout_ends_the_connection() {
    let mut child = tokio::process::Command::new(*BIN)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let start = start_params("yes", &["sh", "-c", "echo $$; exec yes"], json!({}));
    let lines = [
        json!({"id": 1, "method": "initialize", "params": {"clientName": "t"}}),
        json!({"method": "initialized"}),
        json!({"id": 2, "method": "process/start", "params": start}),
    ];
    for line in lines {
        stdin.write_all(format!("{line}\n").as_bytes()).await.unwrap();
    }
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut pid = None;
    while pid.is_none() {
        let line = within("output of yes", stdout.next_line()).await.unwrap().unwrap();
        let message: Value = serde_json::from_str(&line).unwrap();
        if message["method"] == "process/output" {
            let text = String::from_utf8(unb64(&message["params"]["chunk"])).unwrap();
            pid = text.lines().next().and_then(|l| l.parse::<u32>().ok());
        }
    }
    drop(stdout);
    let status = within("the server to exit", child.wait()).await.unwrap();
    assert_eq!(status.code(), Some(0));
    wait_dead(pid.unwrap()).await;
}

#[tokio::test]
async fn stdin_eof_kills_the_processes_of_a_client_that_reads_no_replies() {
    let mut server = Binary::ready(&[]).await;
    server.result("process/start", start_params("flood", &["yes", "flood"], json!({}))).await;
    let list = server.result("process/list", json!({})).await;
    let pid = list["processes"][0]["pid"].as_u64().unwrap() as u32;
    // Nothing is read from here on: the replies fill the server's stdout and
    // outbox, the loop stops taking output and input, and `yes` blocks. Both
    // pipes full means the loop has stopped (a moving loop drains `yes`).
    let server_pid = server.child.id().unwrap();
    // A pipe filling up has no event to wait on: its level is polled.
    within("the server's stdout and the pipe of yes to fill", async {
        while pipe_bytes(server_pid, 1) < 192 * 1024 || pipe_bytes(pid, 1) < 48 * 1024 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await;
    server.close_stdin();
    within("yes to be killed on EOF", wait_dead(pid)).await;
    // The replies still wait for the client; closing its end ends the server.
    server.close_stdout();
    assert_eq!(server.exit_code().await, Some(0));
}

/// Bytes waiting in the pipe that is descriptor `fd` of `pid` (read through
/// /proc without taking any).
fn pipe_bytes(pid: u32, fd: i32) -> i32 {
    use std::os::fd::AsRawFd;
    let pipe = open_proc_fd(pid, fd, libc::O_RDONLY);
    let mut waiting: libc::c_int = 0;
    // SAFETY: FIONREAD on a descriptor this test owns writes one int.
    let asked = unsafe { libc::ioctl(pipe.as_raw_fd(), libc::FIONREAD, &mut waiting) };
    assert_eq!(asked, 0, "FIONREAD on fd {fd} of {pid}");
    waiting
}
