//! exec-server: a subprocess and filesystem sidecar speaking newline-delimited JSON-RPC.
//!
//! A parent program spawns `exec-server` and talks to it over stdin/stdout using
//! the `exec-server.v0` protocol (see `PROTOCOL.md` in the repository): it starts
//! processes under pipes or a pseudo-terminal, streams and reads back their
//! output, writes their input, signals them, and works on files.
//!
//! # Layout
//!
//! - `protocol`: wire types (envelope, one marker type per method); no IO.
//! - `transport`: newline framing; the reader task owns the input, the writer task the output.
//! - `server`: [`server::run`], the loop that owns a connection's state; `server::dispatch` maps methods to handlers.
//! - `process`: the process table; `process::{spawn, pumps, entry, output, signal}` start,
//!   pump, number and retain, and signal processes.
//! - `fs`: one function per fs/* method, with `--root` confinement and error mapping.
//! - `client`: [`Client`] (typed calls, routing), [`Process`] handles, raw [`EventStream`]s.
//! - `launcher`: [`Launcher`] spawns a server command and owns its lifetime.
//! - `listen`: [`listen`], the WebSocket server: one `server` loop per connection.
//! - `filesystem`, `executor`: the [`FileSystem`] and [`Executor`] traits, local and remote.
//! - `error`: [`Error`], the client side's error.
//! - `stdio`: [`Stdio`], the binary's stdin/stdout (reactor-driven when they are pipes).
//!
//! # Rules the code keeps
//!
//! - Only the writer task writes to the output; logs go to stderr through `tracing`.
//! - One loop owns the process table; process tasks talk to it through a bounded channel.
//! - Every spawned task has an owner: a process's tasks live in its `JoinSet`.
//! - Children run in their own session; the server signals whole process groups and
//!   reaps every child itself, keeping the leader a zombie until it is forgotten so its
//!   group id cannot be reused under it.
//! - Nothing on the input can panic the server: every failure is an error reply.

#![warn(missing_docs)]

mod client;
mod error;
mod executor;
mod filesystem;
mod fs;
#[doc(hidden)]
pub mod host;
mod launcher;
mod listen;
mod process;
mod protocol;
pub mod server;
mod stdio;
mod transport;

pub use crate::client::{
    Client, ClientOptions, Event, EventStream, ExitStatus, OutputChunk, Process,
    DEFAULT_HANDSHAKE_TIMEOUT,
};
pub use crate::error::Error;
pub use crate::executor::{Executor, LocalExecutor, RemoteExecutor};
pub use crate::filesystem::{FileSystem, LocalFileSystem, RemoteFileSystem};
pub use crate::fs::READ_LIMIT;
pub use crate::launcher::{LaunchCommand, Launcher, SelfInstall, Shutdown, SshCommand};
pub use crate::listen::{listen, ListenOptions, PING_INTERVAL};
pub use crate::protocol::*;
pub use crate::server::{Config, OnEof};
pub use crate::stdio::{FlagsGuard, Stdio};
