//! Launch exec-server, run a command through it, print its output and exit code.
#![allow(clippy::print_stdout)]

use std::process::ExitCode;

use exec_server::{LaunchCommand, Launcher, StartParams};

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            eprintln!(
                "(the launcher starts $EXEC_SERVER_BIN, else exec-server beside this example or in its parent directory, else on PATH: run `cargo build` first)"
            );
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), exec_server::Error> {
    let launcher = Launcher::spawn(LaunchCommand::exec_server()).await?;
    let params =
        StartParams::new("hello", ["sh", "-c", "echo hello from $(hostname); exit 3"], "/tmp");
    let mut process = launcher.client().start(params).await?;
    let (output, status) = process.output_to_end().await?;
    print!("{}", String::from_utf8_lossy(&output));
    println!("exit code {}", status.code);
    Ok(())
}
