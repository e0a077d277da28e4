//! Test helper: launches a server, starts `sh -c 'sleep 30 & wait'` through it,
//! prints "SERVER_PID SHELL_PID SLEEP_PID HOLDER_PID" and waits to be killed.
//!
//! With `HOLD_STDIN_ELSEWHERE` set, a forked copy of this process (HOLDER_PID)
//! keeps the server's stdin open, so only the parent-death signal can end the
//! server when this process dies.
#![allow(clippy::print_stdout)]

use exec_server::{LaunchCommand, Launcher, StartParams};

#[tokio::main]
async fn main() -> Result<(), exec_server::Error> {
    let launcher = Launcher::spawn(LaunchCommand::exec_server()).await?;
    let params = StartParams::new("tree", ["sh", "-c", "sleep 30 & echo $!; wait"], "/");
    let mut process = launcher.client().start(params).await?;
    let sleep = process.next_output().await?.expect("the shell prints the sleep's pid");
    let list = launcher.client().list(exec_server::protocol::Empty {}).await?;
    let shell = list.processes[0].pid;
    let holder = if std::env::var_os("HOLD_STDIN_ELSEWHERE").is_some() {
        // SAFETY: the child calls only pause(), which is async-signal-safe.
        match unsafe { libc::fork() } {
            0 => loop {
                unsafe { libc::pause() };
            },
            pid => pid,
        }
    } else {
        0
    };
    let sleep = String::from_utf8_lossy(&sleep.bytes).trim().to_owned();
    println!("{} {shell} {sleep} {holder}", launcher.pid());
    std::future::pending::<()>().await;
    Ok(())
}
