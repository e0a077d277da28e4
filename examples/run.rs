//! Launch exec-server, run a command through it, print its output and exit code.
//!
//! This program doubles as the server it launches (`LaunchCommand::this_program`),
//! so `cargo run --example run` needs no separate build of the `exec-server`
//! binary; `LaunchCommand::exec_server()` starts that binary instead.
#![allow(clippy::print_stdout)]

use std::process::ExitCode;

use exec_server::{LaunchCommand, Launcher, StartParams};

fn main() -> ExitCode {
    // First, before any thread: when launched as the server, serve and exit.
    exec_server::serve_if_requested();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), exec_server::Error> {
    let launcher = Launcher::spawn(LaunchCommand::this_program()).await?;
    let params =
        StartParams::new("hello", ["sh", "-c", "echo hello from $(hostname); exit 3"], "/tmp");
    let mut process = launcher.client().start(params).await?;
    let (output, status) = process.output_to_end().await?;
    print!("{}", String::from_utf8_lossy(&output));
    println!("exit code {}", status.code);
    Ok(())
}
