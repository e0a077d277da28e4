//! Never stuck, never leaked, through the real binary: stalled fs calls, many
//! terminals, signals, a SIGKILLed server, zombies, escaped sessions.

use serde_json::{json, Value};

use crate::binary::Binary;
use crate::support::{b64, is_dead, scratch, start_params, unb64, wait_dead};

/// Reads `id`'s output until a line holds a pid; returns it.
async fn pid_from_output(server: &mut Binary, id: &str) -> u32 {
    let mut text = String::new();
    loop {
        let output = server.notification("process/output", id).await;
        text.push_str(&String::from_utf8(unb64(&output["chunk"])).unwrap());
        if let Some(pid) = text.lines().find_map(|line| line.trim().parse().ok()) {
            return pid;
        }
    }
}

/// Starts `sh -c 'sleep N & echo $!; wait'` as `id` and returns the sleep's pid.
async fn start_tree(server: &mut Binary, id: &str) -> u32 {
    let params = start_params(id, &["sh", "-c", "sleep 60 & echo $!; wait"], json!({}));
    server.result("process/start", params).await;
    let grandchild = pid_from_output(server, id).await;
    assert!(!is_dead(grandchild));
    grandchild
}

fn signal(server: &Binary, signal: libc::c_int) {
    let pid = server.child.id().unwrap() as libc::pid_t;
    // SAFETY: plain kill(2) of the server this test spawned.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
}

fn mkfifo(path: &std::path::Path) {
    let name = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo reads a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
}

/// The children of `pid` and their states, from every thread's children list.
fn children_states(pid: u32) -> Vec<(u32, char)> {
    let mut children = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let text = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        for child in text.split_whitespace().filter_map(|p| p.parse::<u32>().ok()) {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else { continue };
            let state = stat.rsplit(") ").next().and_then(|r| r.chars().next()).unwrap_or('?');
            children.push((child, state));
        }
    }
    children
}

fn threads(pid: u32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("Threads:")).unwrap();
    line["Threads:".len()..].trim().parse().unwrap()
}

#[tokio::test]
async fn fifos_nobody_opens_stall_nothing_and_eof_still_ends_the_server() {
    let dir = scratch("robust-fifo");
    let (read_fifo, write_fifo) = (dir.join("in"), dir.join("out"));
    mkfifo(&read_fifo);
    mkfifo(&write_fifo);
    let mut server = Binary::ready(&[]).await;
    let read = json!({"id": 100, "method": "fs/readFile", "params": {"path": read_fifo}});
    server.send_line(&read.to_string()).await;
    let write = json!({"id": 101, "method": "fs/writeFile",
        "params": {"path": write_fifo, "dataBase64": b64(b"x")}});
    server.send_line(&write.to_string()).await;
    // Whatever becomes of the two fs calls, everything behind them is served.
    assert_eq!(server.result("process/list", json!({})).await, json!({"processes": []}));
    let metadata = server.result("fs/getMetadata", json!({"path": dir})).await;
    assert_eq!(metadata["isDirectory"], true);
    server.result("process/start", start_params("p", &["echo", "flows"], json!({}))).await;
    let output = server.notification("process/output", "p").await;
    assert_eq!(unb64(&output["chunk"]), b"flows\n");
    server.close_stdin();
    assert_eq!(server.exit_code().await, Some(0));
}

#[tokio::test]
async fn six_hundred_terminals_run_on_a_fixed_number_of_threads() {
    let mut server = Binary::ready(&[]).await;
    for n in 0..600 {
        let params = start_params(&format!("t{n}"), &["sleep", "100"], json!({"tty": true}));
        server.result("process/start", params).await;
    }
    let pid = server.child.id().unwrap();
    let count = threads(pid);
    // 2 cores: the main thread, 2 workers and at most 8 blocking threads.
    assert!(count <= 2 * 2 + 8, "{count} threads with 600 terminals");
    server
        .result("process/start", start_params("late", &["echo", "late"], json!({"tty": true})))
        .await;
    let output = server.notification("process/output", "late").await;
    assert_eq!(unb64(&output["chunk"]), b"late\r\n");
    server.close_stdin();
    assert_eq!(server.exit_code().await, Some(0));
}

#[tokio::test]
async fn hangup_and_quit_end_the_server_with_its_trees() {
    for (name, number) in [("SIGHUP", libc::SIGHUP), ("SIGQUIT", libc::SIGQUIT)] {
        let mut server = Binary::ready(&[]).await;
        let grandchild = start_tree(&mut server, "tree").await;
        signal(&server, number);
        assert_eq!(server.exit_code().await, Some(0), "exit status after {name}");
        wait_dead(grandchild).await;
    }
}

#[tokio::test]
async fn user_signals_and_sigpipe_do_not_end_the_server() {
    let mut server = Binary::ready(&[]).await;
    let grandchild = start_tree(&mut server, "tree").await;
    for number in [libc::SIGUSR1, libc::SIGUSR2, libc::SIGPIPE] {
        signal(&server, number);
    }
    let list = server.result("process/list", json!({})).await;
    assert_eq!(list["processes"][0]["running"], true);
    assert!(!is_dead(grandchild));
    server.close_stdin();
    assert_eq!(server.exit_code().await, Some(0));
    wait_dead(grandchild).await;
}

#[tokio::test]
async fn a_sigkilled_server_leaves_no_child_or_grandchild() {
    let mut server = Binary::ready(&[]).await;
    let grandchild = start_tree(&mut server, "tree").await;
    let list = server.result("process/list", json!({})).await;
    let child = list["processes"][0]["pid"].as_u64().unwrap() as u32;
    signal(&server, libc::SIGKILL);
    assert_eq!(server.exit_code().await, None);
    wait_dead(child).await;
    wait_dead(grandchild).await;
}

#[tokio::test]
async fn a_descendant_that_left_its_session_dies_with_the_server() {
    let mut server = Binary::ready(&[]).await;
    let script = "setsid sh -c 'echo $$; exec sleep 61' & wait";
    server.result("process/start", start_params("esc", &["sh", "-c", script], json!({}))).await;
    let escaped = pid_from_output(&mut server, "esc").await;
    // SAFETY: getsid has no memory-safety preconditions.
    assert_eq!(unsafe { libc::getsid(escaped as libc::pid_t) }, escaped as libc::pid_t);
    server.close_stdin();
    assert_eq!(server.exit_code().await, Some(0));
    wait_dead(escaped).await;
}

#[tokio::test]
async fn exited_children_are_reaped_at_once() {
    let mut server = Binary::ready(&[]).await;
    for n in 0..200 {
        let params = start_params(&format!("z{n}"), &["true"], json!({}));
        let start = json!({"id": 1000 + n, "method": "process/start", "params": params});
        server.send_line(&start.to_string()).await;
    }
    let mut exited = 0;
    while exited < 200 {
        let message: Value = server.next().await.expect("server closed stdout");
        if message["method"] == "process/exited" {
            exited += 1;
        }
    }
    let pid = server.child.id().unwrap();
    let zombies: Vec<_> = children_states(pid).into_iter().filter(|(_, s)| *s == 'Z').collect();
    assert_eq!(zombies, vec![], "zombie children of the server");
    let list = server.result("process/list", json!({})).await;
    assert_eq!(list["processes"].as_array().unwrap().len(), 200);
}

#[tokio::test]
async fn an_idle_server_notices_its_stdout_closing() {
    let mut server = Binary::ready(&[]).await;
    server.result("process/start", start_params("nap", &["sleep", "100"], json!({}))).await;
    let list = server.result("process/list", json!({})).await;
    let nap = list["processes"][0]["pid"].as_u64().unwrap() as u32;
    server.close_stdout();
    assert_eq!(server.exit_code().await, Some(0));
    wait_dead(nap).await;
}
