//! Run commands and work on files on this machine or another one, through an
//! `exec-server` sidecar: the server speaks the `exec-server.v0` JSON-RPC
//! protocol over stdio (locally, or through `ssh host exec-server`) or
//! WebSocket, and this crate is both the server and its Rust client.
//!
//! Start with [`Launcher`]: it starts a server, performs the handshake and owns
//! the server's lifetime (everything the server started dies with it).
//!
//! ```
//! use exec_server::{LaunchCommand, Launcher, StartParams};
//!
//! # #[cfg(not(feature = "server"))] fn main() {} // this_program serves: the server half.
//! # #[cfg(feature = "server")]
//! fn main() -> Result<(), exec_server::Error> {
//!     // Launched as the server (by `this_program` below), this serves and exits.
//!     exec_server::serve_if_requested();
//!     let runtime = tokio::runtime::Runtime::new().expect("a runtime");
//!     runtime.block_on(async {
//!         // `LaunchCommand::exec_server()` would run the installed binary instead.
//!         let launcher = Launcher::spawn(LaunchCommand::this_program()).await?;
//!         let params = StartParams::new("hello", ["sh", "-c", "echo hello; exit 3"], "/tmp");
//!         let mut process = launcher.client().start(params).await?;
//!         let (output, status) = process.output_to_end().await?;
//!         assert_eq!((output.as_slice(), status.code), (&b"hello\n"[..], 3));
//!         Ok(())
//!     })
//! }
//! ```
//!
//! - [`Client`]: typed calls over any connection ([`Client::connect`],
//!   [`Client::connect_ws`], [`Client::in_process`]); [`Process`] handles stream
//!   a process's output in order; [`EventStream`] yields every [`Event`].
//! - [`LaunchCommand::ssh`] reaches another machine over OpenSSH;
//!   [`Launcher::spawn_listening`] starts a WebSocket server and connects to it.
//! - [`FileSystem`] and [`Executor`]: one interface, here ([`LocalFileSystem`],
//!   [`LocalExecutor`]) or through a server ([`RemoteFileSystem`], [`RemoteExecutor`]).
//! - [`protocol`]: the wire types, for writing another client or server.
//! - [`server`]: the server itself ([`server::run`] over any byte stream,
//!   [`server::listen`] over WebSocket), for embedding it.
//!
//! How the crate is built inside, and the rules it keeps, are in
//! `ARCHITECTURE.md` in the repository.

#![warn(missing_docs)]

// The client half: every platform.
mod client;
mod dialect;
mod error;
mod executor;
mod filesystem;
mod launcher;
pub mod protocol;
mod transport;

// The server half (feature `server`, Linux only).
#[cfg(feature = "server")]
mod account;
#[cfg(feature = "server")]
mod addresses;
#[cfg(feature = "server")]
mod bridge;
#[cfg(feature = "server")]
mod cli;
#[cfg(feature = "server")]
mod dial;
#[cfg(feature = "server")]
mod env_fd;
#[cfg(feature = "server")]
mod fd;
#[cfg(feature = "server")]
mod fs;
#[cfg(feature = "server")]
mod hold;
#[cfg(feature = "server")]
mod host;
#[cfg(feature = "server")]
mod http;
#[cfg(feature = "server")]
mod limits;
#[cfg(feature = "server")]
mod listen;
#[cfg(feature = "server")]
mod mcp;
#[cfg(feature = "server")]
mod ports;
#[cfg(feature = "server")]
mod process;
#[cfg(feature = "server")]
mod proxy;
#[cfg(feature = "server")]
mod sandbox;
#[cfg(feature = "server")]
pub mod server;
#[cfg(feature = "server")]
mod sessions;
#[cfg(feature = "server")]
mod stdio;
#[cfg(feature = "server")]
mod tunnel;
#[cfg(feature = "server")]
mod watch;

pub use crate::client::{
    Client, ClientOptions, Event, EventStream, ExitStatus, Forward, NetworkDecider, OutputChunk,
    PortWatch, Process, Tunnel, Watch, CONNECTION_TOKEN_ENV,
};
pub use crate::dialect::Dialect;
pub use crate::error::Error;
#[cfg(feature = "server")]
pub use crate::executor::LocalExecutor;
pub use crate::executor::{Executor, RemoteExecutor};
#[cfg(feature = "server")]
pub use crate::filesystem::LocalFileSystem;
pub use crate::filesystem::{FileSystem, RemoteFileSystem};
pub use crate::launcher::{
    ContainerCommand, Engine, LaunchCommand, Launcher, Shutdown, SshCommand,
};
pub use crate::protocol::{
    Access, AccessEntry, LimitHit, Network, NetworkPolicy, ProcessLimits, Sandbox, SandboxMode,
    SandboxType, StartMetadata, StartParams, TtySize,
};

#[cfg(feature = "server")]
/// Lets this program serve as its own sandbox helper: call it first thing in
/// `main`. When the program was started as a sandbox trampoline (by a server
/// embedded in it, whose [`server::Config::sandbox_helper`] is left `None`),
/// this applies the policy and executes the sandboxed program, never
/// returning; the same for the cgroup v2 join of a limited start and for the
/// resident process that starts trampolines; otherwise it returns at once.
pub fn run_sandbox_helper_if_requested() {
    sandbox::run_if_trampoline();
    process::run_if_forker();
    limits::run_if_joining();
}

/// The hidden first argument with which [`LaunchCommand::this_program`] starts
/// this program as a server.
pub(crate) const SERVE_ARG: &str = "--exec-server-serve";

#[cfg(feature = "server")]
/// Lets this program serve as its own `exec-server`: call it first thing in
/// `main`, before any runtime or thread starts. When the program was started
/// by [`LaunchCommand::this_program`], this runs the server (with the flags
/// that followed) and exits the process; otherwise it returns at once. One
/// binary can then be both an application and the sidecar it launches.
pub fn serve_if_requested() {
    let mut args = std::env::args_os();
    let program = args.next();
    if args.next().is_some_and(|first| first == SERVE_ARG) {
        let code = cli::main_from(program.into_iter().chain(args));
        std::process::exit(if code == std::process::ExitCode::SUCCESS { 0 } else { 1 });
    }
    run_sandbox_helper_if_requested();
    process::run_if_watcher();
}

/// The `exec-server` binary's `main`: flags, logging, signals, and the server.
#[cfg(feature = "server")]
#[doc(hidden)]
pub fn run_binary() -> std::process::ExitCode {
    cli::main()
}
