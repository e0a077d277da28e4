//! Launch exec-server, start `python3 -m http.server` through it, wait for
//! its port to appear (`ports/watch`), forward it to a local port, and print
//! what an HTTP GET through the local port returns.
//!
//! Like `run`, this program doubles as the server it launches.
#![allow(clippy::print_stdout)]

use std::process::ExitCode;

use exec_server::{LaunchCommand, Launcher, StartParams};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn main() -> ExitCode {
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

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let launcher = Launcher::spawn(LaunchCommand::this_program()).await?;
    let client = launcher.client();
    let mut ports = client.watch_ports().await?;
    let argv = ["python3", "-m", "http.server", "0", "--bind", "127.0.0.1"];
    let _server = client.start(StartParams::new("web", argv, "/tmp")).await?;
    // The dev server's port, as the session sees it open.
    let port = loop {
        let changed = ports.next().await.ok_or("the connection ended")?;
        if let Some(port) = changed.opened.iter().find(|p| p.process_id == "web") {
            println!("{} listens on {}:{}", port.command, port.address, port.port);
            break port.port;
        }
    };
    let forward = client.forward("127.0.0.1:0", "127.0.0.1", port).await?;
    println!("forwarded to {}", forward.local_addr());
    let mut stream = tokio::net::TcpStream::connect(forward.local_addr()).await?;
    stream.write_all(b"GET / HTTP/1.0\r\nHost: localhost\r\n\r\n").await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?;
    let text = String::from_utf8_lossy(&response);
    println!("{}", text.lines().next().unwrap_or("(no response)"));
    println!("{} bytes received", response.len());
    Ok(())
}
