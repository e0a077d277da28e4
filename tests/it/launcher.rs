//! The launcher through the real binary: lifetime, shutdown, crashes, and its own death.

use std::process::Stdio;
use std::time::{Duration, Instant};

use exec_server::{Error, LaunchCommand, Launcher, Shutdown, StartParams};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::binary::BIN;
use crate::support::{is_dead, wait_dead, within};

fn command() -> LaunchCommand {
    LaunchCommand::new(*BIN)
}

/// Starts `sh -c 'sleep 30 & echo $!; wait'` and returns (shell pid, sleep pid).
async fn start_tree(launcher: &Launcher) -> (u32, u32) {
    let params = StartParams::new("tree", ["sh", "-c", "sleep 30 & echo $!; wait"], "/");
    let mut process = launcher.client().start(params).await.unwrap();
    let chunk = within("the sleep's pid", process.next_output()).await.unwrap().unwrap();
    let sleep = String::from_utf8(chunk.bytes).unwrap().trim().parse().unwrap();
    let list = launcher.client().list(exec_server::protocol::Empty {}).await.unwrap();
    (list.processes[0].pid, sleep)
}

#[tokio::test]
async fn dropping_the_launcher_takes_down_server_child_and_grandchild() {
    let launcher = within("launch", Launcher::spawn(command())).await.unwrap();
    let server = launcher.pid();
    let (shell, sleep) = start_tree(&launcher).await;
    assert!(!is_dead(server) && !is_dead(shell) && !is_dead(sleep));
    let dropped = Instant::now();
    drop(launcher);
    for pid in [server, shell, sleep] {
        wait_dead(pid).await;
    }
    eprintln!("launcher drop: server, child and grandchild gone after {:?}", dropped.elapsed());
}

/// Runs `examples/hold`, SIGKILLs it, and waits for the server, child and grandchild to die.
async fn kill_the_launching_process(stdin_held_elsewhere: bool) {
    let helper =
        std::env::current_exe().unwrap().parent().unwrap().parent().unwrap().join("examples/hold");
    let mut command = tokio::process::Command::new(&helper);
    command
        .env("EXEC_SERVER_BIN", *BIN)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    if stdin_held_elsewhere {
        command.env("HOLD_STDIN_ELSEWHERE", "1");
    }
    let mut child =
        command.spawn().unwrap_or_else(|e| panic!("cannot run {}: {e}", helper.display()));
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = within("the helper's pids", lines.next_line()).await.unwrap().unwrap();
    let pids: Vec<u32> = line.split_whitespace().map(|p| p.parse().unwrap()).collect();
    assert_eq!(pids.len(), 4, "{line}");
    let _holder = KillOnDrop(pids[3]);
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    let killed = Instant::now();
    for &pid in &pids[..3] {
        wait_dead(pid).await;
    }
    eprintln!(
        "launcher SIGKILL (stdin held elsewhere: {stdin_held_elsewhere}): server, child and grandchild gone after {:?}",
        killed.elapsed()
    );
}

/// Kills the helper's forked copy (if any) however the test ends.
struct KillOnDrop(u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if self.0 != 0 {
            // SAFETY: kill(2) of a process this test started.
            unsafe { libc::kill(self.0 as libc::pid_t, libc::SIGKILL) };
        }
    }
}

#[tokio::test]
async fn a_sigkilled_launching_process_still_takes_everything_down() {
    kill_the_launching_process(false).await;
}

#[tokio::test]
async fn the_parent_death_signal_works_when_stdin_stays_open() {
    kill_the_launching_process(true).await;
}

#[tokio::test]
async fn shutdown_is_graceful() {
    let launcher = Launcher::spawn(command()).await.unwrap();
    let (shell, sleep) = start_tree(&launcher).await;
    let outcome = within("shutdown", launcher.shutdown(Duration::from_secs(5))).await.unwrap();
    let Shutdown::Exited(status) = outcome else { panic!("needed signals: {outcome:?}") };
    assert!(status.success());
    assert!(is_dead(shell) && is_dead(sleep));
}

#[tokio::test]
async fn a_server_that_dies_is_noticed() {
    let mut launcher = Launcher::spawn(command()).await.unwrap();
    let params = StartParams::new("p", ["sleep", "30"], "/");
    let mut process = launcher.client().start(params).await.unwrap();
    // SAFETY: kill(2) of the server we started.
    unsafe { libc::kill(launcher.pid() as libc::pid_t, libc::SIGKILL) };
    within("the client to close", launcher.client().closed()).await;
    assert!(matches!(process.wait().await, Err(Error::Closed)));
    let status = within("the server's exit", launcher.wait()).await.unwrap();
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGKILL));
}

#[tokio::test]
async fn other_commands_work_and_bad_ones_fail_clearly() {
    // Any command that ends up speaking the protocol on stdio, here through a shell.
    let via_shell =
        LaunchCommand::new("sh").arg("-c").arg("exec \"$0\" --log-level warn").arg(*BIN);
    let launcher = Launcher::spawn(via_shell).await.unwrap();
    let mut p = launcher.client().start(StartParams::new("p", ["echo", "ok"], "/")).await.unwrap();
    assert_eq!(p.output_to_end().await.unwrap().0, b"ok\n");
    let error = Launcher::spawn(LaunchCommand::new("/no/such/server")).await.err().unwrap();
    assert_eq!(
        error.to_string(),
        "cannot start /no/such/server: No such file or directory (os error 2)"
    );
    let not_a_server = Launcher::spawn(LaunchCommand::new("true")).await.err().unwrap();
    assert!(matches!(not_a_server, Error::Closed), "{not_a_server}");
}

#[tokio::test(flavor = "current_thread")]
async fn dropping_the_launcher_never_blocks_the_runtime() {
    // With --on-eof wait and a running process, closing stdin does not end the
    // server: only the SIGTERM that follows after a grace does.
    let launcher =
        Launcher::spawn(LaunchCommand::new(*BIN).arg("--on-eof").arg("wait")).await.unwrap();
    let params = StartParams::new("nap", ["sleep", "100"], "/");
    launcher.client().start(params).await.unwrap();
    let server = launcher.pid();
    drop(launcher);
    assert!(!crate::support::is_dead(server), "drop waited for the server to die");
    crate::support::wait_dead(server).await;
}
