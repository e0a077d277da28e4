//! Today's upstream dialect beside exec-server.v0, translated at the edge.
//!
//! The core keeps one model: plain paths, a complete environment, this
//! server's sandbox policy and error codes. A request in today's dialect (a
//! file URI, an `envPolicy`, a sandbox context: see [`inbound`]) is made
//! into that model before dispatch, and its answer is made back into today's
//! shapes by [`outbound`]; a process started in it numbers its exit and close
//! events in its output's sequence (`Numbering::Counter`). The rule is
//! written in PROTOCOL.md, "Dialects".

#[cfg(feature = "server")]
mod contexts;
#[cfg(feature = "server")]
mod env;
#[cfg(feature = "server")]
pub(crate) mod environment_config;
#[cfg(feature = "server")]
pub(crate) mod fs_rules;
#[cfg(feature = "server")]
pub(crate) mod inbound;
#[cfg(feature = "server")]
mod info;
#[cfg(feature = "server")]
mod network_proxy;
#[cfg(feature = "server")]
pub(crate) mod outbound;
pub(crate) mod requests;
#[cfg(feature = "server")]
mod shell;
pub(crate) mod uri;

#[cfg(feature = "server")]
pub(crate) use self::inbound::FsConfine;
#[cfg(feature = "server")]
pub(crate) use self::info::environment_info;

/// Which dialect a request, a connection or a [`crate::Client`] speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Dialect {
    /// exec-server.v0 with Part B.
    #[default]
    V0,
    /// Today's upstream dialect (DIALECT.md).
    Today,
}

/// How a process numbers its notifications (the core's option, chosen here).
#[cfg(feature = "server")]
pub(crate) use crate::process::Numbering;
