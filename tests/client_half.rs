//! The client half on its own (`cargo test --no-default-features`): the same
//! code a macOS or Windows user gets, driven against a scripted exec-server.v0
//! peer (`fixtures/scripted_server.py`), over a pipe pair and through a
//! `Launcher` that owns it.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use exec_server::{Client, LaunchCommand, Launcher, StartParams};

const SCRIPTED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/scripted_server.py");
const PYTHON: &str = "/usr/bin/python3";
const TIMEOUT: Duration = Duration::from_secs(20);

/// `future`, or a panic naming `what` after [`TIMEOUT`].
async fn within<F: std::future::Future>(what: &str, future: F) -> F::Output {
    match tokio::time::timeout(TIMEOUT, future).await {
        Ok(output) => output,
        Err(_) => panic!("timed out after {TIMEOUT:?} waiting for {what}"),
    }
}

#[tokio::test]
async fn a_client_over_any_pipe_pair_runs_a_process() {
    let mut peer = tokio::process::Command::new(PYTHON)
        .arg(SCRIPTED)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let (stdin, stdout) = (peer.stdin.take().unwrap(), peer.stdout.take().unwrap());
    let client = within("the handshake", Client::connect(stdout, stdin)).await.unwrap();
    let mut process = client.start(StartParams::new("p", ["anything"], "/")).await.unwrap();
    let (output, status) = within("the process's end", process.output_to_end()).await.unwrap();
    assert_eq!((output.as_slice(), status.code, status.signal), (&b"hi\n"[..], 3, None));
    let list = client.list(exec_server::protocol::Empty {}).await.unwrap();
    assert_eq!(list.processes[0].process_id, "self");
}

#[tokio::test]
async fn a_launcher_owns_its_server_and_ends_it_when_dropped() {
    let launcher = within("the launch", Launcher::spawn(LaunchCommand::new(PYTHON).arg(SCRIPTED)))
        .await
        .unwrap();
    let pid = launcher.pid();
    let list = launcher.client().list(exec_server::protocol::Empty {}).await.unwrap();
    assert_eq!(list.processes[0].pid, pid, "the launcher's pid is the server's");
    let mut process =
        launcher.client().start(StartParams::new("q", ["anything"], "/")).await.unwrap();
    assert_eq!(within("the exit", process.wait()).await.unwrap().code, 3);
    let shutdown = within("the shutdown", launcher.shutdown(Duration::from_secs(5))).await.unwrap();
    // The scripted server exits at end of input, as a real one does.
    assert!(
        matches!(shutdown, exec_server::Shutdown::Exited(status) if status.success()),
        "{shutdown:?}"
    );
}

#[tokio::test]
async fn a_close_before_the_exit_still_ends_with_the_exit() {
    let launcher = within("the launch", Launcher::spawn(LaunchCommand::new(PYTHON).arg(SCRIPTED)))
        .await
        .unwrap();
    let params = StartParams::new("close-first-1", ["anything"], "/");
    let mut process = launcher.client().start(params).await.unwrap();
    let (output, status) = within("the process's end", process.output_to_end()).await.unwrap();
    assert_eq!((output.as_slice(), status.code), (&b"hi\n"[..], 3));
}
