//! The one integration test binary: in-process tests over duplex pipes, and tests of the real binary.

#![allow(unreachable_pub, clippy::unwrap_used)]

mod binary;
mod bounds;
mod client;
mod control;
mod dialect;
mod fixtures;
mod fs;
mod fs_escape;
mod fs_files;
mod fs_trees;
mod fuse;
mod large;
mod launcher;
mod listener;
mod mcp;
mod ports;
mod process;
mod protocol;
mod pty;
mod robust;
mod routing;
mod sandbox;
mod sandbox_escape;
mod sessions;
mod ssh;
mod support;
mod today_handles;
mod today_info;
mod today_read;
mod today_trees;
mod traits;
mod tunnel;
mod watch;
mod websocket;
