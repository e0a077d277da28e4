//! Signal names, delivery to process groups, and exit statuses.

use std::io;

/// Signals a client may name, with their numbers on this platform.
const SIGNALS: &[(&str, libc::c_int)] = &[
    ("SIGHUP", libc::SIGHUP),
    ("SIGINT", libc::SIGINT),
    ("SIGQUIT", libc::SIGQUIT),
    ("SIGILL", libc::SIGILL),
    ("SIGTRAP", libc::SIGTRAP),
    ("SIGABRT", libc::SIGABRT),
    ("SIGBUS", libc::SIGBUS),
    ("SIGFPE", libc::SIGFPE),
    ("SIGKILL", libc::SIGKILL),
    ("SIGUSR1", libc::SIGUSR1),
    ("SIGSEGV", libc::SIGSEGV),
    ("SIGUSR2", libc::SIGUSR2),
    ("SIGPIPE", libc::SIGPIPE),
    ("SIGALRM", libc::SIGALRM),
    ("SIGTERM", libc::SIGTERM),
    ("SIGCHLD", libc::SIGCHLD),
    ("SIGCONT", libc::SIGCONT),
    ("SIGSTOP", libc::SIGSTOP),
    ("SIGTSTP", libc::SIGTSTP),
    ("SIGTTIN", libc::SIGTTIN),
    ("SIGTTOU", libc::SIGTTOU),
    ("SIGURG", libc::SIGURG),
    ("SIGXCPU", libc::SIGXCPU),
    ("SIGXFSZ", libc::SIGXFSZ),
    ("SIGVTALRM", libc::SIGVTALRM),
    ("SIGPROF", libc::SIGPROF),
    ("SIGWINCH", libc::SIGWINCH),
    ("SIGIO", libc::SIGIO),
    ("SIGSYS", libc::SIGSYS),
];

/// A signal number, parsed from a client's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Signal(pub(crate) libc::c_int);

impl Signal {
    pub(crate) const KILL: Signal = Signal(libc::SIGKILL);
    pub(crate) const TERM: Signal = Signal(libc::SIGTERM);
    pub(crate) const STOP: Signal = Signal(libc::SIGSTOP);

    /// Parses `SIGINT`, `INT`, `sigint` or `interrupt`.
    pub(crate) fn parse(name: &str) -> Result<Signal, String> {
        if name.eq_ignore_ascii_case("interrupt") {
            return Ok(Signal(libc::SIGINT));
        }
        let upper = name.to_ascii_uppercase();
        let full = if upper.starts_with("SIG") { upper } else { format!("SIG{upper}") };
        SIGNALS.iter().find(|(n, _)| *n == full).map(|&(_, number)| Signal(number)).ok_or_else(
            || {
                let known: Vec<&str> = SIGNALS.iter().map(|(n, _)| *n).collect();
                format!(
                    "unknown signal {name:?}: expected interrupt or one of {}",
                    known.join(", ")
                )
            },
        )
    }
}

/// The name of signal `number`, such as `SIGKILL`, or `SIG<number>` for others.
pub(crate) fn signal_name(number: libc::c_int) -> String {
    SIGNALS
        .iter()
        .find(|(_, n)| *n == number)
        .map(|(name, _)| (*name).to_owned())
        .unwrap_or_else(|| format!("SIG{number}"))
}

/// Sends `signal` to the process group `pgid`. A group that is gone is not an error.
pub(crate) fn signal_group(pgid: u32, signal: Signal) -> io::Result<()> {
    let pgid = libc::pid_t::try_from(pgid).map_err(io::Error::other)?;
    // SAFETY: killpg has no memory-safety preconditions.
    let rc = unsafe { libc::killpg(pgid, signal.0) };
    sent(libc::c_long::from(rc))
}

/// The result of a kill-like call that returns -1 on error: a target already
/// gone (ESRCH) is not an error.
pub(crate) fn sent(rc: libc::c_long) -> io::Result<()> {
    if rc == 0 {
        return Ok(());
    }
    let error = io::Error::last_os_error();
    if error.raw_os_error() == Some(libc::ESRCH) {
        Ok(())
    } else {
        Err(error)
    }
}

/// How a process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ExitInfo {
    /// The process's own code, or 128+N for signal N.
    pub(crate) code: i32,
    /// The killing signal's name.
    pub(crate) signal: Option<String>,
}

impl ExitInfo {
    pub(crate) fn exited(code: i32) -> ExitInfo {
        ExitInfo { code, signal: None }
    }

    pub(crate) fn killed(signal: libc::c_int) -> ExitInfo {
        ExitInfo { code: 128 + signal, signal: Some(signal_name(signal)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names() {
        assert_eq!(Signal::parse("SIGINT"), Ok(Signal(libc::SIGINT)));
        assert_eq!(Signal::parse("interrupt"), Ok(Signal(libc::SIGINT)));
        assert_eq!(Signal::parse("term"), Ok(Signal(libc::SIGTERM)));
        assert_eq!(Signal::parse("SIGUSR2"), Ok(Signal(libc::SIGUSR2)));
        let err = Signal::parse("SIGNOPE").unwrap_err();
        assert!(err.starts_with(
            "unknown signal \"SIGNOPE\": expected interrupt or one of SIGHUP, SIGINT,"
        ));
    }

    #[test]
    fn exit_info_of_signals() {
        assert_eq!(
            ExitInfo::killed(libc::SIGKILL),
            ExitInfo { code: 137, signal: Some("SIGKILL".into()) }
        );
        assert_eq!(signal_name(libc::SIGINT), "SIGINT");
        assert_eq!(signal_name(200), "SIG200");
    }
}
