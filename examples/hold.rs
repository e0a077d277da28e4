//! Test helper: launches a server, starts `sh -c 'sleep 30 & wait'` through it,
//! prints "SERVER_PID SHELL_PID SLEEP_PID" and waits to be killed.
#![allow(clippy::print_stdout)]

use exec_server::{LaunchCommand, Launcher, StartParams};

#[tokio::main]
async fn main() -> Result<(), exec_server::Error> {
    let launcher = Launcher::spawn(LaunchCommand::exec_server()).await?;
    let params = StartParams::new("tree", ["sh", "-c", "sleep 30 & echo $!; wait"], "/");
    let mut process = launcher.client().start(params).await?;
    let sleep = process.next_output().await?.expect("the shell prints the sleep's pid");
    let list = launcher.client().list(exec_server::Empty {}).await?;
    let shell = list.processes[0].pid;
    println!("{} {shell} {}", launcher.pid(), String::from_utf8_lossy(&sleep.bytes).trim());
    std::future::pending::<()>().await;
    Ok(())
}
