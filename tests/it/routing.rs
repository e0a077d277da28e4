//! The loop only routes: slow fs calls run beside the stream, stdin is bounded,
//! terminate reaches the whole tree (in-process, over duplex pipes).

use std::io::Write;

use serde_json::json;

use crate::support::{b64, scratch, unb64, wait_dead, Harness};

async fn pid_from_output(h: &mut Harness, id: &str) -> u32 {
    let mut text = String::new();
    loop {
        let output = h.notification("process/output", id).await;
        text.push_str(&String::from_utf8(unb64(&output["chunk"])).unwrap());
        if let Some(pid) = text.lines().find_map(|line| line.trim().parse().ok()) {
            return pid;
        }
    }
}

#[tokio::test]
async fn output_keeps_flowing_while_a_large_copy_runs() {
    let dir = scratch("routing-copy");
    let source = dir.join("big");
    let mut file = std::fs::File::create(&source).unwrap();
    let block = vec![0x5a_u8; 1 << 20];
    for _ in 0..256 {
        file.write_all(&block).unwrap();
    }
    drop(file);
    let mut h = Harness::ready().await;
    let ticker = "while :; do echo tick; sleep 0.01; done";
    h.start("ticker", &["sh", "-c", ticker]).await;
    h.notification("process/output", "ticker").await;
    let copy = h
        .send_request(
            "fs/copy",
            json!({"sourcePath": source, "destinationPath": dir.join("copy"), "recursive": false}),
        )
        .await;
    // Count the ticks that arrive before the copy's reply.
    let mut ticks = 0;
    loop {
        let message = h.next().await;
        if message["id"] == copy {
            assert_eq!(message["result"], json!({}), "{message}");
            break;
        }
        if message["method"] == "process/output" {
            ticks += 1;
        }
    }
    assert!(ticks > 0, "no output arrived while 256 MiB were copied");
    assert_eq!(std::fs::metadata(dir.join("copy")).unwrap().len(), 256 << 20);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn queued_stdin_is_bounded_in_bytes() {
    let mut h = Harness::ready().await;
    h.start_with("s", &["sleep", "100"], json!({"pipeStdin": true})).await;
    let chunk = b64(&vec![b'x'; 1 << 20]);
    let mut accepted = 0;
    let error = loop {
        let response =
            h.call("process/write", json!({"processId": "s", "chunk": chunk.clone()})).await;
        if let Some(error) = response.get("error") {
            break error.clone();
        }
        assert_eq!(response["result"], json!({"accepted": true, "status": "accepted"}));
        accepted += 1;
        assert!(accepted <= 9, "{accepted} MiB queued for a process that does not read");
    };
    assert!(accepted >= 7, "only {accepted} MiB accepted");
    assert_eq!(error["code"], -32600);
    let message = error["message"].as_str().unwrap();
    assert!(message.starts_with("stdin of process s is full: "), "{message}");
    assert!(message.ends_with(" bytes wait for it to read, and the limit is 8388608 bytes"));
    // The connection is healthy, and small writes still fit once the process reads.
    assert_eq!(h.result("process/list", json!({})).await["processes"][0]["running"], true);
}

#[tokio::test]
async fn a_terminal_nobody_holds_refuses_input() {
    let mut h = Harness::ready().await;
    h.start_with("t", &["true"], json!({"tty": true})).await;
    h.run_to_close("t").await;
    let error = h.error("process/write", json!({"processId": "t", "chunk": b64(b"late\n")})).await;
    assert_eq!(error, json!({"code": -32600, "message": "stdin is closed for process t"}));
}

#[tokio::test]
async fn graceful_terminate_kills_what_ignored_sigterm() {
    let mut h = Harness::ready().await;
    let script = "(trap '' TERM; exec sleep 97) & echo $!; wait";
    h.start("g", &["sh", "-c", script]).await;
    let stubborn = pid_from_output(&mut h, "g").await;
    let result = h.result("process/terminate", json!({"processId": "g", "graceMs": 200})).await;
    assert_eq!(result, json!({"running": true}));
    let exited = h.notification("process/exited", "g").await;
    assert_eq!(
        (exited["exitCode"].clone(), exited["signal"].clone()),
        (json!(143), json!("SIGTERM"))
    );
    // The sleep held stdout open; the SIGKILL at the deadline reached it, so the streams close.
    h.notification("process/closed", "g").await;
    wait_dead(stubborn).await;
}

#[tokio::test]
async fn terminate_of_an_exited_process_kills_its_leftover_descendants() {
    let mut h = Harness::ready().await;
    h.start("left", &["sh", "-c", "sleep 98 & echo $!"]).await;
    let leftover = pid_from_output(&mut h, "left").await;
    let exited = h.notification("process/exited", "left").await;
    assert_eq!(exited["exitCode"], 0);
    let result = h.result("process/terminate", json!({"processId": "left"})).await;
    assert_eq!(result, json!({"running": false}));
    h.notification("process/closed", "left").await;
    wait_dead(leftover).await;
}

#[tokio::test]
async fn a_write_to_a_stdin_nobody_reads_is_refused_at_once() {
    let mut h = Harness::ready().await;
    h.start_with(
        "shut",
        &["sh", "-c", "exec 0<&-; echo closed; exec sleep 100"],
        json!({"pipeStdin": true}),
    )
    .await;
    let mut seen = Vec::new();
    h.output_containing("shut", "closed", &mut seen).await;
    let error =
        h.error("process/write", json!({"processId": "shut", "chunk": b64(b"lost?\n")})).await;
    assert_eq!(error, json!({"code": -32600, "message": "stdin is closed for process shut"}));
    h.result("process/terminate", json!({"processId": "shut"})).await;
}

#[tokio::test]
async fn bad_environment_names_are_refused() {
    let mut h = Harness::ready().await;
    for name in ["A=B", ""] {
        let params = crate::support::start_params("e", &["true"], json!({"env": {name: "c"}}));
        let error = h.error("process/start", params).await;
        assert_eq!(error["code"], -32602);
        assert_eq!(
            error["message"],
            format!("env name {name:?} is invalid: a name must be non-empty, without '=' or NUL")
        );
    }
}

#[tokio::test]
async fn files_edge_cases_found_by_attack() {
    let dir = scratch("routing-fs-edges");
    let mut h = Harness::ready().await;
    // A range longer than the file returns what exists, whatever the length asked.
    std::fs::write(dir.join("nine"), b"123456789").unwrap();
    let read = h
        .result("fs/readFile", json!({"path": dir.join("nine"), "offset": 1, "length": u64::MAX}))
        .await;
    assert_eq!(read["dataBase64"], b64(b"23456789"));
    // Renaming a link onto the file it points to would lose the file: refused.
    std::fs::write(dir.join("f"), b"keep me").unwrap();
    std::os::unix::fs::symlink("f", dir.join("sl")).unwrap();
    let error = h
        .error("fs/rename", json!({"sourcePath": dir.join("sl"), "destinationPath": dir.join("f")}))
        .await;
    assert_eq!(error["code"], -32600);
    assert_eq!(std::fs::read(dir.join("f")).unwrap(), b"keep me");
    assert!(std::fs::symlink_metadata(dir.join("sl")).unwrap().file_type().is_symlink());
    // A /proc pseudo-file is written in place (no temporary file can live there).
    let current = std::fs::read("/proc/self/oom_score_adj").unwrap();
    h.result(
        "fs/writeFile",
        json!({"path": "/proc/self/oom_score_adj", "dataBase64": b64(&current)}),
    )
    .await;
}

#[tokio::test]
async fn requests_behind_a_start_wait_for_it_in_order() {
    let mut h = Harness::ready().await;
    // Sent back to back: the start is still in the spawner when the write arrives.
    let start = h
        .send_request(
            "process/start",
            crate::support::start_params("cat", &["cat"], json!({"pipeStdin": true})),
        )
        .await;
    let write = h
        .send_request(
            "process/write",
            json!({"processId": "cat", "chunk": b64(b"in order\n"), "closeStdin": true}),
        )
        .await;
    let list = h.send_request("process/list", json!({})).await;
    assert_eq!(h.response(start).await["result"], json!({"processId": "cat"}));
    assert_eq!(h.response(write).await["result"], json!({"accepted": true, "status": "accepted"}));
    assert_eq!(h.response(list).await["result"]["processes"][0]["processId"], "cat");
    let (output, exited) = h.output_and_exit("cat").await;
    assert_eq!((output.as_slice(), exited["exitCode"].clone()), (&b"in order\n"[..], json!(0)));
}

#[tokio::test]
async fn a_pipelined_start_waits_for_the_outcome_of_one_with_its_id() {
    let mut h = Harness::ready().await;
    let failing = crate::support::start_params("m", &["true"], json!({"cwd": "/nonexistent"}));
    let first = h.send_request("process/start", failing).await;
    let second = h
        .send_request("process/start", crate::support::start_params("m", &["true"], json!({})))
        .await;
    let failed = h.response(first).await;
    assert_eq!(failed["error"]["code"], -32603, "{failed}");
    assert_eq!(h.response(second).await["result"], json!({"processId": "m"}));
}

#[tokio::test]
async fn under_root_a_cwd_that_fails_its_check_is_never_entered_by_path() {
    let dir = scratch("routing-cwd-root");
    let config = exec_server::server::Config { roots: vec![dir.clone()], ..Default::default() };
    let mut h = Harness::ready_with(config).await;
    let missing = dir.join("missing");
    let params = crate::support::start_params("c", &["pwd"], json!({"cwd": missing}));
    let error = h.error("process/start", params).await;
    assert_eq!(error["code"], -32603);
    assert_eq!(
        error["message"],
        format!("cannot use cwd {}: No such file or directory (os error 2)", missing.display())
    );
}
