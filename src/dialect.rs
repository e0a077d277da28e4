//! Today's upstream dialect beside exec-server.v0, translated at the edge.
//!
//! The core keeps one model: plain paths, a complete environment, this
//! server's sandbox policy and error codes. A request in today's dialect (a
//! file URI, an `envPolicy`, a sandbox context: see [`inbound`]) is made
//! into that model before dispatch, and its answer is made back into today's
//! shapes by [`outbound`]; a process started in it numbers its exit and close
//! events in its output's sequence ([`Numbering::Counter`]). The rule is
//! written in PROTOCOL.md, "Dialects".

#[cfg(feature = "server")]
mod contexts;
#[cfg(feature = "server")]
mod env;
#[cfg(feature = "server")]
pub(crate) mod fs_rules;
#[cfg(feature = "server")]
pub(crate) mod inbound;
#[cfg(feature = "server")]
mod info;
#[cfg(feature = "server")]
pub(crate) mod outbound;
pub(crate) mod requests;
#[cfg(feature = "server")]
mod shell;
pub(crate) mod uri;

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

/// How a process numbers its notifications.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Numbering {
    /// Part B: only output chunks take seqs; exited and closed carry the last one.
    #[default]
    Output,
    /// Today's dialect: one counter for output, exit and close alike (output
    /// ends at n, exited is n+1, closed n+2, and `nextSeq` counts them).
    #[cfg_attr(not(feature = "server"), allow(dead_code))]
    Counter,
}

#[cfg(feature = "server")]
impl Numbering {
    /// The seq of the exit or close event of a process whose log is `log`:
    /// the last output's under Part B, a seq of its own under today's counter.
    pub(crate) fn event_seq(self, log: &mut crate::process::OutputLog) -> u64 {
        match self {
            Numbering::Output => log.last_seq(),
            Numbering::Counter => log.reserve(),
        }
    }
}
