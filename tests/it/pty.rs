//! Processes under a pseudo-terminal: output, input, size, resize and SIGWINCH.

use serde_json::json;

use crate::support::{b64, Harness};

#[tokio::test]
async fn a_tty_process_sees_a_terminal_of_24_by_80() {
    let mut h = Harness::ready().await;
    h.start_with(
        "t",
        &["sh", "-c", "stty size; test -t 0 && test -t 1 && echo tty"],
        json!({"tty": true}),
    )
    .await;
    let (bytes, exited) = h.output_and_exit("t").await;
    assert_eq!(String::from_utf8(bytes).unwrap(), "24 80\r\ntty\r\n");
    assert_eq!(exited["exitCode"], 0);
    let read = h.result("process/read", json!({"processId": "t"})).await;
    assert!(read["chunks"].as_array().unwrap().iter().all(|c| c["stream"] == "pty"));
}

#[tokio::test]
async fn size_on_start_sets_the_terminal_size() {
    let mut h = Harness::ready().await;
    h.start_with("t", &["stty", "size"], json!({"tty": true, "size": {"rows": 50, "cols": 132}}))
        .await;
    assert_eq!(h.output_and_exit("t").await.0, b"50 132\r\n");
}

#[tokio::test]
async fn tty_input_is_echoed_and_read() {
    let mut h = Harness::ready().await;
    h.start_with("cat", &["cat"], json!({"tty": true})).await;
    let accepted =
        h.result("process/write", json!({"processId": "cat", "chunk": b64(b"hello\n")})).await;
    assert_eq!(accepted, json!({"accepted": true, "status": "accepted"}));
    let mut seen = Vec::new();
    // The terminal echoes the line, then cat prints it again.
    h.output_containing("cat", "hello\r\nhello\r\n", &mut seen).await;
    assert_eq!(String::from_utf8(seen).unwrap(), "hello\r\nhello\r\n");
    // ^D at the start of a line is end-of-file for cat.
    h.result("process/write", json!({"processId": "cat", "chunk": b64(b"\x04")})).await;
    assert_eq!(h.notification("process/exited", "cat").await["exitCode"], 0);
}

#[tokio::test]
async fn resize_is_seen_by_stty_and_delivers_sigwinch() {
    let mut h = Harness::ready().await;
    h.start_with(
        "sh",
        &[
            "sh",
            "-c",
            "trap 'echo winch' WINCH; echo ready; while :; do read line && eval \"$line\"; done",
        ],
        json!({"tty": true}),
    )
    .await;
    let mut seen = Vec::new();
    h.output_containing("sh", "ready", &mut seen).await;
    assert_eq!(
        h.result("process/resize", json!({"processId": "sh", "rows": 40, "cols": 120})).await,
        json!({})
    );
    h.result("process/write", json!({"processId": "sh", "chunk": b64(b"stty size\n")})).await;
    h.output_containing("sh", "40 120\r\n", &mut seen).await;
    assert!(
        String::from_utf8_lossy(&seen).contains("winch"),
        "no SIGWINCH trap output in {seen:?}"
    );
    h.result("process/terminate", json!({"processId": "sh"})).await;
}

#[tokio::test]
async fn tty_errors() {
    let mut h = Harness::ready().await;
    h.start_with("t", &["cat"], json!({"tty": true})).await;
    assert_eq!(
        h.error("process/write", json!({"processId": "t", "chunk": "", "closeStdin": true})).await,
        json!({"code": -32600, "message": "closeStdin is not supported for tty process t: write the terminal's EOF character (\\u0004) instead"})
    );
    h.start("pipe", &["sleep", "30"]).await;
    assert_eq!(
        h.error("process/resize", json!({"processId": "pipe", "rows": 10, "cols": 10})).await,
        json!({"code": -32600, "message": "process pipe is not a tty"})
    );
    assert_eq!(
        h.error(
            "process/start",
            crate::support::start_params("s", &["true"], json!({"size": {"rows": 1, "cols": 1}}))
        )
        .await,
        json!({"code": -32600, "message": "size is only valid for a tty process, and process s is not one"})
    );
    h.result("process/terminate", json!({"processId": "t"})).await;
    h.result("process/terminate", json!({"processId": "pipe"})).await;
}

#[tokio::test]
async fn a_tty_process_killed_by_a_signal_reports_it() {
    let mut h = Harness::ready().await;
    h.start_with("t", &["sleep", "30"], json!({"tty": true})).await;
    assert_eq!(
        h.result("process/signal", json!({"processId": "t", "signal": "SIGTERM"})).await,
        json!({"running": true})
    );
    assert_eq!(
        h.notification("process/exited", "t").await,
        json!({"processId": "t", "seq": 0, "exitCode": 143, "signal": "SIGTERM"})
    );
}

#[tokio::test]
async fn terminate_reaches_jobs_that_job_control_moved_out_of_the_group() {
    let mut h = Harness::ready().await;
    h.start_with("sh", &["sh", "-i"], json!({"tty": true})).await;
    h.result(
        "process/write",
        json!({"processId": "sh", "chunk": b64(b"sleep 30 & echo job=$!.\n")}),
    )
    .await;
    // The terminal echoes `job=$!.` first; the shell then prints `job=<pid>.`.
    let job_pid = |text: &str| -> Option<u32> {
        text.split("job=").filter_map(|rest| rest.split('.').next()?.parse().ok()).next()
    };
    let mut seen = Vec::new();
    let job = loop {
        if let Some(pid) = job_pid(&String::from_utf8_lossy(&seen)) {
            break pid;
        }
        let output = h.notification("process/output", "sh").await;
        seen.extend(crate::support::unb64(&output["chunk"]));
    };
    // The interactive shell put the job in a process group of its own.
    // SAFETY: getpgid has no memory-safety preconditions.
    let group = unsafe { libc::getpgid(job as libc::pid_t) };
    let list = h.result("process/list", json!({})).await;
    assert_ne!(group as u64, list["processes"][0]["pid"].as_u64().unwrap());
    assert_eq!(
        h.result("process/terminate", json!({"processId": "sh"})).await,
        json!({"running": true})
    );
    crate::support::wait_dead(job).await;
}
