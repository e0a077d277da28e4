//! How a started process numbers its notifications and names its sandbox:
//! plain options, chosen per start by the edge that translated the request.

use crate::protocol::{Sandbox, SandboxMode, SandboxType};

use super::OutputLog;

/// How a process numbers its notifications.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Numbering {
    /// Only output chunks take seqs; exited and closed carry the last one.
    #[default]
    Output,
    /// One counter for output, exit and close alike (output ends at n,
    /// exited is n+1, closed n+2, and `nextSeq` counts them); a read past
    /// the exit waits for late output or the close.
    Counter,
}

impl Numbering {
    /// The seq of the exit or close event of a process whose log is `log`.
    pub(crate) fn event_seq(self, log: &mut OutputLog) -> u64 {
        match self {
            Numbering::Output => log.last_seq(),
            Numbering::Counter => log.reserve(),
        }
    }
}

/// The shape of one process's answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shape {
    pub(crate) numbering: Numbering,
    /// What a Landlock sandbox is called in its answers.
    pub(crate) landlock_name: SandboxType,
    /// The start result names the sandbox even when the start asked for none.
    pub(crate) always_name_sandbox: bool,
    /// A sandboxed program the sandbox keeps from running still starts, and
    /// exits 127 with the reason on stderr (else the start fails, -32603).
    pub(crate) exit_on_exec_failure: bool,
    /// Exits and reads say whether the failure looks like the sandbox's
    /// refusal (`sandboxDenied`, see `denial`), and reads carry `failure`.
    pub(crate) report_denials: bool,
    /// A start that fails says only the OS error (`No such file or
    /// directory (os error 2)`), not which program failed to start.
    pub(crate) bare_start_errors: bool,
    /// A socket the sandbox refuses fails with EPERM, as upstream's seccomp
    /// filter answers (else EACCES).
    pub(crate) eperm_sockets: bool,
}

impl Default for Shape {
    fn default() -> Shape {
        Shape {
            numbering: Numbering::Output,
            landlock_name: SandboxType::LinuxLandlock,
            always_name_sandbox: false,
            exit_on_exec_failure: false,
            report_denials: false,
            bare_start_errors: false,
            eperm_sockets: false,
        }
    }
}

impl Shape {
    /// The sandbox type as this process's answers name it.
    pub(crate) fn sandbox_name(&self, sandbox: SandboxType) -> SandboxType {
        match sandbox {
            SandboxType::LinuxLandlock => self.landlock_name,
            other => other,
        }
    }

    /// The sandbox type a start result carries: when the start asked for a
    /// sandbox, or always if so shaped (exec-server.v0's start result is
    /// exactly `{"processId"}` otherwise).
    pub(crate) fn start_sandbox_type(
        &self,
        asked: Option<&Sandbox>,
        sandbox: SandboxType,
    ) -> Option<SandboxType> {
        let asked = asked.is_some_and(|s| s.mode != SandboxMode::None);
        (self.always_name_sandbox || asked).then(|| self.sandbox_name(sandbox))
    }
}
