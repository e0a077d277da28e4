//! The error of the client side: the cases callers branch on.

use std::io;
use std::time::Duration;

use crate::protocol::ErrorObject;

/// Why a client call, a process handle or the launcher failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The connection to the server is gone (closed, crashed, or shut down).
    #[error("connection to exec-server closed")]
    Closed,
    /// The connection dropped and its session could not be resumed (the ttl
    /// passed, the server restarted): what ran in it is gone.
    #[error("exec-server session lost: {0}")]
    SessionLost(String),
    /// The server answered with an error object (code, message, data).
    #[error("exec-server error {}: {}", .0.code, .0.message)]
    Rpc(ErrorObject),
    /// Local I/O failed, such as spawning the server.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The request cannot be put on the wire (a path that is not UTF-8, say).
    #[error("cannot encode the request: {0}")]
    Encode(String),
    /// The server sent something that does not fit the protocol.
    #[error("protocol violation: {0}")]
    Protocol(String),
    /// The container engine's program is not installed (`docker`, `podman`, `kubectl`).
    #[error("{engine} is not installed here: cannot start {program}: {source}")]
    EngineMissing {
        /// The engine.
        engine: String,
        /// The program tried.
        program: String,
        /// The OS's answer.
        #[source]
        source: io::Error,
    },
    /// The container (or pod) is not running, or does not exist.
    #[error("the container {target} is not running ({engine} said: {stderr})")]
    ContainerNotRunning {
        /// The engine.
        engine: String,
        /// The container or pod named.
        target: String,
        /// What the engine wrote on stderr.
        stderr: String,
    },
    /// The server could not be installed: the directory was refused (a
    /// read-only root file system, say).
    #[error("cannot install exec-server into {path} (read-only, or not the launching user's?); give another directory with install_dir(..) ({stderr})")]
    InstallRefused {
        /// The directory tried.
        path: String,
        /// What the remote side wrote on stderr.
        stderr: String,
    },
    /// The server is missing on the other side, which runs another
    /// architecture than this machine: this binary cannot be installed there.
    #[error("exec-server is not installed on the remote, which is `{remote}`; this machine is `{local}`, so its binary cannot be installed there ({stderr})")]
    ArchitectureMismatch {
        /// `uname -sm` there.
        remote: String,
        /// `uname -sm` here.
        local: String,
        /// What the remote side wrote on stderr.
        stderr: String,
    },
    /// A deadline passed.
    #[error("timed out after {timeout:?} waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: &'static str,
        /// How long.
        timeout: Duration,
    },
}

impl Error {
    /// The error object, when the server refused the request.
    pub fn rpc(&self) -> Option<&ErrorObject> {
        match self {
            Error::Rpc(object) => Some(object),
            _ => None,
        }
    }

    /// The Part B I/O error kind (`notFound`, `permissionDenied`, ...) of an fs error.
    pub fn io_kind(&self) -> Option<&str> {
        self.rpc()?.data.as_ref()?.get("kind")?.as_str()
    }

    /// True for an fs error of kind `notFound`.
    pub fn is_not_found(&self) -> bool {
        self.io_kind() == Some("notFound")
    }

    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Error {
        Error::Io { context: context.into(), source }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kinds_are_read_from_error_data() {
        let error = Error::Rpc(
            ErrorObject::internal("cannot read /x: gone")
                .with_data(json!({"kind": "notFound", "path": "/x"})),
        );
        assert!(error.is_not_found());
        assert_eq!(error.to_string(), "exec-server error -32603: cannot read /x: gone");
        assert_eq!(Error::Closed.io_kind(), None);
        assert_eq!(
            Error::Timeout { what: "initialize", timeout: Duration::from_secs(1) }.to_string(),
            "timed out after 1s waiting for initialize"
        );
    }
}
