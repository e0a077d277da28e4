//! Table-level tests of timer and parked-read bookkeeping, driven without a server.

use std::time::Duration;

use serde_json::json;
use tokio::sync::mpsc;
use tokio::time::Instant;

use std::sync::Arc;

use super::reads::MAX_PARKED;
use super::*;
use crate::fs::Roots;
use crate::protocol::ReadParams;
use crate::protocol::{RequestId, Stream};

fn table() -> (ProcessTable, mpsc::Receiver<ProcEvent>) {
    let (events, receiver) = mpsc::channel(64);
    let limits = Limits {
        max_processes: 4,
        retained_bytes: RETAINED_BYTES,
        connection_retained: super::CONNECTION_RETAINED,
        server_retained: usize::MAX,
        server_account: Default::default(),
        reservation: Duration::from_secs(30),
        sandbox: crate::sandbox::Settings::default(),
        tree: Default::default(),
        prepend_path: Default::default(),
    };
    (ProcessTable::new(events, limits), receiver)
}

async fn start_sleep(table: &mut ProcessTable, id: &str) {
    start(table, id, &["sleep", "100"]).await;
}

fn waiting_read(id: &str, after: u64) -> ReadParams {
    ReadParams {
        process_id: id.into(),
        after_seq: Some(after),
        max_bytes: None,
        wait_ms: Some(24 * 3600 * 1000),
    }
}

#[tokio::test]
async fn reads_answered_early_leave_no_timer_or_parked_entry() {
    let (mut table, _events) = table();
    start_sleep(&mut table, "p").await;
    let now = Instant::now();
    let mut out = Vec::new();
    for seq in 0..1000_u64 {
        let outcome = table.read(RequestId::from(seq as i64), waiting_read("p", seq), now).unwrap();
        assert!(matches!(outcome, ReadOutcome::Parked));
        assert_eq!(table.pending_counts(), (1, 1));
        let budget = std::sync::Arc::new(tokio::sync::Semaphore::new(1));
        let budget = budget.acquire_many_owned(1).await.unwrap();
        let bytes = b"x".to_vec();
        let output =
            ProcEvent::Output { serial: 1, stream: Stream::Stdout, bytes, _budget: budget };
        table.on_event(output, now, &mut out);
        assert_eq!(table.pending_counts(), (0, 0), "after answering read {seq}");
    }
    // Each chunk: its notification, then the answer of the read it woke.
    assert_eq!(out.len(), 2000);
    assert!(out[1].starts_with(r#"{"id":0,"result":{"chunks":[{"seq":1,"#), "{:?}", out[1]);
    table.kill_all();
}

#[tokio::test]
async fn parked_reads_are_bounded_per_connection() {
    let (mut table, _events) = table();
    start_sleep(&mut table, "p").await;
    let now = Instant::now();
    for n in 0..MAX_PARKED {
        table.read(RequestId::from(n as i64), waiting_read("p", 0), now).unwrap();
    }
    let Err(error) = table.read(RequestId::from(-5), waiting_read("p", 0), now) else {
        panic!("read {} was parked past the limit", MAX_PARKED + 1);
    };
    assert_eq!(error.code, -32600);
    assert_eq!(
        error.message,
        "too many waiting reads: the limit is 10000 per connection; answer some before parking more"
    );
    let mut out = Vec::new();
    table.answer_all_parked(&mut out);
    assert_eq!(out.len(), MAX_PARKED);
    assert_eq!(table.pending_counts(), (0, 0));
    table.kill_all();
}

#[tokio::test(start_paused = true)]
async fn a_waiting_read_is_answered_empty_at_its_deadline() {
    let (mut table, _events) = table();
    start_sleep(&mut table, "p").await;
    let start = Instant::now();
    let mut params = waiting_read("p", 0);
    params.wait_ms = Some(1500);
    table.read(RequestId::from(7), params, start).unwrap();
    let deadline = table.next_deadline().unwrap();
    assert_eq!(deadline, start + Duration::from_millis(1500));
    tokio::time::sleep_until(deadline).await;
    let mut out = Vec::new();
    table.on_timers(Instant::now(), &mut out);
    assert_eq!(
        out,
        vec![
            r#"{"id":7,"result":{"chunks":[],"nextSeq":1,"exited":false,"exitCode":null,"closed":false}}"#
        ]
    );
    assert_eq!(table.pending_counts(), (0, 0));
    table.kill_all();
}

async fn start(table: &mut ProcessTable, id: &str, argv: &[&str]) {
    let params = serde_json::from_value(json!({
        "processId": id, "argv": argv, "cwd": "/", "env": {"PATH": "/usr/bin:/bin"},
    }))
    .unwrap();
    table
        .begin_start(RequestId::from(0), params, Shape::default(), Arc::new(Roots::default()))
        .unwrap();
    let reply = table.next_done().await.unwrap();
    assert!(reply.starts_with(r#"{"id":0,"result":"#), "{reply}");
}

fn exited(serial: u64) -> ProcEvent {
    ProcEvent::Exited { serial, exit: Ok(signal::ExitInfo::exited(0)) }
}

#[tokio::test]
async fn exit_waits_up_to_250_ms_for_the_streams_then_is_reported() {
    let (mut table, _events) = table();
    start_sleep(&mut table, "p").await;
    let t0 = Instant::now();
    let mut out = Vec::new();
    table.on_event(exited(1), t0, &mut out);
    assert_eq!(out, Vec::<String>::new(), "reported while both streams were open");
    table.on_timers(t0 + Duration::from_millis(249), &mut out);
    assert_eq!(out, Vec::<String>::new());
    table.on_timers(t0 + Duration::from_millis(250), &mut out);
    assert_eq!(
        out,
        vec![r#"{"method":"process/exited","params":{"processId":"p","seq":0,"exitCode":0}}"#]
    );
    table.kill_all();
}

#[tokio::test]
async fn an_exited_id_is_reserved_for_30_s_then_forgotten() {
    let (mut table, _events) = table();
    start_sleep(&mut table, "p").await;
    let t0 = Instant::now();
    let mut out = Vec::new();
    table.on_event(ProcEvent::StreamEnd { serial: 1 }, t0, &mut out);
    table.on_event(ProcEvent::StreamEnd { serial: 1 }, t0, &mut out);
    table.on_event(exited(1), t0, &mut out);
    assert_eq!(out.len(), 2, "exited and closed: {out:?}");
    table.on_timers(t0 + Duration::from_millis(29_999), &mut out);
    assert_eq!(table.list().processes.len(), 1);
    table.on_timers(t0 + Duration::from_secs(30), &mut out);
    assert_eq!(table.list().processes.len(), 0);
    start(&mut table, "p", &["true"]).await;
    table.kill_all();
}

#[tokio::test]
async fn grace_ends_with_sigkill_to_the_group_at_its_deadline() {
    let (mut table, mut events) = table();
    start(&mut table, "g", &["sh", "-c", "trap '' TERM; echo ready; while :; do sleep 1; done"])
        .await;
    let pid = table.list().processes[0].pid;
    // The trap is set once the shell speaks.
    let ready = tokio::time::timeout(Duration::from_secs(20), events.recv()).await.unwrap();
    assert!(matches!(ready, Some(ProcEvent::Output { .. })), "{ready:?}");
    let t0 = Instant::now();
    let params = TerminateParams { process_id: "g".into(), grace_ms: Some(5_000) };
    assert!(table.terminate(params, t0).running);
    let mut out = Vec::new();
    table.on_timers(t0 + Duration::from_millis(4_999), &mut out);
    let alive = tree::stat(pid).map(|stat| stat.state != b'Z').unwrap_or(false);
    assert!(alive, "the shell died before its grace ran out");
    table.on_timers(t0 + Duration::from_secs(5), &mut out);
    // SIGKILL went to the group: the shell ends, killed.
    let status = tokio::task::spawn_blocking(move || {
        let mut status = 0;
        // SAFETY: waitpid writes only to `status`; the shell is this test's child.
        unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) };
        status
    })
    .await
    .unwrap();
    assert!(libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL, "{status}");
}

#[tokio::test]
async fn output_on_its_way_to_the_loop_is_bounded_in_bytes_not_events() {
    use futures_util::FutureExt as _;
    let (tx, mut rx) = mpsc::channel(64);
    let events = pumps::EventSender::new(tx);
    for _ in 0..pumps::OUTPUT_BUDGET / pumps::READ_BUFFER {
        assert!(events.output(1, Stream::Stdout, vec![0; pumps::READ_BUFFER]).await);
    }
    // Room for 60 more events, but not for one more byte of output...
    assert_eq!(events.output(1, Stream::Stdout, vec![0; 1]).now_or_never(), None);
    // ...while an event without output still goes at once.
    assert_eq!(events.send(ProcEvent::StreamEnd { serial: 2 }).now_or_never(), Some(true));
    // The loop handling one chunk frees its bytes.
    drop(rx.recv().await);
    assert_eq!(events.output(1, Stream::Stdout, vec![0; 1]).now_or_never(), Some(true));
}

#[test]
fn a_full_read_is_handed_on_and_a_small_one_copied_at_its_size() {
    let mut buffer = Vec::with_capacity(pumps::READ_BUFFER);
    buffer.resize(pumps::READ_BUFFER, 7);
    let at = buffer.as_ptr();
    let full = pumps::take_read(&mut buffer);
    assert_eq!((full.as_ptr(), full.len()), (at, pumps::READ_BUFFER));
    assert_eq!((buffer.len(), buffer.capacity()), (0, pumps::READ_BUFFER));
    buffer.extend_from_slice(b"hello");
    let small = pumps::take_read(&mut buffer);
    assert_eq!((small.as_slice(), small.capacity()), (&b"hello"[..], 5));
    assert_eq!((buffer.len(), buffer.capacity()), (0, pumps::READ_BUFFER));
    buffer.resize(pumps::HAND_OVER - 1, 1);
    assert_eq!(pumps::take_read(&mut buffer).capacity(), pumps::HAND_OVER - 1);
}
