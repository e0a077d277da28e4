//! Pipe processes (Part A.3 and the ordering rules of Part B) over duplex pipes.

use std::time::Duration;

use exec_server::server::Config;
use serde_json::{json, Value};

use crate::support::{b64, is_dead, start_params, unb64, wait_dead, Harness};

#[tokio::test]
async fn the_example_session_of_the_protocol() {
    let mut h = Harness::ready().await;
    h.start("p1", &["sh", "-c", "printf hi; exit 3"]).await;
    assert_eq!(
        h.run_to_close("p1").await,
        vec![
            json!({"method": "process/output", "params": {"processId": "p1", "seq": 1, "stream": "stdout", "chunk": "aGk="}}),
            json!({"method": "process/exited", "params": {"processId": "p1", "seq": 1, "exitCode": 3}}),
            json!({"method": "process/closed", "params": {"processId": "p1", "seq": 1}}),
        ]
    );
    assert_eq!(
        h.result("process/read", json!({"processId": "p1", "afterSeq": 0})).await,
        json!({"chunks": [{"seq": 1, "stream": "stdout", "chunk": "aGk="}], "nextSeq": 2, "exited": true, "exitCode": 3, "closed": true})
    );
}

#[tokio::test]
async fn the_start_result_comes_before_any_notification() {
    let mut h = Harness::ready().await;
    let id = h.send_request("process/start", start_params("q", &["echo", "fast"], json!({}))).await;
    let first = h.next().await;
    assert_eq!(first, json!({"id": id, "result": {"processId": "q"}}));
    let (bytes, exited) = h.output_and_exit("q").await;
    assert_eq!(bytes, b"fast\n");
    assert_eq!(exited, json!({"processId": "q", "seq": 1, "exitCode": 0}));
}

#[tokio::test]
async fn env_is_complete_and_cwd_and_arg0_apply() {
    let mut h = Harness::ready().await;
    h.start_with("e", &["env"], json!({"env": {"ONLY": "this"}})).await;
    assert_eq!(h.output_and_exit("e").await.0, b"ONLY=this\n");
    h.start_with("d", &["pwd"], json!({"cwd": "/usr"})).await;
    assert_eq!(h.output_and_exit("d").await.0, b"/usr\n");
    h.start_with("a", &["cat", "/proc/self/cmdline"], json!({"arg0": "renamed"})).await;
    assert_eq!(h.output_and_exit("a").await.0, b"renamed\0/proc/self/cmdline\0");
}

#[tokio::test]
async fn stdout_and_stderr_share_one_sequence() {
    let mut h = Harness::ready().await;
    h.start("s", &["sh", "-c", "echo out; echo err >&2"]).await;
    let messages = h.run_to_close("s").await;
    let outputs: Vec<(u64, String, Vec<u8>)> = messages
        .iter()
        .filter(|m| m["method"] == "process/output")
        .map(|m| {
            let p = &m["params"];
            (
                p["seq"].as_u64().unwrap(),
                p["stream"].as_str().unwrap().to_owned(),
                unb64(&p["chunk"]),
            )
        })
        .collect();
    // Which pipe is read first is up to the scheduler; the numbering is shared either way.
    let seqs: Vec<u64> = outputs.iter().map(|(seq, _, _)| *seq).collect();
    assert_eq!(seqs, [1, 2]);
    let mut by_stream: Vec<(String, Vec<u8>)> =
        outputs.into_iter().map(|(_, stream, bytes)| (stream, bytes)).collect();
    by_stream.sort();
    assert_eq!(
        by_stream,
        vec![("stderr".into(), b"err\n".to_vec()), ("stdout".into(), b"out\n".to_vec())]
    );
}

#[tokio::test]
async fn three_hundred_lines_arrive_in_order_before_exited() {
    let mut h = Harness::ready().await;
    h.start("lines", &["sh", "-c", "i=1; while [ $i -le 300 ]; do echo line$i; i=$((i+1)); done"])
        .await;
    let messages = h.run_to_close("lines").await;
    let mut text = Vec::new();
    let mut expected_seq = 1;
    for message in &messages[..messages.len() - 2] {
        assert_eq!(message["method"], "process/output");
        assert_eq!(message["params"]["seq"], expected_seq);
        expected_seq += 1;
        text.extend(unb64(&message["params"]["chunk"]));
    }
    let want: String = (1..=300).map(|i| format!("line{i}\n")).collect();
    assert_eq!(String::from_utf8(text).unwrap(), want);
    let last_seq = expected_seq - 1;
    assert_eq!(
        messages[messages.len() - 2],
        json!({"method": "process/exited", "params": {"processId": "lines", "seq": last_seq, "exitCode": 0}})
    );
    assert_eq!(
        messages[messages.len() - 1],
        json!({"method": "process/closed", "params": {"processId": "lines", "seq": last_seq}})
    );
}

#[tokio::test]
async fn eight_mib_of_output_arrives_complete() {
    let mut h = Harness::ready().await;
    h.start("big", &["head", "-c", "8388608", "/dev/zero"]).await;
    let (bytes, exited) = h.output_and_exit("big").await;
    assert_eq!(bytes.len(), 8 * 1024 * 1024);
    assert!(bytes.iter().all(|&b| b == 0));
    assert_eq!(exited["exitCode"], 0);
}

#[tokio::test]
async fn retention_keeps_the_newest_mebibyte() {
    let mut h = Harness::ready().await;
    // 3 MiB of output in 64 KiB writes.
    h.start("r", &["sh", "-c", "head -c 3145728 /dev/zero | tr '\\0' x"]).await;
    let messages = h.run_to_close("r").await;
    let last_seq = messages.last().unwrap()["params"]["seq"].as_u64().unwrap();
    let read = h.result("process/read", json!({"processId": "r"})).await;
    let chunks = read["chunks"].as_array().unwrap();
    let retained: usize = chunks.iter().map(|c| unb64(&c["chunk"]).len()).sum();
    // Retention is charged 128 bytes a chunk besides its payload (PROTOCOL.md, Limits):
    // the newest mebibyte so charged, less than one chunk short of it.
    let charged = retained + 128 * chunks.len();
    assert!(charged <= 1024 * 1024, "retained {retained} bytes in {} chunks", chunks.len());
    assert!(charged > 1024 * 1024 - (65536 + 128), "retained only {retained} bytes");
    assert!(chunks[0]["seq"].as_u64().unwrap() > 1, "the oldest chunks were dropped");
    assert_eq!(chunks.last().unwrap()["seq"], last_seq);
    assert_eq!(read["nextSeq"], last_seq + 1);
    // The seqs are contiguous: nothing inside the retained window is missing.
    let seqs: Vec<u64> = chunks.iter().map(|c| c["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1));
}

#[tokio::test]
async fn pagination_with_max_bytes_never_skips_a_chunk() {
    let mut h = Harness::ready().await;
    h.start("pg", &["sh", "-c", "for i in 1 2 3 4 5 6; do echo chunk$i; sleep 0.02; done"]).await;
    let messages = h.run_to_close("pg").await;
    let total = messages.iter().filter(|m| m["method"] == "process/output").count() as u64;
    let mut after = 0;
    let mut seqs = Vec::new();
    let mut text = Vec::new();
    loop {
        let read = h
            .result("process/read", json!({"processId": "pg", "afterSeq": after, "maxBytes": 1}))
            .await;
        let chunks = read["chunks"].as_array().unwrap().clone();
        if chunks.is_empty() {
            assert_eq!(read["nextSeq"], total + 1);
            assert_eq!(read["exited"], true);
            break;
        }
        // maxBytes 1 is smaller than any chunk: exactly the first one comes back.
        assert_eq!(chunks.len(), 1);
        let seq = chunks[0]["seq"].as_u64().unwrap();
        seqs.push(seq);
        text.extend(unb64(&chunks[0]["chunk"]));
        assert_eq!(read["nextSeq"], seq + 1);
        assert_eq!(read["exited"], seq == total, "exited only once the page reaches the end");
        after = read["nextSeq"].as_u64().unwrap() - 1;
    }
    assert_eq!(seqs, (1..=total).collect::<Vec<_>>());
    assert_eq!(
        String::from_utf8(text).unwrap(),
        "chunk1\nchunk2\nchunk3\nchunk4\nchunk5\nchunk6\n"
    );
}

#[tokio::test]
async fn a_waiting_read_does_not_hold_up_later_requests() {
    let mut h = Harness::ready().await;
    h.start_with("cat", &["cat"], json!({"pipeStdin": true})).await;
    let read = h.send_request("process/read", json!({"processId": "cat", "waitMs": 60000})).await;
    let list = h.send_request("process/list", json!({})).await;
    let first = h.next().await;
    assert_eq!(first["id"], list, "process/list was answered first: {first}");
    let write =
        h.send_request("process/write", json!({"processId": "cat", "chunk": b64(b"ping")})).await;
    assert_eq!(h.response(write).await["result"], json!({"accepted": true, "status": "accepted"}));
    let answer = h.response(read).await;
    assert_eq!(
        answer["result"],
        json!({"chunks": [{"seq": 1, "stream": "stdout", "chunk": b64(b"ping")}], "nextSeq": 2, "exited": false, "exitCode": null, "closed": false})
    );
}

#[tokio::test]
async fn a_waiting_read_is_answered_by_exit_or_by_its_deadline() {
    let mut h = Harness::ready().await;
    h.start_with("quiet", &["cat"], json!({"pipeStdin": true})).await;
    let timed_out = h.result("process/read", json!({"processId": "quiet", "waitMs": 50})).await;
    assert_eq!(
        timed_out,
        json!({"chunks": [], "nextSeq": 1, "exited": false, "exitCode": null, "closed": false})
    );
    let read = h.send_request("process/read", json!({"processId": "quiet", "waitMs": 60000})).await;
    h.result("process/write", json!({"processId": "quiet", "chunk": "", "closeStdin": true})).await;
    assert_eq!(
        h.response(read).await["result"],
        json!({"chunks": [], "nextSeq": 1, "exited": true, "exitCode": 0, "closed": true})
    );
}

#[tokio::test]
async fn concurrent_starts_with_one_id_exactly_one_wins() {
    let mut h = Harness::ready().await;
    let params = start_params("dup", &["sleep", "30"], json!({}));
    let a = h.send_request("process/start", params.clone()).await;
    let b = h.send_request("process/start", params).await;
    let (ra, rb) = (h.response(a).await, h.response(b).await);
    assert_eq!(ra, json!({"id": a, "result": {"processId": "dup"}}));
    assert_eq!(
        rb,
        json!({"id": b, "error": {"code": -32600, "message": "process dup already exists"}})
    );
    assert_eq!(
        h.result("process/terminate", json!({"processId": "dup"})).await,
        json!({"running": true})
    );
}

#[tokio::test]
async fn an_exited_id_stays_reserved() {
    let mut h = Harness::ready().await;
    h.start("once", &["true"]).await;
    h.run_to_close("once").await;
    let err = h.error("process/start", start_params("once", &["true"], json!({}))).await;
    assert_eq!(err, json!({"code": -32600, "message": "process once already exists"}));
}

#[tokio::test]
async fn an_exited_id_is_forgotten_after_the_reservation() {
    let config = Config { id_reservation: Duration::ZERO, ..Config::default() };
    let mut h = Harness::ready_with(config).await;
    h.start("again", &["true"]).await;
    h.run_to_close("again").await;
    // The reservation (zero here) ended at exit; the id is free once closed.
    h.start("again", &["echo", "second"]).await;
    assert_eq!(h.output_and_exit("again").await.0, b"second\n");
}

/// What a process left in its session (a background job) is still swept at
/// the end of input after the process itself was forgotten.
#[tokio::test]
async fn a_forgotten_process_leaves_nothing_behind_at_the_end() {
    let config = Config { id_reservation: Duration::ZERO, ..Config::default() };
    let mut h = Harness::ready_with(config).await;
    h.start("bg", &["sh", "-c", "sleep 1000 >/dev/null 2>&1 & echo $!"]).await;
    let (output, _) = h.output_and_exit("bg").await;
    let job: u32 = String::from_utf8(output).unwrap().trim().parse().unwrap();
    // Forgotten: the id starts afresh.
    h.start("bg", &["true"]).await;
    h.run_to_close("bg").await;
    assert!(!is_dead(job));
    h.close_input().await;
    wait_dead(job).await;
}

#[tokio::test]
async fn start_errors() {
    let mut h = Harness::ready().await;
    assert_eq!(
        h.error("process/start", start_params("e", &[], json!({}))).await,
        json!({"code": -32602, "message": "argv must not be empty"})
    );
    assert_eq!(
        h.error(
            "process/start",
            start_params("e", &["true"], json!({"sandbox": {"mode": "hostDefault"}}))
        )
        .await,
        json!({"code": -32600, "message": "sandbox mode `hostDefault` is not supported by exec-server yet"})
    );
    assert_eq!(
        h.error("process/start", start_params("e", &["no-such-program-xyz"], json!({}))).await,
        json!({"code": -32603, "message": "failed to start `no-such-program-xyz`: No such file or directory (os error 2)"})
    );
    assert_eq!(
        h.error("process/start", start_params("e", &["true"], json!({"cwd": "/no/such/dir"})))
            .await,
        json!({"code": -32603, "message": "failed to start `true`: No such file or directory (os error 2)"})
    );
    assert_eq!(
        h.error("process/start", start_params("e", &["true"], json!({"cwd": "rel"}))).await,
        json!({"code": -32602, "message": "cwd must be absolute: rel"})
    );
    // After the failures the id is free.
    h.start_with("e", &["true"], json!({"sandbox": {"mode": "none"}})).await;
    assert_eq!(h.output_and_exit("e").await.1["exitCode"], 0);
}

#[tokio::test]
async fn unknown_ids_and_closed_stdin() {
    let mut h = Harness::ready().await;
    let unknown = json!({"code": -32600, "message": "unknown process id ghost"});
    assert_eq!(h.error("process/read", json!({"processId": "ghost"})).await, unknown);
    assert_eq!(h.error("process/write", json!({"processId": "ghost", "chunk": ""})).await, unknown);
    assert_eq!(
        h.error("process/signal", json!({"processId": "ghost", "signal": "SIGINT"})).await,
        unknown
    );
    assert_eq!(
        h.error("process/resize", json!({"processId": "ghost", "rows": 1, "cols": 1})).await,
        unknown
    );
    assert_eq!(
        h.result("process/terminate", json!({"processId": "ghost"})).await,
        json!({"running": false})
    );
    h.start("pipe", &["sleep", "30"]).await;
    assert_eq!(
        h.error("process/write", json!({"processId": "pipe", "chunk": b64(b"x")})).await,
        json!({"code": -32600, "message": "stdin is closed for process pipe"})
    );
    h.result("process/terminate", json!({"processId": "pipe"})).await;
}

#[tokio::test]
async fn terminate_kills_the_whole_group_and_reports_the_signal() {
    let mut h = Harness::ready().await;
    h.start("tree", &["sh", "-c", "sleep 30 & echo $!; wait"]).await;
    let first = h.notification("process/output", "tree").await;
    let grandchild: u32 =
        String::from_utf8(unb64(&first["chunk"])).unwrap().trim().parse().unwrap();
    assert_eq!(
        h.result("process/terminate", json!({"processId": "tree"})).await,
        json!({"running": true})
    );
    let exited = h.notification("process/exited", "tree").await;
    assert_eq!(
        exited,
        json!({"processId": "tree", "seq": 1, "exitCode": 137, "signal": "SIGKILL"})
    );
    // closed means every holder of stdout, the grandchild too, is gone.
    h.notification("process/closed", "tree").await;
    wait_dead(grandchild).await;
    assert_eq!(
        h.result("process/terminate", json!({"processId": "tree"})).await,
        json!({"running": false})
    );
    assert_eq!(
        h.result("process/read", json!({"processId": "tree", "afterSeq": 1})).await,
        json!({"chunks": [], "nextSeq": 2, "exited": true, "exitCode": 137, "signal": "SIGKILL", "closed": true})
    );
}

#[tokio::test]
async fn exited_is_sent_while_a_descendant_holds_the_output_open() {
    let mut h = Harness::ready().await;
    // The shell exits at once; its background child keeps stdout open and prints later.
    h.start_with(
        "bg",
        &["sh", "-c", "exec 3<&0; (read x <&3; echo late) & exit 0"],
        json!({"pipeStdin": true}),
    )
    .await;
    let exited = h.notification("process/exited", "bg").await;
    assert_eq!(exited, json!({"processId": "bg", "seq": 0, "exitCode": 0}));
    h.result(
        "process/write",
        json!({"processId": "bg", "chunk": b64(b"go\n"), "closeStdin": true}),
    )
    .await;
    let late = h.notification("process/output", "bg").await;
    assert_eq!(
        late,
        json!({"processId": "bg", "seq": 1, "stream": "stdout", "chunk": b64(b"late\n")})
    );
    assert_eq!(h.notification("process/closed", "bg").await, json!({"processId": "bg", "seq": 1}));
}

#[tokio::test]
async fn list_shows_every_process() {
    let mut h = Harness::ready().await;
    h.start("a-done", &["sh", "-c", "exit 4"]).await;
    h.run_to_close("a-done").await;
    h.start("b-running", &["sleep", "30"]).await;
    let list = h.result("process/list", json!({})).await;
    let processes = list["processes"].as_array().unwrap();
    assert_eq!(processes.len(), 2);
    let strip_pid = |p: &Value| {
        assert!(p["pid"].as_u64().unwrap() > 1);
        let mut p = p.clone();
        p.as_object_mut().unwrap().remove("pid");
        p
    };
    assert_eq!(
        strip_pid(&processes[0]),
        json!({"processId": "a-done", "argv": ["sh", "-c", "exit 4"], "tty": false, "sandboxType": "none", "running": false, "exitCode": 4, "signal": null})
    );
    assert_eq!(
        strip_pid(&processes[1]),
        json!({"processId": "b-running", "argv": ["sleep", "30"], "tty": false, "sandboxType": "none", "running": true, "exitCode": null, "signal": null})
    );
    h.result("process/terminate", json!({"processId": "b-running"})).await;
}

#[tokio::test]
async fn metadata_reaches_the_environment_and_bad_values_are_refused() {
    let mut server = crate::binary::Binary::ready(&[]).await;
    let script = "echo \"$CODEX_THREAD_ID|$CODEX_TOOL_CALL_ID\"";
    let mut params = crate::support::start_params("m", &["sh", "-c", script], json!({}));
    params["metadata"] = json!({"threadId": "thread-7", "toolCallId": "call_42"});
    server.result("process/start", params).await;
    let mut output = Vec::new();
    loop {
        let message = server.next().await.unwrap();
        match message["method"].as_str() {
            Some("process/output") => {
                output.extend(crate::support::unb64(&message["params"]["chunk"]))
            }
            Some("process/closed") => break,
            _ => {}
        }
    }
    assert_eq!(String::from_utf8(output).unwrap(), "thread-7|call_42\n");
    for (metadata, field) in [
        (json!({"threadId": "a\nb"}), "threadId"),
        (json!({"toolCallId": "x".repeat(257)}), "toolCallId"),
        (json!({"threadId": "ok", "toolCallId": "nul\u{0}"}), "toolCallId"),
    ] {
        let mut params = crate::support::start_params("bad", &["true"], json!({}));
        params["metadata"] = metadata;
        let error = server.error("process/start", params).await;
        assert_eq!(
            error,
            json!({"code": -32602, "message": format!("metadata.{field} must be a string of at most 256 bytes without NUL or newline")})
        );
    }
}
