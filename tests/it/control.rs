//! Part B process control: piped stdin, signals, graceful terminate, limits.

use exec_server::server::Config;
use serde_json::json;

use crate::support::{b64, start_params, within, Harness};

#[tokio::test]
async fn pipe_stdin_feeds_a_tool_that_reads_to_eof() {
    let mut h = Harness::ready().await;
    h.start_with("sort", &["sort"], json!({"pipeStdin": true})).await;
    for word in ["pear\n", "apple\n"] {
        h.result("process/write", json!({"processId": "sort", "chunk": b64(word.as_bytes())}))
            .await;
    }
    let last = json!({"processId": "sort", "chunk": b64(b"fig\n"), "closeStdin": true});
    assert_eq!(
        h.result("process/write", last).await,
        json!({"accepted": true, "status": "accepted"})
    );
    let (bytes, exited) = h.output_and_exit("sort").await;
    assert_eq!(bytes, b"apple\nfig\npear\n");
    assert_eq!(exited["exitCode"], 0);
    assert_eq!(
        h.error("process/write", json!({"processId": "sort", "chunk": b64(b"more")})).await,
        json!({"code": -32600, "message": "stdin is closed for process sort"})
    );
}

#[tokio::test]
async fn close_stdin_with_an_empty_chunk() {
    let mut h = Harness::ready().await;
    h.start_with("wc", &["wc", "-c"], json!({"pipeStdin": true})).await;
    h.result("process/write", json!({"processId": "wc", "chunk": b64(b"12345")})).await;
    h.result("process/write", json!({"processId": "wc", "chunk": "", "closeStdin": true})).await;
    assert_eq!(h.output_and_exit("wc").await.0, b"5\n");
}

#[tokio::test]
async fn signals_by_name_reach_the_process() {
    let mut h = Harness::ready().await;
    for (name, code, reported) in [
        ("interrupt", 130, "SIGINT"),
        ("SIGINT", 130, "SIGINT"),
        ("SIGHUP", 129, "SIGHUP"),
        ("SIGQUIT", 131, "SIGQUIT"),
        ("SIGUSR1", 138, "SIGUSR1"),
        ("SIGUSR2", 140, "SIGUSR2"),
        ("SIGKILL", 137, "SIGKILL"),
    ] {
        let id = format!("sig-{name}");
        h.start(&id, &["sleep", "30"]).await;
        let result = h.result("process/signal", json!({"processId": id, "signal": name})).await;
        assert_eq!(result, json!({"running": true}));
        assert_eq!(
            h.notification("process/exited", &id).await,
            json!({"processId": id, "seq": 0, "exitCode": code, "signal": reported})
        );
        // A signal to an exited process is not delivered.
        let again = h.result("process/signal", json!({"processId": id, "signal": name})).await;
        assert_eq!(again, json!({"running": false}));
    }
}

#[tokio::test]
async fn stop_and_continue() {
    let mut h = Harness::ready().await;
    h.start_with("cat", &["cat"], json!({"pipeStdin": true})).await;
    let list = h.result("process/list", json!({})).await;
    let pid = list["processes"][0]["pid"].as_u64().unwrap() as libc::id_t;
    h.result("process/signal", json!({"processId": "cat", "signal": "SIGSTOP"})).await;
    // The server runs in this process, so cat is our child: wait until it is stopped.
    within("cat to stop", wait_for_state(pid, libc::WSTOPPED)).await;
    h.result("process/write", json!({"processId": "cat", "chunk": b64(b"held\n")})).await;
    h.result("process/signal", json!({"processId": "cat", "signal": "SIGCONT"})).await;
    within("cat to continue", wait_for_state(pid, libc::WCONTINUED)).await;
    let output = h.notification("process/output", "cat").await;
    assert_eq!(output["chunk"], b64(b"held\n"));
    h.result("process/terminate", json!({"processId": "cat"})).await;
}

#[tokio::test]
async fn unknown_signal_names_are_rejected() {
    let mut h = Harness::ready().await;
    h.start("s", &["sleep", "30"]).await;
    let err = h.error("process/signal", json!({"processId": "s", "signal": "SIGBOGUS"})).await;
    assert_eq!(err["code"], -32602);
    assert!(
        err["message"].as_str().unwrap().starts_with(
            "unknown signal \"SIGBOGUS\": expected interrupt or one of SIGHUP, SIGINT, SIGQUIT"
        ),
        "{err}"
    );
    h.result("process/terminate", json!({"processId": "s"})).await;
}

#[tokio::test]
async fn terminate_with_grace_lets_a_process_clean_up() {
    let mut h = Harness::ready().await;
    h.start(
        "polite",
        &["sh", "-c", "trap 'echo bye; exit 7' TERM; echo up; while :; do sleep 0.01; done"],
    )
    .await;
    h.notification("process/output", "polite").await;
    let result =
        h.result("process/terminate", json!({"processId": "polite", "graceMs": 10000})).await;
    assert_eq!(result, json!({"running": true}));
    let (bytes, exited) = h.output_and_exit("polite").await;
    // The shell may first report its killed `sleep` ("Terminated").
    assert!(String::from_utf8(bytes).unwrap().ends_with("bye\n"));
    assert_eq!((exited["exitCode"].clone(), exited.get("signal")), (json!(7), None));
}

#[tokio::test]
async fn terminate_with_grace_kills_a_process_that_ignores_sigterm() {
    let mut h = Harness::ready().await;
    h.start("stubborn", &["sh", "-c", "trap '' TERM; echo up; while :; do sleep 0.01; done"]).await;
    h.notification("process/output", "stubborn").await;
    let result =
        h.result("process/terminate", json!({"processId": "stubborn", "graceMs": 100})).await;
    assert_eq!(result, json!({"running": true}));
    assert_eq!(
        h.notification("process/exited", "stubborn").await,
        json!({"processId": "stubborn", "seq": 1, "exitCode": 137, "signal": "SIGKILL"})
    );
}

#[tokio::test]
async fn max_processes_limits_live_processes() {
    let config = Config { max_processes: 2, ..Config::default() };
    let mut h = Harness::ready_with(config).await;
    h.start("one", &["sleep", "30"]).await;
    h.start("two", &["sleep", "30"]).await;
    assert_eq!(
        h.error("process/start", start_params("three", &["true"], json!({}))).await,
        json!({"code": -32600, "message": "too many processes: the limit is 2 live processes per connection"})
    );
    h.result("process/terminate", json!({"processId": "one"})).await;
    h.notification("process/exited", "one").await;
    h.start("three", &["true"]).await;
    h.result("process/terminate", json!({"processId": "two"})).await;
}

/// Waits (without reaping) until child `pid` reports `state` (WSTOPPED or WCONTINUED).
async fn wait_for_state(pid: libc::id_t, state: libc::c_int) {
    tokio::task::spawn_blocking(move || {
        // SAFETY: siginfo_t is plain data; waitid fills it in.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid writes only to `info`; WNOWAIT leaves the state for the server.
        let rc = unsafe { libc::waitid(libc::P_PID, pid, &mut info, state | libc::WNOWAIT) };
        assert_eq!(rc, 0, "waitid: {}", std::io::Error::last_os_error());
        let expected =
            if state == libc::WSTOPPED { libc::CLD_STOPPED } else { libc::CLD_CONTINUED };
        assert_eq!(info.si_code, expected);
    })
    .await
    .unwrap();
}
