//! Run a command in a container through the exec-server inside it:
//! `cargo run --example container -- CONTAINER [ENGINE]` (ENGINE: podman, the
//! default, or docker). The container must be running; when it lacks
//! exec-server, the static build is installed into it first (set
//! `EXEC_SERVER_STATIC_BIN`, or build it with `cargo build --release
//! --target x86_64-unknown-linux-musl`).
#![allow(clippy::print_stdout)]

use std::process::ExitCode;

use exec_server::{Engine, LaunchCommand, Launcher, StartParams};

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(container) = args.next() else {
        eprintln!("usage: container CONTAINER [podman|docker]");
        return ExitCode::from(2);
    };
    let engine = match args.next().as_deref() {
        None | Some("podman") => Engine::Podman,
        Some("docker") => Engine::Docker,
        Some(other) => {
            eprintln!("error: unknown engine {other} (podman or docker)");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(engine, &container)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(engine: Engine, container: &str) -> Result<(), exec_server::Error> {
    let static_binary = std::env::var("EXEC_SERVER_STATIC_BIN")
        .unwrap_or_else(|_| "target/x86_64-unknown-linux-musl/release/exec-server".to_owned());
    let mut command = LaunchCommand::container(engine, container);
    if std::path::Path::new(&static_binary).is_file() {
        command = command.install_if_missing(static_binary);
    }
    let launcher = Launcher::spawn(command).await?;
    let params =
        StartParams::new("hello", ["sh", "-c", "echo hello from $(hostname); uname -sm"], "/");
    let mut process = launcher.client().start(params).await?;
    let (output, status) = process.output_to_end().await?;
    print!("{}", String::from_utf8_lossy(&output));
    println!("exit code {}", status.code);
    Ok(())
}
