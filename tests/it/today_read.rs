//! `process/read` past the exit (DIALECT-GAPS §2): a process of today's
//! dialect waits there for output a descendant writes later, until the close;
//! one of exec-server.v0 answers at once, as before.

use serde_json::{json, Value};

use crate::support::{b64, start_params, unb64, Harness};

/// The child leaves a grandchild holding its stdout and exits 0; the
/// grandchild writes once a line arrives on the stdin it inherited.
const LATE: &str = "exec 3<&0; (read line <&3; printf 'late output after exit\\n') & exit 0";

async fn start(h: &mut Harness, id: &str, cwd: &str) {
    let params = start_params(id, &["sh", "-c", LATE], json!({"cwd": cwd, "pipeStdin": true}));
    let result = h.result("process/start", params).await;
    assert_eq!(result["processId"], id);
}

/// The first read: it waits for the exit (nothing is written before it).
async fn read_to_exit(h: &mut Harness, id: &str) -> Value {
    h.result("process/read", json!({"processId": id, "waitMs": 20000})).await
}

#[tokio::test]
async fn a_read_past_the_exit_waits_for_late_output_and_then_the_close() {
    let mut h = Harness::ready().await;
    start(&mut h, "late", "file:///tmp").await;
    let first = read_to_exit(&mut h, "late").await;
    assert_eq!(
        first,
        json!({"chunks": [], "nextSeq": 2, "exited": true, "exitCode": 0, "closed": false, "failure": null, "sandboxDenied": false})
    );
    let exit_seq = first["nextSeq"].as_u64().unwrap() - 1;
    // Sent before the output exists: the read must wait for it (it used to
    // answer at once with no chunks, as the exit was reported already).
    let read = h
        .send_request(
            "process/read",
            json!({"processId": "late", "afterSeq": exit_seq, "waitMs": 20000}),
        )
        .await;
    let write = json!({"processId": "late", "chunk": b64(b"go\n"), "writeId": "w1"});
    assert_eq!(h.result("process/write", write).await["accepted"], true);
    let late = h.response(read).await["result"].clone();
    assert_eq!(late["chunks"].as_array().unwrap().len(), 1, "{late}");
    assert_eq!(late["chunks"][0]["seq"], exit_seq + 1);
    assert_eq!(late["chunks"][0]["stream"], "stdout");
    assert_eq!(unb64(&late["chunks"][0]["chunk"]), b"late output after exit\n");
    // Past the late chunk, the read waits for the close, which takes the next seq.
    let closed = h
        .result(
            "process/read",
            json!({"processId": "late", "afterSeq": exit_seq + 1, "waitMs": 20000}),
        )
        .await;
    assert_eq!(
        closed,
        json!({"chunks": [], "nextSeq": exit_seq + 3, "exited": true, "exitCode": 0, "closed": true, "failure": null, "sandboxDenied": false})
    );
    let notification = h.notification("process/closed", "late").await;
    assert_eq!(notification, json!({"processId": "late", "seq": exit_seq + 2}));
}

#[tokio::test]
async fn a_v0_read_past_the_exit_still_answers_at_once() {
    let mut h = Harness::ready().await;
    start(&mut h, "v0", "/tmp").await;
    let first = read_to_exit(&mut h, "v0").await;
    assert_eq!(
        first,
        json!({"chunks": [], "nextSeq": 1, "exited": true, "exitCode": 0, "closed": false})
    );
    let again =
        h.result("process/read", json!({"processId": "v0", "afterSeq": 0, "waitMs": 20000})).await;
    assert_eq!(again, first);
    let write = json!({"processId": "v0", "chunk": b64(b"go\n")});
    assert_eq!(h.result("process/write", write).await["accepted"], true);
    let (output, _) = h.output_and_exit("v0").await;
    assert_eq!(output, b"late output after exit\n");
}
